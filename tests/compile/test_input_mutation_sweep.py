"""Models that update their user inputs in place, swept over devplan's compile options.

ExecuTorch's convention: the program copies each input's new value into the input's own bytes
at the end (aten::copy_) and returns every mutated input, in signature order, ahead of the
user's outputs. Each case is exported (non-strict), compiled by devplan with each option set,
and run RUNS times on one loaded method (fresh copies of the inputs each run) by devplan's
reference runtime and, for programs without delegates, by ExecuTorch's runtime; every run's
flat outputs must match successive eager calls. devplan's runtime must leave the caller's
tensors as they were. Cases with a dynamic dim also run at a smaller size, on one loaded
method, mixed with the full size. Only cases that torch.export or ExecuTorch's own lowering
refuses are skipped."""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from typing import Callable

import pytest
import torch
from torch import nn
from torch.export import Dim
from torch.export.graph_signature import InputKind
from torch.utils import _pytree as pytree

import devplan
import devplan.runtime
from devplan.pte import read_pte
from devplan.runtime.allocator import HostAllocator, registered
from testbed.executorch import executorch_pte
from testbed.lowerings import released_after_module
from testbed.models import eager_runs, mismatch
from tests.tiers import rotating

pytestmark = pytest.mark.sweep  # the slow tier: deselect with -m 'not sweep'
SHARE_BY = "name"  # a case's options share its export and ExecuTorch's lowering (tests/conftest.py)

RUNS = 2

OPTIONS = {
    "default": {},
    "no_inplace": {"inplace": False},
    "no_reorder": {"reorder": False},
    "greedy_order": {"planner": "greedy-order"},
    "greedy_size": {"planner": "greedy-size"},
    "naive": {"planner": "naive"},
    "delegated": {"delegates": ["cuda:0"]},
    "device_io": {"delegates": ["cuda:0"], "device_io": True},
}
ON_DEVICE = {"delegated", "device_io"}  # devplan's runtime only, cuda backed by host memory


def m(fn):
    class Wrapped(nn.Module):
        def forward(self, *args, **kwargs):
            return fn(*args, **kwargs)

    return Wrapped()


# ---------------------------------------------------------------- models


def _read_before_and_after(x, y):
    before = x.exp()
    x.add_(y)
    return before * x, x.cos() + y


def _twice(x):
    x.add_(1)
    x.mul_(3)
    return x.sum(0)


def _twice_read_between(x, y):
    x.add_(1)
    z = x * y
    x.mul_(z)
    return z


def _row_view(x):
    x[0].mul_(2)
    return x + 1


def _flat_view_zero(x):
    x.view(-1)[:3].zero_()
    return x.sum(1)


def _column_view(x):
    x.t()[1].add_(5)
    return x * 2


def _column_slice_assigned(x, y):
    x[:, 1:3] = y
    return x.sum(0)


def _held_view(x):
    v = x[1:]
    v.add_(1)
    return v * 2, x.sum()


def _partial_then_whole(x):
    x[0].zero_()
    x.mul_(2)
    return x - 1


class KVIndexCopy(nn.Module):
    """A KV cache updated at a position tensor (index_copy_), then attended over; the
    position advances in place too."""

    def forward(self, q, k, v, k_cache, v_cache, pos):
        k_cache.index_copy_(2, pos, k)
        v_cache.index_copy_(2, pos, v)
        pos.add_(1)
        att = (q @ k_cache.transpose(-1, -2)).softmax(-1)
        return att @ v_cache


class KVIndexPut(nn.Module):
    """cache[:, pos] = k: index_put_ with a position tensor."""

    def forward(self, k, cache, pos):
        cache[:, pos] = k
        return cache.sum(1)


class KVIndexPutLeading(nn.Module):
    def forward(self, k, cache, pos):
        cache.index_put_((pos,), k)
        return cache * 2


