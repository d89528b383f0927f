"""ExecuTorch's own backends inside devplan's programs: an ExecuTorch partitioner picks the
ops its backend takes and that backend's preprocess compiles each group, exactly as
ExecuTorch's lowering does (`to_edge_transform_and_lower`); devplan keeps every delegate
call as a `call_module` of a `ForeignCall` and lowers everything around it with its own
pipeline. Only this stage imports ExecuTorch (the `devplan[executorch]` extra)."""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.fx._lazy_graph_module import _LazyGraphModule

from devplan.backend import Backend, Partitioner
from devplan.errors import DevplanError, first_line
from devplan.extras import import_module
from devplan.ir.lowered import ForeignCall
from devplan.parallel import forked_map
from devplan.passes.export.guarded import Guarded, blame, culprit
from devplan.passes.export.refusals import Fallback, Refused, preprocess_one
from devplan.pte.writer import SEGMENT_ALIGNMENT


@dataclass(frozen=True)
class Delegated:
    program: torch.export.ExportedProgram  # the edge program, each delegate a ForeignCall
    fallbacks: tuple[Fallback, ...]  # what the backends refused, in the order they refused it


def lower_to_backends(
    ep: torch.export.ExportedProgram,
    delegates: tuple[Backend | Partitioner, ...],
    jobs: int = 1,
    strict: bool = False,
) -> Delegated:
    """`ep` with every group the partitioners among `delegates` take compiled by its
    backend: ExecuTorch's edge program, its ops turned back into ATen ops and each delegate
    call into a call_module of a ForeignCall. A partitioner never takes the ops of devplan's
    own backends given before it; those after it take what it left. The backends' preprocess
    runs on `jobs` processes, one partition at a time each. Where a backend's preprocess
    refuses a partition, the op it failed on (every op of the partition when it names none) is
    left out of that backend's partitions and the lowering runs again; so is the op a
    partitioner failed on, and a partitioner that failed on none takes nothing: a backend never
    makes a model fail that compiles without it; `strict` refuses instead."""
    partitioners = [d for d in delegates if isinstance(d, Partitioner)]
    exir = import_module("executorch.exir", partitioners[0].label)
    refused: dict[str, frozenset[str]] = {}  # backend id -> ops left out of its partitions
    dropped: set[str] = set()  # the partitioners that failed on no op they could be blamed for
    fallbacks: list[Fallback] = []
    while True:
        made = [
            Guarded(
                p.make(),
                p.label,
                tuple(d for d in delegates[: delegates.index(p)] if isinstance(d, Backend)),
                refused,
                p.label in dropped,
            )
            for p in partitioners
        ]
        try:
            edge = _lowered(exir, ep, made, jobs)
            break
        except Refused as failure:
            if failure.drop is None:
                new = [
                    f for f in dict.fromkeys(failure.fallbacks) if not set(f.ops) <= refused.get(f.backend, frozenset())
                ]
            else:  # it takes nothing; what it failed on is refused to no other partitioner
                new = [] if failure.drop in dropped else failure.fallbacks
            if strict or not new:
                raise DevplanError(
                    failure.message or f"{blame(made)}: ExecuTorch's lowering failed: {failure.fallbacks[0].why}"
                ) from None
            if failure.drop is not None:
                dropped.add(failure.drop)
            else:
                for f in new:
                    refused[f.backend] = refused.get(f.backend, frozenset()) | set(f.ops)
            fallbacks += new
    lowered = edge.exported_program()
    _adopt(lowered.graph_module)
    return Delegated(lowered, tuple(fallbacks))


