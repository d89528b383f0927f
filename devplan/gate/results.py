"""Each node's recorded result held to what its arguments make.

Every stage after load sizes a tensor by the result its node records (`node.meta["val"]`,
the archive's tensor_meta): folding bounds its work by it, planning gives it that many bytes.
An archive is free to record 4x4 for an expand whose arguments name 65536x65536, so each op
is run here on its arguments' recorded values under the export's fake mode (torch's meta
kernels: shapes and dtypes, no data, what torch.export itself ran to record them), and a
result that differs from the one recorded is refused before anything computes or plans it."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devplan.errors import DevplanError, first_line

if TYPE_CHECKING:
    import torch


def check_results(ep: "torch.export.ExportedProgram", path: Path) -> None:
    """Refuse the first node whose arguments make a result of another shape or dtype than the
    one it records, or that its op cannot take at all; a node whose result its op's meta
    kernel cannot state (no fake kernel, a size read from data) is left as recorded."""
    import torch
    from torch._guards import detect_fake_mode
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    mode = detect_fake_mode([n.meta.get("val") for n in ep.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)])
    if mode is None:  # no recorded tensor at all: nothing sized by one either
        return
    for node in ep.graph.nodes:
        op = node.target
        # a size read from data (item, nonzero) is a new symbol each run, and would be left
        # pending in the export's shape environment: such a result stays as recorded
        checked = "val" in node.meta and not free_unbacked_symbols(node.meta["val"])
        if node.op == "call_function" and isinstance(op, torch._ops.OpOverload) and checked:
            made = _run_fake(node, op, mode, path)
            if made is not None and _differs(made, node.meta["val"]):
                raise DevplanError(
                    f"{path}: node {node.name} ({op._schema.name}) records a result of "
                    f"{_described(node.meta['val'])}, but its arguments make {_described(made)}; the "
                    f"archive is damaged or crafted; re-export the model with torch.export.save"
                )


def _run_fake(node: "torch.fx.Node", op: "torch._ops.OpOverload", mode: Any, path: Path) -> Any:
    """The node's op run on its arguments' recorded values in the export's fake mode; None
    when torch cannot say what it makes without the data."""
    import torch
    from torch._subclasses import fake_tensor
    from torch.fx.experimental import symbolic_shapes

    unknowable = (
        NotImplementedError,
        fake_tensor.UnsupportedOperatorException,
        fake_tensor.DynamicOutputShapeException,
        fake_tensor.DataDependentOutputException,
        symbolic_shapes.GuardOnDataDependentSymNode,
    )
    args, kwargs = torch.fx.map_arg((node.args, node.kwargs), lambda n: n.meta.get("val"))
    env = mode.shape_env
    # guards the run asks would be recorded, and could specialize a size symbol, in the
    # export's own shape environment: they are suppressed, torch.export already checked them
    quiet = env.suppress_guards() if env is not None else contextlib.nullcontext()
    try:
        with mode, quiet:
            if op._schema.is_mutable:  # in place: a fake copy, never the recorded value
                args, kwargs = torch.utils._pytree.tree_map_only(torch.Tensor, torch.clone, (args, kwargs))
            return op(*args, **kwargs)
    except unknowable:
        return None
    except Exception as error:  # whatever a meta kernel raises for arguments it cannot take
        raise DevplanError(
            f"{path}: node {node.name} ({op._schema.name}) cannot run on the arguments the "
            f"graph gives it ({type(error).__name__}: {first_line(error)}); the archive is damaged; "
            f"re-export the model with torch.export.save"
        ) from None


def _differs(made: object, recorded: object) -> bool:
    """Whether two results (a tensor, a size, or a tuple of them) certainly differ: in
    structure, dtype or rank, or a size that no value of the export's symbols makes equal."""
    import torch
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    made_leaves = torch.utils._pytree.tree_leaves(made)
    recorded_leaves = torch.utils._pytree.tree_leaves(recorded)
    if len(made_leaves) != len(recorded_leaves):
        return True
    for m, r in zip(made_leaves, recorded_leaves):
        if isinstance(m, torch.Tensor) != isinstance(r, torch.Tensor):
            return True
        sizes = list(zip(m.shape, r.shape)) if isinstance(m, torch.Tensor) else [(m, r)]
        if isinstance(m, torch.Tensor) and (m.dtype != r.dtype or m.dim() != r.dim()):
            return True
        if any(_sizes(a, b) and statically_known_true(a != b) for a, b in sizes):
            return True
    return False


def _sizes(a: object, b: object) -> bool:
    """Whether both are sizes (ints or SymInts), the values compared; a float or bool a
    size op returns is left as recorded."""
    import torch

    return all(isinstance(x, (int, torch.SymInt)) and not isinstance(x, bool) for x in (a, b))


def _described(result: object) -> str:
    import torch

    leaves = torch.utils._pytree.tree_leaves(result)
    return ", ".join(
        f"shape {[str(s) if isinstance(s, torch.SymInt) else s for s in t.shape]} {str(t.dtype).removeprefix('torch.')}"
        if isinstance(t, torch.Tensor)
        else f"value {t}"
        for t in leaves
    )
