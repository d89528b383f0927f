"""Structural check of an ET12 FlatBuffer, done before any generated code reads it.

The flatbuffers Python runtime has no verifier: generated accessors on a damaged buffer can
raise anything or spin on a vector length the file does not hold. This walks the buffer from
the root table by the schema below and checks every offset, vtable, string, vector and
union tag against the bytes that are there, like the C++ runtime's verifier. Work is linear
in the number of objects; byte vectors are checked by their length, never byte by byte."""

from __future__ import annotations

import struct
from typing import Any, Callable, NoReturn

from devplan.errors import DevplanError

# Field kinds. A field is (name, kind, detail): detail is a scalar's or vector element's
# type as the bindings name it (their flatbuffers.number_types flags), or the name of the
# table or union ("" for a string).
_SCALAR, _STRING, _TABLE, _SCALARS, _TABLES, _UNION = range(6)
Field = tuple[str, int, str]  # (name, kind, detail)

WIDTHS = {
    "Bool": 1,
    "Int8": 1,
    "Uint8": 1,
    "Int16": 2,
    "Uint16": 2,
    "Int32": 4,
    "Uint32": 4,
    "Float32": 4,
    "Int64": 8,
    "Uint64": 8,
    "Float64": 8,
}


def _scalar(name: str, number: str) -> Field:
    return (name, _SCALAR, number)


def _string(name: str) -> Field:
    return (name, _STRING, "")  # a string has no detail


def _table(name: str, table: str) -> Field:
    return (name, _TABLE, table)


def _scalars(name: str, number: str) -> Field:
    return (name, _SCALARS, number)


def _tables(name: str, table: str) -> Field:
    return (name, _TABLES, table)


def _union(name: str, union: str) -> Field:
    return (name, _UNION, union)


