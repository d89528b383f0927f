"""A golden file as a pull request shows it (issue 37, item 3): each size with its human form
beside the bytes, sources as written, no \\u escapes; files written before (bytes alone, ASCII
escapes) still read and compare the same; and the file is read against the JSON Schema devplan
ships, by a reading that agrees with the jsonschema package's."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest

import devplan
from devplan import schemacheck
from devplan.errors import DevplanError
from devplan.inspection.golden import golden_text, read_golden

GOLDEN = Path(__file__).parent / "golden"
CUDA = GOLDEN / "two_io_cuda.golden.json"


def test_sizes_read_in_a_human_form_beside_their_bytes_and_sources_as_written():
    text = CUDA.read_text(encoding="utf-8")
    assert "\\u" not in text and "make_samples.py:107" in text and " · " in text
    assert '"size": 768,\n          "size_text": "768 B",' in text
    assert '"payload_size_text": "' in text and '"constant_bytes_text": "0 B"' in text
    assert text == golden_text(read_golden(CUDA))  # as devplan writes it


def test_a_golden_written_before_reads_and_compares_the_same(tmp_path):
    """Bytes alone, sources \\u-escaped: what devplan wrote before this format."""
    old = tmp_path / "old.golden.json"
    document = read_golden(CUDA)
    old.write_text(json.dumps(document, indent=2))  # no _text keys, ensure_ascii's escapes
    assert "\\u00b7" in old.read_text() and "size_text" not in old.read_text()
    assert read_golden(old) == document
    assert not devplan.diff(old, CUDA).changes


def test_a_human_form_that_disagrees_with_its_bytes_is_refused(tmp_path):
    edited = tmp_path / "edited.golden.json"
    edited.write_text(CUDA.read_text().replace('"size": 768,', '"size": 1024,', 1))
    with pytest.raises(
        DevplanError,
        match=r'not a valid golden file: "size_text": "768 B" says other than "size": '
        r"1024 \(1.0 KiB\); the bytes are what is compared",
    ):
        read_golden(edited)


def _damaged() -> list[dict]:
    """The committed golden, each way a hand edit or a bad merge could break it."""
    base = json.loads(CUDA.read_text())
    edits = [
        lambda d: d["methods"][0]["buffers"][0].update(size=-1),
        lambda d: d["methods"][0]["buffers"][0].update(size=True),
        lambda d: d["methods"][0]["buffers"][0].update(size=1.5),
        lambda d: d["methods"][0]["buffers"][0].update(size=1 << 70),
        lambda d: d["methods"][0]["buffers"][0].update(size_text=7),
        lambda d: d["methods"][0]["buffers"][0].pop("device"),
        lambda d: d["methods"][0]["buffers"][0]["peak"].update(other=1),
        lambda d: d["methods"][0]["buffers"][0]["peak"]["modules"].update(x="1 KiB"),
        lambda d: d["methods"][0].update(operators=["a", "a"]),
        lambda d: d["methods"][0]["placements"].update(sha256="ABC"),
        lambda d: d["methods"][0]["delegates"][0].update(window={"mem_id": 0, "offset": 0}),
        lambda d: d["methods"][0]["delegates"][0].update(target_device=None),
        lambda d: d["methods"][0]["devices"].update(tpu=[]),
        lambda d: d.pop("document"),
        lambda d: d["file"].update(name=None),
    ]
    found = []
    for edit in edits:
        document = copy.deepcopy(base)
        edit(document)
        found.append(document)
    return found


@pytest.mark.parametrize("number", range(len(_damaged())))
def test_the_shipped_schema_is_read_as_jsonschema_reads_it(number):
    document = _damaged()[number]
    shipped = schemacheck.schema("golden")
    valid = jsonschema.Draft202012Validator(shipped).is_valid(document)
    assert (schemacheck.problem(document, shipped, shipped) is None) == valid, (number, valid)
