"""A delegate payload's memory as a window of its caller's buffer: the compile spec
`memory_window` says at which byte of which of the calling method's buffers the payload's
one planned buffer starts. The payload stays a program of its own (its buffer size is its
plan's); the spec only tells a runtime to lend it those bytes for the call instead of giving
it an arena, so that delegates that never run at once share one device's memory."""

from __future__ import annotations

import re
from typing import Iterable

from devplan.errors import DevplanError

MEMORY_WINDOW = "memory_window"


def window_spec(mem_id: int, offset: int) -> tuple[str, bytes]:
    return MEMORY_WINDOW, f"mem_id={mem_id},offset={offset}".encode()


def read_window(specs: Iterable[tuple[str, bytes]], where: str) -> tuple[int, int] | None:
    """(mem_id, offset) from a delegate's compile specs, None when it has no window."""
    for key, value in specs:
        if key != MEMORY_WINDOW:
            continue
        match = re.fullmatch(rb"mem_id=(\d{1,9}),offset=(\d{1,19})", value)
        if match is None:
            raise DevplanError(
                f"{where}: compile spec {MEMORY_WINDOW} is {value[:64]!r}, not "
                f"'mem_id=N,offset=N'; the program is damaged"
            )
        return int(match.group(1)), int(match.group(2))
    return None
