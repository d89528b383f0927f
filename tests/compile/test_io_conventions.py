"""Calling conventions a compiler of exported programs tends to get wrong: inputs, parameters
and buffers returned as outputs, the same tensor returned twice, outputs that alias each other
or an input, unused and scalar inputs, kwargs, dicts and nested containers, zero-size and 0-d
tensors, small and low-precision dtypes, non-contiguous inputs, odd sizes, inputs updated in
place (returned ahead of the outputs, ExecuTorch's convention).

Each case is exported (non-strict), compiled by devplan and run twice by ExecuTorch's runtime
and twice by devplan's reference runtime on one loaded method, and every run's flat outputs
(pytree leaves, as eager_outputs takes them) are compared with two successive eager calls.
Only cases torch.export itself refuses are skipped; anything devplan refuses or gets wrong
fails, its message saying which of DEVPLAN_REFUSED, CRASH, RUNTIME_ERROR or MISMATCH it is."""

from __future__ import annotations

import copy
import traceback

import pytest
import torch
from torch import nn
from torch.export.graph_signature import InputKind
from torch.utils import _pytree as pytree

import devplan
import devplan.runtime
from devplan.errors import DevplanError
from testbed.models import eager_runs, mismatch, run_executorch

RUNS = 2


def m(fn):
    class Wrapped(nn.Module):
        def forward(self, *args, **kwargs):
            return fn(*args, **kwargs)

    return Wrapped()


class WithParameter(nn.Module):
    """A parameter and a lifted tensor constant, each returned as it is."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 6))
        self.table = torch.randn(6)  # a plain tensor attribute: a lifted constant

    def forward(self, x):
        return x * self.weight, self.weight, self.table


class WithBuffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.randn(4, 6))

    def forward(self, x):
        return x + self.scale, self.scale


class MutatedBuffer(nn.Module):
    """A running state updated in place and returned, so the second run sees the first's update."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.randn(4, 6))
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))

    def forward(self, x):
        self.state.mul_(0.5).add_(x)
        self.count.add_(1)
        return x * self.state, self.state, self.count


class SnapshotThenMutate(nn.Module):
    """A clone of a buffer taken before the buffer is updated keeps the old value."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.randn(4, 6))

    def forward(self, x):
        old = self.state.clone()
        self.state.add_(x)
        return old, self.state * 1


class SwapBuffers(nn.Module):
    """Two buffers that take each other's value: the write-back must not read a written one."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("a", torch.randn(4, 6))
        self.register_buffer("b", torch.randn(4, 6))

    def forward(self, x):
        old_a = self.a.clone()
        self.a.copy_(self.b)
        self.b.copy_(old_a)
        return self.a + x, self.b * 1


class BufferSetToInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.zeros(4, 6))

    def forward(self, x):
        previous = self.state * 1
        self.state.copy_(x)
        return previous, self.state + 1


class UnusedInput(nn.Module):
    def forward(self, x, unused):
        return x * 2


class Scalars(nn.Module):
    def forward(self, x, i: int, f: float, b: bool):
        y = x * i + f
        return (y if b else -y), x - i


class KwargsOnly(nn.Module):
    def forward(self, x, *, scale, shift=None):
        return x * scale + shift, scale


class DictIO(nn.Module):
    def forward(self, d):
        return {"total": d["a"] + d["b"], "a_twice": d["a"] * 2, "b": d["b"]}


class InPlaceInput(nn.Module):
    """A user input mutated in place (a user-input mutation in the export signature)."""

    def forward(self, x):
        x.add_(1)
        return x * 2


class CacheWrittenInPlace(nn.Module):
    """A cache the caller passes in, written through a slice (index_put on the input)."""

    def forward(self, cache, x):
        cache[:, :2] = x
        return cache.sum(1)


class SomeInputsMutated(nn.Module):
    """Two of three inputs updated, one of them from the one that is only read."""

    def forward(self, a, b, c):
        a.mul_(2)
        c.sub_(b)
        return a + b + c


