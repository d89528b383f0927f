"""The named data an XNNPACK payload (ExecuTorch's XnnpackBackend) reads: its weights, kept by
key beside the payload, in the program's named data or in a .ptd. ExecuTorch's runtime crashes
when one is missing; reading the keys lets devplan name the missing one first.

Layout, as ExecuTorch's XNNPACK serializer writes it (integers little-endian):

    bytes 4..8    b"XH00"
    bytes 8..10   the header's length (u16): 30
    bytes 10..14  offset of the XNNGraph FlatBuffer (u32), bytes 14..18 its size (u32)
    bytes 18..22  offset of the constant data after it (u32), bytes 22..30 its size (u64)

XNNGraph's field 8 (constant_data) is a vector of ConstantDataOffset tables, whose field 2
(named_key) is the key and field 1 (size) the bytes the graph reads there; an empty key means
the bytes lie inside the payload. Field 2 (xvalues) holds every value the graph defines, with
its datatype, shape, constant index and flags: working_memory reads what XNNPACK allocates at
run time from them."""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from flatbuffers.number_types import Int16Flags, Uint8Flags, Uint32Flags, Uint64Flags
from flatbuffers.table import Table

from devplan.errors import DevplanError
from devplan.pte.ptd import key_text
from devplan.pte.verify import vtable_entry
from devplan.pte.xnn_verify import XNN_GRAPH_TABLES, verify_xnn_graph

BACKEND_ID = "XnnpackBackend"
# what ExecuTorch's XNNPACK backend reads at bytes 4..8 of a payload without the XH00 header: the
# XNNGraph FlatBuffer's file identifier, of either version it reads
_GRAPH_IDENTIFIERS = (b"XN00", b"XN01")
# from byte 4: magic, the header's length, the graph's offset and size, the constant data's
_HEADER = struct.Struct("<4sHIIIQ")
HEADER_LENGTH = 4 + _HEADER.size
_CONSTANT_DATA = vtable_entry(XNN_GRAPH_TABLES["XNNGraph"], "constant_data")
_NAMED_KEY = vtable_entry(XNN_GRAPH_TABLES["ConstantDataOffset"], "named_key")
_SIZE = vtable_entry(XNN_GRAPH_TABLES["ConstantDataOffset"], "size")
_XVALUES = vtable_entry(XNN_GRAPH_TABLES["XNNGraph"], "xvalues")
_UNION_TAG = vtable_entry(XNN_GRAPH_TABLES["XValue"], "xvalue_union")
_TENSOR = {
    name: vtable_entry(XNN_GRAPH_TABLES["XNNTensorValue"], name)
    for name in ("datatype", "dims", "constant_buffer_idx", "flags")
}
_QUANTIZED_BASE = vtable_entry(XNN_GRAPH_TABLES["XNNQuantizedTensorValue"], "tensor_value")
_QUANTIZED = 2  # XValueUnion's tag of XNNQuantizedTensorValue, whose tensor_value is the value
# XNNPACK's XNN_VALUE_FLAG_EXTERNAL_INPUT | _OUTPUT: the delegate's arguments, ExecuTorch's tensors
_EXTERNAL = 0x1 | 0x2
# Bits per element of each XNNDatatype (executorch/backends/xnnpack/serialization/schema.fbs),
# by its number: fp32 fp16 qint8 quint8 qint32 qcint8 qcint32 qcint4 qdint8 qbint4 qpint8 int32 pfp32 bf16
_BITS = dict(enumerate((32, 16, 8, 8, 32, 8, 32, 4, 8, 4, 8, 32, 32, 16), start=1))


@dataclass(frozen=True)
class WorkingMemory:
    """The intermediates of an XNNPACK delegate's graph: its values that are neither its
    arguments (tensors ExecuTorch's plan holds) nor constants (its weights). XNNPACK's runtime
    allocates them itself, outside ExecuTorch's planned buffers. `nbytes` sums their bytes at
    the shapes the graph gives (a dynamic shape's at its upper bound): an upper bound on them,
    since XNNPACK's own planner lets values not alive together share bytes. Operators' scratch
    and XNNPACK's packed copy of the weights are further memory the graph does not tell."""

    nbytes: int
    values: int


def working_memory(payload: bytes | memoryview) -> WorkingMemory | None:
    """What XNNPACK allocates for the payload's intermediates; None for a payload that is not
    XNNPACK's, names a datatype devplan does not know, or is too damaged to say."""
    root = _graph_root(payload)
    slot = root.Offset(_XVALUES) if root is not None else 0
    if root is None or not slot:
        return None if root is None else WorkingMemory(0, 0)
    start, total, count = root.Vector(slot), 0, 0
    for index in range(root.VectorLen(slot)):
        value = Table(root.Bytes, root.Indirect(start + 4 * index))
        tag = value.Offset(_UNION_TAG)
        if not tag or not (at := value.Offset(_UNION_TAG + 2)):
            continue  # a value of no kind: nothing to allocate
        tensor = Table(value.Bytes, value.Indirect(at + value.Pos))
        if value.Get(Uint8Flags, tag + value.Pos) == _QUANTIZED:
            base = tensor.Offset(_QUANTIZED_BASE)
            if not base:
                continue
            tensor = Table(tensor.Bytes, tensor.Indirect(base + tensor.Pos))
        field = {name: tensor.Offset(entry) for name, entry in _TENSOR.items()}
        if (field["constant_buffer_idx"] and tensor.Get(Uint32Flags, field["constant_buffer_idx"] + tensor.Pos)) or (
            field["flags"] and tensor.Get(Uint32Flags, field["flags"] + tensor.Pos) & _EXTERNAL
        ):
            continue
        bits = _BITS.get(tensor.Get(Int16Flags, field["datatype"] + tensor.Pos) if field["datatype"] else 0)
        if bits is None:
            return None
        dims = field["dims"]
        elements = (
            math.prod(tensor.Get(Uint32Flags, tensor.Vector(dims) + 4 * i) for i in range(tensor.VectorLen(dims)))
            if dims
            else 1
        )
        total, count = total + (elements * bits + 7) // 8, count + 1
    return WorkingMemory(total, count)


