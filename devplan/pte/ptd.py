"""ExecuTorch's FlatTensor data file (.ptd): weights kept outside a program, each under a key
that the program's external tensors name (ExtraTensorInfo.fully_qualified_name, location
EXTERNAL), so that several programs or methods share one copy.

Layout (all integers little-endian), as ExecuTorch's FlatTensorSerializer writes it:

    bytes 0..4    root table offset (u32)
    bytes 4..8    file identifier b"FT01"
    bytes 8..48   extended header: b"FH01", header length 40 (u32), FlatBuffer offset 48 (u64:
                  the header padded to 16 bytes), FlatBuffer size without the header (u64),
                  segment base offset (u64), segment data size (u64)
    ...           the rest of the FlatBuffer (schema/flat_tensor.fbs)
    ...           zero padding up to the segment base offset (a multiple of 128)
    ...           the segments, each at a multiple of 128 from the base: a tensor's bytes each

    ptd_image(entries, tensors) -> Spread   the file as the pieces to write, the tensors' own buffers
    read_ptd(path)              -> PtdFile  mapped; only the FlatBuffer is read"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any, Iterable, NamedTuple

import flatbuffers

from devplan import dtypes
from devplan.errors import DevplanError
from devplan.pte.header import DATA_FILE_IDENTIFIER
from devplan.pte.verify import verify_flat_tensor
from devplan.pte.writer import SEGMENT_ALIGNMENT, Spread

HEADER_MAGIC = b"FH01"
HEADER_OFFSET = 8
HEADER_LENGTH = 40
HEADER_PADDED = 48  # the header padded to 16 bytes, where ExecuTorch puts the rest of the FlatBuffer
MAX_DATA_BYTES = 1 << 40  # far beyond any model's weights; a larger file is refused before it is mapped
VERSION = 0  # the newest FlatTensor version ExecuTorch 1.5.1's runtime loads
_HEADER = struct.Struct("<4sIQQQQ")
_ROOT = struct.Struct("<I")
_DAMAGED = "the file is damaged or not an ExecuTorch .ptd data file"
_HINT = "pass the .ptd written with the program (devplan compile --external-constants, or ExecuTorch's)"


class Layout(NamedTuple):
    """What a key's tensor is: the runtime checks it against the program's tensor."""

    scalar_type: int
    sizes: tuple[int, ...]
    dim_order: tuple[int, ...]

    def text(self) -> str:
        return f"{dtypes.name_of(self.scalar_type)}{list(self.sizes)}"


class Entry(NamedTuple):
    key: str
    segment: int  # index into the file's segments (keys may share one)
    layout: Layout | None  # None: bytes that are no tensor (ExecuTorch's backends' named data)


def key_text(raw: bytes | str | None) -> str:
    """A key as the file holds it, one str per byte string: invalid UTF-8 is kept as surrogate
    escapes, never replaced, so two keys are equal exactly when their bytes are, as ExecuTorch's
    runtime compares them (decoding with replacement made b'w\\xff' match b'w\\xfe'). Messages
    show keys with repr, which prints the escapes."""
    if raw is None:
        return ""
    return raw if isinstance(raw, str) else bytes(raw).decode("utf-8", errors="surrogateescape")


def ptd_image(entries: list[Entry], tensors: list[Any]) -> Spread:
    """A .ptd holding `tensors` (bytes-like: numpy views of the weights, never copied), one
    segment each, and `entries` naming them, as the pieces to write one after another."""
    placed, end = [], 0
    for tensor in tensors:
        offset = -(-end // SEGMENT_ALIGNMENT) * SEGMENT_ALIGNMENT
        placed.append((offset, memoryview(tensor).nbytes))
        end = offset + placed[-1][1]
    flat = _flatbuffer(entries, placed)
    base = -(-(len(flat) + HEADER_PADDED) // SEGMENT_ALIGNMENT) * SEGMENT_ALIGNMENT
    header = _HEADER.pack(HEADER_MAGIC, HEADER_LENGTH, HEADER_PADDED, len(flat), base, end).ljust(HEADER_PADDED, b"\0")
    (root,) = _ROOT.unpack_from(flat)
    parts: list[Any] = [_ROOT.pack(root + HEADER_PADDED) + flat[4:HEADER_OFFSET] + header + flat[HEADER_OFFSET:]]
    written = len(flat) + HEADER_PADDED
    for (offset, size), tensor in zip(placed, tensors):
        parts += [bytes(base + offset - written), tensor]
        written = base + offset + size
    parts.append(bytes(max(base - written, 0)))  # no tensor: the file still reaches its segment base
    return Spread.of(part for part in parts if memoryview(part).nbytes)


def _flatbuffer(entries: list[Entry], placed: list[tuple[int, int]]) -> bytes:
    from devplan.pte.ptd_fb.DataSegment import DataSegmentT
    from devplan.pte.ptd_fb.FlatTensor import FlatTensorT
    from devplan.pte.ptd_fb.NamedData import NamedDataT
    from devplan.pte.ptd_fb.TensorLayout import TensorLayoutT

    table = FlatTensorT()
    table.version = VERSION
    table.segments = [DataSegmentT(offset=offset, size=size) for offset, size in placed]
    table.namedData = []
    for entry in entries:
        named = NamedDataT()
        named.key, named.segmentIndex = entry.key, entry.segment
        if entry.layout is not None:
            named.tensorLayout = TensorLayoutT()
            named.tensorLayout.scalarType = entry.layout.scalar_type
            named.tensorLayout.sizes, named.tensorLayout.dimOrder = (
                list(entry.layout.sizes),
                list(entry.layout.dim_order),
            )
        table.namedData.append(named)
    builder = flatbuffers.Builder(1024)
    builder.Finish(table.Pack(builder), file_identifier=DATA_FILE_IDENTIFIER)
    return bytes(builder.Output())


@dataclass(frozen=True)
class PtdFile:
    """A read .ptd: every key with its segment and layout; the tensors' bytes stay in the
    file's private mapping until something reads them."""

    name: str
    entries: dict[str, Entry]
    segments: tuple[memoryview, ...]
    size: int
    mapped: bool  # whether the segments view a private mapping of the file, usable in place
    path: str | None = None  # the file read, which ExecuTorch's runtime loads itself

    @property
    def stored_bytes(self) -> int:
        """Bytes the file spends on data: its segments, each once however many keys name it."""
        return sum(len(segment) for segment in self.segments)

    def data(self, key: str) -> memoryview:
        return self.segments[self.entries[key].segment]


