"""test_module_sweep.CASES with a dynamic batch: every case the static sweep expects to pass
is exported with dim 0 of its batched inputs a `Dim` in [2, BOUND] (example batch 4: torch
specializes a dim whose example size is 1), compiled by devplan, and run by ExecuTorch's
runtime and by devplan's at batches 8, 3 and 2 on one loaded method each (shrinking on the
same memory), outputs equal to eager. devplan also plans no more bytes than ExecuTorch's own
lowering of the same dynamic export, where that lowering runs at the bound.

When torch.export narrows the batch with a guard, the Dim's minimum is raised as torch
suggests (the runtimes then run sizes within it); when it specializes the batch, the last dim
(length, features) is tried instead; a case torch keeps nothing dynamic in is skipped with
torch's reason. Cases devplan gets wrong are strict xfails whose reason is the error they
end in, so a fix shows up as an XPASS."""

from __future__ import annotations

import functools
import inspect
import re
from dataclasses import dataclass

import pytest
import torch
from torch.export import Dim
from torch.utils import _pytree as pytree

import devplan
from devplan.pte import read_pte
from devplan.runtime import LoadedMethod
from testbed.executorch import executorch_pte
from testbed.models import eager_outputs, run_executorch
from tests.compile.test_module_sweep import CASES, XFAIL as STATIC_XFAIL, _close

pytestmark = pytest.mark.sweep  # the slow tier: deselect with -m 'not sweep'
SHARE_BY = "name"  # a case's two tests share its export and compile (tests/conftest.py)

BOUND = 8
EXAMPLE = 4
LEAST = 2
SIZES = (BOUND, 3, 2)

# Inputs whose dim 0 is not the batch: bucketize's boundaries, the right operand of x @ y.t()
NOT_BATCHED = {"bucketize": {1}, "bfloat16_matmul_sigmoid": {1}}


@dataclass(frozen=True)
class Dynamic:
    """Inputs `shared` have dim `dim` a Dim in [least, BOUND]."""

    dim: int
    least: int
    shared: tuple[int, ...]

    @property
    def sizes(self) -> tuple[int, ...]:
        kept = tuple(s for s in SIZES if s >= self.least)
        return kept if len(kept) == len(SIZES) else (BOUND, self.least + 1, self.least)


def _built(name: str) -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    module, args = CASES[name]()
    return module.eval().requires_grad_(False), args


