"""GroupNorm (issue 39): tiny diffusers UNets through relsat, a baseline checkout beside this one.

    python bench/groupnorm.py [--models unet2d unet2d-cond] [--exporters legacy dynamo dynamo21]
                              [--before /path/to/main] [--rounds 300] [--threads 1]

Each model is a diffusers ``UNet2DModel`` / ``UNet2DConditionModel`` from a tiny config (random
init, nothing downloaded; 21 GroupNorms each), exported by torch's ``legacy`` exporter (opset 17),
``dynamo`` (its default opset, 20) and ``dynamo21`` (opset 21, where dynamo writes
GroupNormalization itself instead of InstanceNormalization between Reshapes). Per export:

* ``relsat optimize IN -o OUT --no-timing`` with this checkout (``after``) and with
  ``--before``'s (``before``: another branch's code, run from its folder), measured onnxruntime
  prices (the machine's cost cache), the optimized model kept whatever its latency;
* the original, a second session of it (``A/A``: what noise alone does to a ratio) and both
  outputs timed side by side (``bench/timing.py``: interleaved rounds, one thread, no spinning),
  outputs checked against the original's;
* the prices this checkout measured for the fused ``groupnorm`` and for the spelled chain
  (InstanceNormalization + Mul + Add; the Reshapes are free) at each of the model's GroupNorm
  shapes, read from the kept e-graph.

Prints the latency table and the price table; appends the latency rows to
``bench/results/groupnorm.csv``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import duckdb
from calls import cli
from common import add_exports, append_csv, log, markdown, op_types
from timing import machine, side_by_side

from relsat.graph.ops import from_f32_bits

MODELS = ("unet2d", "unet2d-cond")
EXPORTERS = {"legacy": ("legacy", None), "dynamo": ("dynamo", None), "dynamo21": ("dynamo", 21)}
#: The fused op against the chain it replaces, per GroupNorm shape of the kept e-graph.
PRICES = """
WITH c AS (
    SELECT e.*, coalesce(k.ms, 0) AS ms FROM enode e LEFT JOIN enode_cost k ON k.enode = e.id
),
gn AS (SELECT class, ms, p0 AS groups, p1 AS eps FROM c WHERE op = 'groupnorm'),
ad AS (SELECT class, ms, c0 FROM c WHERE op = 'ewadd'),
mu AS (SELECT class, ms, c0 FROM c WHERE op = 'ewmul'),
rs AS (SELECT class, c0 FROM c WHERE op = 'reshape'),
nm AS (SELECT class, ms FROM c WHERE op = 'instancenorm')
SELECT DISTINCT ec.shape, gn.groups, gn.eps, gn.ms, nm.ms, mu.ms, ad.ms
FROM gn JOIN eclass ec ON ec.id = gn.class JOIN ad ON ad.class = gn.class
JOIN mu ON mu.class = ad.c0 JOIN rs ON rs.class = mu.c0 JOIN nm ON nm.class = rs.c0
"""


def _unet2d() -> tuple[Any, list[Any], list[str]]:
    import torch
    from architectures import nonzero_biases
    from diffusers import UNet2DModel

    torch.manual_seed(0)
    unet = UNet2DModel(
        sample_size=16,
        in_channels=3,
        out_channels=3,
        layers_per_block=1,
        block_out_channels=(32, 64),
        norm_num_groups=8,
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"),
    )
    nonzero_biases(unet)  # random init leaves them at 0, trained models' are not

    class Sample(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.unet = unet

        def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            return self.unet(x, t).sample

    return Sample(), [torch.randn(1, 3, 16, 16), torch.tensor([10])], ["sample", "timestep"]


def _unet2d_cond() -> tuple[Any, list[Any], list[str]]:
    import torch
    from architectures import nonzero_biases
    from diffusers import UNet2DConditionModel

    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        sample_size=16,
        in_channels=4,
        out_channels=4,
        layers_per_block=1,
        block_out_channels=(32, 64),
        norm_num_groups=8,
        cross_attention_dim=32,
        attention_head_dim=8,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
    )
    nonzero_biases(unet)  # random init leaves them at 0, trained models' are not

    class Sample(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.unet = unet

        def forward(self, x: torch.Tensor, t: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
            return self.unet(x, t, text).sample

    example = [torch.randn(1, 4, 16, 16), torch.tensor([10]), torch.randn(1, 7, 32)]
    return Sample(), example, ["sample", "timestep", "text"]


BUILDERS = {"unet2d": _unet2d, "unet2d-cond": _unet2d_cond}


def _prices(db: Path) -> list[list[Any]]:
    """The fused and spelled prices per GroupNorm shape of a kept e-graph."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute(PRICES).fetchall()
    finally:
        con.close()
    out = []
    for shape, groups, eps, fused, norm, mul, add in sorted(rows, key=lambda r: str(r[:3])):
        chain = norm + mul + add
        ms = f"{fused:.4f}", f"{chain:.4f} ({norm:.4f} + {mul:.4f} + {add:.4f})"
        out.append(
            [str(list(shape)), groups, f"{from_f32_bits(eps):g}", *ms, f"{fused / chain:.2f}"]
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    ap.add_argument("--exporters", nargs="+", choices=list(EXPORTERS), default=list(EXPORTERS))
    ap.add_argument("--before", type=Path, help="a checkout to run as the baseline (main)")
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--list", action="store_true", help="list the models and exporters")
    add_exports(ap)
    args = ap.parse_args()
    if args.list:
        for model in MODELS:
            for exporter in EXPORTERS:
                print(f"{model}.{exporter}")
        return
    from exports import export

    folder = Path(args.exports) / "groupnorm"
    rows, prices = [], []
    for model in args.models:
        for name in args.exporters:
            exporter, opset = EXPORTERS[name]
            tag = f"{model}.{name}"
            log(f"{tag}: export")
            made = export(tag, BUILDERS[model], folder, exporter, opset=opset)
            outs = {}
            for variant, checkout in (("before", args.before), ("after", None)):
                if variant == "before" and checkout is None:
                    continue
                target = folder / f"{tag}.{variant}.onnx"
                options = ["--no-timing", "--threads", str(args.threads)]
                if variant == "after":
                    options += ["--db", str(folder / f"{tag}.duckdb"), "--overwrite"]
                log(f"{tag}: relsat optimize ({variant})")
                run = cli(made.path, target, options, checkout=checkout)
                if run.output is None:
                    log(f"{tag}: {variant} failed: {run.error or run.stdout[-500:]}")
                    continue
                outs[variant] = run.output
            log(f"{tag}: timing")
            t = side_by_side(made.path, outs, made.inputs, threads=args.threads, rounds=args.rounds)
            for variant in ("original", "A/A", *outs):
                ops = op_types(outs.get(variant, made.path))
                rows.append(
                    [
                        model,
                        name,
                        variant,
                        round(t.ms.get(variant, float("nan")), 4),
                        round(t.ratio(variant) or float("nan"), 3),
                        ops.get("GroupNormalization", 0),
                        ops.get("InstanceNormalization", 0),
                        t.checks.get(variant, ""),
                    ]
                )
            db = folder / f"{tag}.duckdb"
            if db.exists():
                prices += [[tag, *r] for r in _prices(db)]
    headers = ["model", "exporter", "variant", "ms", "ratio", "GroupNorm", "InstanceNorm", "check"]
    print(f"{machine(args.threads)}, {args.rounds} rounds\n")
    print(markdown(headers, rows))
    print()
    columns = ["export", "x", "groups", "epsilon", "fused ms", "chain ms (norm + Mul + Add)"]
    print(markdown([*columns, "fused / chain"], prices))
    append_csv("groupnorm", headers, rows)


if __name__ == "__main__":
    main()
