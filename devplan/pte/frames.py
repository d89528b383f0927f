"""Where each instruction came from, kept in ET12's Chain.stacktrace: one FrameList per
instruction. ExecuTorch fills it with the Python frames of the traceback (outermost first);
devplan writes frames any reader of the format can print, and adds two kinds that its own
reader tells apart by their file name:

    File "<module>", line 0, in transformer.h.3.attn.c_attn (Conv1D)   context: the user's op
    File "<value>", line N, in transformer.h.3.attn.c_attn.weight      context: parameter

    File "<handle>", line N, in conv (Conv2d)                           context: aten.convolution.default

The first says which module (path and class) made the instruction; the second names value N,
a user input or weight the instruction is the first to read, by its role and the name the
export's signature gives it; the third, on a call of an ExecuTorch backend's delegate, which
module and op made the node its payload records under debug handle N (XNNPACK's nodes).
Any other frame is a source line, innermost last."""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any

from devplan.pte.fb import Frame
from devplan.pte.fb.Frame import FrameT
from devplan.pte.fb.FrameList import FrameListT
from devplan.pte.fb.Program import Program

MODULE_FILE, VALUE_FILE, HANDLE_FILE = "<module>", "<value>", "<handle>"
_MODULE = re.compile(r"(.*?) ?\(([^()]*)\)")
# what torch's export names a node's module with where it knows none: a node one of its passes
# made through a metadata hook (torch._export.passes._node_metadata_hook's
# "_empty_nn_module_stack_from_metadata_hook", as path and class alike); no module of the model
_TORCH_PLACEHOLDER = re.compile(r"_\w+_hook")


def torch_placeholder(name: str) -> bool:
    """Whether a module path or class name is torch's stand-in for no module."""
    return _TORCH_PLACEHOLDER.fullmatch(name) is not None


@dataclass(frozen=True)
class Where:
    """An instruction's origin as read back from its frames; empty strings where unknown."""

    module: str = ""
    kind: str = ""
    op: str = ""
    file: str = ""
    line: int = 0
    code: str = ""
    names: tuple[tuple[int, str, str], ...] = ()  # (value index, role, the user's name)
    handles: tuple[tuple[int, str, str, str], ...] = ()  # (debug handle, module, class, op) of a delegate's nodes


class FrameCache:
    """Frames packed once per program: the instructions of one line or module repeat the same
    frames and paths, which written out each time made a 32-layer GPT-2 25% larger. Offsets
    hold for one builder, so a second pack starts afresh."""

    def __init__(self) -> None:
        self.builder: object = None
        self.offsets: dict[tuple[str, int, str, str], int] = {}

    def offset(self, builder: Any, frame: FrameT) -> int:  # builder: a flatbuffers.Builder, untyped
        if builder is not self.builder:
            self.builder, self.offsets = builder, {}
        key = (frame.filename, frame.lineno, frame.name, frame.context)
        if key not in self.offsets:
            filename, name, context = (
                builder.CreateSharedString(text) for text in (frame.filename, frame.name, frame.context)
            )
            Frame.Start(builder)
            Frame.AddFilename(builder, filename)
            Frame.AddLineno(builder, frame.lineno)
            Frame.AddName(builder, name)
            Frame.AddContext(builder, context)
            self.offsets[key] = Frame.End(builder)
        return self.offsets[key]


def frame_list(
    module: str,
    kind: str,
    op: str,
    file: str,
    line: int,
    function: str,
    code: str,
    names: list[tuple[int, str, str]],
    cache: FrameCache,
    handles: tuple[tuple[int, str, str, str], ...] = (),
) -> FrameListT:
    frames = [(MODULE_FILE, 0, f"{module} ({kind})" if kind else module, op)] if module or kind or op else []
    if file:
        frames.append((file, line, function, code))
    frames += [(VALUE_FILE, index, name, role) for index, role, name in names]
    frames += [(HANDLE_FILE, handle, f"{path} ({cls})" if cls else path, name) for handle, path, cls, name in handles]
    return FrameListT(items=[_SharedFrame(cache, *frame) for frame in frames])