def _lowered(exir: Any, ep: torch.export.ExportedProgram, made: list[Guarded], jobs: int) -> Any:
    """ExecuTorch's edge program of `ep`, lowered by the guarded partitioners `made`. A failure
    outside any preprocess (a partitioner's check, or ExecuTorch finding an op kept whole for a
    partitioner that did not take it) is the Refused of the partitioner it belongs to."""
    label = made[0].label
    config = exir.EdgeCompileConfig(_check_ir_validity=False, _skip_dim_order=True)
    try:
        # no_grad: ExecuTorch's state write-back would otherwise trip autograd
        with (
            torch.no_grad(),
            _preprocess_on(jobs, label),
            _provenance_shared(),
            _code_on_demand(),
            _decompositions_where_needed(label),
        ):
            return exir.to_edge_transform_and_lower(ep, partitioner=made, compile_config=config)
    except (DevplanError, Refused):
        raise
    except _NoAnswer as error:
        raise DevplanError(f"{blame(made)}: ExecuTorch's lowering failed: {error}") from None
    except Exception as error:  # noqa: BLE001 - a partitioner's work failed: the op it failed on stays portable
        message = f"{blame(made)}: ExecuTorch's lowering failed: {first_line(error)}"
        guilty = culprit(error, made)
        if guilty is None:
            raise DevplanError(message) from None
        raise guilty.failed(error, ep, message) from None


@contextlib.contextmanager
def _preprocess_on(jobs: int, label: str) -> Iterator[None]:
    """ExecuTorch's lowering with each backend that keeps ExecuTorch's own
    preprocess_multimethod (a preprocess per partition, nothing shared among them) running
    its partitions on `jobs` processes; the payloads are the same bytes as one process makes.
    A partition its preprocess refuses is told as a Refused once all have been compiled."""
    details = import_module("executorch.exir.backend.backend_details", label).BackendDetails
    serial = details.__dict__["preprocess_multimethod"]
    details.preprocess_multimethod = classmethod(functools.partial(_preprocess_all, jobs=jobs))
    try:
        yield
    finally:
        details.preprocess_multimethod = serial


@contextlib.contextmanager
def _provenance_shared() -> Iterator[None]:
    """torch's NodeSource with its provenance chain shared, not deep-copied: each pass of
    ExecuTorch's lowering (some twenty per XNNPACK partition) records every new node's source
    by copying the whole chain of sources before it, a cost that grows with every pass (a
    seventh of an XNNPACK compile). No pass changes a recorded source, so sharing the chain
    keeps the same provenance, and the same debug handles ExecuTorch derives from it."""
    source = torch.fx.traceback.NodeSource
    deep = source.__init__

    def shared(self: Any, node: torch.fx.Node | None, pass_name: str = "", action: Any = None) -> None:
        deep(self, None, pass_name, action)
        if node:
            self.node_info = source.NodeInfo(name=node.name, target=str(node.target), graph_id=id(node.graph))
            self.from_node = list(node.meta.get("from_node") or ())

    source.__init__ = shared  # type: ignore[method-assign]  # torch's, patched while ExecuTorch lowers, restored after
    try:
        yield
    finally:
        source.__init__ = deep  # type: ignore[method-assign]  # torch's, patched while ExecuTorch lowers, restored after


@contextlib.contextmanager
def _code_on_demand() -> Iterator[None]:
    """GraphModules whose Python code is written when they are first called, not at every
    recompile: ExecuTorch's passes recompile each graph they touch (thousands of times in an
    XNNPACK lowering, a sixth of its time) and call few of them. torch's own lazy
    GraphModule; the graphs, and so the payloads, are the same."""
    graph_module = torch.fx.GraphModule
    new = graph_module.__new__

    def lazy(cls: type, *args: Any, **kwargs: Any) -> Any:
        return new(_CodeOnDemand if cls is graph_module else cls, *args, **kwargs)

    graph_module.__new__ = lazy  # type: ignore[method-assign]  # torch's, patched while ExecuTorch lowers, restored after
    try:
        yield
    finally:
        graph_module.__new__ = new  # type: ignore[method-assign]  # torch's, patched while ExecuTorch lowers, restored after


