"""Compute once, at compile time, whatever depends only on constants (the transpose of a
weight, a scale folded into a bias), so that it is stored rather than planned and run."""

from __future__ import annotations

import logging
import operator
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

import torch

from devplan.errors import DevplanError, first_line
from devplan.ir.lowered import Lowered
from devplan.units import size_text

_log = logging.getLogger("devplan.fold")

_NONDETERMINISTIC = {
    "aten::rand",
    "aten::randn",
    "aten::native_dropout",
    "aten::bernoulli",
    "aten::randint",
    # their contents are whatever the memory held
    "aten::empty",
    "aten::empty_like",
    "aten::empty_strided",
    "aten::new_empty",
    "aten::new_empty_strided",
}
# Quantized weights are stored quantized, whatever their scales and zero points weigh: a
# dequantized copy would be float at rest, which is what quantizing them was to avoid.
_KEPT_QUANTIZED = ("quantized_decomposed::dequantize_",)


# A constant subgraph whose inputs the run also reads keeps them stored: folding it adds its
# result to the file, which is worth it only when the run saves more than that, and never
# past this many bytes (an expand or repeat of a weight stays a run-time op).
SHARED_FOLD_CAP = 1 << 20
# What the pass may hold in all is twice the bytes the program stores, but never less than
# this: a small model computes from its weights more than twice their bytes, each step within
# SHARED_FOLD_CAP (a 2-layer int4-quantized Llama's weights made float hold 5.4 times them),
# and its folding stays as it was; a large one's weights that grow so are left to run time
# step by step.
HELD_FLOOR = 16 * SHARED_FOLD_CAP


@dataclass(frozen=True)
class Folded:
    """The program folded, beside what folding did: subgraphs, shared_inputs, constant_bytes_added,
    run_bytes_removed (empty where nothing was tried: the summary counts nothing folded)."""

    program: Lowered
    folding: Mapping[str, int] = field(default_factory=dict)


