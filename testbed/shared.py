"""Work the whole test run shares: the first process to ask for a key (an xdist worker, or a
test's child process) makes the value and saves it under the run's folder; the others load it.
A model exported once per run, rather than once per worker that happens to need it.

The folder is made by tests/conftest.py when the run starts and named in DEVPLAN_TEST_SHARED,
which the workers and their children inherit; without it (a script importing testbed) every
call makes its value afresh."""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # tests/conftest.py imports this module before anything may load torch
    import torch

FOLDER = "DEVPLAN_TEST_SHARED"


def shared_file(key: str, suffix: str, write: Callable[[Path], None]) -> Path | None:
    """The run's file for `key`, written by `write(path)` by the first process to ask (the others
    wait on its lock, then read what it wrote); None outside a test run."""
    folder = os.environ.get(FOLDER)
    if not folder:
        return None
    # readable names for whoever looks in the folder, the digest so two keys never share a file
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", key)[:80] + "-" + hashlib.sha256(key.encode()).hexdigest()[:16]
    path = Path(folder) / (stem + suffix)
    with open(Path(folder) / (stem + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if `write` raises
        if not path.exists():
            partial = path.with_name(path.name + ".partial")
            write(partial)
            partial.replace(path)  # readers never see a half-written file
    return path


def shared_export(key: str, export: Callable[[], "torch.export.ExportedProgram"]) -> "torch.export.ExportedProgram":
    """`export()`'s program, made once per run and saved: every asker, the first too, loads the
    .pt2 (what `devplan compile model.pt2` reads), so a test sees the same program whichever
    worker exported it; a load is a fraction of an export's time on a real model."""
    import torch

    path = shared_file(key, ".pt2", lambda path: torch.export.save(export(), path))
    return export() if path is None else torch.export.load(path)


def shared_bytes(key: str, make: Callable[[], bytes]) -> bytes:
    """`make()`'s bytes (a lowered program), made once per run."""
    path = shared_file(key, ".bin", lambda path: path.write_bytes(make()))
    return make() if path is None else path.read_bytes()
