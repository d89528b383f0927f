"""Reading a .pte: check the container and the FlatBuffer, then unpack it into the object API's classes."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Hashable, TypeVar

from devplan import dtypes
from devplan.errors import DevplanError
from devplan.files import map_input
from devplan.pte.fb.BackendDelegateDataReference import BackendDelegateDataReferenceT
from devplan.pte.fb.DataLocation import DataLocation
from devplan.pte.fb.Program import ProgramT
from devplan.pte.fb.TensorDataLocation import TensorDataLocation
from devplan.pte.header import HEADER_OFFSET, MAX_PROGRAM_BYTES, ExtendedHeader, check_container
from devplan.pte.kinds import tensor_of
from devplan.pte.payloads import payload_format
from devplan.pte.ptd import PtdFile, key_text, read_ptd
from devplan.pte.unpack import unpack_program
from devplan.pte.verify import verify_program

if TYPE_CHECKING:
    from devplan.pte.frames import Where

_DAMAGED = "the file is damaged or not a .pte"
# devplan's payloads hold no delegates of their own; deeper nesting is damage, and each level
# could multiply the work of everything that reads the program
MAX_DELEGATE_DEPTH = 4
T = TypeVar("T")


@dataclass(frozen=True)
class PteFile:
    """A program and the bytes that live outside its FlatBuffer. Vectors of numbers in
    `program` are numpy arrays viewing a copy of the FlatBuffer's bytes (the generated object
    API's choice); strings are bytes."""

    program: ProgramT  # without chains' stacktraces, which stacktrace() reads
    # data of program.segments[i], in order: views of `data`, so that only what a reader
    # touches is ever read from a mapped file
    segments: tuple[bytes | memoryview, ...]
    size: int  # file size in bytes
    header: ExtendedHeader | None
    name: str = "<bytes>"  # how messages name the file
    # the whole file, which the program's FlatBuffer starts: bytes given, or a file's private
    # mapping (a memoryview; what writes into it stays in this process)
    data: bytes | memoryview = b""
    path: str | None = None  # the file mapped, which ExecuTorch's runtime can map itself
    depth: int = 0  # how many delegate payloads this program lies inside
    # the .ptd data file holding the weights its external tensors name by key, when given
    external: PtdFile | None = None
    # what is worked out once per file (see memo); only memo reaches it
    _memo: dict[Hashable, Any] = field(default_factory=dict, compare=False, repr=False)

    def memo(self, key: Hashable, make: Callable[[], T]) -> T:
        """What `make()` gives, worked out once per file for `key`: payloads and their programs,
        so that delegates sharing one read it once, decoded methods, constants. Each user's keys
        are tuples that start with its own name, so that no two users share one. A `make` that
        raises leaves nothing behind, and the next call tries again."""
        if key not in self._memo:
            self._memo[key] = make()
        made: T = self._memo[key]
        return made

    @property
    def mapped(self) -> bool:
        """Whether `data` maps a file privately, so that tensors may use its bytes in place."""
        return isinstance(self.data, memoryview)

    @property
    def constants_unlisted(self) -> bool:
        """Whether the program has a constant segment that lists no offsets, which no writer
        leaves (every one lists at least 0): damage. Readers then look in the deprecated
        constant_buffer, so inspect shows such a file, but ExecuTorch's runtime, built
        without constant_buffer, refuses it."""
        segment = self.program.constantSegment
        return segment is not None and (segment.offsets is None or len(segment.offsets) == 0)

    def stacktrace(self, plan_index: int, chain_index: int) -> list[Where | None] | None:
        """What each instruction's frames say (devplan.pte.frames.Where, None for an
        instruction without a frame list), or None when the chain keeps no stacktrace."""
        from devplan.pte.frames import read_stacktrace

        return read_stacktrace(self.data, plan_index, chain_index)

    def constant_data(self, data_buffer_idx: int) -> bytes | memoryview | None:
        """Bytes of constant `data_buffer_idx` (a Tensor's data_buffer_idx), or None for 0
        (no constant) or an index the program does not have. From the constant segment the
        bytes run to the next constant's offset, so they include its alignment padding."""
        if data_buffer_idx <= 0:
            return None
        sub = self.program.constantSegment
        if sub is not None and sub.offsets is not None and len(sub.offsets) > 0:
            offsets = sub.offsets
            if data_buffer_idx >= len(offsets):
                return None
            segment = self.segments[sub.segmentIndex]
            stop = int(offsets[data_buffer_idx + 1]) if data_buffer_idx + 1 < len(offsets) else len(segment)
            return segment[int(offsets[data_buffer_idx]) : stop]
        buffers = self.program.constantBuffer or []
        if data_buffer_idx >= len(buffers):
            return None
        storage = buffers[data_buffer_idx].storage
        return b"" if storage is None else bytes(storage)

    def mutable_data(self, index: int) -> bytes | memoryview:
        """Initial bytes `index` of a planned tensor (its data_buffer_idx) from the first
        mutable data segment, as ExecuTorch's runtime reads them."""
        segments = self.program.mutableDataSegments or ()
        if not segments:
            raise DevplanError(
                f"{self.name}: a planned tensor has initial data {index} but the program has no mutable data"
            )
        offsets = ints(segments[0].offsets)
        if not 0 < index < len(offsets):
            raise DevplanError(
                f"{self.name}: a planned tensor names initial data {index} of {len(offsets)}; the program is damaged"
            )
        data = self.segments[segments[0].segmentIndex]
        stop = offsets[index + 1] if index + 1 < len(offsets) else len(data)
        return data[offsets[index] : stop]

    def delegate_program(self, plan_index: int, delegate_index: int) -> "PteFile":
        """The payload of a delegate read as a program (devplan's payloads are ET12 programs),
        its messages naming it '<file> delegate N'. A payload that several delegates share is
        read once, named after the first delegate that asked."""
        key, payload = self._payload(plan_index, delegate_index)
        name = f"{self.name} delegate {delegate_index}"
        return self.memo(("program", key), lambda: self._read_payload(payload, name))

    def _read_payload(self, payload: bytes | memoryview, name: str) -> "PteFile":
        """A delegate's payload read as a program one level deeper than this one."""
        if self.depth >= MAX_DELEGATE_DEPTH:
            raise DevplanError(
                f"{name}: a payload nested {self.depth + 1} delegates deep (devplan reads "
                f"{MAX_DELEGATE_DEPTH}); {_DAMAGED}"
            )
        return replace(read_pte(payload, name=name), depth=self.depth + 1)

    def payload_key(self, plan_index: int, delegate_index: int) -> tuple[int, int]:
        """Where a delegate's payload lives (location, index): delegates with one key share it."""
        return self._payload(plan_index, delegate_index)[0]

    def delegate_payload(self, plan_index: int, delegate_index: int) -> bytes | memoryview:
        """The processed blob of delegate `delegate_index` in plan `plan_index`."""
        return self._payload(plan_index, delegate_index)[1]

    def _payload(self, plan_index: int, delegate_index: int) -> tuple[tuple[int, int], bytes | memoryview]:
        """(where the payload lives, its bytes), the bytes copied out of the program once."""
        plans = self.program.executionPlan or []
        if not 0 <= plan_index < len(plans):
            raise DevplanError(f"{self.name}: no execution plan {plan_index}; the program has {len(plans)}")
        delegates = plans[plan_index].delegates or []
        where = f"{self.name}: execution_plan[{plan_index}].delegates[{delegate_index}]"
        if not 0 <= delegate_index < len(delegates):
            raise DevplanError(f"{where}: no such delegate; the plan has {len(delegates)}")
        reference = delegates[delegate_index].processed
        if reference is None:
            raise DevplanError(f"{where}: the delegate names no payload; {_DAMAGED}")
        key = (int(reference.location), int(reference.index))
        return key, self.memo(("payload", key), lambda: self._payload_bytes(where, reference))

    def _payload_bytes(self, where: str, reference: BackendDelegateDataReferenceT) -> bytes | memoryview:
        """The bytes `reference` names, copied out of the program (an inline blob) or the file's segment."""
        if reference.location == DataLocation.INLINE:
            inline = self.program.backendDelegateData or []
            if reference.index >= len(inline):
                raise DevplanError(
                    f"{where}: payload is inline blob {reference.index} but the program has {len(inline)}; {_DAMAGED}"
                )
            data = inline[reference.index].data
            return b"" if data is None else bytes(data)
        if reference.location == DataLocation.SEGMENT:
            if reference.index >= len(self.segments):
                raise DevplanError(
                    f"{where}: payload is segment {reference.index} but the program has {len(self.segments)}; {_DAMAGED}"
                )
            return self.segments[reference.index]
        raise DevplanError(f"{where}: unknown payload location {reference.location}; {_DAMAGED}")


