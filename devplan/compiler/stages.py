"""Runs a compile's stages: each timed, told, dumped and checked, a failure named by its stage."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, TypeVar

from devplan.dump import stage_text
from devplan.errors import DevplanError, InternalError
from devplan.files import refuse_overwrite, write_atomic
from devplan.planning.verify import PlanError
from devplan.wellformed import Malformed, check_stage

T = TypeVar("T")


@dataclass
class Stages:
    """Runs a compile's stages: each timed, reported to `on_stage`, dumped to `dump_dir`, and
    a failure that is not a DevplanError, or the plan verifier refusing devplan's own plan,
    named as devplan's own bug in that stage (EXIT_INTERNAL)."""

    dump_dir: Path | None = None
    on_stage: Callable[[str], None] | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    prefix: str = ""
    checks: bool = False  # each result checked (devplan/wellformed.py), so a broken pass is named by its stage
    kept: tuple[str | os.PathLike[str], ...] = ()  # the files the compile reads and writes, which no dump may replace

    def __call__(self, name: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        name = self.prefix + name
        if self.on_stage:
            self.on_stage(name)
        began = time.perf_counter()
        try:
            result = fn(*args, **kwargs)
        except PlanError as error:  # the verifier refusing a plan devplan made: devplan's bug, not the input's
            raise InternalError.of(name, error) from error
        except (DevplanError, KeyboardInterrupt, MemoryError):
            raise
        except Exception as error:  # anything else is devplan's own bug: say where it happened
            raise InternalError.of(name, error) from error
        self.seconds[name] = time.perf_counter() - began
        if self.dump_dir is not None:  # the write stage returns nothing: what it wrote where
            _dump(self.dump_dir, len(self.seconds), name, result if result is not None else args[0], self.kept)
        if self.checks:
            try:
                check_stage(result)
            except Malformed as error:
                raise InternalError(name) from error
        return result

    def within(self, prefix: str) -> "Stages":
        """The same run, its stage names prefixed (a delegate payload's: delegate_0.build)."""
        return replace(self, prefix=f"{self.prefix}{prefix}.")


def _dump(folder: Path, step: int, name: str, result: object, kept: tuple[str | os.PathLike[str], ...]) -> None:
    """One readable file per stage (devplan/dump.py), so that a regression shows as a file diff;
    never over one of the compile's own files (a model named 01-load.txt in the folder was
    replaced by its dump)."""
    path = folder / f"{step:02d}-{name}.txt"
    refuse_overwrite(path, kept, "--dump-dir")
    # devplan names these files: a link planted as one of them is replaced, never written through
    write_atomic(path, stage_text(result, name).encode(), follow_links=False, parents=True)
