"""Terminal views of the inspection document, one per section, for a rich Console.

Works from the document alone (never the program), so what the terminal shows and what
--json prints cannot disagree. Fits 80 columns; letters and words carry every fact, so
NO_COLOR and pipes lose nothing."""

from __future__ import annotations

import re
from collections.abc import Sequence

from rich.console import Console
from rich.rule import Rule
from rich.text import Text

from devplan.documents import (
    InspectDocument,
    InspectedDelegate,
    InspectedInstruction,
    InspectedMethod,
    InspectedTensor,
    PeakTensor,
)
from devplan.inspection.layout import layout_chart
from devplan.inspection.own_memory import outside, outside_text
from devplan.inspection.placed import held_of
from devplan.inspection.sections import DEFAULT_SECTIONS, SECTIONS
from devplan.inspection.summary import constant_methods, segments_view, summary_view
from devplan.inspection.tables import PlainTable, fold
from devplan.inspection.timing import instruction_times, time_text, timing_view
from devplan.units import size_text


def render(
    doc: InspectDocument,
    console: Console,
    sections: Sequence[str] = DEFAULT_SECTIONS,
    exact_bytes: bool = False,
    shapes: bool = False,
) -> None:
    """Print the chosen sections of doc, in SECTIONS order; exact_bytes shows every size in
    bytes, shapes each tensor argument of an instruction with its dtype and shape."""
    chosen = [section for section in SECTIONS if section in sections]
    if shapes:
        doc = {**doc, "methods": [_with_shapes(method) for method in doc["methods"]]}
    if "summary" in chosen:
        summary_view(doc, console, exact_bytes)
    if "segments" in chosen:
        segments_view(doc["file"]["segments"], console, exact_bytes)
    folded = constant_methods(doc)  # the summary's one line says all there is of them
    for method in doc["methods"]:
        if method["name"] in folded:
            continue
        per_method = [section for section in chosen if section not in ("summary", "segments")]
        if not per_method:
            continue
        console.print(Rule(Text(f"method {method['name']}", style="bold"), align="left"))
        for section in per_method:
            _VIEWS[section](method, console, exact_bytes)
            if section == "peak" and "timing" in method:  # where the time goes, beside what sets the peak
                timing_view(method, console)


def _with_shapes(method: InspectedMethod) -> InspectedMethod:
    """The method with its instructions' tensor arguments as vN:dtype[shape]."""
    described = {t["value"]: f"v{t['value']}:{t['dtype']}[{'×'.join(map(str, t['shape']))}]" for t in method["tensors"]}

    def shaped(argument: str) -> str:
        return re.sub(r"v(\d+)", lambda match: described.get(int(match[1]), match[0]), argument)

    rows: list[InspectedInstruction] = [
        {**row, "arguments": [shaped(argument) for argument in row["arguments"]]} for row in method["instructions"]
    ]
    return {**method, "instructions": rows}


def _buffers(method: InspectedMethod, console: Console, exact_bytes: bool) -> None:
    if not method["buffers"]:
        console.print(Text("buffers: none (no planned memory)", style="dim"))
        return
    table = PlainTable(
        "buffers",
        ("mem_id", "right"),
        ("device", "left"),
        ("size", "right"),
        ("tensors", "right"),
        ("peak", "right"),
        ("busiest", "right"),
        ("lower bound", "right"),
        ("size/bound", "right"),
    )
    for buffer in method["buffers"]:
        ratio = f"{buffer['size'] / buffer['lower_bound']:.3f}" if buffer["lower_bound"] else "-"
        table.add_row(
            str(buffer["mem_id"]),
            buffer["device"],
            size_text(buffer["size"], exact_bytes),
            str(buffer["tensors"]),
            size_text(buffer["peak"], exact_bytes),
            _instruction_ref(buffer["peak_instruction"]),
            size_text(buffer["lower_bound"], exact_bytes),
            ratio,
        )
    table.print(console)
    for buffer in method["buffers"]:
        if "problem" in buffer:
            console.print(
                Text(f"buffer {buffer['mem_id']} ({buffer['device']}): {buffer['problem']}", style="bold red"),
                soft_wrap=True,
            )
    for delegate in outside(method):  # what these buffers leave out: the backend's own memory
        console.print(Text(outside_text(method["name"], delegate, lambda n: size_text(n, exact_bytes))))
    for device in method.get("devices") or ():
        if device["buffers"] > 1:  # buffers that could have shared bytes: the device's own bound says how well
            ratio = f"{device['size'] / device['lower_bound']:.3f}" if device["lower_bound"] else "-"
            console.print(
                f"{device['device']}: {device['buffers']} buffers (delegates' own included), "
                f"{size_text(device['size'], exact_bytes)}; device lower bound "
                f"{size_text(device['lower_bound'], exact_bytes)}, size/bound {ratio}"
            )


