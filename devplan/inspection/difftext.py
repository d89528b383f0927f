"""A Diff as a person reads it: one line per change, under its method, within the console's
width (80 columns unless told: a pipe's, and a CI log's).

    FAIL  buffer 1 (cpu) size: 1.5 KiB (1,536 bytes) -> 2.0 KiB (2,048 bytes), +512 B (+33.3%)
    ok    constant bytes: 781.3 KiB (800,000 bytes) -> 780.3 KiB (798,976 bytes), -1.0 KiB (-0.1%)

"FAIL" marks a difference; "ok" a change the comparison allows (a size that shrank or grew
within the tolerance, placements that moved without --exact). Those labels are a gate's: where
none is applied (`devplan diff` without --tolerance or --exact, comparing two toolchains' or
two versions' programs), the changes are listed without them (labels=False)."""

from __future__ import annotations

import re
import textwrap
from typing import Any, Mapping

from devplan.documents import GoldenPeak, PeakDetail, Placement, PlacementChange, PlacementsDetail
from devplan.inspection.changes import Change, Comparison
from devplan.units import counted, exact_size_text, natural_key, printable, size_text

SIZED = frozenset({"size", "lower_bound", "payload_size", "constant_bytes"})  # facts in bytes, which may shrink

_INDENT = " " * 8
WIDTH = 80  # without a console to ask: a pipe's width, as rich gives it

_FACTS = {
    "size": "size",
    "lower_bound": "lower bound",
    "payload_size": "payload",
    "constant_bytes": "constant bytes",
    "count": "",
    "tensors": "tensors",
    "device": "device",
    "id": "backend",
    "target_device": "target device",
    "added": "added",
    "removed": "removed",
    "digest": "",
    "window": "window",
    "peak": "peak",
}


def diff_text(d: Comparison, labels: bool = True, width: int = WIDTH, placements: bool = False) -> str:
    """The verdict line, what caused it, then the changes grouped by method, wrapped within
    `width` columns; without `labels`, the changes alone, neither passing nor failing. The
    tensors whose placements changed are listed where both sides number their values alike
    (d.comparable), or with `placements`."""
    lines = change_lines(d, labels, width, placements or d.comparable)
    return "\n".join([verdict(d, labels), *cause_lines(d, width), *lines]) + "\n"


def verdict(d: Comparison, labels: bool = True) -> str:
    # the files' names escaped here, before the text's lines are joined: a newline in one
    # would start a line of its own
    sides = f"{printable(d.a)} -> {printable(d.b)}"
    if not labels:
        return f"{sides}: {counted(len(d.changes), 'change') if d.changes else 'the programs plan the same'}"
    return f"{sides}: {outcome(d)}"


def outcome(d: Comparison) -> str:
    """'the programs plan the same'; or how many changes, and of them how many fail the
    comparison and how many it allows (one vocabulary for check and diff, in every format)."""
    rules = [f"tolerance {d.tolerance}"] if d.tolerance is not None else []
    rules += [f"weights {d.weights_tolerance}"] if d.weights_tolerance is not None else []
    rule = f" ({', '.join(rules)})" if rules else " (exact)" if d.exact else ""
    failing = sum(change.fails for change in d.changes)
    allowed = len(d.changes) - failing
    if not d.changes:
        return "the programs plan the same"
    if not failing:
        return f"{counted(allowed, 'change')}, each allowed{rule}"
    return (
        f"{counted(len(d.changes), 'change')}: {failing} failing" + (f", {allowed} allowed" if allowed else "") + rule
    )


def cause_lines(d: Comparison, width: int = WIDTH) -> list[str]:
    """What a reviewer acts on, before the numbers: per buffer whose peak changed, the blocks
    that grew most and where the peak is now ('cause: blocks.0 +32.0 KiB; peak at #1 ...')."""
    lines = []
    for change in d.changes:
        if change.fact != "peak":
            continue
        grew = [(name, was, now) for name, was, now in shares(peak_detail(change)) if now != was][:2]
        blocks = ", ".join(f"{name} {signed_size(now - was)}" for name, was, now in grew)
        where = f"{change.subject}" + (f" of method {change.method}" if change.method else "")
        a, b = _record(change, change.a), _record(change, change.b)
        lines.append(
            f"  cause: {where}: {blocks + '; ' if blocks else ''}its peak at {where_peak(b)}, "
            f"{size_text(a['bytes'])} -> {size_text(b['bytes'])}"
        )
    return wrapped(lines, width)


def change_lines(d: Comparison, labels: bool = True, width: int = WIDTH, placements: bool = True) -> list[str]:
    lines: list[str] = []
    heading: str | None = None
    for change in d.changes:
        if change.method != heading and change.method is not None:
            heading = change.method
            lines.append(f"method {heading}")
        lines += _lines(change, labels, placements)
    return wrapped(lines, width)


