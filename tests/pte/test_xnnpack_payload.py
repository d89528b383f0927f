"""The named data keys devplan reads from an XNNPACK payload (devplan/pte/xnnpack.py): the keys
ExecuTorch's runtime hands XnnpackBackend, read from the payload's XNNGraph FlatBuffer, which is
checked first, so that a damaged payload reads as no keys and never as an internal error
(reading the program refuses it in one line: ExecuTorch's runtime aborts on some)."""

from __future__ import annotations

import struct

from devplan.pte import read_pte
from devplan.pte.xnnpack import WorkingMemory, named_keys, working_memory
from testbed.cli import devplan as run_devplan


def _graph_span(payload: bytes) -> range:
    offset, size = struct.unpack_from("<II", payload, 10)
    return range(offset, offset + size)


def test_the_keys_are_the_named_data_of_the_program(xnnpack_pte):
    pte = read_pte(xnnpack_pte)
    keys = named_keys(pte.delegate_payload(0, 0))
    assert keys and sorted(keys) == sorted(entry.key.decode() for entry in pte.program.namedData)
    assert named_keys(b"") == named_keys(b"\0" * 64) == ()  # no XNNPACK header: no keys


def test_every_damaged_byte_of_the_graph_reads_as_keys_or_none(xnnpack_pte):
    """Found by the final fuzz run: 276 mutants of ExecuTorch's XNNPACK program whose graph
    offsets the flatbuffers runtime read as negative numbers (exit 3 in inspect and check)."""
    payload = bytes(read_pte(xnnpack_pte).delegate_payload(0, 0))
    for position in _graph_span(payload):
        for value in (0x00, 0x80, 0xFF):
            damaged = bytearray(payload)
            damaged[position] = value
            keys = named_keys(bytes(damaged))
            assert isinstance(keys, tuple) and all(isinstance(key, str) for key in keys)
            assert working_memory(bytes(damaged)) is None or isinstance(working_memory(bytes(damaged)), WorkingMemory)


def test_a_program_with_a_damaged_graph_is_inspected_or_refused_in_one_line(xnnpack_pte, tmp_path):
    pte = read_pte(xnnpack_pte)
    payload = bytes(pte.delegate_payload(0, 0))
    start = bytes(xnnpack_pte).index(payload) + _graph_span(payload).start
    damaged = bytearray(xnnpack_pte)
    root = struct.unpack_from("<I", damaged, start)[0]
    struct.pack_into("<i", damaged, start + root, root + 64)  # the root table's vtable before the graph
    path = tmp_path / "damaged.pte"
    path.write_bytes(bytes(damaged))
    for command in ("inspect", "check"):
        result = run_devplan(command, path)
        assert result.returncode in (0, 2) and "internal error" not in result.stderr, result.stderr
