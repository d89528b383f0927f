"""Delegates that share one payload (a few bytes of damage can make 50,000 of them): the
runtime loads the payload once per window, and every payload's memory counts against the one
limit of the run."""
from __future__ import annotations

import copy

import pytest
import torch

import devplan
from devplan.errors import DevplanError
from devplan.pte import dumps_pte, read_pte
from devplan.pte.window import MEMORY_WINDOW
from devplan.runtime import HostAllocator, LoadedMethod, registered
from tests.runtime.test_strict_runtime import ARGS, compiled


def _copies(data: bytes, count: int, keep_window: bool = True) -> bytes:
    """The program with `count` more delegates naming delegate 0's payload (and its specs)."""
    pte = read_pte(data)
    program = copy.deepcopy(pte.program)
    plan = program.executionPlan[0]
    first = plan.delegates[0]
    if not keep_window:
        first.compileSpecs = [spec for spec in first.compileSpecs if bytes(spec.key) != MEMORY_WINDOW.encode()]
    plan.delegates = [first] + [copy.deepcopy(first) for _ in range(count)]
    return dumps_pte(program, pte.segments)


def test_many_delegates_of_one_payload_load_it_once_and_still_run():
    original = compiled(delegates=["cuda:0"])
    data = _copies(original, 2000)
    with registered("cuda", HostAllocator()):
        (want,), = devplan.run(original, list(ARGS))
        loaded = LoadedMethod(read_pte(data))
        try:
            assert len(loaded.delegates) == 2001 and len({id(d) for d in loaded.delegates}) == 1
            (got,) = loaded.execute(list(ARGS))
        finally:
            loaded.release()
    torch.testing.assert_close(got, want)


def test_payloads_without_a_window_share_the_runs_memory_limit():
    """A payload without a window plans an arena of its own; it counts against the one limit
    of the run with the method's buffers, not against a limit of its own."""
    data = _copies(compiled(delegates=["cuda:0"]), 400, keep_window=False)
    pte = read_pte(data)
    own = sum(int(size) for size in pte.program.executionPlan[0].nonConstBufferSizes)
    payload = sum(int(size) for size in pte.delegate_program(0, 0).program.executionPlan[0].nonConstBufferSizes)
    with registered("cuda", HostAllocator()):
        loaded = LoadedMethod(read_pte(data))
        taken = loaded.memory.taken
        loaded.release()
        assert taken >= own + payload and payload > 0  # the 401 delegates load the payload once
        LoadedMethod(read_pte(data), max_memory=taken).release()
        with pytest.raises(DevplanError, match="passes the memory limit of"):
            LoadedMethod(read_pte(data), max_memory=taken - 1)