def shares(detail: PeakDetail) -> list[tuple[str, int, int]]:
    """A peak change's blocks, or its operators where a side names no modules: (name, a, b)."""
    if detail["by"] == "operator":
        return [(o["operator"], o["a"], o["b"]) for o in detail["operators"]]
    return [(m["module"], m["a"], m["b"]) for m in detail["modules"]]


def wrapped(lines: list[str], width: int = WIDTH) -> list[str]:
    """Long lines (operator lists, sources) wrap under their first rather than run past `width`
    columns, never between a number and its unit nor inside a word (a path stays whole, for
    grep and for the terminal to wrap). Names are escaped first (units.printable): textwrap
    would make a newline in one a space, and break the line there."""
    return [
        part.replace(_UNIT_SPACE, " ")
        for line in lines
        for part in textwrap.wrap(
            _SIZE.sub(rf"\1{_UNIT_SPACE}\2", printable(line)),
            max(width, 40),
            subsequent_indent=_INDENT,
            break_on_hyphens=False,
            break_long_words=False,
        )
    ]


_SIZE = re.compile(r"(\d) (B|KiB|MiB|GiB|TiB|bytes)\b")
_UNIT_SPACE = "\xa0"  # textwrap breaks only at ASCII whitespace


def peak_detail(change: Change) -> PeakDetail:
    """A peak change's detail: the blocks (or operators) whose bytes at the peak changed."""
    detail = change.detail
    if detail is None or "by" not in detail:  # diff.py gives every peak change its blocks
        raise ValueError(f"{change.subject} {change.fact}: a change without the blocks at its peak")
    return detail


def _placements_detail(change: Change) -> PlacementsDetail | None:
    """A digest change's detail: its tensors compared one by one, None where a side is a golden file."""
    detail = change.detail
    if detail is not None and "largest" not in detail:  # diff.py gives a digest change no peak's blocks
        raise ValueError(f"{change.subject} {change.fact}: a change with a peak's blocks")
    return detail


def _record(change: Change, side: object) -> Mapping[str, Any]:
    """One side of a change whose values are records: a peak's place and bytes (instruction, op,
    source, bytes), a placements digest's count."""
    if not isinstance(side, Mapping):
        raise ValueError(f"{change.subject} {change.fact}: {type(side).__name__}, not a record")
    return side


def _lines(change: Change, labels: bool = True, placements: bool = True) -> list[str]:
    status = ("FAIL  " if change.fails else "ok    ") if labels else ""
    head = f"  {status}{change_label(change)}: {change_values(change)}"
    if change.fact == "digest" and not placements and change.detail is not None:
        # value ids each compiler numbers its own way: pairs of them tell a reader nothing
        return [head, f"{_INDENT}(the two compilers number their values each its own way; --placements lists them)"]
    if change.fact == "digest":
        return [head, *_largest(_placements_detail(change))]
    if change.fact == "peak":
        return [head, *_blocks(peak_detail(change))]
    return [head]


def change_label(change: Change) -> str:
    """What changed: 'buffer 1 (cpu) size', 'operators added', 'constant bytes'."""
    fact = _FACTS.get(change.fact, change.fact)
    return f"{change.subject} {fact}".rstrip() if change.subject != "program" else fact


def change_values(change: Change) -> str:
    """How it changed, on one line: '16.0 KiB (16,384 bytes) -> 32.3 KiB (33,088 bytes), +16.3 KiB (+102.0%)'."""
    if change.fact == "digest":
        return _placements(change)
    if change.fact == "peak":
        return _peak_values(change)
    return _values(change)


def _values(change: Change) -> str:
    a, b = change.a, change.b
    if change.fact in ("added", "removed"):
        shown = a if change.fact == "removed" else b
        if isinstance(shown, list):
            return ", ".join(shown)
        if isinstance(shown, dict) and "size" in shown:
            return size_text(shown["size"])
        if isinstance(shown, dict):
            return f"{shown['id']} on {shown['target_device'] or 'no device'}"
        return str(shown)
    if change.fact == "window":
        return f"{_window(a)} -> {_window(b)}"
    if change.fact in SIZED and isinstance(a, int) and isinstance(b, int):
        percent = f" ({_percent(a, b)})" if a else ""
        return f"{exact_size_text(a)} -> {exact_size_text(b)}, {signed_size(b - a)}{percent}"
    if isinstance(a, int) and isinstance(b, int):
        return f"{a} -> {b} ({b - a:+d})"
    return f"{a} -> {b}"


def _peak_values(change: Change) -> str:
    """'#12 aten::addmm.out (h.0.mlp.c_fc (Conv1D) addmm), 36.2 KiB -> #40 ... , 54.2 KiB'; one
    place when the peak stayed where it was."""
    a, b = _record(change, change.a), _record(change, change.b)
    if not peak_detail(change)["moved"]:
        return f"{where_peak(b)}, {size_text(a['bytes'])} -> {size_text(b['bytes'])}"
    return f"moved from {where_peak(a)}, {size_text(a['bytes'])}, to {where_peak(b)}, {size_text(b['bytes'])}"


