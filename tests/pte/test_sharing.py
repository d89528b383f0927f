"""Each string and small vector of numbers written once (devplan/pte/sharing.py): compile's
programs share them and ExecuTorch's runtime runs them, resizing tensors of dynamic shape
among them; a vector of offsets is never shared; without `share` the writer packs a program
as before."""

from __future__ import annotations

import pytest
import torch

import devplan
from devplan.pte import dumps_pte, read_pte
from devplan.pte.fb.BackendDelegate import BackendDelegateT
from devplan.pte.fb.BackendDelegateDataReference import BackendDelegateDataReferenceT
from devplan.pte.fb.DataLocation import DataLocation
from devplan.pte.fb.EValue import EValueT
from devplan.pte.fb.ExecutionPlan import ExecutionPlanT
from devplan.pte.fb.KernelTypes import KernelTypes
from devplan.pte.fb.Operator import OperatorT
from devplan.pte.fb.Program import Program, ProgramT
from devplan.pte.fb.Tensor import Tensor, TensorT


def _plan(name: str, operator: str) -> ExecutionPlanT:
    """Two tensors of one shape and dim order, a delegate of a backend every plan names, and
    one operator: its vector of one offset is the same bytes in each plan, pointing at each
    plan's own operator."""
    tensors = [TensorT(scalarType=6, sizes=[2, 3], dimOrder=[0, 1]) for _ in range(2)]
    return ExecutionPlanT(
        name=name,
        values=[EValueT(valType=KernelTypes.Tensor, val=tensor) for tensor in tensors],
        inputs=[0],
        outputs=[1],
        operators=[OperatorT(name=operator, overload="out")],
        delegates=[
            BackendDelegateT(
                id="SomeBackend", processed=BackendDelegateDataReferenceT(location=DataLocation.SEGMENT, index=0)
            )
        ],
    )


def _sizes_at(value) -> int:
    """Where the sizes vector of a Tensor value lies in the buffer."""
    tensor = Tensor()
    tensor.Init(value.Val().Bytes, value.Val().Pos)
    return tensor._tab.Vector(tensor._tab.Offset(8))  # Tensor's third field, sizes


def _positions(data: bytes) -> dict[str, set[int]]:
    """Where each plan's tensors' sizes vectors and its delegate's id lie."""
    program = Program.GetRootAs(data, 0)
    sizes, ids = set(), set()
    for p in range(program.ExecutionPlanLength()):
        plan = program.ExecutionPlan(p)
        sizes |= {_sizes_at(plan.Values(v)) for v in range(plan.ValuesLength())}
        delegate = plan.Delegates(0)
        ids.add(delegate._tab.Indirect(delegate._tab.Pos + delegate._tab.Offset(4)))  # its id, a string
    return {"sizes": sizes, "ids": ids}


def test_shared_strings_and_vectors_read_back_as_written():
    program = ProgramT(executionPlan=[_plan("forward", "aten::add"), _plan("other", "aten::mul")])
    plain, shared = dumps_pte(program, [b"payload"]), dumps_pte(program, [b"payload"], share=True)
    assert len(shared) < len(plain)
    assert {key: len(found) for key, found in _positions(shared).items()} == {"sizes": 1, "ids": 1}
    assert {key: len(found) for key, found in _positions(plain).items()} == {"sizes": 4, "ids": 2}
    back = read_pte(shared).program
    # each plan still reads its own operator: the vectors of offsets to them were not shared
    assert [plan.operators[0].name for plan in back.executionPlan] == [b"aten::add", b"aten::mul"]
    assert [list(value.val.sizes) for plan in back.executionPlan for value in plan.values] == [[2, 3]] * 4
    assert [plan.delegates[0].id for plan in back.executionPlan] == [b"SomeBackend"] * 2


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.b(torch.relu(self.a(x))) + x


def test_compiles_program_shares_them_and_executorch_resizes_its_dynamic_tensors():
    """Tensors of one shape share their sizes; those of a dynamic batch too, which ExecuTorch's
    runtime copies out of the program before it resizes them, so that two batch sizes in turn
    on one loaded method compute what eager does."""
    pytest.importorskip("executorch.runtime")
    from executorch.runtime import Runtime

    torch.manual_seed(0)
    model = _Model().eval()
    batch = torch.export.Dim("batch", min=1, max=16)
    exported = torch.export.export(model, (torch.randn(4, 8),), dynamic_shapes=({0: batch},))
    data = devplan.compile(exported).data
    plan = Program.GetRootAs(data, 0).ExecutionPlan(0)
    values = [plan.Values(v) for v in range(plan.ValuesLength())]
    positions = [_sizes_at(value) for value in values if value.ValType() == KernelTypes.Tensor]
    assert len(set(positions)) < len(positions)
    method = Runtime.get().load_program(data).load_method("forward")
    for rows in (3, 16, 1):
        x = torch.randn(rows, 8)
        (got,) = method.execute([x])
        torch.testing.assert_close(got, model(x).detach())