class _SharedFrame(FrameT):
    def __init__(self, cache: FrameCache, filename: str, lineno: int, name: str, context: str) -> None:
        super().__init__(filename, lineno, name, context)  # type: ignore[no-untyped-call]  # flatc writes it untyped
        self.cache = cache

    def Pack(self, builder: Any) -> int:
        return self.cache.offset(builder, self)


def read_frames(frames: list[tuple[str, int, str, str]]) -> Where:
    """(filename, lineno, name, context) of one FrameList, as read, to what they say."""
    module = kind = op = file = code = ""
    line, names, handles = 0, [], []
    for filename, lineno, name, context in frames:
        if filename == MODULE_FILE:
            match = _MODULE.fullmatch(name)
            module, kind = (match[1], match[2]) if match else (name, "")
            if torch_placeholder(module):  # a program devplan wrote before it left these out
                module = kind = ""
            op = context
        elif filename == VALUE_FILE:
            names.append((lineno, context, name))
        elif filename == HANDLE_FILE:
            match = _MODULE.fullmatch(name)
            handles.append((lineno, *((match[1], match[2]) if match else (name, "")), context))
        else:  # a source line; the last one is where the op was called
            file, line, code = filename, lineno, context
    return Where(module, kind, op, file, line, code, tuple(names), tuple(handles))


def read_stacktrace(buffer: "bytes | memoryview", plan_index: int, chain_index: int) -> list[Where | None] | None:
    """What the frames of each instruction of a chain say, or None when the chain keeps none.
    Read straight from the (verified) FlatBuffer, each frame table once: frames repeat across
    instructions (devplan shares them), and unpacking a FrameT per frame and instruction made a
    third of the time it took to read a large program."""
    chain = Program.GetRootAs(buffer, 0).ExecutionPlan(plan_index).Chains(chain_index)
    if chain.StacktraceIsNone():
        return None
    vector = chain._tab.Vector(chain._tab.Offset(_STACKTRACE_SLOT))
    frames: dict[int, tuple[str, int, str, str]] = {}
    said: dict[tuple[int, ...], Where] = {}
    result: list[Where | None] = []
    for i in range(chain.StacktraceLength()):
        element = vector + 4 * i
        positions = tuple(_items(buffer, element + _U32.unpack_from(buffer, element)[0]))
        for position in positions:
            if position not in frames:
                frames[position] = _frame_fields(buffer, position)
        if positions not in said:
            said[positions] = read_frames([frames[position] for position in positions])
        result.append(said[positions])
    return result


_U32, _I32, _U16 = struct.Struct("<I"), struct.Struct("<i"), struct.Struct("<H")
_STACKTRACE_SLOT = 10  # Chain's fourth field: 4 + 2 * 3


def _field(buffer: bytes | memoryview, table: int, index: int) -> int:
    """Where field `index` of the table at `table` sits, or 0 when the table leaves it out."""
    vtable = table - _I32.unpack_from(buffer, table)[0]
    slot = 4 + 2 * index
    return _U16.unpack_from(buffer, vtable + slot)[0] if slot < _U16.unpack_from(buffer, vtable)[0] else 0


def _items(buffer: bytes | memoryview, frame_list: int) -> list[int]:
    """Positions of the Frame tables a FrameList holds."""
    at = _field(buffer, frame_list, 0)
    if not at:
        return []
    vector = frame_list + at + _U32.unpack_from(buffer, frame_list + at)[0]
    elements = range(vector + 4, vector + 4 + 4 * _U32.unpack_from(buffer, vector)[0], 4)
    return [element + _U32.unpack_from(buffer, element)[0] for element in elements]


def _frame_fields(buffer: bytes | memoryview, frame: int) -> tuple[str, int, str, str]:
    """(filename, lineno, name, context) of the Frame table at `frame`."""

    def string(index: int) -> str:
        at = _field(buffer, frame, index)
        if not at:
            return ""
        start = frame + at + _U32.unpack_from(buffer, frame + at)[0]
        return bytes(buffer[start + 4 : start + 4 + _U32.unpack_from(buffer, start)[0]]).decode(
            "utf-8", errors="replace"
        )

    line = _field(buffer, frame, 1)
    return string(0), _I32.unpack_from(buffer, frame + line)[0] if line else 0, string(2), string(3)
