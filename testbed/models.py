"""Corpus of tiny models for compile tests and benchmarks, plus ExecuTorch oracle helpers.

Every CORPUS entry returns a fresh eval-mode module with deterministic weights and
its example args. `export`, `pt2e_quantize` and `run_executorch` take a model
through torch.export and ExecuTorch 1.5.1 (the reference implementation; its default
lowering is testbed.executorch.executorch_pte); this module lives in testbed/ because
devplan itself must never import executorch.

Import it from the repository root as `testbed.models` (it reuses the encoder block
from samples/make_samples.py).
"""

from __future__ import annotations

import copy
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils import _pytree as pytree

from samples.make_samples import EncoderBlock
from testbed.lowerings import patterns_exported_once

SEED = 0

Case = tuple[nn.Module, tuple[Tensor, ...]]


def _randomize_batch_norm(module: nn.Module) -> nn.Module:
    # Freshly built batch norms have mean 0 / var 1, which makes eval-mode batch
    # norm an identity that would hide folding or constant mistakes.
    for child in module.modules():
        if isinstance(child, nn.modules.batchnorm._BatchNorm):
            child.running_mean.uniform_(-0.5, 0.5)
            child.running_var.uniform_(0.5, 2.0)
    return module


def _case(make_module: Callable[[], nn.Module], make_args: Callable[[], tuple[Tensor, ...]]) -> Callable[[], Case]:
    def build() -> Case:
        torch.manual_seed(SEED)
        module = _randomize_batch_norm(make_module()).eval()
        return module, make_args()

    return build


def _randn(*shapes: tuple[int, ...]) -> Callable[[], tuple[Tensor, ...]]:
    return lambda: tuple(torch.randn(*shape) for shape in shapes)


class Linear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 8)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(x)


class LinearNoBias(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(12, 24, bias=False)
        self.fc2 = nn.Linear(24, 6)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class ConvBnRelu(nn.Module):
    """Strided, padded convolution followed by eval-mode batch norm."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, kernel_size=3, stride=2, padding=1)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.bn(self.conv(x)))


class GroupedConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.grouped = nn.Conv2d(8, 16, kernel_size=3, padding=1, groups=4)
        self.wide = nn.Conv2d(16, 8, kernel_size=(1, 3), stride=(1, 2), padding=(0, 2), bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.wide(self.grouped(x))


class DepthwiseSeparable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.depthwise = nn.Conv2d(8, 8, kernel_size=3, padding=1, groups=8, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.pointwise = nn.Conv2d(8, 16, kernel_size=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)

    def forward(self, x: Tensor) -> Tensor:
        x = F.hardswish(self.bn1(self.depthwise(x)))
        return F.relu6(self.bn2(self.pointwise(x)))


class Activations(nn.Module):
    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        return (
            torch.relu(x),
            F.relu6(x * 4),
            F.hardswish(x * 4),
            F.gelu(x),
            torch.sigmoid(x),
            torch.tanh(x),
            F.silu(x),
        )


class GatedMLP(nn.Module):
    """SiLU-gated feed-forward as in small language models."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(16, 32)
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 16)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Pooling(nn.Module):
    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        return (
            F.max_pool2d(x, kernel_size=3, stride=2, padding=1),
            F.avg_pool2d(x, kernel_size=2),
            F.adaptive_avg_pool2d(x, (1, 1)),
            # 9 rows into 2 and 9 columns into 3: uneven, overlapping windows.
            F.adaptive_avg_pool2d(x, (2, 3)),
        )


class MatmulBmm(nn.Module):
    def forward(self, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
        return torch.matmul(a, b), torch.bmm(a, b)


class Softmaxes(nn.Module):
    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return torch.softmax(x, dim=-1), torch.log_softmax(x, dim=1)


class LayerNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(24)
        nn.init.uniform_(self.norm.weight, 0.5, 1.5)
        nn.init.uniform_(self.norm.bias, -0.5, 0.5)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(x)


class Embedding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Embedding(32, 16)
        self.head = nn.Linear(16, 4)

    def forward(self, tokens: Tensor) -> Tensor:
        return self.head(self.table(tokens))


class CatSplitChunk(nn.Module):
    def forward(self, x: Tensor, y: Tensor) -> tuple[Tensor, ...]:
        joined = torch.cat([x, y], dim=1)
        first, second, third = torch.split(joined, [2, 3, 5], dim=1)
        left, right = torch.chunk(joined, 2, dim=0)
        return first * 2, second + third[:, :3], left - right


class ShapeOps(nn.Module):
    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        viewed = x.view(2, 12, 4)
        reshaped = x.reshape(6, 16)
        permuted = x.permute(2, 0, 1).contiguous()
        transposed = x.transpose(0, 1) + 1
        flat = torch.flatten(x, 1)
        expanded = torch.unsqueeze(flat, 1) * 3
        return viewed, reshaped, permuted, transposed, expanded


class Upsample(nn.Module):
    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        nearest = F.interpolate(x, scale_factor=2, mode="nearest")
        bilinear = F.interpolate(x, size=(6, 10), mode="bilinear", align_corners=False)
        return nearest, bilinear


class Reductions(nn.Module):
    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return x.mean(dim=-1), x.sum(dim=(0, 2), keepdim=True), x.mean(dim=[1, 2])


class ScalarArithmetic(nn.Module):
    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        return x * 2 + 1, x - 0.5, x / 3, x.pow(2), torch.pow(x.abs() + 1, 0.5)


class Slicing(nn.Module):
    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return x[:, 1:5], x[::2, -3:], x[1:3, 2:8:3]


class MultiInputNested(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: Tensor, y: Tensor, z: Tensor) -> tuple[Tensor, tuple[Tensor, tuple[Tensor, Tensor]]]:
        h = self.proj(x) + y
        return h, (torch.sigmoid(h) * z, (x - z, torch.cat([y, z], dim=0)))


class ConstantBuffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 8).reshape(1, 8))
        self.register_buffer("offset", torch.randn(1, 8))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.scale + self.offset


