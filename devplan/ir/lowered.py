"""The graph every graph pass works on: an FX graph of runtime ops plus what the graph alone
does not say (which placeholders are weights, which are state, how inputs and outputs nest),
and what each delegate call in it runs."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

import torch

if TYPE_CHECKING:
    from devplan.backend import Adopted, Backend


@dataclass(frozen=True)
class Payload:
    """What a delegate call runs: the payload its backend reads (devplan's own: an ET12
    program planned on the backend's device), the argument nodes it takes at run time (in
    the order the payload takes them; None: all the call's, as the graph has them now), the bytes its one buffer plans on that device, as
    planned and at the least any plan could (0 for a backend that plans its own), the
    named data a backend keeps beside its payload: (key, bytes, alignment), and where the
    nodes an ExecuTorch backend compiled came from (ForeignCall.handles)."""

    data: bytes
    inputs: tuple[torch.fx.Node, ...] | None
    arena: int
    arena_bound: int
    named_data: tuple[tuple[str, bytes, int], ...] = ()
    handles: tuple[tuple[int, str, str, str], ...] = ()


class ForeignCall(torch.nn.Module):
    """A group that one of ExecuTorch's backends compiled (passes/export/backends.py): the graph
    calls it as a module; devplan stores what the backend made and plans only the tensors it
    reads and writes."""

    def __init__(
        self,
        backend_id: str,
        processed: bytes,
        compile_specs: tuple[tuple[str, bytes], ...],
        named_data: tuple[tuple[str, bytes, int], ...],
        handles: tuple[tuple[int, str, str, str], ...] = (),
    ) -> None:
        super().__init__()
        self.backend_id, self.processed, self.compile_specs, self.named_data = (
            backend_id,
            processed,
            compile_specs,
            named_data,
        )
        # (debug handle, module path, module class, op) of each node the backend compiled: the
        # handle is what its payload records per node (XNNPACK's XNode.debug_handle)
        self.handles = handles


@dataclass(frozen=True)
class Lowered:
    gm: torch.fx.GraphModule
    constants: dict[str, torch.Tensor]  # placeholder name -> data: weights, constant buffers, folded results
    state: dict[str, torch.Tensor]  # placeholder name -> initial value of a buffer the program updates
    inputs: tuple[str, ...]  # user input placeholder names, in call order
    in_spec: str  # pytree specs (torch's treespec_dumps), for ContainerMetadata
    out_spec: str
    mutated: tuple[str, ...] = ()  # user inputs the program updates in place
    # placeholder name -> (role, the user's name): an input's argument name, a weight's FQN
    names: dict[str, tuple[str, str]] = field(default_factory=dict)
    # delegate calls (call_module nodes) by target: the backend partition() gave each group,
    # and the payload the compile made of it (compiler/lower.py; an ExecuTorch backend's: passes/graph/adopt.py)
    backends: Mapping[str, "Backend | Adopted"] = field(default_factory=dict)  # a delegate call -> what runs it
    payloads: Mapping[str, "Payload"] = field(default_factory=dict)

    def results(self) -> tuple[dict[str, object], list[object]]:
        """(placeholder name of state or a mutated input -> its value after a run, user
        outputs). The output node holds them all, state first, then mutated inputs, so that
        passes see every value the program must produce."""
        values = list(self.gm.graph.output_node().args[0])  # type: ignore[arg-type]  # an output node holds a tuple
        updated = (*self.state, *self.mutated)
        return dict(zip(updated, values)), values[len(updated) :]


def own_graph(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`gm` with a graph of its own, for a pass that edits it in place; its attributes (the
    weights) shared, and its codegen (the pytree specs of inputs and outputs) copied."""
    graph = torch.fx.Graph()
    graph._codegen = copy.deepcopy(gm.graph._codegen)
    graph.output(graph.graph_copy(gm.graph, {}))
    return torch.fx.GraphModule(gm, graph)
