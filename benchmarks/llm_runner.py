"""ExecuTorch's LLM runner on devplan's programs against ExecuTorch's own, per example:

    python benchmarks/llm_runner.py [--dim 256] [--layers 4] [--tokens 64] [--repeats 5] [--json]
                                    [--examples EXPORT:PRECISION ...]

Four examples of a Llama with seeded random weights (testbed/llama_export.py): ExecuTorch's
export_llama pipeline (KV cache, llama::custom_sdpa and llama::update_cache) in fp32 and with
its LLM quantization (8da4w: torchao's 8-bit dynamic activations and 4-bit weights in groups of
32 in the linears, 8-bit embeddings; export_llama -X -qmode 8da4w -G 32 -E 8,0), and
transformers' ExecuTorch recipe (static cache, input_ids and cache_position) in fp32 and 8da4w
(the linears, as optimum-executorch quantizes them), and that recipe's float export quantized
by devplan (`compile --llm --quantize 8da4w`) against ExecuTorch's program of
optimum-executorch's `--qlinear 8da4w --qembedding 8w` on the same weights
(8da4w-by-devplan). --examples picks some. Per fp32
example, four programs: devplan.compile of the export (portable kernels, and with
backends=["xnnpack"]) with the same constant methods, and ExecuTorch's own lowering of it
(portable, and with XNNPACK as its LLM recipe lowers it); per 8da4w example, the two XNNPACK
programs. Each is loaded by ExecuTorch's TextLLMRunner, which greedily generates --tokens
tokens after one prompt, --repeats times; reported per program: the planned (non-constant)
bytes of forward, the file's bytes, the median decode tokens per second from the runner's own
stats, and whether the tokens equal those of ExecuTorch's first program of the example. Ratios
are devplan's / ExecuTorch's, portable to portable and XNNPACK to XNNPACK, taken in this one run,
in one Markdown table after the rows: an example's pair of programs a row. With more than one
example, each runs in a fresh process of this script."""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import devplan  # noqa: E402
from devplan import inspect  # noqa: E402
from testbed.llama_export import (  # noqa: E402
    CUSTOM_OPS,
    export_hf_llama,
    export_hf_llama_8da4w,
    export_llama,
    generate,
    word_tokenizer,
)

# an end-of-sequence id past the vocabulary: every program generates all --tokens tokens
SPECIAL = {"get_bos_id": 1, "get_eos_ids": [1 << 20]}
QUANTIZED = functools.partial(export_llama, qmode="8da4w", embedding_quantize="8,0")


def recipe_8da4w(folder: Path, *, xnnpack: bool, **size):
    """The float export of transformers' recipe, and ExecuTorch's program of optimum-executorch's
    `--qlinear 8da4w --qembedding 8w` on the same weights (always with XNNPACK)."""
    return export_hf_llama_8da4w(folder, **size)


# (export path, precision) -> (how to export it, whether a portable pair runs too)
EXAMPLES = {
    ("export_llama", "fp32"): (export_llama, True),
    ("export_llama", "8da4w"): (QUANTIZED, False),
    ("transformers_recipe", "fp32"): (export_hf_llama, True),
    ("transformers_recipe", "8da4w"): (functools.partial(export_hf_llama, qmode="8da4w"), False),
    ("transformers_recipe", "8da4w-by-devplan"): (recipe_8da4w, False),
}
# how devplan compiles an example's export, where not as it is: the float export quantized by
# `compile --llm --quantize 8da4w`, beside ExecuTorch's program of the same recipe
COMPILE = {("transformers_recipe", "8da4w-by-devplan"): {"llm": True, "quantize": "8da4w"}}


def planned_bytes(path: Path) -> tuple[int, int]:
    """forward's planned bytes, and the working memory its XNNPACK delegates allocate beside
    them (their intermediates summed, an upper bound), which no plan holds."""
    forward = inspect(path.read_bytes())["methods"][0]
    own = sum((d["working_memory"] or {}).get("bytes") or 0 for d in forward["delegates"])
    return sum(b["size"] for b in forward["buffers"]), own


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--examples",
        nargs="+",
        metavar="EXPORT:PRECISION",
        default=[f"{e}:{p}" for e, p in EXAMPLES],
        help="the examples to run (default: all), e.g. export_llama:8da4w",
    )
    parser.add_argument("--rows-to", type=Path, help=argparse.SUPPRESS)  # one example's rows, for run_apart
    args = parser.parse_args()
    chosen = {tuple(text.split(":", 1)) for text in args.examples}
    if chosen - set(EXAMPLES):
        parser.error(f"--examples: choose among {', '.join(f'{e}:{p}' for e, p in EXAMPLES)}")
    if len(chosen) > 1:
        rows = run_apart(args, chosen)
    else:
        rows = measure(args, chosen)
        if args.rows_to:
            args.rows_to.write_text(json.dumps(rows))
            return
    report(rows, args)


