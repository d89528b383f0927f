"""A wider sweep of PT2E-quantized programs than test_quantized.py: convolutions of every
kind (strided, dilated, grouped, depthwise, transposed, with batch norm folded in), pools,
a MobileNet-like block, linears on 2-D to 4-D inputs, matmuls, cats, adds and muls of two
quantized tensors, a transformer block, recurrent layers and an embedding, each quantized
per tensor, per channel and dynamically; plus quantized programs exported with a dynamic
batch and run at smaller ones, and quantized programs delegated to a (host-backed) device.

For every case: devplan compiles it, devplan's runtime and ExecuTorch's both compute what
the converted module computes in eager (exactly, up to float noise), its int8 weights stay
int8, and devplan plans no more bytes than ExecuTorch's own lowering of the same program.
A case is skipped only where torch.export, the quantizer or ExecuTorch's lowering fails."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.export import Dim
from torch.utils import _pytree as pytree

import devplan
import devplan.runtime
from testbed.executorch import executorch_pte
from testbed.models import pt2e_quantize, run_executorch
from tests.quantize.sweep_models import CNN, MLP, MODELS, AddRelu, LinearBias, TransformerBlock, randn
from tests.quantize.test_quantized import QUANTIZED_KERNELS, assert_calls_quantized_kernels, assert_weights_stay_int8
from tests.tiers import rotation

pytestmark = pytest.mark.sweep  # the slow tier: deselect with -m 'not sweep'

quantized_kernels = pytest.importorskip("executorch.kernels.quantized")

ATOL = 1e-5


# weights per tensor or per channel; activations static, or quantized at run time (dynamic)
CONFIGS = {
    "per_tensor": {},
    "per_channel": {"is_per_channel": True},
    "dynamic": {"is_per_channel": True, "is_dynamic": True},
}

# The dynamic config quantizes linear layers and lone convolutions only: these models stay
# float under it (nothing to test). The quantizer also leaves grouped ConvTranspose2d float
# under every config, so the sweep has none.
FLOAT = {
    (model, "dynamic")
    for model in (
        "conv_stride_pad_dilation",
        "conv_bn_relu",
        "depthwise_bn_relu6",
        "conv1d",
        "conv_transpose",
        "conv_transpose_bn_relu",
        "max_pool",
        "add_mul_inputs",
    )
}


# ---------------------------------------------------------------------------- helpers


def quantize(make, inputs, config: str, dynamic_shapes=None):
    """(the exported quantized program, the converted module, sample inputs); skips when
    torch.export or the quantizer fails."""
    torch.manual_seed(0)
    module = make().eval()
    for child in module.modules():  # fresh batch norms are identities; make them do something
        if isinstance(child, nn.modules.batchnorm._BatchNorm):
            child.running_mean.uniform_(-0.5, 0.5)
            child.running_var.uniform_(0.5, 2.0)
            nn.init.uniform_(child.weight, 0.5, 1.5)
            nn.init.uniform_(child.bias, -0.5, 0.5)
    args = tuple(make_input() for make_input in inputs)
    try:
        ep, converted = pt2e_quantize(module, args, dynamic_shapes=dynamic_shapes, **CONFIGS[config])
    except Exception as error:
        pytest.skip(f"torch.export or the quantizer fails: {_line(error)}")
    assert any(str(n.target).startswith("quantized_decomposed.") for n in ep.graph.nodes), (
        "the quantizer left the model float: nothing to test"
    )
    return ep, converted, args


def _line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:200]


def eager(module, args) -> list[torch.Tensor]:
    with torch.no_grad():
        return [t.detach().clone() for t in pytree.tree_leaves(module(*args))]


def assert_outputs(got: list, want: list, who: str) -> None:
    assert len(got) == len(want), f"{who}: {len(got)} outputs, eager has {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        torch.testing.assert_close(g, w, rtol=0, atol=ATOL, msg=lambda m: f"{who}, output {i}: {m}")


def assert_plans_no_more_than_executorch(ep, data: bytes) -> None:
    from testbed.executorch import planned_bytes

    try:
        theirs = executorch_pte(ep)
    except Exception as error:
        pytest.skip(f"ExecuTorch's own lowering fails: {_line(error)}")
    assert planned_bytes(data) <= planned_bytes(theirs)


# the suite quantizes each model in one configuration, in turn; every pair, to release
SUITE = rotation(MODELS, list(CONFIGS), among={(m, c) for m in MODELS for c in CONFIGS if (m, c) not in FLOAT})


def cases():
    for model in MODELS:
        for config in CONFIGS:
            if (model, config) in FLOAT:
                continue
            marks = () if (model, config) in SUITE else pytest.mark.release
            yield pytest.param(model, config, id=f"{model}-{config}", marks=marks)


# ---------------------------------------------------------------------------- the sweep


@pytest.mark.parametrize("model,config", cases())
def test_quantized_model_runs_in_both_runtimes(model, config):
    make, inputs = MODELS[model]
    ep, module, args = quantize(make, inputs, config)
    want = eager(module, args)
    result = devplan.compile(ep)
    assert_calls_quantized_kernels(result)
    assert_outputs(devplan.runtime.run(result.data, list(args))[0], want, "devplan's runtime")
    assert_outputs(run_executorch(result.data, args)[0], want, "ExecuTorch's runtime")
    assert_plans_no_more_than_executorch(ep, result.data)
    assert_weights_stay_int8(ep, result)


def run_devplan(data: bytes, args, devices_on_host: bool = False) -> list[torch.Tensor]:
    from devplan.runtime import HostAllocator, registered

    if not devices_on_host:
        return devplan.runtime.run(data, list(args))[0]
    with registered("cuda", HostAllocator()):
        return devplan.runtime.run(data, list(args))[0]


# dynamic batch: planned at the bound, run at the bound and below it in both runtimes
BOUND = 6
DYNAMIC_BATCH = {
    "mlp": (MLP, (randn(BOUND, 8),)),
    "cnn": (CNN, (randn(BOUND, 3, 8, 8),)),
    "linear_3d": (LinearBias, (randn(BOUND, 5, 16),)),
    "add_relu": (AddRelu, (randn(BOUND, 4, 5, 5),)),
    "transformer_block": (TransformerBlock, (randn(BOUND, 4, 16),)),
}


def dynamic_cases():
    for model in DYNAMIC_BATCH:
        for config in CONFIGS:
            if (model, config) in FLOAT:
                continue
            yield pytest.param(model, config, id=f"{model}-{config}")


def smaller_batches(args):
    for batch in (BOUND, 3, 1):
        torch.manual_seed(batch)
        yield batch, tuple(a[:batch].clone() + 0.1 * torch.randn_like(a[:batch]) for a in args)


@pytest.mark.parametrize("model,config", dynamic_cases())
def test_quantized_model_with_a_dynamic_batch(model, config):
    make, inputs = DYNAMIC_BATCH[model]
    dims = tuple({0: Dim("batch", min=1, max=BOUND)} for _ in inputs)
    ep, module, args = quantize(make, inputs, config, dynamic_shapes=dims)
    result = devplan.compile(ep)
    assert_calls_quantized_kernels(result)
    for batch, smaller in smaller_batches(args):
        want = eager(module, smaller)
        assert_outputs(run_devplan(result.data, smaller), want, f"devplan's runtime, batch {batch}")
        assert_outputs(run_executorch(result.data, smaller)[0], want, f"ExecuTorch's runtime, batch {batch}")
    assert_plans_no_more_than_executorch(ep, result.data)
    assert_weights_stay_int8(ep, result)


# delegated to cuda:0 (host memory standing in for it): devplan's runtime only
DELEGATED = {
    "mlp": (MLP, (randn(2, 8),)),
    "cnn": (CNN, (randn(1, 3, 8, 8),)),
    "mobilenet_block": MODELS["mobilenet_block"],
    "transformer_block": MODELS["transformer_block"],
    "cat_conv": MODELS["cat_conv"],
    "lstm": MODELS["lstm"],
}
SPLITS = {"all": ["cuda:0"], "linear_conv": ["cuda:0=aten::linear,aten::conv2d,aten::convolution"]}


def delegate_cases():
    for model in DELEGATED:
        for config in CONFIGS:
            for split in SPLITS:
                yield pytest.param(model, config, split, id=f"{model}-{config}-{split}")


def kernels_anywhere(result) -> set[str]:
    """The operators the program calls on the host and inside its delegates' payloads."""
    from devplan.pte.reader import text

    found = {k.op for k in result.planned.method.kernels if k.delegate is None}
    for delegate in result.planned.method.delegates:
        payload = devplan.read_pte(delegate.payload).program.executionPlan[0]
        found |= {
            f"{text(op.name)}.{text(op.overload)}" if text(op.overload) else text(op.name) for op in payload.operators
        }
    return found


