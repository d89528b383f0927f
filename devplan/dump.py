"""`devplan compile --dump-dir`: each stage's result as text a person can diff. The same
compile writes the same text: no memory addresses, paths or timings, nothing that depends
on the hash seed."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from devplan.ir.method import BoolList, DoubleList, IntList, Method, OptionalTensorList, TensorList, Use, Value
from devplan.spec import TensorSpec

if TYPE_CHECKING:
    from devplan.ir.planned import PlannedMethod
    from devplan.passes.export.attention import Attention
    from devplan.pte.fb.Program import ProgramT
    from devplan.pte.writer import Spread


def stage_text(result: object, stage: str = "") -> str:
    """A stage's result as text: a graph stage's FX graph; a method stage's tables (values,
    instructions, and after planning each buffer's layout); emit's program objects by their
    facts; serialize's bytes by digest; the written file by name."""
    from devplan.ir.lowered import Lowered
    from devplan.ir.planned import PlannedMethod
    from devplan.passes.export.attention import Blocked
    from devplan.passes.export.backends import Delegated
    from devplan.passes.export.quantize import Quantized, QuantizeReport
    from devplan.passes.graph.fold import Folded
    from devplan.pte.writer import Spread

    if isinstance(result, Lowered):
        return str(result.gm.graph)
    if isinstance(result, Folded):  # what folding chose, and what it cost, then the graph
        return (_folding_text(result.folding) if result.folding else "") + str(result.program.gm.graph)
    if isinstance(result, Quantized):  # what quantizing cost, then the quantized graph
        return json.dumps(result.report.summary(), indent=1) + "\n" + stage_text(result.program, stage)
    if isinstance(result, Blocked):  # each attention's form, then the graph
        told = "".join(f"# {a.node} ({a.module}): {a.keys} keys, {_form(a)}\n" for a in result.attention)
        return told + stage_text(result.program, stage)
    if isinstance(result, Delegated):  # the ops each backend refused, then the edge program
        told = "".join(
            f"# {f.backend} left {', '.join(f.ops)} to portable kernels: {f.why}\n" for f in result.fallbacks
        )
        return told + stage_text(result.program, stage)
    if isinstance(result, QuantizeReport):  # measure: what the written program computes
        return json.dumps(result.summary(), indent=1) + "\n"
    if hasattr(result, "graph_module"):  # ExportedProgram
        return str(result.graph_module.graph)
    if hasattr(result, "graph"):  # GraphModule
        return str(result.graph)
    if isinstance(result, (bytes, bytearray, Spread)):  # serialize's pieces digest as the bytes they make
        return f"{len(result)} bytes, sha256 {_sha256(result)}\n"
    if isinstance(result, Path):  # the written file: its name only, which is all a rerun elsewhere shares
        return f"wrote {result.name}\n"
    if isinstance(result, tuple):  # emit: (ProgramT, segments)
        return _program_text(*result)
    if isinstance(result, PlannedMethod):
        return _method_text(result.method) + _layout_text(result)
    if isinstance(result, Method):
        return _method_text(result)
    return f"{type(result).__qualname__}\n"  # a stage this dump does not know yet


def _folding_text(folding: Mapping[str, int]) -> str:
    return (
        f"folded {folding['subgraphs']} constant subgraphs, {folding['shared_inputs']} of them reading weights "
        f"the run reads too: constant bytes {folding['constant_bytes_added']:+d}, run bytes removed "
        f"{folding['run_bytes_removed']}\n\n"
    )


def _method_text(method: Method) -> str:
    lines = [f"method {method.name}: inputs {_refs(method.inputs)}; outputs {_refs(method.outputs)}", "", "values"]
    lines += [f"  v{i:<4} {_value_text(value)}" for i, value in enumerate(method.values)]
    lines += ["", "instructions"]
    lines += [
        f"  #{i:<4} {k.op}({_refs(k.args)})"
        + (f" delegate {k.delegate}" if k.delegate is not None else "")
        + (f" view {'reshape ' if k.view.reshape else ''}starts {k.view.starts}" if k.view else "")
        + f"  # {k.node}"
        for i, k in enumerate(method.kernels)
    ]
    lines += [
        f"delegate {i}: {d.backend}, {len(d.payload)} bytes, sha256 {hashlib.sha256(d.payload).hexdigest()}, "
        f"{', '.join(f'{key}={value.decode()}' for key, value in d.compile_specs)}"
        for i, d in enumerate(method.delegates)
    ]
    return "\n".join(lines) + "\n"


