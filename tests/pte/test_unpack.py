"""read_pte's unpacker (devplan/pte/unpack.py) makes the objects the generated object API
makes, field for field and type for type: on ExecuTorch's programs (constant segment, no
header, an XNNPACK delegate with named data) and devplan's (a delegate on cuda:0, constant
methods of every kind, a transformer)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import devplan
from devplan.pte.fb.Chain import Chain
from devplan.pte.fb.Program import ProgramT
from devplan.pte.header import check_container
from devplan.pte.unpack import unpack_program
from tests.tiers import tiered

ROOT = Path(__file__).resolve().parents[2]
CONSTANTS = {"get_max_seq_len": 128, "use_kv_cache": True, "temperature": 0.5, "name": "tiny", "eos": [1, 2]}


def _generated(flat: bytes) -> ProgramT:
    """The bindings' own unpacking, stacktraces left packed as the unpacker leaves them."""
    said = Chain.StacktraceIsNone
    Chain.StacktraceIsNone = lambda self: True
    try:
        return ProgramT.InitFromPackedBuf(flat, 0)
    finally:
        Chain.StacktraceIsNone = said


def _tree(value):
    """Everything an object holds, types included (a numpy array by its dtype)."""
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.tolist())
    if isinstance(value, list):
        return [_tree(item) for item in value]
    if hasattr(value, "__dict__"):
        return (type(value).__name__, {key: _tree(item) for key, item in sorted(vars(value).items())})
    return (type(value).__name__, value)


def _flat(data: bytes) -> bytes:
    header = check_container(data, "test")
    return data[: header.program_size] if header else data


PROGRAMS = {  # how each of devplan's programs is compiled
    "transformer": lambda: devplan.compile(ROOT / "samples" / "transformer.pt2"),
    "delegate": lambda: devplan.compile(ROOT / "samples" / "mlp.pt2", delegates=["cuda:0=aten::linear"]),
    "constant methods": lambda: devplan.compile(ROOT / "samples" / "two_io.pt2", constant_methods=CONSTANTS),
}


@pytest.mark.parametrize("which", ["affine", "plain", "xnnpack"])
def test_executorch_programs_unpack_as_the_bindings_do(executorch_programs, which):
    flat = _flat(executorch_programs[which])
    assert _tree(unpack_program(flat)) == _tree(_generated(flat))


@pytest.mark.parametrize("which", tiered(PROGRAMS, fast=["delegate", "constant methods"]))
def test_devplan_programs_unpack_as_the_bindings_do(which):
    flat = _flat(PROGRAMS[which]().data)
    unpacked = unpack_program(flat)
    assert _tree(unpacked) == _tree(_generated(flat))
    assert all(chain.stacktrace is None for plan in unpacked.executionPlan for chain in plan.chains)


def test_a_delegate_payload_unpacks_as_the_bindings_do():
    pte = devplan.read_pte(PROGRAMS["delegate"]().data)
    flat = _flat(bytes(pte.delegate_payload(0, 0)))
    assert _tree(unpack_program(flat)) == _tree(_generated(flat))