PEAK_ROWS = 10  # tensors listed at a peak (a row of state counting each); --json has them all


def _peak(method: InspectedMethod, console: Console, exact_bytes: bool) -> None:
    if not method["peak"]:
        console.print(Text("peak: no planned buffers", style="dim"))
        return
    for entry in method["peak"]:
        size = next(b["size"] for b in method["buffers"] if b["mem_id"] == entry["mem_id"])
        head = Text.assemble(
            ("peak", "bold"),
            f" of buffer {entry['mem_id']} ({entry['device']}): ",
            f"{size_text(entry['bytes'], exact_bytes)} of {size_text(size, exact_bytes)}",
        )
        if entry["instruction"] is None:
            console.print(head, Text(" (nothing held)", style="dim"))
            continue
        head.append(f" at #{entry['instruction']}" + (f" {entry['op']}" if entry["op"] else ""))
        console.print(head)
        if entry["source"]:
            lines = fold(tuple(re.findall(r"\S+(?: |$)", f"from {entry['source']}")), max(console.width - 4, 10))
            console.print(
                Text("\n".join(f"  {line}" if i == 0 else f"    {line}" for i, line in enumerate(lines)), style="dim")
            )
        total = max(entry["bytes"], 1)
        shares = [f"{m['module']} {_percent(m['bytes'] / total)}" for m in entry["modules"]]
        if any(m["module"] not in ("(no module)", "(inputs)", "(state)") for m in entry["modules"]):
            console.print(Text(_one_line("  by block: ", shares[:BLOCKS], len(shares), console.width)))
        else:
            console.print(Text("  by block: unknown, the program names no modules", style="dim"))
        table = PlainTable(
            f"held at #{entry['instruction']}, largest first",
            ("value", "right"),
            ("bytes", "right"),
            ("held", "left"),
            ("source", "left"),
        )
        listed = 0
        for row in _held_rows(entry["tensors"]):
            if listed >= PEAK_ROWS:
                break
            first, last = row[0], row[-1]
            table.add_row(
                f"v{first['value']}" + (f"…v{last['value']}" if len(row) > 1 else ""),
                size_text(sum(t["nbytes"] for t in row), exact_bytes),
                f"#{held_of(first)[0]}-{held_of(first)[1]}",
                tuple(re.findall(r"\S+(?: |$)", first["source"] + (f" … {last['source']}" if len(row) > 1 else ""))),
            )
            listed += len(row)
        table.print(console)
        rest = entry["tensors"][listed:]
        if rest:
            console.print(
                Text(
                    f"  and {len(rest)} more ({size_text(sum(t['own_bytes'] for t in rest), exact_bytes)}); "
                    f"--json has them all",
                    style="dim",
                )
            )


BLOCKS = 6  # blocks named on the peak's line, as many of them as fit it


def _one_line(prefix: str, items: list[str], total: int, width: int) -> str:
    """prefix and as many of items as fit width (one at least), then how many more of total."""
    for count in range(len(items), 0, -1):
        line = prefix + ", ".join(items[:count]) + (f", {total - count} more" if total > count else "")
        if len(line) <= width or count == 1:
            return line
    return prefix.rstrip()


