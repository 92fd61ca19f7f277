"""TASO ``.model`` files: the shipped files as TENSAT loads them, and every malformed-file case."""

from __future__ import annotations

from collections import Counter
from functools import cache
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from relsat.errors import ModelFormatError
from relsat.graph.graph import Graph
from relsat.graph.ops import same_padding
from relsat.models import tensat_files
from relsat.models.taso_file import BATCHNORM_EPSILON, load_model, parse_model

# --- helpers ----------------------------------------------------------------------------------


def _text(*records: tuple[object, object, str, str]) -> str:
    """A ``.model`` text from (guid, type, deps, params) records."""
    return "".join(f"{g}\n{t}\n{d}\n{p}\n" for g, t, d, p in records)


IMG = (100, 0, "10:0", "1,4,8,8")  # an input [1,4,8,8]


def _raw(filename: str) -> list[tuple[int, int, list[str], list[int]]]:
    """A shipped file's records, read naively: (guid, type, deps, params)."""
    text = resources.files("relsat.models").joinpath("data", filename).read_text("ascii")
    lines = text.split("\n")[:-1]
    return [
        (
            int(lines[i]),
            int(lines[i + 1]),
            lines[i + 2].split(","),
            [int(p) for p in lines[i + 3].split(",")],
        )
        for i in range(0, len(lines), 4)
    ]


@cache
def _model(name: str) -> Graph:
    loaders = {
        "squeezenet": tensat_files.squeezenet,
        "vgg": tensat_files.vgg19,
        "inceptionv3": tensat_files.inceptionv3,
        "mobilenetv2": tensat_files.mobilenetv2,
        "bts": tensat_files.bts,
    }
    return loaders[name]()


def _error(text: str, **kwargs: object) -> ModelFormatError:
    with pytest.raises(ModelFormatError) as info:
        parse_model(text, path="m.model", **kwargs)  # type: ignore[arg-type]
    assert info.value.path == "m.model"
    assert str(info.value).startswith(f"m.model:{info.value.line}: ")
    return info.value


# --- the shipped files (FORMAT.md §1.5, MODELS.md §4.5–4.7) -----------------------------------

