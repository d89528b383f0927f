"""Names back to the model: where each instruction came from (ET12's stacktrace, as devplan or
ExecuTorch wrote it), which tensor is which (its role, the user's name where the program
keeps one, else the instruction that first writes it), and every argument as text."""
from __future__ import annotations

import os

from devplan.pte.frames import Where
from devplan.pte.fb.KernelTypes import KernelTypes
from devplan.pte.reader import ints, text


def chain_origins(pte, plan_index: int, chain_index: int, count: int) -> list[Where | None]:
    """One Where per instruction of a chain; None for all when the chain has no stacktrace or
    one that does not match its instructions."""
    origins = pte.stacktrace(plan_index, chain_index)
    return origins if origins is not None and len(origins) == count else [None] * count


def source_text(where: Where | None) -> str | None:
    """'transformer.h.3.attn.c_attn (Conv1D) addmm · pytorch_utils.py:117', as far as known."""
    if where is None:
        return None
    module = f"{where.module} ({where.kind})" if where.kind else where.module
    op = where.op.removeprefix("aten.").removesuffix(".default")
    place = f"{os.path.basename(where.file)}:{where.line}" if where.file else ""
    if not module and where.code:  # ExecuTorch's frames: the line and what it says
        place = f"{place} {where.code}".strip()
    text_ = " ".join(part for part in (module, op) if part)
    return " · ".join(part for part in (text_, place) if part) or None


def top_module(path: str | None) -> str:
    """The block a module belongs to: its path up to the first numbered part
    ('transformer.h.3.attn.c_attn' -> 'transformer.h.3'), else its first two parts."""
    if path is None:
        return "(no module)"
    if not path:
        return "(model)"
    parts = path.split(".")
    numbered = next((i for i, part in enumerate(parts) if part.isdigit()), None)
    return ".".join(parts[:numbered + 1] if numbered is not None else parts[:2])


def tensor_source(tensor: dict, instructions: list[dict], writer: int | None, names: dict, position: dict) -> str:
    """What a person calls this tensor: its role and the user's name, or where it was made."""
    value = tensor["value"]
    if value in names:
        role, name = names[value]
        return f"{role} {name}"
    role = tensor["role"]
    if role.startswith("input"):
        return f"input {position[value]}"
    if tensor["constant"]:
        first = (tensor["lifetime"] or [None])[0]
        return f"constant of {_made_by(instructions[first])}" if first is not None else "constant, unused"
    if writer is None and tensor["held"] is not None and tensor["held"][0] < len(instructions):
        # a view: its bytes are an earlier tensor's
        made = f"view of bytes from {_made_by(instructions[tensor['held'][0]])}"
    else:
        made = _made_by(instructions[writer]) if writer is not None else "unused"
    return f"output {position[value]}, {made}" if role == "output" else made


def _made_by(row: dict) -> str:
    return row["source"] or f"#{row['index']} {row['op'] or row['kind']}"


_SCALAR_FIELDS = {KernelTypes.Int: "intVal", KernelTypes.Double: "doubleVal", KernelTypes.Bool: "boolVal"}


def argument_text(values, index: int, written: set[int]) -> str:
    """An argument as the call reads it: a tensor or a number some instruction computes as
    vN, numbers, lists and None as their values."""
    if not 0 <= index < len(values):
        return f"v{index}?"
    value = values[index]
    kind = value.valType
    if kind == KernelTypes.Tensor or index in written:
        return f"v{index}"
    if kind in _SCALAR_FIELDS:
        return repr(getattr(value.val, _SCALAR_FIELDS[kind]))
    if kind in (KernelTypes.Null, KernelTypes.NONE):
        return "None"
    if value.val is None:  # a type but no content, as damage leaves it: shown like a dangling index
        return f"v{index}?"
    if kind == KernelTypes.String:
        return repr(text(value.val.stringVal))
    items = ints(value.val.items) if kind != KernelTypes.DoubleList else list(() if value.val.items is None else value.val.items)
    if kind == KernelTypes.IntList:  # items are Int values: their numbers, or vN when computed at run time
        return "[" + ", ".join(argument_text(values, item, written) for item in items) + "]"
    if kind == KernelTypes.BoolList:
        return repr([bool(item) for item in items])
    if kind == KernelTypes.DoubleList:
        return repr([float(item) for item in items])
    return "[" + ", ".join("None" if item < 0 else f"v{item}" for item in items) + "]"
