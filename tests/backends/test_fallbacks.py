"""A backend never makes a model fail that compiles without it: the ops ExecuTorch's backend
refuses at preprocess stay on portable kernels, the rest is lowered, and the summary names
them (issue 54, point 5); --strict-backend refuses as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import devplan
from devplan.backend import Partitioner
from devplan.errors import DevplanError
from devplan.inspection.reports import compile_lines
from testbed.hf_models import _MOE, _build, _decoder_config, _tokens
from testbed.models import run_executorch
from tests.test_schemas import validate

ROOT = Path(__file__).resolve().parents[2]


class _MaxOverLastDim(torch.nn.Module):
    """A max over the last dim of a 4-d tensor between two linears: XNNPACK's partitioner takes
    it, its preprocess refuses the amax it becomes (only dims 2 and 3), as in gpt-oss's sinks."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(9, 9), torch.nn.Linear(9, 9)

    def forward(self, x):
        y = self.a(x)
        return self.b(y - torch.max(y, dim=-1, keepdim=True).values)


def _max_export():
    torch.manual_seed(0)
    module, x = _MaxOverLastDim().eval(), torch.randn(1, 2, 4, 9)
    return torch.export.export(module, (x,)), module, x


def test_a_backend_that_refuses_every_partition_leaves_the_model_portable():
    """A backend whose preprocess always raises: each addmm it was given (the add ops it takes) runs on the portable
    kernels, the summary says which ops and why; --strict-backend refuses in one line."""
    ep = torch.export.load(ROOT / "samples" / "mlp.pt2")
    refusing = Partitioner.parse_class("tests.partitioners:RaisingBackend")
    result = devplan.compile(ep, delegates=[refusing])
    (method,) = result.summary()["methods"]
    assert method["delegates"] == []
    assert method["fallbacks"] == [
        {"backend": "FailsToCompile", "ops": ["aten.addmm.default"], "why": "this backend cannot compile anything"}
    ]
    validate("compile", json.loads(json.dumps(result.summary())))
    line = "  FailsToCompile refused aten.addmm.default, left on portable kernels: this backend cannot compile anything"
    assert line in compile_lines(result.summary(), [], "p.pte", None)
    with pytest.raises(DevplanError, match="backend FailsToCompile, partition add0 from node .*cannot compile"):
        devplan.compile(ep, delegates=[refusing], strict_backend=True)


def test_the_op_xnnpack_refuses_stays_portable_and_the_rest_is_delegated():
    ep, module, x = _max_export()
    result = devplan.compile(ep, backends=["xnnpack"])
    (method,) = result.summary()["methods"]
    # the max.dim the partitioner took, traced back from the amax XNNPACK's passes made of it
    assert method["fallbacks"] == [
        {"backend": "XnnpackBackend", "ops": ["aten.max.dim"], "why": "amax.default only supports dim == 2 or dim == 3"}
    ]
    assert {d["id"] for d in method["delegates"]} == {"XnnpackBackend"}  # the linears still are
    assert any(op.startswith("aten::max") for k in method["kernels"] for op in k["operators"])
    (got,) = run_executorch(result.data, (x,))[0]
    torch.testing.assert_close(got, module(x).detach(), rtol=1e-5, atol=1e-5)
    with pytest.raises(DevplanError, match="ExecuTorch's lowering failed: amax.default only supports dim == 2"):
        devplan.compile(ep, backends=["xnnpack"], strict_backend=True)


def _gpt_oss():
    from transformers import GptOssConfig, GptOssForCausalLM

    config = _decoder_config(
        GptOssConfig,
        head_dim=16,
        num_local_experts=4,
        sliding_window=4,
        layer_types=["sliding_attention", "full_attention"],
        **_MOE,
    )
    return _build(GptOssForCausalLM, config, "eager")


def _deepseek_v3():
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    # MLA with aligned dims (the q/kv ranks and head dims multiples of 8), one dense layer then MoE
    config = _decoder_config(
        DeepseekV3Config,
        num_key_value_heads=4,
        n_routed_experts=4,
        n_shared_experts=1,
        moe_intermediate_size=32,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
        kv_lora_rank=16,
        q_lora_rank=16,
        qk_rope_head_dim=8,
        qk_nope_head_dim=8,
        v_head_dim=16,
        **_MOE,
    )
    return _build(DeepseekV3ForCausalLM, config)


@pytest.mark.parametrize(
    "build, portable",
    [
        pytest.param(_gpt_oss, ["aten.max.dim"], marks=pytest.mark.sweep, id="gpt_oss"),  # half a minute
        # ExecuTorch's lowering writes empty_like as empty_permuted, which devplan decomposes: nothing refused
        pytest.param(_deepseek_v3, [], id="deepseek_v3"),
    ],
)
def test_moe_llms_executorch_cannot_lower_compile_with_xnnpack(build, portable):
    module, tokens = build(), _tokens()
    with torch.no_grad():
        ep = torch.export.export(module, (tokens,), strict=False)
        want = module(tokens).logits
    result = devplan.compile(ep, backends=["xnnpack"])
    (method,) = result.summary()["methods"]
    assert [op for f in method["fallbacks"] for op in f["ops"]] == portable
    assert {d["id"] for d in method["delegates"]} == {"XnnpackBackend"}
    (got,) = run_executorch(result.data, (tokens,))[0]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
