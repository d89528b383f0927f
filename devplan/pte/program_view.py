"""The decoded view of a read program as a whole, beside decode.py's view of each method: its
version, its segments where they lie in the file, the bytes it spends on constants, the named
data it holds, the weights it keeps outside (in a .ptd), its methods' names and planned
sizes as the file gives them, and its delegates' payloads and the programs they hold. Made
once per PteFile (`program_view`), it is the one hand-off from devplan/pte/ to its readers:
inspect (and so check, diff and golden files) reads a program through it and its
MethodViews, never through the FlatBuffer's object API or the reader's helpers."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, NamedTuple

from devplan.pte.decode import MethodView, methods
from devplan.pte.ptd import PtdFile
from devplan.pte.reader import PteFile, delegate_data_outside, external_key, ints, text

if TYPE_CHECKING:
    from devplan.pte.fb.Program import ProgramT
    from devplan.pte.frames import Where


class Segment(NamedTuple):
    index: int  # type: ignore[assignment]  # a field, not tuple.index: the program's segment index
    offset: int  # where its bytes start in the file (the segment base added)
    size: int


class NamedDatum(NamedTuple):
    """Weights a backend keeps by key in a segment of their own (ExecuTorch's XNNPACK's)."""

    key: str  # as text, bytes that are not UTF-8 replaced (the document's spelling)
    segment: int
    size: int  # its segment's size (keys may share one)


@dataclass(frozen=True, eq=False)
class ProgramView:
    name: str  # how messages name the file
    size: int  # the file's size in bytes
    version: int  # the program's schema version (0 is the only one ExecuTorch reads)
    segments: tuple[Segment, ...]
    # bytes the file spends on constant tensor data: the constant segment when the program
    # uses one (alignment padding included), else the inline constant buffers
    constant_bytes: int
    constants_unlisted: bool  # PteFile.constants_unlisted: a constant segment listing no offsets
    named_data: tuple[NamedDatum, ...]
    method_names: tuple[str, ...]  # by plan index
    # each method's non_const_buffer_sizes as the file gives them, unchecked (its MethodView
    # refuses a negative one); 0 is the format's reserved entry
    planned_sizes: tuple[tuple[int, ...], ...]
    external_tensors: frozenset[str]  # the keys of the tensors the program keeps in a .ptd
    external: PtdFile | None  # the .ptd given with the program
    _pte: PteFile = field(repr=False)

    @cached_property
    def methods(self) -> tuple[MethodView, ...]:
        """Every method's decoded view (devplan.pte.decode.methods), each checked as it is made."""
        return methods(self._pte)

    @cached_property
    def outside(self) -> dict[str, str]:
        """The named data ExecuTorch's XNNPACK delegates read that the program does not hold (kept
        in a .ptd), each key with the first delegate that reads it."""
        return delegate_data_outside(self._pte)

    @property
    def external_keys(self) -> frozenset[str]:
        """Every key of the weights the program keeps in a .ptd: its external tensors' and the
        named data its delegates read outside it."""
        return self.external_tensors | frozenset(self.outside)

    @property
    def named_segments(self) -> dict[int, int]:
        """segment index -> size, for the segments named data lives in (keys may share one)."""
        return {datum.segment: datum.size for datum in self.named_data}

    def payload(self, plan_index: int, delegate_index: int) -> bytes | memoryview:
        """The processed blob of delegate `delegate_index` of method `plan_index`."""
        return self._pte.delegate_payload(plan_index, delegate_index)

    def payload_program(self, plan_index: int, delegate_index: int) -> PteFile:
        """That payload read as a program, once per payload (PteFile.delegate_program); a
        DevplanError when it is none devplan reads."""
        return self._pte.delegate_program(plan_index, delegate_index)

    def stacktrace(self, plan_index: int, chain_index: int) -> list[Where | None] | None:
        """What each instruction of a chain came from (PteFile.stacktrace), or None when the
        chain keeps no stacktrace."""
        return self._pte.stacktrace(plan_index, chain_index)


def program_view(pte: PteFile) -> ProgramView:
    """The program's view, made once per PteFile. Making it reads only what reading the file
    has checked, so it refuses nothing; its methods are decoded, and checked, when first asked."""
    return pte.memo(("program_view",), lambda: _view(pte))


def _view(pte: PteFile) -> ProgramView:
    program = pte.program
    base = pte.header.segment_base_offset if pte.header is not None else 0  # segments count from it
    listed = program.segments or ()
    plans = program.executionPlan or ()
    return ProgramView(
        name=pte.name,
        size=int(pte.size),
        version=int(program.version or 0),
        segments=tuple(
            Segment(index, base + int(segment.offset), int(segment.size)) for index, segment in enumerate(listed)
        ),
        constant_bytes=_constant_bytes(program),
        constants_unlisted=pte.constants_unlisted,
        named_data=tuple(
            NamedDatum(text(entry.key), int(entry.segmentIndex), int(listed[entry.segmentIndex].size))
            for entry in program.namedData or ()
        ),
        method_names=tuple(text(plan.name) for plan in plans),
        planned_sizes=tuple(tuple(ints(plan.nonConstBufferSizes)) for plan in plans),
        external_tensors=frozenset(
            key for plan in plans for value in plan.values or () if (key := external_key(value.val)) is not None
        ),
        external=pte.external,
        _pte=pte,
    )


def _constant_bytes(program: ProgramT) -> int:
    constant_segment = program.constantSegment
    if constant_segment is not None and ints(constant_segment.offsets) and program.segments is not None:
        return int(program.segments[constant_segment.segmentIndex].size)  # read_pte checked the index
    return sum(len(buffer.storage) for buffer in program.constantBuffer or () if buffer.storage is not None)