# Mirrors schema/program.fbs: fields in slot order (a union takes two slots: tag, value),
# union members in tag order starting at 1. tests/pte checks this against the bindings.
TABLES: dict[str, tuple[Field, ...]] = {
    "ContainerMetadata": (_string("encoded_inp_str"), _string("encoded_out_str")),
    "Null": (),
    "AllocationDetails": (
        _scalar("memory_id", "Uint32"),
        _scalar("memory_offset_low", "Uint32"),
        _scalar("memory_offset_high", "Uint32"),
    ),
    "ExtraTensorInfo": (
        _scalar("mutable_data_segments_idx", "Uint64"),
        _string("fully_qualified_name"),
        _scalar("location", "Int8"),
        _scalar("device_type", "Int8"),
        _scalar("device_index", "Int8"),
    ),
    "Tensor": (
        _scalar("scalar_type", "Int8"),
        _scalar("storage_offset", "Int32"),
        _scalars("sizes", "Int32"),
        _scalars("dim_order", "Uint8"),
        _scalar("requires_grad", "Bool"),
        _scalar("data_buffer_idx", "Uint32"),
        _table("allocation_info", "AllocationDetails"),
        _scalar("layout", "Int8"),
        _scalar("shape_dynamism", "Int8"),
        _table("extra_tensor_info", "ExtraTensorInfo"),
    ),
    "Int": (_scalar("int_val", "Int64"),),
    "Bool": (_scalar("bool_val", "Bool"),),
    "Double": (_scalar("double_val", "Float64"),),
    "String": (_string("string_val"),),
    "IntList": (_scalars("items", "Int64"),),
    "DoubleList": (_scalars("items", "Float64"),),
    "BoolList": (_scalars("items", "Bool"),),
    "TensorList": (_scalars("items", "Int32"),),
    "OptionalTensorList": (_scalars("items", "Int32"),),
    "EValue": (_union("val", "KernelTypes"),),
    "Operator": (_string("name"), _string("overload")),
    "KernelCall": (_scalar("op_index", "Int32"), _scalars("args", "Int32")),
    "DelegateCall": (_scalar("delegate_index", "Int32"), _scalars("args", "Int32")),
    "MoveCall": (_scalar("move_from", "Int32"), _scalar("move_to", "Int32")),
    "JumpFalseCall": (_scalar("cond_value_index", "Int32"), _scalar("destination_instruction", "Int32")),
    "FreeCall": (_scalar("value_index", "Int32"),),
    "Instruction": (_union("instr_args", "InstructionArguments"),),
    "Frame": (_string("filename"), _scalar("lineno", "Int32"), _string("name"), _string("context")),
    "FrameList": (_tables("items", "Frame"),),
    "BackendDelegateDataReference": (_scalar("location", "Int8"), _scalar("index", "Uint32")),
    "CompileSpec": (_string("key"), _scalars("value", "Uint8")),
    "BackendDelegate": (
        _string("id"),
        _table("processed", "BackendDelegateDataReference"),
        _tables("compile_specs", "CompileSpec"),
    ),
    "Chain": (
        _scalars("inputs", "Int32"),
        _scalars("outputs", "Int32"),
        _tables("instructions", "Instruction"),
        _tables("stacktrace", "FrameList"),
    ),
    "ExecutionPlan": (
        _string("name"),
        _table("container_meta_type", "ContainerMetadata"),
        _tables("values", "EValue"),
        _scalars("inputs", "Int32"),
        _scalars("outputs", "Int32"),
        _tables("chains", "Chain"),
        _tables("operators", "Operator"),
        _tables("delegates", "BackendDelegate"),
        _scalars("non_const_buffer_sizes", "Int64"),
        _tables("non_const_buffer_device", "NonConstBufferDevice"),
    ),
    "NonConstBufferDevice": (
        _scalar("buffer_idx", "Int32"),
        _scalar("device_type", "Int8"),
        _scalar("device_index", "Int8"),
    ),
    "Buffer": (_scalars("storage", "Uint8"),),
    "BackendDelegateInlineData": (_scalars("data", "Uint8"),),
    "DataSegment": (_scalar("offset", "Uint64"), _scalar("size", "Uint64")),
    "SubsegmentOffsets": (_scalar("segment_index", "Uint32"), _scalars("offsets", "Uint64")),
    "NamedData": (_string("key"), _scalar("segment_index", "Uint32")),
    "Program": (
        _scalar("version", "Uint32"),
        _tables("execution_plan", "ExecutionPlan"),
        _tables("constant_buffer", "Buffer"),
        _tables("backend_delegate_data", "BackendDelegateInlineData"),
        _tables("segments", "DataSegment"),
        _table("constant_segment", "SubsegmentOffsets"),
        _tables("mutable_data_segments", "SubsegmentOffsets"),
        _tables("named_data", "NamedData"),
    ),
}
UNIONS: dict[str, tuple[str, ...]] = {
    "KernelTypes": (
        "Null",
        "Int",
        "Bool",
        "Double",
        "Tensor",
        "String",
        "IntList",
        "DoubleList",
        "BoolList",
        "TensorList",
        "OptionalTensorList",
    ),
    "InstructionArguments": ("KernelCall", "DelegateCall", "MoveCall", "JumpFalseCall", "FreeCall"),
}
ROOT = "Program"
# Mirrors schema/flat_tensor.fbs, the .ptd data file's FlatBuffer, whose tables are walked the same way
FLAT_TENSOR_TABLES: dict[str, tuple[Field, ...]] = {
    "TensorLayout": (_scalar("scalar_type", "Int8"), _scalars("sizes", "Int32"), _scalars("dim_order", "Uint8")),
    "DataSegment": (_scalar("offset", "Uint64"), _scalar("size", "Uint64")),
    "NamedData": (_string("key"), _scalar("segment_index", "Uint32"), _table("tensor_layout", "TensorLayout")),
    "FlatTensor": (
        _scalar("version", "Uint32"),
        _tables("segments", "DataSegment"),
        _tables("named_data", "NamedData"),
    ),
}
FLAT_TENSOR_ROOT = "FlatTensor"
# The schema is not recursive, so real nesting stops at depth 4; the bound guards edits to it.
_MAX_DEPTH = 32
# ExecuTorch's runtime verifies a program with FlatBuffers' C++ Verifier at its default
# options (runtime/executor/program.cpp), which refuse a buffer of more tables than this
# (flatbuffers::Verifier::Options::max_tables), each element of a vector of tables counted,
# even when elements share one: a method of a million values (two tables each) does not load
MAX_TABLES = 1_000_000
_DAMAGED = "the file is damaged or not a .pte"

_u16: Callable[[bytes, int], tuple[int]] = struct.Struct("<H").unpack_from
_u16_pair: Callable[[bytes, int], tuple[int, int]] = struct.Struct("<HH").unpack_from
_u32: Callable[[bytes, int], tuple[int]] = struct.Struct("<I").unpack_from
_i32: Callable[[bytes, int], tuple[int]] = struct.Struct("<i").unpack_from
Slot = tuple[int, int, str, str, int]  # (vtable entry offset, kind, detail, name, bytes inside the table)
# a path through the file's tables, kept as nested (parent, label) pairs: rendered only to refuse
TablePath = Any


