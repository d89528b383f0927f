"""Dynamic shapes: planned at their upper bound, written DYNAMIC_BOUND, and run at any size
within it by ExecuTorch's runtime and by devplan's, outputs equal to eager PyTorch."""

from __future__ import annotations

import math

import pytest
import torch
from torch.export import Dim

import devplan
from devplan.errors import DevplanError
from devplan.pte import read_pte
from devplan.runtime import HostAllocator, LoadedMethod, registered
from testbed.executorch import executorch_pte

BOUND = 16


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        hidden = torch.relu(self.linear(x))
        return hidden.reshape(-1, 4, 2).sum(1) * 2, torch.cat([hidden, x], 0)


def exported(batch: int = 4, dynamic: bool = True):
    dims = {"x": {0: Dim("batch", min=1, max=BOUND)}} if dynamic else None
    return torch.export.export(Model().eval(), (torch.randn(batch, 8),), dynamic_shapes=dims)


def test_a_dynamic_program_is_planned_at_its_upper_bound():
    dynamic = devplan.compile(exported())
    static = devplan.compile(exported(batch=BOUND, dynamic=False))
    (planned,), (fixed,) = dynamic.planned.buffers, static.planned.buffers
    # cat pieces of a dynamic tensor start where their run-time sizes say, not at fixed offsets, so the
    # plan holds more than the static one, but never more than its bound or ExecuTorch's plan
    assert fixed.size <= planned.size == planned.lower_bound
    executorch = devplan.inspect(executorch_pte(exported()))["methods"][0]["buffers"]
    assert planned.size <= sum(b["size"] for b in executorch)
    tensors = devplan.inspect(dynamic.data)["methods"][0]["tensors"]
    (x,) = [t for t in tensors if t["role"] == "input"]
    assert x["shape"] == [BOUND, 8] and x["dynamic"]
    assert not any(t["dynamic"] for t in tensors if t["role"] == "constant")
    assert not any(t["dynamic"] for t in devplan.inspect(static.data)["methods"][0]["tensors"])


@pytest.mark.parametrize("delegates", [(), ("cuda:0=aten::linear",)], ids=("host", "delegated"))
def test_devplan_runtime_runs_any_size_within_the_bound(delegates):
    module = Model().eval()
    data = devplan.compile(exported(), delegates=delegates).data
    with registered("cuda", HostAllocator()):
        loaded = LoadedMethod(read_pte(data))
        try:
            for batch in (BOUND, 3, 1, 9):  # shrinking and growing again on the same memory
                x = torch.randn(batch, 8)
                with torch.no_grad():
                    want = module(x)
                for got, expected in zip(loaded.execute([x]), want):
                    torch.testing.assert_close(got, expected)
            with pytest.raises(
                DevplanError,
                match=r"input 0 must be a torch.float32 tensor of at most \(16, 8\), "
                r"got \(17, 8\)",
            ):
                loaded.execute([torch.randn(BOUND + 1, 8)])
        finally:
            loaded.release()


def test_executorch_runs_it_at_any_size_within_the_bound():
    from executorch.runtime import Runtime

    module = Model().eval()
    data = devplan.compile(exported()).data  # the loaded program keeps pointing into these bytes
    method = Runtime.get().load_program(data).load_method("forward")
    for batch in (BOUND, 5, 1):
        x = torch.randn(batch, 8)
        with torch.no_grad():
            want = module(x)
        for got, expected in zip(method.execute([x]), want):
            torch.testing.assert_close(got, expected)


def test_inspect_shows_a_dynamic_shape_as_its_bound():
    import io

    from rich.console import Console

    from devplan.inspection.render import render

    out = io.StringIO()
    render(
        devplan.inspect(devplan.compile(exported()).data), Console(file=out, width=100, color_system=None), ("tensors",)
    )
    rows = {
        line.split()[0]: line
        for line in out.getvalue().splitlines()
        if line.split() and line.split()[0].startswith("v")
    }
    inputs = [row for row in rows.values() if " input " in row]  # the role, then the source column
    assert len(inputs) == 1 and f" ≤{BOUND}×8 " in inputs[0]
    assert all("≤" not in row for row in rows.values() if " constant " in row)


