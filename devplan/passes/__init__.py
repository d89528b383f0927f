"""Passes. Graph passes are short functions over the graph a `Lowered` program holds; the
method passes (concat, schedule, inplace) run on the built Method, where lifetimes are known."""
from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Callable

from devplan.method import Method
from devplan.passes.concat import write_cats_in_place
from devplan.passes.decompose import decompose
from devplan.passes.fold import fold_constants
from devplan.passes.graph import Lowered
from devplan.passes.inplace import reuse_dead_inputs
from devplan.passes.schedule import schedule
from devplan.passes.sizes import hoist_sizes, view_dynamic_copies

if TYPE_CHECKING:
    from devplan.options import CompileOptions

# (stage name, pass) in the order they run: each takes the Lowered program and returns it
# (the graph edited in place, as torch.fx passes do; anything else replaced)
GRAPH_PASSES: tuple[tuple[str, Callable[[Lowered], Lowered]], ...] = (
    ("decompose", decompose), ("fold", fold_constants), ("views", view_dynamic_copies), ("sizes", hoist_sizes))


def method_passes(options: "CompileOptions", borrowed_io: bool = False) -> list[tuple[str, Callable[[Method], Method]]]:
    """(stage name, pass) in the order they run, for the program and (`borrowed_io`: its
    inputs and outputs are the caller's tensors) every delegate payload."""
    chosen = (("concat", write_cats_in_place, options.inplace),
              ("schedule", partial(schedule, alignment=options.alignment), options.reorder),
              ("inplace", partial(reuse_dead_inputs, borrowed_io=borrowed_io), options.inplace))
    return [(name, run) for name, run, wanted in chosen if wanted]
