"""Attention computed a block of keys at a time, so that no tensor of scores spans the whole
context: each `aten.scaled_dot_product_attention` whose scores (batch x heads x queries x keys)
would be larger than one block is rewritten into portable ops that visit the keys in blocks with
a running maximum and sum (the online softmax of flash attention), reading each key and value
once. The keys, not the queries, are split: an LLM's prompt length is dynamic while its cache is
not, and a slice of a dynamic dimension would fix its size.

A pass over the ExportedProgram, before ExecuTorch's backends partition it, so that no delegate
takes the whole score matrix into its own workspace either."""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import torch
from torch._guards import detect_fake_mode
from torch.export import ExportedProgram
from torch.export.graph_signature import ExportGraphSignature, TensorArgument

from devplan.ir.fx import arg_list, arg_node
from devplan.ir.lowered import own_graph
from devplan.passes.export.slices import sink_slices
from devplan.passes.graph.decompose import inline

SDPA = torch.ops.aten.scaled_dot_product_attention.default


@dataclasses.dataclass(frozen=True)
class Attention:
    """What became of one attention: its node, the module it is in, the keys it reads, and the
    keys of a block (None: left materialized, `why` says why)."""

    node: str
    module: str
    keys: int
    block: int | None
    why: str = ""


@dataclasses.dataclass(frozen=True)
class Blocked:
    """The attention stage's result: the program, and what became of each attention in it."""

    program: ExportedProgram
    attention: tuple[Attention, ...]


