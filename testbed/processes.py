"""What tests of forked work use to fix which process takes which item, however busy the
machine is: each process marks itself in a folder on its first item and waits for the others."""

from __future__ import annotations

import os
import time
from pathlib import Path


def meet(room: Path, processes: int) -> None:
    """Wait, on a process's first item, until `processes` processes have each taken one."""
    mark = room / str(os.getpid())
    if mark.exists():
        return
    mark.touch()
    deadline = time.monotonic() + 120
    while len(list(room.iterdir())) < processes:
        assert time.monotonic() < deadline, "the other processes never took an item"
        time.sleep(0.01)


def children() -> set[int]:
    """This process's living (or unreaped) children, as the kernel lists them."""
    return {
        int(pid)
        for task in os.listdir("/proc/self/task")
        for pid in open(f"/proc/self/task/{task}/children").read().split()
    }
