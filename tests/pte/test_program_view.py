"""devplan.pte.program_view: the one view of a program as a whole that inspect hands on, beside
its methods' views. Checked against ExecuTorch's own deserializer, and held as the only way
devplan/inspection/ reads a program (no import of the bindings or the reader's helpers)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import devplan
from devplan.pte import read_pte
from devplan.pte.decode import methods
from devplan.pte.fb.KernelTypes import KernelTypes
from devplan.pte.kinds import VALUE_KINDS, value_kind
from devplan.pte.program_view import program_view
from testbed.small_programs import compiled

INSPECTION = Path(devplan.__file__).parent / "inspection"


@pytest.mark.parametrize("name", ["affine", "plain", "xnnpack"])
def test_the_view_says_what_executorch_reads(name, executorch_programs):
    from executorch.exir._serialize._program import deserialize_pte_binary

    data = executorch_programs[name]
    pte, theirs = read_pte(data), deserialize_pte_binary(data)
    view = program_view(pte)
    assert view.name == pte.name and view.size == len(data)
    assert view.version == theirs.program.version
    assert view.method_names == tuple(plan.name for plan in theirs.program.execution_plan)
    assert view.planned_sizes == tuple(tuple(plan.non_const_buffer_sizes) for plan in theirs.program.execution_plan)
    assert [segment.size for segment in view.segments] == [segment.size for segment in pte.program.segments or ()]
    assert [datum.key for datum in view.named_data] == list(theirs.named_data.pte_data if theirs.named_data else [])
    assert not view.external_keys and view.external is None
    assert tuple(view.methods) == methods(pte)
    for p, plan in enumerate(theirs.program.execution_plan):
        for d in range(len(plan.delegates)):
            assert bytes(view.payload(p, d)) == bytes(pte.delegate_payload(p, d))


def test_the_view_is_made_once_per_file_and_payload():
    pte = read_pte(compiled(delegates=["cuda:0"]))
    view = program_view(pte)
    assert program_view(pte) is view and view.methods is view.methods
    assert view.payload_program(0, 0) is pte.delegate_program(0, 0)
    assert program_view(view.payload_program(0, 0)) is program_view(pte.delegate_program(0, 0))


def test_every_value_kind_has_its_name():
    codes = [value for name, value in vars(KernelTypes).items() if not name.startswith("_")]
    assert sorted(VALUE_KINDS) == sorted(codes)
    assert value_kind(KernelTypes.OptionalTensorList) == "optional_tensor_list" and value_kind(99) == "kind(99)"


def test_inspection_reads_programs_only_through_the_views():
    """No module of devplan/inspection/ imports the FlatBuffer bindings or the reader's helpers:
    what it reads of a program, it reads from program_view's ProgramView and decode's
    MethodViews."""
    found = []
    for path in sorted(INSPECTION.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            found += [
                f"{path.name}: {name}"
                for name in names
                if name.startswith(("devplan.pte.fb", "devplan.pte.reader", "devplan.pte.unpack"))
            ]
    assert not found, found
