"""A program (or a golden file) from a stream, read no further than its first bytes allow."""

from __future__ import annotations

from typing import BinaryIO

from devplan.errors import DevplanError
from devplan.files import read_bounded
from devplan.pte.header import HEAD_BYTES, MAX_PROGRAM_BYTES, program_bound


def read_piped(stream: BinaryIO, name: str, hint: str, json_limit: int | None = None) -> bytes:
    """A program from a stream (standard input), read no further than its first bytes allow:
    refused at once where they cannot begin one, and past the size its header accounts for
    (else 16 GiB of /dev/zero were read before the refusal). With `json_limit`, a stream that
    starts as a JSON object (a golden file, for diff) is read up to that many bytes instead."""
    try:
        head = read_bounded(stream, HEAD_BYTES - 1)
        limit, bound = _piped_limit(head, name, json_limit)
        data = read_bounded(stream, limit, read=head)
    except OSError as error:
        raise DevplanError(f"{name}: cannot read ({error.strerror or error}); {hint}") from None
    if len(data) > limit:
        raise DevplanError(f"{name}: more than the {limit} bytes {bound}; {hint}")
    return data


def _piped_limit(head: bytes, name: str, json_limit: int | None) -> tuple[int, str]:
    """How much of a stream that starts with `head` to read, and what sets that bound."""
    if json_limit is not None and head and head.lstrip()[:1] in (b"{", b""):
        return json_limit, "devplan reads of a golden file"
    return min(program_bound(head, name) or MAX_PROGRAM_BYTES, MAX_PROGRAM_BYTES), "its header accounts for"
