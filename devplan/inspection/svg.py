"""The memory layout as a picture: for every planned buffer, a chart of byte offset (down)
over instructions (across) with one rectangle per tensor for as long as it holds its bytes,
a tooltip naming the tensor and where it came from, the largest tensors named in place
(svg_labels.py), each block of the model bracketed under the instructions that run it and
delegate calls and device copies marked on that axis (svg_axis.py), axes with ticks, the lower
bound and the peak drawn as labelled lines, and a legend. Drawn from the inspection document alone,
deterministic to the byte, and readable without a browser's help (a plain SVG 1.1 file, no
scripts). Tensors of zero bytes hold nothing and are left out, of the drawing and its counts."""

from __future__ import annotations

import math
from html import escape
from typing import Callable

from devplan.documents import InspectDocument, InspectedBuffer, InspectedMethod
from devplan.inspection.layout import band_size
from devplan.inspection.placed import held_of, offset_of
from devplan.inspection.sources import top_module
from devplan.inspection.svg_axis import LANE, MARKS, bracket_parts, brackets, has_marks, instruction_marks, legend_items
from devplan.inspection.svg_labels import tensor_labels
from devplan.inspection.svg_text import DESCENT, FONT, Box, text_width
from devplan.units import inert, size_text

WIDTH, HEIGHT = 760, 320  # plot area of one chart, in px
LEFT, TOP, GAP = 96, 56, 48  # margins: the byte axis (labels, title), the title, space between charts
Scale = Callable[[float], float]  # an instruction or a byte offset to its place in px
TICKS = 8  # about this many ticks on each axis
# Fill colours by role, so inputs, outputs and activations read apart at a glance.
FILLS = {
    "input": "#4e79a7",
    "output": "#f28e2b",
    "input+output": "#b07aa1",
    "state": "#76b7b2",
    "activation": "#59a14f",
}
OTHER_FILL = "#bab0ac"
SECOND_SHADE = "#a6d96a"  # activations of every other block of the model, so that layers read apart
BOUND, PEAK = "#1f77b4", "#e15759"  # the lower bound's and the peak's lines


def layout_svg(doc: InspectDocument) -> str:
    charts = [(method, buffer) for method in doc["methods"] for buffer in method["buffers"]]
    parts: list[str] = []
    top = TOP
    for method, buffer in charts:
        drawn, bottom = _chart(method, buffer, top)
        parts += drawn
        top = bottom + GAP + TOP
    if not charts:
        parts.append(f'<text x="{LEFT}" y="{TOP}">no planned buffers</text>')
    height = top - TOP - GAP + 10 if charts else TOP + 20
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{LEFT + WIDTH + 170}" height="{height}" '
        f'font-family="{FONT}" font-size="11">',
        f"<title>{escape(doc['file']['name'])}: planned memory over time</title>",
        '<rect width="100%" height="100%" fill="white"/>',
        *parts,
        "</svg>",
    ]
    # written to standard output (--svg -) it is printed: no name in it may command a CI runner
    return inert("\n".join(parts) + "\n")