def _resized(t: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    """`t` with `size` entries along `dim`: normal floats; integers and bools are rows of `t`
    picked at random, so class indices, divisors and attention masks stay valid."""
    shape = list(t.shape)
    shape[dim] = size
    if t.dtype.is_floating_point:
        return torch.randn(shape).to(t.dtype)
    return t.index_select(dim, torch.randint(0, t.shape[dim], (size,)))


def _sized(args: tuple, how: Dynamic, size: int) -> tuple:
    return tuple(_resized(a, how.dim, size) if i in how.shared else a for i, a in enumerate(args))


def _dynamic_shapes(module: torch.nn.Module, args: tuple, how: Dynamic) -> tuple:
    dim = Dim("batch", min=how.least, max=BOUND)
    dims = tuple({how.dim % args[i].dim(): dim} if i in how.shared else None for i in range(len(args)))
    variadic = any(p.kind is p.VAR_POSITIONAL for p in inspect.signature(module.forward).parameters.values())
    return (dims,) if variadic else dims  # m()'s forward(*args) takes them as one tuple


def _reason(error: Exception) -> str:
    lines = [line.strip(" -") for line in str(error).splitlines() if line.strip(" -")]
    return f"{type(error).__name__}: {' / '.join(lines[:3])}"


_EXPORTS: dict[str, torch.export.ExportedProgram] = {}  # the export _choice succeeded with, until ExecuTorch lowers it


@functools.cache
def _choice(name: str) -> Dynamic | str:
    """How the case's batch is dynamic, or torch's reason why nothing is."""
    module, args = _built(name)
    batched = tuple(
        i
        for i, a in enumerate(args)
        if isinstance(a, torch.Tensor) and a.dim() > 0 and i not in NOT_BATCHED.get(name, ())
    )
    if not batched:
        return f"{name}: no input has a batch dim"
    # second choice: the last dim of the batched inputs that agree with the first one there
    last = tuple(i for i in batched if args[i].shape[-1] == args[batched[0]].shape[-1])
    tries, first = [Dynamic(0, LEAST, batched), Dynamic(-1, LEAST, last)], None
    while tries:
        how = tries.pop(0)
        try:
            _EXPORTS[name] = torch.export.export(
                module, _sized(args, how, EXAMPLE), dynamic_shapes=_dynamic_shapes(module, args, how), strict=False
            )
            return how
        except Exception as error:
            first = first or error
            suggested = re.search(rf"Dim\('batch', min=(\d+), max={BOUND}\)", str(error))
            if suggested and how.least < int(suggested.group(1)) < BOUND:
                tries.insert(0, Dynamic(how.dim, int(suggested.group(1)), how.shared))
    return f"{name}: torch.export keeps no dynamic batch: {_reason(first)}"


def _dynamic(name: str) -> Dynamic:
    how = _choice(name)
    if isinstance(how, str):
        pytest.skip(how)
    return how


@functools.cache
def _compiled(name: str) -> bytes:
    """devplan's program; compiling leaves the ExportedProgram as it was, so ExecuTorch can
    lower the same export afterwards (the one export costs a case a fraction of the time)."""
    _dynamic(name)
    ep = _EXPORTS[name]
    before = (ep.graph_module.code, str(ep.graph_signature))
    data = devplan.compile(ep).data
    assert (ep.graph_module.code, str(ep.graph_signature)) == before, f"{name}: devplan.compile changed the export"
    return data


def _planned_bytes(pte: bytes) -> int:
    return sum(b["size"] for b in devplan.inspect(pte)["methods"][0]["buffers"])


# Strict xfails, `pytest.mark.xfail(strict=True, raises=<the exact type>, reason="<its one-line
# message>")`, so a fix shows up as an XPASS. None today: every case below compiles, both
# runtimes match eager at every batch, and no plan is larger than ExecuTorch's.
REFUSED: dict[str, pytest.MarkDecorator] = {}  # devplan.compile raises (both tests)
WRONG: dict[str, pytest.MarkDecorator] = {}  # a runtime fails or a number is wrong
MORE_BYTES: dict[str, pytest.MarkDecorator] = {}  # devplan plans more bytes than ExecuTorch

# ExecuTorch 1.5.1's lowering of a GRU plans its input and the recurrence at the example batch:
# its program refuses batch 8 ("Attempted to resize a bounded tensor with a maximum capacity of
# 120 elements to 240 elements", 120 = 4 x 5 x 6) and fails at batch 3 in the aten::full of the
# zero initial state ("Attempted to resize a static tensor"). Skipped without the ~10 s its two
# lowerings take.
EXECUTORCH_FIXES_BATCH = {"gru_1layer", "gru_2layer"}

NAMES = [n for n in CASES if n not in STATIC_XFAIL]
assert set(REFUSED) | set(WRONG) | set(MORE_BYTES) | EXECUTORCH_FIXES_BATCH <= set(NAMES)


def _params(*tables: dict[str, pytest.MarkDecorator]) -> list:
    marks = {name: mark for table in tables for name, mark in table.items()}
    return [pytest.param(n, marks=marks[n]) if n in marks else n for n in NAMES]


@pytest.mark.parametrize("name", _params(REFUSED, WRONG))
def test_both_runtimes_match_eager_at_any_batch(name):
    from executorch.runtime import Runtime

    how = _dynamic(name)
    module, args = _built(name)
    data = _compiled(name)  # the loaded program keeps pointing into these bytes
    method = Runtime.get().load_program(data).load_method("forward")
    loaded = LoadedMethod(read_pte(data))
    torch.manual_seed(1)
    try:
        for size in how.sizes:  # shrinking on the same memory
            given = _sized(args, how, size)
            want = eager_outputs(module, given)[0]
            flat = pytree.tree_leaves(given)
            for runtime, execute in (("executorch", method.execute), ("devplan", loaded.execute)):
                got = execute(list(flat))
                assert len(got) == len(want), f"{runtime} at batch {size}: {len(got)} outputs, eager has {len(want)}"
                for g, w in zip(got, want):
                    _close(g, w, f"{runtime} at batch {size}")
    finally:
        loaded.release()


# the suite sets every other case's plan against ExecuTorch's lowering (its compile and runs are in
# the test above for every case); the rest, to release
def _plan_params() -> list:
    marks = {name: mark for table in (REFUSED, MORE_BYTES) for name, mark in table.items()}
    return [
        pytest.param(n, marks=([marks[n]] if n in marks else []) + [pytest.mark.release] * (index % 2))
        for index, n in enumerate(NAMES)
    ]


@pytest.mark.parametrize("name", _plan_params())
def test_plans_no_more_than_executorch(name):
    data = _compiled(name)
    if name in EXECUTORCH_FIXES_BATCH:
        pytest.skip(f"{name}: ExecuTorch's own program refuses the bound's batch {BOUND}; no like-for-like plan")
    how, (_, args) = _dynamic(name), _built(name)
    try:
        theirs = executorch_pte(_EXPORTS.pop(name))
    except Exception as error:
        pytest.skip(f"{name}: ExecuTorch's lowering fails: {_reason(error)}")
    try:
        run_executorch(theirs, _sized(args, how, BOUND))
    except Exception:
        pytest.skip(f"{name}: ExecuTorch's own program refuses the bound's batch {BOUND}; no like-for-like plan")
    ours, executorch = _planned_bytes(data), _planned_bytes(theirs)
    assert ours <= executorch, f"{name}: devplan plans {ours} bytes, ExecuTorch {executorch}"
