"""The memory layout chart: one planned buffer drawn as byte bands (rows) over instructions
(columns), each cell naming the tensor that occupies it.

Drawn from the inspection document alone, so a saved JSON document charts the same. Letters
carry the meaning and colours only help, so the chart reads the same under NO_COLOR."""

from __future__ import annotations

import math
import re
import string
from dataclasses import dataclass

from rich.columns import Columns
from rich.console import Group, RenderableType
from rich.text import Text

from devplan.documents import InspectedBuffer, InspectedMethod, InspectedTensor
from devplan.inspection.placed import held_of, offset_of
from devplan.inspection.sources import STATE, block_of
from devplan.units import natural_key, size_text

GLYPHS = string.ascii_uppercase + string.ascii_lowercase + string.digits
EMPTY = "·"
# Background colours that stay distinguishable on dark and light terminals, paired with black text.
PALETTE = (
    "cyan",
    "magenta",
    "yellow",
    "green",
    "bright_blue",
    "bright_red",
    "bright_cyan",
    "bright_magenta",
    "bright_yellow",
    "bright_green",
    "blue",
    "red",
)
MAX_COLUMNS_PER_INSTRUCTION = 4
BANDS = 26  # runs of instructions a chart of a program without sources groups its tensors by


@dataclass(frozen=True)
class Occupant:
    """A tensor that appears on the chart: its glyph, value index, bytes and live instructions."""

    glyph: str
    style: str
    value: int
    start: int
    end: int
    first: int
    last: int
    group: int  # glyph number: the tensor's own, or its group's (see _groups)


def layout_chart(
    method: InspectedMethod, buffer: InspectedBuffer, width: int = 80, rows: int = 16, exact_bytes: bool = False
) -> Group:
    """The chart of one buffer of one method, with its legend, fitted to width columns."""
    occupants, names = _occupants(method, buffer["mem_id"])
    instruction_count = method["counts"]["instructions"]
    title = Text.assemble(
        (f"layout of buffer {buffer['mem_id']}", "bold"),
        f" · {buffer['device']} · {size_text(buffer['size'], exact_bytes)}",
        f" · peak {size_text(buffer['peak'], exact_bytes)}",
        f" at #{buffer['peak_instruction']}" if buffer["peak_instruction"] is not None else "",
    )
    if buffer["size"] <= 0 or instruction_count == 0 or not occupants:
        return Group(title, Text("  (no live tensors to draw)", style="dim"))
    band = band_size(buffer["size"], rows)
    rows = math.ceil(buffer["size"] / band)
    labels = [size_text(row * band, exact_bytes) for row in range(rows)]
    label_width = max(len(label) for label in labels)
    columns = _columns(instruction_count, max(8, width - label_width - 3))
    lines: list[RenderableType] = [title, _axis(columns, label_width)]
    alive_in_column = [[o for o in occupants if o.first <= last and first <= o.last] for first, last in columns]
    for row, label in enumerate(labels):
        line = Text(f"{label:>{label_width}} │")
        low, high = row * band, min((row + 1) * band, buffer["size"])
        for alive in alive_in_column:
            occupant = _occupant_of(alive, low, high)
            if occupant is None:
                line.append(EMPTY, style="dim")
            else:
                line.append(occupant.glyph, style=occupant.style)
        lines.append(line)
    per_column = columns[0][1] - columns[0][0] + 1
    if len(columns) > instruction_count:
        across = f"{len(columns) // instruction_count} columns = 1 instruction"
    else:
        across = f"one column = {per_column} instruction{'s' if per_column > 1 else ''}"
    lines.append(Text(f"{'':>{label_width}}   one row = {size_text(band, exact_bytes)}; {across}", style="dim"))
    lines.append(_legend(occupants, names, exact_bytes))
    return Group(*lines)


def band_size(size: int, rows: int) -> int:
    """Bytes per row: the smallest 2**k or 3 * 2**k that fits the buffer in at most rows rows,
    so that row labels land on round offsets."""
    needed = math.ceil(size / rows)
    power = 1 << (needed - 1).bit_length()
    three_quarters = power // 4 * 3
    return three_quarters if three_quarters >= needed else power


def _occupants(method: InspectedMethod, mem_id: int) -> tuple[list[Occupant], list[str] | None]:
    """The tensors to draw, and the names of their groups when glyphs stand for groups."""
    placed = [t for t in method["tensors"] if t["mem_id"] == mem_id and t["lifetime"] is not None and t["nbytes"] > 0]
    placed.sort(key=lambda t: t["value"])
    groups, names = _groups(placed)
    occupants = [
        Occupant(
            glyph=GLYPHS[group % len(GLYPHS)],
            style=f"black on {PALETTE[group % len(PALETTE)]}",
            value=t["value"],
            start=offset_of(t),
            end=offset_of(t) + t["nbytes"],
            first=held_of(t)[0],
            last=held_of(t)[1],
            group=group,
        )
        for t, group in zip(placed, groups)
    ]
    return occupants, names


