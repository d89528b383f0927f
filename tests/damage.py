"""Damaged copies of a program for fuzz tests (a few bytes overwritten at random places, or the
file cut short), and what the `devplan` command makes of one: shared by the fuzz test in CI
and the long run in benchmarks/fuzz.py."""
from __future__ import annotations

import contextlib
import io
import random
import signal
from functools import cache

LIMIT_S = 5  # a command taking longer on a small file is a hang
COMMANDS = (["inspect"], ["inspect", "--json"], ["check"], ["run", "--max-memory", "256MiB", "--devices-on-host"])


def flip_bytes(data: bytes, rng: random.Random, most: int) -> bytes:
    """`data` with 1 to `most` bytes set to random values."""
    variant = bytearray(data)
    for _ in range(rng.randint(1, most)):
        variant[rng.randrange(len(variant))] = rng.randrange(256)
    return bytes(variant)


def mutant(data: bytes, rng: random.Random) -> bytes:
    """A few random bytes changed, or the file cut short."""
    if rng.random() < 0.15:
        return data[: rng.randrange(len(data))]
    return flip_bytes(data, rng, most=4)


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang


@cache
def _command():
    """The click command behind `devplan`, made once: typer builds it from the app's
    signatures on every call (20 ms, more than most commands take on a small file)."""
    import typer

    from devplan.cli import app

    return typer.main.get_command(app)


def outcome(path, command: list[str]) -> str:
    """'ok', 'refused', or what escaped. The command runs as `devplan.cli.main` runs it (click
    outside standalone mode, so its exit code comes back), its output thrown away: exit 0 is
    ok, exit 1 (check's failed buffer) or a DevplanError (exit 2) refused, anything else
    escaped, a command over LIMIT_S seconds included."""
    from devplan.errors import DevplanError

    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(LIMIT_S)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            code = _command().main([command[0], str(path), *command[1:]], prog_name="devplan", standalone_mode=False)
    except DevplanError:
        return "refused"
    except Exception as error:  # noqa: BLE001 - what escapes is the finding
        return f"{type(error).__name__}: {error}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return "ok" if not code else "refused"  # check exits 1 when a buffer fails
