"""Damaged or foreign input: always one DevplanError naming the file, and quickly."""

from __future__ import annotations

import random
import struct
import time

import flatbuffers
import pytest

from devplan.errors import DevplanError
from devplan.pte import dumps_pte, read_pte
from devplan.pte.fb.Program import Program
from testbed.damage import flip_bytes

# The one timing bound the issue sets: every rejection within a second.
LIMIT_S = 1.0


def rejection(source, name: str | None = None) -> str:
    start = time.perf_counter()
    try:
        read_pte(source, name)
    except DevplanError as error:
        elapsed = time.perf_counter() - start
        message = str(error)
    else:
        pytest.fail("read_pte accepted bad input")
    assert elapsed < LIMIT_S
    assert "\n" not in message
    return message


def _program_field(data: bytes, vtable_entry: int) -> int:
    """Byte where the root table's field with the given vtable entry is stored."""
    root = Program.GetRootAs(data, 0)
    field = root._tab.Offset(vtable_entry)
    assert field, "the fixture program lacks the field this test corrupts"
    return root._tab.Pos + field


EXECUTION_PLAN = 6  # vtable entry of Program.execution_plan (slot 1)


def test_missing_file(tmp_path):
    path = tmp_path / "absent.pte"
    message = rejection(path)
    assert message.startswith(f"{path}: ") and "no such file" in message


def test_directory(tmp_path):
    message = rejection(tmp_path)
    assert message.startswith(f"{tmp_path}: ") and "directory" in message


def test_empty_file(tmp_path):
    path = tmp_path / "empty.pte"
    path.write_bytes(b"")
    message = rejection(path)
    assert message.startswith(f"{path}: ") and "empty" in message


def test_name_overrides_the_path_and_names_bytes(tmp_path):
    path = tmp_path / "empty.pte"
    path.write_bytes(b"")
    assert rejection(path, name="model.pte").startswith("model.pte: ")
    assert rejection(b"").startswith("<bytes>: ")


@pytest.mark.parametrize("seed", range(6))
def test_random_bytes(seed):
    rng = random.Random(seed)
    data = rng.randbytes(rng.choice([3, 64, 4096]))
    assert rejection(data, "noise.pte").startswith("noise.pte: ")


@pytest.mark.parametrize("seed", range(6))
def test_random_bytes_behind_a_valid_identifier(seed):
    rng = random.Random(seed)
    data = rng.randbytes(4) + b"ET12" + rng.randbytes(rng.choice([8, 200, 4096]))
    assert rejection(data, "noise.pte").startswith("noise.pte: ")


def test_pt2_archive(pt2_path):
    message = rejection(pt2_path)
    assert message.startswith(f"{pt2_path}: not an ET12 program")
    assert ".pt2" in message and "devplan compile" in message


def test_wrong_identifier(affine_pte):
    message = rejection(affine_pte[:4] + b"ET11" + affine_pte[8:], "old.pte")
    assert message.startswith("old.pte: not an ET12 program (file identifier b'ET11')")


