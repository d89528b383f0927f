"""An XNNPACK payload refused before ExecuTorch reads past it or aborts on it: a weight (in the
.ptd or the program's named data) holding fewer bytes than its graph reads, a graph devplan
finds damaged, and a magic or identifier that is not UTF-8."""

from __future__ import annotations

from pathlib import Path

import pytest

from devplan.errors import DevplanError
from tests.inspection.runner import invoke, one_line


@pytest.mark.parametrize("cut", ["short", "empty"])
def test_an_xnnpack_weight_cut_short_in_the_ptd_is_refused(cut, tmp_path):
    """ExecuTorch's XNNPACK backend read past such a weight (all NaN or zeros under --executorch)."""
    pytest.importorskip("executorch.backends.xnnpack")
    import devplan
    from devplan.pte import read_pte
    from devplan.pte.ptd import ptd_image, read_ptd
    from tests.compile.test_external_constants import _block

    ep, _ = _block()
    pte, ptd = tmp_path / "x.pte", tmp_path / "x.ptd"
    devplan.compile(ep, pte, backends=["xnnpack"], external_constants=ptd)
    data = read_ptd(ptd)
    entries = list(data.entries.values())
    victim = max(entries, key=lambda entry: len(data.segments[entry.segment]))  # the 8x8 weight: 256 bytes
    segments = [bytes(segment) for segment in data.segments]
    segments[victim.segment] = segments[victim.segment][:-4] if cut == "short" else b""
    damaged = tmp_path / "cut.ptd"
    damaged.write_bytes(bytes(ptd_image(entries, segments)))
    held = len(segments[victim.segment])
    with pytest.raises(
        DevplanError,
        match=rf"^{damaged}: key {victim.key!r} holds {held} bytes but method forward: "
        rf"delegate 0 \(XnnpackBackend\) reads 256",
    ):
        read_pte(pte, data=damaged)
    for command in ("check", "run"):
        one_line(
            invoke(command, str(pte), "--data", str(damaged), *(["--executorch"] if command == "run" else [])),
            str(damaged),
            victim.key,
            "reads 256",
        )
    read_pte(pte, data=ptd)  # the whole .ptd still reads


def test_an_xnnpack_weight_cut_short_in_the_program_is_refused(tmp_path):
    pytest.importorskip("executorch.backends.xnnpack")
    import devplan
    from devplan.pte import read_pte
    from devplan.pte.writer import dumps_pte
    from tests.compile.test_external_constants import _block

    pte = read_pte(devplan.compile(_block()[0], backends=["xnnpack"]).data)
    named = max(pte.program.namedData, key=lambda entry: len(pte.segments[entry.segmentIndex]))
    segments = [bytes(segment) for segment in pte.segments]
    segments[named.segmentIndex] = segments[named.segmentIndex][:-8]
    cut = tmp_path / "cut.pte"
    cut.write_bytes(dumps_pte(pte.program, segments))
    one_line(invoke("inspect", str(cut)), str(cut), f"named data {named.key.decode()!r} holds 248 bytes", "reads 256")


def _xnnpack_damaged(tmp_path: Path, damage) -> tuple[Path, Path]:
    """testbed's XNNPACK program and its .ptd, written after damage(program, payload's start)
    changes the program's bytes."""
    from devplan.pte import read_pte
    from testbed.small_programs import with_data_file

    pytest.importorskip("executorch.backends.xnnpack")
    program, data = with_data_file(backends=["xnnpack"])
    damaged = bytearray(program)
    damage(damaged, program.index(bytes(read_pte(program).delegate_payload(0, 0))))
    pte, ptd = tmp_path / "damaged.pte", tmp_path / "damaged.ptd"
    pte.write_bytes(bytes(damaged))
    ptd.write_bytes(data)
    return pte, ptd


def _refused_before_executorch_aborts(pte: Path, ptd: Path, needle: str) -> None:
    """`check` and `run --executorch` (a process of its own: ExecuTorch aborted it) refuse in one
    line naming the delegate."""
    from testbed.cli import assert_one_line_error, devplan

    one_line(invoke("check", str(pte), "--data", str(ptd)), str(pte), "delegate 0 (XnnpackBackend)", needle)
    assert_one_line_error(devplan("run", pte, "--data", ptd, "--executorch"), "delegate 0 (XnnpackBackend)", needle)


def test_an_xnnpack_graph_devplan_finds_damaged_is_refused_before_executorch_aborts_on_it(tmp_path):
    """Found by the fuzz run's XNNPACK mode: the graph's root table claiming 24 KB of an 888-byte
    graph and a key with a byte that is not UTF-8 passed `check`, and `run --executorch` died
    (SIGABRT, exit 134, no message): ExecuTorch's XNNPACK compiler logs the bytes it reads, and
    its Python binding aborts on a log line that is not UTF-8."""
    import struct

    from devplan.pte.xnnpack import named_keys

    def damage(program: bytearray, payload: int) -> None:
        graph = payload + struct.unpack_from("<I", program, payload + 10)[0]
        key = named_keys(bytes(program[payload:]))[0].encode()
        root = graph + struct.unpack_from("<I", program, graph)[0]
        vtable = root - struct.unpack_from("<i", program, root)[0]
        struct.pack_into("<H", program, vtable + 2, 0x5F00)  # the root table's size: 24 KB
        program[program.index(key, graph) + 9] = 0x86

    _refused_before_executorch_aborts(*_xnnpack_damaged(tmp_path, damage), "the XNNPACK payload is damaged")


@pytest.mark.parametrize("at, needle", [(4, "b'\\xbbH00'"), (32 + 4, "identifier is b'\\xbbN01'")])
def test_an_xnnpack_magic_that_is_not_utf8_is_refused_before_executorch_aborts_on_it(at, needle, tmp_path):
    """Found by the second and third fuzz runs: one byte of the payload's XH00 magic, or of its
    graph's XN01 identifier (the graph starts at byte 32), made 0xBB passed `check`, and
    ExecuTorch's XNNPACK backend logs those bytes as the graph's identifier and aborts the
    process on them."""

    def damage(program: bytearray, payload: int) -> None:
        program[payload + at] = 0xBB

    _refused_before_executorch_aborts(*_xnnpack_damaged(tmp_path, damage), needle)