def _chart(method: InspectedMethod, buffer: InspectedBuffer, top: int) -> tuple[list[str], int]:
    """One buffer's chart from `top` down, and where it ends."""
    steps = max(1, method["counts"]["instructions"])
    size = max(1, buffer["size"])

    def x(step: float) -> float:
        return LEFT + step * WIDTH / steps

    def y(offset: float) -> float:
        return top + offset * HEIGHT / size

    tensors = sorted(
        (t for t in method["tensors"] if t["mem_id"] == buffer["mem_id"] and t["held"] and t["nbytes"]),
        key=lambda t: (-t["nbytes"], t["value"]),
    )  # large first, so small ones stay visible on top
    parts = [
        f'<text x="{LEFT}" y="{top - 30}" font-size="13" font-weight="bold">method {escape(method["name"])} · '
        f"buffer {buffer['mem_id']} ({escape(buffer['device'])}) · {size_text(buffer['size'])} planned</text>",
        f'<text x="{LEFT}" y="{top - 14}">{len(tensors)} tensors over {steps} instructions · lower bound '
        f"{size_text(buffer['lower_bound'])} · peak {size_text(buffer['peak'])}"
        + (f" at #{buffer['peak_instruction']}" if buffer["peak_instruction"] is not None else "")
        + "</text>",
        f'<rect x="{LEFT}" y="{top}" width="{WIDTH}" height="{HEIGHT}" fill="#f4f4f4" stroke="#999"/>',
    ]
    axis = top + HEIGHT + (MARKS if has_marks(method) else 0)  # under the marks' strip, if any
    parts += _grid(steps, size, x, y, top, axis)
    blocks = {
        name: i
        for i, name in enumerate(
            dict.fromkeys(top_module(t.get("module")) for t in sorted(tensors, key=lambda t: held_of(t)[0]))
        )
    }
    for t in tensors:
        fill = FILLS.get(t["role"], OTHER_FILL)
        if t["role"] == "activation" and blocks[top_module(t.get("module"))] % 2:
            fill = SECOND_SHADE
        first, last = held_of(t)
        top_px, bottom_px = y(offset_of(t)), y(offset_of(t) + t["nbytes"])
        tip = (
            f"v{t['value']} · {t.get('source') or t['role']}\n{t['dtype']}{list(t['shape'])} · {t['nbytes']} B at "
            f"offset {t['offset']} · held #{first}-#{last} · {t['role']}"
        )
        parts.append(
            f'<rect x="{x(first):.2f}" y="{top_px:.2f}" width="{x(last + 1) - x(first):.2f}" '
            f'height="{max(bottom_px - top_px, 0.5):.2f}" fill="{fill}" '
            f'fill-opacity="0.85" stroke="#333" stroke-width="0.3"><title>{escape(tip)}</title></rect>'
        )
    parts += instruction_marks(method, x, top, top + HEIGHT)
    placed = brackets(method, x)
    parts += bracket_parts(placed, x, axis + 32)
    parts += _marks(buffer, x, y, top)
    plot = Box(LEFT, top, LEFT + WIDTH, top + HEIGHT)
    parts += tensor_labels(tensors, x, y, plot, [])
    lanes = max((b.lane + 1 for b in placed), default=0)
    title = axis + 32 + LANE * lanes + (4 if lanes else -10)
    parts.append(f'<text x="{LEFT + WIDTH / 2:.0f}" y="{title}" text-anchor="middle">instruction →</text>')
    legend, bottom = _legend(title + 22, has_marks(method))
    return parts + legend, bottom


def _grid(steps: int, size: int, x: Scale, y: Scale, top: int, axis: int) -> list[str]:
    """Ticks, labels and faint grid lines on both axes (the instructions' under `axis`), and
    the byte axis's name, turned upward left of its widest label so that the two never meet."""
    parts = []
    every = _nice_step(steps / TICKS)
    for step in range(0, steps, every):  # at the middle of the instruction's column
        px = x(step + 0.5)
        parts.append(f'<line x1="{px:.2f}" y1="{axis}" x2="{px:.2f}" y2="{axis + 5}" stroke="#555"/>')
        parts.append(f'<text x="{px:.2f}" y="{axis + 17}" text-anchor="middle">#{step}</text>')
    band = band_size(size, TICKS)
    offsets = range(0, size + 1, band)
    widest = max(text_width(size_text(offset), 11) for offset in offsets)
    for offset in offsets:
        py = y(offset)
        parts.append(
            f'<line x1="{LEFT}" y1="{py:.2f}" x2="{LEFT + WIDTH}" y2="{py:.2f}" stroke="#ddd" stroke-width="0.5"/>'
        )
        parts.append(f'<line x1="{LEFT - 5}" y1="{py:.2f}" x2="{LEFT}" y2="{py:.2f}" stroke="#555"/>')
        parts.append(f'<text x="{LEFT - 8}" y="{py + 4:.2f}" text-anchor="end">{size_text(offset)}</text>')
    title_x = max(14, round(LEFT - 8 - widest - 6 - DESCENT * 11))
    parts.append(
        f'<text x="{title_x}" y="{top + HEIGHT / 2:.0f}" text-anchor="middle" '
        f'transform="rotate(-90 {title_x} {top + HEIGHT / 2:.0f})">byte offset ↓</text>'
    )
    return parts