class Sizes(torch.nn.Module):
    """Sizes the program computes while it runs: a flatten's batch, arithmetic and a
    comparison on it, the element count."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.linear = torch.nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        hidden = self.linear(torch.relu(self.conv(x)).flatten(1))
        scale = math.ceil(x.shape[0] / 3) + 2 * x.numel() // (3 * 6 * 6)
        return hidden * scale + hidden * (x.shape[0] > 4), hidden.view(x.shape[0] * 5)[: x.shape[0]]


def sizes_exported():
    dims = {"x": {0: Dim("batch", min=1, max=BOUND)}}
    return torch.export.export(Sizes().eval(), (torch.randn(4, 3, 6, 6),), dynamic_shapes=dims)


def sizes_program(delegates=()):
    return devplan.compile(sizes_exported(), delegates=delegates)


def test_sizes_computed_at_run_time_become_number_kernels():
    result = sizes_program()
    ops = [k.op for k in result.planned.method.kernels]
    assert "aten::sym_size.int" in ops and "executorch_prim::ceil.Scalar" in ops and "executorch_prim::gt.Scalar" in ops
    # x.numel() is read right after x arrives, so x need not live on to where the product is used
    assert ops.index("aten::sym_numel") < ops.index("aten::convolution.out")
    # reshapes of dynamic tensors share their bytes through et_view, as ExecuTorch's own do
    assert ops.count("executorch_prim::et_view.default") == 2 and "aten::view_copy.out" not in ops
    executorch = devplan.inspect(executorch_pte(sizes_exported()))["methods"][0]["buffers"]
    assert result.planned.buffers[0].size <= sum(b["size"] for b in executorch)
    operators = devplan.inspect(result.data)["methods"][0]["operators"]
    assert {"aten::sym_size.int", "executorch_prim::floordiv.Scalar"} <= {
        f"{o['name']}.{o['overload']}" for o in operators
    }


def test_executorch_runs_sizes_computed_at_run_time():
    from executorch.runtime import Runtime

    module = Sizes().eval()
    data = sizes_program().data  # the loaded program keeps pointing into these bytes
    assert_matches_eager(module, Runtime.get().load_program(data).load_method("forward").execute)


@pytest.mark.parametrize(
    "delegates", [(), ("cuda:0",), ("cuda:0=aten::view,aten::linear",)], ids=("host", "all-delegated", "view-delegated")
)
def test_devplan_runtime_runs_sizes_computed_at_run_time(delegates):
    module = Sizes().eval()
    data = sizes_program(delegates).data
    with registered("cuda", HostAllocator()):
        loaded = LoadedMethod(read_pte(data))
        try:
            assert_matches_eager(module, loaded.execute)
        finally:
            loaded.release()


def assert_matches_eager(module: torch.nn.Module, execute) -> None:
    for batch in (BOUND, 5, 1, 4):  # shrinking and growing again on the same memory
        x = torch.randn(batch, 3, 6, 6)
        with torch.no_grad():
            want = module(x)
        for got, expected in zip(execute([x]), want):
            torch.testing.assert_close(got, expected)


def test_devplan_runtime_runs_executorchs_own_dynamic_program():
    """ExecuTorch's lowering of the same model: its et_view, sym_size and executorch_prim
    kernels run on devplan's runtime too."""
    data = executorch_pte(sizes_exported())
    ops = {f"{o['name']}.{o['overload']}" for o in devplan.inspect(data)["methods"][0]["operators"]}
    assert {"executorch_prim::et_view.default", "aten::sym_size.int"} <= ops
    loaded = LoadedMethod(read_pte(data))
    try:
        assert_matches_eager(Sizes().eval(), loaded.execute)
    finally:
        loaded.release()


class CausalAttention(torch.nn.Module):
    """torch's fused attention with a causal mask, over a dynamic batch and sequence."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.qkv = torch.nn.Linear(32, 96)

    def forward(self, x):
        batch, seq, dim = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, 4, dim // 4).permute(2, 0, 3, 1, 4)
        attended = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return attended.transpose(1, 2).reshape(batch, seq, dim)


def encoder() -> torch.nn.Module:
    from samples.make_samples import EncoderBlock

    torch.manual_seed(0)
    return EncoderBlock(32, 4, 64)


@pytest.mark.parametrize(
    "make", [CausalAttention, pytest.param(encoder, marks=pytest.mark.sweep)], ids=("sdpa", "encoder")
)
def test_a_dynamic_sequence_runs_in_both_runtimes_within_executorchs_plan(make):
    from executorch.runtime import Runtime

    module = make().eval()
    dims = {"x": {0: Dim("batch", min=1, max=4), 1: Dim("seq", min=2, max=BOUND)}}
    ep = torch.export.export(module, (torch.randn(2, 6, 32),), dynamic_shapes=dims)
    result = devplan.compile(ep)
    executorch = devplan.inspect(executorch_pte(ep))["methods"][0]["buffers"]
    assert result.planned.buffers[0].size <= sum(b["size"] for b in executorch)
    method = Runtime.get().load_program(result.data).load_method("forward")
    loaded = LoadedMethod(read_pte(result.data))
    try:
        for batch, seq in ((4, BOUND), (1, 2), (3, 7)):
            x = torch.randn(batch, seq, 32)
            with torch.no_grad():
                want = module(x)
            for execute in (method.execute, loaded.execute):
                torch.testing.assert_close(execute([x])[0], want)
    finally:
        loaded.release()


class SameOrder(torch.nn.Module):
    """Ops that keep their input's bytes in order: only the sizes change, or nothing."""

    def forward(self, x):
        h = torch.relu(x)
        return (h.unsqueeze(1) * 2).squeeze(1) + h.clone(), h.expand(h.shape[0], 8).sum(1)