class _CodeOnDemand(_LazyGraphModule):
    """torch's lazy GraphModule, its code also written when what only that writes is read
    (torch.export of a graph reads its input spec)."""

    def __getattr__(self, name: str) -> Any:
        if name in ("_code", "_in_spec", "_out_spec") and self._needs_recompile():
            self.real_recompile()
            return getattr(self, name)
        return super().__getattr__(name)


@contextlib.contextmanager
def _decompositions_where_needed(label: str) -> Iterator[None]:
    """ExecuTorch's decompositions on its way to an edge program, each one that applies a table
    to a program a decomposition of this lowering made skipped where the graph calls none of the
    table's ops: such a program is functional already, so the table would change nothing. That
    is the shortcut ExecuTorch takes itself on one of its paths, with its own check of the graph;
    taken on its other path too, the two table passes after its first (functionalizing)
    decomposition, the same bytes come out and a small model's --quantize compile takes half the
    time (a graph that calls the table's ops, a Llama's, runs them as before). Every other
    decomposition runs."""
    calls_any = import_module("executorch.exir.program._program", label).contains_any_call_fn_target_op
    program = torch.export.ExportedProgram
    run = program.run_decompositions
    made: weakref.WeakSet[torch.export.ExportedProgram] = weakref.WeakSet()  # by a decomposition here

    def where_needed(self: torch.export.ExportedProgram, decomp_table: Any = None, *args: Any, **kwargs: Any) -> Any:
        if self in made and decomp_table and not args and not kwargs and not calls_any(self.graph_module, decomp_table):
            return self
        decomposed = run(self, decomp_table, *args, **kwargs)
        made.add(decomposed)
        return decomposed

    program.run_decompositions = where_needed  # type: ignore[method-assign]  # torch's, patched while ExecuTorch lowers, restored after
    try:
        yield
    finally:
        program.run_decompositions = run  # type: ignore[method-assign]  # torch's, patched while ExecuTorch lowers, restored after


def _preprocess_all(
    cls: Any, edge_programs: dict[str, list[Any]], compile_specs: dict[str, list[Any]], *, jobs: int
) -> dict[str, list[Any]]:
    """BackendDetails.preprocess_multimethod's results, the partitions shared among processes."""
    work = [
        (cls, program, specs)
        for method, programs in edge_programs.items()
        for program, specs in zip(programs, compile_specs[method], strict=True)
    ]
    try:
        done = forked_map(preprocess_one, work, jobs, cost=lambda w: len(w[1].graph.nodes))
    except RuntimeError as error:  # a process died: no op is to blame, so nothing is refused
        raise _NoAnswer(first_line(error)) from None
    failed = [result for result in done if isinstance(result, Fallback)]
    if failed:
        raise Refused(failed)
    results = iter(done)
    return {method: [next(results) for _ in programs] for method, programs in edge_programs.items()}


class _NoAnswer(Exception):
    """A process compiling partitions died without an answer (a preprocess's own exception is a
    refusal, preprocess_one's Fallback)."""


def _adopt(gm: torch.fx.GraphModule) -> None:
    """ExecuTorch's edge graph as devplan's passes read graphs: ATen ops, views where
    ExecuTorch wrote their copies, and each `executorch_call_delegate(lowered_module, *args)`
    a call_module of a ForeignCall holding what the backend made."""
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and isinstance(getattr(node.target, "_op", None), torch._ops.OpOverload):
            node.target = _view_of_copy(node.target._op)
        elif node.op == "call_function" and getattr(node.target, "__name__", "") == "executorch_call_delegate":
            lowered = getattr(gm, node.args[0].target)
            name = node.args[0].target
            gm.add_submodule(name, _foreign(lowered))
            with gm.graph.inserting_before(node):
                call = gm.graph.call_module(name, tuple(node.args[1:]))
            call.meta = {
                **_where_from(lowered),
                **node.meta,
                "devplan_origin": (name, f"{lowered.backend_id} delegate"),
            }
            node.replace_all_uses_with(call)
            gm.graph.erase_node(node)
    gm.graph.eliminate_dead_code()
    for name, module in list(gm.named_children()):
        if not isinstance(module, ForeignCall) and hasattr(module, "processed_bytes"):
            delattr(gm, name)
    gm.recompile()


