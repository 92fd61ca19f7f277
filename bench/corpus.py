"""The models the bench scripts run on, by name: where each ONNX file comes from.

The lists:

* :func:`real` (bench/real.py): torchvision architectures (:mod:`architectures`) and Hugging Face
  models (:mod:`hfmodels`, the default sizes) through the legacy exporter, and the seven bundled
  TENSAT graphs written with ``relsat.onnx.save`` (``tensat-<name>``);
* :func:`today` (bench/today.py, issue 23: what users export today): tiny Hugging Face BERT, GPT-2,
  ViT and a Llama-style decoder through both exporters (``<model>.dynamo``, ``<model>.legacy``);
  the model-zoo graphs shipped inside the onnx wheel (``onnx/backend/test/data/light``: opset 9,
  weights computed by ConstantOfShape; ``zoo-<name>``); timm families when timm imports
  (:data:`TIMM_NOTE` says why it usually does not);
* :func:`fusions` (bench/ort_fusions.py, issue 24): real()'s Hugging Face transformers and a
  Llama-style decoder (prefill and one decode step with past keys and values) through both
  exporters (``<model>.<exporter>``);
* :func:`dynamic` (bench/dynamic.py, issue 27): today's tiny models with dynamic axes.

An :class:`Entry`'s ``make(directory)`` returns an :class:`exports.Export` (the file, example
inputs, how it was made); torch exports are cached in ``directory`` (:func:`exports.export`).
Nothing is downloaded; every torch model is randomly initialised from a fixed seed.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exports import Export, export
from timing import random_inputs

TENSAT_PREFIX = "tensat-"
ZOO_PREFIX = "zoo-"
TIMM_NOTE = (
    "timm skipped: it does not import here (timm imports torchvision, whose wheels do not import "
    "beside the CPU torch==2.13.0 the bench pins)"
)
#: timm families tried when timm imports (random init, ``pretrained=False``).
TIMM_MODELS = ("resnet18", "mobilenetv3_small_100", "efficientnet_b0", "convnext_atto")
#: Those bench/dynamic.py exports with a dynamic batch and image size: a plain CNN and one
#: with layer norms and GELUs.
DYNAMIC_TIMM = ("resnet18", "convnext_atto")


@dataclass(frozen=True)
class Entry:
    """One model of a corpus."""

    name: str
    family: str  # tensat, torchvision, hf, onnx-zoo, timm
    exporter: str  # legacy, dynamo, relsat.onnx.save, onnx wheel
    make: Callable[[Path], Export]


# ---------------------------------------------------------------------------------------------
# sources


def _torch(
    name: str,
    build: Callable[[], tuple[Any, ...]],
    exporter: str,
    names: list[str] | None = None,
    dynamic: dict[str, dict[int, str]] | None = None,
) -> Callable[[Path], Export]:
    """``make`` for a torch builder: ``build()`` is ``(module, example)`` (names ``names``) or
    ``(module, example, names)``; ``dynamic``: the dynamic axes to export with."""

    def built() -> tuple[Any, Any, list[str]]:
        out = build()
        return out if len(out) == 3 else (*out, names or ["input"])

    return lambda directory: export(name, built, directory, exporter, dynamic)


def _tensat(model: str) -> Callable[[Path], Export]:
    def make(directory: Path) -> Export:
        from relsat import models
        from relsat import onnx as ronnx

        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{TENSAT_PREFIX}{model}.onnx"
        ronnx.save(models.load(model), path)
        return Export(path, random_inputs(path), "relsat.onnx.save")

    return make


def zoo_dir() -> Path | None:
    """The onnx wheel's ``backend/test/data/light`` folder, if there."""
    spec = importlib.util.find_spec("onnx")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "backend" / "test" / "data" / "light"
    return folder if folder.is_dir() else None


def _zoo(path: Path) -> Callable[[Path], Export]:
    # The wheel's file is used where it lies (read only); seeded random inputs.
    return lambda directory: Export(path, random_inputs(path), "onnx wheel, opset 9")


def timm_available() -> bool:
    """Does ``import timm`` work here (not only: is it installed)?"""
    if importlib.util.find_spec("timm") is None:
        return False
    try:
        import timm  # noqa: F401
    # Broad on purpose: timm fails with whatever torchvision raises on import.
    except Exception:
        return False
    return True