class InputAndBuffer(nn.Module):
    """An input and the module's own state both updated in one forward."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.zeros(4, 6))

    def forward(self, x):
        self.total.add_(x)
        x.mul_(2)
        return self.total + x


class InputAndBufferExchange(nn.Module):
    """The input takes the buffer's sum with it, the buffer the input's new value."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.ones(4, 6))

    def forward(self, x):
        x.add_(self.state)
        self.state.copy_(x * 0.5)
        return x.sum(0)


def _returned_directly(x):
    x.add_(1)
    return x, x * 2


def _returned_as_views(x):
    x.add_(1)
    return x.view(-1), x[1:]


def _view_taken_before(x):
    v = x.view(-1)
    x.add_(1)
    return v


def _int64(i):
    i.add_(3)
    return i * 2


def _int32_mul(i, j):
    i.mul_(j)
    return i + j


def _bool(b, c):
    b.logical_and_(c)
    return b.to(torch.float32) + 1


def _uint8(u):
    u.add_(7)
    return u // 2


def _int_step_0d(step, x):
    step.add_(1)
    return x * step


def _float16(h):
    h.mul_(2)
    return h + 1


def _dynamic(x, y):
    x.mul_(2)
    x.add_(y)
    return x.sum(0)


def _dynamic_row_zero(x):
    x[:, 0].zero_()
    return x * 3


def _dynamic_tokens(cache, k, pos):
    cache.index_copy_(1, pos, k)
    return cache.sum(1)


def _old_clone(x):
    old = x.clone()
    x.add_(1)
    return old, x - old


def _old_clone_of_row(x):
    old = x[0].clone()
    x.mul_(3)
    return old + x[0]


def _old_clone_dynamic(x):
    old = x.clone()
    x.mul_(2)
    return old, x.sum(0)


def _old_clone_only_output(x):
    old = x.clone()
    x.zero_()
    return old


def _copy_from_other(x, y):
    x.copy_(y)
    return y * 2


def _fill(x, y):
    x.fill_(3.0)
    return y + 1


def _cat_written_in(x, a, b):
    x.copy_(torch.cat([a * 2, b + 1]))
    return x.sum()


def _swap(a, b):
    t = a.clone()
    a.copy_(b)
    b.copy_(t)
    return a + b


def _reverse_order(a, b):
    b.add_(1)
    a.mul_(b)
    return a - b


def _advance_then_write(cache, k, pos):
    pos.add_(1)
    cache.index_copy_(1, pos, k)
    return cache.mean(1), pos * 2


def _returned_twice(x):
    x.add_(1)
    return x, x


def _broadcast_update(x, row):
    x.add_(row)
    return x * row


def _out_argument(a, b, x):
    torch.add(a, b, out=x)
    return x * 2


def _lerp(x, y):
    x.lerp_(y, 0.3)
    return x.sum(0)


def _addcmul(x, a, b):
    x.addcmul_(a, b, value=0.5)
    return x + a


def _with_number(x, n):
    x.add_(n)
    return x * n


def _dynamic_returned(x):
    x.add_(1)
    return x, x.view(-1), x[1:]


def _unsqueeze_in_place(x):
    x.unsqueeze_(0)
    return x * 2


def _cat_of_old_value(x, z):
    y = torch.cat([x, z])
    x.add_(1)
    return y


def _cat_of_old_value_read_first(x, z):
    y = torch.cat([x, z]).sum(0)
    x.add_(1)
    return y


def _accumulate(cache, pos, k):
    cache.index_put_((pos,), k, accumulate=True)
    return cache + 1


def _masked_scatter(x, mask, idx, src):
    x.masked_fill_(mask, -1.0)
    x.scatter_(1, idx, src)
    return x.relu()


def _promoted(h, f):
    h.add_(f)
    return h * 2


def _cast_copy(i, f):
    i.copy_(f * 10)
    return i + 1


def _zero_size(e, x):
    e.add_(1)
    return x * 2, e * 3


def _two_views(x):
    x[0].add_(1)
    x[:, 0].mul_(2)
    return x.sum(1)


