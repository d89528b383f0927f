"""Bounded fuzzing in CI: byte-flipped and truncated copies of programs (devplan's, one with a
delegate, ExecuTorch's) through inspect, inspect --json, check and run in this process. Each
either works or is refused as bad input (exit 2); nothing else escapes and nothing takes more
than a few seconds."""
from __future__ import annotations

import random

import pytest

from tests.damage import COMMANDS, mutant, outcome
from tests.tiers import tiered

MUTANTS = 60  # per program: 4 programs x 4 commands, well under a minute


@pytest.fixture(scope="module")
def programs(executorch_programs) -> dict[str, bytes]:
    from tests.runtime.test_strict_runtime import compiled

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