EXPECTED = {
    # file: (op counts after restricting to the output, weights reached, weights in file, outputs)
    "squeezenet": (
        {
            "conv2d": 26,
            "relu": 26,
            "poolmax": 3,
            "concat": 8,
            "dropout": 1,
            "poolavg": 1,
            "reshape": 1,
        },
        26,
        57,
        [(1, 1000)],
    ),
    "vgg": (
        {
            "conv2d": 16,
            "relu": 18,
            "poolmax": 5,
            "matmul": 3,
            "transpose": 3,
            "reshape": 3,
            "dropout": 2,
        },
        19,
        43,
        [(1, 1000)],
    ),
    "inceptionv3": (
        {"conv2d": 94, "poolavg": 9, "poolmax": 5, "concat": 30},
        94,
        108,
        [(1, 2048, 1, 1)],
    ),
    "mobilenetv2": (
        {"conv2d": 54, "batchnorm": 53, "relu": 36, "ewadd": 10, "poolavg": 1, "reshape": 1},
        266,
        268,
        [(1, 1000)],
    ),
    "bts": ({"matmul": 48, "reshape": 32, "transpose": 32, "relu": 1}, 32, 32, [(64, 1024)] * 9),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shipped_file_counts(name: str) -> None:
    ops, reached, in_file, outputs = EXPECTED[name]
    g = _model(name)
    assert dict(g.op_counts()) == ops
    assert len(g.weights) == reached
    assert sum(1 for _, t, _, _ in _raw(f"{name}.model") if t == 1) == in_file
    assert g.output_shapes == outputs
    assert [n.name for n in g.inputs] == ["input_0"]


def test_file_totals() -> None:
    assert [sum(_model(m).op_counts().values()) for m in ("vgg", "squeezenet", "inceptionv3")] == [
        50,
        66,
        138,
    ]
    assert len(_raw("vgg.model")) == 94 and len(_raw("inceptionv3.model")) == 247


def test_weight_names_count_every_weight_in_file_order() -> None:
    """``w_<k>`` counts all weights, so the unused biases leave gaps (SqueezeNet: w_0, w_2, …)."""
    names = [n.name for n in _model("squeezenet").weights]
    assert names[:3] == ["w_0", "w_2", "w_4"]
    assert len(set(names)) == len(names)


def test_inception_concats_convs_and_pools() -> None:
    g = _model("inceptionv3")
    arity = Counter(len(n.inputs) for n in g.nodes if n.op == "concat")
    assert arity == {2: 27, 3: 1, 4: 2}
    assert {n.params["activation"] for n in g.nodes if n.op == "conv2d"} == {"RELU"}
    assert {n.params["activation"] for n in g.nodes if n.op in ("poolmax", "poolavg")} == {"NONE"}
    # The file sets the ReLU flag on the 7 avgpools of the A and C blocks; TENSAT drops it.
    assert sum(1 for _, t, _, p in _raw("inceptionv3.model") if t == 7 and p[10] == 2) == 7


def test_inception_block_b_keeps_listed_order() -> None:
    """Block B's outer concat is concat(avgpool 3×3/2, concat(b1, b2)), as the file lists it."""
    g = _model("inceptionv3")
    outer = [
        n
        for n in g.nodes
        if n.op == "concat" and len(n.inputs) == 2 and g.node(n.inputs[0]).op == "poolavg"
    ]
    assert len(outer) == 1
    pool, inner = (g.node(r) for r in outer[0].inputs)
    assert pool.params["stride"] == (2, 2) and inner.op == "concat"
    assert outer[0].shape == (1, 768, 17, 17)


def test_conv_dependencies_are_data_then_weight() -> None:
    for name in ("squeezenet", "vgg", "inceptionv3", "mobilenetv2"):
        g = _model(name)
        assert all(g.node(n.inputs[1]).op == "weight" for n in g.nodes if n.op == "conv2d")


@pytest.mark.parametrize("name", ["squeezenet", "vgg", "inceptionv3", "mobilenetv2"])
def test_declared_same_padding_matches_same_padding(name: str) -> None:
    """TASO's own pad_h/pad_w for SAME convs and pools validate relsat.graph.ops.same_padding."""
    checked = 0
    for _, op_type, _, p in _raw(f"{name}.model"):
        if op_type == 3:
            h, w, (kh, kw), (sh, sw), padding, pads = p[2], p[3], p[6:8], p[8:10], p[10], p[12:14]
        elif op_type in (6, 7):
            h, w, (kh, kw), (sh, sw), padding, pads = p[2], p[3], p[5:7], p[7:9], p[9], p[11:13]
        else:
            continue
        expected = [same_padding(h, kh, sh), same_padding(w, kw, sw)] if padding == 0 else [0, 0]
        assert pads == expected, (name, p)
        checked += 1
    assert checked > 0


def test_bts_last_record_only() -> None:
    """With TENSAT's rule (the last record), bts.model keeps only the last layer's slice."""
    g = tensat_files.load_file("bts.model")
    assert len(g.outputs) == 1 and sum(g.op_counts().values()) < 113


def test_final_newline_optional_and_crlf_accepted() -> None:
    text = _text(IMG, (101, 8, "100:0", "1,4,8,8"))
    assert parse_model(text[:-1]) == parse_model(text) == parse_model(text.replace("\n", "\r\n"))


def test_load_model_from_path(tmp_path: Path) -> None:
    path = tmp_path / "tiny.model"
    path.write_text(_text(IMG, (101, 8, "100:0", "1,4,8,8")))
    g = load_model(path)
    assert g.op_counts() == {"relu": 1} and g.output_shapes == [(1, 4, 8, 8)]


# --- loading rules on small texts -------------------------------------------------------------


def test_listed_order_even_when_weight_guid_is_smaller() -> None:
    g = parse_model(
        _text(
            (90, 1, "11:0", "6,4,3,3"), IMG, (101, 3, "100:0,90:0", "1,4,8,8,6,4,3,3,1,1,0,2,1,1")
        )
    )
    conv = g.node(g.outputs[0])
    assert [g.node(r).op for r in conv.inputs] == ["input", "weight"]
    assert conv.params == {"stride": (1, 1), "padding": "SAME", "activation": "RELU"}
    assert conv.shape == (1, 6, 8, 8)


def test_pool_drops_activation_and_kernel_dependency() -> None:
    g = parse_model(
        _text(
            IMG, (101, 1, "11:0", "4,1,2,2"), (102, 6, "100:0,101:0", "1,4,8,8,6,2,2,2,2,1,2,0,0")
        )
    )
    pool = g.node(g.outputs[0])
    assert pool.op == "poolmax" and pool.params["activation"] == "NONE"
    assert pool.shape == (1, 4, 4, 4) and len(pool.inputs) == 1
    assert g.weights == ()  # the kernel weight is not reached


def test_transpose_layouts() -> None:
    base = [(100, 0, "10:0", "2,3,4")]
    new = parse_model(_text(*base, (101, 15, "100:0", "3,1,0,2,1")))
    old = parse_model(_text(*base, (101, 15, "100:0", "1,0,2,0")))
    assert new.output_shapes == old.output_shapes == [(3, 2, 4)]
    assert new.node(new.outputs[0]).params["shuffle"] is True
    assert old.node(old.outputs[0]).params["shuffle"] is False


def test_reshape_ignores_second_dependency_and_matmul() -> None:
    g = parse_model(
        _text(
            (100, 0, "10:0", "2,6"),
            (101, 1, "11:0", "2"),
            (102, 14, "100:0,101:0", "3,4"),
            (103, 1, "11:0", "4,5"),
            (104, 18, "102:0,103:0", "2,2"),
        )
    )
    assert g.output_shapes == [(3, 5)] and g.node(g.outputs[0]).params["activation"] == "RELU"
    assert [n.name for n in g.weights] == ["w_1"]


def test_batchnorm_ewmul_and_sinks() -> None:
    stats = [(101 + i, 1, "11:0", "4") for i in range(4)]
    text = _text(
        IMG,
        *stats,
        (105, 11, "100:0,101:0,102:0,103:0,104:0", "1,4,8,8"),
        (106, 9, "105:0", "1,4,8,8"),
        (107, 10, "105:0", "1,4,8,8"),
        (108, 17, "106:0,105:0", "1,4,8,8"),
    )
    last = parse_model(text)
    assert last.op_counts() == {"batchnorm": 1, "sigmoid": 1, "ewmul": 1}
    bn = next(n for n in last.nodes if n.op == "batchnorm")
    assert BATCHNORM_EPSILON == 1e-5
    assert bn.params["epsilon"] == float(np.float32(BATCHNORM_EPSILON))  # a float32 parameter
    sinks = parse_model(text, outputs="sinks")
    assert [sinks.node(r).op for r in sinks.outputs] == ["tanh", "ewmul"]


def test_outputs_argument_checked() -> None:
    with pytest.raises(ValueError, match="outputs"):
        parse_model(_text(IMG), outputs="first")  # type: ignore[arg-type]


# --- malformed files: error type, line and reason -------------------------------------------

RELU = (101, 8, "100:0", "1,4,8,8")
CONV_W = (101, 1, "11:0", "6,4,3,3")
CONV = "1,4,8,8,6,4,3,3,1,1,0,0,1,1"


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        pytest.param("", 1, "empty file", id="empty"),
        pytest.param("\n\n", 1, "empty file", id="blank"),
        pytest.param(_text(IMG) + "101\n8\n", 5, "not a multiple of 4", id="line-count"),
        pytest.param(_text(IMG) + "101\n", 5, "line 5 is incomplete", id="trailing-line"),
        pytest.param(_text(IMG) + "\n", 5, "5 lines is not a multiple of 4", id="blank-line"),
        pytest.param(
            _text(("x1", 0, "10:0", "1,4")), 1, "guid 'x1' is not an integer", id="guid-not-int"
        ),
        pytest.param(
            _text(IMG, ("101", "relu", "100:0", "1")), 6, "op type 'relu'", id="type-not-int"
        ),
        pytest.param(
            _text(IMG, (101, 8, "100", "1,4,8,8")), 7, "not <guid>:<index>", id="dep-syntax"
        ),
        pytest.param(
            _text(IMG, (101, 8, "a:0", "1,4,8,8")), 7, "dependency guid 'a'", id="dep-not-int"
        ),
        pytest.param(
            _text(IMG, (101, 8, "100:0", "1,4,8.5,8")), 8, "parameter '8.5'", id="param-not-int"
        ),
        pytest.param(
            _text(IMG, (101, 8, "100:0", "")), 8, "parameter '' is not an integer", id="param-empty"
        ),
        pytest.param(
            _text(IMG, (101, 99, "100:0", "1")), 6, "unknown op type 99", id="unknown-type"
        ),
        pytest.param(
            _text(IMG, (101, 13, "100:0", "1")), 6, "13 (Split) is not supported", id="split"
        ),
        pytest.param(
            _text(IMG, (101, 20, "100:0", "1")), 6, "20 (Enlarge) is not supported", id="enlarge"
        ),
        pytest.param(
            _text(IMG, (101, 21, "100:0", "1")),
            6,
            "21 (MergeGConv) is not supported",
            id="merge-gconv",
        ),
        pytest.param(
            _text(IMG, (101, 8, "102:0", "1,4,8,8"), (102, 8, "100:0", "1,4,8,8")),
            7,
            "guid 102 is defined later, at line 9 (forward reference)",
            id="forward",
        ),
        pytest.param(
            _text(IMG, (101, 8, "555:0", "1,4,8,8")), 7, "guid 555 is not defined", id="missing"
        ),
        pytest.param(
            _text(IMG, (101, 8, "101:0", "1,4,8,8")),
            7,
            "dependency guid 101 is the record itself",
            id="self-reference",
        ),
        pytest.param(
            _text(IMG, (101, 8, "100:1", "1,4,8,8")),
            7,
            "source index 1 is not 0",
            id="source-index",
        ),
        pytest.param(
            _text(IMG, (100, 8, "100:0", "1,4,8,8")),
            5,
            "duplicate guid 100 (first defined at line 1)",
            id="duplicate",
        ),
        pytest.param(_text((10, 0, "10:0", "1,4")), 1, "guid 10 is reserved", id="reserved-guid"),
        pytest.param(
            _text(IMG, (101, 8, "10:0", "1,4,8,8")), 7, "reserved source", id="op-reads-source"
        ),
        pytest.param(
            _text((100, 0, "11:0", "1,4")), 3, "Input must depend on 10:0", id="input-source"
        ),
        pytest.param(
            _text(IMG, CONV_W, (102, 3, "100:0", CONV)),
            11,
            "Conv2D takes 2 dependencies, got 1",
            id="dep-count",
        ),
        pytest.param(
            _text(IMG, (101, 12, "100:0", "1")),
            7,
            "Concat takes 2+ dependencies",
            id="concat-arity",
        ),
        pytest.param(
            _text(IMG, CONV_W, (102, 3, "100:0,101:0", CONV[:-2])),
            12,
            "Conv2D takes 14 parameters, got 13",
            id="conv-param-count",
        ),
        pytest.param(
            _text(IMG, (101, 6, "100:0", "1,4,8,8,6,2,2,2,2,1,0,0")),
            8,
            "MaxPool2D takes 13 parameters, got 12",
            id="pool-param-count",
        ),
        pytest.param(
            _text(IMG, (101, 12, "100:0,100:0", "1,1")),
            8,
            "Concat takes 1 parameters, got 2",
            id="concat-param-count",
        ),
        pytest.param(
            _text(IMG, (101, 18, "100:0,100:0", "0")),
            8,
            "MatMul takes 2 parameters, got 1",
            id="matmul-param-count",
        ),
        pytest.param(
            _text((100, 0, "10:0", "1,0,4")),
            4,
            "input dims [1, 0, 4] must be positive",
            id="zero-dim",
        ),
        pytest.param(
            _text(IMG, (101, 1, "11:0", "-3")),
            8,
            "weight dims [-3] must be positive",
            id="negative-dim",
        ),
        pytest.param(
            _text(IMG, (101, 14, "100:0", "16,-16")),
            8,
            "reshape output dims [16, -16] must be positive",
            id="reshape-negative",
        ),
        pytest.param(
            _text(IMG, CONV_W, (102, 3, "100:0,101:0", "1,4,8,9" + CONV[7:])),
            12,
            "declares input dims [1, 4, 8, 9], but its input has shape [1, 4, 8, 8]",
            id="conv-input-dims",
        ),
        pytest.param(
            _text(IMG, CONV_W, (102, 3, "101:0,100:0", CONV)),
            12,
            "declares input dims [1, 4, 8, 8], but its input has shape [6, 4, 3, 3]",
            id="conv-swapped-deps",
        ),
        pytest.param(
            _text(IMG, CONV_W, (102, 3, "100:0,101:0", "1,4,8,8,6,4,5,5,1,1,0,0,1,1")),
            12,
            "declares weight dims [6, 4, 5, 5], but its weight has shape [6, 4, 3, 3]",
            id="conv-weight-dims",
        ),
        pytest.param(
            _text(IMG, (101, 7, "100:0", "1,4,4,8,7,2,2,2,2,1,0,0,0")),
            8,
            "declares input dims [1, 4, 4, 8]",
            id="pool-input-dims",
        ),
        pytest.param(
            _text(IMG, (101, 16, "100:0,100:0", "1,4,8")),
            8,
            "EW add declares input dims [1, 4, 8]",
            id="ewadd-dims",
        ),
        pytest.param(
            _text(IMG, (101, 8, "100:0", "1,4,8,7")),
            8,
            "ReLU declares input dims [1, 4, 8, 7]",
            id="relu-dims",
        ),
        pytest.param(
            _text(IMG, (101, 6, "100:0", "1,4,8,8,7,2,2,2,2,1,0,0,0")),
            8,
            "pool type parameter 7 differs from the op type 6",
            id="pool-type",
        ),
        pytest.param(
            _text(IMG, CONV_W, (102, 3, "100:0,101:0", "1,4,8,8,6,4,3,3,1,1,2,0,1,1")),
            12,
            "padding code 2 (parameter 10) is not one of 0 SAME, 1 VALID",
            id="padding-code",
        ),
        pytest.param(
            _text(IMG, CONV_W, (102, 3, "100:0,101:0", "1,4,8,8,6,4,3,3,1,1,0,4,1,1")),
            12,
            "activation code 4 (parameter 11)",
            id="activation-code",
        ),
        pytest.param(
            _text(IMG, (101, 6, "100:0", "1,4,8,8,6,2,2,2,2,1,9,0,0")),
            8,
            "activation code 9 (parameter 10)",
            id="pool-activation-code",
        ),
        pytest.param(
            _text((100, 0, "10:0", "2,3"), (101, 15, "100:0", "2,1,0,1,1")),
            8,
            "takes 4 parameters (ndim, perm, shuffle) or 3 (perm, shuffle), got 5",
            id="transpose-count",
        ),
        pytest.param(
            _text((100, 0, "10:0", "2,3"), (101, 15, "100:0", "3,1,0,1")),
            8,
            "Transpose declares ndim 3",
            id="transpose-ndim",
        ),
        pytest.param(
            _text((100, 0, "10:0", "2,3"), (101, 15, "100:0", "1,0,2")),
            8,
            "shuffle flag 2 is not 0 or 1",
            id="transpose-shuffle",
        ),
        pytest.param(
            _text((100, 0, "10:0", "2,3"), (101, 18, "100:0,100:0", "0,3")),
            8,
            "MatMul declares output rank 3",
            id="matmul-rank",
        ),
    ],
)
def test_malformed(text: str, line: int, reason: str) -> None:
    err = _error(text)
    assert err.line == line
    assert reason in err.reason


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param(
            _text(
                (100, 0, "10:0", "2,3"), (101, 1, "11:0", "4,5"), (102, 18, "100:0,101:0", "0,2")
            ),
            "MatMul record 102: matmul inner dims differ (3 vs 4) (input shapes [2,3], [4,5])",
            id="matmul-inner",
        ),
        pytest.param(
            _text(IMG, CONV_W, (102, 3, "100:0,101:0", "1,4,8,8,6,4,3,3,0,1,0,0,1,1")),
            "Conv2D record 102: parameter stride=(0, 1) must be 2 integers >= 1",
            id="conv-stride",
        ),
        pytest.param(
            _text(IMG, (101, 0, "10:0", "1,5,8,8"), (102, 12, "100:0,101:0", "0")),
            "concat inputs differ outside axis 0",
            id="concat-shapes",
        ),
        pytest.param(
            _text(IMG, (101, 14, "100:0", "1,4,8,9")),
            "cannot reshape 256 elements to [1, 4, 8, 9]",
            id="reshape-size",
        ),
        pytest.param(
            _text((100, 0, "10:0", "2,3"), (101, 15, "100:0", "2,0,0,1")),
            "perm [0, 0] is not a permutation",
            id="transpose-perm",
        ),
    ],
)
def test_builder_errors_are_wrapped_with_the_params_line(text: str, reason: str) -> None:
    err = _error(text)
    assert err.line == len(text.splitlines())  # the last record's parameter line
    assert reason in err.reason


def test_sinks_need_an_operator() -> None:
    err = _error(_text(IMG), outputs="sinks")
    assert err.line == 1 and "no operator records" in err.reason


def test_load_model_errors_name_the_path(tmp_path: Path) -> None:
    path = tmp_path / "bad.model"
    path.write_text(_text(IMG, (101, 13, "100:0", "1")))
    with pytest.raises(ModelFormatError) as info:
        load_model(path)
    assert info.value.path == str(path) and info.value.line == 6
    assert str(info.value).startswith(f"{path}:6: ")
    path.write_bytes(_text(IMG).encode() + "101\n8\n100:0\n1,4,8,\xe9\n".encode())
    with pytest.raises(ModelFormatError) as info:
        load_model(path)
    assert info.value.line == 8 and "not ASCII" in info.value.reason
