"""Option values the commands parse alike: sizes, NAME=VALUE pairs, the constant methods
compile takes from the command line and from a JSON file; and the values shell completion offers."""

from __future__ import annotations

import functools
from collections.abc import Callable, Container
from pathlib import Path
from typing import Any, TypeVar

import typer

from devplan.errors import DevplanError
from devplan.jsontext import repeated
from devplan.metadata import runner_value

T = TypeVar("T")


def size_option(text: str, flag: str, examples: str) -> int:
    """A size option's bytes (8MiB, 4GiB, 512): a whole number of them, at least one."""
    from devplan.units import size_bytes

    nbytes = size_bytes(text)
    if nbytes is None or nbytes < 1 or nbytes != int(nbytes):
        raise DevplanError(f"bad {flag} {text!r}; give a size such as {examples}")
    return int(nbytes)


# an example of each NAME=VALUE option, for the line that refuses one written otherwise
_EXAMPLES = {"--method": "decode=decode.pt2", "--constant-method": "get_max_seq_len=128"}


def name_value(text: str, option: str, parse: Callable[[str], T]) -> tuple[str, T]:
    """NAME=VALUE of a repeatable option, the value parsed by `parse`; a --method names a file
    (given none, it named the current folder)."""
    name, equals, value = text.partition("=")
    if not equals or not name or (option == "--method" and not value):
        raise DevplanError(f"{option} {text}: write it as NAME=VALUE, e.g. {option} {_EXAMPLES[option]}")
    return name, parse(value)


def named_once(pairs: list[tuple[str, T]], option: str) -> dict[str, T]:
    """NAME=VALUE pairs as a dict, refusing a NAME given twice: a dict would silently keep the
    last, and a program of two methods alike is one ExecuTorch's runtime reads otherwise."""
    if (name := repeated(pairs)) is not None:
        raise DevplanError(f"{option} {name} given twice; give each method once, under a name of its own")
    return dict(pairs)


def constant_value(text: str) -> Any:
    """A constant method's value as JSON (7, 1.5, true, [1, 2], "text"), or else the text itself."""
    from devplan.jsontext import loads

    try:
        return loads(text, f"--constant-method {text[:40]}")
    except ValueError:
        return text


def _unique_keys(path: Path, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object of --metadata, refusing a key given twice (json would keep the last)."""
    if (key := repeated(pairs)) is not None:
        raise DevplanError(f"--metadata {path}: {key} given twice; give each constant method once")
    return dict(pairs)


def constant_methods(metadata: Path | None, texts: list[str]) -> dict[str, Any]:
    """The constant methods of --metadata's file, then of each --constant-method NAME=VALUE."""
    given = named_once([name_value(text, "--constant-method", constant_value) for text in texts], "--constant-method")
    return {**(constant_methods_file(metadata) if metadata is not None else {}), **given}


def constant_methods_file(path: Path) -> dict[str, Any]:
    """--metadata's JSON object of constant methods, each value checked as the runner reads it."""
    from devplan.files import read_input
    from devplan.jsontext import loads

    raw = read_input(path, limit=1 << 20, hint="pass a JSON file of constant methods")
    try:  # JSON text is UTF-8 (RFC 8259); json would guess UTF-16 or 32 from a binary's zeros, and say that
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise DevplanError(
            f"--metadata {path}: not JSON text (not UTF-8: a binary file?); pass a JSON file "
            f"of constant methods, an object of NAME: VALUE"
        ) from None
    try:
        found = loads(text, f"--metadata {path}", object_pairs_hook=functools.partial(_unique_keys, path))
    except ValueError as error:
        raise DevplanError(f"--metadata {path}: not JSON ({error}); write an object of NAME: VALUE") from None
    if not isinstance(found, dict):
        raise DevplanError(f"--metadata {path}: holds a {type(found).__name__}; write an object of NAME: VALUE")
    # checked here too, so that a wrong type is told as the file's
    return {name: runner_value(name, value, f"--metadata {path}:") for name, value in found.items()}


def complete_attention(incomplete: str) -> list[str]:
    """Shell completion's values for --attention."""
    from devplan.options import ATTENTION

    return [name for name in ATTENTION if name.startswith(incomplete)]


def complete_folding(incomplete: str) -> list[str]:
    """Shell completion's values for --fold."""
    from devplan.options import FOLDING

    return [name for name in FOLDING if name.startswith(incomplete)]


def complete_planners(incomplete: str) -> list[str]:
    """Shell completion's values for --planner."""
    from devplan.planning.model import PLANNERS

    return [name for name in PLANNERS if name.startswith(incomplete)]


def complete_backends(incomplete: str) -> list[str]:
    """Shell completion's values for --backend (devplan.backend imports torch: too slow for a Tab)."""
    from devplan.extras import BACKENDS

    return [name for name in BACKENDS if name.startswith(incomplete)]


# compile --help's panels, in the order a user reaches for them (the model and --help stay in "Options")


def in_order(ctx: typer.Context, param: typer.CallbackParam, value: T) -> T:
    """Click calls option callbacks in the order the options first appear on the command
    line: that order is the order backends choose ops in."""
    if value:
        ctx.meta.setdefault("devplan_order", []).append(param.name)
    return value


def given_order(ctx: typer.Context, names: Container[str]) -> list[str]:
    """The options of `names` given, in the order they first appeared (in_order's record)."""
    return [name for name in ctx.meta.get("devplan_order", []) if name in names]
