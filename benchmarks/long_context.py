"""Attention at the context lengths users run (issue 53): planned bytes of devplan's program
(attention in blocks of keys, `--attention auto`) against ExecuTorch's default lowering of the
same export, which materializes every attention's scores, and for Llama against ExecuTorch's
export_llama program of the same sizes (its own model, attention in its fused custom_sdpa); and, with --run, the prefill's
latency (and one decode step's) and peak resident memory of each program on ExecuTorch's runtime, in a child process
each.

Rows: README's LLM recipe (transformers' static cache, a dynamic prompt; hidden 256, 8 heads,
2 KV heads, 2 layers) for Llama and Qwen2 at 2,048, 4,096 and 8,192-token caches, prefilled
with the whole cache's worth of prompt less one and then decoding one token; DINOv2 at 518x518
(1,370 tokens) and Whisper's encoder at 1,500 frames, both non-causal with no cache.

    python benchmarks/long_context.py [--models llama_2048,...] [--run] [--json]

Targets (issue 53): planned bytes at 2,048 tokens at most 1/8 of ExecuTorch's default, at
8,192 at most 1/30; prefill latency no worse than ExecuTorch's default at 2,048."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

warnings.filterwarnings("ignore")

import devplan  # noqa: E402
from testbed.executorch import executorch_pte, planned_bytes  # noqa: E402
from testbed.hf_models import recipe_export  # noqa: E402
from testbed.peak import run_measured  # noqa: E402

TARGETS = {2048: 8, 8192: 30}  # cache length -> ExecuTorch's default plan over devplan's, at least


def _llm(family: str, cache: int):
    sizes = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8)
    ep = recipe_export(family, cache, num_key_value_heads=2, **sizes)
    prompt = cache - 1
    return ep, [
        (torch.randint(3, 512, (1, prompt)), torch.arange(prompt)),
        (torch.tensor([[7]]), torch.tensor([prompt])),
    ]


def _dinov2():
    from transformers import Dinov2Config, Dinov2Model

    torch.manual_seed(0)
    config = Dinov2Config(
        image_size=518, patch_size=14, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128
    )
    module = Dinov2Model._from_config(config, attn_implementation="sdpa").eval()
    image = torch.randn(1, 3, 518, 518)
    return torch.export.export(module, (image,)), [(image,)]


def _whisper_encoder():
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    torch.manual_seed(0)
    config = WhisperConfig(
        d_model=64, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=128, num_mel_bins=80,
        max_source_positions=1500,
    )  # fmt: skip
    module = WhisperEncoder._from_config(config, attn_implementation="sdpa").eval()
    features = torch.randn(1, 80, 3000)
    return torch.export.export(module, (features,)), [(features,)]


MODELS = {
    **{
        f"{family}_{cache}": (lambda f=family, c=cache: _llm(f, c))
        for family in ("llama", "qwen2")
        for cache in (2048, 4096, 8192)
    },
    "dinov2_518": _dinov2,
    "whisper_encoder_1500": _whisper_encoder,
}

# a child: load the program on ExecuTorch's runtime and time its calls (the prefill, then a
# decode step where there is one) over `runs` fresh loads, each from the program's initial state;
# prints the best time of each call
_RUN = """
import sys, time, torch
from executorch.runtime import Runtime
program_path, inputs_path, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
calls = torch.load(inputs_path)
runtime = Runtime.get()
best = [float("inf")] * len(calls)
for _ in range(runs):
    method = runtime.load_program(program_path).load_method("forward")
    for i, call in enumerate(calls):
        start = time.perf_counter()
        method.execute(list(call))
        best[i] = min(best[i], time.perf_counter() - start)