def _nice_step(rough: float) -> int:
    """The smallest 1, 2 or 5 times a power of ten that is at least `rough` (and at least 1)."""
    power = 10 ** max(0, math.floor(math.log10(max(rough, 1))))
    return int(next(step * power for step in (1, 2, 5, 10) if step * power >= rough))


def _marks(buffer: InspectedBuffer, x: Scale, y: Scale, top: int) -> list[str]:
    """The lower bound and the peak's bytes as horizontal lines, the peak's instruction as a
    vertical one, each labelled at the right where the labels cannot meet."""
    right = LEFT + WIDTH + 6
    bound_y, peak_y = y(buffer["lower_bound"]), y(buffer["peak"])
    # the two labels sit apart even when the lines coincide: the bound's above, the peak's below
    # the bound's dashes go over the peak's line, so both show where they coincide
    parts = [
        f'<line x1="{LEFT}" y1="{peak_y:.2f}" x2="{LEFT + WIDTH}" y2="{peak_y:.2f}" stroke="{PEAK}" '
        f'stroke-width="2"><title>peak: {buffer["peak"]} B in use</title></line>',
        f'<text x="{right}" y="{peak_y + 12:.2f}" fill="{PEAK}">peak {size_text(buffer["peak"])}</text>',
        f'<line x1="{LEFT}" y1="{bound_y:.2f}" x2="{LEFT + WIDTH}" y2="{bound_y:.2f}" stroke="{BOUND}" '
        f'stroke-width="2" stroke-dasharray="6 4"><title>lower bound: {buffer["lower_bound"]} B</title></line>',
        f'<text x="{right}" y="{bound_y - 3:.2f}" fill="{BOUND}">lower bound {size_text(buffer["lower_bound"])}</text>',
    ]
    if buffer["peak_instruction"] is not None:
        px = x(buffer["peak_instruction"] + 0.5)
        parts.append(
            f'<line x1="{px:.2f}" y1="{top}" x2="{px:.2f}" y2="{top + HEIGHT}" stroke="{PEAK}" '
            f'stroke-dasharray="4 3"><title>peak at instruction {buffer["peak_instruction"]}</title></line>'
        )
        parts.append(
            f'<text x="{px:.2f}" y="{top - 3}" fill="{PEAK}" text-anchor="middle">'
            f"peak at #{buffer['peak_instruction']}</text>"
        )
    return parts


def _legend(baseline: int, marks: bool) -> tuple[list[str], int]:
    """The fills and lines in one row; the marks on the instruction axis (where the chart has
    any) and the tooltips' hint in a second. Returns the parts and the legend's bottom."""
    parts: list[str] = []
    at: float = LEFT
    swatches = (
        *((role, (fill,)) for role, fill in FILLS.items() if role != "activation"),
        ("activation (blocks alternate)", (FILLS["activation"], SECOND_SHADE)),
        ("other", (OTHER_FILL,)),
    )
    for label, fills in swatches:
        for fill in fills:
            parts.append(
                f'<rect x="{at}" y="{baseline - 9}" width="10" height="10" fill="{fill}" stroke="#333" '
                f'stroke-width="0.3"/>'
            )
            at += 12
        parts.append(f'<text x="{at + 2}" y="{baseline}">{label}</text>')
        at = round(at + 14 + text_width(label, 11), 1)
    for label, color, dash in (("lower bound", BOUND, "6 4"), ("peak", PEAK, "none")):
        parts.append(
            f'<line x1="{at}" y1="{baseline - 4}" x2="{at + 18}" y2="{baseline - 4}" stroke="{color}" '
            f'stroke-width="2" stroke-dasharray="{dash}"/>'
        )
        parts.append(f'<text x="{at + 22}" y="{baseline}">{label}</text>')
        at = round(at + 34 + text_width(label, 11), 1)
    second, at = baseline + 18, LEFT
    for mark, label in legend_items() if marks else []:
        parts.append(f'<g transform="translate({at} {second})">{mark}</g>')
        parts.append(f'<text x="{at + 14}" y="{second}">{label}</text>')
        at = round(at + 30 + text_width(label, 11), 1)
    parts.append(f'<text x="{at}" y="{second}" fill="#666">hover a rectangle, bracket or mark for what it is</text>')
    return parts, second + 6
