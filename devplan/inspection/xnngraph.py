"""`inspect --delegate N` on an ExecuTorch XNNPACK delegate: the document of the graph inside its
payload (docs/xnnpack-json.md; devplan/pte/xnn_graph.py reads it) and its terminal view. The
program says where the delegate call came from (its stacktrace); each node keeps the debug
handle ExecuTorch gave the node it was lowered from, which devplan's programs map to the
user's module and op in the call's frames (devplan/pte/frames.py), and ExecuTorch's own
programs leave to its ETRecord."""

from __future__ import annotations

import math
import os

from rich.console import Console
from rich.text import Text

from devplan.documents import XnnNode, XnnpackDocument, XnnQuantization, XnnValue
from devplan.inspection.sources import chain_origins, source_text
from devplan.inspection.tables import PlainTable
from devplan.pte.frames import Where
from devplan.pte.program_view import ProgramView
from devplan.pte.xnn_graph import Node, Quantization, Value, read_graph
from devplan.units import counted, printable, size_text

SCHEMA_VERSION = 1


def xnngraph_document(program: ProgramView, plan_index: int, delegate: int) -> XnnpackDocument:
    """The document of XNNPACK delegate `delegate` of method `plan_index`; a DevplanError in one
    line when its payload is damaged."""
    method = program.method_names[plan_index]
    payload = program.payload(plan_index, delegate)
    graph = read_graph(payload, f"{program.name}: method {method}: delegate {delegate} (XnnpackBackend)")
    where = _call_origin(program, plan_index, delegate)
    keys = {constant.index: constant.key or None for constant in graph.constants}
    handles = {handle: Where(path, kind, op) for handle, path, kind, op in where.handles} if where is not None else {}
    header = graph.header
    return {
        "schema_version": SCHEMA_VERSION,
        "format": "XNNGraph",
        "file": {"name": os.path.basename(program.name)},
        "delegate": {
            "method": method,
            "index": delegate,
            "id": "XnnpackBackend",
            "payload_size": len(payload),
            "source": source_text(where),
            "module": where.module if where is not None else None,
        },
        "version": graph.version,
        "header": {
            "graph_offset": header.graph_offset,
            "graph_size": header.graph_size,
            "constant_offset": header.constants_offset,
            "constant_size": header.constants_size,
        }
        if header is not None
        else None,
        "counts": {"nodes": len(graph.nodes), "values": len(graph.values), "constants": len(graph.constants)},
        "inputs": list(graph.inputs),
        "outputs": list(graph.outputs),
        "nodes": [_node(node, handles.get(node.debug_handle)) for node in graph.nodes],
        "values": [_value(value, keys) for value in graph.values],
        "constants": [
            {"index": c.index, "key": c.key or None, "offset": c.offset, "size": c.size} for c in graph.constants
        ],
    }


def _call_origin(program: ProgramView, plan_index: int, delegate: int) -> Where | None:
    """What the program's stacktrace says of the instruction that calls the delegate (its first)."""
    view = program.methods[plan_index]
    calls = [i for i in view.instructions if i.kind == "delegate" and i.delegate == delegate]
    if not calls:
        return None
    chain = [i for i in view.instructions if i.chain == calls[0].chain]
    return chain_origins(program, plan_index, calls[0].chain, len(chain))[calls[0].at]


def _number(value: float) -> float | str:
    """A float as JSON holds it: an infinity or NaN as text."""
    return value if math.isfinite(value) else str(value)


def _node(node: Node, origin: Where | None) -> XnnNode:
    low, high = node.output_range if node.output_range is not None else (-math.inf, math.inf)
    return {
        "index": node.index,
        "op": node.op,
        "inputs": list(node.inputs),
        "outputs": list(node.outputs),
        "params": {
            name: list(value) if isinstance(value, tuple) else _number(value) if isinstance(value, float) else value
            for name, value in node.params
        },
        "debug_handle": node.debug_handle,
        "source": source_text(origin),
        "module": origin.module if origin is not None else None,
        "output_min": low if math.isfinite(low) else None,  # None: unbounded
        "output_max": high if math.isfinite(high) else None,
    }


def _value(value: Value, keys: dict[int, str | None]) -> XnnValue:
    return {
        "id": value.id,
        "dtype": value.dtype,
        "shape": list(value.shape),
        "role": value.role,  # type: ignore[typeddict-item]  # one of the roles xnn_graph gives
        "external_id": value.external_id,
        "constant": value.constant or None,
        "key": keys.get(value.constant) if value.constant else None,
        "quantization": _quantization(value.quantization) if value.quantization is not None else None,
    }


