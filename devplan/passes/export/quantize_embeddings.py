"""--quantize's embedding tables: stored as 8-bit rows (one scale and zero point per row, as
ExecuTorch's LLM recipe's `-E 8,0` stores them), and gathered by ExecuTorch's
`quantized_decomposed::embedding_byte`, which dequantizes only the rows it reads. XNNPACK's
quantizer takes no embedding, so without this a BERT's or a Llama's vocabulary stayed float and
was most of the quantized program's file; dequantized whole at run time, it would have been
planned at full size as well."""

from __future__ import annotations

from typing import Any

import torch

from devplan.extras import import_module
from devplan.ir.fx import arg_node

QUANTIZER_API = "torchao.quantization.pt2e.quantizer"
# registers quantized_decomposed::embedding_byte with torch (its fake and eager kernels)
EMBEDDING_BYTE = "executorch.exir.passes._quant_patterns_and_replacements"


def annotate_embeddings(model: torch.fx.GraphModule, spec: Any) -> None:  # spec: torchao's QuantizationSpec
    """Mark each embedding's table for quantization by `spec` (XNNPACK's 8-bit symmetric
    per-channel weight spec: channel 0 is a table's row), and as taken, so the report counts it
    quantized. Symmetric, since ExecuTorch's dequantize kernel takes integer zero points only
    (torchao's EmbeddingQuantizer's float ones abort its runtime)."""
    api: Any = import_module(QUANTIZER_API, "--quantize")  # torchao ships no stubs
    for node in model.graph.find_nodes(op="call_function", target=torch.ops.aten.embedding.default):
        node.meta["quantization_annotation"] = api.QuantizationAnnotation(
            input_qspec_map={node.args[0]: spec}, _annotated=True
        )


def fuse_embeddings(converted: torch.fx.GraphModule) -> None:
    """Replace each embedding of a table that convert_pt2e dequantizes whole by
    embedding_byte on the 8-bit table (the same values: a row dequantized after the gather)."""
    import_module(EMBEDDING_BYTE, "--quantize")
    dequantize = torch.ops.quantized_decomposed.dequantize_per_channel.default
    graph = converted.graph
    for node in graph.find_nodes(op="call_function", target=torch.ops.aten.embedding.default):
        table = node.args[0]
        if not (isinstance(table, torch.fx.Node) and table.target == dequantize and len(table.users) == 1):
            continue
        weight, scales, _, axis, low, high, _ = table.args
        zero_points = arg_node(table, 2)
        # rows only (embedding_byte's scales are per row), and symmetric: it takes no integer zero points
        if axis != 0 or zero_points.op != "get_attr" or getattr(converted, str(zero_points.target)).any():
            continue
        with graph.inserting_before(node):
            fused = graph.call_function(
                torch.ops.quantized_decomposed.embedding_byte.default,
                (weight, scales, None, low, high, node.args[1]),
            )
        fused.meta = dict(node.meta)
        node.replace_all_uses_with(fused)
        graph.erase_node(node)
    graph.eliminate_dead_code()
    converted.recompile()
