"""forked_map: a function over items in forked worker processes, results in the items' order.

Fork, not spawn: the workers inherit the parent's imports and objects (ExportedPrograms,
a backend's classes) as they are, so that nothing but each result crosses a pipe; a spawned
worker would import torch and ExecuTorch again (seconds) and could not take the programs
without serializing them. Each worker runs torch on one thread: the workers are the
parallelism, and OpenMP's pool does not survive a fork."""

from __future__ import annotations

import os
import pickle
import signal
import sys
from typing import Any, Callable, Sequence, TypeVar

from devplan.errors import first_line

Item = TypeVar("Item")
Result = TypeVar("Result")


def cores() -> int:
    """The cores this process may run on (its affinity, not the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def forked_map(
    fn: Callable[[Item], Result], items: Sequence[Item], jobs: int, cost: Callable[[Item], int] = lambda _: 1
) -> list[Result]:
    """[fn(item) for item in items], on `jobs` processes (this one and jobs - 1 forked workers),
    each taking the next item, the costliest first, as soon as it is free. A worker's exception
    is raised here as a RuntimeError with its first line; a worker that dies without answering
    is one too."""
    jobs = max(1, min(jobs, len(items)))
    if jobs == 1 or sys.platform != "linux":  # elsewhere fork is unsafe once threads run (macOS) or missing
        return [fn(item) for item in items]
    # the queue: indices in a pipe every process reads one at a time (reads of a few bytes are atomic)
    queue, feed = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    workers = [_fork(fn, items, queue, feed) for _ in range(jobs - 1)]
    results: dict[int, Result] = {}
    try:
        with os.fdopen(feed, "wb") as pipe:  # its end: then each process reads up to the end of the queue
            order = sorted(range(len(items)), key=lambda i: -cost(items[i]))
            pipe.write(b"".join(index.to_bytes(_INDEX, "little") for index in order))
        results.update(_take(fn, items, queue))
        while workers:
            results.update(_collect(*workers.pop(0)))
    finally:
        os.close(queue)
        for pid, reader in workers:  # not heard from, as something failed: their answers are not wanted
            os.close(reader)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    return [results[index] for index in range(len(items))]


_INDEX = 4  # bytes of an item's index in the queue


def _take(fn: Callable[[Item], Result], items: Sequence[Item], queue: int) -> dict[int, Result]:
    """fn of each item taken from the queue until it is empty."""
    done: dict[int, Result] = {}
    while index := os.read(queue, _INDEX):
        done[int.from_bytes(index, "little")] = fn(items[int.from_bytes(index, "little")])
    return done


def _fork(fn: Callable[[Item], Result], items: Sequence[Item], queue: int, feed: int) -> tuple[int, int]:
    reader, writer = os.pipe()
    pid = os.fork()
    if pid:
        os.close(writer)
        return pid, reader
    os.close(reader)
    os.close(feed)  # the worker: answers once, then exits without running the parent's exit handlers
    status = 0
    try:
        torch = sys.modules.get("torch")  # imported by the caller, if it runs torch at all
        if torch is not None:
            torch.set_num_threads(1)
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C ends the worker; the parent reports it
        result: tuple[str, object]
        try:
            result = ("ok", _take(fn, items, queue))
        except BaseException as error:  # noqa: BLE001 - told to the parent, which raises it
            result = ("error", first_line(error))
        try:
            answer = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as error:  # a lambda, a lock: what a pipe cannot carry
            answer = pickle.dumps(
                ("error", f"a result cannot be sent between processes ({first_line(error)}); run with --jobs 1")
            )
        with os.fdopen(writer, "wb") as pipe:
            pipe.write(answer)
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001 - a worker must never return into the parent's code
        status = 1
    os._exit(status)


def _collect(pid: int, reader: int) -> dict[int, Any]:
    """A worker's answer, once it has exited (its pipe read to the end, then the worker reaped)."""
    try:
        with os.fdopen(reader, "rb") as pipe:
            data = pipe.read()
    finally:
        ended = _how_it_ended(pid)
    if not data:
        raise RuntimeError(f"worker process {pid} died without an answer ({ended})")
    kind, value = pickle.loads(data)
    if kind == "error":
        raise RuntimeError(value)
    answer: dict[int, Any] = value  # what _take returned in the worker
    return answer


def _how_it_ended(pid: int) -> str:
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit status {os.WEXITSTATUS(status)}"
