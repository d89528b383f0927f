"""Terminal views of the inspection document, one per section, for a rich Console.

Works from the document alone (never the program), so what the terminal shows and what
--json prints cannot disagree. Fits 80 columns; letters and words carry every fact, so
NO_COLOR and pipes lose nothing."""
from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from devplan.inspect.layout import layout_chart
from devplan.inspect.sections import DEFAULT_SECTIONS, SECTIONS
from devplan.inspect.units import size_text



def render(doc: dict, console: Console, sections: Sequence[str] = DEFAULT_SECTIONS, exact_bytes: bool = False) -> None:
    """Print the chosen sections of doc, in SECTIONS order; exact_bytes shows every size in bytes."""
    chosen = [section for section in SECTIONS if section in sections]
    if "summary" in chosen:
        _summary(doc, console, exact_bytes)
    for method in doc["methods"]:
        per_method = [section for section in chosen if section != "summary"]
        if not per_method:
            continue
        console.print(Rule(Text(f"method {method['name']}", style="bold"), align="left"))
        for section in per_method:
            _VIEWS[section](method, console, exact_bytes)


def _summary(doc: dict, console: Console, exact_bytes: bool) -> None:
    file = doc["file"]
    console.print(Rule(Text(file["name"], style="bold"), align="left"))
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    segments = "; ".join(
        f"#{segment['index']} {size_text(segment['size'], exact_bytes)} at byte {segment['offset']}"
        for segment in file["segments"]
    )
    _row(grid, "file", f"{size_text(file['size'], exact_bytes)} ({file['size']} bytes)")
    _row(grid, "format", f"{doc['format']}, program version {file['program_version']}")
    _row(grid, "document", f"schema version {doc['schema_version']}")
    _row(grid, "methods", ", ".join(method["name"] for method in doc["methods"]) or "none")
    _row(grid, "segments", segments or "none")
    _row(grid, "constant data", size_text(file["constant_bytes"], exact_bytes))
    for method in doc["methods"]:
        counts = method["counts"]
        _row(
            grid,
            method["name"],
            f"{counts['values']} values, {counts['instructions']} instructions, "
            f"{counts['operators']} operators, {counts['delegates']} delegates",
        )
        _row(grid, "", "values: " + ", ".join(f"{count} {kind}" for kind, count in method["values"].items()))
        _row(grid, "", f"inputs {_value_list(method['inputs'])} -> outputs {_value_list(method['outputs'])}")
    console.print(grid)


def _buffers(method: dict, console: Console, exact_bytes: bool) -> None:
    if not method["buffers"]:
        console.print(Text("buffers: none (no planned memory)", style="dim"))
        return
    table = _table("buffers", ("mem_id", "right"), ("device", "left"), ("size", "right"), ("tensors", "right"),
                   ("peak", "right"), ("busiest", "right"), ("lower bound", "right"), ("size/bound", "right"))
    for buffer in method["buffers"]:
        ratio = f"{buffer['size'] / buffer['lower_bound']:.3f}" if buffer["lower_bound"] else "-"
        _row(
            table,
            str(buffer["mem_id"]),
            buffer["device"],
            size_text(buffer["size"], exact_bytes),
            str(buffer["tensors"]),
            size_text(buffer["peak"], exact_bytes),
            _instruction_ref(buffer["peak_instruction"]),
            size_text(buffer["lower_bound"], exact_bytes),
            ratio,
        )
    console.print(table)


def _tensors(method: dict, console: Console, exact_bytes: bool) -> None:
    if not method["tensors"]:
        console.print(Text("tensors: none", style="dim"))
        return
    table = _table("tensors", ("value", "right"), ("dtype", "left"), ("shape", "left"), ("mem", "right"),
                   ("offset", "right"), ("nbytes", "right"), ("device", "left"), ("life", "left"), ("role", "left"))
    for tensor in method["tensors"]:
        lifetime = tensor["lifetime"]
        _row(
            table,
            f"v{tensor['value']}",
            tensor["dtype"],
            "×".join(str(size) for size in tensor["shape"]) or "scalar",
            _optional(tensor["mem_id"]),
            _optional(tensor["offset"]),
            size_text(tensor["nbytes"], exact_bytes),
            tensor["device"],
            f"{lifetime[0]}-{lifetime[1]}" if lifetime is not None else "-",
            tensor["role"],
        )
    console.print(table)


