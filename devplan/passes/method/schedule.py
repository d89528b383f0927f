"""Memory-aware instruction order: run the kernels in the order that holds the fewest bytes at
once, which bounds every plan the planner can make afterwards.

Export orders ops as the source wrote them, so an attention block computes Q, K and V before
it needs V, and V sits alive through the scores. Any order that keeps each pair of kernels
touching the same bytes (one of them writing) in their original order computes the same
values; among those, a beam search over the sets of kernels already run finds the order with
the lowest peak of live bytes. With few enough sets per step (a chain of blocks has few) it
is exact; the original order is kept unless the search beats it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from devplan.ir.method import IntList, Kernel, Method, OptionalTensorList, TensorList
from devplan.ops import written_inputs
from devplan.passes.method.inplace import overwritable
from devplan.planning.lifetimes import lifetimes, storages
from devplan.planning.model import DEFAULT_ALIGNMENT, align_up

WIDTH = 64  # sets of run kernels kept per step
EXPANSIONS = 100_000  # kernels tried over the whole search: a wide method keeps fewer sets


@dataclass(frozen=True)
class _Step:
    peak: int  # most bytes live at once so far
    live: int  # bytes live after the last kernel
    done: int  # bit i set: kernel i has run
    ready: tuple[int, ...]  # kernels whose dependencies have all run
    parent: "_Step | None"
    kernel: int


def schedule(method: Method, alignment: int = DEFAULT_ALIGNMENT) -> Method:
    """`method` with its kernels reordered to lower the peak of live bytes, when that helps."""
    n = len(method.kernels)
    if n < 2:
        return method
    problem = _Problem(method, alignment)
    order = problem.search()
    if problem.peak(order) >= problem.peak(range(n)):
        return method
    return replace(method, kernels=tuple(method.kernels[i] for i in order))


class _Problem:
    """The method as storages (bytes that live and die together) and who touches them."""

    def __init__(self, method: Method, alignment: int):
        root, _ = storages(method, lifetimes(method))
        self.size: dict[int, int] = {}
        for index, r in root.items():
            spec = method.tensor(index)
            self.size[r] = max(self.size.get(r, 0), spec.alias_offset + spec.nbytes)
        self.size = {r: align_up(s, alignment) for r, s in self.size.items()}
        self.held_from_start = {root[i] for i in (*method.inputs, *method.state) if i in root}
        self.held_to_end = {root[i] for i in (*method.outputs, *method.state) if i in root}
        self.touches = [sorted({root[i] for i in method.operands(k) if i in root}) for k in method.kernels]
        self.touchers: dict[int, int] = {}
        for step, touched in enumerate(self.touches):
            for r in touched:
                self.touchers[r] = self.touchers.get(r, 0) | 1 << step
        self.reuse = [_reusable(method, k, root, self.size) for k in method.kernels]
        self.deps = _dependencies(method, root)
        self.users: list[list[int]] = [[] for _ in method.kernels]
        for step, deps in enumerate(self.deps):
            for d in deps:
                self.users[d].append(step)
        self.start = sum(self.size[r] for r in self.held_from_start)
        # an input no kernel reads is alive at the first instruction only, as lifetimes() has it
        self.unread = sum(self.size[r] for r in self.held_from_start - self.held_to_end if r not in self.touchers)

    def run(self, done: int, live: int, k: int) -> tuple[int, int]:
        """(bytes held while kernel k runs, bytes live after it) once the kernels in `done` ran."""
        bit = 1 << k
        allocated = freed = 0
        dying = []
        for r in self.touches[k]:
            if r not in self.held_from_start and not self.touchers[r] & done:
                allocated += self.size[r]
            if r not in self.held_to_end and not self.touchers[r] & ~(done | bit):
                freed += self.size[r]
                dying.append(r)
        out, donors = self.reuse[k]
        if out is not None and not self.touchers[out] & done and any(d in dying for d in donors):
            allocated -= self.size[out]  # written over an input that dies here, as the in-place pass will
            freed -= self.size[out]
        if not done:
            freed += self.unread
        return live + allocated, live + allocated - freed

    def peak(self, order: Iterable[int]) -> int:
        done, live, peak = 0, self.start, self.start
        for k in order:
            held, live = self.run(done, live, k)
            peak, done = max(peak, held), done | 1 << k
        return peak

    def search(self) -> list[int]:
        n = len(self.deps)
        allowance = max(1, EXPANSIONS // n)  # per step; the best set is always expanded
        beam = [_Step(self.start, self.start, 0, tuple(k for k in range(n) if not self.deps[k]), None, -1)]
        for _ in range(n):
            after: dict[int, tuple[int, int, _Step, int]] = {}
            tried = 0
            for step in beam:
                if tried >= allowance:
                    break
                tried += len(step.ready)
                for k in step.ready:
                    held, live = self.run(step.done, step.live, k)
                    done, peak = step.done | 1 << k, max(step.peak, held)
                    if done not in after or peak < after[done][0]:
                        after[done] = (peak, live, step, k)
            keep = min(WIDTH, max(1, allowance // max(1, len(beam[0].ready))))  # about as many as the next step expands
            kept = sorted(after.items(), key=lambda item: (item[1][0], item[1][1], item[0]))[:keep]
            beam = [
                _Step(peak, live, done, self._ready(parent, k, done), parent, k)
                for done, (peak, live, parent, k) in kept
            ]
        order, step = [], beam[0]
        while step.parent is not None:
            order.append(step.kernel)
            step = step.parent
        return order[::-1]

    def _ready(self, parent: _Step, k: int, done: int) -> tuple[int, ...]:
        return tuple(
            sorted((*(r for r in parent.ready if r != k), *(u for u in self.users[k] if not self._waits(u, done))))
        )

    def _waits(self, k: int, done: int) -> bool:
        return any(not done >> d & 1 for d in self.deps[k])


def _items(method: Method, kernel: Kernel) -> list[int]:
    """Every value a kernel reads, list items included (a size list names Int values that
    number kernels write while the program runs)."""
    lists = [
        value
        for value in map(method.values.__getitem__, kernel.args)
        if isinstance(value, (IntList, TensorList, OptionalTensorList))
    ]
    return [i for value in lists for i in value.items if i >= 0]


def _writes(method: Method, kernel: Kernel) -> list[int]:
    """Value indices a kernel writes: its trailing result (or each of a list of results) and
    the arguments its schema writes in place; a delegate call's arguments are all taken as
    written, since its outputs are not marked."""
    if kernel.delegate is not None:
        return method.operands(kernel)
    last = method.values[kernel.args[-1]]
    results = (
        [i for i in last.items if i >= 0] if isinstance(last, (TensorList, OptionalTensorList)) else [kernel.args[-1]]
    )
    return [kernel.args[i] for i in written_inputs(kernel.op)] + results


def _dependencies(method: Method, root: dict[int, int]) -> list[tuple[int, ...]]:
    """For each kernel, the earlier kernels it must follow: the last writer of whatever it
    touches, and, for what it writes, every reader since that write."""

    def where(i: int) -> tuple[str, int]:
        return ("bytes", root[i]) if i in root else ("value", i)

    last_writer: dict[tuple[str, int], int] = {}
    readers: dict[tuple[str, int], list[int]] = {}
    deps = []
    for step, kernel in enumerate(method.kernels):
        reads = {where(i) for i in (*kernel.args, *_items(method, kernel))}
        writes = {where(i) for i in _writes(method, kernel)}
        mine = {last_writer[p] for p in reads | writes if p in last_writer}
        for p in writes:
            mine.update(readers.pop(p, ()))
        for p in reads - writes:
            readers.setdefault(p, []).append(step)
        for p in writes:
            last_writer[p] = step
        deps.append(tuple(sorted(mine - {step})))
    return deps


def _reusable(
    method: Method, kernel: Kernel, root: dict[int, int], size: dict[int, int]
) -> tuple[int | None, tuple[int, ...]]:
    """(result storage, input storages it may be written over), as passes/method/inplace.py decides."""
    out, donors = overwritable(method.values, kernel, root)
    if out is None or out not in root or root[out] != out:
        return None, ()
    return out, tuple(root[a] for a in donors if size[root[a]] == size[out])
