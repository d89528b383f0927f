"""An XNNPACK payload's graph as devplan reads it for `inspect --delegate`: its nodes (each an
XNNPACK operator with the values it reads and writes, its parameters, and the debug handle
ExecuTorch gave the node it came from), its values (element type, shape, quantization, which
are the delegate's arguments and which are weights) and where each weight's bytes lie.

The payload is checked first as reading a program checks it (xnnpack.check_graph: the header,
then the whole FlatBuffer by its schema, xnn_verify.py); then what the graph's numbers point at:
a node's values, a weight's entry, a weight's bytes inside the payload. Only then do the
generated bindings (devplan/pte/xnn_fb) read it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, NoReturn

from devplan.errors import DevplanError
from devplan.pte.ptd import key_text
from devplan.pte.xnn_fb.XNNDatatype import XNNDatatype
from devplan.pte.xnn_fb.XNNGraph import XNNGraphT
from devplan.pte.xnn_verify import DAMAGED, XNN_GRAPH_TABLES, XNODE_OPERATORS
from devplan.pte.xnnpack import Header, check_graph, read_header

NO_VALUE = 0xFFFFFFFF  # XNN_INVALID_VALUE_ID: an optional operand left out (a bias, a mask)
NO_OFFSET = 0xFFFFFFFFFFFFFFFF  # a constant kept under a key has no offset in the payload
_INPUT, _OUTPUT = 0x1, 0x2  # XNN_VALUE_FLAG_EXTERNAL_INPUT, _OUTPUT
_DTYPES = {number: name.removeprefix("xnn_datatype_") for name, number in vars(XNNDatatype).items() if name[0] != "_"}
# a node's fields that name values it writes; every other *_id field names one it reads
_WRITES = frozenset({"output_id", "output_value_id", "output_index_id"})
_QUANT_KINDS = {1: "per_channel", 2: "per_tensor", 3: "per_token_dynamic", 4: "per_channel_group"}


@dataclass(frozen=True)
class Quantization:
    """How a quantized value's integers map to reals: one scale and zero point (per_tensor), a
    scale per channel along `channel_dim` (per_channel; per `group_size` elements of it for
    per_channel_group), or scales the runtime computes per row (per_token_dynamic)."""

    kind: str
    scale: float | None = None
    zero_point: int | None = None
    channel_dim: int | None = None
    group_size: int | None = None
    scales: int = 0  # how many scales: inline, or in constant entry `scale_constant`
    scale_range: tuple[float, float] | None = None  # the least and greatest inline scale
    scale_constant: int = 0
    nonbatch_dims: int | None = None


@dataclass(frozen=True)
class Value:
    id: int  # the id nodes name it by
    dtype: str
    shape: tuple[int, ...]
    role: str  # input, output, input+output (the delegate's arguments), constant, or intermediate
    external_id: int | None  # an argument's position among the delegate's
    constant: int  # its entry in Graph.constants, 0 when it is none
    quantization: Quantization | None


@dataclass(frozen=True)
class Node:
    index: int
    op: str  # XNNPACK's operator, as the schema names it without its XNN prefix
    inputs: tuple[int, ...]  # value ids, in the schema's order of the fields
    outputs: tuple[int, ...]
    params: tuple[tuple[str, int | float | tuple[int, ...]], ...]  # the other fields the node sets
    debug_handle: int
    output_range: tuple[float, float] | None  # a clamp XNNPACK fuses into the node


@dataclass(frozen=True)
class Constant:
    index: int
    key: str  # the named data key, "" for bytes inside the payload
    offset: int | None  # from the header's constant data, for bytes inside the payload
    size: int


@dataclass(frozen=True)
class Graph:
    version: str
    header: Header | None
    nodes: tuple[Node, ...]
    values: tuple[Value, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    constants: tuple[Constant, ...]  # entry 0, reserved, left out


def read_graph(payload: bytes | memoryview, where: str) -> Graph:
    """The payload's graph, every offset and id in it checked; a DevplanError naming `where`
    and what is wrong otherwise."""
    check_graph(payload, where)
    header = read_header(payload)
    data = bytes(payload[header.graph_offset : header.graph_offset + header.graph_size] if header else payload)
    raw = XNNGraphT.InitFromPackedBuf(data, 0)
    constants = tuple(
        Constant(i, key_text(entry.namedKey or b""), None if entry.namedKey else entry.offset, entry.size)
        for i, entry in enumerate(raw.constantData or ())
        if i
    )
    values = tuple(_value(i, raw_value, len(constants), where) for i, raw_value in enumerate(raw.xvalues or ()))
    ids = {value.id for value in values}
    nodes = tuple(_node(i, raw_node, ids, where) for i, raw_node in enumerate(raw.xnodes or ()))
    inputs, outputs = _ints(raw.inputIds), _ints(raw.outputIds)
    for kind, listed in (("input", inputs), ("output", outputs)):
        for value_id in listed:
            if value_id not in ids:
                _refuse(where, f"the graph's {kind} names value {value_id}, which it does not define")
    room = header.constants_size if header else 0
    for constant in constants:
        if constant.offset is not None and constant.offset + constant.size > room:
            _refuse(
                where,
                f"constant {constant.index} claims bytes {constant.offset} to {constant.offset + constant.size} "
                f"of the {room} bytes of constant data the header gives",
            )
    return Graph(key_text(raw.version or b""), header, nodes, values, inputs, outputs, constants)


def _refuse(where: str, what: str) -> NoReturn:
    raise DevplanError(f"{where}: {what}; {DAMAGED}")


def _ints(vector: Iterable[int] | None) -> tuple[int, ...]:
    return tuple(int(item) for item in vector) if vector is not None else ()


def _value(index: int, raw: Any, constants: int, where: str) -> Value:  # raw: an XValue of the bindings
    tag, member = (raw.xvalueUnionType, raw.xvalueUnion) if raw is not None else (0, None)
    if member is None:
        _refuse(where, f"value {index} is neither a tensor nor a quantized tensor")
    quantization = None
    if tag == 2:  # XNNQuantizedTensorValue
        quantization = _quantization(member.quantParamsType, member.quantParams, constants, index, where)
        member = member.tensorValue
        if member is None:
            _refuse(where, f"quantized value {index} has no tensor")
    flags = member.flags & (_INPUT | _OUTPUT)
    if member.constantBufferIdx > constants:
        _refuse(where, f"value {member.idOut} reads constant {member.constantBufferIdx} of {constants}")
    role = (
        {_INPUT: "input", _OUTPUT: "output", _INPUT | _OUTPUT: "input+output"}[flags]
        if flags
        else "constant"
        if member.constantBufferIdx
        else "intermediate"
    )
    return Value(
        id=member.idOut,
        dtype=_DTYPES.get(member.datatype, f"datatype({member.datatype})"),
        shape=_ints(member.dims),
        role=role,
        external_id=member.externalId if flags else None,
        constant=member.constantBufferIdx,
        quantization=quantization,
    )


def _quantization(tag: int, raw: Any, constants: int, index: int, where: str) -> Quantization | None:
    kind = _QUANT_KINDS.get(tag)
    if kind is None or raw is None:
        return None
    if kind == "per_tensor":
        return Quantization(kind, scale=raw.scale, zero_point=raw.zeroPoint)
    if kind == "per_token_dynamic":
        return Quantization(kind, nonbatch_dims=raw.numNonbatchDims)
    inline = [float(scale) for scale in raw.scale] if raw.scale is not None else []
    if raw.scaleBufferIdx > constants:
        _refuse(where, f"value {index}'s scales are constant {raw.scaleBufferIdx} of {constants}")
    return Quantization(
        kind,
        channel_dim=raw.channelDim,
        group_size=raw.groupSize if kind == "per_channel_group" else None,
        scales=len(inline) or raw.numScales,
        scale_range=(min(inline), max(inline)) if inline else None,
        scale_constant=raw.scaleBufferIdx,
    )


def _node(index: int, raw: Any, ids: set[int], where: str) -> Node:  # raw: an XNode of the bindings
    tag = raw.xnodeUnionType if raw is not None else 0
    if not 1 <= tag <= len(XNODE_OPERATORS) or raw.xnodeUnion is None:
        _refuse(where, f"node {index} names no operator (tag {tag})")
    op, table = XNODE_OPERATORS[tag - 1]
    inputs: list[int] = []
    outputs: list[int] = []
    params: list[tuple[str, Any]] = []
    for name, _, _ in XNN_GRAPH_TABLES[table]:
        value = getattr(raw.xnodeUnion, _camel(name))
        if name.endswith("_id"):
            if value == NO_VALUE:
                continue
            if value not in ids:
                _refuse(
                    where, f"node {index} ({op}) names value {value} as its {name}, which the graph does not define"
                )
            (outputs if name in _WRITES else inputs).append(value)
        elif value is not None and (name != "flags" or value):  # an absent vector reads as None
            params.append((name, value if isinstance(value, int | float) else _ints(value)))
    clamp = raw.outputMinMax
    return Node(
        index=index,
        op=op.removeprefix("XNN"),
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        params=tuple(params),
        debug_handle=raw.debugHandle,
        output_range=(clamp.outputMin, clamp.outputMax) if clamp is not None else None,
    )


def _camel(name: str) -> str:
    """A field's name in the bindings' object API (input1_id -> input1Id)."""
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)
