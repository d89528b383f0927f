"""A backend never makes a model fail that compiles without it: the ops ExecuTorch's backend
refuses at preprocess, or its partitioner fails on, stay on portable kernels, the rest is
lowered, and the summary names them (issue 54, point 5); --strict-backend refuses as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import devplan
from devplan.backend import Partitioner
from devplan.errors import DevplanError
from devplan.inspection.reports import compile_lines
from testbed.held_out_llms import deepseek_v3, gpt_oss
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


@pytest.mark.parametrize(
    "name, fallback, delegates, strict",
    [
        # its check raised on a relu: the relus stay, the adds it takes still are delegated
        (
            "StumblesOnRelu",
            ("ConcatBytes", ["aten.relu.default"], "its partitioner failed: cannot partition"),
            4,
            "tests.partitioners:StumblesOnRelu: the partitioner failed: cannot partition",
        ),
        # linear kept whole for it and not taken: ExecuTorch refuses the graph, so linear is decomposed
        (
            "KeepsLinearWhole",
            ("ConcatBytes", ["aten.linear.default"], "Node aten_linear_default with op"),
            4,
            "KeepsLinearWhole: ExecuTorch's lowering failed: Node aten_linear_default with op",
        ),
        # it failed on no op: it takes nothing, and every op it was offered is named
        (
            "Raises",
            (
                "ConcatBytes",
                ["aten.addmm.default", "aten.permute_copy.default", "aten.relu.default"],
                "its partitioner",
            ),
            0,
            "tests.partitioners:Raises: the partitioner failed: this partitioner always fails",
        ),
        # a partition compiled to nothing, found at preprocess as a refusal
        (
            "EmptyPayload",
            ("MakesNothing", ["aten.addmm.default"], "its preprocess made no payload"),
            0,
            "backend MakesNothing, partition add0 .*: ExecuTorch's lowering failed: its preprocess made no payload",
        ),
    ],
    ids=["check-raises", "kept-whole-not-taken", "partitioner-raises", "empty-payload"],
)
def test_a_partitioner_that_fails_leaves_its_ops_portable(name, fallback, delegates, strict):
    """A failure before any preprocess (the partitioner's, or ExecuTorch's check of what it
    took) leaves the op it failed on portable and the rest delegated, named in the summary as
    preprocess refusals are; --strict-backend refuses in one line, as before."""
    ep = torch.export.load(ROOT / "samples" / "mlp.pt2")
    failing = Partitioner.parse_class(f"tests.partitioners:{name}")
    result = devplan.compile(ep, delegates=[failing])
    (method,) = result.summary()["methods"]
    ((backend, ops, why),) = [(f["backend"], f["ops"], f["why"]) for f in method["fallbacks"]]
    assert (backend, ops, why.startswith(fallback[2])) == (fallback[0], fallback[1], True), why
    assert len(method["delegates"]) == delegates
    validate("compile", json.loads(json.dumps(result.summary())))
    line = f"  {backend} refused {', '.join(ops)}, left on portable kernels: {why}"
    assert line in compile_lines(result.summary(), [], "p.pte", None)
    if not delegates:  # all portable: devplan's runtime runs it (ConcatBytes's payloads run nowhere)
        (x,) = ep.example_inputs[0]
        torch.testing.assert_close(devplan.run(result.data, [x])[0][0], ep.module()(x))
    with pytest.raises(DevplanError, match=strict):
        devplan.compile(ep, delegates=[failing], strict_backend=True)


@pytest.mark.parametrize(
    "build, portable",
    [
        pytest.param(gpt_oss, ["aten.max.dim"], id="gpt_oss"),
        # ExecuTorch's lowering writes empty_like as empty_permuted, which devplan decomposes: nothing refused
        pytest.param(deepseek_v3, [], id="deepseek_v3"),
    ],
)
def test_moe_llms_executorch_cannot_lower_compile_with_xnnpack(build, portable):
    module, (tokens,), _ = build(layers=1)
    with torch.no_grad():
        ep = torch.export.export(module, (tokens,), strict=False)
        want = module(tokens).logits
    result = devplan.compile(ep, backends=["xnnpack"])
    (method,) = result.summary()["methods"]
    assert [op for f in method["fallbacks"] for op in f["ops"]] == portable
    lines = compile_lines(result.summary(), [], "p.pte", None)
    assert [line for line in lines if " left on portable kernels: " in line] == [
        f"  XnnpackBackend refused {op}, left on portable kernels: amax.default only supports dim == 2 or dim == 3"
        for op in portable
    ]
    assert {d["id"] for d in method["delegates"]} == {"XnnpackBackend"}
    (got,) = run_executorch(result.data, (tokens,))[0]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
