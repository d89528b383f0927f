"""The README's LLM example runs as printed (issue 35): the python block after
`<!-- llm-example -->`, in a folder holding only a tokenizer.json, exports a transformers Llama,
compiles it with `llm=True` and generates with ExecuTorch's TextLLMRunner; the program's
constant methods are what the export says, and the runner's greedy tokens are its own
lowering's of the same export."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("executorch.extension.llm.runner")

from testbed.llama_export import generate, word_tokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def example(marker: str = "llm-example") -> str:
    text = (ROOT / "README.md").read_text()
    found = re.search(rf"<!-- {marker} -->\n```python\n(.*?)```", text, re.DOTALL)
    assert found, f"README.md lost its LLM example ({marker})"
    return found.group(1)


def run_example(folder: Path, marker: str) -> subprocess.CompletedProcess:
    """The README's block, as printed, in a fresh process in `folder` (beside a tokenizer.json)."""
    word_tokenizer(folder)
    (folder / "example.py").write_text(example(marker))
    done = subprocess.run(
        [sys.executable, "example.py"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=900,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(folder)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def constant_returns(path: Path) -> dict:
    import devplan

    return {m["name"]: m["returns"] for m in devplan.inspect(path.read_bytes())["methods"] if "returns" in m}


@pytest.mark.sweep  # a fresh process that exports, compiles and generates: about a minute
def test_the_readmes_llm_example_runs_as_printed(tmp_path):

    done = run_example(tmp_path, "llm-example")
    returns = constant_returns(tmp_path / "llama.pte")
    # ExecuTorch's own lowering of the same export, with the same constant methods
    from executorch.exir import to_edge_transform_and_lower

    metadata = {
        name: value[0] if len(value) == 1 and name != "get_eos_ids" else value for name, value in returns.items()
    }
    lowered = to_edge_transform_and_lower(torch.export.load(tmp_path / "llama.pt2"), constant_methods=metadata)
    (tmp_path / "executorch.pte").write_bytes(lowered.to_executorch().buffer)
    want, _ = generate(tmp_path / "executorch.pte", tmp_path / "tokenizer.json", "the quick brown fox", new_tokens=16)
    got, _ = generate(tmp_path / "llama.pte", tmp_path / "tokenizer.json", "the quick brown fox", new_tokens=16)
    assert got == want and len(got) == 16
    assert done.stdout.strip().splitlines()[-1].endswith("".join(got).strip())  # the example echoes the prompt
    assert returns["get_vocab_size"] == [512] and returns["get_n_layers"] == [2] and returns["use_kv_cache"] == [True]
    assert returns["get_max_seq_len"] == [64] and returns["get_eos_ids"] == [2]


@pytest.mark.sweep  # export_llama twice (the example's export, and ExecuTorch's program) and XNNPACK: minutes
def test_the_readmes_export_llama_example_runs_as_printed(tmp_path):
    """The export_llama block (8da4w with XNNPACK): its program generates the tokens of
    export_llama's own program of the same checkpoint and flags, --llm wrote the metadata that
    export_llama writes, and the program passes the README's CI gate."""
    import devplan

    done = run_example(tmp_path, "llm-example-export-llama")
    command = re.search(r"subprocess\.run\(\s*(\[.*?\])", example("llm-example-export-llama"), re.DOTALL).group(1)
    flags = [flag for flag in eval(command, {"sys": sys}) if flag != "--export_only"]  # the example's own export
    subprocess.run(
        [*flags, "--metadata", '{"get_bos_id": 1, "get_eos_ids": [2]}', "--output_name", "executorch.pte"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert constant_returns(tmp_path / "llama.pte") == constant_returns(tmp_path / "executorch.pte")
    want, _ = generate(tmp_path / "executorch.pte", tmp_path / "tokenizer.json", "the quick brown fox", new_tokens=16)
    got, _ = generate(tmp_path / "llama.pte", tmp_path / "tokenizer.json", "the quick brown fox", new_tokens=16)
    assert got == want and len(got) == 16
    assert done.stdout.strip().splitlines()[-1].endswith("".join(got).strip())
    checks = devplan.check(tmp_path / "llama.pte", max_ratio=1.05)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