def _held_rows(tensors: list[PeakTensor]) -> list[list[PeakTensor]]:
    """The peak's tensors as the table's rows: a run of state of one size held alike (a KV
    cache's buffers, two a layer) is one row, so that it leaves the rows to what else is held."""
    rows: list[list[PeakTensor]] = []
    for t in tensors:
        last = rows[-1][-1] if rows else None
        if last and t["role"] == last["role"] == "state" and (t["nbytes"], t["held"]) == (last["nbytes"], last["held"]):
            rows[-1].append(t)
        else:
            rows.append([t])
    return rows


def _percent(share: float) -> str:
    return "<1%" if share < 0.005 else f"{100 * share:.0f}%"


def _tensors(method: InspectedMethod, console: Console, exact_bytes: bool) -> None:
    if not method["tensors"]:
        console.print(Text("tensors: none", style="dim"))
        return
    table = PlainTable(
        "tensors",
        ("value", "right"),
        ("dtype", "left"),
        ("shape", "left"),
        ("mem", "right"),
        ("offset", "right"),
        ("nbytes", "right"),
        ("device", "left"),
        ("life", "left"),
        ("role", "left"),
        ("source", "left"),
        below="source",
    )
    for tensor in method["tensors"]:
        table.add_row(
            f"v{tensor['value']}",
            tensor["dtype"],
            _shape(tensor),
            _optional(tensor["mem_id"]),
            _optional(tensor["offset"]),
            size_text(tensor["nbytes"], exact_bytes),
            tensor["device"],
            _life(tensor),
            tensor["role"],
            tuple(re.findall(r"\S+(?: |$)", tensor["source"])) or "-",
        )
    table.print(console)


def _shape(tensor: InspectedTensor) -> str | tuple[str, ...]:
    """Sizes as pieces that fold after each ×; a dynamic shape is its upper bound, shown as ≤."""
    if not tensor["shape"]:
        return "scalar"
    pieces = tuple(f"{size}×" for size in tensor["shape"][:-1]) + (str(tensor["shape"][-1]),)
    return ("≤",) + pieces if tensor["dynamic"] else pieces


def _life(tensor: InspectedTensor) -> str | tuple[str, str]:
    """Instructions that use the tensor, and, for a view, those through which its bytes are held."""
    if tensor["lifetime"] is None:
        return "-"
    (first, last), held = tensor["lifetime"], held_of(tensor)
    return (f"{first}-{last} ", f"held {held[0]}-{held[1]}") if held != [first, last] else f"{first}-{last}"


def _instructions(method: InspectedMethod, console: Console, exact_bytes: bool) -> None:
    if not method["instructions"]:
        console.print(Text("instructions: none", style="dim"))
        return
    console.print(Text("instructions", style="bold"))
    delegates = {delegate["index"]: delegate for delegate in method["delegates"]}
    label = len(f"#{method['instructions'][-1]['index']}")
    room = max(console.width - label - 1, 10)
    times, inside = instruction_times(method)
    text = Text()
    source = None
    for row in method["instructions"]:
        if row["source"] and row["source"] != source:  # a line per stretch of instructions from one place
            source = row["source"]
            text.append(
                " " * label
                + " "
                + "\n".join(fold(tuple(re.findall(r"\S+(?: |$)", f"{source}:")), room)).replace(
                    "\n", "\n" + " " * (label + 1)
                )
                + "\n",
                style="dim",
            )
        head, tail = _call_parts(row, delegates)
        if row["index"] in times:  # --etdump: what the run measured, ahead of the arguments
            head = f"{head} [{time_text(times[row['index']])}] "
        # a long call wraps under itself, not under the numbers, between its arguments
        for depth, line in enumerate(fold((head, *re.findall(r".+?(?:, |$)", tail)), room)):
            prefix = f"#{row['index']}".rjust(label) if depth == 0 else " " * label
            text.append(prefix, style="dim")
            text.append(" ")
            bold = max(0, min(len(head) - depth * room, len(line)))  # the op name breaks only at full lines
            text.append(line[:bold], style="bold")
            text.append(line[bold:] + "\n")
        for entry in inside.get(row["index"], ()):  # what the backend timed inside the call
            text.append(" " * (label + 3) + f"{entry['name']} [{time_text(entry['ns'])}]\n", style="dim")
    console.print(text, end="")


