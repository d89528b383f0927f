"""Writing a .pte: pack the program, append segments behind an extended header, write atomically
(devplan/files.py)."""

from __future__ import annotations

import copy
import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import flatbuffers

from devplan.errors import DevplanError
from devplan.files import write_atomic
from devplan.pte.fb.DataSegment import DataSegmentT
from devplan.pte.fb.Program import ProgramT
from devplan.pte.header import FILE_IDENTIFIER, HEADER_LENGTH, HEADER_OFFSET, ExtendedHeader
from devplan.pte.sharing import SharingBuilder

# The schema's force_align on constant and delegate blobs; the generated Python Pack drops it.
_BLOB_ALIGNMENT = 16
_root_offset = struct.Struct("<I")
SEGMENT_ALIGNMENT = 128  # where each data segment starts, as ExecuTorch aligns them


@dataclass(frozen=True)
class Spread:
    """Bytes held as the pieces that make them, in order (tensors' numpy views, bytes): a
    segment of weights, or a whole program, written piece by piece and joined into one bytes
    object only when asked (bytes(spread)), so that a compile holds its weights once."""

    parts: tuple[Any, ...]  # bytes-like: numpy's arrays are a Buffer only to Python 3.12's typing
    size: int

    @classmethod
    def of(cls, parts: Iterable[Any]) -> "Spread":
        parts = tuple(parts)
        return cls(parts, sum(memoryview(part).nbytes for part in parts))

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)


# a data segment: bytes-like, or a Spread of pieces
Segment = bytes | bytearray | memoryview | Spread


def pieces(data: Segment) -> tuple[Any, ...]:
    """The buffers that make `data`, a Spread or one bytes-like object, in order."""
    return data.parts if isinstance(data, Spread) else (data,)


def dumps_pte(
    program: ProgramT,
    segments: Sequence[Segment] = (),
    *,
    segment_alignment: int = SEGMENT_ALIGNMENT,
    share: bool = False,
) -> bytes:
    """The bytes of a .pte holding `program` and the data of its segments (bytes-like, or
    Spreads), in order: pte_image's, joined."""
    return bytes(pte_image(program, segments, segment_alignment=segment_alignment, share=share))


def pte_image(
    program: ProgramT,
    segments: Sequence[Segment] = (),
    *,
    segment_alignment: int = SEGMENT_ALIGNMENT,
    share: bool = False,
) -> Spread:
    """A .pte holding `program` and the data of its segments, in order, as the pieces to
    write one after another: the segments' own buffers are never copied. With `share`, each
    string and small vector of numbers is written once (devplan/pte/sharing.py), as compile
    writes its programs; without, a program read from a file packs to that file's bytes.

    program.segments is rewritten (in the output only) to say where each segment landed;
    when it already lists entries, there must be one per segment given. Without segment
    bytes the output is the plain FlatBuffer, with no extended header."""
    if segment_alignment <= 0 or segment_alignment & (segment_alignment - 1):
        raise DevplanError(f"segment alignment {segment_alignment} is not a power of two; use e.g. 128")
    listed = program.segments or []
    if listed and len(listed) != len(segments):
        raise DevplanError(
            f"the program lists {len(listed)} data segments but {len(segments)} were given; pass the data of every segment"
        )
    packed = copy.copy(program)
    placed = _place_segments([len(segment) for segment in segments], segment_alignment)
    if segments:
        packed.segments = [DataSegmentT(offset=offset, size=size) for offset, size in placed]
    if program.constantBuffer is not None:
        packed.constantBuffer = [_AlignedBlob.of(buffer.storage) for buffer in program.constantBuffer]  # type: ignore[misc]  # packs as BufferT does
    if program.backendDelegateData is not None:
        packed.backendDelegateData = [_AlignedBlob.of(blob.data) for blob in program.backendDelegateData]  # type: ignore[misc]  # packs as the inline data does

    builder = SharingBuilder(1024) if share else flatbuffers.Builder(1024)
    builder.Finish(packed.Pack(builder), file_identifier=FILE_IDENTIFIER)
    flat = bytes(builder.Output())
    data_size = placed[-1][0] + placed[-1][1] if placed else 0
    if data_size == 0:  # like ExecuTorch: empty segments need no header
        return Spread.of([flat])

    # The header goes inside the FlatBuffer, so its padded length must keep every aligned
    # object aligned.
    padded = _round_up(HEADER_LENGTH, builder.minalign)
    program_size = len(flat) + padded
    base = _round_up(program_size, segment_alignment)
    header = ExtendedHeader(program_size, base, data_size).to_bytes()
    (root,) = _root_offset.unpack_from(flat)
    parts: list[Any] = [
        _root_offset.pack(root + padded) + flat[4:HEADER_OFFSET] + header.ljust(padded, b"\0") + flat[HEADER_OFFSET:]
    ]
    end = program_size
    for (offset, size), segment in zip(placed, segments):
        parts.append(bytes(base + offset - end))
        parts.extend(pieces(segment))
        end = base + offset + size
    return Spread(tuple(part for part in parts if memoryview(part).nbytes), base + data_size)


def write_pte(path: str | os.PathLike[str], program: ProgramT, segments: Sequence[Segment] = ()) -> None:
    write_atomic(path, pte_image(program, segments).parts)


def _place_segments(sizes: list[int], alignment: int) -> list[tuple[int, int]]:
    """(offset from the segment base, size) of each segment, each start aligned."""
    placed, end = [], 0
    for size in sizes:
        offset = _round_up(end, alignment)
        placed.append((offset, size))
        end = offset + size
    return placed


def _round_up(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


@dataclass(frozen=True)
class _AlignedBlob:
    """Stands in for a BufferT or BackendDelegateInlineDataT while packing: both tables hold
    one byte vector in slot 0, which the runtime expects aligned to _BLOB_ALIGNMENT."""

    data: bytes | None

    @classmethod
    def of(cls, vector: Iterable[int] | None) -> "_AlignedBlob":
        return cls(None if vector is None else bytes(vector))

    def Pack(self, builder: flatbuffers.Builder) -> int:
        if self.data is not None:
            size = len(self.data)
            builder.StartVector(1, size, _BLOB_ALIGNMENT)
            builder.head -= size
            builder.Bytes[builder.head : builder.head + size] = self.data
            vector = builder.EndVector()
        builder.StartObject(1)
        if self.data is not None:
            builder.PrependUOffsetTRelativeSlot(0, vector, 0)
        packed: int = builder.EndObject()
        return packed
