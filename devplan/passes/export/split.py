"""The split stage: an ExportedProgram's graph made pure and its signature split into the
Lowered IR's constants, state, user inputs and the user's names."""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch.export.graph_signature import InputKind, OutputKind
from torch.utils import _pytree as pytree

from devplan.errors import DevplanError, first_line
from devplan.ir.lowered import Lowered
from devplan.ops import is_view
from devplan.passes.export.functional import (
    functionalize_locally,
    inline_grad_regions,
    needs_retrace,
    refuse_unlowerable,
    write_in_place,
)


def from_exported(ep: torch.export.ExportedProgram) -> Lowered:
    """Split an ExportedProgram's signature into constants, state and user inputs."""
    gm = copy.deepcopy(ep.graph_module)
    inline_grad_regions(gm)
    functionalize_locally(gm)
    if needs_retrace(gm):
        # export keeps in-place writes to state and autocast regions; torch's functionalizing
        # retrace turns them into pure ops plus buffer-mutation outputs. Only such programs pay for it.
        _refuse_constant_writes(ep, gm)
        try:
            ep = ep.run_decompositions({})
        except Exception as error:  # torch's own failure; the program cannot be made pure
            raise DevplanError(
                f"torch cannot functionalize the program's in-place writes ({first_line(error)}); "
                f"export the model under torch.no_grad() with its state in registered buffers"
            ) from None
        gm = copy.deepcopy(ep.graph_module)
    write_in_place(gm)  # after any retrace, which would make the writes functional again
    refuse_unlowerable(gm)
    # deepcopy may rename placeholders (e.g. 'input'), so pair them with the signature by position
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    names = {spec.target: node.name for spec, node in zip(ep.graph_signature.input_specs, placeholders) if spec.target}
    user_inputs = {
        spec.arg.name: node.name
        for spec, node in zip(ep.graph_signature.input_specs, placeholders)
        if spec.kind == InputKind.USER_INPUT
    }
    written = {o.target for o in ep.graph_signature.output_specs if o.kind == OutputKind.BUFFER_MUTATION}
    constants: dict[str, torch.Tensor] = {}
    state: dict[str, torch.Tensor] = {}
    inputs: list[str] = []
    roles = {
        InputKind.USER_INPUT: "input",
        InputKind.PARAMETER: "parameter",
        InputKind.BUFFER: "buffer",
        InputKind.CONSTANT_TENSOR: "constant",
    }
    user_names = {
        node.name: (roles[spec.kind], spec.target or spec.arg.name)
        for spec, node in zip(ep.graph_signature.input_specs, placeholders)
        if spec.kind in roles
    }
    for spec, node in zip(ep.graph_signature.input_specs, placeholders):
        name = node.name
        if spec.kind == InputKind.USER_INPUT:
            inputs.append(name)  # numbers too: export bakes them in, but callers still pass them
            continue
        source = (
            ep.constants if spec.kind == InputKind.CONSTANT_TENSOR or spec.target in ep.constants else ep.state_dict
        )
        value = source[spec.target].detach()
        (state if spec.target in written else constants)[name] = value
    output = gm.graph.output_node()
    results = list(output.args[0])
    updates, mutated, user_outputs = {}, {}, []
    for spec, value in zip(ep.graph_signature.output_specs, results):
        if spec.kind == OutputKind.BUFFER_MUTATION:
            updates[names[spec.target]] = value
        elif spec.kind == OutputKind.USER_INPUT_MUTATION:
            mutated[user_inputs[spec.target]] = value
        elif spec.kind == OutputKind.USER_OUTPUT:
            user_outputs.append(value)
        else:
            raise DevplanError(
                f"output {spec.arg.name}: {spec.kind.name} outputs are not supported; return the value instead"
            )
    state = {name: state[name] for name in updates}
    output.args = (tuple(updates.values()) + tuple(mutated.values()) + tuple(user_outputs),)
    return Lowered(
        gm,
        constants,
        state,
        tuple(inputs),
        _dumps(ep.call_spec.in_spec),
        _dumps(ep.call_spec.out_spec),
        tuple(mutated),
        user_names,
    )


def _refuse_constant_writes(ep: torch.export.ExportedProgram, gm: torch.fx.GraphModule) -> None:
    """A tensor attribute that is not a registered buffer is lifted as a constant by a
    non-strict export; writing it in place (a KV cache kept that way) has no meaning in a
    program, and torch's retrace fails on it."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    constants = {
        node: spec.target
        for spec, node in zip(ep.graph_signature.input_specs, placeholders)
        if spec.kind == InputKind.CONSTANT_TENSOR
    }
    for node in gm.graph.nodes:
        op = node.target
        if not (isinstance(op, torch._ops.OpOverload) and op._schema.is_mutable and node.args):
            continue
        written = node.args[0]
        while (
            isinstance(written, torch.fx.Node)
            and isinstance(written.target, torch._ops.OpOverload)
            and is_view(written.target)
        ):
            written = written.args[0]
        if written in constants:
            raise DevplanError(
                f"node {node.name}: {op._schema.name} writes in place to {constants[written]}, which "
                f"torch.export lifted as a constant (a tensor attribute, not a registered buffer); "
                f"register it with register_buffer, or export with strict=True"
            )


def _dumps(spec: pytree.TreeSpec) -> str:
    """The spec as text; result types torch cannot name (torch.return_types.topk, ...) are
    written as the plain tuples they are to a caller that flattens them."""
    try:
        return pytree.treespec_dumps(spec)
    except NotImplementedError:
        tree = pytree.tree_unflatten([0] * spec.num_leaves, spec)
        return pytree.treespec_dumps(pytree.tree_structure(_as_tuples(tree)))


def _as_tuples(tree: Any) -> Any:
    if isinstance(tree, tuple):  # named tuples and torch's result structs included
        return tuple(_as_tuples(item) for item in tree)
    if isinstance(tree, list):
        return [_as_tuples(item) for item in tree]
    if isinstance(tree, dict):
        return {key: _as_tuples(item) for key, item in tree.items()}
    return tree