def read_ptd(source: "str | os.PathLike[str] | bytes | PtdFile", name: str | None = None) -> PtdFile:
    """Read and check a .ptd from a path (mapped) or its bytes; a problem is one DevplanError
    naming the file."""
    if isinstance(source, PtdFile):
        return source
    from devplan.files import map_input

    if isinstance(source, (bytes, bytearray, memoryview)):
        data: bytes | memoryview = bytes(source)
        name = name or "<bytes>"
    else:
        name = name or os.fspath(source)
        data = map_input(source, name=name, limit=MAX_DATA_BYTES, hint=_HINT)
    flat_end, base, data_size = _header(data, name)
    flat = bytes(data[:flat_end])
    verify_flat_tensor(flat, HEADER_OFFSET + HEADER_LENGTH, name, _DAMAGED)
    from devplan.pte.ptd_fb.FlatTensor import FlatTensorT

    try:
        table = FlatTensorT.InitFromPackedBuf(flat, 0)
    except Exception as error:  # a gap in the checks above must still read as bad input
        raise DevplanError(f"{name}: cannot decode the data file ({type(error).__name__}); {_DAMAGED}") from error
    if table.version > VERSION:
        raise DevplanError(
            f"{name}: FlatTensor version {table.version}, newer than the {VERSION} devplan and "
            f"ExecuTorch 1.5.1 read; write it with ExecuTorch 1.5.1"
        )
    view = memoryview(data).toreadonly()
    segments = []
    for index, segment in enumerate(table.segments or ()):
        if segment.offset + segment.size > data_size:
            raise DevplanError(
                f"{name}: truncated: segment {index} claims bytes {segment.offset}.."
                f"{segment.offset + segment.size} of the segment data, which holds {data_size}; "
                f"{_DAMAGED}"
            )
        segments.append(view[base + segment.offset : base + segment.offset + segment.size])
    return PtdFile(
        name,
        _entries(table, name, len(segments)),
        tuple(segments),
        len(data),
        isinstance(data, memoryview),
        None if isinstance(source, (bytes, bytearray, memoryview)) else os.fsdecode(source),
    )


def _header(data: bytes | memoryview, name: str) -> tuple[int, int, int]:
    """(where the FlatBuffer ends, the segment base, the segment data size), checked."""
    start = bytes(data[:HEADER_PADDED])
    if len(data) < HEADER_OFFSET + HEADER_LENGTH or start[4:8] != DATA_FILE_IDENTIFIER:
        found = start[4:8] if len(data) >= HEADER_OFFSET else b""
        what = "a program (.pte)" if found == b"ET12" else f"file identifier {found!r}"
        raise DevplanError(f"{name}: not an ExecuTorch FlatTensor data file ({what}, not b'FT01'); {_HINT}")
    magic, length, flat_offset, flat_size, base, data_size = _HEADER.unpack_from(start, HEADER_OFFSET)
    flat_end = flat_offset + flat_size
    if magic != HEADER_MAGIC or length < HEADER_LENGTH:
        raise DevplanError(f"{name}: corrupt: no FlatTensor header ('FH01') at byte 8; {_DAMAGED}")
    if not (
        HEADER_OFFSET + length <= flat_end <= len(data)
        and (base == 0 or flat_end <= base)
        and base + data_size <= len(data)
    ):
        raise DevplanError(
            f"{name}: truncated or corrupt: its header places the FlatBuffer at bytes ..{flat_end} "
            f"and {data_size} bytes of data at byte {base} in a file of {len(data)} bytes; {_DAMAGED}"
        )
    return flat_end, base, data_size


def _entries(table: Any, name: str, segments: int) -> dict[str, Entry]:  # table: a FlatTensor of the bindings
    entries: dict[str, Entry] = {}
    for named in table.namedData or ():
        key = key_text(named.key)
        if named.segmentIndex >= segments:
            raise DevplanError(
                f"{name}: corrupt: key {key!r} names segment {named.segmentIndex} of {segments}; {_DAMAGED}"
            )
        if key in entries:
            raise DevplanError(f"{name}: corrupt: key {key!r} is listed twice; {_DAMAGED}")
        layout = named.tensorLayout
        entries[key] = Entry(
            key,
            int(named.segmentIndex),
            None if layout is None else Layout(int(layout.scalarType), _ints(layout.sizes), _ints(layout.dimOrder)),
        )
    return entries


def _ints(vector: Iterable[int] | None) -> tuple[int, ...]:
    return () if vector is None else tuple(int(item) for item in vector)
