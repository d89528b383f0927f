"""Constant folding against ExecuTorch's const-prop, over sizes: DeBERTa-v2 (relative positions
projected by the key weights and repeated over the batch) and DeBERTa at each hidden size, token count,
padded batch and position-bucket count, compiled by devplan with `--fold auto` (the policy it
kept: column kept), `local`, `all` and `none`, and lowered by ExecuTorch with const-prop
(`do_quant_fusion_and_const_prop=True`).

    python benchmarks/fold_sweep.py [--models deberta_v2,deberta] [--hidden 32,128] [--tokens 8,64] [--batch 1,2] [--buckets 16,64] [--quick] [--json]

Each configuration is exported once (2 layers, 2 heads, transformers' DebertaV2Model, or
DebertaModel with --models deberta, whose buckets are its max_relative_positions, random weights; a batch of 2 pads its second sequence, as a served batch does). Per policy:
the planned arena (non-constant bytes) and arena plus constant bytes; `auto <= ET` and
`local <= ET`: the arena at most const-prop's; `auto <= none` and `local <= none`: arena plus
constants at most not folding's. Below the table: how many configurations meet each."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import devplan  # noqa: E402
from benchmarks.harness import table  # noqa: E402
from testbed.executorch import executorch_pte, planned_bytes  # noqa: E402
from testbed.hf_models import deberta, deberta_v2  # noqa: E402

POLICIES = ("auto", "local", "all", "none")
HEADERS = (
    "model",
    "hidden",
    "tokens",
    "batch",
    "buckets",
    "kept",
    "ET",
    "ET total",
    *(f"{p}{s}" for p in POLICIES for s in ("", " total")),
)
CHECKS = ("auto <= ET", "auto <= none", "local <= ET", "local <= none")


MODELS = {"deberta_v2": deberta_v2, "deberta": deberta}


def exported(model: str, hidden: int, tokens: int, batch: int, buckets: int) -> torch.export.ExportedProgram:
    module, args, kwargs = MODELS[model](hidden, tokens, batch, buckets)
    with torch.no_grad():
        return torch.export.export(module, args, kwargs, strict=False)


def measure(model: str, hidden: int, tokens: int, batch: int, buckets: int) -> dict:
    row: dict = {"model": model, "hidden": hidden, "tokens": tokens, "batch": batch, "buckets": buckets}
    theirs = executorch_pte(exported(model, hidden, tokens, batch, buckets), const_prop=True)
    row["ET"] = planned_bytes(theirs)
    row["ET total"] = row["ET"] + devplan.inspect(theirs)["file"]["constant_bytes"]
    for policy in POLICIES:  # a fresh export each: compiling edits the graph it is given
        result = devplan.compile(exported(model, hidden, tokens, batch, buckets), fold=policy)
        row[policy] = planned_bytes(result.data)
        row[f"{policy} total"] = row[policy] + result.constant_bytes
        if policy == "auto":
            row["kept"] = next(c["policy"] for c in result.summary()["folding"]["choices"] if c["chosen"])
    for policy in ("auto", "local"):
        row[f"{policy} <= ET"] = row[policy] <= row["ET"]
        row[f"{policy} <= none"] = row[f"{policy} total"] <= row["none total"]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sizes = lambda text: [int(n) for n in text.split(",")]  # noqa: E731
    parser.add_argument(
        "--models", type=lambda text: text.split(","), default=["deberta_v2"], help="deberta_v2 and/or deberta"
    )
    parser.add_argument("--hidden", type=sizes, default=[32, 128], help="hidden sizes (default 32,128)")
    parser.add_argument("--tokens", type=sizes, default=[8, 64], help="tokens per sequence (default 8,64)")
    parser.add_argument("--batch", type=sizes, default=[1, 2], help="batch sizes; 2 pads its second (default 1,2)")
    parser.add_argument("--buckets", type=sizes, default=[16, 64], help="position buckets (default 16,64)")
    parser.add_argument(
        "--quick", action="store_true", help="one configuration: hidden 32, 8 tokens, batch 2, 16 buckets"
    )
    parser.add_argument("--json", action="store_true", help="print the rows as one JSON document")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown:
        parser.error(f"--models {unknown[0]}: use {' or '.join(MODELS)}")
    grid = (
        [("deberta_v2", 32, 8, 2, 16)]
        if args.quick
        else itertools.product(args.models, args.hidden, args.tokens, args.batch, args.buckets)
    )
    rows = [measure(*config) for config in grid]
    met = {check: sum(row[check] for row in rows) for check in CHECKS}
    if args.json:
        print(json.dumps({"rows": rows, "met": met}, indent=2))
        return 0
    print("planned arena and arena + constants (bytes) of devplan's --fold policies and ExecuTorch's const-prop")
    print(table(HEADERS, [[row[key] for key in HEADERS] for row in rows]))
    print("\n" + "; ".join(f"{check}: {count} of {len(rows)}" for check, count in met.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
