"""Compile time with a backend: `devplan.compile(..., backends=["xnnpack"])` against ExecuTorch's
own XNNPACK lowering, `to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
.to_executorch()`, per model, in the same run (issue 41).

    python benchmarks/compile_speed.py [--models gpt2,vit,mobilenet] [--repeat 3] [--no-process] [--quick] [--json]

In one process, after both tools have lowered a small model untimed: devplan with --jobs at
its default (one process per core) and with --jobs 1, and ExecuTorch's lowering, each run
`--repeat` times in turn on a fresh copy of the model's export, the fastest counting
(`ratio` = devplan s / ExecuTorch s). Then as a user waits, each in a fresh Python process
(interpreter start, imports, loading the .pt2 and writing the program included): the whole
`devplan compile MODEL.pt2 --backend xnnpack` command against a Python process running
ExecuTorch's lowering of the same .pt2 (`process ratio`). Below the table: each ratio's
geometric mean. Models: transformers architectures with random weights (harness-sized by
default; `vit_b16` is ViT-B/16 at 224x224, `qwen2_0_5b` Qwen2-0.5B over 64 tokens)."""

from __future__ import annotations

import argparse
import copy
import gc
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import devplan  # noqa: E402
from benchmarks.harness import choose, geometric_mean, table  # noqa: E402
from testbed.device_corpus import Logits  # noqa: E402

QUICK = ("gpt2_tiny",)
DEFAULT = ("gpt2", "vit", "mobilenet")
HEADERS = ("model", "partitions", "devplan s", "jobs 1 s", "executorch s", "ratio", "jobs 1 ratio", "process ratio")

# ExecuTorch's lowering of a saved export, as a user's script would run it
EXECUTORCH_SCRIPT = """
import sys, torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
ep = torch.export.load(sys.argv[1])
with torch.no_grad():
    program = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
with open(sys.argv[2], "wb") as f:
    program.write_to_file(f)
"""


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=128, n_positions=64, n_embd=128, n_layer=4, n_head=4, use_cache=False)
    return GPT2LMHeadModel._from_config(config, attn_implementation="sdpa"), (torch.randint(3, 128, (1, 64)),)


def _vit(hidden=192, layers=4, heads=3, image=96):
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        image_size=image,
    )
    return ViTForImageClassification._from_config(config, attn_implementation="sdpa"), (
        torch.randn(1, 3, image, image),
    )


def _mobilenet():
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    config = MobileNetV2Config(image_size=96, depth_multiplier=0.5)
    return MobileNetV2ForImageClassification._from_config(config), (torch.randn(1, 3, 96, 96),)


def _qwen2_0_5b():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=151936,
        tie_word_embeddings=True,
        use_cache=False,
    )
    return Qwen2ForCausalLM._from_config(config, attn_implementation="sdpa"), (torch.randint(3, 1000, (1, 64)),)


def _gpt2_tiny():
    from testbed.hf_models import gpt2

    module, args, _ = gpt2()
    return module, args


MODELS = {
    "gpt2_tiny": _gpt2_tiny,  # the test corpus's: 2 layers, width 32, 8 tokens
    "gpt2": _gpt2,
    "vit": _vit,
    "mobilenet": _mobilenet,
    "vit_b16": lambda: _vit(768, 12, 12, 224),
    "qwen2_0_5b": _qwen2_0_5b,
}


def export(name: str) -> torch.export.ExportedProgram:
    torch.manual_seed(0)
    module, args = MODELS[name]()
    with torch.no_grad():
        return torch.export.export(Logits(module.eval()), args, strict=False)


def executorch_lowering(ep: torch.export.ExportedProgram) -> bytes:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    with torch.no_grad():
        return to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer


def in_process(ep: torch.export.ExportedProgram, repeat: int) -> dict:
    """Fastest of `repeat` rounds, each timing devplan (default jobs), devplan --jobs 1 and
    ExecuTorch in turn, so that a slow spell of the machine falls on all three alike."""
    runs = {
        "devplan": lambda p: devplan.compile(p, backends=["xnnpack"]),
        "jobs_1": lambda p: devplan.compile(p, backends=["xnnpack"], jobs=1),
        "executorch": executorch_lowering,
    }
    best = dict.fromkeys(runs, math.inf)
    partitions = 0
    for _ in range(repeat):
        for tool, run in runs.items():
            fresh = copy.deepcopy(ep)
            start = time.perf_counter()
            result = run(fresh)
            best[tool] = min(best[tool], time.perf_counter() - start)
            if tool == "devplan":
                partitions = len(result.planned.method.delegates)
            del fresh, result  # a 0.5B model's program and export copy are gigabytes each
            gc.collect()
    return {"partitions": partitions, **{f"{tool}_seconds": seconds for tool, seconds in best.items()}}


def as_a_user_waits(ep: torch.export.ExportedProgram, repeat: int) -> dict:
    """Fastest of `repeat` fresh processes each: the devplan command, ExecuTorch's script."""
    with tempfile.TemporaryDirectory() as folder:
        model = Path(folder) / "model.pt2"
        torch.export.save(ep, model)
        commands = {
            "devplan": [sys.executable, "-m", "devplan", "compile", model, "-o", Path(folder) / "d.pte"]
            + ["--backend", "xnnpack", "--quiet"],
            "executorch": [sys.executable, "-c", EXECUTORCH_SCRIPT, model, Path(folder) / "e.pte"],
        }
        best = dict.fromkeys(commands, math.inf)
        for _ in range(repeat):
            for tool, command in commands.items():
                start = time.perf_counter()
                subprocess.run(command, check=True, capture_output=True, cwd=Path(__file__).resolve().parents[1])
                best[tool] = min(best[tool], time.perf_counter() - start)
    return {f"{tool}_process_seconds": seconds for tool, seconds in best.items()}


def measure(name: str, repeat: int, process: bool) -> dict:
    ep = export(name)
    row = {"model": name, **in_process(ep, repeat)}
    row["ratio"] = row["devplan_seconds"] / row["executorch_seconds"]
    row["jobs_1_ratio"] = row["jobs_1_seconds"] / row["executorch_seconds"]
    if process:
        row.update(as_a_user_waits(ep, repeat))
        row["process_ratio"] = row["devplan_process_seconds"] / row["executorch_process_seconds"]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help=f"comma-separated, of {', '.join(MODELS)} (default: {', '.join(DEFAULT)})")
    parser.add_argument("--repeat", type=int, default=3, help="rounds per model; the fastest of each tool counts")
    parser.add_argument("--no-process", action="store_true", help="skip the whole-command comparison")
    parser.add_argument("--quick", action="store_true", help=f"{', '.join(QUICK)}, one round, in process only")
    parser.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    args = parser.parse_args(argv)
    names = list(QUICK) if args.quick else choose(args.models, DEFAULT, known=list(MODELS))
    repeat, process = (1, False) if args.quick else (max(1, args.repeat), not args.no_process)

    warm_up = torch.export.export(torch.nn.Linear(4, 4), (torch.randn(2, 4),))
    devplan.compile(copy.deepcopy(warm_up), backends=["xnnpack"])
    executorch_lowering(copy.deepcopy(warm_up))

    rows = [measure(name, repeat, process) for name in names]
    means = {
        key: geometric_mean([row[key] for row in rows])
        for key in ("ratio", "jobs_1_ratio", "process_ratio")
        if all(key in row for row in rows)
    }
    if args.json:
        print(json.dumps({"repeat": repeat, "cores": os.cpu_count(), "rows": rows, "geomean": means}, indent=2))
        return 0
    print(f"best of {repeat} round(s); ratio = devplan s / executorch s (lower is faster); {os.cpu_count()} cores")
    print(
        table(
            HEADERS,
            [
                [
                    row["model"],
                    row["partitions"],
                    row["devplan_seconds"],
                    row["jobs_1_seconds"],
                    row["executorch_seconds"],
                    row["ratio"],
                    row["jobs_1_ratio"],
                    row.get("process_ratio"),
                ]
                for row in rows
            ],
        )
    )
    print("geomean: " + ", ".join(f"{key} {value:.3f}" for key, value in means.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