class MutatedAndReturned(nn.Module):
    """The mutated input is itself the output."""

    def forward(self, x):
        x.add_(1)
        return x


class OddSizes(nn.Module):
    """Odd element counts of several element sizes, so byte offsets land on odd alignments."""

    def forward(self, f32, i8, f16, flag, u8):
        return (
            f32.relu() * 2,
            (i8 + 1).to(torch.float32).sum() + f32[:7].sum(),
            f16 * 3,
            ~flag,
            u8 + 1,
            torch.cat([f32[:5], i8.to(torch.float32)[:5]]),
            (f32 + 1).view(3, 11, 31),
        )


r = torch.randn


def _x():
    return r(4, 6)


def _t():
    return r(6, 4).t()  # (4, 6), not contiguous


# name -> () -> (module, args, kwargs); each built right after torch.manual_seed(0).
CASES = {
    "01_input_returned": lambda: (m(lambda x: (x, x * 2)), (_x(),), {}),
    "01b_input_returned_first_and_last": lambda: (m(lambda x, y: (x, x + y, y)), (_x(), _x()), {}),
    "02_same_result_twice": lambda: (m(lambda x: (lambda y: (y, y))(x + 1)), (_x(),), {}),
    "02b_same_input_twice": lambda: (m(lambda x: (x, x)), (_x(),), {}),
    "03_parameter_and_constant_returned": lambda: (WithParameter(), (_x(),), {}),
    "03b_folded_constant_returned": lambda: (m(lambda x: (x + 1, torch.ones(2, 3) * 2)), (_x(),), {}),
    "04_buffer_returned": lambda: (WithBuffer(), (_x(),), {}),
    "05_mutated_buffer_returned": lambda: (MutatedBuffer(), (_x(),), {}),
    "05b_buffer_clone_then_mutate": lambda: (SnapshotThenMutate(), (_x(),), {}),
    "05c_buffers_swapped": lambda: (SwapBuffers(), (_x(),), {}),
    "05d_buffer_set_to_input": lambda: (BufferSetToInput(), (_x(),), {}),
    "06_unused_input": lambda: (UnusedInput(), (_x(), _x()), {}),
    "07_int_float_bool_scalars": lambda: (Scalars(), (_x(), 3, 0.5, False), {}),
    "08_kwargs_only": lambda: (KwargsOnly(), (_x(),), {"scale": _x(), "shift": _x()}),
    "09_dict_in_dict_out": lambda: (DictIO(), ({"a": _x(), "b": _x()},), {}),
    "10_nested_with_none": lambda: (m(lambda x: (x + 1, [x * 2, None, (x - 1,)])), (_x(),), {}),
    "10b_nested_with_int": lambda: (m(lambda x: (x + 1, [x * 2, (x - 1, 3)])), (_x(),), {}),
    "11_zero_size": lambda: (m(lambda x, y: (x * 2, x.sum(0), torch.cat([x, y]) + 1, x.t())), (r(0, 6), _x()), {}),
    "12_zero_dim": lambda: (m(lambda s, x: (s * 2, (x * s).sum(), s)), (torch.tensor(1.5), _x()), {}),
    "13_int64": lambda: (m(lambda a: (a + 1, a * a, a)), (torch.arange(-12, 12).view(4, 6),), {}),
    "13_bool": lambda: (m(lambda a, b: (a & b, ~a, a | b, a)), (r(4, 6) > 0, r(4, 6) > 0), {}),
    "13_int8": lambda: (m(lambda a: (a + 1, a * 2, a)), (torch.randint(-50, 50, (4, 6), dtype=torch.int8),), {}),
    "13_uint8": lambda: (m(lambda a: (a + 1, a // 3, a)), (torch.randint(0, 200, (4, 6), dtype=torch.uint8),), {}),
    "13_float16": lambda: (m(lambda a: (a * 2 + 1, a.relu(), a)), (_x().half(),), {}),
    "13_bfloat16": lambda: (m(lambda a: (a * 2 + 1, a.relu(), a)), (_x().bfloat16(),), {}),
    "14_input_slice": lambda: (m(lambda x: x[1:]), (_x(),), {}),
    "14_input_view": lambda: (m(lambda x: x.view(-1)), (_x(),), {}),
    "14_input_transpose": lambda: (m(lambda x: x.t()), (_x(),), {}),
    "14_input_views_together": lambda: (m(lambda x: (x[1:], x.view(-1), x.t(), x)), (_x(),), {}),
    "15_intermediate_views": lambda: (m(lambda x: (lambda y: (y[1:], y.view(-1), y.t()))(x * 2)), (_x(),), {}),
    "16_inplace_reuse_reader_after_reader": lambda: (m(lambda x: (x.relu() + x * 2, x.sigmoid())), (_x(),), {}),
    "16b_inplace_reuse_chain": lambda: (
        m(lambda x: (lambda a: (a.relu() + a, a.sigmoid(), a.tanh()))(x + 1)),
        (_x(),),
        {},
    ),
    # a cat piece broadcast against the cat: the add may not be written over the cat's bytes
    "16c_inplace_over_cat_read_by_piece": lambda: (
        m(lambda x, y: (lambda a: torch.cat([a, y * 1]) + a)(x * 2)),
        (r(1, 6), r(3, 6)),
        {},
    ),
    "17_aliasing_outputs": lambda: (m(lambda x: (lambda y: (y, y.view(-1), y[0]))(x + 1)), (_x(),), {}),
    "18_no_ops": lambda: (m(lambda x: x), (_x(),), {}),
    "19_noncontiguous_input": lambda: (m(lambda x: (x * 2 + 1, x.sum(1), x[0])), (_t(),), {}),
    "20_odd_sizes": lambda: (
        OddSizes(),
        (
            r(1023),
            torch.randint(-9, 9, (7,), dtype=torch.int8),
            r(3).half(),
            r(5) > 0,
            torch.randint(0, 200, (13,), dtype=torch.uint8),
        ),
        {},
    ),
    "21_input_mutated_in_place": lambda: (InPlaceInput(), (_x(),), {}),
    "21b_cache_input_written_through_slice": lambda: (CacheWrittenInPlace(), (r(4, 6), r(4, 2)), {}),
    "21c_some_inputs_mutated": lambda: (SomeInputsMutated(), (_x(), _x(), _x()), {}),
    "21d_mutated_input_returned": lambda: (MutatedAndReturned(), (_x(),), {}),
}


def outcome(name: str) -> tuple[str, str]:
    """(status, detail) for one case."""
    torch.manual_seed(0)
    module, args, kwargs = CASES[name]()
    module.eval().requires_grad_(False)
    try:
        ep = torch.export.export(module.eval(), copy.deepcopy(args), copy.deepcopy(kwargs) or None, strict=False)
    except Exception as error:  # noqa: BLE001 - torch.export's refusal, not devplan's
        return "EXPORT_SKIPPED", f"{type(error).__name__}: {str(error).strip().splitlines()[0]}"
    signature = ep.run_decompositions({}).graph_signature  # functional: in-place updates become outputs
    user_inputs = [spec.arg.name for spec in signature.input_specs if spec.kind == InputKind.USER_INPUT]
    want = eager_runs(
        module, [(args, kwargs)] * RUNS, [user_inputs.index(name) for name in signature.user_inputs_to_mutate.values()]
    )
    try:
        data = devplan.compile(ep).data
    except DevplanError as error:
        return "DEVPLAN_REFUSED", str(error)
    except Exception:  # noqa: BLE001
        return "CRASH", "devplan.compile: " + " | ".join(traceback.format_exc().strip().splitlines()[-3:])
    flat = pytree.tree_leaves((args, kwargs))
    results, problems = {}, []
    note = ""
    try:
        try:
            results["executorch"] = run_executorch(data, copy.deepcopy((args, kwargs)), runs=RUNS)
        except RuntimeError as error:
            if "should be contiguous" not in str(error):
                raise
            # ExecuTorch's Python binding takes only contiguous (or channels-last) tensors, whatever
            # the program: the caller makes its input contiguous, which keeps its values.
            note = f"executorch refuses the strided input itself ({str(error).strip()}); ran it contiguous"
            results["executorch"] = run_executorch(
                data,
                pytree.tree_map(lambda t: t.contiguous() if isinstance(t, torch.Tensor) else t, (args, kwargs)),
                runs=RUNS,
            )
    except Exception as error:  # noqa: BLE001
        problems.append(f"RUNTIME_ERROR executorch: {type(error).__name__}: {str(error).strip().splitlines()[:1]}")
    try:
        results["devplan"] = devplan.runtime.run(data, copy.deepcopy(flat), runs=RUNS)
    except DevplanError as error:
        problems.append(f"RUNTIME_ERROR devplan: {error}")
    except Exception:  # noqa: BLE001
        problems.append("CRASH devplan.run: " + " | ".join(traceback.format_exc().strip().splitlines()[-3:]))
    for runtime, runs in results.items():
        problem = mismatch(runtime, runs, want)
        if problem:
            problems.append(problem)
    if problems:
        statuses = [p.split(" ")[0] for p in problems]
        status = "CRASH" if "CRASH" in statuses else statuses[0]
        return status, "; ".join(problems + ([note] if note else []))
    return "PASS", note


# Refused on purpose, each with one line saying what to do: a method's outputs are tensors
# (ExecuTorch's own lowering crashes on both).
REFUSED = {
    "10_nested_with_none": "only tensors can be method outputs",
    "10b_nested_with_int": "only tensors can be method outputs",
}


@pytest.mark.parametrize("name", list(CASES))
def test_calling_convention(name):
    status, detail = outcome(name)
    if status == "EXPORT_SKIPPED":
        pytest.skip(f"torch.export refuses it: {detail}")
    if name in REFUSED:
        assert status == "DEVPLAN_REFUSED" and REFUSED[name] in detail and "\n" not in detail, f"{status}: {detail}"
        return
    assert status == "PASS", f"{status}: {detail}"


def test_scalar_inputs_are_specialized_by_export():
    """Non-strict export bakes int, float and bool inputs in as constants: they stay in the
    flat input list, unused by any op (so another value at run time changes nothing)."""
    ep = torch.export.export(Scalars().eval(), (_x(), 3, 0.5, False), strict=False)
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
    assert [len(n.users) for n in placeholders[1:]] == [0, 0, 0]


@pytest.mark.parametrize(
    "options", [{"delegates": ["cuda:0"]}, {"delegates": ["cuda:0"], "device_io": True}], ids=["delegated", "device_io"]
)
def test_a_mutated_input_stays_on_the_host_under_delegates(options):
    """Its update is a host copy into the input's own bytes, whatever device reads it."""
    from devplan.runtime.allocator import HostAllocator, registered
    from devplan.spec import CPU

    ep = torch.export.export(SomeInputsMutated(), (_x(), _x(), _x()))
    args = [_x(), _x(), _x()]
    result = devplan.compile(ep, **options)
    method = result.planned.method
    assert [method.values[i].device for i in method.outputs[:2]] == [CPU, CPU]
    with registered("cuda", HostAllocator()):
        got = devplan.runtime.run(result.data, copy.deepcopy(args), runs=RUNS)
    want_runs = devplan.runtime.run(devplan.compile(ep).data, copy.deepcopy(args), runs=RUNS)
    for run, want in zip(got, want_runs, strict=True):
        for g, w in zip(run, want, strict=True):
            torch.testing.assert_close(g, w)


@pytest.mark.parametrize("alignment", [1, 2, 4])
def test_an_alignment_below_an_element_size_still_places_every_tensor_on_its_elements(alignment):
    """--alignment 4 placed an int64 at byte 12 (best, naive and greedy-order plans), and
    devplan's runtime refused the program it wrote as damaged: the planner's alignment is
    raised to the widest element the graph holds. Every planner, odd element counts of five
    element sizes; each plan runs and matches eager."""
    from devplan.dtypes import ITEMSIZE
    from devplan.planning import ALGORITHMS
    from devplan.spec import TensorSpec

    class Widths(nn.Module):
        def forward(self, f32, i64, i8, f16, flag):
            return f32 * 2, i64 + 1, i8 * 3, f16 + 1, ~flag, (i64 * 2).to(torch.float32) + f32[:5]

    args = (r(5), torch.arange(5), torch.arange(7, dtype=torch.int8), r(3).half(), r(5) > 0)
    ep = torch.export.export(Widths(), args)
    want = eager_runs(Widths(), [(args, {})])
    for planner in ALGORITHMS:
        result = devplan.compile(ep, alignment=alignment, planner=planner)
        method = result.planned.method
        for spec in method.values:
            if isinstance(spec, TensorSpec) and spec.mem_id is not None:
                assert spec.offset % ITEMSIZE[spec.dtype] == 0, (planner, spec)
        got = devplan.runtime.run(result.data, copy.deepcopy(list(args)))
        assert mismatch("devplan", got, want) is None, planner


def test_cuda_buffers_place_every_tensor_and_window_at_512_bytes_and_the_host_keeps_its_16():
    """torch's CUDA kernels choose by pointer alignment, and eager's tensors sit at the caching
    allocator's 512 bytes (on an H200, a conv net's bias add over a 16-byte-aligned plan ran 1.7x
    as long): by default a CUDA buffer's tensors, in the program and in its payloads, and the
    delegates' windows are placed at 512, while host buffers keep 16; --alignment 16 plans
    every buffer at 16, as ExecuTorch does. Odd sizes, so a 16-byte plan would not land on 512
    by chance; each program still matches eager."""
    from devplan.pte import read_pte
    from devplan.pte.decode import methods
    from devplan.runtime import HostAllocator, registered
    from devplan.spec import CPU

    def offsets(pte, found):
        """Per device type, every planned offset of the program and its payloads'."""
        view = methods(pte)[0]
        for tensor in view.tensors.values():
            if tensor.mem_id is not None:
                found.setdefault(view.device_of(tensor).type, set()).add(tensor.offset)
        for delegate in view.delegates:
            if delegate.window is not None:
                mem_id, offset = delegate.window
                found.setdefault(view.buffer_devices.get(mem_id, CPU).type, set()).add(offset)
                offsets(pte.delegate_program(0, delegate.index), found)
        return found

    class Odd(nn.Module):
        def forward(self, x):
            h = torch.nn.functional.linear(x, torch.ones(13, 7)).relu()
            return torch.nn.functional.linear(h, torch.ones(5, 13)) * 2 + h.sum()

    args = (r(3, 7),)
    ep = torch.export.export(Odd(), args)
    want = eager_runs(Odd(), [(args, {})])
    for delegates, alignment in [(["cuda:0"], None), (["cuda:0=aten::linear"], None), (["cuda:0"], 16)]:
        result = devplan.compile(ep, delegates=delegates, alignment=alignment)
        found = offsets(read_pte(result.data), {})
        assert found["cuda"] and all(o % 16 == 0 for placed in found.values() for o in placed)
        assert all(o % 512 == 0 for o in found["cuda"]) == (alignment is None), (delegates, alignment, found)
        if delegates == ["cuda:0=aten::linear"]:
            assert any(o % 512 for o in found["cpu"]), found  # the host's tensors stay at 16
        with registered("cuda", HostAllocator()):
            got = devplan.runtime.run(result.data, copy.deepcopy(list(args)))
        assert mismatch("devplan", got, want) is None, delegates
