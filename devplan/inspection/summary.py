"""The program as a whole in the terminal: the summary (the file, its segments, each method in
a few lines, and the constant methods an LLM runner reads on one line between them) and the
segments' table."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from devplan.documents import InspectDocument, InspectedMethod, Segment
from devplan.inspection.kernels import needs_text
from devplan.inspection.tables import PlainTable
from devplan.units import counted, exact_size_text, size_text


def constant_methods(doc: InspectDocument) -> dict[str, InspectedMethod]:
    """The methods that only return values (an LLM program's get_max_seq_len and the like), by
    name, where the document holds a method that runs too: each is one `name=value` on the
    summary's line, not a section of its own. Shown alone (--method), one keeps its sections."""
    constant = {m["name"]: m for m in doc["methods"] if "returns" in m and not m["counts"]["instructions"]}
    return constant if len(constant) < len(doc["methods"]) else {}


def _returned(values: list[Any]) -> str:
    """A constant method's outputs as --constant-method takes them: one value, or a JSON list."""
    return json.dumps(values[0]) if len(values) == 1 else json.dumps(values)


SEGMENTS_INLINE = 4  # segments the summary lists on its line; more are a count, and -s segments lists them


def segments_view(segments: list[Segment], console: Console, exact_bytes: bool) -> None:
    if not segments:
        console.print(Text("segments: none", style="dim"))
        return
    table = PlainTable("segments", ("#", "right"), ("size", "right"), ("at byte", "right"))
    for segment in segments:
        table.add_row(str(segment["index"]), size_text(segment["size"], exact_bytes), str(segment["offset"]))
    table.print(console)


def summary_view(doc: InspectDocument, console: Console, exact_bytes: bool) -> None:
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
    _pair(
        grid,
        "format",
        f"{doc['format']}, program version {file['program_version']}; inspect's document "
        f"schema version {doc['schema_version']}",
    )
    folded = constant_methods(doc)
    running = ", ".join(m["name"] for m in doc["methods"] if m["name"] not in folded) or "none"
    # what the runner reads, one line for them all, as --constant-method takes them
    constants = ", ".join(f"{m['name']}={_returned(m['returns'])}" for m in folded.values())
    _pair(grid, "methods", f"{running}; constant methods: {constants}" if folded else running)
    named = file.get("named_data") or []
    # one segment holding the constants and nothing else is said once, on the constants' line
    alone = len(file["segments"]) == 1 and not named and file["segments"][0]["size"] == file["constant_bytes"]
    if not alone:
        _pair(grid, "segments", segments or "none")
    _pair(
        grid,
        "constant data",
        size_text(file["constant_bytes"], exact_bytes)
        + (
            f", of which named data {size_text(sum({e['segment']: e['size'] for e in named}.values()), exact_bytes)}"
            f" under {len(named)} {'key' if len(named) == 1 else 'keys'}"
            if named
            else f" in segment #{file['segments'][0]['index']} at byte {file['segments'][0]['offset']}"
            if alone
            else ""
        ),
    )
    external = file.get("external")
    if external:
        stored = external["bytes"]  # known, as data is, once the .ptd is read
        keys = f"{external['keys']} {'key' if external['keys'] == 1 else 'keys'}"
        _pair(
            grid,
            "external data",
            f"{keys} in {external['data']}, {size_text(stored, exact_bytes)}"
            if external["data"] and stored is not None
            else f"{keys} in a .ptd data file not given (--data FILE.ptd reads it)",
        )
    for method in doc["methods"]:
        if method["name"] in folded:
            continue
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


def _pair(grid: Table, key: str, value: str) -> None:
    """Plain text: names come from the file and may hold '[', which rich would read as markup."""
    grid.add_row(Text(key), Text(value))


def _value_list(values: list[int], brackets: bool = True) -> str:
    inner = ", ".join(f"v{value}" for value in values)
    return f"[{inner}]" if brackets else inner
