"""What an ExecuTorch backend refused, so that it never makes a model fail that compiles
without it: the op its preprocess failed on, traced back to the op its partitioner took, or the
op its partitioner (or ExecuTorch's lowering around it) failed on, which devplan's lowering
(devplan/passes/export/backends.py) then leaves out of that backend's partitions."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import torch

from devplan.backend import Backend
from devplan.errors import first_line
from devplan.ir.fx import arg_node


@dataclass(frozen=True)
class Fallback:
    """Ops a backend's preprocess refused, left out of its partitions and so on portable
    kernels: the backend's id, the ops, and the backend's reason in one line."""

    backend: str
    ops: tuple[str, ...]
    why: str


class Refused(Exception):
    """Backends refused partitions: what each failed on; the one line --strict-backend prints
    (None: the lowering's own), and the partitioner to leave out when no op could be blamed."""

    def __init__(self, fallbacks: list[Fallback], message: str | None = None, drop: str | None = None) -> None:
        super().__init__(fallbacks[0].why)
        self.fallbacks, self.message, self.drop = fallbacks, message, drop


def preprocess_one(work: tuple[Any, Any, Any]) -> Any:  # ExecuTorch's PreprocessResult, or a Fallback
    """The partition's PreprocessResult, or the Fallback that says what its backend refused
    (plain strings, which a worker's pipe carries)."""
    cls, program, specs = work
    # the partition's ops (a getitem goes with the op it reads), before the backend's passes rewrite them
    given = {n: {n.name, *_roots(n)} for n in _calls(program.graph_module) if n.target is not operator.getitem}
    try:
        result = cls.preprocess(program, specs)
    except Exception as error:  # noqa: BLE001 - the partition's ops go back to the portable kernels
        failed = failing_node(error)
        made_of = {failed.name, *_roots(failed)} if failed is not None else set()
        # the partitioner's ops the failing node was made from (XNNPACK's amax from a max.dim),
        # each partition op when none is known
        ops = [op_name(node) for node, roots in given.items() if roots & made_of] or map(op_name, given)
        return Fallback(cls.__name__, tuple(sorted(set(ops))), first_line(error))
    if not isinstance(result.processed_bytes, bytes) or not result.processed_bytes:
        return Fallback(cls.__name__, tuple(sorted({op_name(n) for n in given})), "its preprocess made no payload")
    return result


def failing_node(error: BaseException) -> torch.fx.Node | None:
    """The op node the backend was compiling when it failed: the innermost frame's `node` (the
    name ExecuTorch's backends give the node they visit) that calls an op; None when no frame
    has one."""
    found, tb = None, error.__traceback__
    while tb is not None:
        node = tb.tb_frame.f_locals.get("node")
        if isinstance(node, torch.fx.Node) and isinstance(
            getattr(node.target, "_op", node.target), torch._ops.OpOverload
        ):
            found = node
        tb = tb.tb_next
    return found


def _roots(node: torch.fx.Node) -> set[str]:
    """The export's nodes `node` was made from, by name: the ends of torch's provenance."""
    found, sources = set(), list(node.meta.get("from_node") or ())
    while sources:
        source = sources.pop()
        if source.from_node:
            sources += source.from_node
        else:
            found.add(source.name)
    return found or {node.name}


def _calls(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function"]


def op_name(node: torch.fx.Node) -> str:
    """An edge op by its ATen op's name (aten.amax.default), as the summary names it."""
    return str(getattr(node.target, "_op", node.target))


def left_out(
    earlier: tuple[Backend, ...], refused: dict[str, frozenset[str]], specs: dict[str, Any], node: torch.fx.Node
) -> bool:
    """Whether a tagged node stays out of its partition: devplan's earlier backends take it
    (an edge op has its ATen op's schema), or the partition's backend refused its op."""
    backend = specs[node.meta["delegation_tag"]].backend_id
    op = arg_node(node, 0) if node.target is operator.getitem else node  # a getitem goes with the op it reads
    return any(b.takes(node) for b in earlier) or op_name(op) in refused.get(backend, ())