def _timm(model: str) -> Callable[[], tuple[Any, Any]]:
    def build() -> tuple[Any, Any]:
        import timm
        import torch
        from architectures import nonzero_biases

        torch.manual_seed(0)
        net = nonzero_biases(timm.create_model(model, pretrained=False)).eval()
        size = net.pretrained_cfg.get("input_size", (3, 224, 224))
        return net, (torch.randn(1, *size),)

    return build


# ---------------------------------------------------------------------------------------------
# the two corpora


#: bench/real.py's torch models: name → (module, builder, its keyword arguments).
REAL_TORCH: dict[str, tuple[str, str, dict[str, Any]]] = {
    **{
        name: ("architectures", name, {})
        for name in (
            "resnet50",
            "resnext50_32x4d",
            "squeezenet1_1",
            "inception_v3",
            "vgg19",
            "mobilenet_v2",
            "densenet121",
            "efficientnet_b0",
        )
    },
    "hf-bert": ("hfmodels", "bert", {}),
    "hf-gpt2": ("hfmodels", "gpt2", {}),
    "hf-distilbert": ("hfmodels", "distilbert", {}),
    "hf-vit": ("hfmodels", "vit", {}),
    "hf-convnext-tiny": ("hfmodels", "convnext", {}),
    "hf-resnet50": ("hfmodels", "resnet50", {}),
}
_TINY = {"layers": 2, "hidden": 128}
#: The tiny Llama-style decoder's decode step (bench/dynamic.py): one token after 128 cached.
DECODE_TINY = _TINY | {"heads": 4, "kv_heads": 2, "past": 128}
#: bench/today.py's Hugging Face models (each through both exporters).
TODAY_HF: dict[str, tuple[str, str, dict[str, Any]]] = {
    "bert-tiny": ("hfmodels", "bert", _TINY | {"heads": 2, "ffn": 512, "seq": 64, "vocab": 1024}),
    "gpt2-tiny": ("hfmodels", "gpt2", _TINY | {"heads": 2, "seq": 64, "vocab": 1024}),
    "vit-tiny": ("hfmodels", "vit", _TINY | {"heads": 2, "ffn": 512, "image": 64}),
    "llama-tiny": ("hfmodels", "llama", _TINY | {"heads": 4, "kv_heads": 2, "seq": 64}),
    "gptj-tiny": ("hfmodels", "gptj", _TINY | {"heads": 4, "rotary_dim": 16, "seq": 64}),
}

#: A Llama-style decoder at bench/real.py's HF sizes (4 layers, hidden 256, 4 heads), grouped-
#: query attention with 2 key/value heads, SwiGLU width 688 (~8/3 of hidden), Llama's vocabulary.
_LLAMA = {"layers": 4, "hidden": 256, "heads": 4, "kv_heads": 2, "ffn": 688, "vocab": 32000}
#: A GPT-J-style decoder at the same sizes: interleaved rotary on 32 of each head's 64 dims (GPT-J
#: 6B rotates 64 of 256), 128 tokens, GPT-2's vocabulary.
_GPTJ = {"layers": 4, "hidden": 256, "heads": 4, "rotary_dim": 32, "seq": 128, "vocab": 50400}
#: bench/ort_fusions.py's transformers (issue 24), each through both exporters: real()'s HF
#: models at their sizes, the Llama-style decoder at prefill (sequence 128) and one decode step
#: after 128 cached positions.
FUSIONS_HF: dict[str, tuple[str, str, dict[str, Any]]] = {
    "hf-bert": REAL_TORCH["hf-bert"],
    "hf-gpt2": REAL_TORCH["hf-gpt2"],
    "hf-distilbert": REAL_TORCH["hf-distilbert"],
    "hf-vit": REAL_TORCH["hf-vit"],
    "hf-llama": ("hfmodels", "llama", _LLAMA | {"seq": 128}),
    "hf-llama-decode": ("hfmodels", "llama_decode", _LLAMA | {"past": 128}),
    "hf-gptj": ("hfmodels", "gptj", _GPTJ),
    "hf-convnext-tiny": REAL_TORCH["hf-convnext-tiny"],
}


