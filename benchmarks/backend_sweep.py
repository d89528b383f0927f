"""A backend never makes a model fail (issue 54, point 5): every model of the transformers
corpus, its mixture-of-experts decoders and the held-out MoE LLMs (gpt-oss, DeepSeek-V3),
compiled by devplan without a backend and with `--backend xnnpack`, the XNNPACK program run on
ExecuTorch's runtime and compared with eager.

    python benchmarks/backend_sweep.py [--models gpt2,gpt_oss] [--mode no_grad] [--json]

Each tiny random-weight model (testbed/hf_models.py, testbed/held_out_llms.py) is exported
as the corpus's tests export it: under torch.no_grad() (--mode no_grad, the default), in grad
mode (grad: the rotary embeddings' no_grad regions stay in the graph), or by TorchDynamo
(strict_no_grad); an export torch refuses is a row of its own. Columns: whether devplan compiles it portable and with
XNNPACK (else the error's first line, below the table), the XNNPACK delegates in the program,
the ops XNNPACK refused that stayed on portable kernels (the summary's fallbacks), the largest
absolute difference from eager over the outputs, and whether they match at rtol=atol=1e-4.
A model that compiles portable and not with XNNPACK, or does not match, is marked FAIL; the
script then exits 1."""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch.utils import _pytree as pytree  # noqa: E402

import devplan  # noqa: E402
from benchmarks.harness import choose, table  # noqa: E402
from devplan.errors import first_line  # noqa: E402
from testbed.held_out_llms import HELD_OUT  # noqa: E402
from testbed.hf_models import FAMILIES, MOE_FAMILIES  # noqa: E402
from testbed.models import eager_runs, run_executorch  # noqa: E402

MODELS = {**FAMILIES, **MOE_FAMILIES, **HELD_OUT}
HEADERS = ("model", "portable", "xnnpack", "delegates", "kept portable", "max abs diff", "xnnpack s", "")
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}
MODES = {"no_grad": (False, False), "grad": (False, True), "strict_no_grad": (True, False)}  # (strict, grad)


def _compiled(ep: torch.export.ExportedProgram, **options) -> tuple[devplan.compiler.CompileResult | None, str]:
    try:
        return devplan.compile(copy.deepcopy(ep), **options), ""
    except Exception as error:  # devplan's refusal, which the table reports
        return None, first_line(error)


def measure(name: str, mode: str = "no_grad") -> dict:
    module, args, kwargs = MODELS[name]()
    strict, grad = MODES[mode]
    try:
        with torch.set_grad_enabled(grad):
            ep = torch.export.export(module, args, kwargs, strict=strict)
    except Exception as error:  # torch.export's refusal, not devplan's
        return {"model": name, "portable": False, "xnnpack": False, "errors": [f"torch.export: {first_line(error)}"]}
    (want,) = eager_runs(module, [(args, kwargs)])
    portable, portable_error = _compiled(ep)
    began = time.perf_counter()
    xnnpack, xnnpack_error = _compiled(ep, backends=["xnnpack"])
    row: dict = {
        "model": name,
        "portable": portable is not None,
        "xnnpack": xnnpack is not None,
        "xnnpack_seconds": round(time.perf_counter() - began, 1),
        "errors": [e for e in (portable_error and f"portable: {portable_error}", xnnpack_error) if e],
    }
    if xnnpack is None:
        return row
    (method,) = [m for m in xnnpack.summary()["methods"] if m["name"] == "forward"]
    row["delegates"] = len(method["delegates"])
    row["kept_portable"] = sorted({op for f in method["fallbacks"] for op in f["ops"]})
    try:
        (got,) = run_executorch(xnnpack.data, pytree.tree_leaves((args, kwargs)))
    except Exception as error:  # ExecuTorch's runtime refused the program
        row["errors"].append(f"executorch's runtime: {first_line(error)}")
        return row
    pairs = [(g, w) for g, w in zip(got, want, strict=True) if isinstance(w, torch.Tensor)]
    row["max_abs_diff"] = max(((g.double() - w.double()).abs().max().item() for g, w in pairs), default=0.0)
    row["match"] = all(g.shape == w.shape and torch.allclose(g, w, **TOLERANCE) for g, w in pairs)
    return row


def _failed(row: dict) -> bool:
    return (row["portable"] and not row["xnnpack"]) or (row["xnnpack"] and not row.get("match"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help=f"comma-separated models (default: all of {', '.join(MODELS)})")
    parser.add_argument("--mode", choices=list(MODES), default="no_grad", help="how each model is exported")
    parser.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    args = parser.parse_args(argv)
    rows = []
    for name in choose(args.models, list(MODELS), list(MODELS)):
        rows.append(measure(name, args.mode))
        print(f"{name}: done", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps({"rows": rows}, indent=2))
    else:
        print(
            table(
                HEADERS,
                [
                    (
                        r["model"],
                        "yes" if r["portable"] else "no",
                        "yes" if r["xnnpack"] else "no",
                        r.get("delegates", "-"),
                        ", ".join(r.get("kept_portable", ())) or "-",
                        f"{r['max_abs_diff']:.2g}" if "max_abs_diff" in r else "-",
                        f"{r['xnnpack_seconds']:.1f}" if "xnnpack_seconds" in r else "-",
                        "FAIL" if _failed(r) else "",
                    )
                    for r in rows
                ],
            )
        )
        for r in rows:
            for error in r["errors"]:
                print(f"{r['model']}: {error}")
    return 1 if any(_failed(r) for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
