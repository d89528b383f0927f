"""The constant methods ExecuTorch's LLM runner reads, read from the export itself (`--llm`), so
that a user gives only what an export cannot know: the tokenizer's ids.

An LLM export for the runner (export_llama's, or transformers' TorchExportableModuleForDecoderOnlyLM)
takes the tokens first and returns the logits first, and keeps a KV cache as 4-D buffers it
updates in place, a key and a value cache per layer. From those: the vocabulary (the logits' last
dimension), the layers (the caches, two a layer), the context length (the caches' sequence
dimension: 1 beside ExecuTorch's llama:: custom ops, 2 in transformers' static cache), whether
the token count is dynamic and up to what, and whether attention runs ExecuTorch's sdpa custom
op. What a user gives for one of these and the export contradicts is refused."""

from __future__ import annotations

from typing import Any

import torch

from devplan.errors import DevplanError
from devplan.metadata import runner_value

_CUSTOM_SDPA = ("llama.custom_sdpa", "llama.sdpa_with_kv_cache")


def llm_metadata(ep: torch.export.ExportedProgram, given: dict[str, Any], where: str = "--llm") -> dict[str, Any]:
    """`given` with every runner key the export tells, each checked against what the user gave."""
    found = read_export(ep, where)
    for name, value in found.items():
        if name in given and runner_value(name, given[name], "constant method") != value:
            raise DevplanError(
                f"{where}: {name}={given[name]!r} is given, but the export has {name}={value!r}; "
                f"leave it to --llm, or export the model with that setting"
            )
    return {**found, **given}


def read_export(ep: torch.export.ExportedProgram, where: str = "--llm") -> dict[str, Any]:
    """The runner keys an LLM export tells."""
    tokens, logits = _tokens(ep, where), _logits(ep, where)
    ops = {str(n.target).rpartition(".")[0] for n in ep.graph.nodes if n.op == "call_function"}
    custom = any(op.startswith(_CUSTOM_SDPA) for op in ops)
    caches = _caches(ep)
    seq_dim = 1 if custom else 2
    context = caches[0].shape[seq_dim] if caches else None
    length: int | torch.SymInt = tokens.shape[-1]  # a SymInt where the prompt's length is dynamic
    dynamic = isinstance(length, torch.SymInt)
    if isinstance(
        length, torch.SymInt
    ):  # as both export paths write it: one more than the token dimension's upper bound
        bound = ep.range_constraints[length.node.expr].upper
        max_seq = int(bound) + 1
    else:
        max_seq = context or int(length)
    found = {
        "get_max_seq_len": max_seq,
        "get_max_context_len": context or max_seq,
        "get_vocab_size": int(logits.shape[-1]),
        "use_kv_cache": bool(caches),
        "use_sdpa_with_kv_cache": custom,
        "enable_dynamic_shape": dynamic,
    }
    if caches:
        found["get_n_layers"] = len(caches) // 2
    return found


def _user_inputs(ep: torch.export.ExportedProgram) -> list[torch.fx.Node]:
    names = set(ep.graph_signature.user_inputs)
    return [n for n in ep.graph.nodes if n.op == "placeholder" and n.name in names]


def _tokens(ep: torch.export.ExportedProgram, where: str) -> torch.Tensor:
    inputs = _user_inputs(ep)
    val = inputs[0].meta.get("val") if inputs else None
    if not isinstance(val, torch.Tensor) or val.dtype.is_floating_point or val.dim() != 2:
        raise DevplanError(
            f"{where}: the export's first input is not a (batch, tokens) tensor of token ids, as "
            f"ExecuTorch's LLM runner passes them; export the model as an LLM for the runner "
            f"(export_llama, or transformers' TorchExportableModuleForDecoderOnlyLM)"
        )
    return val


def _logits(ep: torch.export.ExportedProgram, where: str) -> torch.Tensor:
    names = list(ep.graph_signature.user_outputs)  # after the state a functional export writes back
    outputs = {n.name: n for n in ep.graph.output_node().all_input_nodes}
    first = outputs.get(names[0]) if names else None
    val = first.meta.get("val") if first is not None else None
    if not isinstance(val, torch.Tensor) or not val.dtype.is_floating_point or val.dim() not in (2, 3):
        raise DevplanError(
            f"{where}: the export's first output is not the logits (a float tensor whose last "
            f"dimension is the vocabulary), as ExecuTorch's LLM runner reads them"
        )
    return val


def _caches(ep: torch.export.ExportedProgram) -> list[torch.Tensor]:
    """The 4-D buffers the export updates: through its signature (a functional export) or in
    place (transformers' static cache, ExecuTorch's update_cache), in graph order."""
    signature = ep.graph_signature
    buffers = {n.name: n for n in ep.graph.nodes if n.op == "placeholder" and n.name in signature.inputs_to_buffers}
    updated = {signature.inputs_to_buffers[name] for name in buffers} & set(signature.buffers_to_mutate.values())
    for node in ep.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            for argument, value in zip(node.target._schema.arguments, node.args):
                written = argument.alias_info is not None and argument.alias_info.is_write
                if written and isinstance(value, torch.fx.Node) and value.name in buffers:
                    updated.add(signature.inputs_to_buffers[value.name])
    named = dict(ep.named_buffers())
    return [
        named[name]
        for name in signature.inputs_to_buffers.values()
        if name in updated and name in named and named[name].dim() == 4
    ]
