"""JSON from the user's options (--metadata, --constant-method, --partitioner's keyword
arguments), read with its nesting bounded first: Python's json module recurses once per level
and ends in a RecursionError (an internal error) on a few thousand brackets; and the numbers
devplan's documents give, which JSON must be able to hold."""

from __future__ import annotations

import json
import math
import re
from typing import Any, Sequence

from devplan.errors import DevplanError

# constant methods are flat (a list of scalars, one level; --metadata's object two) and a
# partitioner's keyword arguments a few levels at most; more is a mistake or an attack
MAX_DEPTH = 32
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"?', re.DOTALL)  # a string, or an unterminated one to the end
_BRACKET = re.compile(r"[\[\]{}]")


def depth(text: str) -> int:
    """How deep the brackets of `text` nest outside its strings (brackets in strings are text)."""
    level = deepest = 0
    for bracket in _BRACKET.findall(_STRING.sub("", text)):
        level = level + 1 if bracket in "[{" else max(level - 1, 0)
        deepest = max(deepest, level)
    return deepest


def loads(text: str | bytes, what: str, **options: Any) -> Any:
    """json.loads(text, **options), refusing as `what` a text nested deeper than MAX_DEPTH
    before it is parsed; what is not JSON stays json's ValueError, which each caller words for
    its option."""
    decoded = text.decode("utf-8", errors="surrogateescape") if isinstance(text, bytes) else text
    if depth(decoded) > MAX_DEPTH:
        raise DevplanError(
            f"{what}: JSON nested deeper than {MAX_DEPTH} levels, which devplan reads; "
            f"write flat values (a constant method is a scalar or a list of them)"
        )
    return json.loads(text, **options)


def repeated(pairs: Sequence[tuple[object, object]]) -> object | None:
    """The first key of (key, value) pairs given a second time, or None: a dict, json's objects
    among them, would keep the last of two without a word."""
    seen: set[object] = set()
    for key, _ in pairs:
        if key in seen:
            return key
        seen.add(key)
    return None


def number(value: Any) -> Any:
    """A value as a JSON document holds it: a float JSON has no number for (NaN, the infinities,
    a constant method's or a run's output may be one) as the string protobuf's JSON mapping
    writes for it, "NaN", "Infinity" or "-Infinity"; a list item by item; anything else as it
    is. Python's json writes bare NaN tokens that strict parsers refuse, devplan's golden reader
    among them, and NaN never equals itself where a golden file compares values."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    return [number(item) for item in value] if isinstance(value, list) else value
