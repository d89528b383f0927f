"""Programs lowered by ExecuTorch 1.5.1 (the reference writer), built once per session."""
from __future__ import annotations

import pytest
import torch


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
    return lower_with_executorch(torch.nn.Sequential(torch.nn.Linear(4, 3)), (torch.randn(2, 4),), [XnnpackPartitioner()])


def executorch_made() -> dict[str, bytes]:
    """ExecuTorch's programs by name, as the fixtures below hold them (benchmarks/fuzz.py too)."""
    return {"affine": lower_with_executorch(*affine_case_made()), "plain": plain_program(), "xnnpack": xnnpack_program()}


@pytest.fixture(scope="session")
def affine_case() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    return affine_case_made()


@pytest.fixture(scope="session")
def affine_pte(affine_case) -> bytes:
    """Has an extended header and one constant segment."""
    return lower_with_executorch(*affine_case)


@pytest.fixture(scope="session")
def plain_pte() -> bytes:
    return plain_program()


@pytest.fixture(scope="session")
def xnnpack_pte() -> bytes:
    return xnnpack_program()


@pytest.fixture(scope="session")
def executorch_programs(affine_pte, plain_pte, xnnpack_pte) -> dict[str, bytes]:
    return {"affine": affine_pte, "plain": plain_pte, "xnnpack": xnnpack_pte}


@pytest.fixture(scope="session")
def pt2_path(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("pt2") / "model.pte"
    torch.export.save(torch.export.export(NoConstants(), (torch.randn(2), torch.randn(2))), str(path))
    return str(path)
