"""Where an XNNPACK delegate's graph contradicts itself on shapes: a convolution reading more
or fewer channels than its input has, that input's shape worked out as XNNPACK's runtime works
it out, from the delegate's inputs node by node (a pad adds its paddings, a transpose permutes,
a conversion keeps the shape; any other node's output is taken as the graph records it). The
runtime refuses the graph there ("Propagating input shapes failed",
xnn_status_invalid_parameter), so the whole program fails, and says neither where nor why.

ExecuTorch's XNNPACK lowering writes such graphs: with dynamic-int8, a zero pad on a model's
input before a quantized convolution (MobileNetV2's and EfficientNet's stems, transformers'
"same" padding) gets its paddings in NCHW's order on the NHWC tensor the delegate's input is
permuted to, and the convolution reads 3 channels from a tensor of 4 or 5. The shapes a graph
records for a conversion's output are not what the runtime goes by (ExecuTorch records a
dynamic quantization's output in NCHW's order in graphs that run), so they are never held
against it."""

from __future__ import annotations

from devplan.documents import XnnNode, XnnpackDocument
from devplan.inspection.xnngraph import xnngraph_document
from devplan.pte.program_view import ProgramView

_Shape = tuple[int, ...]


def graph_faults(program: ProgramView, plan_index: int, delegate: int) -> list[str]:
    """An XNNPACK delegate's nodes that contradict its graph's shapes (pte.payloads' `faults`)."""
    return shape_faults(xnngraph_document(program, plan_index, delegate))


def shape_faults(document: XnnpackDocument) -> list[str]:
    """A line per convolution of an XNNPACK delegate's document whose input, as the runtime
    works it out, lacks the channels the convolution reads: 'node 3 Conv2d (module op): ...'."""
    shapes: dict[int, _Shape] = {value["id"]: tuple(value["shape"]) for value in document["values"]}
    made_by: dict[int, str] = {}  # a value whose shape differs from what the graph records: by what
    faults = []
    for node in document["nodes"]:
        given = shapes[node["inputs"][0]] if node["inputs"] else ()
        if node["op"] in ("Conv2d", "DepthwiseConv2d"):
            fault = _channels(node, given)
            if fault is not None:
                faults.append(f"{_named(node)}: {fault}{made_by.get(node['inputs'][0], '')}")
        worked_out = _worked_out(node, given)
        if worked_out is not None and node["outputs"]:
            value = node["outputs"][0]
            if node["op"] == "Convert":  # keeps its input's shape, and what made it
                if node["inputs"][0] in made_by:
                    made_by[value] = made_by[node["inputs"][0]]
            elif worked_out != shapes[value]:
                made_by[value] = f", which {_named(node)} makes of {_dims(given)}{_how(node)}"
            shapes[value] = worked_out
    return faults


def _worked_out(node: XnnNode, given: _Shape) -> _Shape | None:
    """The output's shape as XNNPACK's runtime works it out from the input's, for the nodes
    that change it in a way this knows (pads, transposes) or keep it (conversions); None for
    any other."""
    params = node["params"]
    if node["op"] == "StaticConstantPad":
        pre, post = params.get("pre_paddings", []), params.get("post_paddings", [])
        if isinstance(pre, list) and isinstance(post, list) and len(pre) == len(post) == len(given):
            return tuple(size + before + after for size, before, after in zip(given, pre, post))
    elif node["op"] == "StaticTranspose":
        perm = params.get("perm", [])
        if isinstance(perm, list) and sorted(perm) == list(range(len(given))):
            return tuple(given[axis] for axis in perm)
    elif node["op"] == "Convert" and given:
        return given
    return None


def _channels(node: XnnNode, given: _Shape) -> str | None:
    groups, per_group = node["params"].get("groups"), node["params"].get("group_input_channels")
    if isinstance(groups, int) and isinstance(per_group, int) and len(given) == 4 and given[-1] != groups * per_group:
        return (
            f"reads {groups * per_group} input channels ({groups} group{'s' if groups != 1 else ''} of {per_group}) "
            f"from an input of "
            f"{given[-1]} (its {_dims(given)}, channels last)"
        )
    return None


def _how(node: XnnNode) -> str:
    params = node["params"]
    if node["op"] == "StaticConstantPad":
        return f" with paddings {params.get('pre_paddings')} before and {params.get('post_paddings')} after"
    return f" with perm {params.get('perm')}" if node["op"] == "StaticTranspose" else ""


def _named(node: XnnNode) -> str:
    source = f" ({node['source'].strip()})" if node["source"] else ""
    return f"node {node['index']} {node['op']}{source}"


def _dims(shape: _Shape) -> str:
    return str(list(shape))
