"""Terminal views of the inspection document, one per section, for a rich Console.

Works from the document alone (never the program), so what the terminal shows and what
--json prints cannot disagree. Fits 80 columns; letters and words carry every fact, so
NO_COLOR and pipes lose nothing."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from rich.console import Console
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from devplan.documents import (
    InspectDocument,
    InspectedDelegate,
    InspectedInstruction,
    InspectedMethod,
    InspectedTensor,
    Segment,
)
from devplan.inspection.kernels import needs_text
from devplan.inspection.layout import layout_chart
from devplan.inspection.own_memory import outside, outside_text
from devplan.inspection.sections import DEFAULT_SECTIONS, SECTIONS
from devplan.inspection.tables import PlainTable, fold
from devplan.units import counted, exact_size_text, size_text


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
        _summary(doc, console, exact_bytes)
    if "segments" in chosen:
        _segments(doc["file"]["segments"], console, exact_bytes)
    for method in doc["methods"]:
        per_method = [section for section in chosen if section not in ("summary", "segments")]
        if not per_method:
            continue
        console.print(Rule(Text(f"method {method['name']}", style="bold"), align="left"))
        for section in per_method:
            _VIEWS[section](method, console, exact_bytes)


def _with_shapes(method: InspectedMethod) -> InspectedMethod:
    """The method with its instructions' tensor arguments as vN:dtype[shape]."""
    described = {t["value"]: f"v{t['value']}:{t['dtype']}[{'×'.join(map(str, t['shape']))}]" for t in method["tensors"]}

    def shaped(argument: str) -> str:
        return re.sub(r"v(\d+)", lambda match: described.get(int(match[1]), match[0]), argument)

    rows: list[InspectedInstruction] = [
        {**row, "arguments": [shaped(argument) for argument in row["arguments"]]} for row in method["instructions"]
    ]
    return {**method, "instructions": rows}


SEGMENTS_INLINE = 4  # segments the summary lists on its line; more are a count, and -s segments lists them


def _segments(segments: list[Segment], console: Console, exact_bytes: bool) -> None:
    if not segments:
        console.print(Text("segments: none", style="dim"))
        return
    table = PlainTable("segments", ("#", "right"), ("size", "right"), ("at byte", "right"))
    for segment in segments:
        table.add_row(str(segment["index"]), size_text(segment["size"], exact_bytes), str(segment["offset"]))
    table.print(console)


def _summary(doc: InspectDocument, console: Console, exact_bytes: bool) -> None:
    file = doc["file"]
    console.print(Rule(Text(file["name"], style="bold"), align="left"))
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    segments = "; ".join(
        f"#{segment['index']} {size_text(segment['size'], exact_bytes)} at byte {segment['offset']}"
        for segment in file["segments"]
    )
    if len(file["segments"]) > SEGMENTS_INLINE:  # a program of many segments (an LLM's) would take a screen
        segments = (
            f"{counted(len(file['segments']), 'segment')}, "
            f"{size_text(sum(s['size'] for s in file['segments']), exact_bytes)} (-s segments lists them)"
        )
    _pair(grid, "file", size_text(file["size"], exact=True) if exact_bytes else exact_size_text(file["size"]))
    _pair(grid, "format", f"{doc['format']}, program version {file['program_version']}")
    _pair(grid, "document", f"schema version {doc['schema_version']}")
    _pair(grid, "methods", ", ".join(method["name"] for method in doc["methods"]) or "none")
    _pair(grid, "segments", segments or "none")
    named = file.get("named_data") or []
    _pair(
        grid,
        "constant data",
        size_text(file["constant_bytes"], exact_bytes)
        + (
            f", of which named data {size_text(sum({e['segment']: e['size'] for e in named}.values()), exact_bytes)}"
            f" under {len(named)} {'key' if len(named) == 1 else 'keys'}"
            if named
            else ""
        ),
    )
    external = file.get("external")
    if external:
        keys = f"{external['keys']} {'key' if external['keys'] == 1 else 'keys'}"
        _pair(
            grid,
            "external data",
            f"{keys} in {external['data']}, {size_text(external['bytes'], exact_bytes)}"
            if external["data"]
            else f"{keys} in a .ptd data file not given (--data FILE.ptd reads it)",
        )
    for method in doc["methods"]:
        counts = method["counts"]
        _pair(
            grid,
            method["name"],
            ", ".join(
                counted(count, noun)
                for noun, count in (
                    ("value", counts["values"]),
                    ("instruction", counts["instructions"]),
                    ("operator", counts["operators"]),
                    ("delegate", counts["delegates"]),
                )
            ),
        )
        _pair(grid, "", "values: " + ", ".join(f"{count} {kind}" for kind, count in method["values"].items()))
        _pair(grid, "", f"inputs {_value_list(method['inputs'])} -> outputs {_value_list(method['outputs'])}")
        if "returns" in method:  # a constant method: what the runner reads, as --constant-method takes it
            _pair(grid, "", "returns " + ", ".join(json.dumps(value) for value in method["returns"]))
        if method["kernels"] or method["backends"]:
            _pair(grid, "", "needs " + needs_text(method["kernels"], method["backends"]))
    console.print(grid)


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


