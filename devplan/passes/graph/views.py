"""The views stage: a copy of a tensor whose sizes are known only at run time that could be
a view of it (an unsqueeze, squeeze, clone or same-shape expand) becomes one, its sizes read
by sym_size while the program runs, so that it shares its input's bytes."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from devplan.ir.lowered import Lowered

# Ops whose result has its input's bytes in the same order: only the sizes differ, or nothing.
SAME_ORDER = (
    torch.ops.aten.unsqueeze.default,
    torch.ops.aten.squeeze.dim,
    torch.ops.aten.squeeze.dims,
    torch.ops.aten.squeeze.default,
    torch.ops.aten.clone.default,
    torch.ops.aten.alias.default,
    torch.ops.aten.expand.default,
)


def view_dynamic_copies(low: Lowered) -> Lowered:
    """An unsqueeze, squeeze, clone or same-shape expand of a tensor whose sizes are known only
    at run time becomes a view whose sizes are read from that tensor while the program runs
    (sym_size), so build shares the bytes through et_view where ExecuTorch copies them."""
    gm, changed = low.gm, False
    known: dict[object, torch.fx.Node] = {}  # a run-time size -> the earlier node that reads or computes it
    for node in list(gm.graph.nodes):
        if isinstance(node.meta.get("val"), torch.SymInt):
            known.setdefault(node.meta["val"].node.expr, node)
        if node.op != "call_function" or node.target not in SAME_ORDER:
            continue
        source, val = node.args[0], node.meta.get("val")
        before = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor) or not isinstance(before, torch.Tensor) or _static(val):
            continue
        if node.target is torch.ops.aten.expand.default and list(map(str, val.shape)) != list(map(str, before.shape)):
            continue  # a broadcast reads some bytes many times: a copy
        if node.kwargs.get("memory_format") not in (None, torch.contiguous_format, torch.preserve_format):
            continue
        dims = _source_dims(val.shape, before.shape)
        if dims is None:
            continue
        with gm.graph.inserting_before(node):
            sizes: list[int | torch.fx.Node] = []
            for size, dim in zip(val.shape, dims):
                if dim is None:
                    sizes.append(int(size))
                    continue
                assert isinstance(size, torch.SymInt)  # a dim of the source that varies: a symbol
                if size.node.expr not in known:
                    known[size.node.expr] = gm.graph.call_function(torch.ops.aten.sym_size.int, (source, dim))
                    known[size.node.expr].meta["val"] = size
                sizes.append(known[size.node.expr])
            view = gm.graph.call_function(torch.ops.aten.view.default, (source, sizes))
        view.meta.update(node.meta)
        node.replace_all_uses_with(view)
        gm.graph.erase_node(node)
        changed = True
    if changed:
        gm.recompile()
    return low


def _static(tensor: torch.Tensor) -> bool:
    return all(isinstance(size, int) for size in tensor.shape)


def _same_symbol(size: int | torch.SymInt, symbol: torch.SymInt) -> bool:
    return isinstance(size, torch.SymInt) and bool(size.node.expr == symbol.node.expr)


def _source_dims(after: Sequence[int | torch.SymInt], before: Sequence[int | torch.SymInt]) -> list[int | None] | None:
    """For each dim of the result, the dim of the input with the same run-time size (None
    where the size is a plain number), matched in order; None when one has no match."""
    dims: list[int | None] = []
    at = 0
    for size in after:
        if isinstance(size, int):
            dims.append(None)
            continue
        while at < len(before) and not _same_symbol(before[at], size):
            at += 1
        if at == len(before):
            return None
        dims.append(at)
        at += 1
    return dims
