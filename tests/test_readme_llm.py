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


def example() -> str:
    text = (ROOT / "README.md").read_text()
    found = re.search(r"<!-- llm-example -->\n```python\n(.*?)```", text, re.DOTALL)
    assert found, "README.md lost its LLM example"
    return found.group(1)


@pytest.mark.sweep  # a fresh process that exports, compiles and generates: about a minute
def test_the_readmes_llm_example_runs_as_printed(tmp_path):
    import devplan

    word_tokenizer(tmp_path)
    (tmp_path / "example.py").write_text(example())
    done = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    returns = {m["name"]: m["returns"] for m in devplan.inspect((tmp_path / "llama.pte").read_bytes())["methods"]
               if "returns" in m}
    # ExecuTorch's own lowering of the same export, with the same constant methods
    from executorch.exir import to_edge_transform_and_lower

    metadata = {name: value[0] if len(value) == 1 and name != "get_eos_ids" else value for name, value in returns.items()}
    lowered = to_edge_transform_and_lower(torch.export.load(tmp_path / "llama.pt2"), constant_methods=metadata)
    (tmp_path / "executorch.pte").write_bytes(lowered.to_executorch().buffer)
    want, _ = generate(tmp_path / "executorch.pte", tmp_path / "tokenizer.json", "the quick brown fox", new_tokens=16)
    got, _ = generate(tmp_path / "llama.pte", tmp_path / "tokenizer.json", "the quick brown fox", new_tokens=16)
    assert got == want and len(got) == 16
    assert done.stdout.strip().splitlines()[-1].endswith("".join(got).strip())  # the example echoes the prompt
    assert returns["get_vocab_size"] == [512] and returns["get_n_layers"] == [2] and returns["use_kv_cache"] == [True]
    assert returns["get_max_seq_len"] == [64] and returns["get_eos_ids"] == [2]
