"""Programs for the inspector tests, written to files once per session: what ExecuTorch
lowers (lowered.py) and what programs.py builds by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed import programs
from tests.inspection import lowered as lowered_programs


@pytest.fixture(scope="session")
def lowered(tmp_path_factory) -> dict[str, Path]:
    """Name (lowered.NAMES) -> path of the .pte that ExecuTorch wrote."""
    return _write(tmp_path_factory.mktemp("lowered"), lowered_programs.lower_all())


@pytest.fixture(scope="session")
def hand_built(tmp_path_factory) -> dict[str, Path]:
    data = {"lifetimes": programs.lifetimes_program(), "cuda": programs.cuda_program()}
    return _write(tmp_path_factory.mktemp("hand_built"), data)


def _write(directory: Path, programs_by_name: dict[str, bytes]) -> dict[str, Path]:
    paths = {}
    for name, data in programs_by_name.items():
        paths[name] = directory / f"{name}.pte"
        paths[name].write_bytes(data)
    return paths