def fold_constants(low: Lowered, policy: str = "local") -> Folded:
    """Replace each constant-only subgraph whose result is used at run time by a stored
    constant. When nothing else reads its inputs, it is folded if the result is no larger
    than they are (the constant bytes never grow). When the run reads them too (a projection
    weight applied to the input and to a position table), they stay stored and the result is
    added: it is folded when it is no larger than the weights it is computed from nor
    SHARED_FOLD_CAP, and the bytes the run needs at once to compute it (`_run_peak`) exceed
    the bytes it adds; a subgraph whose result is too large (a repeat) has its inputs
    considered in its place. `Folded.folding` says what was folded and what it cost. That is
    `policy` local; all folds every subgraph whatever its bytes, as ExecuTorch's const-prop
    does (a repeat of a position table stored, not planned); none folds nothing.

    Every step on the way is bounded before it is evaluated, from the node's fake value (shape
    and dtype): a result larger than both the constants it is computed from and
    SHARED_FOLD_CAP stays a run-time op, and so does everything computed from it. So is their
    sum (`_Held`): the pass holds every result it computes until it has chosen what to store,
    so past twice the program's own constant bytes (or HELD_FLOOR) it computes and stores
    nothing more. So compile-time work is bounded by what the program stores, never by shapes
    or steps a small file can name (`w.expand(10**6, 10**4).contiguous()` from one weight,
    or `w.expand(2**18)` then 3,000 adds)."""
    if policy == "none":
        return Folded(low)
    gm = low.gm
    values: dict[torch.fx.Node, torch.Tensor] = {}
    cone: dict[torch.fx.Node, set[torch.fx.Node]] = {}
    held = _Held.of(low)
    for node in gm.graph.nodes:
        if node.op == "placeholder" and node.name in low.constants:
            values[node], cone[node] = low.constants[node.name], {node}
        elif node.op == "get_attr":
            values[node], cone[node] = getattr(gm, node.target), {node}
        elif node.op == "call_function" and _foldable(node, values):
            inside = {node}.union(*(cone[n] for n in node.all_input_nodes))
            leaf_bytes = sum(_nbytes(values[n]) for n in inside if n.op != "call_function")
            if _result_bytes(node) > max(leaf_bytes, SHARED_FOLD_CAP) or not held.admits(node):
                continue  # too large to compute here: left to run time
            args, kwargs = torch.fx.map_arg((node.args, node.kwargs), values.__getitem__)
            try:
                values[node] = node.target(*args, **kwargs)
            except (RuntimeError, TypeError, ValueError) as error:  # what torch raises for arguments an op cannot take
                raise DevplanError(
                    f"node {node.name} ({node.target}) cannot run on the arguments the graph gives it "
                    f"({first_line(error)}); re-export the model with torch.export"
                ) from None
            cone[node] = inside
            held.add(values[node])
    before = _stored_bytes(low)
    folded = shared = removed = 0
    candidates = [node for node in values if node.op == "call_function" and any(u not in values for u in node.users)]
    seen = set(candidates)
    while candidates:
        node = candidates.pop(0)
        inside = cone[node]
        result = values[node]
        if not isinstance(result, torch.Tensor):
            continue
        closed = all(user in inside for n in inside - {node} for user in n.users)
        leaves = [n for n in inside if n.op != "call_function"]
        leaf_bytes = sum(values[leaf].nbytes for leaf in leaves)
        if policy == "all":
            shares = not closed and bool(leaves)
        elif closed and leaves:
            if result.nbytes > leaf_bytes:
                continue
            shares = False
        else:
            private = sum(values[leaf].nbytes for leaf in leaves if all(user in inside for user in leaf.users))
            if result.nbytes > min(leaf_bytes if leaves else SHARED_FOLD_CAP, SHARED_FOLD_CAP):
                # too large to store: what it is computed from may be worth storing instead
                inputs = [n for n in node.all_input_nodes if n.op == "call_function" and n in values and n not in seen]
                seen.update(inputs)
                candidates += inputs
                continue
            if _run_peak(inside, values) <= result.nbytes - private:
                continue
            shares = bool(leaves)
        if not held.stores(node, result):
            continue  # its stored copy would take the pass past its bound: left to run time
        shared += shares
        folded += 1
        removed += sum(
            values[n].nbytes
            for n in inside
            if n.op == "call_function" and n.target is not operator.getitem and isinstance(values[n], torch.Tensor)
        )
        name = f"_folded_{node.name}"
        gm.register_buffer(name, result.contiguous())
        with gm.graph.inserting_before(node):
            stored = gm.graph.get_attr(name)
        stored.meta["val"] = node.meta.get("val")
        node.replace_all_uses_with(stored)
    gm.graph.eliminate_dead_code()
    # graph DCE keeps placeholders; drop weights that folding left unused
    unused = {node.name for node in gm.graph.nodes if node.op == "placeholder" and not node.users}
    low = replace(low, constants={name: data for name, data in low.constants.items() if name not in unused})
    folding = {
        "subgraphs": folded,
        "shared_inputs": shared,
        "constant_bytes_added": _stored_bytes(low) - before,
        "run_bytes_removed": removed,
    }
    return Folded(low, folding)


class _Held:
    """The bytes of the storages the pass's results have made, each counted once (a view of a
    weight or of an earlier result makes none; storing a view whole copies it), against the
    most it may hold: twice the bytes the program stores (every weight computed from another
    and stored, a transpose then a scale of each, takes that), or HELD_FLOOR when its
    weights are fewer. The first step past it is logged (`--debug` shows it); it and all
    computed from it are left to run time."""

    def __init__(self, stored: list[torch.Tensor]) -> None:
        self.storages = {t.untyped_storage().data_ptr() for t in stored}
        self.stored = sum(t.nbytes for t in stored)
        self.most = max(2 * self.stored, HELD_FLOOR)
        self.bytes = 0
        self.full = False

    @classmethod
    def of(cls, low: Lowered) -> "_Held":
        stored = [*low.constants.values(), *low.gm.buffers()]
        return cls([t for t in stored if isinstance(t, torch.Tensor)])

    def admits(self, node: torch.fx.Node) -> bool:
        """Whether computing the node's result stays within the bound (a view's makes no bytes;
        one that copies after all is counted once made, and the steps after it stop)."""
        viewed = node.target is operator.getitem or getattr(node.target, "is_view", False)
        return self._fits(node, "computing", 0 if viewed else _result_bytes(node))

    def stores(self, node: torch.fx.Node, result: torch.Tensor) -> bool:
        """Whether storing the node's result stays within the bound, counting its bytes when
        it is a view that storing copies (an expand of a weight, stored whole), as held."""
        copied = 0 if result.is_contiguous() else result.nbytes
        if not self._fits(node, "storing", copied):
            return False
        self.bytes += copied
        return True

    def _fits(self, node: torch.fx.Node, doing: str, nbytes: float) -> bool:
        if self.bytes + nbytes <= self.most:
            return True
        if not self.full:
            self.full = True
            _log.info(
                "fold: node %s runs at run time, and so may others: %s it would hold more than %s "
                "of folded results (the program stores %s)",
                node.name,
                doing,
                size_text(self.most),
                size_text(self.stored),
            )
        return False

    def add(self, value: Any) -> None:
        for tensor in torch.utils._pytree.tree_leaves(value):
            if isinstance(tensor, torch.Tensor) and tensor.untyped_storage().data_ptr() not in self.storages:
                self.storages.add(tensor.untyped_storage().data_ptr())
                self.bytes += tensor.untyped_storage().nbytes()