@pytest.mark.parametrize("which", ["affine", "plain", "xnnpack"])
def test_truncation_anywhere(executorch_programs, which):
    data = executorch_programs[which]
    for cut in [len(data) * k // 20 for k in range(20)]:
        message = rejection(data[:cut], "cut.pte")
        assert message.startswith("cut.pte: ")
        assert cut == 0 or "truncated" in message


def test_offset_pointing_outside_the_file(plain_pte):
    at = _program_field(plain_pte, EXECUTION_PLAN)
    data = bytearray(plain_pte)
    struct.pack_into("<I", data, at, len(data) * 4)
    message = rejection(bytes(data), "broken.pte")
    assert message.startswith("broken.pte: truncated: execution_plan: offset at byte")
    assert f"but the file ends at byte {len(data)}" in message


def test_vector_longer_than_the_file(plain_pte):
    at = _program_field(plain_pte, EXECUTION_PLAN)
    vector = at + struct.unpack_from("<I", plain_pte, at)[0]
    data = bytearray(plain_pte)
    struct.pack_into("<I", data, vector, 99_999)
    message = rejection(bytes(data), "broken.pte")
    assert f"vector at byte {vector} claims 99999 elements" in message
    assert f"but the file ends at byte {len(data)}" in message


def test_vector_longer_than_the_program_with_header(affine_pte):
    at = _program_field(affine_pte, EXECUTION_PLAN)
    vector = at + struct.unpack_from("<I", affine_pte, at)[0]
    data = bytearray(affine_pte)
    struct.pack_into("<I", data, vector, 1_000_000_000)
    message = rejection(bytes(data), "broken.pte")
    assert "claims 1000000000 elements" in message and "program data" in message


def test_union_tag_out_of_range(plain_pte):
    pte = read_pte(plain_pte)
    plan = pte.program.executionPlan[0]
    plan.values[0].valType = 200
    message = rejection(dumps_pte(pte.program, pte.segments), "tag.pte")
    assert "execution_plan[0].values[0].val: KernelTypes tag 200" in message


@pytest.mark.parametrize(
    "patch, expected",
    [
        ({"length": 8}, "extended header claims a length of 8"),
        ({"program_size": 10**9}, "truncated: the extended header says the program is 1000000000 bytes"),
        ({"segment_base_offset": 64}, "segment base offset 64 lies inside the program"),
        ({"segment_data_size": 10**6}, "claims 1000000 bytes but the file ends"),
    ],
)
def test_inconsistent_extended_header(affine_pte, patch, expected):
    magic, length, program_size, base, size = struct.unpack_from("<4sIQQQ", affine_pte, 8)
    fields = {
        "length": length,
        "program_size": program_size,
        "segment_base_offset": base,
        "segment_data_size": size,
    } | patch
    data = bytearray(affine_pte)
    struct.pack_into("<4sIQQQ", data, 8, magic, *fields.values())
    assert expected in rejection(bytes(data), "header.pte")


def test_segment_outside_the_segment_data(affine_pte):
    data = bytearray(affine_pte)
    # Shrink the recorded segment data so that the last segment no longer fits in it.
    (size,) = struct.unpack_from("<Q", data, 32)
    struct.pack_into("<Q", data, 32, size - 1)
    assert "truncated: segment 0 claims bytes" in rejection(bytes(data), "seg.pte")


def test_constant_offset_outside_its_segment(affine_pte):
    pte = read_pte(affine_pte)
    pte.program.constantSegment.offsets = [0, 10**6]
    message = rejection(dumps_pte(pte.program, pte.segments), "const.pte")
    assert "constant_segment has offset 1000000" in message


def test_segment_bytes_without_a_header(plain_pte):
    pte = read_pte(plain_pte)
    pte.program.segments[0].size = 16
    # Packed by hand: dumps_pte would add the header that this file must lack.
    builder = flatbuffers.Builder(0)
    builder.Finish(pte.program.Pack(builder), file_identifier=b"ET12")
    assert "segment 0 claims 16 bytes but the file has no extended header" in rejection(
        bytes(builder.Output()), "seg.pte"
    )


FUZZ_VARIANTS = 300


@pytest.mark.parametrize("which", ["affine", "plain", "xnnpack"])
def test_byte_flips_never_crash_or_hang(executorch_programs, which):
    data = executorch_programs[which]
    rng = random.Random(1234)
    accepted = rejected = 0
    for _ in range(FUZZ_VARIANTS):
        variant = flip_bytes(data, rng, most=6)
        start = time.perf_counter()
        try:
            pte = read_pte(variant, "fuzz.pte")
        except DevplanError as error:
            assert str(error).startswith("fuzz.pte: ")
            rejected += 1
        else:
            accepted += 1
            # Whatever passed the checks must be safe to use: every constant and payload
            # resolves and the program packs again.
            for plan_index, plan in enumerate(pte.program.executionPlan or []):
                for delegate_index in range(len(plan.delegates or [])):
                    pte.delegate_payload(plan_index, delegate_index)
            dumps_pte(pte.program, pte.segments)
        assert time.perf_counter() - start < LIMIT_S
    assert rejected > 0 and accepted + rejected == FUZZ_VARIANTS


def _delegated() -> bytes:
    from testbed.small_programs import compiled

    return compiled(delegates=["cuda:0"])


def test_delegates_sharing_a_payload_read_it_once():
    """5,000 delegates over one payload: the payload is read once and inspect's document takes
    the time of the delegate entries, not of 5,000 payload programs."""
    import copy

    from devplan.inspection.document import document

    pte = read_pte(_delegated())
    program = copy.deepcopy(pte.program)
    plan = program.executionPlan[0]
    plan.delegates = [copy.deepcopy(plan.delegates[0]) for _ in range(5_000)]
    shared = read_pte(dumps_pte(program, pte.segments), "shared.pte")
    assert shared.delegate_program(0, 0) is shared.delegate_program(0, 4_999)
    start = time.perf_counter()
    delegates = document(shared, "shared.pte")["methods"][0]["delegates"]
    assert time.perf_counter() - start < 10 * LIMIT_S
    assert len(delegates) == 5_000 and delegates[0]["payload_buffers"] == delegates[-1]["payload_buffers"] != []


def test_payloads_nested_past_the_depth_bound_are_refused():
    from devplan.pte.reader import MAX_DELEGATE_DEPTH

    data = _delegated()
    for _ in range(MAX_DELEGATE_DEPTH):  # each level: the program so far as the payload of a delegate
        pte = read_pte(data)
        data = dumps_pte(pte.program, (*pte.segments[:1], data))
    pte = read_pte(data, "nested.pte")
    for _ in range(MAX_DELEGATE_DEPTH):
        pte = pte.delegate_program(0, 0)
    with pytest.raises(
        DevplanError,
        match=f"nested.pte delegate 0 .*delegate 0: a payload nested {MAX_DELEGATE_DEPTH + 1} delegates deep",
    ):
        pte.delegate_program(0, 0)


def test_a_misaligned_field_is_refused_as_executorch_refuses_it(plain_pte):
    """Found by benchmarks/fuzz.py: one byte of the root vtable put Program.version (a uint32)
    at an odd byte, which FlatBuffers' verifier in ExecuTorch's runtime refuses."""
    from executorch.runtime import Runtime

    data = bytearray(plain_pte)
    root = struct.unpack_from("<I", data, 0)[0]
    vtable = root - struct.unpack_from("<i", data, root)[0]
    struct.pack_into("<H", data, vtable + 4, 17)  # field 0, version, at the table's byte 17
    assert "version: 4-byte field at byte" in rejection(bytes(data)) and "misaligned" in rejection(bytes(data))
    with pytest.raises(RuntimeError):
        Runtime.get().load_program(bytes(data))
