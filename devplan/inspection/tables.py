"""The inspect views' tables of plain text cells, laid out directly: rich's Table measures every
cell through its layout engine, which takes seconds for the thousands of rows a big program
has. render.py fills them; this module fits them to the console."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.text import Text

WRAPPING = ("source", "life", "compile specs", "shape", "planned")  # the order in which they give up width


class PlainTable:
    """A titled table of plain text cells. Columns are two spaces apart. A cell is a string or a tuple of pieces; a column in
    WRAPPING folds its cells between pieces when that makes the table fit the console. A
    table that cannot fit is printed unfolded, one line per row, so that lines stay whole for
    grep and the terminal wraps them, not us. The last column, when named as `below`, goes on
    a line of its own under each row where it would get fewer than BELOW_WIDTH columns."""

    BELOW_WIDTH = 24

    def __init__(self, title: str, *columns: tuple[str, str], below: str | None = None) -> None:
        self.title, self.columns, self.below = title, list(columns), below
        self.rows: list[list[tuple[str, ...]]] = []

    def add_row(self, *cells: str | tuple[str, ...]) -> None:
        self.rows.append([(cell,) if isinstance(cell, str) else cell for cell in cells])

    def print(self, console: Console) -> None:
        if self.below and self._room_for_last(console) < self.BELOW_WIDTH:
            table = PlainTable(self.title, *self.columns[:-1])
            table.rows = [row[:-1] for row in self.rows]
            # a cell saying "none" ("-") in the column is left out below, not given a line
            under = [fold(row[-1], console.width - 4) if row[-1] != ("-",) else [] for row in self.rows]
            console.print(table._text(console, under), soft_wrap=True)
            return
        console.print(self._text(console, None), soft_wrap=True)

    def _natural(self) -> list[int]:
        return [
            max([len(header)] + [len("".join(row[i])) for row in self.rows])
            for i, (header, _) in enumerate(self.columns)
        ]

    def _room_for_last(self, console: Console) -> int:
        """Columns left for the last one once every other column has folded as far as it may."""
        used = sum(narrowest(header, width) for width, (header, _) in zip(self._natural()[:-1], self.columns[:-1]))
        return console.width - used - 2 * (len(self.columns) - 1)

    def _text(self, console: Console, under: list[list[str]] | None) -> Text:
        """The table; `under`, lines to print dim and indented below each row."""
        natural = self._natural()
        widths, excess = list(natural), sum(natural) + 2 * (len(natural) - 1) - console.width
        for name in WRAPPING:
            i = next((i for i, (header, _) in enumerate(self.columns) if header == name), None)
            if excess > 0 and i is not None:
                cut = min(excess, widths[i] - narrowest(name, widths[i]))
                widths[i], excess = widths[i] - cut, excess - cut
        if excess > 0:
            widths = natural
        text = Text(self.title + "\n", style="bold")
        text.append(self._line([header for header, _ in self.columns], widths) + "\n", style="bold")
        text.append("─" * (sum(widths) + 2 * (len(widths) - 1)) + "\n")  # after any column shrank
        for index, row in enumerate(self.rows):
            folded = [fold(pieces, width) for pieces, width in zip(row, widths)]
            for depth in range(max(len(lines) for lines in folded)):
                text.append(self._line([lines[depth] if depth < len(lines) else "" for lines in folded], widths) + "\n")
            for line in under[index] if under else ():
                text.append(f"    {line}\n", style="dim")
        text.rstrip()
        return text

    def _line(self, cells: Sequence[str], widths: Sequence[int]) -> str:
        return "  ".join(
            cell.rjust(width) if justify == "right" else cell.ljust(width)
            for cell, width, (_, justify) in zip(cells, widths, self.columns)
        ).rstrip()


def narrowest(header: str, natural: int) -> int:
    """How narrow a column may fold: a wrapping one to its header or 8 columns, others not at all."""
    return min(natural, max(len(header), 8)) if header in WRAPPING else natural


MIN_FOLD = 10


def fold(pieces: tuple[str, ...], width: int) -> list[str]:
    """Lines of at most `width` characters, breaking between pieces, and inside a piece only
    when it alone is wider. A width under MIN_FOLD (a terminal a few columns wide, or none)
    folds at MIN_FOLD: at 0 a piece never got shorter and the loop never ended."""
    width = max(width, MIN_FOLD)
    lines = [""]
    for piece in pieces:
        if lines[-1] and len(lines[-1]) + len(piece) > width:
            lines.append("")
        lines[-1] += piece
        while len(lines[-1]) > width:
            lines[-1:] = [lines[-1][:width], lines[-1][width:]]
    return [line.rstrip() for line in lines]
