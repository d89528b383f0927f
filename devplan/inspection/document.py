"""The inspection document: everything a person asks of a program, as plain JSON-able data.

docs/inspect-json.md describes every key; bump SCHEMA_VERSION when a key changes meaning or
goes away (adding a key does not bump it)."""

from __future__ import annotations

import os
from collections import Counter
from typing import AbstractSet, Any, Final, Sequence

from devplan.documents import (
    CompileSpec,
    ExternalData,
    InspectDocument,
    InspectedBuffer,
    InspectedDelegate,
    InspectedFile,
    InspectedInstruction,
    InspectedMethod,
    InspectedOperator,
    InspectedTensor,
    NamedData,
    PayloadBuffer,
    Role,
)
from devplan.errors import DevplanError
from devplan.inspection.bounds import BufferBounds, HeldWindow, buffer_bounds, device_bounds
from devplan.inspection.kernels import backends, kernel_libraries
from devplan.inspection.own_memory import working_memory
from devplan.inspection.peak import peak
from devplan.inspection.sources import argument_text, chain_origins, source_text, tensor_source
from devplan.jsontext import number
from devplan.pte import PteFile
from devplan.pte.decode import Delegate, MethodView, Tensor
from devplan.pte.frames import Where
from devplan.pte.header import is_program
from devplan.pte.program_view import ProgramView, program_view
from devplan.spec import CPU, Device

SCHEMA_VERSION: Final = 1


def document(pte: PteFile, name: str, method: str | None = None) -> InspectDocument:
    """The inspection document of a read program (a devplan.pte.PteFile); name is the file's
    basename. method keeps only that method; an unknown name is a DevplanError."""
    program = program_view(pte)
    views = program.methods
    names = [view.name for view in views]
    if method is not None and method not in names:
        listed = ", ".join(names) or "none"
        raise DevplanError(f"{program.name}: no method {method!r}; the program's methods are: {listed}")
    file: InspectedFile = {
        "name": name,
        "size": program.size,
        "program_version": program.version,
        "segments": [{"index": s.index, "offset": s.offset, "size": s.size} for s in program.segments],
        "constant_bytes": program.constant_bytes + sum(program.named_segments.values()),
        "named_data": _named_data(program),
    }
    # only where the program keeps weights in a .ptd, so that other documents stay as they were
    if (external := external_weights(program)) is not None:
        file["external"] = external
    return {
        "schema_version": SCHEMA_VERSION,
        "format": "ET12",
        "file": file,
        "methods": [_method(program, view) for view in views if method is None or view.name == method],
    }


def external_weights(program: ProgramView) -> ExternalData | None:
    """The weights the program keeps in a .ptd data file (its EXTERNAL tensors, and named data
    its delegates read that it does not hold): how many keys it names and, when the .ptd was
    given, its name and the bytes it stores; None for a program holding all its weights."""
    keys = program.external_keys
    if not keys:
        return None
    data = program.external
    return {
        "keys": len(keys),
        "data": None if data is None else os.path.basename(data.name),
        "bytes": None if data is None else data.stored_bytes,
    }


def external_note(pte: PteFile) -> str | None:
    """One line saying that the program's weights are outside it, when they are and no .ptd
    was given: what inspect, check and diff say instead of needing them; or that a .ptd was
    given to a program that keeps every weight inside it."""
    program = program_view(pte)
    external = external_weights(program)
    if external is None and program.external is not None:  # a .ptd given for the wrong program, most likely
        return f"{program.name} names no external weights; --data {program.external.name} is not read"
    if external is None or external["data"] is not None:
        return None
    return (
        f"{program.name}: weights external: {external['keys']} {'key' if external['keys'] == 1 else 'keys'} in a .ptd "
        f"data file not given (--data FILE.ptd checks them against it)"
    )


def _named_data(program: ProgramView) -> list[NamedData]:
    """Weights a backend keeps by key in segments of their own (ExecuTorch's XNNPACK and other
    delegates), each with its segment and that segment's size."""
    return [{"key": datum.key, "segment": datum.segment, "size": datum.size} for datum in program.named_data]


