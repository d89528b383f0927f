"""A program's methods refused as ExecuTorch's runtime refuses them, whichever method runs, in
one line naming the file: a method of a million values (and a constant method too long to
compile), two methods of one name, a name that is not UTF-8, and in another method than the
one run a negative or huge buffer or a tensor ExecuTorch's runtime refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from devplan.errors import DevplanError
from tests.inspection.runner import invoke, one_line


def _export_add():
    import torch

    class Add(torch.nn.Module):
        def forward(self, x):
            return x + 1

    return torch.export.export(Add(), (torch.ones(2),))


def _wide_constant_method(outputs: int) -> bytes:
    """A program whose constant method m returns `outputs` ints: every value one table shared
    by offset (a FlatBuffer may point at one table many times), so it packs in a second where
    devplan's compile of as many items takes minutes."""
    import devplan
    from devplan.pte import read_pte
    from devplan.pte.fb.EValue import EValueT
    from devplan.pte.writer import dumps_pte

    pte = read_pte(devplan.compile(_export_add(), constant_methods={"m": [1, 2]}).data)
    (plan,) = [p for p in pte.program.executionPlan if p.name == b"m"]

    class Shared(EValueT):
        def Pack(self, builder):  # once; every later element points at the same table
            if not hasattr(self, "packed"):
                self.packed = super().Pack(builder)
            return self.packed

    shared = Shared()
    shared.valType, shared.val = plan.values[0].valType, plan.values[0].val
    plan.values, plan.outputs = [shared] * outputs, list(range(outputs))
    return dumps_pte(pte.program, [bytes(segment) for segment in pte.segments])


def test_a_method_of_a_million_values_is_refused_at_once_as_executorch_refuses_it(tmp_path):
    """ExecuTorch's runtime verifies a program with FlatBuffers' verifier, which refuses more
    than 1,000,000 tables (each value is two: the EValue and its Int). devplan's inspect took a
    minute and 700 MB on a million values; it now refuses at the vector, before walking it (from
    500,001 values on, it refuses once its walk has counted the tables)."""
    import time

    from devplan.pte import read_pte
    from devplan.pte.verify import MAX_TABLES

    wide = tmp_path / "wide.pte"
    wide.write_bytes(_wide_constant_method(MAX_TABLES))
    started = time.monotonic()
    with pytest.raises(DevplanError, match=r"more than 1000000 tables.*ExecuTorch's runtime refuses"):
        read_pte(wide)
    assert time.monotonic() - started < 2
    for command in (("inspect", str(wide)), ("run", str(wide), "--method", "m")):
        one_line(invoke(*command), str(wide), "tables")
    runtime = pytest.importorskip("executorch.runtime")
    with pytest.raises(RuntimeError, match="Failed to load program"):
        runtime.Runtime.get().load_program(str(wide))
    fewer = _wide_constant_method(1000)  # the same shape within the bound reads and runs
    from devplan.runtime import run

    assert run(fewer, [], method="m")[0] == [1] * 1000 and len(read_pte(fewer).program.executionPlan) == 2