def where_peak(peak: Mapping[str, Any]) -> str:
    """'#12 aten::addmm.out (h.0.mlp.c_fc (Conv1D) addmm)': a peak's instruction and its source."""
    where = (peak["source"] or "").strip()  # ExecuTorch's default programs keep no stacktrace
    source = f" ({where})" if where else ""
    return f"#{peak['instruction']} {peak['op']}{source}"


def peak_text(peak: GoldenPeak, blocks: int = 3) -> str:
    """'#40 aten::addmm.out (h.0.mlp.c_fc (Conv1D) addmm) holds 54.2 KiB: h.0.mlp 36.0 KiB, ...',
    the largest `blocks` blocks."""
    largest = sorted(peak["modules"].items(), key=lambda item: (-item[1], natural_key(item[0])))[:blocks]
    held = ", ".join(f"{module} {size_text(nbytes)}" for module, nbytes in largest)
    return f"{where_peak(peak)} holds {size_text(peak['bytes'])}" + (f": {held}" if held else "")


def _blocks(detail: PeakDetail) -> list[str]:
    """Each block (or operator) whose bytes at the peak changed, most changed first:
    'h.0.mlp +18.0 KiB (18.0 KiB -> 36.0 KiB)'."""
    lines = [f"{_INDENT}{share_text(*share)}" for share in shares(detail)]
    if detail["more"]:
        lines.append(f"{_INDENT}and {detail['more']} more {_noun(detail)}")
    return lines


def share_text(name: str, was: int, now: int) -> str:
    return f"{name} {signed_size(now - was)} ({size_text(was)} -> {size_text(now)})"


def _noun(detail: PeakDetail) -> str:
    return "operators" if detail["by"] == "operator" else "blocks"


def _window(window: object) -> str:
    """A window change's side: a SizedWindow, or None where the delegate has none."""
    if not isinstance(window, Mapping):
        return "none"
    return f"buffer {window['mem_id']} @{window['offset']} ({size_text(window['size'])})"


def _placements(change: Change) -> str:
    counts = f"{_record(change, change.a)['count']} -> {_record(change, change.b)['count']} tensors"
    detail = _placements_detail(change)
    if detail is None:  # a golden file keeps only the digest
        return f"differ (digest), {counts}"
    counted_kinds = (
        (detail["added"], "added"),
        (detail["removed"], "removed"),
        (detail["moved"], "moved"),
        (detail["resized"], "resized"),
        (detail["lifetime"], "lifetimes"),
    )
    kinds = ", ".join(f"{count} {name}" for count, name in counted_kinds if count)
    return f"{counts}: {kinds}"


def _largest(detail: PlacementsDetail | None) -> list[str]:
    if detail is None:
        return []
    lines = [_tensor(row) for row in detail["largest"]]
    if detail["changed"] > len(detail["largest"]):
        lines.append(f"and {detail['changed'] - len(detail['largest'])} more")
    return [f"{_INDENT}{line}" for line in lines]


def _tensor(row: PlacementChange) -> str:
    """'v7 (256 B) buffer 1 @512 -> @0, life 2..5 -> 3..5: SOURCE'; 'v7 -> v8' where the
    tensor's value index changed."""
    a, b = row["a"], row["b"]
    source = f": {row['source']}" if row.get("source") else ""
    if a is None or b is None:
        one = a if a is not None else b
        if one is None:  # diff.py lists a tensor on at least one side
            raise ValueError(f"value {row['value']}: a placement change with neither side")
        head = f"v{one['value']} ({size_text(one['nbytes'])})"
        return f"{head} {'added' if a is None else 'removed'}: {_where(one)}, life {_span(one)}{source}"
    values = f"v{a['value']} -> v{b['value']}" if a["value"] != b["value"] else f"v{a['value']}"
    head = f"{values} ({size_text(a['nbytes'])})"
    facts = [_where(a)]
    if (a["mem_id"], a["device"]) != (b["mem_id"], b["device"]):
        facts[0] += f" -> {_where(b)}"
    elif a["offset"] != b["offset"]:
        facts[0] += f" -> @{b['offset']}"
    if a["nbytes"] != b["nbytes"]:
        facts.append(f"now {size_text(b['nbytes'])}")
    facts.append(f"life {_span(a)}" + (f" -> {_span(b)}" if a["lifetime"] != b["lifetime"] else ""))
    return f"{head} {', '.join(facts)}{source}"


def _where(row: Placement) -> str:
    device = f" ({row['device']})" if row["device"] != "cpu" else ""
    return f"buffer {row['mem_id']}{device} @{row['offset']}"


def _span(row: Placement) -> str:
    return f"{row['lifetime'][0]}..{row['lifetime'][1]}" if row["lifetime"] else "none"


def _percent(a: int, b: int) -> str:
    percent = (b - a) * 100 / a
    return f"{percent:+.1f}%" if abs(percent) >= 0.1 else f"{'+' if b > a else '-'}<0.1%"


def signed_size(delta: int) -> str:
    return ("+" if delta >= 0 else "-") + size_text(abs(delta))