def _layout_text(planned: PlannedMethod) -> str:
    """Each buffer's tensors by offset: where every byte goes and when."""
    lines = ["", "layout"]
    for b in planned.buffers:
        lines.append(
            f"  buffer {b.mem_id} ({b.device}): {b.size} bytes, lower bound {b.lower_bound}, "
            f"{b.tensors} tensors, {planned.algorithm}"
        )
        placed = sorted(
            (v.offset, i, v)
            for i, v in enumerate(planned.method.values)
            if isinstance(v, TensorSpec) and v.mem_id == b.mem_id
        )
        lines += [
            f"    @{offset:<8} {v.nbytes:>8} bytes  life {v.live[0]}..{v.live[1]:<5} v{i}" for offset, i, v in placed
        ]
    return "\n".join(lines) + "\n"


def _refs(indices: Iterable[int]) -> str:
    return ", ".join(f"v{i}" for i in indices)


def _value_text(value: Value) -> str:
    if isinstance(value, TensorSpec):
        facts = [value.dtype, f"{list(value.shape)}{' dynamic' if value.dynamic else ''}", str(value.device)]
        facts += ["constant"] if value.constant else []
        facts += [f"alias of v{value.alias_of} +{value.alias_offset}"] if value.alias_of is not None else []
        if value.mem_id is not None:
            facts.append(f"buffer {value.mem_id} @{value.offset} life {value.live[0]}..{value.live[1]}")
        return "tensor " + " ".join(facts)
    if isinstance(value, (TensorList, OptionalTensorList, IntList)):
        kind = {TensorList: "tensor_list", OptionalTensorList: "optional_tensor_list", IntList: "int_list"}[type(value)]
        return f"{kind} [{', '.join('None' if i < 0 else f'v{i}' for i in value.items)}]"
    if isinstance(value, (DoubleList, BoolList)):
        return f"{'double_list' if isinstance(value, DoubleList) else 'bool_list'} {list(value.items)}"
    if isinstance(value, Use):
        return f"use of v{value.source} on {value.device}"
    return "none" if value is None else f"{type(value).__name__} {value!r}"  # int, float, bool, str


def _sha256(data: bytes | bytearray | Spread) -> str:
    """The digest of bytes, or of a Spread's pieces one after another (never joined)."""
    from devplan.pte.writer import pieces

    digest = hashlib.sha256()
    for piece in pieces(data):
        digest.update(piece)
    return digest.hexdigest()


def _program_text(program: ProgramT, segments: Sequence[bytes | Spread]) -> str:
    """emit's ET12 objects: each plan's counts, operators, buffers and delegates; each segment's size and digest."""
    from devplan.pte.fb.DataLocation import DataLocation

    lines = []
    for plan in program.executionPlan or ():
        instructions = sum(len(chain.instructions or ()) for chain in plan.chains or ())
        lines.append(f"plan {_text(plan.name)}: {len(plan.values or ())} values, {instructions} instructions")
        lines += [f"  operator {i}: {_text(op.name)}.{_text(op.overload)}" for i, op in enumerate(plan.operators or ())]
        lines.append(f"  non_const_buffer_sizes {list(plan.nonConstBufferSizes or ())}")
        lines += [
            f"  buffer {d.bufferIdx} on device type {d.deviceType} index {d.deviceIndex}"
            for d in plan.nonConstBufferDevice or ()
        ]
        for i, d in enumerate(plan.delegates or ()):
            ref = d.processed
            where = "segment" if ref is not None and ref.location == DataLocation.SEGMENT else "inline data"
            lines.append(f"  delegate {i}: {_text(d.id)}, payload in {where} {ref.index if ref else None}")
    lines += [f"segment {i}: {len(data)} bytes, sha256 {_sha256(data)}" for i, data in enumerate(segments)]
    return "\n".join(lines) + "\n"


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _form(attention: Attention) -> str:
    return f"blocks of {attention.block}" if attention.block is not None else f"materialized ({attention.why})"