def test_a_constant_method_too_long_for_executorch_is_refused_before_it_is_compiled():
    import devplan
    from devplan.pte.verify import MAX_TABLES

    with pytest.raises(DevplanError, match=r"constant method m: 500000 items.*ExecuTorch's runtime"):
        devplan.compile(_export_add(), constant_methods={"m": [1] * (MAX_TABLES // 2)})


def _renamed(data: bytes, old: bytes, new: bytes) -> bytes:
    """The program with method `old` renamed `new` (as long), through its object tables."""
    from devplan.pte import read_pte
    from devplan.pte.writer import dumps_pte

    pte = read_pte(data)
    for plan in pte.program.executionPlan:
        if plan.name == old:
            plan.name = new
    return dumps_pte(pte.program, [bytes(segment) for segment in pte.segments])


@pytest.mark.parametrize("twin", [b"get_eos_ids", b"forward"])
def test_a_program_with_two_methods_of_one_name_is_refused_when_read(twin, tmp_path):
    """devplan took the last of two methods named alike, ExecuTorch's runtime the first."""
    import devplan
    from devplan.pte import read_pte

    data = devplan.compile(_export_add(), constant_methods={"get_eos_ids": [1, 2], "get_eos_idz": "hello"}).data
    twins = tmp_path / "twins.pte"
    twins.write_bytes(_renamed(data, b"get_eos_idz" if twin == b"get_eos_ids" else b"get_eos_ids", twin))
    with pytest.raises(DevplanError, match=rf"^{twins}: methods \d and \d are both named {twin.decode()!r}"):
        read_pte(twins)
    for command in (("inspect", str(twins)), ("run", str(twins), "--method", twin.decode())):
        one_line(invoke(*command), str(twins), "both named")


def test_a_method_name_of_invalid_utf8_is_refused_as_executorchs_runtime_refuses_it(tmp_path):
    """ExecuTorch's runtime (its Python API) fails to load such a program (UnicodeDecodeError)."""
    import devplan

    data = _renamed(devplan.compile(_export_add(), constant_methods={"name": "x"}).data, b"name", b"na\xffme")
    odd = tmp_path / "odd.pte"
    odd.write_bytes(data)
    one_line(invoke("inspect", str(odd)), str(odd), "method 1", "not UTF-8")
    runtime = pytest.importorskip("executorch.runtime")
    with pytest.raises(UnicodeDecodeError):
        runtime.Runtime.get().load_program(str(odd))


def _forward_damaged(tmp_path: Path, change) -> Path:
    """testbed's multi-method program with change(forward) applied to its forward method,
    written; ExecuTorch's runtime refuses to load it, even to run batch5 (asserted here)."""
    import copy

    from devplan.pte import dumps_pte, read_pte
    from devplan.pte.reader import text
    from testbed.small_programs import multi_method

    pte = read_pte(multi_method())
    program = copy.deepcopy(pte.program)
    change(next(plan for plan in program.executionPlan if text(plan.name) == "forward"))
    damaged = tmp_path / "damaged.pte"
    damaged.write_bytes(dumps_pte(program, pte.segments))
    runtime = pytest.importorskip("executorch.runtime")
    with pytest.raises((RuntimeError, MemoryError), match="Failed to (load program|get size of planned buffer)|alloc"):
        runtime.Runtime.get().load_program(damaged.read_bytes()).load_method("batch5")
    return damaged


def test_a_negative_buffer_size_in_another_method_is_refused_as_executorch_refuses_the_program(tmp_path):
    """Found by the fuzz run's multi-method mode: one byte made forward's buffer sizes longer,
    reading a negative one; `run --method batch5` ran in devplan while ExecuTorch's runtime
    refused to load the program ("Failed to get size of planned buffer"), as it reads every
    method's planned buffers at load."""
    damaged = _forward_damaged(
        tmp_path, lambda forward: setattr(forward, "nonConstBufferSizes", [*forward.nonConstBufferSizes, -8])
    )
    one_line(
        invoke("run", str(damaged), "--method", "batch5"),
        str(damaged),
        "method forward: buffer 2",
        "negative size (-8)",
    )


@pytest.mark.parametrize("command", [("inspect",), ("inspect", "--json"), ("check",)])
def test_a_negative_buffer_size_is_refused_by_every_reader_not_shown(tmp_path, command):
    """Left from the third round's fuzz: `inspect` printed a buffer of -8 bytes (and summed it
    into the planned total) where `run` refused the program; a size is never negative, so the
    decoded view refuses it for every command that reads the method."""
    damaged = _forward_damaged(
        tmp_path, lambda forward: setattr(forward, "nonConstBufferSizes", [*forward.nonConstBufferSizes, -8])
    )
    one_line(invoke(*command, str(damaged)), str(damaged), "method forward: buffer 2", "negative size (-8)")


@pytest.mark.parametrize(
    "field, value, needle",
    [("scalarType", 115, "tensor of scalar type 115"), ("sizes", None, "tensor without its sizes table")],
)
def test_a_tensor_executorch_refuses_in_another_method_is_refused_whichever_method_runs(field, value, needle, tmp_path):
    """Found by the fuzz runs' multi-method mode: forward's input given scalar type 115 (one
    byte), or no sizes table; `run --method batch5` ran in devplan, while ExecuTorch's runtime
    validates every method's tensors as it loads the program (program_validation.cpp) and
    refused it. (Sizes that are negative or overflow are refused for every method as the
    program is read.)"""
    from devplan.pte.fb.KernelTypes import KernelTypes

    def change(forward):
        setattr(next(value.val for value in forward.values if value.valType == KernelTypes.Tensor), field, value)

    damaged = _forward_damaged(tmp_path, change)
    one_line(invoke("run", str(damaged), "--method", "batch5"), str(damaged), "method forward: value ", needle)


def test_a_huge_buffer_in_another_method_counts_against_max_memory(tmp_path):
    """Found by the second fuzz run: one byte made forward's buffer 1 claim 266 TB; `run --method
    batch5` ran in devplan, while ExecuTorch's runtime allocates every method's planned buffers
    as it loads the program and failed (std::bad_alloc)."""
    damaged = _forward_damaged(tmp_path, lambda forward: setattr(forward, "nonConstBufferSizes", [0, 1 << 48]))
    one_line(
        invoke("run", str(damaged), "--method", "batch5"),
        str(damaged),
        "method forward: 281,474,976,710,656",
        "--max-memory",
    )
