"""ExecuTorch's LLM runner on devplan's programs against ExecuTorch's own, per export path:

    python benchmarks/llm_runner.py [--dim 256] [--layers 4] [--tokens 64] [--repeats 5] [--json]

Two exports of a Llama with seeded random weights (testbed/llama_export.py): ExecuTorch's
export_llama pipeline (KV cache, llama::custom_sdpa and llama::update_cache) and transformers'
ExecuTorch recipe (static cache, input_ids and cache_position). Per export, four programs:
devplan.compile of the export (portable kernels, and with backends=["xnnpack"]) with the same
constant methods, and ExecuTorch's own lowering of it (portable, and with XNNPACK as its LLM
recipe lowers it). Each is loaded by ExecuTorch's TextLLMRunner, which greedily generates
--tokens tokens after one prompt, --repeats times; reported per program: the planned
(non-constant) bytes of forward, the median decode tokens per second from the runner's own
stats, and whether the tokens equal those of ExecuTorch's portable program. Ratios are
devplan's planned bytes / ExecuTorch's and devplan's tokens/s / ExecuTorch's, portable to
portable and XNNPACK to XNNPACK, taken in this one run."""
from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import devplan  # noqa: E402
from devplan import inspect  # noqa: E402
from testbed.llama_export import CUSTOM_OPS, export_hf_llama, export_llama, generate, word_tokenizer  # noqa: E402

# an end-of-sequence id past the vocabulary: every program generates all --tokens tokens
SPECIAL = {"get_bos_id": 1, "get_eos_ids": [1 << 20]}
EXPORTS = {"export_llama": export_llama, "transformers_recipe": export_hf_llama}


def planned_bytes(path: Path) -> int:
    return sum(b["size"] for b in inspect(path.read_bytes())["methods"][0]["buffers"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    importlib.import_module(CUSTOM_OPS)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        tokenizer = word_tokenizer(Path(scratch))
        for name, export in EXPORTS.items():
            folder = Path(scratch) / name
            folder.mkdir()
            size = dict(dim=args.dim, layers=args.layers, max_seq=2 * args.tokens, metadata=SPECIAL)
            portable = export(folder, **size)
            (folder / "xnnpack").mkdir()
            xnnpack = export(folder / "xnnpack", **size, xnnpack=True)
            programs = {"ET": portable.pte, "ET+xnnpack": xnnpack.pte}
            for label, backends in (("devplan", []), ("devplan+xnnpack", ["xnnpack"])):
                programs[label] = folder / f"{label}.pte"
                devplan.compile(portable.pt2, programs[label], constant_methods=portable.metadata, backends=backends)
            reference = None
            for label, path in programs.items():
                speeds, pieces = [], None
                for _ in range(args.repeats):
                    pieces, stats = generate(path, tokenizer, "the quick brown fox", args.tokens)
                    speeds.append(stats["generated_tokens"] * 1000 / max(1, stats["inference_end_ms"] - stats["prompt_eval_end_ms"]))
                reference = reference or pieces
                rows.append({"export": name, "program": label, "planned_bytes": planned_bytes(path),
                             "decode_tokens_per_s": round(statistics.median(speeds), 1), "tokens": len(pieces),
                             "same_tokens": pieces == reference})
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'export':22} {'program':16} {'planned B':>10} {'tok/s':>9} tokens same")
    for row in rows:
        print(f"{row['export']:22} {row['program']:16} {row['planned_bytes']:>10} {row['decode_tokens_per_s']:>9} "
              f"{row['tokens']:>6} {row['same_tokens']}")
    for name in EXPORTS:
        mine = {r["program"]: r for r in rows if r["export"] == name}
        for ours, theirs in (("devplan", "ET"), ("devplan+xnnpack", "ET+xnnpack")):
            a, b = mine[ours], mine[theirs]
            print(f"{name}: {ours}/{theirs} planned bytes {a['planned_bytes'] / b['planned_bytes']:.3f}, "
                  f"tokens/s {a['decode_tokens_per_s'] / b['decode_tokens_per_s']:.2f}")


if __name__ == "__main__":
    main()