def _quantization(q: Quantization) -> XnnQuantization:
    low, high = q.scale_range if q.scale_range is not None else (None, None)
    return {
        "kind": q.kind,  # type: ignore[typeddict-item]  # one of the kinds xnn_graph gives
        "scale": q.scale,
        "zero_point": q.zero_point,
        "channel_dim": q.channel_dim,
        "group_size": q.group_size,
        "scales": q.scales,
        "scale_min": low,
        "scale_max": high,
        "scale_constant": q.scale_constant or None,
        "nonbatch_dims": q.nonbatch_dims,
    }


def render_xnngraph(doc: XnnpackDocument, console: Console, exact_bytes: bool = False) -> None:
    """The graph's summary, then its nodes and its values, each value as vID:dtype[shape]."""
    d = doc["delegate"]
    console.print(Text(f"{doc['file']['name']}: method {d['method']}: delegate {d['index']} ({d['id']})", style="bold"))
    console.print(f"XNNPACK graph in a {size_text(d['payload_size'], exact_bytes)} payload")
    console.print(f"called from: {d['source'] or '(the program does not say)'}")
    counts = doc["counts"]
    named = sum(1 for c in doc["constants"] if c["key"] is not None)
    console.print(
        f"{counted(counts['nodes'], 'node')}, {counted(counts['values'], 'value')}, "
        f"{counted(counts['constants'], 'constant')} ({named} by key in named data, "
        f"{counts['constants'] - named} inside the payload)"
    )
    values = {value["id"]: value for value in doc["values"]}
    nodes = PlainTable(
        "nodes",
        ("#", "right"),
        ("op", "left"),
        ("inputs", "left"),
        ("outputs", "left"),
        ("handle", "right"),
        ("source", "left"),
        ("params", "left"),
        below="params",
    )
    for node in doc["nodes"]:
        params = [f"{name}={_param(value)} " for name, value in node["params"].items()]
        if node["output_min"] is not None or node["output_max"] is not None:
            params.append(f"clamp=[{_bound(node['output_min'], '-inf')}, {_bound(node['output_max'], 'inf')}] ")
        nodes.add_row(
            str(node["index"]),
            node["op"],
            tuple(_value_text(values, i) + " " for i in node["inputs"]) or "-",
            tuple(_value_text(values, i) + " " for i in node["outputs"]) or "-",
            str(node["debug_handle"]),
            node["source"] or "-",
            tuple(params) or "-",
        )
    nodes.print(console)
    table = PlainTable(
        "values",
        ("id", "right"),
        ("role", "left"),
        ("dtype", "left"),
        ("shape", "left"),
        ("quantization", "left"),
        ("weight", "left"),
        below="weight",
    )
    for value in doc["values"]:
        table.add_row(
            str(value["id"]),
            value["role"] + (f" {value['external_id']}" if value["external_id"] is not None else ""),
            value["dtype"],
            "[" + "×".join(map(str, value["shape"])) + "]",
            _quantization_text(value["quantization"]),
            (f"key {printable(value['key'])}" if value["key"] else f"constant {value['constant']} in the payload")
            if value["constant"] is not None
            else "-",
        )
    table.print(console)


def _param(value: object) -> str:
    return "[" + ",".join(map(str, value)) + "]" if isinstance(value, list) else str(value)


def _bound(value: float | None, none: str) -> str:
    return none if value is None else f"{value:g}"


def _value_text(values: dict[int, XnnValue], value_id: int) -> str:
    value = values[value_id]
    return f"v{value_id}:{value['dtype']}[{'×'.join(map(str, value['shape']))}]"


def _quantization_text(q: XnnQuantization | None) -> str:
    if q is None:
        return "-"
    if q["kind"] == "per_tensor":
        return f"per tensor scale={q['scale']:.6g} zero={q['zero_point']}"
    if q["kind"] == "per_token_dynamic":
        return f"dynamic per token ({q['nonbatch_dims']} non-batch dims)"
    scales = (
        f"{q['scales']} scales {q['scale_min']:.3g}..{q['scale_max']:.3g}"
        if q["scale_min"] is not None
        else f"{q['scales']} scales in constant {q['scale_constant']}"
    )
    group = f", groups of {q['group_size']}" if q["group_size"] is not None else ""
    return f"per channel (dim {q['channel_dim']}{group}): {scales}"
