"""Bounded fuzzing in CI: byte-flipped and truncated copies of programs (devplan's, one with a
delegate, ExecuTorch's) through inspect, inspect --json, check and run in this process, and
changed copies of .pt2 archives (JSON fields and member names) through compile. Each either
works or is refused as bad input (exit 2); nothing else escapes, nothing prints a traceback,
no code from an archive runs and nothing takes more than a few seconds."""
from __future__ import annotations

import random

import pytest

from testbed.damage import COMMANDS, archive_bytes, archive_members, archive_mutant, mutant, outcome
from tests.tiers import tiered

MUTANTS = 60  # per program: 4 programs x 4 commands, well under a minute
ARCHIVE_MUTANTS = 15  # per archive: a compile each


@pytest.fixture(scope="module")
def programs(executorch_programs) -> dict[str, bytes]:
    from testbed.small_programs import compiled

    return {"devplan": compiled(), "delegated": compiled(delegates=["cuda:0"]),
            "executorch_affine": executorch_programs["affine"], "executorch_xnnpack": executorch_programs["xnnpack"]}


@pytest.mark.parametrize("which", tiered(["devplan", "delegated", "executorch_affine", "executorch_xnnpack"], ["delegated"]))
def test_mutants_work_or_are_refused(programs, which, tmp_path):
    rng = random.Random(17)
    escaped, seen = [], set()
    path = tmp_path / "fuzz.pte"
    for number in range(MUTANTS):
        path.write_bytes(mutant(programs[which], rng))
        for command in COMMANDS:
            result = outcome(path, command)
            seen.add(result if result in ("ok", "refused") else "escaped")
            if result not in ("ok", "refused"):
                escaped.append((number, command, result))
    assert not escaped, escaped[:5]
    assert seen >= {"ok", "refused"}


@pytest.mark.parametrize("which", tiered(["mlp", "dynamic"], ["mlp"]))
def test_archive_mutants_compile_or_are_refused_and_never_run_code(which, tmp_path):
    from testbed.small_programs import MLP, saved

    members = archive_members(MLP.read_bytes() if which == "mlp" else saved(which))
    rng, marker = random.Random(17), tmp_path / "marker"
    path, command = tmp_path / "fuzz.pt2", ["compile", "-o", str(tmp_path / "out.pte")]
    escaped, ran = [], []
    for number in range(ARCHIVE_MUTANTS):
        path.write_bytes(archive_bytes(archive_mutant(members, rng, marker)))
        result = outcome(path, command)
        if result not in ("ok", "refused"):
            escaped.append((number, result))
        if marker.exists():
            ran.append(number)
            marker.unlink()
    assert not escaped, escaped[:5]
    assert not ran, f"code from archive mutants {ran} ran"
