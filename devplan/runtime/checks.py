"""What ExecuTorch's runtime refuses of a program and of a method, as plain functions over the
file and its decoded MethodView: most run before the reference runtime allocates anything
(`check_program`, `checked_dtypes`), so that a damaged size or layout is named in one line
rather than allocated or computed on; the rest where the loaded method meets them as it binds
its values (`value_index`, `check_number_lists`, `check_chains`)."""

from __future__ import annotations

import torch

from devplan.errors import DevplanError
from devplan.pte import PteFile
from devplan.pte.decode import MethodView, Tensor, methods
from devplan.pte.fb.KernelTypes import KernelTypes
from devplan.pte.payloads import runs_here
from devplan.pte.program_view import program_view
from devplan.runtime.program_validation import check_every_method
from devplan.spec import CPU

_SLACK = 1 << 20  # bytes a buffer may hold beyond twice what its tensors reach (alignment, reserves)


def check_program(pte: PteFile) -> None:
    """Refuse what ExecuTorch's runtime refuses of a whole program, whichever method is run."""
    program = program_view(pte)
    if program.version:  # ExecuTorch's runtime reads schema version 0 only
        raise DevplanError(
            f"{program.name}: program schema version {program.version}; ExecuTorch's runtime (and "
            f"devplan's) reads version 0; the program is damaged or made for a newer runtime"
        )
    if program.constants_unlisted:
        raise DevplanError(
            f"{program.name}: the constant segment lists no offsets (every writer lists at least 0); the program is damaged"
        )
    check_every_method(pte)


def checked_dtypes(view: MethodView, windows: dict[int, int] | None = None) -> dict[int, torch.dtype]:
    """The torch dtype of each tensor value, once every tensor of the method has passed the
    checks ExecuTorch's runtime makes as it parses the method (its tables, each tensor's
    layout and memory) and a bound on the buffer sizes, before anything is allocated.
    `windows`: mem_id -> the bytes its delegates' memory windows reach (`window_reach`)."""
    if view.unlisted:  # as ExecuTorch's runtime refuses it ("Missing outputs field", ...)
        raise DevplanError(f"{view.where} has no {' or '.join(view.unlisted)} table; the program is damaged")
    dtypes = {index: _dtype(view.where, index, t) for index, t in view.tensors.items()}
    _check_layouts(view)
    _check_memory(view)
    _check_sizes(view, dtypes, windows or {})
    return dtypes


def window_reach(pte: PteFile, view: MethodView) -> dict[int, int]:
    """mem_id -> the end of the furthest memory window a delegate of devplan's has in it: the
    window's offset plus the bytes its payload plans there (a payload's own nested windows lie
    inside those bytes, and its own load checks them). A large device program's working memory
    is mostly its delegates' windows, which its own tensors do not reach."""
    reach: dict[int, int] = {}
    for delegate in view.delegates:
        if delegate.window is None or not runs_here(delegate.id):
            continue  # another backend's delegate is refused where it is opened
        mem_id, offset = delegate.window
        payload = pte.delegate_program(view.plan_index, delegate.index)
        sizes: tuple[int, ...] = next((m.buffer_sizes for m in methods(payload) if m.name == "forward"), ())
        reach[mem_id] = max(reach.get(mem_id, 0), offset + (sizes[1] if len(sizes) > 1 else 0))
    return reach


def _dtype(where: str, index: int, t: Tensor) -> torch.dtype:
    """The torch dtype of tensor value `index`, one this runtime can hold."""
    dtype = getattr(torch, t.dtype, None)
    if not isinstance(dtype, torch.dtype) or dtype.is_complex or t.dtype.startswith(("q", "bits", "float8")):
        raise DevplanError(
            f"{where}: value {index} has element type {t.dtype}, which the reference runtime cannot hold"
        )
    if t.dtype in _BAREBONES_UNSIGNED:
        raise DevplanError(
            f"{where}: value {index} has element type {t.dtype}, which ExecuTorch's kernels do not "
            f"compute on (its type promotion aborts on it); use int32 or int64"
        )
    return dtype


# ExecuTorch's "barebones" unsigned types: its kernels' type switches leave them out and its
# type promotion asserts, aborting the process (found by the fuzz run: a uint32 input to an add)
_BAREBONES_UNSIGNED = ("uint16", "uint32", "uint64")


