"""Where in a golden file each fact is written, so that CI's annotations of a change (`--format
github`) point at the line a reviewer reads in the pull request, not only at the file.

Read from the file's text as golden_text lays it out (one key a line, two spaces a level): a
golden file laid out otherwise gives no lines, and its annotations name the file alone."""

from __future__ import annotations

import re
from collections.abc import Mapping

KeyPath = tuple[str | int, ...]  # keys and list positions, from the document's root

_KEYED = re.compile(r'"((?:[^"\\]|\\.)*)": (.*?),?$')
_CLOSE = frozenset({"}", "},", "]", "],"})


def key_lines(text: str) -> dict[KeyPath, tuple[int, str]]:
    """Each key's and list item's (line, value as written) by its path of keys and positions:
    ("methods", 0, "buffers", 0, "size") -> (17, "16384"); an object or list opened on the
    line has "{" or "[" as its value."""
    found: dict[KeyPath, tuple[int, str]] = {}
    path: list[KeyPath] = []  # the open containers' paths; each list's next position beside it
    positions: list[int | None] = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or (number == 1 and stripped == "{"):
            continue
        if stripped in _CLOSE:
            if path:
                path.pop()
                positions.pop()
            continue
        keyed = _KEYED.fullmatch(stripped)
        position = positions[-1] if positions else None
        key: str | int
        if keyed is not None and position is None:
            key, value = keyed.group(1), keyed.group(2)
        elif position is not None:  # an item of a list
            key, value = position, stripped.rstrip(",")
            positions[-1] = position + 1
        else:
            return {}  # not laid out as golden_text writes it
        at = (*path[-1], key) if path else (key,)
        found[at] = (number, value)
        if value in ("{", "["):
            path.append(at)
            positions.append(0 if value == "[" else None)
    return found


def change_line(lines: Mapping[KeyPath, tuple[int, str]], method: str | None, subject: str, fact: str) -> int | None:
    """The line of a diff change's fact in a golden file (key_lines), or None where it has none."""
    if method is None:
        return lines.get(("file", "constant_bytes"), (None,))[0] if fact == "constant_bytes" else None
    index = _position(lines, ("methods",), "name", f'"{method}"')
    if index is None:
        return None
    at: KeyPath = ("methods", index)
    if found := re.fullmatch(r"buffer (\d+) \(.*\)", subject):
        buffer = _position(lines, (*at, "buffers"), "mem_id", found[1])
        at = (*at, "buffers", buffer, fact) if buffer is not None else (*at, "buffers")
    elif found := re.fullmatch(r"delegate (\d+)", subject):
        delegate = _position(lines, (*at, "delegates"), "index", found[1])
        at = (*at, "delegates", delegate, fact) if delegate is not None else (*at, "delegates")
    elif found := re.fullmatch(r"device (\S+) \(.*\)", subject):
        at = (*at, "devices", found[1], fact)
    elif subject in ("instructions", "values", "tensors"):
        at = (*at, "counts", subject)
    elif subject in ("operators", "placements", "returns"):
        at = (*at, subject)
    else:
        at = (*at, "name")
    return lines.get(at, lines.get(("methods", index, "name"), (None,)))[0]


def _position(lines: Mapping[KeyPath, tuple[int, str]], within: KeyPath, key: str, value: str) -> int | None:
    """The position of the object in the list at `within` whose `key` is written as `value`."""
    return next(
        (
            position
            for path, (_, written) in lines.items()
            if path[:-2] == within
            and path[-1] == key
            and written == value
            and isinstance(position := path[len(within)], int)  # the list's position, before the key
        ),
        None,
    )
