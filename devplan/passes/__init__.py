"""Passes. Graph passes are short functions over the graph a `Lowered` program holds; the
method passes (concat, schedule, inplace) run on the built Method, where lifetimes are known."""
from __future__ import annotations

from functools import partial
from typing import Callable

from devplan.method import Method
from devplan.passes.concat import write_cats_in_place
from devplan.passes.inplace import reuse_dead_inputs
from devplan.passes.schedule import schedule


def method_passes(*, inplace: bool, reorder: bool, alignment: int,
                  borrowed_io: bool = False) -> list[tuple[str, Callable[[Method], Method]]]:
    """(stage name, pass) in the order they run, for the program and (`borrowed_io`: its
    inputs and outputs are the caller's tensors) every delegate payload."""
    chosen = (("concat", write_cats_in_place, inplace),
              ("schedule", partial(schedule, alignment=alignment), reorder),
              ("inplace", partial(reuse_dead_inputs, borrowed_io=borrowed_io), inplace))
    return [(name, run) for name, run, wanted in chosen if wanted]