print(*best)
"""


def _measured(program: bytes, calls: list, runs: int) -> tuple[list[float], int | None]:
    """(best seconds of each call, peak resident bytes) of the program on ExecuTorch's runtime."""
    with tempfile.TemporaryDirectory() as folder:
        path, inputs = os.path.join(folder, "p.pte"), os.path.join(folder, "inputs.pt")
        Path(path).write_bytes(program)
        torch.save(calls, inputs)
        done, peak = run_measured(["-c", _RUN, path, inputs, str(runs)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"ExecuTorch's runtime failed: {done.stderr.strip().splitlines()[-1:]}")
    return [float(t) for t in done.stdout.split()], peak


def _export_llama_planned(cache: int) -> int:
    """The planned bytes of ExecuTorch's export_llama program (its own Llama, attention in its
    llama::custom_sdpa kernel, --use_sdpa_with_kv_cache) of the same sizes and cache: its FFN is
    its own model's (704 wide where transformers' config says 512)."""
    from testbed.llama_export import export_llama

    with tempfile.TemporaryDirectory() as folder:
        made = export_llama(Path(folder), dim=256, layers=2, heads=8, kv_heads=2, max_seq=cache)
        plans = devplan.read_pte(made.pte.read_bytes()).program.executionPlan
    return int(sum(next(p for p in plans if p.name == b"forward").nonConstBufferSizes))


def row(name: str, run: bool, runs: int) -> dict:
    ep, calls = MODELS[name]()
    start = time.perf_counter()
    result = devplan.compile(ep)
    ours_seconds = time.perf_counter() - start
    start = time.perf_counter()
    theirs = executorch_pte(ep)
    theirs_seconds = time.perf_counter() - start
    ours_bytes = sum(b.size for b in result.planned.buffers)
    attention = result.summary()["methods"][0]["attention"]
    out = {
        "model": name,
        "devplan_planned": ours_bytes,
        "executorch_planned": planned_bytes(theirs),
        "blocks": sorted({a["block"] for a in attention if a["block"] is not None}),
        "devplan_compile_s": round(ours_seconds, 2),
        "executorch_compile_s": round(theirs_seconds, 2),
    }
    out["ratio"] = round(out["executorch_planned"] / ours_bytes, 2)
    cache = int(name.rsplit("_", 1)[1]) if name.startswith(("llama", "qwen2")) else None
    out["target"] = TARGETS.get(cache)  # type: ignore[arg-type]  # a row without a cache has none
    if name.startswith("llama") and cache is not None:
        out["export_llama_planned"] = _export_llama_planned(cache)
    if run:
        for who, program in (("devplan", result.data), ("executorch", theirs)):
            seconds, peak = _measured(program, calls, runs)
            out[f"{who}_prefill_s"], out[f"{who}_peak_rss"] = round(seconds[0], 3), peak
            out[f"{who}_decode_s"] = round(seconds[1], 4) if len(seconds) > 1 else None
    return out


def _mib(n) -> str:
    return f"{n / 2**20:.1f}" if n is not None else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated rows (default: all)")
    parser.add_argument("--run", action="store_true", help="also time the prefill on ExecuTorch's runtime")
    parser.add_argument("--runs", type=int, default=3, help="fresh loads the prefill is timed over (best kept)")
    parser.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    args = parser.parse_args()
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    rows = []
    header = f"{'model':<22}{'devplan MiB':>12}{'ET MiB':>10}{'ET/devplan':>11}{'target':>8}{'blocks':>8}{'export_llama MiB':>18}"
    if args.run:
        header += f"{'prefill s dp/ET':>18}{'decode s dp/ET':>18}{'peak RSS MiB dp/ET':>20}"
    if not args.json:
        print(header, flush=True)
    for name in names:
        r = row(name, args.run, args.runs)
        rows.append(r)
        if args.json:
            continue
        line = f"{name:<22}{_mib(r['devplan_planned']):>12}{_mib(r['executorch_planned']):>10}{r['ratio']:>11}"
        target = "-" if r["target"] is None else f"{r['target']}x " + ("ok" if r["ratio"] >= r["target"] else "MISS")
        line += f"{target:>8}{','.join(map(str, r['blocks'])) or '-':>8}{_mib(r.get('export_llama_planned')):>18}"
        if args.run:
            line += f"{r['devplan_prefill_s']:>9}/{r['executorch_prefill_s']:<8}"
            decode = "-" if r["devplan_decode_s"] is None else f"{r['devplan_decode_s']}/{r['executorch_decode_s']}"
            line += f"{decode:>18}{_mib(r['devplan_peak_rss']):>10}/{_mib(r['executorch_peak_rss']):<9}"
        print(line, flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
