"""Programs for the inspector tests, written to files once per session: what ExecuTorch
lowers (lowered.py) and what programs.py builds by hand; and, once per module that asks, two
delegates' windows as compiled and moved under live tensors (blocks)."""

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


@pytest.fixture(scope="module")
def blocks(tmp_path_factory):
    """Two cuda:0 delegates whose working memory is a window at byte 1024 of the device buffer,
    and the same program with both windows moved to byte 0, over tensors alive at their calls."""
    from tests.runtime.test_device_arena import two_blocks

    folder = tmp_path_factory.mktemp("windows")
    data = two_blocks().data
    # both delegates' compile specs read the one string compile writes for them (pte/sharing.py):
    # replacing it moves both windows
    assert data.count(b"mem_id=2,offset=1024") == 1
    paths = {"good": folder / "blocks.pte", "moved": folder / "moved.pte"}
    paths["good"].write_bytes(data)
    paths["moved"].write_bytes(data.replace(b"mem_id=2,offset=1024", b"mem_id=2,offset=0000"))
    return paths