def _foreign(lowered: Any) -> ForeignCall:
    """What an ExecuTorch LoweredBackendModule holds that a program stores: the backend's id,
    its payload, its compile specs and the named data it keeps beside the payload."""
    store = lowered.named_data_store_output
    named = []
    if store is not None:
        if store.external_data:
            raise DevplanError(
                f"{lowered.backend_id}: the backend writes named data to an external file "
                f"({', '.join(store.external_data)}), which devplan does not write yet"
            )
        for key, entry in sorted(store.pte_data.items()):
            if SEGMENT_ALIGNMENT % entry.alignment:  # every segment starts on that boundary, no finer one
                raise DevplanError(
                    f"{lowered.backend_id}: named data {key} asks for {entry.alignment}-byte alignment; "
                    f"devplan aligns segments to {SEGMENT_ALIGNMENT} bytes"
                )
            named.append((key, bytes(store.buffers[entry.buffer_index]), entry.alignment))
    if not isinstance(lowered.processed_bytes, bytes) or not lowered.processed_bytes:
        raise DevplanError(
            f"{lowered.backend_id}: its preprocess made no payload for the partition of "
            f"{_first_op(lowered)}; the backend cannot compile those ops"
        )
    specs = tuple((spec.key, bytes(spec.value)) for spec in lowered.compile_specs)
    return ForeignCall(lowered.backend_id, bytes(lowered.processed_bytes), specs, tuple(named), _handles(lowered))


def _handles(lowered: Any) -> tuple[tuple[int, str, str, str], ...]:
    """(debug handle, module path, module class, op) of the first node of each debug handle in
    the partition the backend compiled: the handles its payload's nodes record (XNNPACK's),
    which the program's frames then map to the user's modules (devplan/pte/frames.py)."""
    found: dict[int, tuple[int, str, str, str]] = {}
    for node in lowered.original_module.graph.nodes:
        handle = node.meta.get("debug_handle")
        if node.op == "call_function" and isinstance(handle, int) and handle not in found:
            modules = list((node.meta.get("nn_module_stack") or {}).values())
            path, kind = modules[-1] if modules else ("", "")
            op = str(getattr(node.target, "_op", node.target))  # an edge op's ATen op
            found[handle] = (handle, path, str(kind).rpartition(".")[2], op)
    return tuple(sorted(found.values()))


def _where_from(lowered: Any) -> dict[str, Any]:
    """The module and source line of the partition's first op, which inspect names the
    delegate's tensors after (the call ExecuTorch makes carries neither)."""
    nodes = _partition_ops(lowered)
    return {key: nodes[0].meta[key] for key in ("nn_module_stack", "stack_trace") if nodes and key in nodes[0].meta}


def _first_op(lowered: Any) -> str:
    """The first op node of a lowered partition, to name it in messages."""
    nodes = _partition_ops(lowered)
    return f"node {nodes[0].name}" if nodes else "no ops"


def _partition_ops(lowered: Any) -> list[torch.fx.Node]:
    return [n for n in lowered.original_module.graph_module.graph.nodes if n.op == "call_function"]


def _view_of_copy(op: torch._ops.OpOverload) -> torch._ops.OpOverload:
    """ExecuTorch writes views as their copies (view_copy, permute_copy); devplan's own view
    handling (aliases where the bytes allow, copies elsewhere) starts from the view."""
    name = op._schema.name.removeprefix("aten::")
    if not name.endswith("_copy"):
        return op
    view = getattr(getattr(torch.ops.aten, name.removesuffix("_copy"), None), op._overloadname, None)
    return view if isinstance(view, torch._ops.OpOverload) and view.is_view else op
