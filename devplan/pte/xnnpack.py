"""The named data an XNNPACK payload (ExecuTorch's XnnpackBackend) reads: its weights, kept by
key beside the payload, in the program's named data or in a .ptd. ExecuTorch's runtime crashes
when one is missing; reading the keys lets devplan name the missing one first.

Layout, as ExecuTorch's XNNPACK serializer writes it (integers little-endian):

    bytes 4..8    b"XH00"
    bytes 10..14  offset of the XNNGraph FlatBuffer (u32), bytes 14..18 its size (u32)

XNNGraph's field 8 (constant_data) is a vector of ConstantDataOffset tables, whose field 2
(named_key) is the key and field 1 (size) the bytes the graph reads there; an empty key means
the bytes lie inside the payload."""
from __future__ import annotations

import struct

from flatbuffers.number_types import Uint64Flags
from flatbuffers.table import Table

from devplan.errors import DevplanError
from devplan.pte.ptd import key_text
from devplan.pte.verify import XNN_GRAPH_TABLES, verify_xnn_graph, vtable_entry

BACKEND_ID = "XnnpackBackend"
# what ExecuTorch's XNNPACK backend reads at bytes 4..8 of a payload without the XH00 header: the
# XNNGraph FlatBuffer's file identifier, of either version it reads
_GRAPH_IDENTIFIERS = (b"XN00", b"XN01")
_HEADER = struct.Struct("<4s2xII")  # magic at byte 4, then the header length (skipped), offset, size
_CONSTANT_DATA = vtable_entry(XNN_GRAPH_TABLES["XNNGraph"], "constant_data")
_NAMED_KEY = vtable_entry(XNN_GRAPH_TABLES["ConstantDataOffset"], "named_key")
_SIZE = vtable_entry(XNN_GRAPH_TABLES["ConstantDataOffset"], "size")


def named_keys(payload: bytes | memoryview) -> tuple[str, ...]:
    """The keys of the named data the payload reads, in its order; () for a payload that is
    not XNNPACK's, or too damaged to say (reading the program refuses those: check_graph)."""
    return tuple(key for key, _ in named_data(payload))


def _graph(payload: bytes | memoryview) -> bytes | None:
    """The payload's XNNGraph FlatBuffer, or None when the payload has no XNNPACK header."""
    head = bytes(payload[4:4 + _HEADER.size])
    if len(head) < _HEADER.size:
        return None
    magic, offset, size = _HEADER.unpack(head)
    return bytes(payload[offset:offset + size]) if magic == b"XH00" else None


def check_graph(payload: bytes | memoryview, where: str) -> None:
    """Refuse an XNNPACK payload whose graph lies outside it or fails the checks devplan reads it
    by: ExecuTorch's XNNPACK compiler logs what it reads there, and its Python binding aborts
    the process (SIGABRT, no message) on a log line that is not UTF-8 (found by the fuzz run's
    XNNPACK mode: `run --executorch` died on mutants `check` had passed, a damaged graph's or
    header's magic among them, which it logs as the graph's identifier)."""
    graph = _graph(payload)
    if graph is None:
        magic = bytes(payload[4:8])
        if magic not in _GRAPH_IDENTIFIERS:  # ExecuTorch logs these bytes as the graph's identifier
            raise DevplanError(f"{where}: the payload starts with neither XNNPACK's header (XH00) nor its graph's "
                               f"identifier (XN01) but {magic!r}; the XNNPACK payload is damaged")
        return  # a graph without the header, as older serializers wrote it
    _, offset, size = _HEADER.unpack(bytes(payload[4:4 + _HEADER.size]))
    if len(graph) != size or size < 4:
        raise DevplanError(f"{where}: the XNNPACK graph claims bytes {offset} to {offset + size} of a "
                           f"{len(payload)}-byte payload; the XNNPACK payload is damaged")
    if graph[4:8] not in _GRAPH_IDENTIFIERS:  # logged as the payload's magic, as above
        raise DevplanError(f"{where}: the XNNPACK graph's identifier is {graph[4:8]!r}, not XN01; the XNNPACK "
                           f"payload is damaged")
    verify_xnn_graph(graph, where)


def named_data(payload: bytes | memoryview) -> tuple[tuple[str, int], ...]:
    """(key, the bytes the graph reads under it) for each named datum the payload reads, in its
    order: ExecuTorch's XNNPACK backend takes a shorter entry at its word and reads past it.
    () when the graph is damaged (check_graph names what)."""
    graph = _graph(payload)
    if graph is None or len(graph) < 4:
        return ()
    try:
        verify_xnn_graph(graph, BACKEND_ID)  # the flatbuffers runtime reads whatever offsets say
    except DevplanError:
        return ()
    root = Table(graph, struct.unpack_from("<I", graph)[0])
    slot = root.Offset(_CONSTANT_DATA)
    if not slot:
        return ()
    start, keys = root.Vector(slot), []
    for index in range(root.VectorLen(slot)):
        entry = Table(graph, root.Indirect(start + 4 * index))
        key, size = entry.Offset(_NAMED_KEY), entry.Offset(_SIZE)
        if key and (name := key_text(entry.String(key + entry.Pos))):
            keys.append((name, entry.Get(Uint64Flags, size + entry.Pos) if size else 0))
    return tuple(keys)
