"""What a running compile shows a person watching it: the stage it is in, the inputs
--quantize has calibrated on of how many, and, while the program file goes out, the bytes
written of the file's size, as rich's progress display on
stderr. Nothing at all when stderr is not a terminal (a pipe, a file, CI's log) or with
--quiet, so that scripts read only what they asked for."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from devplan.units import size_text


class CompileProgress:
    """A context manager whose `stage`, `calibrated` and `written` are compile's on_stage,
    on_calibrated and on_written; without a console they do nothing."""

    def __init__(self, console: Console | None) -> None:
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=console is None,
        )
        self._task: TaskID | None = None

    def __enter__(self) -> "CompileProgress":
        self._progress.start()
        self._task = self._progress.add_task("devplan compile: load", total=None)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._progress.stop()

    def stage(self, name: str) -> None:
        self._update(f"devplan compile: {name}", completed=0, total=None)

    def calibrated(self, done: int, total: int) -> None:
        self._update(
            f"devplan compile: quantize, calibrating on input {done:,} of {total:,}", completed=done, total=total
        )

    def written(self, done: int, total: int) -> None:
        self._update(f"devplan compile: write {size_text(done)} of {size_text(total)}", completed=done, total=total)

    def _update(self, description: str, **fields: Any) -> None:
        if self._task is not None:
            self._progress.update(self._task, description=description, **fields)


def compile_progress(quiet: bool, console: Console | None = None) -> CompileProgress:
    """The progress of a compile on `console` (default: stderr), shown only on a terminal and
    unless `quiet`."""
    console = console if console is not None else Console(stderr=True)
    return CompileProgress(console if console.is_terminal and not quiet else None)
