"""ExecuTorch's ETDump read back (schema/etdump.fbs), without executorch: what its runtime
timed as it ran a program (`devplan run --executorch --etdump`), for `inspect --etdump`. The
file is checked whole as a program is (verify.py's walker over the schema below) before the
generated bindings (devplan/pte/etdump_fb) read any of it; a damaged one is refused in one line."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any

from devplan.errors import DevplanError
from devplan.files import read_input
from devplan.pte.verify import Field, _scalar, _scalars, _slots, _string, _table, _tables, _Walker

IDENTIFIER = b"ED00"
# an ETDump holds an event per instruction and run; 1 GiB is some ten million of them
MAX_BYTES = 1 << 30
_HINT = "pass the ETDump that devplan run --executorch --etdump FILE wrote"
DAMAGED = "the ETDump is damaged; write it again with devplan run --executorch --etdump"

# Mirrors schema/etdump.fbs as verify.TABLES mirrors program.fbs (tests/pte checks it against the bindings)
ETDUMP_TABLES: dict[str, tuple[Field, ...]] = {
    "Null": (),
    "Tensor": (
        _scalar("scalar_type", "Int8"),
        _scalars("sizes", "Int64"),
        _scalars("strides", "Int64"),
        _scalar("offset", "Int64"),
    ),
    "Int": (_scalar("int_val", "Int64"),),
    "Bool": (_scalar("bool_val", "Bool"),),
    "Float": (_scalar("float_val", "Float32"),),
    "Double": (_scalar("double_val", "Float64"),),
    "String": (_string("string_val"),),
    "TensorList": (_tables("tensors", "Tensor"),),
    "Value": (
        _scalar("val", "Int8"),
        _table("tensor", "Tensor"),
        _table("tensor_list", "TensorList"),
        _table("int_value", "Int"),
        _table("float_value", "Float"),
        _table("double_value", "Double"),
        _table("bool_value", "Bool"),
        _table("output", "Bool"),
    ),
    "DebugEvent": (
        _scalar("chain_index", "Uint64"),
        _scalar("instruction_id", "Int32"),
        _table("debug_entry", "Value"),
        _scalar("delegate_debug_id_int", "Int32"),
        _string("delegate_debug_id_str"),
        _string("name"),
    ),
    "AllocationEvent": (_scalar("allocator_id", "Int32"), _scalar("allocation_size", "Uint64")),
    "ProfileEvent": (
        _string("name"),
        _scalar("chain_index", "Int32"),
        _scalar("instruction_id", "Int32"),
        _scalar("delegate_debug_id_int", "Int32"),
        _string("delegate_debug_id_str"),
        _scalars("delegate_debug_metadata", "Uint8"),
        _scalar("start_time", "Uint64"),
        _scalar("end_time", "Uint64"),
    ),
    "Event": (
        _table("profile_event", "ProfileEvent"),
        _table("allocation_event", "AllocationEvent"),
        _table("debug_event", "DebugEvent"),
    ),
    "Allocator": (_string("name"),),
    "RunData": (
        _string("name"),
        _scalar("bundled_input_index", "Int32"),
        _tables("allocators", "Allocator"),
        _tables("events", "Event"),
    ),
    "ETDump": (_scalar("version", "Uint32"), _tables("run_data", "RunData")),
}
ETDUMP_ROOT = "ETDump"
_COMPILED = {name: _slots(fields) for name, fields in ETDUMP_TABLES.items()}


@dataclass(frozen=True)
class Timed:
    """One profiling event: what the runtime timed, and for how many ticks."""

    name: str  # the operator's, DELEGATE_CALL, OPERATOR_CALL, or the runtime's own (Method::execute)
    instruction: int | None  # the instruction's index; None for the runtime's own events
    delegated: str | None  # an event a backend timed inside its delegate: the backend's name for it
    ticks: int  # end - start, in the runtime's clock (nanoseconds on ExecuTorch's default)


@dataclass(frozen=True)
class Block:
    """A RunData: the events of one block of the trace (ExecuTorch's "Default" holds the
    program's loading, "Execute" the method's runs)."""

    name: str
    events: tuple[Timed, ...]


@dataclass(frozen=True)
class Etdump:
    name: str
    blocks: tuple[Block, ...]


def read_etdump(path: str | os.PathLike[str]) -> Etdump:
    """An ETDump file's profiling events, checked whole first."""
    name = os.fspath(path)
    return parse_etdump(read_input(path, limit=MAX_BYTES, hint=_HINT), name)


def parse_etdump(data: bytes, name: str) -> Etdump:
    # a size-prefixed FlatBuffer: its length, then the root offset and the identifier
    if len(data) < 12 or data[8:12] != IDENTIFIER:
        raise DevplanError(f"{name}: not an ETDump (no {IDENTIFIER.decode()} identifier at byte 8); {_HINT}")
    (size,) = struct.unpack_from("<I", data, 0)
    if size > len(data) - 4:
        raise DevplanError(
            f"{name}: truncated: its size prefix says {size} bytes but {len(data) - 4} follow it; {DAMAGED}"
        )
    # offsets and alignment count from the prefix's first byte, as the writer laid them out
    body = data[: 4 + size]
    walker = _Walker(body, len(body), name, whole_file=True, compiled=_COMPILED, damaged=DAMAGED, unions={})
    walker.table(walker.follow(4, None), ETDUMP_ROOT, None, 0)
    from devplan.pte.etdump_fb.ETDump import ETDump  # the checked bytes, read by the bindings

    root = ETDump.GetRootAs(body, 4)
    return Etdump(name, tuple(_block(root.RunData(i)) for i in range(root.RunDataLength())))


def _block(run: Any) -> Block:  # a RunData of the bindings, read once the bytes are checked
    events = []
    for i in range(run.EventsLength()):
        profile = run.Events(i).ProfileEvent()
        if profile is None:
            continue
        delegated = profile.DelegateDebugIdStr()
        delegate_int = profile.DelegateDebugIdInt()
        events.append(
            Timed(
                _text(profile.Name()),
                profile.InstructionId() if profile.InstructionId() >= 0 else None,
                _text(delegated) if delegated else (str(delegate_int) if delegate_int >= 0 else None),
                max(0, profile.EndTime() - profile.StartTime()),
            )
        )
    return Block(_text(run.Name()), tuple(events))


def _text(raw: bytes | None) -> str:
    return raw.decode("utf-8", "replace") if raw else ""
