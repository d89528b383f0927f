"""What runs when, under the SVG's instruction axis: each block of the model bracketed over the
instructions that run it (not over its tensors' lives, which reach far past the block on an
LLM, where a layer's outputs live on), the brackets set in lanes so that no two in a lane
meet; and the instructions that call a delegate or copy a tensor between the host and a device
marked where they run, so a PNG shows them without hovering."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Any, Callable

from devplan.documents import InspectedMethod
from devplan.inspection.sources import top_module
from devplan.inspection.svg_text import text_width
from devplan.pte.kinds import COPIES

LANE = 14  # px between lanes of brackets
MARKS = 12  # px of the strip under the plot where delegate calls and copies are marked
DELEGATE, COPY = "#7b3fa0", "#d37295"  # a delegate call's mark, a copy's
TO_DEVICE, TO_HOST = COPIES


@dataclass(frozen=True)
class Bracket:
    """A run of a block's instructions (first to last, none of another block between), its
    lane and the label drawn under it ("" where no form of the name fits)."""

    name: str
    first: int
    last: int
    lane: int
    label: str


def brackets(method: InspectedMethod, x: Callable[[float], float]) -> list[Bracket]:
    """Each run of one block's instructions, in the order they run, each in the first lane
    where it and its label meet nothing drawn there before. Instructions of no block (the
    model's own ops, those no module made) neither start nor end a run."""
    runs: list[list[Any]] = []  # [name, first, last]
    for row in method.get("instructions", []):
        name = top_module(row["module"])
        if name.startswith("("):
            continue
        if runs and runs[-1][0] == name:
            runs[-1][2] = row["index"]
        else:
            runs.append([name, row["index"], row["index"]])
    ends: list[float] = []  # each lane's right edge so far: runs come left to right
    placed = []
    for name, first, last in runs:
        left, right = x(first), x(last + 1)
        label = _label(name, right - left)
        middle, half = (left + right) / 2, text_width(label, 11) / 2
        start, end = min(left, middle - half), max(right, middle + half)
        lane = next((i for i, edge in enumerate(ends) if edge <= start), len(ends))
        if lane == len(ends):
            ends.append(end)
        ends[lane] = end
        placed.append(Bracket(name, first, last, lane, label))
    return placed


def _label(name: str, room: float) -> str:
    """The block's name, or its last two parts (h.3), if it is no wider than its bracket and
    a character either side; else none, and the bracket's tooltip names it."""
    short = ".".join(name.split(".")[-2:])
    return next((text for text in (name, short) if text_width(text, 11) <= room + 12), "")


def bracket_parts(placed: list[Bracket], x: Callable[[float], float], baseline: float) -> list[str]:
    """The brackets drawn, lane 0 first under the axis, each lane LANE px under the one before."""
    parts = []
    for b in placed:
        left, right, y = x(b.first), x(b.last + 1), baseline + LANE * b.lane
        span = f"#{b.first}" if b.first == b.last else f"#{b.first}-#{b.last}"
        parts.append(
            f'<path class="bracket" data-lane="{b.lane}" d="M{left + 1:.2f} {y - 13} v3 H{max(right - 1, left + 1):.2f} '
            f'v-3" fill="none" stroke="#777"><title>{escape(b.name)}: instructions {span}</title></path>'
        )
        if b.label:
            parts.append(f'<text x="{(left + right) / 2:.2f}" y="{y}" text-anchor="middle">{escape(b.label)}</text>')
    return parts


def instruction_marks(method: InspectedMethod, x: Callable[[float], float], top: float, bottom: float) -> list[str]:
    """A mark in the strip under the plot (from `bottom`) at each delegate call and each copy
    between the host and a device, and a faint line over the plot (from `top`) at each delegate
    call, so that a reader sees which tensors live across it. Each says what it is on hover."""
    delegates = {d["index"]: d for d in method.get("delegates", [])}
    devices = {t["value"]: t["device"] for t in method.get("tensors", [])}
    parts = []
    for row in method.get("instructions", []):
        px, middle = x(row["index"] + 0.5), bottom + MARKS / 2
        if row["kind"] == "delegate":
            delegate = delegates.get(-1 if row["delegate"] is None else row["delegate"])
            where = f" on {delegate['target_device']}" if delegate and delegate["target_device"] else ""
            tip = f"#{row['index']}: calls delegate {row['delegate']}" + (
                f" ({delegate['id']}{where})" if delegate else ""
            )
            parts.append(
                f'<line x1="{px:.2f}" y1="{top}" x2="{px:.2f}" y2="{bottom}" stroke="{DELEGATE}" '
                f'stroke-opacity="0.35" stroke-dasharray="2 2"/>'
            )
            parts.append(
                f'<path class="mark delegate" data-instruction="{row["index"]}" d="M{px:.2f} {middle - 5} '
                f'l5 5 l-5 5 l-5 -5 z" fill="{DELEGATE}"><title>{escape(tip)}</title></path>'
            )
        elif row["op"] in COPIES and len(row["args"]) > 1:
            to_device = row["op"] == TO_DEVICE
            device = devices.get(row["args"][1 if to_device else 0], "?")
            tip = f"#{row['index']}: copies v{row['args'][0]} " + (
                f"to {device}" if to_device else f"from {device} to the host"
            )
            # a copy to a device points up, into the plot; a copy back to the host points down
            tip_y, base_y = (middle - 5, middle + 5) if to_device else (middle + 5, middle - 5)
            parts.append(
                f'<path class="mark copy" data-instruction="{row["index"]}" d="M{px:.2f} {tip_y} '
                f'L{px + 4.5:.2f} {base_y} L{px - 4.5:.2f} {base_y} z" fill="{COPY}"><title>{escape(tip)}</title></path>'
            )
    return parts


def has_marks(method: InspectedMethod) -> bool:
    """Whether the method calls a delegate or copies between devices: only then is the strip drawn."""
    return any(row["kind"] == "delegate" or row["op"] in COPIES for row in method.get("instructions", []))


def legend_items() -> list[tuple[str, str]]:
    """The marks' legend entries: (the mark's path at the origin, what it means)."""
    return [
        (f'<path d="M5 -9 l5 5 l-5 5 l-5 -5 z" fill="{DELEGATE}"/>', "delegate call"),
        (f'<path d="M5 -9 L9.5 1 L0.5 1 z" fill="{COPY}"/>', "copy to a device"),
        (f'<path d="M5 1 L9.5 -9 L0.5 -9 z" fill="{COPY}"/>', "copy to the host"),
    ]
