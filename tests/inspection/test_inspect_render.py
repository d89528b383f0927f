"""The terminal views: every section, the layout chart, 80 columns, no colour needed."""

from __future__ import annotations

import io
import itertools
import re
from pathlib import Path

import pytest
from rich.console import Console

import devplan
from devplan.inspection.render import render
from devplan.inspection.sections import SECTIONS
from devplan.units import exact_size_text
from tests.inspection.lowered import NAMES

CHART_ROW = re.compile(r"^\s*(\d+(?:\.\d+)?) (B|KiB|MiB) │(.*)$")
LEGEND_ENTRY = re.compile(r"(\S) v(\d+) (\d+)\.\.(\d+) ")


def text_of(doc: dict, sections=SECTIONS, width: int = 80, exact_bytes: bool = False) -> str:
    out = io.StringIO()
    render(doc, Console(file=out, width=width, color_system=None, highlight=False), sections, exact_bytes=exact_bytes)
    return out.getvalue()


def test_every_section_appears(hand_built):
    text = text_of(devplan.inspect(hand_built["cuda"]))
    for heading in ("buffers", "tensors", "instructions", "delegates", "layout", "method forward"):
        assert re.search(rf"^{heading}\b", text, re.MULTILINE), heading
    # summary
    assert "cuda.pte" in text
    assert f"file           {exact_size_text(hand_built['cuda'].stat().st_size)}" in text
    assert "4 values, 3 instructions, 1 operator, 1 delegate" in text


def test_only_the_chosen_sections_appear(hand_built):
    text = text_of(devplan.inspect(hand_built["cuda"]), sections=("tensors",))
    assert re.search(r"^tensors\b", text, re.MULTILINE)
    for heading in ("buffers", "instructions", "delegates", "layout"):
        assert not re.search(rf"^{heading}\b", text, re.MULTILINE), heading
    assert "constant data" not in text  # no summary


def test_cuda_buffer_and_tensors_show_their_device(hand_built):
    text = text_of(devplan.inspect(hand_built["cuda"]), sections=("buffers", "tensors", "layout"))
    (buffer_row,) = [line for line in text.splitlines() if re.match(r"^\s*1\s+cuda:0\s", line)]
    assert "48 B" in buffer_row
    assert re.search(r"^\s*v0\s+float32\s+2×2\s+1\s+0\s+16 B\s+cuda:0\s", text, re.MULTILINE)
    assert re.search(r"^\s*v3\s.*\scuda:1\s", text, re.MULTILINE)
    assert "buffer 1 · cuda:0" in text


def test_instructions_read_as_calls(hand_built):
    text = text_of(devplan.inspect(hand_built["lifetimes"]), sections=("instructions",))
    assert "#0 aten::mul.out(v0, v6, v1) -> v1" in text
    # a list argument shows its items and an int its value, as the kernel reads them
    assert "#2 aten::cat.out([v1, v2], 0, v4) -> v4" in text
    assert "#3 aten::index.Tensor_out(v4, [None, v0], v9) -> v9" in text
    assert "#4 free(v2)" in text
    delegates = text_of(devplan.inspect(hand_built["cuda"]), sections=("instructions", "delegates"))
    assert "#2 delegate 0 CudaBackend(v1, v2)" in delegates
    assert re.search(r"target_device=\s*cuda:0;\s+blob=\s*00ff10", delegates)


def test_a_long_call_wraps_between_its_arguments(hand_built):
    """At 30 columns each call takes several lines, under itself; a value name is never cut."""
    doc = devplan.inspect(hand_built["lifetimes"])
    lines = text_of(doc, sections=("instructions",), width=30).splitlines()
    lines = list(
        itertools.takewhile(lambda line: not line.startswith("method"), lines[lines.index("instructions") + 1 :])
    )
    assert all(len(line) <= 30 and re.search(r"(,|\)|-> v\d+)$", line) for line in lines)
    calls = []
    for line in lines:
        start = re.match(r"^\s*#\d+ (.*)$", line)
        if start:
            calls.append(start[1].strip())
        else:  # a continuation: the break fell after ", "
            calls[-1] += (" " if calls[-1].endswith(",") else "") + line.strip()
    assert "aten::mul.out(v0, v6, v1) -> v1" in calls
    assert "aten::cat.out([v1, v2], 0, v4) -> v4" in calls
    assert len(lines) > len(calls)


def test_exact_bytes_replace_human_sizes(lowered):
    doc = devplan.inspect(lowered["transformer"])
    size = doc["methods"][0]["buffers"][0]["size"]
    assert size >= 1024
    human = text_of(doc, sections=("buffers",))
    exact = text_of(doc, sections=("buffers",), exact_bytes=True)
    assert f"{size} B" in exact and f"{size} B" not in human
    assert "KiB" in human


def chart_of(text: str) -> tuple[list[tuple[str, str]], dict[str, tuple[int, int, int]]]:
    """(row label, cells) of each chart row, and glyph -> (value, start, end) from the legend."""
    rows = [(m.group(1) + " " + m.group(2), m.group(3)) for m in map(CHART_ROW.match, text.splitlines()) if m]
    legend = {glyph: (int(value), int(start), int(end)) for glyph, value, start, end in LEGEND_ENTRY.findall(text)}
    return rows, legend


