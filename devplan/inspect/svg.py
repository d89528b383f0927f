"""The memory layout as a picture: for every planned buffer, a chart of byte offset (down)
over instructions (across) with one rectangle per tensor for as long as it holds its bytes,
and a tooltip naming the tensor. Drawn from the inspection document alone, deterministic to
the byte, and readable without a browser's help (a plain SVG 1.1 file, no scripts)."""
from __future__ import annotations

from html import escape

from devplan.inspect.units import size_text

WIDTH, HEIGHT = 760, 320           # plot area of one chart, in px
LEFT, TOP, GAP = 80, 40, 70        # margins: byte labels, title, space between charts
# Fill colours by role, so inputs, outputs and activations read apart at a glance.
FILLS = {"input": "#4e79a7", "output": "#f28e2b", "input+output": "#b07aa1", "activation": "#59a14f"}


def layout_svg(doc: dict) -> str:
    charts = [(method, buffer) for method in doc["methods"] for buffer in method["buffers"]]
    height = TOP + len(charts) * (HEIGHT + GAP) + 20
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{LEFT + WIDTH + 20}" height="{height}" '
             f'font-family="monospace" font-size="11">',
             f'<title>{escape(doc["file"]["name"])}: planned memory over time</title>']
    for number, (method, buffer) in enumerate(charts):
        parts += _chart(method, buffer, TOP + number * (HEIGHT + GAP))
    if not charts:
        parts.append(f'<text x="{LEFT}" y="{TOP}">no planned buffers</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _chart(method: dict, buffer: dict, top: int) -> list[str]:
    steps = max(1, method["counts"]["instructions"])
    size = max(1, buffer["size"])
    x = lambda step: LEFT + step * WIDTH / steps
    y = lambda offset: top + offset * HEIGHT / size
    parts = [
        f'<text x="{LEFT}" y="{top - 12}" font-size="13">method {escape(method["name"])} · buffer {buffer["mem_id"]} '
        f'({escape(buffer["device"])}) · {size_text(buffer["size"])} planned · lower bound '
        f'{size_text(buffer["lower_bound"])} · peak {size_text(buffer["peak"])}</text>',
        f'<rect x="{LEFT}" y="{top}" width="{WIDTH}" height="{HEIGHT}" fill="#f4f4f4" stroke="#999"/>',
    ]
    tensors = sorted((t for t in method["tensors"] if t["mem_id"] == buffer["mem_id"] and t["held"] and t["nbytes"]),
                     key=lambda t: (-t["nbytes"], t["value"]))  # large first, so small ones stay visible on top
    for t in tensors:
        first, last = t["held"]
        top_px, bottom_px = y(t["offset"]), y(t["offset"] + t["nbytes"])
        tip = (f'v{t["value"]} {t["dtype"]} {list(t["shape"])} · {t["nbytes"]} B at offset {t["offset"]} · '
               f'instructions {first}-{last} · {t["role"]}')
        parts.append(f'<rect x="{x(first):.2f}" y="{top_px:.2f}" width="{x(last + 1) - x(first):.2f}" '
                     f'height="{max(bottom_px - top_px, 0.5):.2f}" fill="{FILLS.get(t["role"], "#bab0ac")}" '
                     f'fill-opacity="0.85" stroke="#333" stroke-width="0.3"><title>{escape(tip)}</title></rect>')
    if buffer["peak_instruction"] is not None:
        px = x(buffer["peak_instruction"] + 0.5)
        parts.append(f'<line x1="{px:.2f}" y1="{top}" x2="{px:.2f}" y2="{top + HEIGHT}" stroke="#e15759" '
                     f'stroke-dasharray="4 3"><title>peak at instruction {buffer["peak_instruction"]}</title></line>')
    for fraction in (0, 0.5, 1):
        offset = round(buffer["size"] * fraction)
        parts.append(f'<text x="{LEFT - 6}" y="{y(offset) + 4:.2f}" text-anchor="end">{size_text(offset)}</text>')
    parts.append(f'<text x="{LEFT}" y="{top + HEIGHT + 16}">#0</text>')
    parts.append(f'<text x="{LEFT + WIDTH}" y="{top + HEIGHT + 16}" text-anchor="end">#{steps - 1}</text>')
    parts.append(f'<text x="{LEFT + WIDTH / 2:.0f}" y="{top + HEIGHT + 16}" text-anchor="middle">instruction →  '
                 f'(byte offset ↓; blue input, orange output, purple both, green activation)</text>')
    return parts