def _method(program: ProgramView, view: MethodView) -> InspectedMethod:
    lengths = Counter(row.chain for row in view.instructions)  # each chain's instructions
    origins = [
        where
        for index in range(view.chains)
        for where in chain_origins(program, view.plan_index, index, lengths[index])
    ]
    operators: list[InspectedOperator] = [
        {"index": index, "name": name, "overload": overload} for index, (name, overload) in enumerate(view.operators)
    ]
    writers = view.first_writers
    instruction_rows: list[InspectedInstruction] = []
    for row, where in zip(view.instructions, origins):
        instruction_rows.append(
            {
                "index": row.index,
                "kind": row.kind,
                "op": view.operator(row.op) if row.op is not None else None,
                "delegate": row.delegate,
                "args": list(row.args),
                # "" is the model itself (a module frame naming only its class); None: no module frame
                "source": source_text(where),
                "module": where.module if where and (where.module or where.kind) else None,
                "arguments": [argument_text(view, arg, writers) for arg in row.args],
            }
        )
    sizes = view.buffer_sizes
    inputs, outputs = set(view.inputs), set(view.outputs)
    tensors = [_tensor(view, index, tensor, inputs, outputs) for index, tensor in view.tensors.items()]
    calls: dict[int, list[int]] = {}  # delegate -> the instructions calling it, found in one pass
    for row in view.instructions:
        if row.delegate is not None:
            calls.setdefault(row.delegate, []).append(row.index)
    delegates = [_delegate(program, view, delegate, calls.get(delegate.index, [])) for delegate in view.delegates]
    windows = _windows(program, view, delegates)
    rows = [
        _buffer(
            mem_id,
            sizes[mem_id],
            view.buffer_devices.get(mem_id, CPU),
            tensors,
            view.written,
            view.read,
            [w for w in windows if w["mem_id"] == mem_id],
        )
        for mem_id in range(1, len(sizes))
    ]
    buffers = [row for row, _ in rows]
    _name_tensors(tensors, instruction_rows, writers, origins, view.inputs, view.outputs)
    for t in tensors:
        t["module"] = _module_of(t, instruction_rows, writers)
    peaks = [
        peak(buffer, [t for t in tensors if t["mem_id"] == buffer["mem_id"]], instruction_rows) for buffer in buffers
    ]
    entry: InspectedMethod = {
        "name": view.name,
        "inputs": list(view.inputs),
        "outputs": list(view.outputs),
        "counts": {
            "values": len(view.kinds),
            "instructions": len(instruction_rows),
            "operators": len(operators),
            "delegates": len(delegates),
        },
        "values": dict(sorted(Counter(view.kind(value) for value in range(len(view.kinds))).items())),
        "kernels": kernel_libraries(view),
        "backends": backends(view),
    }
    # only for a method that runs nothing (a constant method), so that other documents stay as they were
    if not view.instructions and view.outputs:
        entry["returns"] = _returns(view)
    # the keys in this order, after returns: the document's order is its text's
    entry["buffers"] = buffers
    entry["devices"] = device_bounds(buffers, [bounds.live for _, bounds in rows], delegates)
    entry["peak"] = peaks
    entry["tensors"] = tensors
    entry["instructions"] = instruction_rows
    entry["operators"] = operators
    entry["delegates"] = delegates
    return entry


def _returns(view: MethodView) -> list[Any]:
    """What a method of no instructions returns, one entry per output: what an LLM runner reads
    from a constant method (get_max_seq_len, use_kv_cache, get_eos_ids; a list is one output per
    item, as ExecuTorch writes it). A number, bool, string, or list of doubles or bools as its
    value (NaN and the infinities as jsontext.number writes them); anything else (a tensor, an
    int list of value indices) as None."""
    return [number(view.scalars.get(value)) for value in view.outputs]