@pytest.mark.parametrize("model,config,split", delegate_cases())
def test_delegated_quantized_model(model, config, split):
    make, inputs = DELEGATED[model]
    ep, module, args = quantize(make, inputs, config)
    want = eager(module, args)
    result = devplan.compile(ep, delegates=SPLITS[split])
    assert result.planned.method.delegates, "nothing was delegated"
    assert kernels_anywhere(result) & QUANTIZED_KERNELS, "no quantized kernel anywhere"
    from devplan.runtime import HostAllocator, registered

    with registered("cuda", HostAllocator()):
        runs = devplan.runtime.run(result.data, list(args), runs=2)
    for run in runs:
        assert_outputs(run, want, "devplan's runtime")


@pytest.mark.parametrize("config", list(CONFIGS))
def test_delegated_quantized_model_with_a_dynamic_batch(config):
    make, inputs = DYNAMIC_BATCH["mlp"]
    ep, module, args = quantize(make, inputs, config, dynamic_shapes=({0: Dim("batch", min=1, max=BOUND)},))
    result = devplan.compile(ep, delegates=["cuda:0"])
    assert result.planned.method.delegates and kernels_anywhere(result) & QUANTIZED_KERNELS
    for batch, smaller in smaller_batches(args):
        assert_outputs(
            run_devplan(result.data, smaller, devices_on_host=True),
            eager(module, smaller),
            f"devplan's runtime, batch {batch}",
        )
