"""Bounded fuzzing in CI: byte-flipped and truncated copies of programs (devplan's, one with a
delegate, ExecuTorch's) through inspect, inspect --json, check and run in this process. Each
either works or is refused as bad input (exit 2); nothing else escapes and nothing takes more
than a few seconds."""
from __future__ import annotations

import random
import signal

import pytest
from typer.testing import CliRunner

from devplan.cli import app
from devplan.errors import DevplanError
from tests.damage import flip_bytes

MUTANTS = 60  # per program: 4 programs x 4 commands, well under a minute
LIMIT_S = 5
COMMANDS = (["inspect"], ["inspect", "--json"], ["check"], ["run", "--max-memory", "256MiB", "--devices-on-host"])


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang


def mutant(data: bytes, rng: random.Random) -> bytes:
    """A few random bytes changed, or the file cut short."""
    if rng.random() < 0.15:
        return data[: rng.randrange(len(data))]
    return flip_bytes(data, rng, most=4)


def outcome(path, command: list[str]) -> str:
    """'ok', 'refused', or what escaped: the CLI's own error handling sees DevplanError as exit 2."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(LIMIT_S)
    try:
        result = CliRunner().invoke(app, [command[0], str(path), *command[1:]])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    if result.exception is None or isinstance(result.exception, SystemExit):
        return "ok" if result.exit_code == 0 else "refused"  # check exits 1 when a buffer fails
    if isinstance(result.exception, DevplanError):
        return "refused"
    return f"{type(result.exception).__name__}: {result.exception}"


@pytest.fixture(scope="module")
def programs(executorch_programs) -> dict[str, bytes]:
    from tests.runtime.test_strict_runtime import compiled

    return {"devplan": compiled(), "delegated": compiled(delegates=["cuda:0"]),
            "executorch_affine": executorch_programs["affine"], "executorch_xnnpack": executorch_programs["xnnpack"]}


@pytest.mark.parametrize("which", ["devplan", "delegated", "executorch_affine", "executorch_xnnpack"])
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
