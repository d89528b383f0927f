"""dumps_pte's layout, write_atomic's guarantees and PteFile's accessors on hand-built programs."""

from __future__ import annotations

import os
import struct

import pytest

from devplan.errors import DevplanError
from devplan.pte import ExtendedHeader, dumps_pte, read_pte, write_atomic, write_pte
from devplan.pte.fb.BackendDelegate import BackendDelegateT
from devplan.pte.fb.BackendDelegateDataReference import BackendDelegateDataReferenceT
from devplan.pte.fb.BackendDelegateInlineData import BackendDelegateInlineDataT
from devplan.pte.fb.Buffer import BufferT
from devplan.pte.fb.DataLocation import DataLocation
from devplan.pte.fb.DataSegment import DataSegmentT
from devplan.pte.fb.EValue import EValueT
from devplan.pte.fb.ExecutionPlan import ExecutionPlanT
from devplan.pte.fb.KernelTypes import KernelTypes
from devplan.pte.fb.Program import Program, ProgramT
from devplan.pte.fb.Tensor import TensorT
from testbed.cli import devplan as devplan_cli

SEGMENTS = (b"first segment", b"", b"x" * 300)


def make_program(segment_entries: int = 0, segment_delegate: bool = True) -> ProgramT:
    """One plan, inline constants of awkward sizes and a delegate of each payload kind (the
    segment one reads SEGMENTS[2])."""
    tensor = TensorT(scalarType=6, sizes=[2, 3], dimOrder=[0, 1], dataBufferIdx=1)
    delegates = [
        BackendDelegateT(
            id="InlineBackend", processed=BackendDelegateDataReferenceT(location=DataLocation.INLINE, index=1)
        ),
        BackendDelegateT(
            id="SegmentBackend", processed=BackendDelegateDataReferenceT(location=DataLocation.SEGMENT, index=2)
        ),
    ][: 2 if segment_delegate else 1]
    plan = ExecutionPlanT(
        name="forward",
        values=[EValueT(valType=KernelTypes.Tensor, val=tensor)],
        inputs=[0],
        outputs=[0],
        delegates=delegates,
    )
    return ProgramT(
        executionPlan=[plan],
        constantBuffer=[BufferT(storage=[]), BufferT(storage=list(range(24))), BufferT(storage=[7] * 5)],
        backendDelegateData=[
            BackendDelegateInlineDataT(data=b"abc"),
            BackendDelegateInlineDataT(data=b"inline payload"),
        ],
        segments=[DataSegmentT(offset=999, size=1) for _ in range(segment_entries)] or None,
    )