def read_pte(
    source: "str | os.PathLike[str] | bytes | memoryview | PteFile",
    name: str | None = None,
    *,
    data: "str | os.PathLike[str] | PtdFile | None" = None,
) -> PteFile:
    """Read and check a .pte from a path or from its bytes; any problem is a DevplanError
    whose message starts with `name` (default: the path, or "<bytes>"). A PteFile is already
    read (standard input, which can be read only once, is read into one). `data` is the .ptd
    holding the weights the program keeps outside (its external tensors), checked against it:
    every key there, of the tensor's dtype and shape and at least its size."""
    pte = source if isinstance(source, PteFile) else _read_program(source, name)
    return pte if data is None else _with_data(pte, read_ptd(data))


def _read_program(source: "str | os.PathLike[str] | bytes | memoryview", name: str | None) -> PteFile:
    if isinstance(source, (bytes, bytearray, memoryview)):
        # A private immutable copy: the unpacked program keeps views into it.
        data: bytes | memoryview = bytes(source)
        name = name or "<bytes>"
    else:
        name = name or os.fspath(source)
        data = map_input(
            source, name=name, limit=MAX_PROGRAM_BYTES, hint="pass the path of a .pte file, or - to read standard input"
        )
    header = check_container(data, name)
    program_size = header.program_size if header else len(data)
    # the FlatBuffer alone, copied out of a mapped file: every table read reads these bytes,
    # and the segments behind them (the weights) stay on disk until something reads them
    flat = data if isinstance(data, bytes) and program_size == len(data) else bytes(data[:program_size])
    verify_program(flat, HEADER_OFFSET + (header.length if header else 0), program_size, name, len(data))
    try:
        program = unpack_program(flat)
    except Exception as error:  # a bug or gap in the checks above must still read as bad input
        detail = " ".join(str(error).split())
        raise DevplanError(
            f"{name}: cannot decode the program ({type(error).__name__}: {detail}); {_DAMAGED}"
        ) from error
    pte = PteFile(
        program,
        _segments(program, data, header, name),
        len(data),
        header,
        name,
        data,
        path=os.fsdecode(source) if isinstance(data, memoryview) and isinstance(source, (str, os.PathLike)) else None,
    )
    _check_references(pte)
    return pte