PEAK_ROWS = 10  # tensors listed at a peak; --json has them all


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
            console.print(
                Text("  by block: " + ", ".join(shares[:6]) + (f", {len(shares) - 6} more" if len(shares) > 6 else ""))
            )
        else:
            console.print(Text("  by block: unknown, the program names no modules", style="dim"))
        table = PlainTable(
            f"held at #{entry['instruction']}, largest first",
            ("value", "right"),
            ("bytes", "right"),
            ("held", "left"),
            ("source", "left"),
        )
        for t in entry["tensors"][:PEAK_ROWS]:
            table.add_row(
                f"v{t['value']}",
                size_text(t["nbytes"], exact_bytes),
                f"#{t['held'][0]}-{t['held'][1]}",
                tuple(re.findall(r"\S+(?: |$)", t["source"])),
            )
        table.print(console)
        rest = entry["tensors"][PEAK_ROWS:]
        if rest:
            console.print(
                Text(
                    f"  and {len(rest)} more ({size_text(sum(t['own_bytes'] for t in rest), exact_bytes)}); "
                    f"--json has them all",
                    style="dim",
                )
            )


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
    (first, last), held = tensor["lifetime"] or (None, None), tensor["held"]
    if first is None:
        return "-"
    return (f"{first}-{last} ", f"held {held[0]}-{held[1]}") if held != [first, last] else f"{first}-{last}"


def _instructions(method: InspectedMethod, console: Console, exact_bytes: bool) -> None:
    if not method["instructions"]:
        console.print(Text("instructions: none", style="dim"))
        return
    console.print(Text("instructions", style="bold"))
    delegates = {delegate["index"]: delegate for delegate in method["delegates"]}
    label = len(f"#{method['instructions'][-1]['index']}")
    room = max(console.width - label - 1, 10)
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
        # a long call wraps under itself, not under the numbers, between its arguments
        for depth, line in enumerate(fold((head, *re.findall(r".+?(?:, |$)", tail)), room)):
            prefix = f"#{row['index']}".rjust(label) if depth == 0 else " " * label
            text.append(prefix, style="dim")
            text.append(" ")
            bold = max(0, min(len(head) - depth * room, len(line)))  # the op name breaks only at full lines
            text.append(line[:bold], style="bold")
            text.append(line[bold:] + "\n")
    console.print(text, end="")


def _call_parts(row: InspectedInstruction, delegates: dict[int, InspectedDelegate]) -> tuple[str, str]:
    """An instruction as (what it runs, shown bold; its arguments)."""
    args, shown = row["args"], row["arguments"]
    if row["kind"] == "kernel":
        returns = _returns(args)
        inputs, results = shown[: len(shown) - returns], shown[len(shown) - returns :]
        return row["op"], f"({', '.join(inputs)})" + (f" -> {', '.join(results)}" if results else "")
    if row["kind"] == "delegate":
        delegate = delegates.get(row["delegate"])
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
    console.print(Text("layout", style="bold"))
    for buffer in method["buffers"]:
        console.print(layout_chart(method, buffer, width=console.width, exact_bytes=exact_bytes))
        console.print()


# Columns whose text may be long; the rest stay on one line.

_VIEWS = {
    "buffers": _buffers,
    "peak": _peak,
    "tensors": _tensors,
    "instructions": _instructions,
    "delegates": _delegates,
    "layout": _layout,
}


def _pair(grid: Table, key: str, value: str) -> None:
    """Plain text: names come from the file and may hold '[', which rich would read as markup."""
    grid.add_row(Text(key), Text(value))


def _value_list(values: list[int], brackets: bool = True) -> str:
    inner = ", ".join(f"v{value}" for value in values)
    return f"[{inner}]" if brackets else inner


def _instruction_ref(index: int | None) -> str:
    return f"#{index}" if index is not None else "-"


def _optional(number: int | None) -> str:
    return "-" if number is None else str(number)


def _shorten(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