def _views_taken_before(x):
    d, u, e, s = x.detach(), x.unsqueeze(0), x.expand(2, 4, 6), x[1:3]
    x.mul_(2)
    return d, u, e, s


class NamedInput(nn.Module):
    """A placeholder named after a Python builtin (deepcopy renames it)."""

    def forward(self, input, y):
        input.sub_(y)
        return input + y


class NamedOut(nn.Module):
    """An input named out, written like an out argument."""

    def forward(self, x, out):
        out.copy_(x * 2)
        return out + x


class RecurrentState(nn.Module):
    """A hidden state the caller passes in, updated from a linear layer's output."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x, h):
        h.copy_(torch.tanh(self.fc(x) + h))
        return h * 2


class SwapWithBuffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("held", torch.arange(24.0).view(4, 6))

    def forward(self, x):
        t = x.clone()
        x.copy_(self.held)
        self.held.copy_(t)
        return x - self.held


class NestedInputs(nn.Module):
    """Caches in a list inside a dict, updated at a position."""

    def forward(self, d):
        k_cache, v_cache = d["caches"]
        k_cache.index_copy_(0, d["pos"], d["k"])
        v_cache.index_copy_(0, d["pos"], d["k"] * 2)
        return k_cache @ v_cache.t()


class KwargOnly(nn.Module):
    def forward(self, x, *, acc):
        acc.add_(x)
        return acc * 2


class KwargNamed(nn.Module):
    def forward(self, x, acc):
        acc.sub_(x)
        return acc + x


class DictInput(nn.Module):
    def forward(self, d):
        d["acc"].add_(d["x"])
        return d["acc"] * d["x"]


class ListInput(nn.Module):
    def forward(self, xs):
        xs[1].mul_(xs[0])
        return xs[0] + xs[1]


r = torch.randn


def _x():
    return r(4, 6)


def _i64():
    return torch.randint(-20, 20, (4, 6))


@dataclass
class Case:
    make: Callable[[], tuple[nn.Module, tuple, dict]]  # built right after torch.manual_seed(0)
    dynamic_shapes: object = None
    smaller: Callable[[], tuple[tuple, dict]] | None = None  # other inputs within the dynamic bounds


def _kv():
    return (r(1, 2, 1, 4), r(1, 2, 1, 4), r(1, 2, 1, 4), r(1, 2, 8, 4), r(1, 2, 8, 4), torch.tensor([3]))


N = Dim("n", max=8)
T = Dim("t", max=4)
M3 = Dim("m", min=3, max=8)  # x[1:] of a size-2 dim would be specialized

CASES = {
    "read_before_and_after": Case(lambda: (m(_read_before_and_after), (_x(), _x()), {})),
    "mutated_twice": Case(lambda: (m(_twice), (_x(),), {})),
    "mutated_twice_read_between": Case(lambda: (m(_twice_read_between), (_x(), _x()), {})),
    "view_row": Case(lambda: (m(_row_view), (_x(),), {})),
    "view_flat_slice_zero": Case(lambda: (m(_flat_view_zero), (_x(),), {})),
    "view_column": Case(lambda: (m(_column_view), (_x(),), {})),
    "view_column_slice_assigned": Case(lambda: (m(_column_slice_assigned), (_x(), r(4, 2)), {})),
    "view_held_and_read": Case(lambda: (m(_held_view), (_x(),), {})),
    "view_partial_then_whole": Case(lambda: (m(_partial_then_whole), (_x(),), {})),
    "kv_index_copy_and_position": Case(lambda: (KVIndexCopy(), _kv(), {})),
    "kv_index_put": Case(lambda: (KVIndexPut(), (r(2, 1, 4), torch.zeros(2, 8, 4), torch.tensor([5])), {})),
    "kv_index_put_leading": Case(lambda: (KVIndexPutLeading(), (r(2, 4), r(8, 4), torch.tensor([1, 6])), {})),
    "input_and_buffer": Case(lambda: (InputAndBuffer(), (_x(),), {})),
    "input_and_buffer_exchange": Case(lambda: (InputAndBufferExchange(), (_x(),), {})),
    "returned_directly": Case(lambda: (m(_returned_directly), (_x(),), {})),
    "returned_as_views": Case(lambda: (m(_returned_as_views), (_x(),), {})),
    "view_taken_before_returned": Case(lambda: (m(_view_taken_before), (_x(),), {})),
    "dtype_int64": Case(lambda: (m(_int64), (_i64(),), {})),
    "dtype_int32": Case(lambda: (m(_int32_mul), (_i64().int(), _i64().int()), {})),
    "dtype_bool": Case(lambda: (m(_bool), (r(4, 6) > 0, r(4, 6) > 0), {})),
    "dtype_uint8": Case(lambda: (m(_uint8), (torch.randint(0, 250, (4, 6), dtype=torch.uint8),), {})),
    "dtype_int64_0d": Case(lambda: (m(_int_step_0d), (torch.tensor(2), _x()), {})),
    "dtype_float16": Case(lambda: (m(_float16), (_x().half(),), {})),
    "dynamic": Case(
        lambda: (m(_dynamic), (r(8, 6), r(8, 6)), {}), {"args": ({0: N}, {0: N})}, lambda: ((r(3, 6), r(3, 6)), {})
    ),
    "dynamic_view_zero": Case(
        lambda: (m(_dynamic_row_zero), (r(8, 6),), {}), {"args": ({0: N},)}, lambda: ((r(5, 6),), {})
    ),
    "dynamic_kv_tokens": Case(
        lambda: (m(_dynamic_tokens), (r(2, 8, 4), r(2, 4, 4), torch.tensor([0, 2, 5, 7])), {}),
        {"args": (None, {1: T}, {0: T})},
        lambda: ((r(2, 8, 4), r(2, 2, 4), torch.tensor([6, 1])), {}),
    ),
    "old_value_clone": Case(lambda: (m(_old_clone), (_x(),), {})),
    "old_value_clone_of_row": Case(lambda: (m(_old_clone_of_row), (_x(),), {})),
    "old_value_clone_only_output": Case(lambda: (m(_old_clone_only_output), (_x(),), {})),
    "old_value_clone_dynamic": Case(
        lambda: (m(_old_clone_dynamic), (r(8, 6),), {}), {"args": ({0: N},)}, lambda: ((r(2, 6),), {})
    ),
    "copy_from_other_input": Case(lambda: (m(_copy_from_other), (_x(), _x()), {})),
    "fill": Case(lambda: (m(_fill), (_x(), _x()), {})),
    "cat_written_in": Case(lambda: (m(_cat_written_in), (_x(), r(1, 6), r(3, 6)), {})),
    "swap_two_inputs": Case(lambda: (m(_swap), (_x(), _x()), {})),
    "kwarg_only": Case(lambda: (KwargOnly(), (_x(),), {"acc": _x()})),
    "kwarg_named": Case(lambda: (KwargNamed(), (_x(),), {"acc": _x()})),
    "dict_input": Case(lambda: (DictInput(), ({"acc": _x(), "x": _x()},), {})),
    "list_input": Case(lambda: (ListInput(), ([_x(), _x()],), {})),
    "mutated_in_reverse_order": Case(lambda: (m(_reverse_order), (_x(), _x()), {})),
    "kv_position_advanced_first": Case(
        lambda: (m(_advance_then_write), (r(2, 8, 4), r(2, 1, 4), torch.tensor([2])), {})
    ),
    "returned_twice": Case(lambda: (m(_returned_twice), (_x(),), {})),
    "broadcast_update": Case(lambda: (m(_broadcast_update), (_x(), r(6)), {})),
    "out_argument": Case(lambda: (m(_out_argument), (_x(), _x(), _x()), {})),
    "decomposed_lerp": Case(lambda: (m(_lerp), (_x(), _x()), {})),
    "decomposed_addcmul": Case(lambda: (m(_addcmul), (_x(), _x(), _x()), {})),
    "with_number_input": Case(lambda: (m(_with_number), (_x(), 3), {})),
    "dynamic_returned_and_viewed": Case(
        lambda: (m(_dynamic_returned), (r(8, 6),), {}), {"args": ({0: M3},)}, lambda: ((r(4, 6),), {})
    ),
    "metadata_mutation": Case(lambda: (m(_unsqueeze_in_place), (_x(),), {})),
    "swap_with_buffer": Case(lambda: (SwapWithBuffer(), (_x(),), {})),
    "nested_dict_of_list": Case(
        lambda: (NestedInputs(), ({"caches": [r(5, 4), r(5, 4)], "pos": torch.tensor([1, 3]), "k": r(2, 4)},), {})
    ),
    "cat_of_old_value_returned": Case(lambda: (m(_cat_of_old_value), (_x(), r(2, 6)), {})),
    "cat_of_old_value_read_first": Case(lambda: (m(_cat_of_old_value_read_first), (_x(), r(2, 6)), {})),
    "index_put_accumulate": Case(lambda: (m(_accumulate), (r(5, 4), torch.tensor([1, 1, 3]), r(3, 4)), {})),
    "masked_fill_then_scatter": Case(
        lambda: (m(_masked_scatter), (_x(), r(4, 6) > 0, torch.randint(0, 6, (4, 2)), r(4, 2)), {})
    ),
    "dtype_promoted_in_place": Case(lambda: (m(_promoted), (_x().half(), _x()), {})),
    "dtype_cast_by_copy": Case(lambda: (m(_cast_copy), (_i64().int(), _x()), {})),
    "zero_size": Case(lambda: (m(_zero_size), (r(0, 6), _x()), {})),
    "two_views_of_one_input": Case(lambda: (m(_two_views), (_x(),), {})),
    "named_input": Case(lambda: (NamedInput(), (_x(), _x()), {})),
    "named_out": Case(lambda: (NamedOut(), (_x(), _x()), {})),
    "views_taken_before_returned": Case(lambda: (m(_views_taken_before), (_x(),), {})),
    "recurrent_state": Case(lambda: (RecurrentState(), (_x(), _x()), {})),
}


# ---------------------------------------------------------------- harness


@dataclass(frozen=True)
class Prepared:
    ep: torch.export.ExportedProgram | None
    skip: str | None
    functional: torch.export.ExportedProgram | None = None  # ep.run_decompositions({})
    executorch: bytes = b""  # ExecuTorch's own lowering of ep
    sequences: tuple[tuple[tuple[tuple, dict], ...], ...] = ()  # each: the (args, kwargs) of each run of one load
    want: tuple[list[list], ...] = ()  # eager flat outputs, per sequence and run


@functools.cache
def prepared(name: str) -> Prepared:
    case = CASES[name]
    torch.manual_seed(0)
    module, args, kwargs = case.make()
    module.eval()
    try:
        ep = torch.export.export(
            module, copy.deepcopy(args), copy.deepcopy(kwargs) or None, dynamic_shapes=case.dynamic_shapes, strict=False
        )
    except Exception as error:  # noqa: BLE001 - torch.export's refusal, not devplan's
        return Prepared(None, f"torch.export refuses it: {type(error).__name__}: {str(error).strip().splitlines()[0]}")
    try:
        lowered = executorch_pte(copy.deepcopy(ep))
    except Exception as error:  # noqa: BLE001 - ExecuTorch's refusal, not devplan's
        return Prepared(
            None, f"ExecuTorch's lowering refuses it: {type(error).__name__}: {str(error).strip().splitlines()[0]}"
        )
    functional = ep.run_decompositions({})  # in-place updates become outputs
    signature = functional.graph_signature
    user_inputs = [spec.arg.name for spec in signature.input_specs if spec.kind == InputKind.USER_INPUT]
    mutated = [user_inputs.index(n) for n in signature.user_inputs_to_mutate.values()]
    full = (args, kwargs)
    sequences = [(full,) * RUNS]
    if case.smaller is not None:
        small = case.smaller()
        sequences += [(small,) * RUNS, (small, full, small)]  # one loaded method, sizes mixed
    want = tuple(eager_runs(module, s, mutated) for s in sequences)
    return Prepared(ep, None, functional, lowered, tuple(sequences), want)


_release_caches = released_after_module(prepared)


def _executorch(data: bytes, sequence) -> list[list]:
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(data)  # kept referenced while its method runs
    method = program.load_method("forward")
    return [[o.clone() for o in method.execute(pytree.tree_leaves(copy.deepcopy(inputs)))] for inputs in sequence]


def _devplan(data: bytes, sequence, first: bool) -> tuple[list[list], list[str]]:
    """Runs of `sequence` on one loaded method, and how the caller's tensors changed. The
    first sequence (one input set, run RUNS times) goes through devplan.runtime.run with the
    very same list each run; the others, fresh copies each run through one LoadedMethod."""
    problems = []
    if first:
        given = pytree.tree_leaves(copy.deepcopy(sequence[0]))
        kept = copy.deepcopy(given)
        runs = devplan.runtime.run(data, given, runs=len(sequence))
        givens = [(given, kept)]
    else:
        method = devplan.runtime.LoadedMethod(read_pte(data), "forward")
        runs, givens = [], []
        try:
            for inputs in sequence:
                given = pytree.tree_leaves(copy.deepcopy(inputs))
                givens.append((given, copy.deepcopy(given)))
                runs.append(method.execute(given))
        finally:
            method.release()
    for given, kept in givens:
        for i, (g, k) in enumerate(zip(given, kept)):
            if not (torch.equal(g, k) if isinstance(k, torch.Tensor) else g == k):
                problems.append(f"devplan.runtime changed the caller's input {i}")
    return runs, problems


def check(name: str, option: str) -> None:
    prep = prepared(name)
    if prep.skip:
        pytest.skip(prep.skip)
    # devplan retraces a program with in-place ops as run_decompositions({}) does (0.2 s a time):
    # the default compiles the exported program itself, the other options its retrace.
    data = devplan.compile(prep.ep if option == "default" else prep.functional, **OPTIONS[option]).data
    problems = []
    for number, (sequence, want) in enumerate(zip(prep.sequences, prep.want)):
        where = f"sequence {number}"
        if option in ON_DEVICE:
            with registered("cuda", HostAllocator()):
                runs, changed = _devplan(data, sequence, number == 0)
        else:
            runs, changed = _devplan(data, sequence, number == 0)
            problem = mismatch(f"{where} executorch", _executorch(data, sequence), want)
            if problem:
                problems.append(problem)
        problems += [f"{where} {c}" for c in changed]
        problem = mismatch(f"{where} devplan", runs, want)
        if problem:
            problems.append(problem)
    assert not problems, "; ".join(problems)


# the suite holds every case to the default and one other option in turn; the whole cross, to release
SUITE = rotating(CASES, list(OPTIONS))


@pytest.mark.parametrize(
    "name,option",
    [
        pytest.param(name, option, id=f"{name}-{option}", marks=() if (name, option) in SUITE else pytest.mark.release)
        for name in CASES
        for option in OPTIONS
    ],
)
def test_input_mutation(name, option):
    check(name, option)


@pytest.mark.parametrize("name", list(CASES))
def test_executorch_own_program_agrees(name):
    """The harness's convention, checked on ExecuTorch's own lowering: the mutated inputs, as
    after the call and in signature order, lead its outputs."""
    prep = prepared(name)
    if prep.skip:
        pytest.skip(prep.skip)
    problems = [
        mismatch(f"sequence {number} executorch's own program", _executorch(prep.executorch, sequence), want)
        for number, (sequence, want) in enumerate(zip(prep.sequences, prep.want))
    ]
    assert not any(problems), "; ".join(p for p in problems if p)