def _instructions(method: dict, console: Console, exact_bytes: bool) -> None:
    if not method["instructions"]:
        console.print(Text("instructions: none", style="dim"))
        return
    console.print(Text("instructions", style="bold"))
    delegates = {delegate["index"]: delegate for delegate in method["delegates"]}
    # A grid, so that a long call wraps under itself rather than under the numbers.
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", style="dim", no_wrap=True)
    grid.add_column()
    for row in method["instructions"]:
        grid.add_row(Text(f"#{row['index']}"), _call_text(row, delegates))
    console.print(grid)


def _call_text(row: dict, delegates: dict[int, dict]) -> Text:
    args = row["args"]
    if row["kind"] == "kernel":
        inputs, returns = _split_returns(args)
        text = Text(row["op"], style="bold")
        text.append(f"({_value_list(inputs, brackets=False)})")
        if returns:
            text.append(f" -> {_value_list(returns, brackets=False)}")
        return text
    if row["kind"] == "delegate":
        delegate = delegates.get(row["delegate"])
        backend = delegate["id"] if delegate else "?"
        return Text.assemble((f"delegate {row['delegate']} {backend}", "bold"), f"({_value_list(args, brackets=False)})")
    if row["kind"] == "move":
        return Text.assemble(("move", "bold"), f" v{args[0]} -> v{args[1]}")
    return Text.assemble((row["kind"], "bold"), f"({_value_list(args, brackets=False)})")


def _split_returns(args: list[int]) -> tuple[list[int], list[int]]:
    """Kernel arguments end with the out= arguments followed by the returns, which name the
    same values again; the longest such repeated tail is the returns."""
    for count in range(len(args) // 2, 0, -1):
        if args[-count:] == args[-2 * count:-count]:
            return args[:-count], args[-count:]
    return args, []


def _delegates(method: dict, console: Console, exact_bytes: bool) -> None:
    if not method["delegates"]:
        console.print(Text("delegates: none", style="dim"))
        return
    table = _table("delegates", ("#", "right"), ("backend", "left"), ("target", "left"), ("payload", "right"),
                   ("stored", "left"), ("compile specs", "left"))
    for delegate in method["delegates"]:
        specs = "; ".join(f"{spec['key']}={_shorten(spec['value'])}" for spec in delegate["compile_specs"])
        _row(
            table,
            str(delegate["index"]),
            delegate["id"],
            delegate["target_device"] or "-",
            size_text(delegate["payload_size"], exact_bytes),
            f"{delegate['location']} {delegate['payload_index']}",
            specs or "-",
        )
    console.print(table)


def _layout(method: dict, console: Console, exact_bytes: bool) -> None:
    if not method["buffers"]:
        console.print(Text("layout: no planned buffers", style="dim"))
        return
    console.print(Text("layout", style="bold"))
    for buffer in method["buffers"]:
        console.print(layout_chart(method, buffer, width=console.width, exact_bytes=exact_bytes))
        console.print()


# Columns whose text may be long; the rest stay on one line.
_WRAPPING = ("shape", "compile specs")

_VIEWS = {
    "buffers": _buffers,
    "tensors": _tensors,
    "instructions": _instructions,
    "delegates": _delegates,
    "layout": _layout,
}


def _table(title: str, *columns: tuple[str, str]) -> Table:
    table = Table(
        title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
        pad_edge=False, collapse_padding=True, show_edge=False,
    )
    for header, justify in columns:
        table.add_column(header, justify=justify, no_wrap=header not in _WRAPPING, overflow="fold")
    return table


def _row(table: Table, *cells: str) -> None:
    """Cells are plain text: names and compile specs come from the file and may hold '['."""
    table.add_row(*(Text(cell) for cell in cells))


def _value_list(values: list[int], brackets: bool = True) -> str:
    inner = ", ".join(f"v{value}" for value in values)
    return f"[{inner}]" if brackets else inner


def _instruction_ref(index: int | None) -> str:
    return f"#{index}" if index is not None else "-"


def _optional(number: int | None) -> str:
    return "-" if number is None else str(number)


def _shorten(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