def test_layout_with_segments():
    alignment = 64
    data = dumps_pte(make_program(), SEGMENTS, segment_alignment=alignment)
    assert data[4:8] == b"ET12"
    magic, length, program_size, base, data_size = struct.unpack_from("<4sIQQQ", data, 8)
    assert (magic, length) == (b"eh00", 32)
    assert base == -(-program_size // alignment) * alignment
    assert len(data) == base + data_size
    assert data[program_size:base] == bytes(base - program_size)
    entries = Program.GetRootAs(data, 0)
    end = 0
    for index, segment in enumerate(SEGMENTS):
        entry = entries.Segments(index)
        assert entry.Offset() % alignment == 0 and entry.Size() == len(segment)
        assert data[base + end : base + entry.Offset()] == bytes(entry.Offset() - end)  # zero padding
        assert data[base + entry.Offset() : base + entry.Offset() + entry.Size()] == segment
        end = entry.Offset() + entry.Size()
    assert end == data_size


def test_header_insertion_shifts_the_flatbuffer_by_its_length():
    data = dumps_pte(make_program(), SEGMENTS)
    program_size = struct.unpack_from("<Q", data, 16)[0]
    # Remove the header and pull the root offset back: the plain FlatBuffer must remain.
    root = struct.unpack_from("<I", data, 0)[0]
    plain = struct.pack("<I", root - 32) + data[4:8] + data[40:program_size]
    assert Program.GetRootAs(plain, 0).SegmentsLength() == len(SEGMENTS)
    assert Program.GetRootAs(plain, 0).ExecutionPlan(0).Name() == b"forward"


def test_without_segment_bytes_there_is_no_header():
    data = dumps_pte(make_program(segment_delegate=False))
    assert data[8:12] != b"eh00"
    pte = read_pte(data)
    assert pte.header is None and pte.segments == () and pte.size == len(data)
    empty = read_pte(dumps_pte(make_program(segment_delegate=False), [b"", b""]))
    assert empty.header is None and empty.segments == (b"", b"")


def test_output_is_deterministic_and_reads_back():
    first = dumps_pte(make_program(), SEGMENTS)
    assert dumps_pte(make_program(), SEGMENTS) == first
    pte = read_pte(first)
    assert pte.segments == SEGMENTS
    assert dumps_pte(pte.program, pte.segments) == first


def test_does_not_mutate_the_program():
    program = make_program(segment_entries=len(SEGMENTS))
    constants, blobs = program.constantBuffer, program.backendDelegateData
    dumps_pte(program, SEGMENTS)
    assert [(s.offset, s.size) for s in program.segments] == [(999, 1)] * len(SEGMENTS)
    assert program.constantBuffer is constants and program.backendDelegateData is blobs
    assert type(constants[0]) is BufferT and constants[1].storage == list(range(24))
    assert make_program().segments is None


def test_segment_entries_must_match_segment_data():
    with pytest.raises(DevplanError, match="lists 2 data segments but 3 were given"):
        dumps_pte(make_program(segment_entries=2), SEGMENTS)


@pytest.mark.parametrize("alignment", [0, 3, 96, -128])
def test_segment_alignment_must_be_a_power_of_two(alignment):
    with pytest.raises(DevplanError, match="not a power of two"):
        dumps_pte(make_program(), SEGMENTS, segment_alignment=alignment)


@pytest.mark.parametrize("segments", [(), SEGMENTS])
def test_inline_blobs_are_16_byte_aligned(segments):
    # The schema's force_align: 16, which the generated Python packing ignores.
    data = dumps_pte(make_program(segment_delegate=bool(segments)), segments)
    root = Program.GetRootAs(data, 0)
    starts = [root.ConstantBuffer(i)._tab.Vector(4) for i in range(root.ConstantBufferLength())]
    starts += [root.BackendDelegateData(i)._tab.Vector(4) for i in range(root.BackendDelegateDataLength())]
    assert len(starts) == 5 and all(start % 16 == 0 for start in starts)


def test_constant_data_from_the_constant_buffer():
    pte = read_pte(dumps_pte(make_program(segment_delegate=False)))
    assert pte.constant_data(0) is None
    assert pte.constant_data(1) == bytes(range(24))
    assert pte.constant_data(2) == b"\x07" * 5
    assert pte.constant_data(3) is None


def test_delegate_payloads_inline_and_in_segments():
    pte = read_pte(dumps_pte(make_program(), SEGMENTS), name="d.pte")
    assert pte.delegate_payload(0, 0) == b"inline payload"
    assert pte.delegate_payload(0, 1) == SEGMENTS[2]
    with pytest.raises(DevplanError, match=r"^d\.pte: execution_plan\[0\]\.delegates\[2\]: no such delegate"):
        pte.delegate_payload(0, 2)
    with pytest.raises(DevplanError, match=r"^d\.pte: no execution plan 1"):
        pte.delegate_payload(1, 0)


def test_dangling_delegate_reference_is_rejected_on_read():
    program = make_program()
    program.executionPlan[0].delegates[0].processed.index = 5
    with pytest.raises(DevplanError, match="payload is inline blob 5 but the program has 2"):
        read_pte(dumps_pte(program, SEGMENTS), name="d.pte")
    with pytest.raises(DevplanError, match="payload is segment 2 but the program has 0"):
        read_pte(dumps_pte(make_program()), name="d.pte")


def test_extended_header_bytes():
    header = ExtendedHeader(program_size=1000, segment_base_offset=1024, segment_data_size=77)
    assert header.to_bytes() == b"eh00" + struct.pack("<IQQQ", 32, 1000, 1024, 77)


def test_write_pte_then_read(tmp_path):
    path = tmp_path / "out.pte"
    write_pte(path, make_program(), SEGMENTS)
    assert path.read_bytes() == dumps_pte(make_program(), SEGMENTS)
    assert read_pte(path).segments == SEGMENTS


def test_write_atomic_replaces_and_keeps_permissions(tmp_path):
    path = tmp_path / "file.bin"
    path.write_bytes(b"old")
    os.chmod(path, 0o640)
    write_atomic(path, b"new")
    assert path.read_bytes() == b"new"
    assert os.stat(path).st_mode & 0o777 == 0o640
    assert sorted(os.listdir(tmp_path)) == ["file.bin"]


@pytest.mark.parametrize("failing", ["fsync", "replace"])
def test_write_atomic_failure_leaves_old_file_and_no_debris(tmp_path, monkeypatch, failing):
    path = tmp_path / "file.bin"
    path.write_bytes(b"old")

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, failing, fail)
    with pytest.raises(DevplanError, match=r"file\.bin: cannot write \(No space left on device\)"):
        write_atomic(path, b"new")
    monkeypatch.undo()
    assert path.read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["file.bin"]


def test_write_atomic_failure_creates_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "replace", lambda *args: (_ for _ in ()).throw(OSError(5, "Input/output error")))
    with pytest.raises(DevplanError):
        write_atomic(tmp_path / "new.bin", b"data")
    monkeypatch.undo()
    assert os.listdir(tmp_path) == []


def test_write_atomic_into_missing_directory(tmp_path):
    with pytest.raises(DevplanError, match="cannot write"):
        write_atomic(tmp_path / "missing" / "file.bin", b"data")


def test_write_atomic_onto_a_directory(tmp_path):
    (tmp_path / "taken").mkdir()
    with pytest.raises(DevplanError, match="taken: is a directory"):
        write_atomic(tmp_path / "taken", b"data")
    assert (tmp_path / "taken").is_dir() and os.listdir(tmp_path) == ["taken"]


@pytest.mark.sweep  # end to end through fresh processes; the full suite runs it
def test_sigterm_mid_write_leaves_no_temporary_and_a_stale_one_is_removed(tmp_path):
    """`devplan compile` killed with SIGTERM while it writes removes its temporary file; one a
    SIGKILL left behind (its writer's pid no longer runs) goes with the next write."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "mlp.pte"
    slow = (
        "import os, sys, time; os.fsync = lambda fd: time.sleep(60); from devplan.cli import main; "
        f"sys.argv = ['devplan', 'compile', {str(root / 'samples' / 'mlp.pt2')!r}, '-o', {str(out)!r}]; main()"
    )
    child = subprocess.Popen([sys.executable, "-c", slow], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".mlp.pte.*.tmp")) and time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.05)
    assert list(tmp_path.glob(".mlp.pte.*.tmp")), child.stderr.read() if child.poll() is not None else "no temp file"
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=60) == 128 + signal.SIGTERM
    assert not list(tmp_path.glob(".mlp.pte.*")) and not out.exists()

    stale = tmp_path / ".mlp.pte.999999999.abc123.tmp"  # no process has this pid
    stale.write_bytes(b"half a program")
    run = devplan_cli("compile", root / "samples" / "mlp.pt2", "-o", out)
    assert run.returncode == 0, run.stderr
    assert not stale.exists() and out.exists()