def _run_peak(inside: set[torch.fx.Node], values: Mapping[torch.fx.Node, Any]) -> int:
    """The bytes the run holds at once to compute a constant subgraph: the most, over its ops,
    of an op's result and the results of the subgraph's ops it reads."""

    def nbytes(n: torch.fx.Node) -> int:
        value = values[n]
        return sum(
            t.nbytes for t in (value if isinstance(value, (tuple, list)) else [value]) if isinstance(t, torch.Tensor)
        )

    return max(
        (
            nbytes(n) + sum(nbytes(i) for i in n.all_input_nodes if i.op == "call_function")
            for n in inside
            if n.op == "call_function"
        ),
        default=0,
    )


def _stored_bytes(low: Lowered) -> int:
    """Bytes of the constants the graph reads (weights and folded results), each once."""
    return sum(t.nbytes for t in read_constants(low))


def read_constants(low: Lowered) -> list[torch.Tensor]:
    """The constants the graph reads: weights and folded results, each once."""
    gm = low.gm
    read = [
        low.constants[n.name] for n in gm.graph.nodes if n.op == "placeholder" and n.name in low.constants and n.users
    ]
    read += [getattr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr" and n.users]
    return [t for t in read if isinstance(t, torch.Tensor)]


def _nbytes(value: object) -> int:
    return value.nbytes if isinstance(value, torch.Tensor) else 0


def _result_bytes(node: torch.fx.Node) -> float:
    """The bytes of the node's result, from its fake value (every tensor it returns); infinite
    when that is not known (no fake value, or a size that is symbolic), so it is not folded."""
    if "val" not in node.meta:
        return float("inf")
    total = 0
    for fake in torch.utils._pytree.tree_leaves(node.meta["val"]):
        if not isinstance(fake, torch.Tensor):
            continue
        try:
            total += int(fake.numel()) * fake.element_size()
        except (TypeError, ValueError, RuntimeError):  # symbolic sizes
            return float("inf")
    return total


def _foldable(node: torch.fx.Node, values: Mapping[torch.fx.Node, Any]) -> bool:
    inputs = node.all_input_nodes
    if node.target is operator.getitem:  # one result of a constant multi-result op (layer norm's output)
        return bool(inputs) and all(n in values for n in inputs)
    # a factory (arange, full) of sizes known at compile time is a constant too
    return (
        all(n in values for n in inputs)
        and not _symbolic(node)
        and isinstance(node.target, torch._ops.OpOverload)
        and node.target._schema.name not in _NONDETERMINISTIC
        and not node.target._schema.name.startswith(_KEPT_QUANTIZED)
        and not node.target._schema.is_mutable
    )


def _symbolic(node: torch.fx.Node) -> bool:
    """Whether the node's arguments or result involve sizes known only at run time."""
    symbolic = (torch.SymInt, torch.SymFloat, torch.SymBool)
    flat = torch.utils._pytree.tree_leaves((node.args, node.kwargs, node.meta.get("val")))
    return any(
        isinstance(a, symbolic) or isinstance(a, torch.Tensor) and any(isinstance(d, symbolic) for d in a.shape)
        for a in flat
    )
