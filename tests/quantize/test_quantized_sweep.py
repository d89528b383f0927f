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
import torch.nn.functional as F
from torch import nn
from torch.export import Dim
from torch.utils import _pytree as pytree

import devplan
import devplan.runtime
from testbed.executorch import executorch_pte
from testbed.models import pt2e_quantize, run_executorch
from tests.quantize.test_quantized import QUANTIZED_KERNELS, assert_calls_quantized_kernels, assert_weights_stay_int8
from tests.tiers import rotation

pytestmark = pytest.mark.sweep  # the slow tier: deselect with -m 'not sweep'

quantized_kernels = pytest.importorskip("executorch.kernels.quantized")

ATOL = 1e-5


# ---------------------------------------------------------------------------- the models


class ConvStridePadDilation(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=2, dilation=2)

    def forward(self, x):
        return F.relu(self.conv(x))


class ConvNoBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, (3, 2), stride=(1, 2), padding=(1, 0), bias=False)

    def forward(self, x):
        return self.conv(x)


class ConvBatchNorm(nn.Module):
    """Eval-mode batch norm, folded into the convolution by prepare_pt2e."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class Depthwise(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.BatchNorm2d(8)

    def forward(self, x):
        return F.relu6(self.bn(self.conv(x)))


class Grouped(nn.Module):
    def __init__(self):
        super().__init__()
        self.grouped = nn.Conv2d(8, 16, 3, padding=1, groups=4)
        self.wide = nn.Conv2d(16, 8, (1, 3), stride=(1, 2), padding=(0, 2), bias=False)

    def forward(self, x):
        return self.wide(self.grouped(x))


class Conv1d(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3, stride=2, padding=2, dilation=2)

    def forward(self, x):
        return F.relu(self.conv(x))


class ConvTranspose(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1)

    def forward(self, x):
        return F.relu(self.up(x))


class ConvTransposeNoBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 8, 2, stride=2, bias=False)

    def forward(self, x):
        return self.up(x)


class ConvTransposeBatchNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.bn = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1), nn.BatchNorm2d(6)

    def forward(self, x):
        return F.relu(self.bn(self.up(x)))


class ConvReflectPad(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect")

    def forward(self, x):
        return self.conv(x)


class Upsample(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        return self.b(F.interpolate(self.a(x), scale_factor=2, mode="nearest"))


class SqueezeExcite(nn.Module):
    """MobileNetV3's squeeze-and-excite: a pooled gate (relu, hardsigmoid) multiplied back in."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.reduce, self.expand = nn.Conv2d(8, 4, 1), nn.Conv2d(4, 8, 1)

    def forward(self, x):
        h = self.conv(x)
        gate = F.hardsigmoid(self.expand(F.relu(self.reduce(F.adaptive_avg_pool2d(h, 1)))))
        return h * gate


class MaxPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        return F.max_pool2d(F.relu(self.conv(x)), 3, stride=2, padding=1)


class AvgPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.after = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.after(F.avg_pool2d(self.conv(x), 2))


class PoolHead(nn.Module):
    """Adaptive average pool and a linear classifier head."""

    def __init__(self):
        super().__init__()
        self.conv, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.Linear(8, 5)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(F.relu(self.conv(x)), 1), 1))


class InvertedResidual(nn.Module):
    """A MobileNetV2/V3-style block: expand (hardswish), depthwise (relu6), project, residual add."""

    def __init__(self, channels=8, expanded=16):
        super().__init__()
        self.expand, self.bn1 = nn.Conv2d(channels, expanded, 1, bias=False), nn.BatchNorm2d(expanded)
        self.dw = nn.Conv2d(expanded, expanded, 3, padding=1, groups=expanded, bias=False)
        self.bn2 = nn.BatchNorm2d(expanded)
        self.project, self.bn3 = nn.Conv2d(expanded, channels, 1, bias=False), nn.BatchNorm2d(channels)

    def forward(self, x):
        h = F.hardswish(self.bn1(self.expand(x)))
        h = F.relu6(self.bn2(self.dw(h)))
        return x + self.bn3(self.project(h))


class MobileNetLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem, self.bn = nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8)
        self.block = InvertedResidual()
        self.head = nn.Linear(8, 6)

    def forward(self, x):
        h = self.block(F.hardswish(self.bn(self.stem(x))))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


class LinearNoBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(12, 24, bias=False), nn.Linear(24, 6, bias=False)

    def forward(self, x):
        return self.b(F.relu(self.a(x)))


class LinearBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 8)

    def forward(self, x):
        return self.fc(x)


class SharedLinear(nn.Module):
    """One weight used twice."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(torch.tanh(self.fc(x)))


class Matmul(nn.Module):
    """Matmuls of two activations (batched, and one broadcast over a weight-like input)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 6), nn.Linear(8, 6)

    def forward(self, x):
        a, b = self.a(x), self.b(x)
        return torch.matmul(a, b.transpose(-1, -2)), torch.bmm(a.transpose(1, 2), b)


