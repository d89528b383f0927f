"""JSON from the user's options (--metadata, --constant-method, --partitioner's keyword
arguments), read with its nesting bounded first: Python's json module recurses once per level
and ends in a RecursionError (an internal error) on a few thousand brackets."""

from __future__ import annotations

import json
import re

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


def loads(text: str | bytes, what: str, **options):
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


def repeated(pairs: list) -> object | None:
    """The first key of (key, value) pairs given a second time, or None: a dict, json's objects
    among them, would keep the last of two without a word."""
    seen: set = set()
    for key, _ in pairs:
        if key in seen:
            return key
        seen.add(key)
    return None