def test_layout_chart_draws_each_tensor_where_and_when_it_lives(hand_built):
    doc = devplan.inspect(hand_built["lifetimes"], method="forward")
    method = doc["methods"][0]
    rows, legend = chart_of(text_of(doc, sections=("layout",)))
    tensors = {t["value"]: t for t in method["tensors"]}
    # Every planned tensor that is ever alive has a legend entry with its byte range.
    live = {v for v, t in tensors.items() if t["mem_id"] == 1 and t["lifetime"] is not None}
    assert {value for value, _, _ in legend.values()} == live
    for value, start, end in legend.values():
        assert (start, end) == (tensors[value]["offset"], tensors[value]["offset"] + tensors[value]["nbytes"])
    # 128 B over at most 16 rows: 8 B a row; 5 instructions: 4 columns each within 80 columns.
    assert len(rows) == 16 and rows[0][0] == "0 B" and rows[1][0] == "8 B"
    instructions = method["counts"]["instructions"]
    for row, (_, cells) in enumerate(rows):
        assert len(cells) == 4 * instructions
        low, high = row * 8, row * 8 + 8
        for at in range(instructions):
            # The smallest tensor overlapping the cell's bytes while alive; the lowest value on ties.
            alive = [
                (value_end - value_start, value, glyph)
                for glyph, (value, value_start, value_end) in legend.items()
                if value_start < high
                and low < value_end
                and tensors[value]["lifetime"][0] <= at <= tensors[value]["lifetime"][1]
            ]
            expected = min(alive)[2] if alive else "·"
            assert set(cells[4 * at : 4 * at + 4]) == {expected}, (row, at)


def test_layout_of_many_instructions_fits_the_width(lowered):
    doc = devplan.inspect(lowered["transformer"])
    text = text_of(doc, sections=("layout",), width=40)
    rows, legend = chart_of(text)
    assert rows and legend
    assert max(len(line) for line in text.splitlines()) <= 40
    # 31 instructions squeezed into fewer columns than instructions.
    assert len(rows[0][1]) < doc["methods"][0]["counts"]["instructions"]


@pytest.mark.parametrize("name", NAMES)
def test_everything_fits_80_columns_without_colour(name, lowered):
    text = text_of(devplan.inspect(lowered[name]))
    assert "\x1b[" not in text
    too_wide = [line for line in text.splitlines() if len(line) > 80]
    assert not too_wide


def test_a_folded_cell_breaks_between_its_pieces(lowered):
    # At 80 columns the transformer's tensors table is too wide by a few characters: the
    # life column gives them up, moving "held a-b" to a line of its own, never cutting it.
    doc = devplan.inspect(lowered["transformer"])
    lines = text_of(doc, ("tensors",)).splitlines()
    held = [t for t in doc["methods"][0]["tensors"] if t["held"] and t["held"] != t["lifetime"]]
    assert held
    for tensor in held:
        row = next(i for i, line in enumerate(lines) if line.split() and line.split()[0] == f"v{tensor['value']}")
        assert lines[row].rstrip().endswith(tensor["role"])
        assert lines[row + 1].split() == ["held", f"{tensor['held'][0]}-{tensor['held'][1]}"]


def test_a_table_that_cannot_fit_keeps_one_line_per_row(lowered):
    doc = devplan.inspect(lowered["transformer"])
    lines = text_of(doc, ("tensors",), width=40).splitlines()
    tensors = doc["methods"][0]["tensors"]
    rows = [line for line in lines if re.match(r"^\s*v\d+ ", line)]
    sources = [line for line in lines[4:] if line not in rows]  # after the method rule, title, header, rule
    assert len(rows) == len(tensors) and all(len(line) > 40 for line in rows)
    assert all(line.startswith("    ") and len(line) <= 40 for line in sources)  # each source under its row


def test_tensors_have_a_source_column_or_a_source_line(tmp_path):
    """-s tensors names where each tensor came from: a column when the terminal has room,
    else a line under each row, within 80 columns."""
    program = tmp_path / "transformer.pte"
    devplan.compile(str(Path(__file__).resolve().parents[2] / "samples" / "transformer.pt2"), program)
    doc = devplan.inspect(program)
    fc1 = next(t for t in doc["methods"][0]["tensors"] if t["source"].startswith("fc1 (Linear)"))
    wide = text_of(doc, ("tensors",), width=200).splitlines()
    assert wide[2].split()[-1] == "source"
    assert any(line.split()[0] == f"v{fc1['value']}" and line.endswith(fc1["source"]) for line in wide[4:])
    narrow = text_of(doc, ("tensors",)).splitlines()
    assert all(len(line) <= 80 for line in narrow)
    row = next(i for i, line in enumerate(narrow) if line.split()[0] == f"v{fc1['value']}")
    assert narrow[row + 1].strip() == fc1["source"]