def _call_parts(row: InspectedInstruction, delegates: dict[int, InspectedDelegate]) -> tuple[str, str]:
    """An instruction as (what it runs, shown bold; its arguments)."""
    args, shown = row["args"], row["arguments"]
    if row["kind"] == "kernel":
        returns = _returns(args)
        inputs, results = shown[: len(shown) - returns], shown[len(shown) - returns :]
        return row["op"] or row["kind"], f"({', '.join(inputs)})" + (f" -> {', '.join(results)}" if results else "")
    if row["kind"] == "delegate":
        delegate = delegates.get(row["delegate"]) if row["delegate"] is not None else None
        backend = delegate["id"] if delegate else "?"
        return f"delegate {row['delegate']} {backend}", f"({', '.join(shown)})"
    if row["kind"] == "move":
        return "move", f" {shown[0]} -> {shown[1]}"
    return row["kind"], f"({', '.join(shown)})"


def _returns(args: list[int]) -> int:
    """Kernel arguments end with the out= arguments followed by the returns, which name the
    same values again; the length of the longest such repeated tail is the returns'."""
    for count in range(len(args) // 2, 0, -1):
        if args[-count:] == args[-2 * count : -count]:
            return count
    return 0


def _delegates(method: InspectedMethod, console: Console, exact_bytes: bool) -> None:
    if not method["delegates"]:
        console.print(Text("delegates: none", style="dim"))
        return
    table = PlainTable(
        "delegates",
        ("#", "right"),
        ("backend", "left"),
        ("target", "left"),
        ("payload", "right"),
        ("stored", "left"),
        ("planned", "left"),
        ("compile specs", "left"),
        below="compile specs",  # under each row on a narrow terminal, as the tensors' sources go
    )
    for delegate in method["delegates"]:
        specs = [
            piece for spec in delegate["compile_specs"] for piece in (f"{spec['key']}=", f"{_shorten(spec['value'])}; ")
        ]
        window = delegate.get("window")
        inside = (f" in buffer {window['mem_id']}", f" at {window['offset']}") if window else ()
        buffers = [
            piece
            for b in delegate["payload_buffers"] or ()
            for piece in (f"{b['device']} {size_text(b['size'], exact_bytes)}", *inside, "; ")
        ]
        table.add_row(
            str(delegate["index"]),
            delegate["id"],
            delegate["target_device"] or "-",
            size_text(delegate["payload_size"], exact_bytes),
            f"{delegate['location']} {delegate['payload_index']}",
            tuple(buffers[:-1]) if buffers else "-",
            tuple(specs[:-1]) + (specs[-1][:-2],) if specs else "-",
        )
    table.print(console)


def _layout(method: InspectedMethod, console: Console, exact_bytes: bool) -> None:
    if not method["buffers"]:
        console.print(Text("layout: no planned buffers", style="dim"))
        return
    for number, buffer in enumerate(method["buffers"]):
        if number:  # a blank line between charts
            console.print()
        console.print(layout_chart(method, buffer, width=console.width, exact_bytes=exact_bytes))


# Columns whose text may be long; the rest stay on one line.

_VIEWS = {
    "buffers": _buffers,
    "peak": _peak,
    "tensors": _tensors,
    "instructions": _instructions,
    "delegates": _delegates,
    "layout": _layout,
}


def _instruction_ref(index: int | None) -> str:
    return f"#{index}" if index is not None else "-"


def _optional(number: int | None) -> str:
    return "-" if number is None else str(number)


def _shorten(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