def test_same_order_ops_of_a_dynamic_tensor_share_its_bytes_through_et_view():
    from executorch.runtime import Runtime

    dims = {"x": {0: Dim("batch", min=1, max=BOUND)}}
    result = devplan.compile(torch.export.export(SameOrder(), (torch.randn(4, 8),), dynamic_shapes=dims))
    ops = [k.op for k in result.planned.method.kernels]
    assert ops.count("executorch_prim::et_view.default") == 4 and ops.count("aten::sym_size.int") == 1
    assert not {
        "aten::clone.out",
        "aten::expand_copy.out",
        "aten::unsqueeze_copy.out",
        "aten::squeeze_copy.dims_out",
        "aten::squeeze_copy.dim_out",
    } & set(ops)
    method = Runtime.get().load_program(result.data).load_method("forward")
    loaded = LoadedMethod(read_pte(result.data))
    try:
        for batch in (BOUND, 3, 1, 9):
            x = torch.randn(batch, 8)
            for execute in (method.execute, loaded.execute):
                for got, want in zip(execute([x]), SameOrder()(x)):
                    torch.testing.assert_close(got, want)
    finally:
        loaded.release()


class Positions(torch.nn.Module):
    """An op on a run-time size that devplan decomposes (arange's end is a number, not a tensor)."""

    def forward(self, x):
        return x + torch.arange(0, x.shape[1], dtype=torch.float32)


def test_a_decomposed_op_on_a_run_time_size_keeps_it_dynamic_and_the_export_unchanged():
    from executorch.runtime import Runtime

    def export():
        return torch.export.export(Positions(), (torch.randn(2, 8),), dynamic_shapes={"x": {1: Dim("seq", max=BOUND)}})

    ep = export()
    result = devplan.compile(ep)
    # compiling added no guard to the caller's export: ExecuTorch still plans it for any length
    assert (
        devplan.inspect(executorch_pte(ep))["methods"][0]["buffers"]
        == devplan.inspect(executorch_pte(export()))["methods"][0]["buffers"]
    )
    method = Runtime.get().load_program(result.data).load_method("forward")
    loaded = LoadedMethod(read_pte(result.data))
    try:
        for seq in (BOUND, 3, 8):
            x = torch.randn(2, seq)
            for execute in (method.execute, loaded.execute):
                torch.testing.assert_close(execute([x])[0], Positions()(x))
    finally:
        loaded.release()


def test_a_size_kernel_that_fails_at_run_time_is_one_line_naming_it():
    """A damaged program whose floordiv of sizes divides by zero: the runtime says which
    instruction failed, instead of a ZeroDivisionError traceback."""
    from dataclasses import replace

    from devplan.emit.program import to_program
    from devplan.pte import dumps_pte

    planned = sizes_program().planned
    method = planned.method
    step = next(i for i, k in enumerate(method.kernels) if k.op == "executorch_prim::floordiv.Scalar")
    zero = len(method.values)
    broken = replace(
        method,
        values=(*method.values, 0),
        kernels=tuple(
            replace(k, args=(k.args[0], zero, k.args[2])) if i == step else k for i, k in enumerate(method.kernels)
        ),
    )
    data = dumps_pte(*to_program(replace(planned, method=broken)))
    loaded = LoadedMethod(read_pte(data))
    try:
        with pytest.raises(
            DevplanError,
            match=rf"instruction {step} \(executorch_prim::floordiv.Scalar\) failed: "
            r"integer division or modulo by zero",
        ):
            loaded.execute([torch.randn(4, 3, 6, 6)])
    finally:
        loaded.release()