def _builder(module: str, function: str, kwargs: dict[str, Any]) -> Callable[[], Any]:
    """``module.function(**kwargs)``, the module imported when called (it imports torch)."""

    def build() -> Any:
        return getattr(importlib.import_module(module), function)(**kwargs)

    return build


def real() -> dict[str, Entry]:
    """bench/real.py's corpus: torch exports (when torch is installed), then the TENSAT graphs."""
    entries: list[Entry] = []
    if importlib.util.find_spec("torch") is not None:
        for name, (module, function, kwargs) in REAL_TORCH.items():
            family = "hf" if module == "hfmodels" else "torchvision"
            build = _builder(module, function, kwargs)
            entries.append(Entry(name, family, "legacy", _torch(name, build, "legacy")))
    from relsat import models

    for model in models.BENCHMARKS:
        entries.append(Entry(TENSAT_PREFIX + model, "tensat", "relsat.onnx.save", _tensat(model)))
    return {e.name: e for e in entries}


def files(paths: list[str]) -> dict[str, Entry]:
    """ONNX files made elsewhere (e.g. timm models exported in an environment with torchvision,
    which does not import beside the bench's pinned torch), one entry each, named by stem."""
    entries: dict[str, Entry] = {}
    for given in paths:
        path = Path(given).resolve()

        def make(_: Path, path: Path = path) -> Export:
            return Export(path, random_inputs(path), f"given file {path.name}")

        entries[path.name.removesuffix(".onnx")] = Entry(
            path.name.removesuffix(".onnx"), "file", "given", make
        )
    return entries


def today() -> dict[str, Entry]:
    """bench/today.py's corpus (issue 23): tiny HF models through both exporters (when torch
    is installed), the onnx wheel's model zoo, timm (when it imports)."""
    entries: list[Entry] = []
    if importlib.util.find_spec("torch") is not None:
        for model, (module, function, kwargs) in TODAY_HF.items():
            build = _builder(module, function, kwargs)
            for exporter in ("dynamo", "legacy"):
                name = f"{model}.{exporter}"
                entries.append(Entry(name, "hf", exporter, _torch(name, build, exporter)))
    folder = zoo_dir()
    for path in sorted(folder.glob("*.onnx")) if folder else []:
        name = ZOO_PREFIX + path.stem.removeprefix("light_")
        entries.append(Entry(name, "onnx-zoo", "onnx wheel", _zoo(path)))
    if timm_available():
        for model in TIMM_MODELS:
            for exporter in ("dynamo", "legacy"):
                name = f"timm-{model}.{exporter}"
                entries.append(Entry(name, "timm", exporter, _torch(name, _timm(model), exporter)))
    return {e.name: e for e in entries}


def fusions() -> dict[str, Entry]:
    """bench/ort_fusions.py's corpus (issue 24): :data:`FUSIONS_HF` through both exporters
    (``<model>.<exporter>``); empty without torch."""
    entries: list[Entry] = []
    if importlib.util.find_spec("torch") is None:
        return {}
    for model, (module, function, kwargs) in FUSIONS_HF.items():
        build = _builder(module, function, kwargs)
        for exporter in ("legacy", "dynamo"):
            name = f"{model}.{exporter}"
            entries.append(Entry(name, "hf", exporter, _torch(name, build, exporter)))
    return {e.name: e for e in entries}


#: The dynamic axes bench/dynamic.py exports each model with (by its first input's name).
DYNAMIC_AXES: dict[str, dict[str, dict[int, str]]] = {
    "input_ids": {
        "input_ids": {0: "batch", 1: "sequence"},
        "attention_mask": {0: "batch", 1: "sequence"},
    },
    "pixel_values": {"pixel_values": {0: "batch"}},
}
#: bench/dynamic.py's image models with a dynamic image size: batch, height and width (HF
#: ResNet with bottlenecks and ConvNeXt, tiny: one block per stage; the tiny ViT with its
#: position embeddings interpolated; priced at 128x128).
DYNAMIC_IMAGES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "vit-tiny-any-size": ("hfmodels", "vit", TODAY_HF["vit-tiny"][2] | {"any_size": True}),
    "resnet-tiny": (
        "hfmodels",
        "resnet",
        {"stem": 32, "widths": (64, 128, 256, 512), "depths": (1, 1, 1, 1), "image": 128},
    ),
    "convnext-tiny": (
        "hfmodels",
        "convnext",
        {"widths": (32, 64, 128, 256), "depths": (1, 1, 1, 1), "image": 128},
    ),
}
IMAGE_AXES = {"pixel_values": {0: "batch", 2: "height", 3: "width"}}


