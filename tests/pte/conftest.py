"""Programs lowered by ExecuTorch 1.5.1 (the reference writer), built once per session."""

from __future__ import annotations

import pytest
import torch

from testbed.small_programs import NoConstants, affine_case_made, lower_with_executorch, plain_program, xnnpack_program


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
