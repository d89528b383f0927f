"""What ExecuTorch's runtime checks of every method as it loads a program, whichever method is
then run: its Python API loads with InternalConsistency verification, whose program validation
(runtime/executor/program_validation.cpp) walks every execution plan's values, and it reads
every method's planned buffer sizes. devplan's runtime decodes only the method it runs, so a
damaged value in another one ran in devplan while ExecuTorch refused the program (found by the
fuzz run's multi-method mode: `run --method batch5` of a program whose forward had a tensor of
scalar type 115, or a negative buffer size)."""

from __future__ import annotations

from devplan.errors import DevplanError
from devplan.pte import PteFile
from devplan.pte.decode import negative_buffer
from devplan.pte.fb.Tensor import TensorT
from devplan.pte.kinds import tensor_of
from devplan.pte.program_view import program_view
from devplan.pte.reader import ints, text

# ExecuTorch's ScalarType codes, Byte (0) to UInt64 (29); its validation refuses any other
_SCALAR_TYPES = range(30)
_STATIC = 0  # TensorShapeDynamism.STATIC: validation failures of other (dynamic) inputs are skipped


def check_every_method(pte: PteFile) -> None:
    """Refuse, in one line naming the method and value, what ExecuTorch's runtime refuses of
    any method as it loads the program."""
    for plan in pte.program.executionPlan or ():
        where = f"{pte.name}: method {text(plan.name)}"
        if negative := negative_buffer(ints(plan.nonConstBufferSizes)):
            raise DevplanError(
                f"{where}: buffer {negative[0]} has a negative size ({negative[1]}), so ExecuTorch's runtime "
                f"refuses the whole program, whichever method is run; the program is damaged"
            )
        values, inputs = plan.values or (), set(ints(plan.inputs))
        for index, value in enumerate(values):
            if (tensor := tensor_of(value)) is not None:
                if index in inputs and tensor.shapeDynamism != _STATIC:
                    continue
                what = _tensor_fault(tensor)
            else:
                continue
            if what:
                raise DevplanError(
                    f"{where}: value {index} {what}, so ExecuTorch's runtime refuses the whole "
                    f"program, whichever method is run; the program is damaged"
                )


def _tensor_fault(tensor: TensorT) -> str:
    """Of program_validation.cpp's checks, those reading leaves to the method run: the sizes'
    values, their product and tensor lists are checked for every method as the program is read."""
    if tensor.scalarType not in _SCALAR_TYPES:
        return f"is a tensor of scalar type {tensor.scalarType}, which ExecuTorch does not know"
    if tensor.sizes is None:  # read elsewhere as no sizes, a scalar's
        return "is a tensor without its sizes table"
    return ""


def check_planned_total(pte: PteFile, limit: int) -> None:
    """ExecuTorch's Python runtime allocates every method's planned buffers as it loads the
    program, so a damaged size in a method not run fails there (std::bad_alloc) while devplan's
    runtime allocates only the method it runs (found by the second fuzz run: `run --method
    batch5` of a program whose forward claimed 266 TB): all of them count against `limit`, the
    run's --max-memory."""
    program = program_view(pte)
    sizes = {
        name: sum(max(size, 0) for size in planned[1:])
        for name, planned in zip(program.method_names, program.planned_sizes)
    }
    if len(sizes) < 2:
        return  # the method run: its arenas are counted as they are allocated, each named
    if sum(sizes.values()) > limit:
        name, largest = max(sizes.items(), key=lambda item: item[1])
        raise DevplanError(
            f"{pte.name}: its methods plan {sum(sizes.values()):,} bytes of buffers in all (method "
            f"{name}: {largest:,}), more than the {limit:,} bytes allowed (--max-memory); ExecuTorch's "
            f"runtime allocates every method's as it loads the program"
        )
