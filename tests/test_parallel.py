"""forked_map (devplan/parallel.py), which runs the backends' preprocess on `--jobs`
processes: results in the items' order whatever process made them, the work shared among
processes, and a failure in any of them one error in the caller, with no worker left behind.

No test here leans on timing: each process, on its first item, waits until every process has
taken one (`_meet`), so that which process takes which item is fixed however busy the machine is."""

from __future__ import annotations

import functools
import os
import signal
import time
from pathlib import Path

import pytest

from devplan.parallel import forked_map
from testbed.processes import children, meet

_HERE = os.getpid()  # this test process; forked workers see another pid


def _pid_and_square(room: Path, processes: int, x: int) -> tuple[int, int]:
    meet(room, processes)
    return os.getpid(), x * x


def test_results_come_back_in_order_from_several_processes(tmp_path):
    got = forked_map(functools.partial(_pid_and_square, tmp_path, 3), list(range(10)), jobs=3)
    assert [square for _, square in got] == [x * x for x in range(10)]
    pids = {pid for pid, _ in got}
    assert os.getpid() in pids and len(pids) == 3


def _pid_and_start(room: Path, x: int) -> tuple[int, float]:
    meet(room, 2)
    return os.getpid(), time.monotonic()


def test_the_costliest_items_are_taken_first(tmp_path):
    """Two processes, two costly items at the end of the list and three cheap ones: each process
    takes a costly one first, so that the work ends after one costly item, not two."""
    costs = [1, 1, 1, 20, 20]
    got = forked_map(functools.partial(_pid_and_start, tmp_path), costs, jobs=2, cost=lambda x: x)
    first = {pid: min(range(5), key=lambda i: (got[i][0] != pid, got[i][1])) for pid, _ in got}
    assert sorted(first.values()) == [3, 4]


def test_one_job_runs_here():
    assert {pid for pid, _ in forked_map(lambda x: (os.getpid(), x), [1, 2, 3], jobs=1)} == {os.getpid()}


def _fails_in(here: bool, room: Path, x: int) -> int:
    meet(room, 2)
    if (os.getpid() == _HERE) == here:
        raise ValueError(f"cannot take {x}\nsecond line")
    return x


@pytest.mark.parametrize("here", [True, False])  # the failure in this process, then in the worker
def test_a_failure_is_raised_here_with_its_first_line(here, tmp_path):
    before = children()
    # this process's own exception as it is; a worker's told by its first line
    with pytest.raises(
        ValueError if here else RuntimeError, match=r"^cannot take \d+\nsecond line$" if here else r"^cannot take \d+$"
    ):
        forked_map(functools.partial(_fails_in, here, tmp_path), [10, 3], jobs=2)
    assert children() <= before


def _dies_in_the_worker(room: Path, x: int) -> int:
    meet(room, 2)
    if os.getpid() != _HERE:
        os.kill(os.getpid(), signal.SIGKILL)
    return x


def test_a_worker_that_dies_is_named_with_its_signal(tmp_path):
    before = children()
    with pytest.raises(RuntimeError, match=r"worker process \d+ died without an answer \(signal SIGKILL\)"):
        forked_map(functools.partial(_dies_in_the_worker, tmp_path), [10, 3], jobs=2)
    assert children() <= before


def _unsendable(room: Path, x: int):
    meet(room, 2)
    return lambda: x


def test_a_result_no_pipe_can_carry_is_an_error_that_says_so(tmp_path):
    with pytest.raises(RuntimeError, match="cannot be sent between processes .*; run with --jobs 1"):
        forked_map(functools.partial(_unsendable, tmp_path), [1, 2], jobs=2)


def _fails_here_or_waits(room: Path, x: int) -> None:
    meet(room, 2)
    if os.getpid() == _HERE:
        raise ValueError(f"cannot take {x}")
    time.sleep(60)


def test_when_this_process_fails_the_workers_are_stopped_not_awaited(tmp_path):
    before = children()
    start = time.monotonic()
    with pytest.raises(ValueError):
        forked_map(functools.partial(_fails_here_or_waits, tmp_path), [3, 60], jobs=2)
    assert time.monotonic() - start < 30 and children() <= before
