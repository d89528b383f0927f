"""Unpacking a checked ET12 FlatBuffer into the object API's classes (ProgramT and the rest).

The generated `ProgramT.InitFromPackedBuf` reads every field through an accessor object and a
Table per field, and took most of the time `devplan inspect` spent on a large program. This
makes the same objects, field for field (numbers as the bindings read them, strings as bytes,
vectors of numbers as numpy arrays viewing the buffer), by walking the buffer with the
verifier's schema. It trusts what `verify_program` has checked and reads nothing else."""

from __future__ import annotations

import functools
import importlib
import struct
from typing import Any

import numpy as np  # the bindings import it too; their vectors of numbers are numpy arrays

from devplan.pte.fb.Program import ProgramT
from devplan.pte.verify import _SCALAR, _SCALARS, _STRING, _TABLE, _UNION, ROOT, TABLES, UNIONS

_FORMATS = {
    "Bool": "?",
    "Int8": "b",
    "Uint8": "B",
    "Int16": "h",
    "Uint16": "H",
    "Int32": "i",
    "Uint32": "I",
    "Float32": "f",
    "Int64": "q",
    "Uint64": "Q",
    "Float64": "d",
}
# only inspect shows stacktraces, and they repeat: PteFile.stacktrace reads them from the bytes
_LEFT_PACKED = {("Chain", "stacktrace")}

_u16 = struct.Struct("<H").unpack_from
_u32 = struct.Struct("<I").unpack_from
_i32 = struct.Struct("<i").unpack_from


def _attribute(name: str) -> str:
    """The object API's attribute for a schema field: execution_plan -> executionPlan."""
    first, *rest = name.split("_")
    return first + "".join(part.capitalize() for part in rest)


def _binding(table: str) -> type:
    found: type = getattr(importlib.import_module(f"devplan.pte.fb.{table}"), f"{table}T")
    return found


class _Layout:
    """One table's class, its fresh attributes, and its fields as (vtable entry, attribute,
    kind, how to read it), in slot order."""

    def __init__(self, table: str) -> None:
        self.cls = _binding(table)
        self.defaults = dict(vars(self.cls()))
        fields: list[tuple[int, str, int, Any]] = []
        slot = 0
        for name, kind, detail in TABLES[table]:
            entry = 4 + 2 * slot
            slot += 2 if kind == _UNION else 1
            if (table, name) in _LEFT_PACKED:
                continue
            read: Any = detail
            if kind == _SCALAR:
                read = struct.Struct("<" + _FORMATS[detail]).unpack_from
            elif kind == _SCALARS:
                read = np.dtype(detail.lower()).newbyteorder("<")
            fields.append((entry, _attribute(name), kind, read))
        self.fields = tuple(fields)


@functools.cache
def _layouts() -> dict[str, _Layout]:
    return {table: _Layout(table) for table in TABLES}


class _Unpacker:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.layouts = _layouts()

    def table(self, pos: int, table: str) -> Any:
        data, layout = self.data, self.layouts[table]
        vtable = pos - _i32(data, pos)[0]
        (vtable_size,) = _u16(data, vtable)
        values = dict(layout.defaults)
        for entry, attribute, kind, read in layout.fields:
            if entry >= vtable_size:
                break
            (offset,) = _u16(data, vtable + entry)
            if kind == _UNION:
                tag = data[pos + offset] if offset else 0
                values[attribute + "Type"] = tag
                values[attribute] = self.member(pos, vtable, vtable_size, entry + 2, tag, read)
                continue
            if not offset:
                continue
            at = pos + offset
            if kind == _SCALAR:
                values[attribute] = read(data, at)[0]
                continue
            target = at + _u32(data, at)[0]
            (count,) = _u32(data, target)
            if kind == _STRING:
                values[attribute] = data[target + 4 : target + 4 + count]
            elif kind == _TABLE:
                values[attribute] = self.table(target, read)
            elif kind == _SCALARS:
                values[attribute] = np.frombuffer(data, dtype=read, count=count, offset=target + 4)
            else:
                values[attribute] = [
                    self.table(at + _u32(data, at)[0], read) for at in range(target + 4, target + 4 + 4 * count, 4)
                ]
        made: Any = object.__new__(layout.cls)  # the bindings' class: its fields are set from the bytes
        made.__dict__.update(values)
        return made

    def member(self, pos: int, vtable: int, vtable_size: int, entry: int, tag: int, union: str) -> Any:
        """A union's value: None for tag 0, a tag the union lacks, or no value, as the bindings."""
        members = UNIONS[union]
        if not 0 < tag <= len(members) or entry >= vtable_size:
            return None
        (offset,) = _u16(self.data, vtable + entry)
        if not offset:
            return None
        at = pos + offset
        return self.table(at + _u32(self.data, at)[0], members[tag - 1])


def unpack_program(data: bytes) -> ProgramT:
    """The program in `data`, which verify_program has checked, as ProgramT.InitFromPackedBuf
    makes it, every chain's stacktrace left None (PteFile.stacktrace reads them)."""
    program: ProgramT = _Unpacker(data).table(_u32(data, 0)[0], ROOT)
    return program
