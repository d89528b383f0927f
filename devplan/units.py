"""Byte counts as people write them (--budget 1=512KiB, --max-memory 4GiB, a diff's
--tolerance) and read them in a terminal, and names from files made safe to print. Torch-free:
the CLI and the inspection side read it without loading a compiler."""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

_UNITS = ("KiB", "MiB", "GiB", "TiB")
# what a size given on the command line may be counted in, in any case
UNITS = {
    "b": 1,
    "kb": 10**3,
    "kib": 2**10,
    "mb": 10**6,
    "mib": 2**20,
    "gb": 10**9,
    "gib": 2**30,
    "tb": 10**12,
    "tib": 2**40,
}


def size_bytes(text: str) -> Fraction | None:
    """'512KiB', ' 1.5 MiB ', '1048576' -> bytes (possibly fractional, for the caller to
    refuse in its own words); None when the text is not a size."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    if not match or match.group(2).lower() not in UNITS | {"": 1}:
        return None
    return Fraction(match.group(1)) * UNITS.get(match.group(2).lower(), 1)


def size_text(nbytes: int, exact: bool = False) -> str:
    """'3.4 KiB' style (binary units, one decimal rounded half to even, as a float prints it),
    or the exact count as 'N B' when exact. Counted in integers: a size given on the command
    line (--budget cpu=<400 digits>TiB) is past what a float holds."""
    if exact or abs(nbytes) < 1024:
        return f"{nbytes} B"
    unit = min((abs(nbytes).bit_length() - 1) // 10, len(_UNITS))  # 1: KiB
    tenths = round(Fraction(abs(nbytes) * 10, 1024**unit))
    return f"{'-' if nbytes < 0 else ''}{tenths // 10}.{tenths % 10} {_UNITS[unit - 1]}"


def exact_size_text(nbytes: int) -> str:
    """A size where the exact bytes matter (checks, diffs, budgets): '36.2 KiB (37,068 bytes)';
    below a KiB, '768 B' is exact already."""
    return size_text(nbytes) if abs(nbytes) < 1024 else f"{size_text(nbytes)} ({nbytes:,} bytes)"


def counted(n: int, noun: str) -> str:
    """'1 instruction', '8 instructions': a count with its noun, singular for one."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def natural_key(name: str) -> tuple[tuple[int, int, str], ...]:
    """Sorts names as people count: 'h.2' before 'h.10' (each run of digits compares as its number)."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name) if part)


def printable(text: str) -> str:
    """Names from a file may hold newlines or terminal escape sequences: written as escapes,
    they can neither split a line of output nor clear or recolour the user's terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


# what GitHub's runner reads as a workflow command in a line of a job's output (its lines end
# at CR, LF or both): `::` after the line's leading whitespace, or the legacy `##[` anywhere
_COMMAND = re.compile(r"((?:\A|[\r\n])[^\S\r\n]*):(?=:)|##\[")


def inert(text: str) -> str:
    """`text` as no line of it can command a GitHub runner: the colon starting a line's `::`
    and the second # of `##[` written as JSON's escapes, visible in text and read back as the
    same name from JSON (where a line never starts with `:`). Every line devplan prints passes
    here, but for its own `--format github` annotations."""
    return _COMMAND.sub(lambda m: m.group(1) + "\\u003a" if m.group(1) is not None else "#\\u0023[", text)


def printable_tree(value: Any) -> Any:
    """`value` (a document of dicts, lists and scalars) with every string made printable.
    Strings that are printable already, and lists of numbers, are kept as they are: a
    100,000-tensor document took seconds to copy."""
    kind = type(value)
    if kind is str:
        return value if value.isprintable() else printable(value)
    if kind is dict:
        return {printable_tree(k): printable_tree(v) for k, v in value.items()}
    if kind is list:
        return value if all(type(v) is int for v in value) else [printable_tree(v) for v in value]
    return value