def _name_tensors(
    tensors: list[InspectedTensor],
    instructions: list[InspectedInstruction],
    writers: dict[int, int],
    origins: list[Where | None],
    inputs: Sequence[int],
    outputs: Sequence[int],
) -> None:
    """Each tensor's `source`: the user's names the frames give (inputs, weights), else its
    role and the instruction that first writes it."""
    names = {index: (role, name) for where in origins if where for index, role, name in where.names}
    position = {value: i for i, value in enumerate(outputs)}
    position.update({value: i for i, value in enumerate(inputs)})
    for t in tensors:
        t["source"] = tensor_source(t, instructions, writers.get(t["value"]), names, position)
        t["name"] = (names[t["value"]][1] or None) if t["value"] in names else None


def _module_of(
    tensor: InspectedTensor, instructions: list[InspectedInstruction], writers: dict[int, int]
) -> str | None:
    """The module whose instruction wrote the tensor's bytes."""
    at = writers.get(tensor["value"], tensor["held"][0] if tensor["held"] else None)
    return instructions[at]["module"] if at is not None and at < len(instructions) else None


def _tensor(view: MethodView, index: int, tensor: Tensor, inputs: set[int], outputs: set[int]) -> InspectedTensor:
    lifetime = view.lifetimes.get(index)
    return {
        "value": index,
        "dtype": tensor.dtype,
        "shape": list(tensor.shape),
        "dim_order": list(tensor.dim_order or ()),
        "dynamic": tensor.dynamic,
        "mem_id": tensor.mem_id,
        "offset": tensor.offset,
        "nbytes": tensor.nbytes,
        "device": str(view.device_of(tensor)),
        "lifetime": list(lifetime) if lifetime is not None else None,
        # from when the tensor's bytes must be kept; earlier than lifetime for a view
        "held": list(lifetime) if lifetime is not None else None,
        "role": _role(index, tensor.constant or tensor.data > 0, index in view.state, inputs, outputs),
        "constant": tensor.constant or tensor.data > 0,
        "source": "",  # named once every tensor is made (_name_tensors)
        "module": None,  # the module of the instruction that writes it (_module_of)
        "name": None,  # the user's, where the program names it (_name_tensors)
    }


def _role(index: int, constant: bool, state: bool, inputs: set[int], outputs: set[int]) -> Role:
    if index in inputs and index in outputs:
        return "input+output"
    if index in inputs:
        return "input"
    if index in outputs:
        return "output"
    if state:  # before constant: a mutable buffer's initial value is data in the file too
        return "state"
    return "constant" if constant else "activation"


def _buffer(
    mem_id: int,
    size: int,
    device: Device,
    tensors: list[InspectedTensor],
    written: AbstractSet[int],
    read: AbstractSet[int],
    windows: list[HeldWindow],
) -> tuple[InspectedBuffer, BufferBounds]:
    """One buffer: its size, the bytes in use at its busiest instruction, and its lower bound,
    delegates' windows (their payloads' buffers, alive while they run) counted with the
    tensors; with those bounds, whose live intervals the device totals add up."""
    placed = [t for t in tensors if t["mem_id"] == mem_id]
    bounds = buffer_bounds([t for t in placed if t["lifetime"] is not None], size, windows, written, read)
    row: InspectedBuffer = {
        "mem_id": mem_id,
        "size": size,
        "device": str(device),
        "tensors": len(placed),
        "peak": bounds.peak,
        "peak_instruction": bounds.peak_instruction,
        "lower_bound": bounds.lower_bound,
    }
    # a sound plan keeps apart, at its busiest, at least the bytes its bound says must be
    if bounds.peak < bounds.exact_bound:
        row["problem"] = (
            f"unsound plan: peak {bounds.peak} bytes is below the {bounds.exact_bound} that must be "
            f"apart at once (live tensors or delegate windows share bytes)"
        )
    return row, bounds


