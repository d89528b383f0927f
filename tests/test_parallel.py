"""forked_map (devplan/parallel.py), which runs the backends' preprocess on `--jobs`
processes: results in the items' order whatever process made them, the work shared among
processes, and a failure in any of them one error in the caller, with no worker left behind."""

from __future__ import annotations

import os
import signal
import time

import pytest

from devplan.parallel import forked_map


def _pid_and_square(x: int) -> tuple[int, int]:
    time.sleep(0.5)  # long enough that every process takes items before the queue is empty
    return os.getpid(), x * x


def test_results_come_back_in_order_from_several_processes():
    got = forked_map(_pid_and_square, list(range(10)), jobs=3)
    assert [square for _, square in got] == [x * x for x in range(10)]
    pids = {pid for pid, _ in got}
    assert os.getpid() in pids and len(pids) == 3


def _pid_after(x: int) -> int:
    time.sleep(x)
    return os.getpid()


def test_the_costliest_items_are_taken_first():
    """Two processes, two long items at the end of the list and three short ones: each process
    takes a long one first, so that the work ends after one long item, not two."""
    start = time.monotonic()
    got = forked_map(_pid_after, [0.1, 0.1, 0.1, 2, 2], jobs=2, cost=lambda x: int(x * 10))
    assert got[3] != got[4] and time.monotonic() - start < 3.5


def test_one_job_runs_here():
    assert {pid for pid, _ in forked_map(_pid_and_square, [1, 2, 3], jobs=1)} == {os.getpid()}


def _fails_on_three(x: int) -> int:
    if x == 3:
        raise ValueError(f"cannot take {x}\nsecond line")
    time.sleep(1)  # long enough that the other process takes 3
    return x


_HERE = os.getpid()


def _dies_on_three(x: int) -> int:
    if x == 3 and os.getpid() != _HERE:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(1)
    return x


@pytest.mark.parametrize("here", [True, False])  # 3 taken first by this process, then by the worker
def test_a_failure_is_raised_here_with_its_first_line(here):
    before = _children()
    # this process's own exception as it is; a worker's told by its first line
    with pytest.raises(ValueError if here else RuntimeError, match="^cannot take 3" if here else "^cannot take 3$"):
        forked_map(_fails_on_three, [10, 3], jobs=2, cost=lambda x: (x == 3) == here)
    assert _children() <= before


def test_a_worker_that_dies_is_named_with_its_signal():
    before = _children()
    with pytest.raises(RuntimeError, match=r"worker process \d+ died without an answer \(signal SIGKILL\)"):
        forked_map(_dies_on_three, [10, 3], jobs=2, cost=lambda x: x)
    assert _children() <= before


def _unsendable(x: int):
    time.sleep(0.5)  # so that the worker takes an item too
    return lambda: x


def test_a_result_no_pipe_can_carry_is_an_error_that_says_so():
    with pytest.raises(RuntimeError, match="cannot be sent between processes .*; run with --jobs 1"):
        forked_map(_unsendable, [1, 2], jobs=2)


def test_when_this_process_fails_the_workers_are_stopped_not_awaited():
    before = _children()
    start = time.monotonic()
    with pytest.raises(ValueError):
        forked_map(lambda x: _fails_on_three(x) if x == 3 else time.sleep(x), [3, 60], jobs=2, cost=lambda x: -x)
    assert time.monotonic() - start < 30 and _children() <= before


def _children() -> set[int]:
    """This process's living (or unreaped) children, as the kernel lists them."""
    return {
        int(pid)
        for task in os.listdir("/proc/self/task")
        for pid in open(f"/proc/self/task/{task}/children").read().split()
    }