def named_keys(payload: bytes | memoryview) -> tuple[str, ...]:
    """The keys of the named data the payload reads, in its order; () for a payload that is
    not XNNPACK's, or too damaged to say (reading the program refuses those: check_graph)."""
    return tuple(key for key, _ in named_data(payload))


def _graph(payload: bytes | memoryview) -> bytes | None:
    """The payload's XNNGraph FlatBuffer, or None when the payload has no XNNPACK header."""
    header = read_header(payload)
    return bytes(payload[header.graph_offset : header.graph_offset + header.graph_size]) if header else None


@dataclass(frozen=True)
class Header:
    """Where the payload's graph and its constant bytes lie, as its header says."""

    length: int
    graph_offset: int
    graph_size: int
    constants_offset: int
    constants_size: int


def read_header(payload: bytes | memoryview) -> Header | None:
    """The payload's XNNPACK header, unchecked; None when it has none (no XH00 at byte 4)."""
    head = bytes(payload[4:HEADER_LENGTH])
    if len(head) < _HEADER.size or head[:4] != b"XH00":
        return None
    return Header(*_HEADER.unpack(head)[1:])


def check_graph(payload: bytes | memoryview, where: str) -> None:
    """Refuse an XNNPACK payload whose graph lies outside it or fails the checks devplan reads it
    by: ExecuTorch's XNNPACK compiler logs what it reads there, and its Python binding aborts
    the process (SIGABRT, no message) on a log line that is not UTF-8 (found by the fuzz run's
    XNNPACK mode: `run --executorch` died on mutants `check` had passed, a damaged graph's or
    header's magic among them, which it logs as the graph's identifier)."""
    header = read_header(payload)
    if header is None:
        magic = bytes(payload[4:8])
        if magic not in _GRAPH_IDENTIFIERS:  # ExecuTorch logs these bytes as the graph's identifier
            raise DevplanError(
                f"{where}: the payload starts with neither XNNPACK's header (XH00) nor its graph's "
                f"identifier (XN01) but {magic!r}; the XNNPACK payload is damaged"
            )
        verify_xnn_graph(bytes(payload), where)  # a graph without the header, as older serializers wrote it
        return
    offset, size = header.graph_offset, header.graph_size
    graph = bytes(payload[offset : offset + size])
    if len(graph) != size or size < 8:
        raise DevplanError(
            f"{where}: the XNNPACK graph claims bytes {offset} to {offset + size} of a "
            f"{len(payload)}-byte payload; the XNNPACK payload is damaged"
        )
    # the header before the graph, the constants the graph keeps inside the payload after it
    # (ExecuTorch's runtime reads them from there, unchecked)
    constants_end = header.constants_offset + header.constants_size
    if (
        not HEADER_LENGTH <= header.length <= offset
        or header.constants_offset < offset + size
        or constants_end > len(payload)
    ):
        raise DevplanError(
            f"{where}: the XNNPACK header ({header.length} bytes) puts the graph at bytes {offset} to "
            f"{offset + size} and the constant data at bytes {header.constants_offset} to {constants_end} "
            f"of a {len(payload)}-byte payload; the XNNPACK payload is damaged"
        )
    if graph[4:8] not in _GRAPH_IDENTIFIERS:  # logged as the payload's magic, as above
        raise DevplanError(
            f"{where}: the XNNPACK graph's identifier is {graph[4:8]!r}, not XN01; the XNNPACK payload is damaged"
        )
    verify_xnn_graph(graph, where)


def named_data(payload: bytes | memoryview) -> tuple[tuple[str, int], ...]:
    """(key, the bytes the graph reads under it) for each named datum the payload reads, in its
    order: ExecuTorch's XNNPACK backend takes a shorter entry at its word and reads past it.
    () when the graph is damaged (check_graph names what)."""
    root = _graph_root(payload)
    slot = root.Offset(_CONSTANT_DATA) if root is not None else 0
    if root is None or not slot:
        return ()
    start, keys = root.Vector(slot), []
    for index in range(root.VectorLen(slot)):
        entry = Table(root.Bytes, root.Indirect(start + 4 * index))
        key, size = entry.Offset(_NAMED_KEY), entry.Offset(_SIZE)
        if key and (name := key_text(entry.String(key + entry.Pos))):
            keys.append((name, entry.Get(Uint64Flags, size + entry.Pos) if size else 0))
    return tuple(keys)


def _graph_root(payload: bytes | memoryview) -> Table | None:
    """The payload's XNNGraph root table, checked first; None when it is not XNNPACK's or is
    damaged (the flatbuffers runtime reads whatever offsets say)."""
    graph = _graph(payload)
    if graph is None or len(graph) < 4:
        return None
    try:
        verify_xnn_graph(graph, BACKEND_ID)
    except DevplanError:
        return None
    return Table(graph, struct.unpack_from("<I", graph)[0])
