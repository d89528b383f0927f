"""The largest tensors of a chart named where they are drawn, so that a PNG or a pull request's
preview reads without hovering: those of the most bytes and those with the largest rectangles,
each labelled inside its rectangle where
the text fits, across or turned upward, else beside it on a white ground; no label meets
another, and one that finds no room is left to the tooltip."""

from __future__ import annotations

from html import escape
from typing import Callable

from devplan.documents import InspectedTensor
from devplan.inspection.placed import offset_of
from devplan.inspection.svg_text import ASCENT, DESCENT, Box, text_box
from devplan.units import size_text

LABELS, HEAVIEST = 8, 3  # tensors labelled per chart, of them the most bytes whatever their rectangles
SIZE = 10  # their font size
PAD = 2  # px between a label and its rectangle's edge


def largest(tensors: list[InspectedTensor]) -> list[InspectedTensor]:
    """The HEAVIEST tensors of the most bytes (an LLM's logits, held for one instruction, are a
    sliver), then those with the largest rectangles (bytes times instructions held: what
    catches the eye, a KV cache), LABELS in all; ties go to the lower value index."""

    def area(t: InspectedTensor) -> int:
        first, last = t["held"] or (0, 0)
        return t["nbytes"] * (last - first + 1)

    heaviest = sorted(tensors, key=lambda t: (-t["nbytes"], t["value"]))[:HEAVIEST]
    widest = sorted(tensors, key=lambda t: (-area(t), t["value"]))
    return list({t["value"]: t for t in [*heaviest, *widest][: LABELS + HEAVIEST]}.values())[:LABELS]


def texts(t: InspectedTensor) -> list[str]:
    """A tensor's label, longest first: its value, the end of its name or module, its size."""
    parts = (t.get("name") or t.get("module") or "").split(".")
    # its last two parts, and the one before where they start with a number (layers.0.self_attn, not 0.self_attn)
    short = ".".join(parts[-3:] if len(parts) > 2 and parts[-2].isdigit() else parts[-2:])
    size = size_text(t["nbytes"])
    full = [f"v{t['value']} {short} · {size}"] if short else []
    return [*full, f"v{t['value']} · {size}", f"v{t['value']}"]


def tensor_labels(
    tensors: list[InspectedTensor],
    x: Callable[[float], float],
    y: Callable[[float], float],
    plot: Box,
    taken: list[Box],
) -> list[str]:
    """The labels of the largest tensors, each placed inside its rectangle or beside it within
    the plot, clear of every box in `taken` (which gains each label placed)."""
    parts = []
    for t in largest(tensors):
        first, last = t["held"] or (0, 0)
        rect = Box(x(first), y(offset_of(t)), x(last + 1), y(offset_of(t) + t["nbytes"]))
        placed = _place(t, rect, plot, taken)
        if placed is None:
            continue
        text, px, py, anchor, rotated, box, inside = placed
        taken.append(box)
        turn = f' transform="rotate(-90 {px:.2f} {py:.2f})"' if rotated else ""
        # a label beside its tensor stands on white, and outlines the rectangle it names among its neighbours
        ground = (
            ""
            if inside
            else f'<rect x="{rect.left:.2f}" y="{rect.top:.2f}" width="{rect.right - rect.left:.2f}" '
            f'height="{rect.bottom - rect.top:.2f}" fill="none" stroke="#222" stroke-width="1.2"/>'
            f'<rect x="{box.left - 1:.2f}" y="{box.top:.2f}" width="{box.right - box.left + 2:.2f}" '
            f'height="{box.bottom - box.top:.2f}" fill="white" fill-opacity="0.85"/>'
        )
        parts.append(
            f'<g class="label {"inside" if inside else "beside"}" data-value="{t["value"]}">{ground}'
            f'<text x="{px:.2f}" y="{py:.2f}" font-size="{SIZE}" text-anchor="{anchor}"{turn}>{escape(text)}</text></g>'
        )
    return parts


def _place(
    t: InspectedTensor, rect: Box, plot: Box, taken: list[Box]
) -> tuple[str, float, float, str, bool, Box, bool] | None:
    """The first place that fits, trying each text longest first: inside across, inside turned
    upward, then beside the rectangle (right, left, below, above)."""
    middle_x, middle_y = (rect.left + rect.right) / 2, (rect.top + rect.bottom) / 2
    room = Box(rect.left + PAD, rect.top + PAD / 2, rect.right - PAD, rect.bottom - PAD / 2)
    baseline = middle_y + (ASCENT - DESCENT) * SIZE / 2  # the text's middle at the rectangle's
    for text in texts(t):
        for px, py, rotated in (
            (middle_x, baseline, False),
            (middle_x + (ASCENT - DESCENT) * SIZE / 2, middle_y, True),
        ):
            box = text_box(px, py, text, SIZE, "middle", rotated)
            if box.within(room) and not any(box.meets(b) for b in taken):
                return text, px, py, "middle", rotated, box, True
    for text in texts(t):
        for px, py, anchor in (
            (rect.right + PAD + 1, baseline, "start"),
            (rect.left - PAD - 1, baseline, "end"),
            (middle_x, rect.bottom + PAD + ASCENT * SIZE, "middle"),
            (middle_x, rect.top - PAD - DESCENT * SIZE, "middle"),
        ):
            box = text_box(px, py, text, SIZE, anchor)
            if box.within(plot) and not any(box.meets(b) for b in taken):
                return text, px, py, anchor, False, box, False
    return None