def _slots(fields: tuple[Field, ...]) -> tuple[Slot, ...]:
    """(vtable entry offset, kind, detail, name, bytes the field takes inside its table)."""
    compiled, slot = [], 0
    for name, kind, detail in fields:
        inline = WIDTHS[detail] if kind == _SCALAR else 1 if kind == _UNION else 4
        compiled.append((4 + 2 * slot, kind, detail, name, inline))
        slot += 2 if kind == _UNION else 1
    return tuple(compiled)


def vtable_entry(fields: tuple[Field, ...], name: str) -> int:
    """Where in its table's vtable field `name` of `fields` (one table's schema above) is found."""
    return next(entry for entry, _, _, field, _ in _slots(fields) if field == name)


_COMPILED = {name: _slots(fields) for name, fields in TABLES.items()}
_FLAT_TENSOR_COMPILED = {name: _slots(fields) for name, fields in FLAT_TENSOR_TABLES.items()}


def _where(path: TablePath) -> str:
    """Render a path kept as nested (parent, label) pairs; built only when reporting."""
    parts = []
    while path is not None:
        path, label = path
        parts.append(f"[{label}]" if isinstance(label, int) else f".{label}")
    return "".join(reversed(parts)).lstrip(".") or "root table"


class _Walker:
    def __init__(
        self,
        data: bytes,
        end: int,
        name: str,
        whole_file: bool,
        compiled: dict[str, tuple[Slot, ...]] = _COMPILED,
        damaged: str = _DAMAGED,
        unions: dict[str, tuple[str, ...]] = UNIONS,
    ) -> None:
        self.data = data
        self.compiled, self.damaged, self.unions = compiled, damaged, unions
        self.end = end
        self.name = name
        self.limit = "the file ends" if whole_file else "the program data (per the extended header) ends"
        # Every object a well-formed file holds owns at least 4 bytes (its length or its
        # vtable offset), so more visits than that means offsets shared or crossed on purpose.
        self.budget = end // 4
        self.tables = 0  # tables verified so far, as FlatBuffers' verifier counts them

    def corrupt(self, path: TablePath, what: str) -> NoReturn:
        raise DevplanError(f"{self.name}: corrupt: {_where(path)}: {what}; {self.damaged}")

    def truncated(self, path: TablePath, what: str) -> NoReturn:
        raise DevplanError(
            f"{self.name}: truncated: {_where(path)}: {what} but {self.limit} at byte {self.end}; {self.damaged}"
        )

    def follow(self, at: int, path: TablePath) -> int:
        """Target of the uoffset stored at byte `at` (which the caller has bounds-checked)."""
        (offset,) = _u32(self.data, at)
        target = at + offset
        if offset == 0:
            self.corrupt(path, f"offset at byte {at} is zero")
        if target + 4 > self.end:
            self.truncated(path, f"offset at byte {at} points to byte {target}")
        if target % 4:
            self.corrupt(path, f"offset at byte {at} points to misaligned byte {target}")
        self.budget -= 1
        if self.budget < 0:
            self.corrupt(path, f"offsets lead to more objects than {self.end} bytes can hold")
        return target

    def vector(self, pos: int, width: int, path: TablePath) -> int:
        (count,) = _u32(self.data, pos)
        if pos + 4 + count * width > self.end:
            self.truncated(path, f"vector at byte {pos} claims {count} elements of {width} bytes")
        return count

    def string(self, pos: int, path: TablePath) -> None:
        (length,) = _u32(self.data, pos)
        if pos + 5 + length > self.end:
            self.truncated(path, f"string at byte {pos} claims {length} bytes")
        if self.data[pos + 4 + length] != 0:
            self.corrupt(path, f"string at byte {pos} is not NUL-terminated")

    def table(self, pos: int, table: str, path: TablePath, depth: int) -> None:
        data, end = self.data, self.end
        if depth > _MAX_DEPTH:
            self.corrupt(path, f"tables nest deeper than {_MAX_DEPTH}")
        self.count_tables(1, path)
        vtable = pos - _i32(data, pos)[0]
        if vtable < 0 or vtable % 2:
            self.corrupt(path, f"{table} table at byte {pos} has its vtable at byte {vtable}")
        if vtable + 4 > end:
            self.truncated(path, f"{table} table at byte {pos} has its vtable at byte {vtable}")
        vtable_size, table_size = _u16_pair(data, vtable)
        if vtable_size < 4 or vtable_size % 2 or table_size < 4:
            self.corrupt(path, f"vtable at byte {vtable} claims sizes {vtable_size} and {table_size}")
        if vtable + vtable_size > end:
            self.truncated(path, f"vtable at byte {vtable} claims {vtable_size} bytes")
        if pos + table_size > end:
            self.truncated(path, f"{table} table at byte {pos} claims {table_size} bytes")
        for entry, kind, detail, name, inline in self.compiled[table]:
            if entry >= vtable_size:
                break
            field_path = (path, name)
            at = self.field(pos, vtable, vtable_size, table_size, entry, inline, field_path)
            if at is None or kind == _SCALAR:
                continue
            if kind == _UNION:
                value = self.field(pos, vtable, vtable_size, table_size, entry + 2, 4, field_path)
                self.union(data[at], detail, value, path, name, depth)
                continue
            target = self.follow(at, field_path)
            if kind == _STRING:
                self.string(target, field_path)
            elif kind == _TABLE:
                self.table(target, detail, field_path, depth + 1)
            elif kind == _SCALARS:
                self.vector(target, WIDTHS[detail], field_path)
            else:
                count = self.vector(target, 4, field_path)
                self.count_tables(count, field_path)  # before walking them: a million takes a minute
                self.tables -= count  # each is counted again as it is walked
                for index in range(count):
                    element = (field_path, index)
                    self.table(self.follow(target + 4 + 4 * index, element), detail, element, depth + 1)

    def count_tables(self, count: int, path: TablePath) -> None:
        """Count `count` more tables, refusing more than ExecuTorch's runtime verifies."""
        self.tables += count
        if self.tables > MAX_TABLES:
            raise DevplanError(
                f"{self.name}: {_where(path)}: more than {MAX_TABLES} tables, which ExecuTorch's "
                f"runtime refuses to load (its FlatBuffers verifier's limit); a method holds too "
                f"many values, outputs or instructions, or {self.damaged}"
            )

    def field(
        self, pos: int, vtable: int, vtable_size: int, table_size: int, entry: int, inline: int, path: TablePath
    ) -> int | None:
        """Byte where the field in vtable entry `entry` starts, or None when it is absent."""
        if entry >= vtable_size:
            return None
        (offset,) = _u16(self.data, vtable + entry)
        if offset == 0:
            return None
        if offset + inline > table_size:
            self.corrupt(path, f"field at byte {pos + offset} runs past its {table_size}-byte table at byte {pos}")
        if (pos + offset) % inline:  # FlatBuffers' own verifier (ExecuTorch's runtime) refuses it too
            self.corrupt(path, f"{inline}-byte field at byte {pos + offset} is misaligned")
        return pos + offset

    def union(self, tag: int, union: str, value: int | None, path: TablePath, name: str, depth: int) -> None:
        members = self.unions[union]
        if tag > len(members):
            self.corrupt((path, name), f"{union} tag {tag} is not one of 0..{len(members)}")
        if tag == 0 or value is None:
            return
        member = members[tag - 1]
        member_path = (path, f"{name}({member})")
        self.table(self.follow(value, member_path), member, member_path, depth + 1)


def verify_program(data: bytes, start: int, end: int, name: str, file_size: int | None = None) -> None:
    """Check the FlatBuffer in data[:end] whose root table must lie at or after byte `start`
    (past the identifier and any extended header), in a file of `file_size` bytes (default
    len(data)). Raises DevplanError naming `name`."""
    walker = _Walker(data, end, name, whole_file=end == (len(data) if file_size is None else file_size))
    root = walker.follow(0, None)
    if root < start:
        walker.corrupt(None, f"root offset points to byte {root}, inside the file header")
    walker.table(root, ROOT, None, 0)


def verify_flat_tensor(data: bytes, start: int, name: str, damaged: str) -> None:
    """Check a .ptd's FlatBuffer (all of `data`), its root table at or after byte `start`."""
    walker = _Walker(data, len(data), name, whole_file=False, compiled=_FLAT_TENSOR_COMPILED, damaged=damaged)
    root = walker.follow(0, None)
    if root < start:
        walker.corrupt(None, f"root offset points to byte {root}, inside the file header")
    walker.table(root, FLAT_TENSOR_ROOT, None, 0)