def chunk_attention(ep: ExportedProgram, mode: str, block_bytes: int) -> Blocked:
    """ep with each attention whose scores are larger than `block_bytes` computed in blocks of
    keys whose scores are not (a program of its own: the caller's is left as it was), and what
    became of every attention in it."""
    found = []
    for node in ep.graph.nodes:
        if node.target is SDPA:
            block, why = _block(node, block_bytes) if mode == "auto" else (None, "--attention materialized")
            found.append(Attention(node.name, _module(node), _keys(node), block, why))
    found += [
        _unfused(node) for node in ep.graph.nodes if node.target in _SOFTMAX and _scores(node.args[0]) is not None
    ]
    blocks = {a.node: a.block for a in found if a.block is not None}
    if not blocks:
        return Blocked(ep, tuple(found))
    gm = own_graph(ep.graph_module)
    fake = detect_fake_mode([n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"])
    traces: dict[Any, Any] = {}
    for node in [n for n in gm.graph.nodes if n.name in blocks]:
        inline(gm, node, functools.partial(blocked_attention, block=blocks[node.name]), traces, fake)
    sink_slices(gm, fake)  # each block reads its part of the mask, never the whole
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return Blocked(ep._update(gm, _outputs_renamed(ep, gm)), tuple(found))


def _outputs_renamed(ep: ExportedProgram, gm: torch.fx.GraphModule) -> ExportGraphSignature:
    """ep's signature with its outputs named as gm's output node names them: an attention the
    program returns is now the last node of its blocks."""
    names = [a.name if isinstance(a, torch.fx.Node) else None for a in arg_list(gm.graph.output_node(), 0)]
    specs = [
        dataclasses.replace(spec, arg=dataclasses.replace(spec.arg, name=name))
        if isinstance(spec.arg, TensorArgument) and name is not None
        else spec
        for spec, name in zip(ep.graph_signature.output_specs, names)
    ]
    renamed: ExportGraphSignature = dataclasses.replace(ep.graph_signature, output_specs=specs)
    return renamed


_SOFTMAX = {torch.ops.aten.softmax.int, torch.ops.aten._softmax.default}
_PRODUCTS = {torch.ops.aten.matmul.default, torch.ops.aten.bmm.default, torch.ops.aten.einsum.default}
# what a model does to its scores between their product and the softmax (scale, softcap, mask)
_ON_SCORES = {
    torch.ops.aten.mul.Tensor,
    torch.ops.aten.div.Tensor,
    torch.ops.aten.add.Tensor,
    torch.ops.aten.tanh.default,
    torch.ops.aten.masked_fill.Scalar,
    torch.ops.aten.where.self,
    torch.ops.aten.to.dtype,
    torch.ops.aten._to_copy.default,
}


def _scores(node: object, seen: tuple[object, ...] = ()) -> tuple[object, ...] | None:
    """The ops from a product of queries and keys to `node` (a softmax's input), or None when
    it does not come from one: attention the model computes with its own ops."""
    if not isinstance(node, torch.fx.Node) or len(seen) > 8:
        return None
    if node.target in _PRODUCTS:
        return seen
    if node.target not in _ON_SCORES:
        return None
    return _scores(node.args[0], (*seen, node.target))


def _unfused(softmax: torch.fx.Node) -> Attention:
    """An attention the model computes with its own matmul and softmax, which stays as it is."""
    capped = torch.ops.aten.tanh.default in (_scores(softmax.args[0]) or ())
    why = (
        "softcapping: a tanh on the scores, which scaled_dot_product_attention cannot express"
        if capped
        else "the model's own matmul and softmax, not scaled_dot_product_attention"
    )
    return Attention(softmax.name, _module(softmax), _upper(softmax.meta["val"].shape[-1]), None, why)


def _keys(node: torch.fx.Node) -> int:
    return _upper(arg_node(node, 1).meta["val"].shape[-2])


def _block(node: torch.fx.Node, block_bytes: int) -> tuple[int | None, str]:
    """The keys in a block for this attention, or None and why it stays whole."""
    query, key = (arg_node(node, i).meta["val"] for i in (0, 1))
    kwargs = dict(zip(("attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"), node.args[3:]), **node.kwargs)
    if kwargs.get("dropout_p", 0.0):
        return None, "dropout"
    keys = key.shape[-2]
    if isinstance(keys, torch.SymInt):
        return None, "a dynamic number of keys"
    rows = math.prod(_upper(size) for size in query.shape[:-1])  # sizes as symbols: never a guard on them
    per_key = rows * query.element_size()
    if per_key * keys <= block_bytes:
        return None, "scores within one block"
    block = max(4, 2 ** int(math.log2(max(1, block_bytes // per_key))))
    return (block, "") if block < keys else (None, "scores within one block")


def _upper(size: int | torch.SymInt) -> int:
    """The largest value a size can take: from its symbol's range, never int() of it, which
    would pin a dynamic size to its example's value for every later stage."""
    if not isinstance(size, torch.SymInt):
        return int(size)
    bound = size.node.shape_env.bound_sympy(size.node.expr).upper
    return int(bound) if bound.is_finite else 2**31


def _module(node: torch.fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    return next(reversed(stack.values()))[0] if stack else ""


def blocked_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    block: int,
) -> torch.Tensor:
    """scaled_dot_product_attention (eval: no dropout) over blocks of `block` keys. A masked
    score is the dtype's lowest number, not -inf: a block whose keys are all masked for a row
    then adds nothing once any later block has one that is not, and never makes a NaN."""
    heads, kv_heads = query.shape[-3], key.shape[-3]
    if enable_gqa and heads != kv_heads:
        key = key.repeat_interleave(heads // kv_heads, dim=-3)
        value = value.repeat_interleave(heads // kv_heads, dim=-3)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    query = query * scale
    lowest = torch.finfo(query.dtype).min
    keys, rows = key.shape[-2], query.shape[-2]
    running: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # (total, out, maximum) so far
    for start in range(0, keys, block):
        end = min(start + block, keys)
        scores = query @ key[..., start:end, :].transpose(-2, -1)
        mask = _mask_block(attn_mask, is_causal, rows, start, end, query.device)
        if mask is not None and mask.dtype == torch.bool:
            scores = scores.masked_fill(mask.logical_not(), lowest)
        elif mask is not None:
            scores = scores + mask
        top = scores.amax(-1, keepdim=True)
        if running is None:
            probs = torch.exp(scores - top)
            running = probs.sum(-1, keepdim=True), probs @ value[..., start:end, :], top
        else:
            total, out, maximum = running
            grown = torch.maximum(maximum, top)
            probs, kept = torch.exp(scores - grown), torch.exp(maximum - grown)
            running = total * kept + probs.sum(-1, keepdim=True), out * kept + probs @ value[..., start:end, :], grown
    if running is None:
        raise ValueError("attention over no keys")  # export gives every attention at least one key
    total, out, _ = running
    return out / total


def _mask_block(
    attn_mask: torch.Tensor | None, is_causal: bool, rows: int, start: int, end: int, device: torch.device
) -> torch.Tensor | None:
    """The mask's columns for keys start..end (a mask of one column broadcasts whole), or the
    causal mask's (query i sees keys up to i, as torch aligns it), or None."""
    if is_causal:
        return torch.arange(start, end, device=device) <= torch.arange(rows, device=device).unsqueeze(-1)
    if attn_mask is None:
        return None
    return attn_mask if attn_mask.shape[-1] == 1 else attn_mask[..., start:end]
