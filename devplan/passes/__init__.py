"""The pass tables a compile runs, its passes in a room per level (export/: over torch's
ExportedProgram; graph/: over a `Lowered`'s graph; method/: over devplan's Method). Graph passes
are short functions over the graph a `Lowered` program holds; the method passes run on the built
Method: copies, alias and compact finish it, place puts a delegate payload on its device, and
concat, schedule and inplace work where lifetimes are known."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Callable

from devplan.ir.lowered import Lowered
from devplan.ir.method import Method
from devplan.ir.role import PROGRAM, Role
from devplan.passes.graph.broadcasts import read_broadcasts_once
from devplan.passes.graph.decompose import decompose
from devplan.passes.graph.fold import Folded, fold_constants
from devplan.passes.graph.permutes import merge_permutes
from devplan.passes.graph.sizes import hoist_sizes
from devplan.passes.graph.views import view_dynamic_copies
from devplan.passes.method.alias import alias_views
from devplan.passes.method.compact import compact
from devplan.passes.method.concat import write_cats_in_place
from devplan.passes.method.copies import insert_copies
from devplan.passes.method.inplace import reuse_dead_inputs
from devplan.passes.method.place import on_device
from devplan.passes.method.schedule import schedule
from devplan.planning.model import DEFAULT_ALIGNMENT

if TYPE_CHECKING:
    from devplan.options import CompileOptions

GraphPasses = tuple[tuple[str, Callable[[Lowered], Lowered]], ...]
# (stage name, pass) in the order they run, before and after fold (which --fold auto runs once
# per policy, and which returns its record beside the program): each takes the Lowered program
# and returns it (the graph edited in place, as torch.fx passes do; anything else replaced)
BEFORE_FOLD: GraphPasses = (
    ("decompose", decompose),
    ("permutes", merge_permutes),
    ("broadcasts", read_broadcasts_once),
)
AFTER_FOLD: GraphPasses = (
    ("views", view_dynamic_copies),
    ("sizes", hoist_sizes),
)


# What a method pass takes as done when it runs (the passes that must come before it, where both
# run), held by a test over every choice of options: compact drops the values copies and alias
# leave unreferenced; inplace decides on the final instruction order (schedule) and must know
# which cat pieces sit inside their result (concat).
RUNS_AFTER = {"compact": ("copies", "alias"), "inplace": ("schedule", "concat")}


def method_passes(options: "CompileOptions", role: Role = PROGRAM) -> list[tuple[str, Callable[[Method], Method]]]:
    """(stage name, pass) in the order they run, for the program's methods and, by `role`,
    every delegate payload (on its backend's device; its inputs and outputs the caller's)."""
    chosen = (
        ("copies", insert_copies, True),
        ("alias", alias_views, True),
        ("compact", compact, True),
        ("place", partial(on_device, device=role.home), role.payload),
        ("concat", write_cats_in_place, options.inplace),
        ("schedule", partial(schedule, alignment=options.alignment or DEFAULT_ALIGNMENT), options.reorder),
        ("inplace", partial(reuse_dead_inputs, borrowed_io=role.payload), options.inplace),
    )
    return [(name, run) for name, run, wanted in chosen if wanted]


@dataclass(frozen=True)
class Pipeline:
    """The pass tables a compile runs, given to the driver as an argument: the graph passes
    before fold, fold, those after it, and the method passes chosen for a role (a test hands it
    a table with a pass broken)."""

    before_fold: GraphPasses = BEFORE_FOLD
    fold: Callable[..., Folded] = fold_constants
    after_fold: GraphPasses = AFTER_FOLD
    method_passes_for: Callable[["CompileOptions", Role], list[tuple[str, Callable[[Method], Method]]]] = method_passes


PIPELINE = Pipeline()  # what a compile runs unless it is handed other tables
