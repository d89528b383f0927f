"""Mixture-of-experts routing (issue 28): the ops that count tokens per expert (histc,
bincount, scatter_add and index_add counts) and the grouped products of the experts
(aten._grouped_mm, transformers::grouped_mm_fallback) compile to portable kernels and run
on ExecuTorch's runtime and devplan's as eager does; a graph calling a library's op that the
loading process has not registered is refused with the --kernels option that registers it.

The three MoE families of the transformers corpus, in both grad modes, run in
tests/compile/test_transformers_corpus.py (sweep tier); Mixtral under no_grad runs here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import devplan
from devplan.errors import DevplanError
from testbed.models import eager_outputs, run_executorch

ROOT = Path(__file__).resolve().parents[2]


def _runs_as_eager(module: nn.Module, args: tuple, grad: bool = False, **tolerance) -> devplan.compiler.CompileResult:
    """Export (non-strict, in the grad mode given), compile, and compare both runtimes with eager."""
    with torch.set_grad_enabled(grad):
        ep = torch.export.export(module, args, strict=False)
    result = devplan.compile(ep)
    (want,) = eager_outputs(module, args)
    for runtime, (got,) in (
        ("devplan", devplan.run(result.data, list(args))),
        ("executorch", run_executorch(result.data, args)),
    ):
        assert len(got) == len(want), runtime
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, **tolerance, msg=lambda m: f"{runtime}: {m}")
    return result


def _calls(result: devplan.compiler.CompileResult) -> set[str]:
    return {kernel.op for kernel in result.planned.method.kernels}


class Histc(nn.Module):
    def __init__(self, bins: int, low: float, high: float):
        super().__init__()
        self.bins, self.low, self.high = bins, low, high

    def forward(self, x):
        return torch.histc(x, bins=self.bins, min=self.low, max=self.high)


# values below, at and above the range, on bin edges, and at its maximum (the last bin's)
_EDGES = torch.tensor([-1.0, 0.0, 0.5, 0.75, 1.0, 1.5, 2.25, 2.9999, 3.0, 3.5, 7.0])


@pytest.mark.parametrize(
    "bins,low,high,x",
    [
        (4, 0, 3, _EDGES),  # transformers' routing: bins = experts, max = experts - 1
        (5, -0.5, 2.25, _EDGES),
        (1, 0, 3, _EDGES),
        (7, -2, 2, torch.randn(3, 5, generator=torch.Generator().manual_seed(0))),  # any shape counts as flat
        (3, 0, 0, _EDGES),  # min == max: the data's own range
        (3, 1, 1, torch.full((5,), 2.0)),  # ... one value: widened by one each way
    ],
    ids=["routing", "fractional", "one-bin", "2d", "data-range", "one-value"],
)
def test_histc(bins, low, high, x):
    result = _runs_as_eager(Histc(bins, low, high), (x,), rtol=0, atol=0)
    assert "aten::histc.out" not in _calls(result)


class Bincount(nn.Module):
    def __init__(self, size: int, weighted: bool):
        super().__init__()
        self.size, self.weighted = size, weighted

    def forward(self, x, w):
        counts = torch.bincount(x, weights=w if self.weighted else None, minlength=self.size)
        torch._check(counts.shape[0] == self.size)  # the size export needs, which the data would choose
        return counts


@pytest.mark.parametrize("weighted", [False, True], ids=["counts", "weighted"])
def test_bincount_at_the_size_the_model_gives(weighted):
    x, w = torch.tensor([0, 3, 1, 1, 5, 3, 3, 0]), torch.rand(8, generator=torch.Generator().manual_seed(0))
    result = _runs_as_eager(Bincount(6, weighted), (x, w))
    assert "aten::bincount.out" not in _calls(result)


def test_bincount_of_a_size_only_the_data_decides_is_one_line():
    class Unbounded(nn.Module):
        def forward(self, x):
            return torch.bincount(x, minlength=4)

    ep = torch.export.export(Unbounded(), (torch.tensor([0, 3, 1]),), strict=False)
    with pytest.raises(
        DevplanError,
        match=r"node bincount: op aten\.bincount\.default returns as many counts .*"
        r"torch\._check\(counts\.shape\[0\] == N\)",
    ) as refused:
        devplan.compile(ep)
    assert "\n" not in str(refused.value)


class Counts(nn.Module):
    """Tokens per expert counted the other ways routing code counts them."""

    def forward(self, experts):
        ones = torch.ones_like(experts)
        scattered = torch.zeros(4, dtype=torch.long).scatter_add_(0, experts, ones)
        indexed = torch.zeros(4).index_add_(0, experts, ones.float())
        hot = nn.functional.one_hot(experts, 4).sum(0)
        return scattered, indexed, hot


@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
def test_scatter_add_and_index_add_counts(grad):
    _runs_as_eager(Counts(), (torch.tensor([0, 3, 1, 1, 2, 3, 3, 0]),), grad=grad, rtol=0, atol=0)


class GroupedMM(nn.Module):
    def __init__(self, weight: torch.Tensor, offs: torch.Tensor | None, transposed: bool = False):
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.register_buffer("offs", offs)
        self.transposed = transposed

    def forward(self, x):
        weight = self.weight.transpose(-2, -1) if self.transposed else self.weight
        return nn.functional.grouped_mm(x, weight, offs=self.offs)


def _randn(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(len(shape))).to(torch.bfloat16)


# bfloat16, the one type torch's export takes for _grouped_mm; torch's CPU kernel needs rows of
# 16 bytes; every offset list ends at the grouped size (the rows past it are left
# uninitialized by torch's kernel, zeros by the decomposition)
@pytest.mark.parametrize(
    "x,weight,offs,transposed",
    [
        (
            _randn(8, 8),
            _randn(3, 8, 16),
            torch.tensor([2, 2, 8], dtype=torch.int32),
            False,
        ),  # rows grouped, one empty group
        (
            _randn(8, 8),
            _randn(3, 16, 8),
            torch.tensor([3, 5, 8], dtype=torch.int32),
            True,
        ),  # as transformers passes weights
        (
            _randn(8, 16),
            _randn(16, 8),
            torch.tensor([8, 8, 16], dtype=torch.int32),
            False,
        ),  # the shared dimension grouped
        (_randn(3, 8, 16), _randn(24, 16), torch.tensor([8, 16, 24], dtype=torch.int32), True),  # columns grouped
        (_randn(3, 8, 16), _randn(3, 16, 8), None, False),  # batched
    ],
    ids=["rows", "rows-transposed", "shared", "columns", "batched"],
)
def test_grouped_mm(x, weight, offs, transposed):
    result = _runs_as_eager(GroupedMM(weight, offs, transposed), (x,), rtol=1.6e-2, atol=1e-2)
    assert not any("grouped_mm" in op for op in _calls(result))


@pytest.fixture(scope="module")
def mixtral():
    from testbed.hf_models import mixtral

    module, args, _ = mixtral()
    with torch.no_grad():
        ep = torch.export.export(module, args, strict=False)
    return module, args, ep


def test_mixtral_runs_as_eager(mixtral):
    """One model of the MoE corpus in the fast tier: its routing calls the ops this file is about."""
    module, args, ep = mixtral
    calls = {str(node.target) for node in ep.graph.nodes if node.op == "call_function"}
    assert {"aten.histc.default", "transformers.grouped_mm_fallback.default"} <= calls
    result = devplan.compile(ep)
    want = module(*args).logits.detach()
    for runtime, (got,) in (
        ("devplan", devplan.run(result.data, list(args))),
        ("executorch", run_executorch(result.data, args)),
    ):
        torch.testing.assert_close(got[0], want, rtol=1e-4, atol=1e-5, msg=lambda m: f"{runtime}: {m}")


def _devplan(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "devplan", *map(str, args)], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


def _one_line(run: subprocess.CompletedProcess) -> str:
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1 and lines[0].startswith("devplan: error:"), run.stderr[-3000:]
    return lines[0]


@pytest.mark.sweep  # a Mixtral compiled in a fresh process, as the finding needs
def test_an_unregistered_op_names_the_kernels_option_that_registers_it(mixtral, tmp_path):
    """A fresh process has not imported transformers, whose import registers the routing's
    grouped_mm_fallback: the .pt2 is refused in one line naming the op and --kernels
    transformers, with which it compiles."""
    path = tmp_path / "mixtral.pt2"
    torch.export.save(mixtral[2], path)
    line = _one_line(_devplan("compile", path, "-o", tmp_path / "m.pte"))
    assert "transformers::grouped_mm_fallback" in line and line.endswith("pass --kernels transformers")
    run = _devplan("compile", path, "-o", tmp_path / "m.pte", "--kernels", "transformers")
    assert run.returncode == 0 and "wrote" in run.stdout, run.stderr[-3000:]


def test_kernels_of_a_module_that_does_not_import_is_one_line(tmp_path):
    line = _one_line(
        _devplan("compile", ROOT / "samples" / "mlp.pt2", "-o", tmp_path / "m.pte", "--kernels", "no_such_op_library")
    )
    assert "--kernels no_such_op_library: cannot import it (No module named 'no_such_op_library')" in line
    with pytest.raises(DevplanError, match="--kernels no such: not a Python module name"):
        devplan.compile(ROOT / "samples" / "mlp.pt2", kernels=["no such"])
    # a module that imports compiles as before
    assert devplan.compile(ROOT / "samples" / "mlp.pt2", kernels="json").data


@pytest.mark.sweep
@pytest.mark.parametrize("family", ["mixtral", "qwen2_moe", "qwen3_moe"])
def test_moe_with_a_dynamic_sequence_runs_at_every_length(family):
    """The routing's sizes follow the prompt's length (tokens times experts per token):
    planned at the bound, the program takes any length within it."""
    from testbed.hf_models import MOE_FAMILIES

    module, args, _ = MOE_FAMILIES[family]()
    with torch.no_grad():
        ep = torch.export.export(
            module, args, dynamic_shapes=({1: torch.export.Dim("seq", min=2, max=16)},), strict=False
        )
    result = devplan.compile(ep)
    for length in (2, 5, 16):
        ids = torch.randint(3, 128, (1, length), generator=torch.Generator().manual_seed(length))
        want = module(ids).logits.detach()
        for runtime, (got,) in (
            ("devplan", devplan.run(result.data, [ids])),
            ("executorch", run_executorch(result.data, (ids,))),
        ):
            torch.testing.assert_close(got[0], want, rtol=1e-4, atol=1e-5, msg=lambda m: f"{runtime} {length}: {m}")
