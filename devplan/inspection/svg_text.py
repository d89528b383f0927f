"""How much room a line of the SVG's text takes, so that the picture can place its labels
where they meet nothing: each character's advance in DejaVu Sans (the face the SVG names
first, and what sans-serif is on most Linux renderers; Verdana's and Helvetica's are no wider),
and the box a text element covers."""

from __future__ import annotations

from dataclasses import dataclass

FONT = "DejaVu Sans, Verdana, sans-serif"
# DejaVu Sans's advance of each printable ASCII character (space to ~), in thousandths of an em
_REGULAR = (
    318, 401, 460, 838, 636, 950, 780, 275, 390, 390, 500, 838, 318, 361, 318, 337, 636, 636, 636, 636, 636, 636,
    636, 636, 636, 636, 337, 337, 838, 838, 838, 531, 1000, 684, 686, 698, 770, 632, 575, 775, 752, 295, 295, 656,
    557, 863, 748, 787, 603, 787, 695, 635, 611, 732, 684, 989, 685, 611, 685, 390, 337, 390, 838, 500, 500, 613,
    635, 550, 635, 615, 352, 635, 634, 278, 278, 579, 278, 974, 634, 612, 635, 635, 411, 521, 392, 634, 592, 818,
    592, 592, 525, 636, 337, 636, 838,
)  # fmt: skip
_BOLD = 1.1  # the bold face is at most a tenth wider
_OTHER = 1000  # a character outside ASCII (·, →, ↓): no wider than an em
ASCENT, DESCENT = 0.76, 0.24  # of the font size: the ink of capitals and digits above the baseline, of descenders below


@dataclass(frozen=True)
class Box:
    """The rectangle a drawn thing covers, in px: left, top, right, bottom."""

    left: float
    top: float
    right: float
    bottom: float

    def meets(self, other: Box) -> bool:
        """Whether the two share more than an edge."""
        return (
            self.left < other.right and other.left < self.right and self.top < other.bottom and other.top < self.bottom
        )

    def within(self, other: Box) -> bool:
        return (
            other.left <= self.left
            and self.right <= other.right
            and other.top <= self.top
            and self.bottom <= other.bottom
        )


def text_width(text: str, size: float, bold: bool = False) -> float:
    """The advance of `text` at font size `size`, in px."""
    total = sum(_REGULAR[ord(c) - 32] if 32 <= ord(c) < 127 else _OTHER for c in text)
    return total * size / 1000 * (_BOLD if bold else 1)


def text_box(x: float, y: float, text: str, size: float, anchor: str = "start", rotated: bool = False) -> Box:
    """The box of a text element at (x, y) with its text-anchor; `rotated` is turned a quarter
    counter-clockwise about (x, y), as rotate(-90 x y) turns it, so that it reads upward."""
    width = text_width(text, size)
    start = {"start": 0.0, "middle": -width / 2, "end": -width}[anchor]
    if rotated:  # its baseline runs upward through x; its glyphs stand to the baseline's left
        return Box(x - ASCENT * size, y - start - width, x + DESCENT * size, y - start)
    return Box(x + start, y - ASCENT * size, x + start + width, y + DESCENT * size)
