"""Rewrite every op that has no portable kernel into ops that do, with torch's own
decompositions (and devplan's, in decompositions.py), one node at a time: ops the runtime
already runs are left alone, so the graph is never retraced as a whole (that retrace is
most of ExecuTorch's lowering time)."""

from __future__ import annotations

import contextlib
import functools
import operator
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch._guards import detect_fake_mode
from torch._ops import OpOverload
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _pytree as pytree

from devplan.errors import DevplanError, first_line
from devplan.ir.fx import arg_node
from devplan.ir.lowered import Lowered
from devplan.ops import CHECKS_OUT_SIZES, RANKS, TORCH_NAMESPACES, is_view, out_schema, runnable, schema_name
from devplan.passes.graph.decompositions import bincount, decomposition

# Ops that only check metadata or shapes at trace time; the runtime has nothing to do.
_DROPPED = {
    "aten::_assert_tensor_metadata",
    "aten::_assert_scalar",
    "aten::sym_constrain_range_for_size",
    "aten::_assert_async",
    "aten::sym_constrain_range",
}
_MAX_ROUNDS = 8


def decompose(low: Lowered) -> Lowered:
    """Leave only ops with portable kernels (or getitem) in the graph; raise naming the node otherwise."""
    gm = low.gm
    pending = [n for n in gm.graph.nodes if n.op == "call_function"]
    traces: dict[Any, torch.fx.GraphModule] = {}
    mode = detect_fake_mode([n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"])
    for _ in range(_MAX_ROUNDS):
        gm.graph.eliminate_dead_code()  # decompositions leave unused results (e.g. empty stats buffers)
        added = []
        for node in pending:
            if node._erased:
                continue
            op = node.target
            if not isinstance(op, OpOverload):
                continue
            if op._schema.name in _DROPPED:
                gm.graph.erase_node(node)
            elif (
                _prefer_scalar(node)
                or not runnable(node.target)
                or (op in CHECKS_OUT_SIZES and _dynamic(node))
                or _rank_refusal(node)
                or _reads_strided_storage(node)
            ):
                added += inline(gm, node, _decomposer(node), traces, mode)
        if not added:
            break
        pending = added
    gm.graph.lint()
    return low


def _decomposer(node: torch.fx.Node) -> Callable[..., Any]:
    """The function that rewrites the node (its own op when there is none, which _trace
    refuses). bincount's result is as long as its input's largest value: export bounds it
    only when the model says how long it is, and then it counts up to that size."""
    if node.target is torch.ops.aten.bincount.default:
        size = _fixed(node.meta["val"].shape[0])
        if size is None:
            name, op = _origin(node)
            raise DevplanError(
                f"node {name}: op {op} returns as many counts as its input's largest value, a size "
                f"only the data decides; give it one: torch._check(counts.shape[0] == N) after the "
                f"call (with minlength=N), or count with torch.histc or scatter_add into N bins"
            )
        return functools.partial(bincount, size=size)
    target = node.target
    assert isinstance(target, OpOverload)  # decompose hands over nodes of ops only
    found = decomposition(target)
    return target if found is None else found


def _fixed(size: int | torch.SymInt) -> int | None:
    """The one value a size can take (a data-dependent one that the model's checks pinned),
    or None when it can take several."""
    if not isinstance(size, torch.SymInt):
        return size
    node = size.node
    bounds = node.shape_env.bound_sympy(node.expr)
    return int(bounds.lower) if bounds.lower == bounds.upper and bounds.lower.is_integer else None


def _prefer_scalar(node: torch.fx.Node) -> bool:
    """`x * 2` exports as mul.Tensor with a number; switch to the .Scalar overload when it has
    a kernel. Returns True when the node still needs decomposing."""
    op = node.target
    assert isinstance(op, torch._ops.OpOverload)  # the graph's ops, as the caller matched them
    if op._overloadname != "Tensor" or not any(
        isinstance(_number(a), (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)) for a in node.args[1:2]
    ):
        return False
    scalar = getattr(op.overloadpacket, "Scalar", None)
    if scalar is not None and runnable(scalar):
        node.target = scalar
        return False
    return not runnable(op)


def _rank_refusal(node: torch.fx.Node) -> str | None:
    """Why the op's kernel refuses the rank of the node's input (ops.RANKS); None if it does not."""
    schema = out_schema(node.target)
    ranks, why = RANKS.get(schema_name(schema), (None, "")) if schema is not None else (None, "")
    source = node.args[0].meta.get("val") if node.args and isinstance(node.args[0], torch.fx.Node) else None
    if ranks and isinstance(source, torch.Tensor) and source.dim() not in ranks:
        return f"{why} (its input has {source.dim()} dims)"
    return None


_AS_STRIDED = {torch.ops.aten.as_strided.default, torch.ops.aten.as_strided_copy.default}


def _reads_strided_storage(node: torch.fx.Node) -> bool:
    """Whether an as_strided reads its input's storage in an order other than row-major: its
    kernel reads the contiguous tensor devplan plans, so it goes through devplan's own
    decomposition (decompositions.as_strided), which first makes that order row-major."""
    if node.target not in _AS_STRIDED or _dynamic(node):
        return False
    _rebase(node)
    source = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
    return isinstance(source, torch.Tensor) and not (source.is_contiguous() and source.storage_offset() == 0)


def _rebase(node: torch.fx.Node) -> None:
    """An as_strided reads the storage, not the view it is given: over a view (a slice with a
    step, an expand) that storage is the viewed tensor's, so it reads that tensor instead, at
    the same absolute offset."""
    source = arg_node(node, 0)
    base: torch.fx.node.Argument = source
    while (
        isinstance(base, torch.fx.Node)
        and isinstance(base.target, OpOverload)
        and is_view(base.target)
        and base.args
        and isinstance(base.args[0], torch.fx.Node)
    ):
        base = base.args[0]
    value, base_value = source.meta.get("val"), base.meta.get("val") if isinstance(base, torch.fx.Node) else None
    if (
        base is source
        or not isinstance(value, torch.Tensor)
        or not isinstance(base_value, torch.Tensor)
        or base_value.storage_offset() != 0
    ):
        return
    args = list(node.args) + [None] * (4 - len(node.args))
    if args[3] is None and "storage_offset" not in node.kwargs:
        args[3] = value.storage_offset()
    args[0] = base
    node.args = tuple(args)


def _dynamic(node: torch.fx.Node) -> bool:
    """Whether the node reads a size known only at run time: a tensor's, or a number's (the
    end of an arange(x.shape[1]), say), which a trace outside the export's mode would fix."""
    symbolic = (torch.SymInt, torch.SymFloat, torch.SymBool)
    values = [a.meta.get("val") for a in node.all_input_nodes]
    return any(
        isinstance(v, symbolic) or isinstance(v, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in v.shape)
        for v in values
    )


def _number(arg: object) -> Any:
    """A number argument, or the size a number node computes while the program runs."""
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg


def inline(
    gm: torch.fx.GraphModule,
    node: torch.fx.Node,
    fn: Callable[..., Any],
    traces: dict[Any, torch.fx.GraphModule],
    mode: FakeTensorMode | None,
) -> list[torch.fx.Node]:
    """Trace fn on the node's fake inputs and splice the resulting ops in place of the node.
    A model repeats the same op on the same shapes many times (one per layer): `traces`
    keeps each trace for the rest of this compile."""
    flat, spec = pytree.tree_flatten((node.args, node.kwargs))
    # the result's signature too: a bound the model put on a data-sized result (bincount's) is not in its inputs
    key = (node.target, repr(spec), tuple(_signature(a) for a in flat), _signature(node))
    if key not in traces:
        traces[key] = _trace(node, fn, mode)
    return _splice(gm, node, traces[key], [a for a in flat if isinstance(a, torch.fx.Node)], mode)


def _signature(arg: object) -> object:
    value = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg
    if isinstance(value, torch.Tensor):
        return ("tensor", repr(tuple(value.shape)), value.dtype)  # sizes may be symbolic, which do not hash
    return repr(value)


def _trace(node: torch.fx.Node, fn: Callable[..., Any], mode: FakeTensorMode | None) -> torch.fx.GraphModule:
    """fn traced on the node's fake tensors, its other arguments fixed; `mode` is the graph's fake mode."""
    flat, spec = pytree.tree_flatten((node.args, node.kwargs))
    positions = [i for i, a in enumerate(flat) if isinstance(a, torch.fx.Node)]
    fakes = [flat[i].meta["val"] for i in positions]

    def call(*tensors: Any) -> Any:
        values = list(flat)
        for i, t in zip(positions, tensors):
            values[i] = t
        args, kwargs = pytree.tree_unflatten(values, spec)
        return fn(*args, **kwargs)

    origin = _origin(node)
    via = "" if origin[1] == str(node.target) else f" (it lowers to {node.target})"
    try:
        # mkldnn off: torch's LSTM decomposition would pick the mkldnn kernel on the CPU. Symbolic
        # sizes need the export's own fake mode, where torch's C++ kernels see them as symbols
        # rather than values (SDPA's decomposition, for one, stops without it).
        with (
            _without_mkldnn(),
            mode if mode is not None and _dynamic(node) else contextlib.nullcontext(),
            _no_pending_symbols(mode),
        ):
            sub = make_fx(call, tracing_mode="fake" if not fakes else "real")(*fakes)
    except Exception as error:
        raise DevplanError(
            f"node {origin[0]}: op {origin[1]}{via} has no portable kernel and torch cannot "
            f"decompose it ({first_line(error)}); rewrite the model without it"
        ) from None
    if fn is node.target and isinstance(fn, OpOverload) and _only_calls(sub, fn):
        refusal = _rank_refusal(node)
        if refusal:
            raise DevplanError(
                f"node {origin[0]}{f' ({origin[1]})' if via else ''}: {refusal}; rewrite the model without it"
            )
        if fn.namespace not in TORCH_NAMESPACES:
            name = fn.name().split("::")[-1]  # type: ignore[no-untyped-call]  # torch leaves OpOverload.name untyped
            raise DevplanError(
                f"node {origin[0]}: custom op {node.target} has no out variant, so no kernel can write "
                f"its result into planned memory; register {name}.out "
                f"beside it (as ExecuTorch's custom ops do)"
            )
        raise DevplanError(
            f"node {origin[0]}: op {origin[1]} is not supported{via}: no portable kernel and no "
            f"decomposition; rewrite the model without it"
        )
    return sub


def _splice(
    gm: torch.fx.GraphModule,
    node: torch.fx.Node,
    sub: torch.fx.GraphModule,
    tensors: list[torch.fx.Node],
    mode: FakeTensorMode | None,
) -> list[torch.fx.Node]:
    """Each spliced node's value is its own, described in the graph's fake mode `mode` (a trace
    has its own), so that later rounds can trace ops that read values of different traces together."""
    origin = _origin(node)
    # the pieces came from the user's node: they keep its module and line, for the program's stacktrace
    where: dict[str, object] = {key: node.meta[key] for key in ("nn_module_stack", "stack_trace") if key in node.meta}
    env: dict[torch.fx.Node, Any] = {}
    added: list[torch.fx.Node] = []
    inputs = iter(tensors)
    with gm.graph.inserting_before(node):
        for sub_node in sub.graph.nodes:
            if sub_node.op == "placeholder":
                env[sub_node] = next(inputs)
            elif sub_node.op == "get_attr":
                name = f"_devplan_const_{len(list(gm.named_buffers()))}"
                data = getattr(sub, sub_node.target)
                if isinstance(data, FakeTensor):  # made inside the fake mode: it has no values to store
                    raise DevplanError(
                        f"node {origin[0]}: op {origin[1]} decomposes into a constant that torch "
                        f"computes only for a static shape; export this part with static shapes"
                    )
                gm.register_buffer(name, data)
                env[sub_node] = gm.graph.get_attr(name)
                # described in the graph's own fake mode, so later rounds can trace ops that read it
                env[sub_node].meta["val"] = _fresh(mode.from_tensor(data) if mode else sub_node.meta.get("val"), mode)
            elif sub_node.op == "call_function" and _named_tuple(sub_node.target):
                # torch's out-wrapped decompositions return a namedtuple (return_types_*): its
                # fields are the results themselves
                args, kwargs = torch.fx.map_arg((sub_node.args, sub_node.kwargs), env.__getitem__)
                env[sub_node] = (*args, *(kwargs[name] for name in sub_node.target._fields[len(args) :]))
            elif sub_node.target is operator.getitem and isinstance(env[sub_node.args[0]], tuple):
                env[sub_node] = env[sub_node.args[0]][sub_node.args[1]]
            elif sub_node.op == "call_function":
                new = gm.graph.call_function(
                    sub_node.target, *torch.fx.map_arg((sub_node.args, sub_node.kwargs), env.__getitem__)
                )
                new.meta = {
                    "val": pytree.tree_map(lambda v: _fresh(v, mode), sub_node.meta.get("val")),
                    "devplan_origin": origin,
                    **where,
                }
                env[sub_node] = new
                added.append(new)
            else:
                result = torch.fx.map_arg(sub_node.args[0], env.__getitem__)
    _replace(node, result)
    gm.graph.erase_node(node)
    return added


def _fresh(value: Any, mode: FakeTensorMode | None) -> Any:
    """A fake tensor of the node's own, in the graph's fake mode where it has one. One cached
    trace is spliced at many nodes, and tracing tells tensors apart by identity: two nodes
    sharing one value would trace as one input, and an op reading both would read one twice."""
    if not isinstance(value, FakeTensor):
        return value
    with mode or value.fake_mode:
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=value.device)


@contextlib.contextmanager
def _no_pending_symbols(mode: FakeTensorMode | None) -> Iterator[None]:
    """Data-dependent sizes (`input_pos.item()`, an LLM's cache position) that loading the
    export left pending in its shape environment belong to the graph, not to this trace, which
    torch would otherwise blame for not returning them."""
    env = getattr(mode, "shape_env", None)
    pending = list(env.pending_fresh_unbacked_symbols) if env is not None else []
    if env is not None:
        env.pending_fresh_unbacked_symbols.clear()
    try:
        yield
    finally:
        if env is not None:
            env.pending_fresh_unbacked_symbols[:0] = pending


@contextlib.contextmanager
def _without_mkldnn() -> Iterator[None]:
    """torch.backends.mkldnn.flags(enabled=False) without the TF32 warning its exit prints."""
    enabled = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        yield
    finally:
        torch._C._set_mkldnn_enabled(enabled)


def _named_tuple(target: object) -> bool:
    return isinstance(target, type) and issubclass(target, tuple)


def _origin(node: torch.fx.Node) -> tuple[str, str]:
    """(name, op) of the user's own node that `node` came from, so that messages name it
    even when the failing op came out of decomposing it."""
    origin: tuple[str, str] = node.meta.get("devplan_origin", (node.name, str(node.target)))
    return origin


def _only_calls(sub: torch.fx.GraphModule, op: object) -> bool:
    """Whether the trace calls op and nothing else; one that calls nothing (a cast to the
    dtype the tensor has) is the identity, which needs no kernel."""
    calls = [n.target for n in sub.graph.nodes if n.op == "call_function"]
    return bool(calls) and all(target == op for target in calls)


def _replace(node: torch.fx.Node, result: Any) -> None:
    if isinstance(result, torch.fx.Node) or not isinstance(result, (tuple, list)):
        node.replace_all_uses_with(result)
        return
    for user in list(node.users):
        if user.target is operator.getitem:
            user.replace_all_uses_with(result[user.args[1]])  # type: ignore[index]  # getitem's index is an int
            user.graph.erase_node(user)
        else:
            raise DevplanError(f"node {user.name}: uses all outputs of {node.name} at once; this form is not supported")