def _groups(placed: list[InspectedTensor]) -> tuple[list[int], list[str] | None]:
    """A glyph number per tensor: its own while glyphs last; beyond, one per block of the
    model (top-level module) that made them, in the order they start, or, for programs
    without sources or with more blocks than glyphs, one per run of instructions in which
    they start. The group names, or None for one glyph per tensor."""
    if len(placed) <= len(GLYPHS):
        return list(range(len(placed))), None
    blocks = [block_of(t) for t in placed]
    names = list(dict.fromkeys(name for _, name in sorted(zip((held_of(t)[0] for t in placed), blocks))))
    if len(names) <= len(GLYPHS) and any(t.get("module") for t in placed):
        number = {name: i for i, name in enumerate(names)}
        return [number[block] for block in blocks], [_state_named(placed) if n == STATE else n for n in names]
    span = math.ceil((max(held_of(t)[0] for t in placed) + 1) / BANDS)
    bands = sorted({held_of(t)[0] // span for t in placed})
    of_band = {band: i for i, band in enumerate(bands)}
    return [of_band[held_of(t)[0] // span] for t in placed], [
        f"made in #{b * span}-{b * span + span - 1}" for b in bands
    ]


def _state_named(placed: list[InspectedTensor]) -> str:
    """The state's group by what the program calls its largest buffers, numbers as * and the
    path cut to its last two parts ('(state) key_cache_*, …', '(state) kv_cache.k_cache, …'):
    what a person recognises a KV cache by, short enough for the legend's columns."""
    sizes: dict[str, int] = {}
    for t in placed:
        if t["role"] == "state":
            named = ".".join((t.get("name") or f"v{t['value']}").split(".")[-2:])
            pattern = re.sub(r"\d+", "*", named)
            sizes[pattern] = sizes.get(pattern, 0) + t["nbytes"]
    ordered = sorted(sizes, key=lambda pattern: (-sizes[pattern], natural_key(pattern)))
    return f"{STATE} {ordered[0]}" + (", …" if len(ordered) > 1 else "")


def _columns(instruction_count: int, available: int) -> list[tuple[int, int]]:
    """Instruction ranges, one per chart column: several columns per instruction when there
    is room, several instructions per column when there is not."""
    if instruction_count <= available:
        repeat = max(1, min(MAX_COLUMNS_PER_INSTRUCTION, available // instruction_count))
        return [(at, at) for at in range(instruction_count) for _ in range(repeat)]
    per_column = math.ceil(instruction_count / available)
    return [(at, min(at + per_column, instruction_count) - 1) for at in range(0, instruction_count, per_column)]


def _axis(columns: list[tuple[int, int]], label_width: int) -> Text:
    """Instruction numbers over the columns where they start, skipping any that would collide."""
    axis = [" "] * len(columns)
    free_from = 0
    for position, (first, _) in enumerate(columns):
        if position and columns[position - 1][0] == first:
            continue
        tick = f"#{first}" if position == 0 else str(first)
        if position >= free_from and position + len(tick) <= len(columns):
            axis[position : position + len(tick)] = tick
            free_from = position + len(tick) + 1
    return Text(f"{'offset':>{label_width}}  " + "".join(axis), style="dim")


def _occupant_of(alive: list[Occupant], low: int, high: int) -> Occupant | None:
    """The tensor shown in a cell: of those alive in its column that overlap its bytes, the
    smallest, so that small tensors beside big ones stay visible; the lowest value index
    breaks ties."""
    best = None
    for occupant in alive:
        if occupant.start < high and low < occupant.end:
            if best is None or occupant.end - occupant.start < best.end - best.start:
                best = occupant
    return best


def _legend(occupants: list[Occupant], names: list[str] | None, exact_bytes: bool) -> Columns | Group:
    if names is None:
        return Columns([_legend_entry(o, exact_bytes) for o in occupants], padding=(0, 2))
    members: dict[int, list[Occupant]] = {}
    for occupant in occupants:
        members.setdefault(occupant.group, []).append(occupant)
    entries = []
    for group, mine in sorted(members.items()):
        first, last = min(o.first for o in mine), max(o.last for o in mine)
        entries.append(
            Text.assemble((mine[0].glyph, mine[0].style), f" {names[group]} ", (f"×{len(mine)} #{first}-{last}", "dim"))
        )
    return Group(
        Text("each glyph: a group of tensors, ×how many, #held from-to", style="dim"), Columns(entries, padding=(0, 2))
    )


def _legend_entry(occupant: Occupant, exact_bytes: bool) -> Text:
    return Text.assemble(
        (occupant.glyph, occupant.style),
        f" v{occupant.value} ",
        f"{occupant.start}..{occupant.end} ",
        (f"{size_text(occupant.end - occupant.start, exact_bytes)} #{occupant.first}-{occupant.last}", "dim"),
    )
