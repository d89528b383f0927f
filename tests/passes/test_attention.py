"""Attention computed a block of keys at a time (passes/export/attention.py), one case per form:
transformers' static-cache Llama with a dynamic prompt (causal, GQA by repeated heads), a
sliding-window Mistral, scaled_dot_product_attention's own GQA with its causal flag, and an
encoder (ViT). Each is compiled with blocks far smaller than its scores, so that every
attention runs in several blocks, and runs on devplan's runtime and ExecuTorch's, matching
eager. Gemma-2's softcapped attention, which no SDPA can express, stays whole, and the
summary says why."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

import devplan
from devplan.cli import app
from devplan.pte import read_pte
from devplan.runtime import LoadedMethod
from testbed import hf_models
from testbed.models import run_executorch

BLOCK = 512  # bytes of scores a block may hold: 4 keys at these sizes
RTOL, ATOL = 1e-4, 1e-5


def _static_cache_llama():
    """README's recipe, tiny: transformers' static cache, the prompt's length dynamic."""
    sizes = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)
    ep = hf_models.recipe_export("llama", 32, num_key_value_heads=2, **sizes)
    return ep, (torch.randint(3, 128, (1, 20)), torch.arange(20))


def _sliding_mistral():
    from transformers import MistralConfig, MistralForCausalLM

    config = hf_models._decoder_config(MistralConfig, head_dim=8, sliding_window=4)
    module, args = hf_models._build(MistralForCausalLM, config), (torch.randint(3, 128, (1, 12)),)
    return torch.export.export(module, args), args


class CausalGQA(nn.Module):
    """scaled_dot_product_attention given 4 query heads over 2 key heads, causal by its flag."""

    def forward(self, q, k, v):
        return nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def _gqa():
    args = (torch.randn(1, 4, 16, 8), torch.randn(1, 2, 16, 8), torch.randn(1, 2, 16, 8))
    return torch.export.export(CausalGQA(), args), args


def _vit():
    module, args, _ = hf_models.vit()
    return torch.export.export(module, args), args


CASES = {"static_cache_llama": _static_cache_llama, "sliding_window": _sliding_mistral, "gqa": _gqa, "encoder": _vit}


@pytest.mark.parametrize("case", CASES)
def test_blocked_attention_matches_eager_on_both_runtimes(case):
    ep, args = CASES[case]()
    result = devplan.compile(ep, attention_block=BLOCK)  # first: eager updates the cache it starts from
    (forward,) = [m for m in result.summary()["methods"] if m["name"] == "forward"]
    assert forward["attention"] and all(a["block"] is not None and a["block"] < a["keys"] for a in forward["attention"])
    loaded = LoadedMethod(read_pte(result.data), "forward")
    got = torch.utils._pytree.tree_leaves(loaded.execute(list(args)))
    (executorch,) = run_executorch(result.data, args)
    keywords = ep.call_spec.in_spec.children()[1].context  # the recipe's module takes keywords only
    names = [spec.arg.name for spec in ep.graph_signature.input_specs if spec.kind.name == "USER_INPUT"]
    want = torch.utils._pytree.tree_leaves(ep.module()(**dict(zip(names, args))) if keywords else ep.module()(*args))
    for runtime in (got, executorch):
        assert len(runtime) == len(want)
        for a, b in zip(runtime, want):
            torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL)


@pytest.mark.sweep  # a long context compiled twice; the fast tier keeps blocked attention against eager
def test_blocks_cut_the_plan_of_a_long_context():
    """The static-cache Llama's scores are the largest tensors it plans; in blocks they are gone."""
    ep, _ = _static_cache_llama()
    whole = devplan.compile(ep, attention="materialized")
    blocked = devplan.compile(ep, attention_block=BLOCK)
    arena = lambda r: sum(b.size for b in r.planned.buffers)  # noqa: E731
    assert arena(blocked) < arena(whole)
    assert {a["why"] for a in whole.summary()["methods"][0]["attention"]} == {"--attention materialized"}


def test_softcapped_attention_stays_whole_and_the_summary_says_why(tmp_path):
    module, args, _ = hf_models.gemma2()
    path = tmp_path / "gemma2.pt2"
    torch.export.save(torch.export.export(module, args), path)
    run = CliRunner().invoke(app, ["compile", str(path), "-o", str(tmp_path / "g.pte"), "--attention-block", "16"])
    assert run.exit_code == 0, run.output
    assert "attention: 2 materialized (softcapping: a tanh on the scores" in " ".join(run.output.split())


@pytest.mark.sweep  # an XNNPACK lowering of a long context; the fast tier keeps blocked attention against eager
def test_no_xnnpack_delegate_takes_the_whole_scores_back():
    """Blocked before the backends partition: no XNNPACK delegate of the ViT holds a whole
    attention's scores (an intermediate shaped queries x keys, 17 x 17, in its graph as inspect
    --delegate reads it), as the materialized program's delegates do; it still matches eager on
    ExecuTorch's runtime."""
    ep, args = _vit()

    def scores(result) -> list:
        delegates = range(len(result.summary()["methods"][0]["delegates"]))
        graphs = [devplan.inspect(result.data, delegate=i) for i in delegates]
        return [
            v["shape"]
            for g in graphs
            for v in g["values"]
            if v["role"] == "intermediate" and v["shape"][-2:] == [17, 17]
        ]

    assert scores(devplan.compile(ep, attention="materialized", backends=["xnnpack"]))
    result = devplan.compile(ep, attention_block=BLOCK, backends=["xnnpack"])
    assert result.summary()["methods"][0]["delegates"] and not scores(result)
    (executorch,) = run_executorch(result.data, args)
    for got, want in zip(executorch, torch.utils._pytree.tree_leaves(ep.module()(*args))):
        torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.sweep  # a static-cache Llama at a long context; the fast tier keeps blocked attention against eager
def test_blocks_read_their_part_of_the_mask_and_the_cache():
    """The static-cache Llama's mask (prompt x cache, transformers' comparison of two ranges)
    and its grouped keys and values repeated for every head are never planned whole once its
    attention is in blocks: each block compares and reads its own keys (passes/export/slices.py)."""
    ep, _ = _static_cache_llama()

    def planned(result) -> list:
        tensors = devplan.inspect(result.data)["methods"][0]["tensors"]
        return [t["shape"] for t in tensors if t["mem_id"] is not None]

    whole = [[1, 1, 31, 32], [1, 4, 32, 8]]  # the mask, a repeated key or value
    assert all(s in planned(devplan.compile(ep, attention="materialized")) for s in whole)
    blocked = planned(devplan.compile(ep, attention_block=BLOCK))
    assert not any(s in blocked for s in whole), [s for s in whole if s in blocked]
