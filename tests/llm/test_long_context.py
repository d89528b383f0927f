"""README's LLM example at a 2,048-token cache (issue 53): its export, as printed but for the
cache's length, compiles to a plan under 1/8 of ExecuTorch's default lowering of the same
export (which materializes each attention's scores, heads x prompt x cache), and ExecuTorch's
runner generates from devplan's program the tokens it generates from ExecuTorch's."""

from __future__ import annotations

import re

import pytest
import torch

import devplan
from tests.test_readme_llm import example

CACHE = 2048


def readme_export_at(cache: int) -> torch.export.ExportedProgram:
    """Step 1 of README's transformers block, run as printed but with a `cache`-token cache."""
    block = example().split("# 2. compile")[0]
    block = block.replace('"max_cache_len": 64', f'"max_cache_len": {cache}').replace(
        "max_cache_len=64", f"max_cache_len={cache}"
    )
    block = re.sub(r'Dim\("tokens", max=63\)', f'Dim("tokens", max={cache - 1})', block)
    block = block.replace('torch.export.save(ep, "llama.pt2")', "")
    assert str(cache) in block and "max=63" not in block, "README's block changed its shape"
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)
    return scope["ep"]


@pytest.mark.xdist_group("long_context")
@pytest.mark.sweep  # README's Llama at 2,048 tokens beside ExecuTorch's lowering
def test_the_readmes_llm_at_2048_tokens_plans_an_eighth_of_executorchs(tmp_path):
    pytest.importorskip("executorch.extension.llm.runner")
    from testbed.llama_export import generate, word_tokenizer

    ep = readme_export_at(CACHE)
    ours = devplan.compile(ep, tmp_path / "llama.pte", llm=True, constant_methods={"get_bos_id": 1, "get_eos_ids": [2]})
    attention = ours.summary()["methods"][0]["attention"]
    assert attention and all(a["block"] is not None and a["keys"] == CACHE for a in attention)
    # ExecuTorch's default lowering of the same export, with the constant methods the runner reads
    from executorch.exir import to_edge_transform_and_lower

    returns = {m["name"]: m["returns"] for m in devplan.inspect(ours.data)["methods"] if "returns" in m}
    metadata = {name: v[0] if len(v) == 1 and name != "get_eos_ids" else v for name, v in returns.items()}
    with torch.no_grad():
        theirs = to_edge_transform_and_lower(ep, constant_methods=metadata).to_executorch().buffer
    (tmp_path / "executorch.pte").write_bytes(theirs)
    (forward,) = [plan for plan in devplan.read_pte(theirs).program.executionPlan if plan.name == b"forward"]
    arena = sum(b.size for b in ours.planned.buffers)
    assert arena * 8 <= sum(forward.nonConstBufferSizes), (arena, list(forward.nonConstBufferSizes))
    tokenizer = word_tokenizer(tmp_path)
    want, _ = generate(tmp_path / "executorch.pte", tokenizer, "the quick brown fox", new_tokens=16)
    got, _ = generate(tmp_path / "llama.pte", tokenizer, "the quick brown fox", new_tokens=16)
    assert got == want