def _windows(program: ProgramView, view: MethodView, delegates: list[InspectedDelegate]) -> list[HeldWindow]:
    """The delegate windows of a method, each as a pseudo-tensor of its buffer: the payload's
    buffer bytes at the window's offset, held from the delegate's first call to its last."""
    found: list[HeldWindow] = []
    for d in delegates:
        window, buffers = d["window"], d["payload_buffers"]
        if window is None or not d["calls"]:
            continue
        where = f"{view.where}: delegate {d['index']}"
        if buffers is None:  # the payload is what is wrong, not where its window lies
            raise DevplanError(f"{where}'s payload cannot be read: {_payload_problem(program, view, d['index'])}")
        if len(buffers) != 1:
            raise DevplanError(
                f"{where}'s payload plans {len(buffers)} buffers, where a payload given a memory window "
                f"plans one; the program is damaged"
            )
        nbytes, sizes = buffers[0]["size"], view.buffer_sizes
        if not (0 < window["mem_id"] < len(sizes) and window["offset"] <= sizes[window["mem_id"]]):
            raise DevplanError(
                f"{where}'s memory window (buffer {window['mem_id']}, offset {window['offset']}) does "
                f"not lie inside one of the method's buffers; the program is damaged"
            )
        if window["offset"] + nbytes > sizes[window["mem_id"]]:
            raise DevplanError(
                f"{where}'s payload plans {nbytes} bytes of working memory, more than the "
                f"{sizes[window['mem_id']] - window['offset']} its memory window (buffer "
                f"{window['mem_id']}, offset {window['offset']}) leaves; the program is damaged"
            )
        found.append(
            HeldWindow(
                mem_id=window["mem_id"],
                offset=window["offset"],
                nbytes=nbytes,
                bound=buffers[0]["lower_bound"],
                held=[min(d["calls"]), max(d["calls"])],
            )
        )
    return found


def _payload_problem(program: ProgramView, view: MethodView, index: int) -> str:
    """Why a delegate's payload is no program devplan reads."""
    try:
        inner = program.payload_program(view.plan_index, index)
        document(inner, inner.name)
    except DevplanError as error:
        text = str(error)  # named after its delegate already
        return text.partition(": ")[2] if text.startswith(f"{program.name} delegate ") else text
    return "it is not an ET12 program; the program is damaged"


def _delegate(program: ProgramView, view: MethodView, delegate: Delegate, calls: list[int]) -> InspectedDelegate:
    specs: list[CompileSpec] = [{"key": key, "value": _spec_value(value)} for key, value in delegate.specs]
    target = next((spec["value"] for spec in specs if spec["key"] == "target_device"), None)
    payload, window = program.payload(view.plan_index, delegate.index), delegate.window
    return {
        "index": delegate.index,
        "id": delegate.id,
        "compile_specs": specs,
        "target_device": target,
        "payload_size": len(payload),
        "location": delegate.location,
        "payload_index": delegate.payload_index,
        "payload_buffers": _payload_buffers(program, view.plan_index, delegate.index, payload),
        "working_memory": working_memory(delegate.id, payload),
        "window": {"mem_id": window[0], "offset": window[1]} if window else None,
        "calls": calls,
    }


def _payload_buffers(
    program: ProgramView, plan_index: int, index: int, payload: bytes | memoryview
) -> list[PayloadBuffer] | None:
    """The planned buffers of a payload that is itself an ET12 program (devplan's delegates
    are): memory the delegate holds on its device besides the method's own buffers. Worked
    out once for all the delegates sharing a payload (the reader hands them one program)."""

    if not is_program(payload):
        return None
    try:
        inner = program.payload_program(plan_index, index)
    except DevplanError:
        return None  # nested past what devplan reads
    found = inner.memo(("buffers",), lambda: _planned_buffers(inner))
    return None if found is None else [buffer.copy() for buffer in found]  # each delegate's entry is its own


def _planned_buffers(inner: PteFile) -> list[PayloadBuffer] | None:
    try:
        return [
            {
                "method": method["name"],
                "mem_id": buffer["mem_id"],
                "device": buffer["device"],
                "size": buffer["size"],
                "lower_bound": buffer["lower_bound"],
            }
            for method in document(inner, inner.name)["methods"]
            for buffer in method["buffers"]
        ]
    except DevplanError:
        return None  # another backend's bytes that merely look like a program


def _spec_value(raw: bytes) -> str:
    """Text when the bytes are printable UTF-8, else hex, so the document stays valid JSON text."""
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.hex()
    return decoded if decoded.isprintable() else raw.hex()