def _with_data(pte: PteFile, ptd: PtdFile) -> PteFile:
    """The program with its .ptd, once every external tensor it names is found there."""
    for plan in pte.program.executionPlan or ():
        for index, value in enumerate(plan.values or ()):
            t, key = tensor_of(value), external_key(value.val)
            if t is None or key is None:
                continue
            where = f"{pte.name}: method {text(plan.name)}: value {index}"
            entry = ptd.entries.get(key)
            if entry is None:
                raise DevplanError(
                    f"{where} is the external weight {key!r}, which {ptd.name} does not hold "
                    f"({len(ptd.entries)} keys); pass the .ptd written with this program"
                )
            shape, dim_order = tuple(ints(t.sizes)), tuple(ints(t.dimOrder))
            wanted = f"{dtypes.name_of(t.scalarType)}{list(shape)}"
            if entry.layout is None:  # ExecuTorch's runtime reads the layout it lacks and crashes
                raise DevplanError(
                    f"{ptd.name}: key {key!r} holds bytes with no tensor layout (named data) but "
                    f"{where} is the tensor {wanted}; pass the .ptd written with this program"
                )
            if entry.layout != (t.scalarType, shape, dim_order):
                raise DevplanError(
                    f"{ptd.name}: key {key!r} is {entry.layout.text()} (dim order "
                    f"{list(entry.layout.dim_order)}) but {where} is {wanted} (dim order "
                    f"{list(dim_order)}); pass the .ptd written with this program"
                )
            needed = math.prod(shape) * dtypes.ITEMSIZE.get(dtypes.name_of(t.scalarType), 0)
            if len(ptd.data(key)) < needed:
                raise DevplanError(
                    f"{ptd.name}: key {key!r} holds {len(ptd.data(key))} bytes but {where} "
                    f"({wanted}) needs {needed}; pass the .ptd written with this program"
                )
    for key, where in delegate_data_outside(pte).items():
        if key not in ptd.entries:
            raise DevplanError(
                f"{pte.name}: {where} reads named data {key!r}, which neither the program nor "
                f"{ptd.name} holds; pass the .ptd written with this program"
            )
        _check_named_size(pte, ptd, key)
    return replace(pte, external=ptd, _memo={})