class Accumulator(nn.Module):
    """Adds every input into a persistent buffer; each call sees the previous calls."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.randn(1, 8))

    def forward(self, x: Tensor) -> Tensor:
        self.state.add_(x)
        return self.state * 2


class RollingCache(nn.Module):
    """Shift-register cache: drops the oldest row and appends the new one, like a tiny KV cache."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(4, 8))
        self.proj = nn.Linear(8, 8)

    def forward(self, x: Tensor) -> Tensor:
        self.cache.copy_(torch.cat([self.cache[1:], self.proj(x)], dim=0))
        return self.cache.sum(dim=0, keepdim=True)


class TransformerEncoder(nn.Module):
    def __init__(self, layers: int, dim: int, heads: int) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*(EncoderBlock(dim, heads, hidden=2 * dim) for _ in range(layers)))
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.blocks(x))


class ResidualBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: Tensor) -> Tensor:
        h = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(h)))


class ResidualCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, kernel_size=3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.blocks = nn.Sequential(ResidualBlock(8), ResidualBlock(8))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(8, 5)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))


CORPUS: dict[str, Callable[[], Case]] = {
    "linear": _case(Linear, _randn((4, 16))),
    "linear_no_bias": _case(LinearNoBias, _randn((3, 12))),
    "conv_bn_relu": _case(ConvBnRelu, _randn((1, 3, 16, 16))),
    "grouped_conv": _case(GroupedConv, _randn((1, 8, 10, 10))),
    "depthwise_separable": _case(DepthwiseSeparable, _randn((1, 8, 12, 12))),
    "activations": _case(Activations, _randn((4, 16))),
    "gated_mlp": _case(GatedMLP, _randn((2, 5, 16))),
    "pooling": _case(Pooling, _randn((1, 4, 9, 9))),
    "matmul_bmm": _case(MatmulBmm, _randn((3, 4, 5), (3, 5, 6))),
    "softmaxes": _case(Softmaxes, _randn((2, 6, 10))),
    "layer_norm": _case(LayerNorm, _randn((2, 5, 24))),
    "embedding": _case(Embedding, lambda: (torch.randint(0, 32, (2, 5), dtype=torch.int64),)),
    "cat_split_chunk": _case(CatSplitChunk, _randn((4, 4), (4, 6))),
    "shape_ops": _case(ShapeOps, _randn((4, 6, 4))),
    "upsample": _case(Upsample, _randn((1, 2, 3, 5))),
    "reductions": _case(Reductions, _randn((3, 4, 5))),
    "scalar_arithmetic": _case(ScalarArithmetic, _randn((3, 7))),
    "slicing": _case(Slicing, _randn((4, 10))),
    "multi_input_nested": _case(MultiInputNested, _randn((2, 8), (2, 8), (2, 8))),
    "constant_buffer": _case(ConstantBuffer, _randn((3, 8))),
    "accumulator": _case(Accumulator, _randn((1, 8))),
    "rolling_cache": _case(RollingCache, _randn((1, 8))),
    "transformer_encoder": _case(lambda: TransformerEncoder(layers=4, dim=32, heads=4), _randn((1, 8, 32))),
    "residual_cnn": _case(ResidualCNN, _randn((1, 3, 16, 16))),
}

# Models whose forward mutates a registered buffer, so repeated calls differ.
STATEFUL = frozenset({"accumulator", "rolling_cache"})


def transformer(layers: int) -> Case:
    """Benchmark-sized encoder stack: batch 1, sequence 32, width 64."""
    return _case(lambda: TransformerEncoder(layers=layers, dim=64, heads=4), _randn((1, 32, 64)))()


