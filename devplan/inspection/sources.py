"""Names back to the model: where each instruction came from (ET12's stacktrace, as devplan or
ExecuTorch wrote it), which tensor is which (its role, the user's name where the program
keeps one, else the instruction that first writes it), and every argument as text."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, AbstractSet, Mapping

from devplan.documents import InspectedInstruction, InspectedTensor
from devplan.pte.frames import Where

if TYPE_CHECKING:
    from devplan.pte.decode import MethodView
    from devplan.pte.program_view import ProgramView


def chain_origins(program: ProgramView, plan_index: int, chain_index: int, count: int) -> list[Where | None]:
    """One Where per instruction of a chain; None for all when the chain has no stacktrace or
    one that does not match its instructions."""
    origins = program.stacktrace(plan_index, chain_index)
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
    return ".".join(parts[: numbered + 1] if numbered is not None else parts[:2])


def block_of(tensor: InspectedTensor) -> str:
    """The block a tensor's bytes count against: its module's top_module; inputs and state
    (held for every instruction, whichever module updates them) each make one block of their own."""
    if tensor["role"].startswith("input"):
        return INPUTS
    return STATE if tensor["role"] == "state" else top_module(tensor.get("module"))


INPUTS, STATE = "(inputs)", "(state)"


def tensor_source(
    tensor: InspectedTensor,
    instructions: list[InspectedInstruction],
    writer: int | None,
    names: dict[int, tuple[str, str]],
    position: dict[int, int],
) -> str:
    """What a person calls this tensor: its role and the user's name, or where it was made."""
    value = tensor["value"]
    if value in names:
        role, name = names[value]
        return f"{role} {name}"
    role = tensor["role"]
    if role.startswith("input"):
        return f"input {position[value]}"
    if role == "state":  # its initial value, if any, is data in the file, but what it holds is the runs'
        return f"state, updated by {_made_by(instructions[writer])}" if writer is not None else "state"
    if tensor["constant"]:
        first = tensor["lifetime"][0] if tensor["lifetime"] else None
        return f"constant of {_made_by(instructions[first])}" if first is not None else "constant, unused"
    if writer is None and tensor["held"] is not None and tensor["held"][0] < len(instructions):
        # a view: its bytes are an earlier tensor's
        made = f"view of bytes from {_made_by(instructions[tensor['held'][0]])}"
    else:
        made = _made_by(instructions[writer]) if writer is not None else "unused"
    return f"output {position[value]}, {made}" if role == "output" else made


def _made_by(row: InspectedInstruction) -> str:
    return row["source"] or f"#{row['index']} {row['op'] or row['kind']}"


def argument_text(view: MethodView, index: int, written: AbstractSet[int] | Mapping[int, int]) -> str:
    """An argument as the call reads it: a tensor or a number some instruction computes as vN,
    numbers, lists and None as their values."""
    if not 0 <= index < len(view.kinds):
        return f"v{index}?"
    kind = view.kind(index)
    if kind == "tensor" or index in written:
        return f"v{index}"
    if kind in ("null", "none"):
        return "None"
    if kind == "int_list":  # items are Int values: their numbers, or vN when computed at run time
        # (a list among the items, which only damage puts there, is named, never followed)
        return (
            "["
            + ", ".join(
                f"v{item}"
                if 0 <= item < len(view.kinds) and view.kind(item) == "int_list"
                else argument_text(view, item, written)
                for item in view.lists[index]
            )
            + "]"
        )
    if kind in ("tensor_list", "optional_tensor_list"):
        return "[" + ", ".join("None" if item < 0 else f"v{item}" for item in view.lists[index]) + "]"
    return repr(view.scalars[index])


def source_identity(source: str) -> tuple[str, bool]:
    """What a tensor's `source` says it is, without what moves when the model's code is edited
    (the file and line; an instruction's index): 'transformer.h.0.ln_1 (LayerNorm) layer_norm',
    'view of bytes from ...', or, without a stacktrace, the kernel ('#aten::add.out'). Returns
    (identity, whether it names a source rather than only a kernel)."""
    view = "view of bytes from "
    prefix, made = (view, source[len(view) :]) if source.startswith(view) else ("", source)
    kernel = re.fullmatch(r"#\d+ (.*)", made)
    if kernel:
        return f"{prefix}#{kernel.group(1)}", False
    parts = made.split(" · ")
    return prefix + (parts[0] if len(parts) > 1 else made), made != "unused"