class Cat(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(3, 6, 1)
        self.after = nn.Conv2d(10, 4, 1)

    def forward(self, x):
        joined = torch.cat([F.relu(self.a(x)), self.b(x)], 1)
        return self.after(joined), joined


class CatLinear(nn.Module):
    """cat along the last dim, and of a quantized tensor with itself."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(8, 4), nn.Linear(8, 4), nn.Linear(16, 4)

    def forward(self, x):
        a = self.a(x)
        return self.c(torch.cat([a, self.b(x), a, a], -1))


class AddTwo(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        return self.a(x) + self.b(x)


class AddRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(4, 4, 1)

    def forward(self, x):
        return F.relu(self.a(x) + self.b(x))


class MulTwo(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        return self.a(x) * torch.sigmoid(self.b(x)), F.relu(self.a(x) * self.b(x))


class AddInputs(nn.Module):
    """Quantized adds and muls of the user's own inputs, broadcast."""

    def forward(self, x, y):
        return x + y, x * y


class TransformerBlock(nn.Module):
    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.up, self.down = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attention = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, -1)
        x = x + self.proj((attention @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class LSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn, self.fc = nn.LSTM(8, 12, batch_first=True), nn.Linear(12, 4)

    def forward(self, x):
        return self.fc(self.rnn(x)[0])


class GRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn, self.fc = nn.GRU(8, 12, batch_first=True), nn.Linear(12, 4)

    def forward(self, x):
        return self.fc(self.rnn(x)[0])


class EmbeddingLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.table, self.fc = nn.Embedding(32, 16), nn.Linear(16, 4)

    def forward(self, tokens):
        return self.fc(self.table(tokens))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.b(F.relu(self.a(x)))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        return self.fc(torch.flatten(F.max_pool2d(F.relu(self.conv(x)), 2), 1))


def tokens(*shape):
    return lambda: torch.randint(0, 32, shape)


def randn(*shape):
    return lambda: torch.randn(*shape)


# name -> (module class, input makers)
MODELS = {
    "conv_stride_pad_dilation": (ConvStridePadDilation, (randn(1, 3, 9, 9),)),
    "conv_no_bias": (ConvNoBias, (randn(2, 3, 6, 7),)),
    "conv_bn_relu": (ConvBatchNorm, (randn(1, 3, 8, 8),)),
    "depthwise_bn_relu6": (Depthwise, (randn(1, 8, 6, 6),)),
    "grouped_conv": (Grouped, (randn(1, 8, 6, 6),)),
    "conv1d": (Conv1d, (randn(2, 4, 12),)),
    "conv_transpose": (ConvTranspose, (randn(1, 4, 4, 4),)),
    "conv_transpose_no_bias": (ConvTransposeNoBias, (randn(1, 4, 3, 3),)),
    "conv_transpose_bn_relu": (ConvTransposeBatchNorm, (randn(1, 4, 4, 4),)),
    "conv_reflect_pad": (ConvReflectPad, (randn(1, 3, 6, 6),)),
    "upsample_nearest": (Upsample, (randn(1, 3, 4, 4),)),
    "squeeze_excite": (SqueezeExcite, (randn(1, 3, 6, 6),)),
    "max_pool": (MaxPool, (randn(1, 3, 8, 8),)),
    "avg_pool": (AvgPool, (randn(1, 3, 8, 8),)),
    "adaptive_pool_linear": (PoolHead, (randn(2, 3, 6, 6),)),
    "mobilenet_block": (MobileNetLike, (randn(1, 3, 12, 12),)),
    "linear_no_bias": (LinearNoBias, (randn(3, 12),)),
    "linear_1d": (LinearBias, (randn(16),)),
    "linear_3d": (LinearBias, (randn(2, 5, 16),)),
    "shared_linear": (SharedLinear, (randn(3, 8),)),
    "linear_4d": (LinearBias, (randn(2, 3, 2, 16),)),
    "matmul": (Matmul, (randn(2, 5, 8),)),
    "cat_conv": (Cat, (randn(1, 3, 6, 6),)),
    "cat_linear": (CatLinear, (randn(3, 8),)),
    "add_two": (AddTwo, (randn(4, 8),)),
    "add_relu": (AddRelu, (randn(1, 4, 5, 5),)),
    "mul_two": (MulTwo, (randn(4, 8),)),
    "add_mul_inputs": (AddInputs, (randn(3, 8), randn(1, 8))),
    "transformer_block": (TransformerBlock, (randn(2, 6, 16),)),
    "lstm": (LSTM, (randn(2, 3, 8),)),
    "gru": (GRU, (randn(2, 3, 8),)),
    "embedding_linear": (EmbeddingLinear, (tokens(2, 5),)),
}

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
