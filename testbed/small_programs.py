"""Small programs and archives as their real writers make them (programs.py builds its own
by hand): devplan's compile of a linear block (`compiled`, run on `ARGS`), ExecuTorch's
lowerings of three small modules (`executorch_made`), the block with its weights in a .ptd
(`with_data_file`, XNNPACK's payload too) and with more methods (`multi_method`), and .pt2 archives as
torch.export.save writes them (`MLP`, `saved`). Tests read, run and damage them;
benchmarks/fuzz.py mutates them."""

from __future__ import annotations

import functools
import io
import tempfile
from pathlib import Path

import torch
from torch import nn
from torch.export import Dim

import devplan

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "samples" / "mlp.pt2"


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 6)

    def forward(self, x):
        return (self.proj(x).relu() * 2).sum(0)


ARGS = (torch.randn(3, 4),)


def compiled(**options) -> bytes:
    return devplan.compile(torch.export.export(Block(), ARGS), **options).data


def with_data_file(**options) -> tuple[bytes, bytes]:
    """devplan's compile of the block with its weights in a .ptd (`external_constants`), with
    `options` (backends=["xnnpack"]: an XNNPACK payload whose weights the .ptd holds):
    (program, data file)."""
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as folder:
        ptd = Path(folder) / "weights.ptd"
        program = devplan.compile(torch.export.export(Block().eval(), ARGS), external_constants=ptd, **options).data
        return program, ptd.read_bytes()


def multi_method() -> bytes:
    """forward and batch5 (the block at another batch size, its weights stored once) and two
    constant methods, get_n and name."""
    torch.manual_seed(0)
    block = Block().eval()
    return devplan.compile(
        torch.export.export(block, ARGS),
        methods={"batch5": torch.export.export(block, (torch.randn(5, 4),))},
        constant_methods={"get_n": 3, "name": "hello"},
    ).data


# ------------------------------------------------------------------ ExecuTorch's programs


class Affine(torch.nn.Module):
    """Two constants (weight, bias) in the constant segment; the output is linear in the bias."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x)) * 2


class NoConstants(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * y + x


def lower_with_executorch(module: torch.nn.Module, args: tuple, partitioner: list | None = None) -> bytes:
    from executorch.exir import to_edge_transform_and_lower

    exported = torch.export.export(module.eval(), args)
    return to_edge_transform_and_lower(exported, partitioner=partitioner).to_executorch().buffer


def affine_case_made() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    return Affine().eval(), (torch.linspace(-1, 1, 8).reshape(2, 4),)


def plain_program() -> bytes:
    """No constants: ExecuTorch writes a bare FlatBuffer with no extended header."""
    return lower_with_executorch(NoConstants(), (torch.randn(2, 3), torch.randn(2, 3)))


def xnnpack_program() -> bytes:
    """A delegate whose payload is a segment, plus named data segments."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    torch.manual_seed(0)
    return lower_with_executorch(
        torch.nn.Sequential(torch.nn.Linear(4, 3)), (torch.randn(2, 4),), [XnnpackPartitioner()]
    )


def executorch_made() -> dict[str, bytes]:
    """ExecuTorch's programs by name, as tests/pte/conftest.py's fixtures hold them (benchmarks/fuzz.py too)."""
    return {
        "affine": lower_with_executorch(*affine_case_made()),
        "plain": plain_program(),
        "xnnpack": xnnpack_program(),
    }


# ------------------------------------------------------------------ .pt2 archives


class Dynamic(torch.nn.Module):
    """Sizes in expressions: a derived dim, a floor division and a modulus."""

    def forward(self, x, y):
        return x.reshape(-1, 2, x.shape[-1] // 2).sum(1), y[: x.shape[0] // 2 + 1] * 2, x.shape[0] % 3 + y.shape[1]


class Stateful(torch.nn.Module):
    """Writes its buffer in place, so devplan retraces it with run_decompositions."""

    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(4, 8))
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        self.total.add_(x)
        return self.linear(self.total)


@functools.cache
def saved(name: str) -> bytes:
    """The .pt2 bytes of one of the programs above ("dynamic" or "stateful"), exported and
    saved once per process."""
    if name == "dynamic":
        half, seq = 2 * Dim("half", min=1, max=32), Dim("seq", min=2, max=64)
        ep = torch.export.export(
            Dynamic(),
            (torch.randn(6, 8), torch.randn(7, 4)),
            dynamic_shapes={"x": {0: half, 1: 2 * Dim("k", min=1, max=16)}, "y": {0: half + 1, 1: seq}},
        )
    else:
        ep = torch.export.export(Stateful(), (torch.randn(4, 8),))
    buffer = io.BytesIO()
    torch.export.save(ep, buffer)
    return buffer.getvalue()