def _check_named_size(pte: PteFile, ptd: PtdFile, key: str) -> None:
    """A delegate's named datum in the .ptd holds at least the bytes its graph reads there:
    ExecuTorch's XNNPACK backend reads past a shorter one (NaN or zeros, or a crash)."""
    wanted, where = delegate_data_sizes(pte)[key]
    if len(ptd.data(key)) < wanted:
        raise DevplanError(
            f"{ptd.name}: key {key!r} holds {len(ptd.data(key))} bytes but {where} reads {wanted} "
            f"there; pass the .ptd written with this program"
        )


def delegate_data_outside(pte: PteFile) -> dict[str, str]:
    """The named data ExecuTorch's XNNPACK delegates read that the program does not hold (kept
    in a .ptd), each key with the first delegate that reads it."""

    def collect() -> dict[str, str]:
        held = {key_text(entry.key) for entry in pte.program.namedData or ()}
        outside: dict[str, str] = {}
        for p, plan in enumerate(pte.program.executionPlan or ()):
            for d, delegate in enumerate(plan.delegates or ()):
                backend = text(delegate.id)
                for key, _ in payload_format(backend).named_data(pte.delegate_payload(p, d)):
                    if key not in held:
                        outside.setdefault(key, f"method {text(plan.name)}: delegate {d} ({backend})")
        return outside

    return pte.memo("delegate_data_outside", collect)


def delegate_data_sizes(pte: PteFile) -> dict[str, tuple[int, str]]:
    """Each key of named data ExecuTorch's XNNPACK delegates read, with the most bytes one reads
    there (its graph's ConstantDataOffset.size) and which delegate that is."""

    def collect() -> dict[str, tuple[int, str]]:
        sizes: dict[str, tuple[int, str]] = {}
        for p, plan in enumerate(pte.program.executionPlan or ()):
            for d, delegate in enumerate(plan.delegates or ()):
                backend = text(delegate.id)
                for key, size in payload_format(backend).named_data(pte.delegate_payload(p, d)):
                    if size > sizes.get(key, (-1, ""))[0]:
                        sizes[key] = (size, f"method {text(plan.name)}: delegate {d} ({backend})")
        return sizes

    return pte.memo("delegate_data_sizes", collect)


def external_key(tensor: Any) -> str | None:
    """The key of a constant the program keeps in a .ptd (a tensor value whose data is
    EXTERNAL and which is not planned), else None."""
    info = getattr(tensor, "extraTensorInfo", None)
    if info is None or info.location != TensorDataLocation.EXTERNAL or tensor.allocationInfo is not None:
        return None
    return key_text(info.fullyQualifiedName)


def _segments(
    program: ProgramT, data: bytes | memoryview, header: ExtendedHeader | None, name: str
) -> tuple[memoryview, ...]:
    listed = program.segments or []
    # ExecuTorch writes no header when every segment is empty, so those need none.
    located = header is not None and header.segment_base_offset > 0
    base, available = (
        (header.segment_base_offset, header.segment_data_size) if header is not None and located else (0, 0)
    )
    for index, segment in enumerate(listed):
        if segment.offset + segment.size <= available:
            continue
        if not located:
            raise DevplanError(
                f"{name}: corrupt: segment {index} claims {segment.size} bytes but the file has no extended header "
                f"locating segment data; {_DAMAGED}"
            )
        raise DevplanError(
            f"{name}: truncated: segment {index} claims bytes {segment.offset}..{segment.offset + segment.size} "
            f"of the segment data but that holds {available} bytes (file size {len(data)}); {_DAMAGED}"
        )
    view = memoryview(data).toreadonly()  # slices of bytes would copy them
    return tuple(view[base + segment.offset : base + segment.offset + segment.size] for segment in listed)


