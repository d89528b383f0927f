"""An archive costs what it holds, not what its directory claims: members sharing their bytes,
sizes claimed past the archive's end (in the directory, the local header's extra field, zip64
fields, or a record of the sample inputs' own zip), and tensors of more dimensions than
ExecuTorch holds are refused before anything is loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from devplan.errors import DevplanError


def _archive_refusal(path: Path) -> str:
    from devplan.gate.archive import check_archive

    with pytest.raises(DevplanError) as refused:
        check_archive(path)
    message = str(refused.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    return message


def test_archive_members_sharing_their_bytes_are_refused(tmp_path):
    """Forty members pointing at one stored 24 MB entry compiled to a 1.23 GB peak."""
    import zipfile

    from tests.gate.test_hostile_archives import build, member, patch_member

    path = build(tmp_path / "shared.pt2")
    first, second = member("weights/weight_0"), member("weights/weight_1")
    with zipfile.ZipFile(path) as archive:
        target = archive.getinfo(first)
    sizes = target.compress_size.to_bytes(4, "little")
    patch_member(path, second, {}, {42: target.header_offset.to_bytes(4, "little"), 20: sizes, 24: sizes})
    assert "weight_1" in (message := _archive_refusal(path)) and "overlaps" in message and "weight_0" in message


def test_an_archive_member_claiming_more_than_the_archive_holds_is_refused(tmp_path):
    """A sample-inputs member declaring 3 GiB (stored) while holding 2 KB ended in exit 3 (EOFError)."""
    from tests.gate.test_hostile_archives import build, member, patch_member

    path = build(tmp_path / "claims.pt2")
    claim = (3 << 30).to_bytes(4, "little")
    patch_member(path, member("sample_inputs/model.pt"), {18: claim, 22: claim}, {20: claim, 24: claim})
    message = _archive_refusal(path)
    assert "sample_inputs/model.pt" in message and "3221225472" in message


def test_a_tensor_of_more_dimensions_than_executorch_holds_is_refused_before_loading(tmp_path):
    """ExecuTorch's runtime holds tensors of up to 16 dimensions (kTensorDimensionLimit); one
    of 2 million sizes took 151 s and 2.1 GB before anything said so."""
    import time

    from tests.gate.test_hostile_archives import build, edit_json, set_sizes, weight_meta

    wide = build(tmp_path / "wide.pt2", weight_meta(set_sizes([1] * 200_000)))
    started = time.monotonic()
    assert "layers.0.weight" in (message := _archive_refusal(wide)) and "200000 dimensions" in message
    assert time.monotonic() - started < 10
    seventeen = build(
        tmp_path / "seventeen.pt2",
        edit_json(
            "models/model.json",
            lambda doc: doc["graph_module"]["graph"]["tensor_values"]["x"].update(
                sizes=[{"as_int": 1}] * 17, strides=[{"as_int": 1}] * 17
            ),
        ),
    )
    assert "17 dimensions" in _archive_refusal(seventeen)


def test_a_member_whose_local_extra_field_moves_its_bytes_past_the_end_is_refused(tmp_path):
    """The central directory's sizes fit, but the local header's extra length (64 KB) moves
    where zipfile and torch's reader find the member's bytes: EOFError, exit 3, before."""
    from tests.gate.test_hostile_archives import build, member, patch_member

    path = build(tmp_path / "extra.pt2")
    patch_member(path, member("sample_inputs/model.pt"), {28: (0xFFFF).to_bytes(2, "little")}, {})
    message = _archive_refusal(path)
    assert "sample_inputs/model.pt" in message and "extra field" in message and "past the archive's end" in message


def _sample_inputs_declaring(data: bytes, size: int) -> bytes:
    """The torch.save zip `data` with its largest record declaring `size` bytes (stored) in
    its local header and directory entry, holding what it held."""
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(data)) as inner:
        infos = inner.infolist()
        entry, target = inner.start_dir, max(infos, key=lambda info: info.file_size)
    for info in infos[: infos.index(target)]:
        entry += 46 + len(info.orig_filename.encode()) + len(info.extra) + len(info.comment)
    patched, claim = bytearray(data), size.to_bytes(4, "little")
    for at in (target.header_offset + 18, target.header_offset + 22, entry + 20, entry + 24):
        patched[at : at + 4] = claim
    return bytes(patched)


def test_a_record_inside_the_sample_inputs_claiming_3_gib_is_refused_by_name(tmp_path):
    """The sample inputs are a zip of their own: a record declaring 3 GiB while holding 8 KB was
    refused as 'not plain tensors, which loading would unpickle', which it is not."""
    from tests.gate.test_hostile_archives import build, replaced, sample_members

    inputs = next(data for info, data in sample_members() if info.filename.endswith("sample_inputs/model.pt"))
    path = build(tmp_path / "inner.pt2", replaced("sample_inputs/model.pt", _sample_inputs_declaring(inputs, 3 << 30)))
    message = _archive_refusal(path)
    assert "sample_inputs/model.pt/archive/data/0" in message and "claims 3221225472" in message


def test_an_archive_member_claiming_3_gib_in_its_zip64_fields_is_refused(tmp_path):
    """The same claim made where a zip of more than 4 GiB makes it, in zip64 extra fields of
    the local header and the directory entry (which zipfile reads over the 32-bit ones)."""
    import struct
    import zipfile

    from tests.gate.test_hostile_archives import member, sample_members

    path, limit = tmp_path / "zip64.pt2", zipfile.ZIP64_LIMIT
    zipfile.ZIP64_LIMIT = 0  # every entry written with zip64 extra fields
    try:
        with zipfile.ZipFile(path, "w") as new:
            for info, data in sample_members():
                new.writestr(info.filename, data)
    finally:
        zipfile.ZIP64_LIMIT = limit
    with zipfile.ZipFile(path) as archive:
        size = archive.getinfo(member("sample_inputs/model.pt")).file_size
    data = bytearray(path.read_bytes())
    for length in (16, 24):  # the local header's zip64 field holds both sizes, the directory's the offset too
        at = data.find(struct.pack("<HHQQ", 1, length, size, size))
        data[at + 4 : at + 20] = struct.pack("<QQ", 3 << 30, 3 << 30)
    path.write_bytes(bytes(data))
    message = _archive_refusal(path)
    assert "sample_inputs/model.pt" in message and "claims 3221225472" in message
