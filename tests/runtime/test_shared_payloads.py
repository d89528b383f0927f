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
from devplan.pte.window import MEMORY_WINDOW, read_window, window_spec
from devplan.runtime import HostAllocator, LoadedMethod, registered
from testbed.small_programs import ARGS, compiled


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
        ((want,),) = devplan.run(original, list(ARGS))
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


def _windows(plan, first, inner: bytes, count: int, mem_id: int, offset: int, segment: int) -> None:
    """plan's delegates: `count` copies of `first` naming payload segment `segment` (`inner`),
    at windows 64 bytes apart from `offset` in buffer `mem_id`, which grows to hold them."""
    need = int(read_pte(inner).program.executionPlan[0].nonConstBufferSizes[1])
    plan.nonConstBufferSizes[mem_id] = max(int(plan.nonConstBufferSizes[mem_id]), offset + 64 * (count - 1) + need)
    plan.delegates = []
    for window in range(count):
        delegate = copy.deepcopy(first)
        delegate.processed.index = segment
        for spec in delegate.compileSpecs:
            if bytes(spec.key) == MEMORY_WINDOW.encode():
                spec.value = list(window_spec(mem_id, offset + 64 * window)[1])
        plan.delegates.append(delegate)


def _nested(data: bytes, count: int, levels: int = 4) -> bytes:
    """The program with `count` delegates of distinct windows whose payload has `count` such
    delegates of its own, and so on `levels` deep: count**levels windows of the innermost
    payload, from a file of a few KB."""
    top = read_pte(data)
    first = top.program.executionPlan[0].delegates[0]
    assert first.processed.location == 1  # a segment
    mem_id, offset = read_window([(bytes(s.key).decode(), bytes(s.value)) for s in first.compileSpecs], "test")
    payload, inner = top.delegate_program(0, 0), top.delegate_payload(0, 0)
    for _ in range(levels - 1):
        program, segments = copy.deepcopy(payload.program), [*payload.segments, inner]
        if program.segments:
            program.segments.append(copy.deepcopy(program.segments[-1]))
        _windows(program.executionPlan[0], first, inner, count, 1, 0, len(segments) - 1)
        inner = dumps_pte(program, segments)
    program, segments = copy.deepcopy(top.program), list(top.segments)
    segments[first.processed.index] = inner
    _windows(program.executionPlan[0], first, inner, count, mem_id, offset, first.processed.index)
    return dumps_pte(program, segments)


def _loaded(method: LoadedMethod) -> dict[int, LoadedMethod]:
    found = {id(method): method}
    for delegate in method.delegates:
        found.update(_loaded(delegate))
    return found


def test_nested_windows_of_one_payload_are_bounded_and_share_its_constants():
    """Each window of a payload is loaded apart, so nesting multiplies: 6 windows at each of 4
    levels would be 1554 loads (1.9 GB and 24 s at 12). Past MAX_LOADED_DELEGATES the run is
    refused in one line; within it, each payload is checked once and its constants go to the
    device once, whatever the windows."""
    from devplan.runtime.executor import MAX_LOADED_DELEGATES

    original = compiled(delegates=["cuda:0"])
    assert 5 + 5**2 + 5**3 + 5**4 <= MAX_LOADED_DELEGATES < 6 + 6**2 + 6**3 + 6**4
    with registered("cuda", HostAllocator()):
        with pytest.raises(DevplanError) as error:
            LoadedMethod(read_pte(_nested(original, 6), name="bad.pte"))
        message = str(error.value)
        assert message.startswith("bad.pte delegate 0") and "\n" not in message
        assert f"loads at most {MAX_LOADED_DELEGATES}" in message and "--executorch" in message

        ((want,),) = devplan.run(original, list(ARGS))
        loaded = LoadedMethod(read_pte(_nested(original, 5)))
        try:
            methods = _loaded(loaded)
            assert len(methods) == 1 + 5 + 5**2 + 5**3 + 5**4 == loaded.memory.delegates + 1
            uploads = sum(len(method.uploads) for method in methods.values())
            assert uploads == len(loaded.memory.uploads) <= 4 * 2  # 4 payloads, a weight and a bias each
            (got,) = loaded.execute(list(ARGS))
        finally:
            loaded.release()
    torch.testing.assert_close(got, want)
