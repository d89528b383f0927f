"""The container around the FlatBuffer: identifier, optional extended header, segment region.

Layout of a .pte with segments (all integers little-endian):

    bytes 0..4    root table offset (u32)
    bytes 4..8    file identifier b"ET12"
    bytes 8..40   extended header: b"eh00", header length (u32), program size (u64),
                  segment base offset (u64), segment data size (u64)
    ...           the rest of the FlatBuffer, up to program size
    ...           zero padding up to the segment base offset
    ...           segment data (segment_data_size bytes)

A file without segments is a plain FlatBuffer with no extended header."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from devplan.errors import DevplanError

FILE_IDENTIFIER = b"ET12"
DATA_FILE_IDENTIFIER = b"FT01"  # a .ptd's (pte/ptd.py): weights a program keeps outside it
HEADER_MAGIC = b"eh00"
# Length written by ExecuTorch 1.5.1; older writers stopped before segment data size.
HEADER_LENGTH = 32
HEADER_MIN_LENGTH = 24
HEADER_OFFSET = 8

_ZIP_MAGIC = b"PK\x03\x04"
_DAMAGED = "the file is damaged or not a .pte"
_HEADER = struct.Struct("<4sIQQ")
_DATA_SIZE = struct.Struct("<Q")


def is_program(data: bytes | memoryview) -> bool:
    """Whether `data` carries the ET12 file identifier, as a .pte program (or a delegate
    payload that is one) does; a cheap look before reading it."""
    return data[4:8] == FILE_IDENTIFIER


@dataclass(frozen=True)
class ExtendedHeader:
    """Where the FlatBuffer ends and the segments start. segment_base_offset is 0 when the
    file has no segments; segment_data_size counts from the segment base to the end of the
    last segment."""

    program_size: int
    segment_base_offset: int
    segment_data_size: int
    length: int = HEADER_LENGTH

    def to_bytes(self) -> bytes:
        return _HEADER.pack(HEADER_MAGIC, self.length, self.program_size, self.segment_base_offset) + _DATA_SIZE.pack(
            self.segment_data_size
        )


def check_container(data: bytes | memoryview, name: str) -> ExtendedHeader | None:
    """Check the identifier and the extended header against the file's size; return the header."""
    # the first bytes alone: the rest of a mapped file stays unread
    size, data = len(data), bytes(data[: HEADER_OFFSET + HEADER_LENGTH])
    if size == 0:
        raise DevplanError(f"{name}: empty file; expected an ExecuTorch .pte program")
    _check_identifier(data, size, name)
    if data[HEADER_OFFSET : HEADER_OFFSET + 4] != HEADER_MAGIC:
        return None
    return _parse_header(data, size, name)


HEAD_BYTES = HEADER_OFFSET + HEADER_LENGTH  # what tells a program's size: its identifier and extended header
# a FlatBuffer's offsets are 32-bit signed: a program without segments is at most this long
MAX_FLATBUFFER_BYTES = (1 << 31) - 1
# a file (or standard input) larger than this is refused before it is read into memory
MAX_PROGRAM_BYTES = 1 << 34


def program_bound(head: bytes, name: str) -> int | None:
    """The most bytes a program can hold whose first bytes are `head` (its first HEAD_BYTES, or
    all of a shorter one), so that a stream is read no further; refused at once where they
    cannot begin a program (/dev/zero's zeros). None where its header does not say (an older
    writer's, without the segment data size)."""
    if len(head) < HEAD_BYTES:
        return len(head)  # all of it: check_container says what is wrong with it
    _check_identifier(head, len(head), name)
    if head[HEADER_OFFSET : HEADER_OFFSET + 4] != HEADER_MAGIC:
        return MAX_FLATBUFFER_BYTES
    _, length, program_size, base = _HEADER.unpack_from(head, HEADER_OFFSET)
    if length < HEADER_LENGTH:
        return None
    (data_size,) = _DATA_SIZE.unpack_from(head, HEADER_OFFSET + HEADER_MIN_LENGTH)
    return int(max(program_size, base + data_size, len(head)))


def _check_identifier(data: bytes, size: int, name: str) -> None:
    """Refuse a file of `size` bytes whose first bytes `data` are not an ET12 program's start."""
    if data.startswith(_ZIP_MAGIC):
        raise DevplanError(
            f"{name}: not an ET12 program (file identifier {data[:4]!r}, a zip archive); "
            "is it a .pt2? compile it with 'devplan compile'"
        )
    if size < HEADER_OFFSET:
        raise DevplanError(f"{name}: truncated: {size} bytes cannot hold a FlatBuffer's 8-byte start; {_DAMAGED}")
    if data[4:8] == DATA_FILE_IDENTIFIER:
        raise DevplanError(
            f"{name}: not an ET12 program but a .ptd data file (weights kept outside a program); "
            "pass the program, with --data for this file"
        )
    if not is_program(data):
        raise DevplanError(f"{name}: not an ET12 program (file identifier {data[4:8]!r}); {_DAMAGED}")


def _parse_header(data: bytes, size: int, name: str) -> ExtendedHeader:
    """The header from the file's first bytes `data`, checked against the file's `size`."""
    if len(data) < HEADER_OFFSET + HEADER_MIN_LENGTH:
        raise DevplanError(
            f"{name}: truncated: the extended header at byte 8 needs 24 bytes but the file ends at byte {size}; {_DAMAGED}"
        )
    _, length, program_size, base = _HEADER.unpack_from(data, HEADER_OFFSET)
    if length < HEADER_MIN_LENGTH:
        raise DevplanError(
            f"{name}: corrupt: the extended header claims a length of {length} bytes (expected {HEADER_LENGTH}); {_DAMAGED}"
        )
    header_end = HEADER_OFFSET + length
    if header_end > size:
        raise DevplanError(
            f"{name}: truncated: the extended header claims {length} bytes but the file ends at byte {size}; {_DAMAGED}"
        )
    if length >= HEADER_LENGTH:
        (data_size,) = _DATA_SIZE.unpack_from(data, HEADER_OFFSET + HEADER_MIN_LENGTH)
    else:
        data_size = size - base if base else 0
    if program_size > size:
        raise DevplanError(
            f"{name}: truncated: the extended header says the program is {program_size} bytes but the file ends at byte {size}; {_DAMAGED}"
        )
    if program_size < header_end:
        raise DevplanError(
            f"{name}: corrupt: the extended header says the program is {program_size} bytes, less than the header itself; {_DAMAGED}"
        )
    if base == 0:
        if data_size:
            raise DevplanError(
                f"{name}: corrupt: the extended header has {data_size} bytes of segment data but no segment base offset; {_DAMAGED}"
            )
    elif base < program_size:
        raise DevplanError(
            f"{name}: corrupt: the segment base offset {base} lies inside the program, which ends at byte {program_size}; {_DAMAGED}"
        )
    elif base + data_size > size:
        raise DevplanError(
            f"{name}: truncated: segment data at byte {base} claims {data_size} bytes but the file ends at byte {size}; {_DAMAGED}"
        )
    return ExtendedHeader(program_size, base, data_size, length)
