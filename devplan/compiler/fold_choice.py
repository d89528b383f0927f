"""--fold auto: the graph folded by each policy and planned, the least arena plus constants kept."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from devplan.compiler.lower import Lowering, after_fold
from devplan.compiler.result import FOLDING
from devplan.compiler.stages import Stages
from devplan.errors import BudgetExceeded
from devplan.ir.lowered import Lowered, own_graph
from devplan.ir.planned import PlannedMethod

# the policies --fold auto plans, the local rule first: it is kept where all cost the same
FOLD_POLICIES = ("local", "all", "none")


def fold_auto(low: Lowered, lowering: Lowering, stage: Stages) -> tuple[PlannedMethod, dict[str, Any]]:
    """Each policy planned, the one whose arena plus constants is least kept (the smaller arena
    where they tie); a policy that folds what another did is not planned again, nor none where one
    folds without growing the constants. Each is planned under the stages' own names, its timings
    and dumps kept only for the one kept."""
    fold = lowering.pipeline.fold
    tried: dict[tuple[int, ...], tuple[str, PlannedMethod, dict[str, Any], Stages]] = {}
    over: list[BudgetExceeded] = []  # a policy whose plan is over a --budget is not kept
    for policy in FOLD_POLICIES:
        if policy == "none" and any(f["constant_bytes_added"] <= 0 for _, _, f, _ in tried.values()):
            continue  # a folding that stores no more than it replaces only drops run-time values: none cannot beat it
        quiet = replace(stage, dump_dir=None, seconds={})
        once = quiet("fold", fold, replace(low, gm=own_graph(low.gm)), policy=policy)
        same = tuple(once.folding.get(key, 0) for key in FOLDING)
        if same not in tried:
            try:
                tried[same] = (policy, *after_fold(once, lowering, quiet), quiet)
            except BudgetExceeded as error:
                over.append(error)
    if not tried:
        raise over[0]  # the local rule's
    policy, plan, folding, kept = min(tried.values(), key=lambda t: (_cost(t[1], t[2]), _arena(t[1])))
    choices = [choice(lowering.name, p, planned, f, p == policy) for p, planned, f, _ in tried.values()]
    if stage.dump_dir is None:
        stage.seconds.update(kept.seconds)
    else:  # its stages again, dumped (the same results: a compile is deterministic)
        plan, folding = after_fold(stage("fold", fold, low, policy=policy), lowering, stage)
    return plan, {**folding, "choices": choices}


def choice(method: str, policy: str, plan: PlannedMethod, folding: dict[str, Any], chosen: bool) -> dict[str, Any]:
    """One policy's row in the summary's `folding.choices`."""
    return {
        "method": method,
        "policy": policy,
        "arena": _arena(plan),
        "constant_bytes": folding["stored"],
        "chosen": chosen,
    }


def _arena(plan: PlannedMethod) -> int:
    return sum(buffer.size for buffer in plan.buffers)


def _cost(plan: PlannedMethod, folding: dict[str, Any]) -> int:
    return _arena(plan) + int(folding["stored"])
