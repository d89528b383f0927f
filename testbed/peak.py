"""A child Python process's own peak memory. Linux keeps ru_maxrss across exec, so wait4 on a
child started by a large process (pytest late in the suite) reports that parent's peak; the
child's VmHWM, the high-water mark of its own address space, starts afresh at exec. So the
child is started through a small script that writes its VmHWM to a file as it exits."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from typing import Sequence

# argv: the file for the peak (KiB), then "-m MODULE" or "-c CODE", then the program's arguments
_PEAK_AT_EXIT = """
import atexit, runpy, sys

def report(path):
    with open("/proc/self/status") as status, open(path, "w") as out:
        out.write(next(line.split()[1] for line in status if line.startswith("VmHWM:")))

atexit.register(report, sys.argv.pop(1))
kind, target = sys.argv.pop(1), sys.argv.pop(1)
if kind == "-m":
    runpy.run_module(target, run_name="__main__", alter_sys=True)
else:
    sys.argv[0] = "-c"
    exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})
"""


def run_measured(argv: Sequence[str], **run) -> tuple[subprocess.CompletedProcess, int | None]:
    """subprocess.run of `python -m MODULE ...` or `python -c CODE ...` (argv without the
    interpreter; `run`: its keywords), and the child's peak resident bytes: None when something
    killed it before it could say."""
    with tempfile.NamedTemporaryFile() as peak:
        done = subprocess.run([sys.executable, "-c", _PEAK_AT_EXIT, peak.name, *argv], **run)
        said = peak.read()
    return done, int(said) * 1024 if said else None