def run_apart(args: argparse.Namespace, chosen: set) -> list[dict]:
    """Each example measured in a fresh process of this script, so that one's torch state never
    reaches the next's and the runner's own printing (the tokens, its stats) stays out of the
    table."""
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for name, precision in EXAMPLES:
            if (name, precision) not in chosen:
                continue
            out = Path(scratch) / f"{name}-{precision}.json"
            size = ["--dim", str(args.dim), "--layers", str(args.layers), "--tokens", str(args.tokens)]
            command = [sys.executable, __file__, *size, "--repeats", str(args.repeats), "--examples"]
            done = subprocess.run(
                [*command, f"{name}:{precision}", "--rows-to", str(out)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            if done.returncode:
                sys.exit(f"{name}:{precision} failed:\n{done.stderr[-4000:]}")
            rows += json.loads(out.read_text())
    return rows


def measure(args: argparse.Namespace, chosen: set) -> list[dict]:
    """The rows of the chosen examples, measured in this process."""
    importlib.import_module(CUSTOM_OPS)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        tokenizer = word_tokenizer(Path(scratch))
        for (name, precision), (export, portable_too) in EXAMPLES.items():
            if (name, precision) not in chosen:
                continue
            folder = Path(scratch) / f"{name}-{precision}".replace("8da4w", "quantized")  # PREQUANTIZED_WORDS
            folder.mkdir()
            size = dict(dim=args.dim, layers=args.layers, max_seq=2 * args.tokens, metadata=SPECIAL)
            programs = {}
            if portable_too:
                portable = export(folder, **size)
                programs["ET"] = portable.pte
            (folder / "xnnpack").mkdir()
            xnnpack = export(folder / "xnnpack", **size, xnnpack=True)
            programs["ET+xnnpack"] = xnnpack.pte
            for label, backends in (("devplan", []), ("devplan+xnnpack", ["xnnpack"])):
                if backends or portable_too:  # the same export as ExecuTorch's program it is compared with
                    source = xnnpack if backends else portable
                    programs[label] = folder / f"{label}.pte"
                    options = COMPILE.get((name, precision), {"backends": backends})
                    devplan.compile(source.pt2, programs[label], constant_methods=source.metadata, **options)
            reference = None
            for label, path in programs.items():
                speeds, pieces = [], None
                for _ in range(args.repeats):
                    pieces, stats = generate(path, tokenizer, "the quick brown fox", args.tokens)
                    speeds.append(
                        stats["generated_tokens"]
                        * 1000
                        / max(1, stats["inference_end_ms"] - stats["prompt_eval_end_ms"])
                    )
                reference = reference or pieces
                planned, own = planned_bytes(path)
                rows.append(
                    {
                        "export": name,
                        "precision": precision,
                        "program": label,
                        "planned_bytes": planned,
                        "backend_bytes": own,
                        "file_bytes": path.stat().st_size,
                        "decode_tokens_per_s": round(statistics.median(speeds), 1),
                        "tokens": len(pieces),
                        "same_tokens": pieces == reference,
                    }
                )
    return rows


def report(rows: list[dict], args: argparse.Namespace) -> None:
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(
        f"{'export':20} {'precision':9} {'program':16} {'planned B':>10} {'backend B':>10} {'file B':>10} "
        f"{'tok/s':>9} tokens same"
    )
    for row in rows:
        print(
            f"{row['export']:20} {row['precision']:9} {row['program']:16} {row['planned_bytes']:>10} "
            f"{row['backend_bytes']:>10} {row['file_bytes']:>10} {row['decode_tokens_per_s']:>9} {row['tokens']:>6} "
            f"{row['same_tokens']}"
        )
    print("backend B: XNNPACK's own working memory beside the plan (its intermediates summed, an upper bound)")
    print()
    print(side_by_side(rows, args))


def side_by_side(rows: list[dict], args: argparse.Namespace) -> str:
    """The closing table in Markdown: per example, devplan's program against ExecuTorch's of the
    same export (portable to portable, XNNPACK to XNNPACK), each figure devplan / ExecuTorch (ratio)."""
    lines = [
        f"Llama dim {args.dim}, {args.layers} layers, {args.tokens} tokens after the prompt, median of {args.repeats} runs",
        "",
        "| example | programs | planned bytes | file bytes | decode tokens/s | same tokens |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for (name, precision), _ in EXAMPLES.items():
        mine = {r["program"]: r for r in rows if (r["export"], r["precision"]) == (name, precision)}
        for ours, theirs in (("devplan", "ET"), ("devplan+xnnpack", "ET+xnnpack")):
            if ours not in mine:
                continue
            a, b = mine[ours], mine[theirs]
            cells = [f"{a[key]:,} / {b[key]:,} ({a[key] / b[key]:.2f}x)" for key in ("planned_bytes", "file_bytes")]
            speed = a["decode_tokens_per_s"] / b["decode_tokens_per_s"]
            cells.append(f"{a['decode_tokens_per_s']} / {b['decode_tokens_per_s']} ({speed:.2f}x)")
            same = "yes" if a["same_tokens"] and b["same_tokens"] else "NO"
            lines.append(f"| {name} {precision} | {ours} / {theirs} | {' | '.join(cells)} | {same} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