def decode_axes(exporter: str, layers: int) -> dict[str, dict[int, str]]:
    """A decode step's dynamic axes: the batch, the cache's length and the mask's, which spans
    the cache and the new token. dynamo spells the mask's as ``past_sequence_length + 1`` (a
    derived dim); the legacy export names it on its own, ``total_sequence_length``, as
    onnxruntime-genai's models do (the model ties it to the cache's)."""
    past = "past_sequence_length"
    total = f"{past} + 1" if exporter == "dynamo" else "total_sequence_length"
    axes = {"input_ids": {0: "batch"}, "attention_mask": {0: "batch", 1: total}}
    for i in range(layers):
        axes |= {f"past_key_{i}": {0: "batch", 2: past}, f"past_value_{i}": {0: "batch", 2: past}}
    return axes


def dynamic() -> dict[str, Entry]:
    """bench/dynamic.py's corpus (issue 27): today's tiny HF models exported with dynamic axes
    (batch and sequence; batch for ViT), :data:`DYNAMIC_IMAGES` with a dynamic batch and image
    size, the tiny Llama-style decoder's decode step with a
    dynamic cache (:func:`decode_axes`) and, when timm imports, :data:`DYNAMIC_TIMM` with a
    dynamic batch and image size, each through both exporters (``<model>.<exporter>.dyn``)."""
    entries: list[Entry] = []
    if importlib.util.find_spec("torch") is None:
        return {}
    for model, (module, function, kwargs) in TODAY_HF.items():
        build = _builder(module, function, kwargs)
        axes = DYNAMIC_AXES["pixel_values" if model.startswith("vit") else "input_ids"]
        for exporter in ("dynamo", "legacy"):
            name = f"{model}.{exporter}.dyn"
            make = _torch(name, build, exporter, dynamic=axes)
            entries.append(Entry(name, "hf", exporter, make))
    for model, (module, function, kwargs) in DYNAMIC_IMAGES.items():
        build = _builder(module, function, kwargs)
        for exporter in ("dynamo", "legacy"):
            name = f"{model}.{exporter}.dyn"
            make = _torch(name, build, exporter, dynamic=IMAGE_AXES)
            entries.append(Entry(name, "hf", exporter, make))
    decode = _builder("hfmodels", "llama_decode", DECODE_TINY)
    for exporter in ("dynamo", "legacy"):
        name = f"llama-tiny-decode.{exporter}.dyn"
        axes = decode_axes(exporter, DECODE_TINY["layers"])
        entries.append(Entry(name, "hf", exporter, _torch(name, decode, exporter, dynamic=axes)))
    for model in DYNAMIC_TIMM if timm_available() else ():
        for exporter in ("dynamo", "legacy"):
            name = f"timm-{model}.{exporter}.dyn"
            make = _torch(
                name, _timm(model), exporter, dynamic={"input": IMAGE_AXES["pixel_values"]}
            )
            entries.append(Entry(name, "timm", exporter, make))
    return {e.name: e for e in entries}


def select(corpus: dict[str, Entry], names: Iterable[str] | None) -> list[Entry]:
    """The entries ``names`` asks for, in corpus order: a name, a model without its exporter
    (``bert-tiny``: both), or a family (``hf``, ``onnx-zoo``); all when ``names`` is empty.
    Raises ``KeyError`` naming what matched nothing."""
    wanted = list(names or [])
    if not wanted:
        return list(corpus.values())

    def matches(want: str, e: Entry) -> bool:
        return want in (e.name, e.family, e.name.rsplit(".", 1)[0], e.name.split(".", 1)[0])

    unknown = [w for w in wanted if not any(matches(w, e) for e in corpus.values())]
    if unknown:
        raise KeyError(f"unknown models {unknown}; --list shows them")
    return [e for e in corpus.values() if any(matches(w, e) for w in wanted)]