def _check_references(pte: PteFile) -> None:
    """Every segment index and constant offset in the program must land inside the file."""
    program, name, count = pte.program, pte.name, len(pte.segments)
    subsegments = [("constant_segment", program.constantSegment)]
    subsegments += [(f"mutable_data_segments[{i}]", sub) for i, sub in enumerate(program.mutableDataSegments or [])]
    for where, sub in subsegments:
        if sub is None or sub.offsets is None or len(sub.offsets) == 0:
            continue
        if sub.segmentIndex >= count:
            raise DevplanError(
                f"{name}: corrupt: {where} names segment {sub.segmentIndex} but the program has {count}; {_DAMAGED}"
            )
        furthest, available = int(max(sub.offsets)), len(pte.segments[sub.segmentIndex])
        if furthest > available:
            raise DevplanError(
                f"{name}: corrupt: {where} has offset {furthest} but segment {sub.segmentIndex} holds {available} bytes; {_DAMAGED}"
            )
    for index, entry in enumerate(program.namedData or []):
        if entry.segmentIndex >= count:
            raise DevplanError(
                f"{name}: corrupt: named_data[{index}] names segment {entry.segmentIndex} but the program has {count}; {_DAMAGED}"
            )
    for plan_index, plan in enumerate(program.executionPlan or []):
        for delegate_index in range(len(plan.delegates or [])):
            pte.delegate_payload(plan_index, delegate_index)
    _check_method_names(program, name)
    _check_delegate_graphs(pte)
    _check_named_data(pte)


def _check_delegate_graphs(pte: PteFile) -> None:
    """Each payload checked as its backend's format says (pte.payloads; XNNPACK's graph whole and
    well-formed, xnnpack.check_graph): ExecuTorch's
    runtime aborts on some damaged ones rather than refusing them."""
    for p, plan in enumerate(pte.program.executionPlan or ()):
        for d, delegate in enumerate(plan.delegates or ()):
            backend = text(delegate.id)
            payload_format(backend).check(
                pte.delegate_payload(p, d), f"{pte.name}: method {text(plan.name)}: delegate {d} ({backend})"
            )


def _check_named_data(pte: PteFile) -> None:
    """The named data the program holds for its XNNPACK delegates hold at least the bytes their
    graphs read there, as a .ptd's must (_check_named_size)."""
    sizes = delegate_data_sizes(pte) if pte.program.namedData else {}
    for entry in pte.program.namedData or ():
        key = key_text(entry.key)
        wanted, where = sizes.get(key, (0, ""))
        if len(pte.segments[entry.segmentIndex]) < wanted:
            raise DevplanError(
                f"{pte.name}: named data {key!r} holds {len(pte.segments[entry.segmentIndex])} bytes "
                f"but {where} reads {wanted} there; {_DAMAGED}"
            )


def _check_method_names(program: ProgramT, name: str) -> None:
    """Two methods of one name are refused: ExecuTorch's runtime loads the first, and every
    reader here that looks a method up by name would find another. So is a name that is not
    UTF-8, which would otherwise read as text with replacement characters."""
    first: dict[bytes, int] = {}
    for index, plan in enumerate(program.executionPlan or []):
        key = bytes(plan.name or b"") if not isinstance(plan.name, str) else plan.name.encode()
        try:  # ExecuTorch's runtime (its Python API) fails to load a program whose names are not
            key.decode("utf-8")
        except UnicodeDecodeError:
            raise DevplanError(
                f"{name}: method {index} is named {key!r}, which is not UTF-8 (ExecuTorch's runtime "
                f"refuses the program); {_DAMAGED}"
            ) from None
        if key in first:
            raise DevplanError(
                f"{name}: methods {first[key]} and {index} are both named {text(plan.name)!r}; "
                f"ExecuTorch's runtime would load only the first; {_DAMAGED}"
            )
        first[key] = index


def text(value: object) -> str:
    """A string field as str: FlatBuffers strings read back as bytes, programs built in
    memory hold str, and an absent one is empty."""
    if value is None:
        return ""
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def ints(vector: Iterable[Any] | None) -> list[int]:
    """A FlatBuffers vector of numbers (a numpy array, or None when absent) as ints."""
    return [] if vector is None else [int(item) for item in vector]