def export(name: str) -> tuple[torch.export.ExportedProgram, nn.Module, tuple[Tensor, ...]]:
    """Export corpus model `name`; the returned module still holds its initial buffer values."""
    module, args = CORPUS[name]()
    return torch.export.export(module, args, strict=False), module, args


def pt2e_quantize(
    module: nn.Module, args: tuple, dynamic_shapes=None, **config
) -> tuple[torch.export.ExportedProgram, nn.Module]:
    """PT2E-quantize `module` with ExecuTorch's XNNPACK quantizer (`config`: the keywords of
    get_symmetric_quantization_config, e.g. is_per_channel, is_dynamic), calibrated on `args`:
    (the exported quantized program, the converted module it was exported from)."""
    # executorch and torchao only when a test quantizes: every corpus test imports this module
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(**config))
    graph = torch.export.export(module.eval(), args, dynamic_shapes=dynamic_shapes, strict=False).module()
    with patterns_exported_once():  # the quantizer's own pattern exports, once per session
        prepared = prepare_pt2e(graph, quantizer)
    prepared(*args)
    converted = convert_pt2e(prepared)
    return torch.export.export(converted, args, dynamic_shapes=dynamic_shapes, strict=False), converted


def run_executorch(pte_bytes: bytes, args: tuple, runs: int = 1) -> list[list[Tensor]]:
    """Run `forward` of a .pte `runs` times on one loaded method; flat outputs per run."""
    from executorch.runtime import Runtime

    # Keep the program referenced while its method runs: the method borrows from it.
    program = Runtime.get().load_program(pte_bytes)
    method = program.load_method("forward")
    flat_inputs = pytree.tree_leaves(args)
    return [[output.clone() for output in method.execute(flat_inputs)] for _ in range(runs)]


def eager_outputs(module: nn.Module, args: tuple, runs: int = 1) -> list[list[Tensor]]:
    """Flat eager outputs of `runs` successive calls, on a copy so `module`'s buffers stay untouched."""
    module = copy.deepcopy(module)
    with torch.no_grad():
        # Clone so that an output aliasing a buffer keeps the value of its own call.
        return [[leaf.clone() for leaf in pytree.tree_leaves(module(*args))] for _ in range(runs)]


def eager_runs(module: nn.Module, calls: Sequence[tuple[tuple, dict]], mutated: Sequence[int] = ()) -> list[list]:
    """Flat eager outputs of successive calls on one copy of `module` (its state carries over),
    each call on fresh copies of its (args, kwargs); the flat inputs at positions `mutated`
    lead, as they are after the call (ExecuTorch returns inputs a program updates in place
    ahead of its outputs)."""
    module = copy.deepcopy(module)
    runs = []
    with torch.no_grad():
        for args, kwargs in calls:
            args, kwargs = copy.deepcopy((args, kwargs))
            outputs = pytree.tree_leaves(module(*args, **kwargs))
            inputs = pytree.tree_leaves((args, kwargs))
            runs.append(
                [leaf.clone() if isinstance(leaf, Tensor) else leaf for leaf in [inputs[i] for i in mutated] + outputs]
            )
    return runs


def mismatch(runtime: str, runs: list[list], want_runs: list[list]) -> str | None:
    """None when every run's flat outputs match, else 'MISMATCH ...' saying what differs:
    float32 at rtol=atol=1e-5; integers and bools exact; half types at their dtype's defaults."""
    for run, (got, want) in enumerate(zip(runs, want_runs, strict=True)):
        if len(got) != len(want):
            return f"MISMATCH {runtime} run {run}: {len(got)} outputs, eager has {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            if not isinstance(w, Tensor):
                if g != w:
                    return f"MISMATCH {runtime} run {run} output {i}: {g!r} instead of {w!r}"
                continue
            if not isinstance(g, Tensor):
                return f"MISMATCH {runtime} run {run} output {i}: {type(g).__name__} instead of a tensor"
            if (g.dtype, g.shape) != (w.dtype, w.shape):
                return (
                    f"MISMATCH {runtime} run {run} output {i}: {g.dtype}{tuple(g.shape)} instead of "
                    f"{w.dtype}{tuple(w.shape)}"
                )
            tolerance = {"rtol": 1e-5, "atol": 1e-5} if w.dtype == torch.float32 else {}
            try:
                torch.testing.assert_close(g, w, **tolerance)
            except AssertionError:
                err = (g.double() - w.double()).abs().max().item() if g.numel() else 0.0
                return f"MISMATCH {runtime} run {run} output {i}: max abs error {err:.3g}"
    return None


def assert_runs_match(got_runs: list[list[Tensor]], want_runs: list[list[Tensor]], **tolerance) -> None:
    """Each run's flat outputs equal the expected ones, as many and each close (assert_close's
    tolerance keywords pass through)."""
    for got, want in zip(got_runs, want_runs, strict=True):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, **tolerance)