def _check_layouts(view: MethodView) -> None:
    """Refuse the layouts ExecuTorch's runtime refuses as it parses a tensor, and those it
    would run on other terms than this runtime can (another device)."""
    where = view.where
    for index, t in view.tensors.items():
        if t.dim_order is None:
            raise DevplanError(
                f"{where}: value {index} has no dim order, which ExecuTorch's runtime "
                f"requires of every tensor; the program is damaged"
            )
        if not t.ordered:
            shown = list(t.dim_order) if len(t.dim_order) <= 8 else f"of {len(t.dim_order)} entries"
            raise DevplanError(
                f"{where}: value {index} has the dim order {shown}, not an order of its "
                f"{len(t.shape)} dimensions; the program is damaged"
            )
        if t.storage_offset:
            raise DevplanError(
                f"{where}: value {index} has the storage offset {t.storage_offset}, which "
                f"ExecuTorch does not support; the program is damaged"
            )
        if t.unbound:
            raise DevplanError(
                f"{where}: value {index} has a DYNAMIC_UNBOUND shape, which ExecuTorch's "
                f"runtime does not support; the program is damaged"
            )
        buffer = view.buffer_devices.get(t.mem_id, CPU) if t.mem_id is not None else CPU
        if t.mem_id is not None and t.said_device is not None and t.said_device != buffer:
            raise DevplanError(
                f"{where}: value {index} is said to be on {t.said_device} (extra_tensor_info) "
                f"but is planned in buffer {t.mem_id}, which is on {buffer}; the program is "
                f"damaged"
            )


def _check_memory(view: MethodView) -> None:
    """Refuse a tensor some instruction names that has no memory: neither planned, nor a
    constant, nor an input or output a caller hands in. ExecuTorch's runtime gives it a null
    data pointer, which its kernels would read or write; zeros here would be a wrong answer."""
    conditions = {row.args[0] for row in view.instructions if row.kind == "jump_false"}
    empty = view.unplanned | {
        i for i in conditions if (t := view.tensors.get(i)) is not None and t.mem_id is None and not t.constant
    }
    for index in sorted(empty - set(view.inputs) - set(view.outputs)):
        writer = view.first_writers.get(index)
        use = (
            f"instruction {writer} writes it"
            if writer is not None
            else f"instruction {view.lifetimes[index][0]} reads it"
            if index in view.lifetimes
            else ""
        )
        raise DevplanError(
            f"{view.where}: value {index} is a tensor with no data and no place in a buffer, "
            f"not an input or output"
            f"{'; ' + use if use else ''} (ExecuTorch's runtime gives it no memory); the "
            f"program is damaged"
        )


def _check_sizes(view: MethodView, dtypes: dict[int, torch.dtype], windows: dict[int, int]) -> None:
    """Every planned tensor at a whole element of its buffer (decoding has put it inside),
    and no buffer far larger than its tensors and its delegates' windows reach (a damaged
    size would otherwise have us allocate it)."""
    reach = dict(windows)
    for index, t in view.tensors.items():
        if t.placed is not None:
            mem_id, offset = t.placed
            if offset % dtypes[index].itemsize:
                raise DevplanError(
                    f"{view.where}: value {index} starts at byte {offset} of buffer {mem_id}, "
                    f"not a multiple of its element size; the program is damaged"
                )
            reach[mem_id] = max(reach.get(mem_id, 0), offset + t.nbytes)
    for mem_id in range(1, len(view.buffer_sizes)):
        if view.buffer_sizes[mem_id] > 2 * reach.get(mem_id, 0) + _SLACK:
            raise DevplanError(
                f"{view.where}: buffer {mem_id} claims {view.buffer_sizes[mem_id]} bytes but its "
                f"tensors and delegate windows reach only {reach.get(mem_id, 0)}; the program is damaged"
            )


def value_index(view: MethodView, value: int, user: str) -> int:
    """`value`, which `user` (an input, an instruction, ...) names, once it is one of the
    method's values."""
    if not 0 <= value < len(view.kinds):
        raise DevplanError(
            f"{view.where}: {user} names value {value}, but the method has {len(view.kinds)}; the program is damaged"
        )
    return value


def check_number_lists(view: MethodView) -> None:
    """Refuse a list of numbers holding another value: ExecuTorch's runtime aborts on a list
    item of another type."""
    for index, items in view.lists.items():
        if view.kinds[index] == KernelTypes.IntList and any(view.kinds[i] != KernelTypes.Int for i in items):
            raise DevplanError(
                f"{view.where}: value {index}, a list of numbers, holds a value that is not a "
                f"number; the program is damaged"
            )


def check_chains(view: MethodView) -> None:
    """Refuse a method without instructions to run, as ExecuTorch's runtime does."""
    if not view.chains:  # as ExecuTorch's runtime refuses it ("No chains")
        raise DevplanError(f"{view.where}: the method has no chain of instructions; the program is damaged")
    if view.unlisted_chains:  # as ExecuTorch's runtime refuses it
        raise DevplanError(f"{view.where}: a chain has no list of instructions; the program is damaged")
