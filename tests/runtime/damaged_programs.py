"""Programs devplan compiled, damaged one table at a time, and what refuses them: the reference
runtime (in one line naming the file) and ExecuTorch's (by an exception, or in a child where it
aborts). Shared by the strict runtime's tests, the agreement with ExecuTorch's and the decoded
views' tests."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest

import devplan
from devplan.errors import DevplanError
from devplan.pte import dumps_pte, read_pte
from devplan.pte.fb.InstructionArguments import InstructionArguments
from devplan.pte.fb.KernelTypes import KernelTypes
from devplan.runtime import HostAllocator, registered
from testbed.models import run_executorch
from testbed.small_programs import ARGS


def damaged(data: bytes, change) -> bytes:
    """`data` rewritten after change(plan) edits a copy of its first method."""
    pte = read_pte(data)
    program = copy.deepcopy(pte.program)
    change(program.executionPlan[0])
    return dumps_pte(program, pte.segments)


def refused(data: bytes, *needles: str) -> str:
    with pytest.raises(DevplanError) as error:
        with registered("cuda", HostAllocator()):
            devplan.run(read_pte(data, name="bad.pte"), list(ARGS))
    message = str(error.value)
    assert message.startswith("bad.pte") and "\n" not in message
    for needle in needles:
        assert needle in message, message
    return message


def executorch_refuses(data: bytes, args: tuple = ARGS) -> bool:
    try:
        run_executorch(data, args)
    except Exception:  # its runtime raises RuntimeError or ValueError for a program it will not load
        return True
    return False


def executorch_refuses_in_a_child(data: bytes, tmp_path) -> bool:
    """For damage on which ExecuTorch's runtime aborts the process rather than raising."""
    path = tmp_path / "damaged.pte"
    path.write_bytes(data)
    load = "import sys; from executorch.runtime import Runtime; Runtime.get().load_program(sys.argv[1]).load_method('forward')"
    return subprocess.run([sys.executable, "-c", load, str(path)], capture_output=True).returncode != 0


def constants(plan) -> list:
    return [
        v.val
        for v in plan.values
        if v.valType == KernelTypes.Tensor and v.val.dataBufferIdx > 0 and v.val.allocationInfo is None
    ]


def kernel_calls(plan) -> list:
    return [i for i in plan.chains[0].instructions if i.instrArgsType == InstructionArguments.KernelCall]
