"""--quantize 8da4w: the LLM recipe that ExecuTorch's `export_llama -X -qmode 8da4w -G 32 -E 8,0`
and optimum-executorch's `--qlinear 8da4w --qembedding 8w` run on a model before its export, run
here on the export's module: torchao stores each embedding table in 8 bits a row and each linear
whose input splits into groups of `group_size` in 4-bit weights a group, its input quantized to 8
bits per token at run time; both choose their scales as the recipes do (half-quadratic, scale
only). The re-export then traces torchao's ops as the recipes' exports hold them, which XNNPACK's
partitioner takes; each table is gathered by `quantized_decomposed::embedding_byte`, as
ExecuTorch's quant fusion makes of the recipes' tables, so only the rows read are dequantized."""

from __future__ import annotations

import operator
from typing import Any, cast

import torch

from devplan.extras import import_module
from devplan.ir.fx import arg_node

ALGORITHM = "hqq_scale_only"  # the recipes' choice of scales (export_llama's use_hqq, optimum's default)
QUANTIZATION = "torchao.quantization"
GRANULARITY = "torchao.quantization.granularity"
UNWRAP = "torchao.utils"
# registers quantized_decomposed::embedding_byte with torch (its fake and eager kernels)
EMBEDDING_BYTE = "executorch.exir.passes._quant_patterns_and_replacements"


def taken_8da4w(module: torch.fx.GraphModule, group_size: int) -> list[torch.fx.Node]:
    """The nodes 8da4w quantizes in `module` (an export's, unlifted): the embeddings of 2-D
    tables, and the linears whose input size is a multiple of `group_size` (the recipes leave
    the others float), each of a weight the module holds."""
    tables = [
        node
        for node in _weighted(module, torch.ops.aten.embedding.default, 0)
        if arg_node(node, 0).meta["val"].dim() == 2
    ]
    linears = [
        node
        for node in _weighted(module, torch.ops.aten.linear.default, 1)
        if arg_node(node, 1).meta["val"].shape[-1] % group_size == 0
        and (len(node.args) < 3 or node.args[2] is None or arg_node(node, 2).op == "get_attr")  # a weight's bias
    ]
    return tables + linears


def quantize_8da4w(module: torch.fx.GraphModule, taken: list[torch.fx.Node], group_size: int) -> None:
    """Quantize `taken` (taken_8da4w's) in `module` in place as 8da4w, in groups of `group_size`."""
    ao: Any = import_module(QUANTIZATION, "--quantize")  # torchao ships no stubs
    granularity: Any = import_module(GRANULARITY, "--quantize")
    tables = [node for node in taken if node.target is torch.ops.aten.embedding.default]
    linears = [node for node in taken if node.target is torch.ops.aten.linear.default]
    for node in tables:
        _gather_8bit(module, node, ao, granularity)
    wrappers = {_as_linear(module, node): node for node in linears}
    ao.quantize_(
        module,
        ao.Int8DynamicActivationIntxWeightConfig(
            weight_dtype=torch.int4,  # type: ignore[attr-defined]  # torch has it, its stubs do not
            weight_granularity=granularity.PerGroup(group_size),
            intx_choose_qparams_algorithm=ALGORITHM,
        ),
        filter_fn=lambda submodule, _: submodule in wrappers,
    )
    # plain tensors for torch.export: each weight computed from the subclass's own (its 4-bit
    # values held in int8, its scales and zero points), as the recipes unwrap before exporting
    import_module(UNWRAP, "--quantize").unwrap_tensor_subclass(module)
    _drop_unread(module)
    module.recompile()


def _weighted(module: torch.fx.GraphModule, op: torch._ops.OpOverload, position: int) -> list[torch.fx.Node]:
    """The calls of `op` whose argument at `position` is a float weight the module holds."""
    found = []
    for node in module.graph.find_nodes(op="call_function", target=op):
        weight = node.args[position]
        value = weight.meta.get("val") if isinstance(weight, torch.fx.Node) else None
        if weight.op == "get_attr" and isinstance(value, torch.Tensor) and value.dtype.is_floating_point:
            found.append(node)
    return found


def _gather_8bit(module: torch.fx.GraphModule, node: torch.fx.Node, ao: Any, granularity: Any) -> None:
    """The table `node` reads quantized by torchao to 8 bits a row (as the recipes' embedding
    config does), kept as its int8 rows and scales, and `node` an embedding_byte on them."""
    import_module(EMBEDDING_BYTE, "--quantize")
    table = cast(torch.fx.Node, node.args[0])
    rows, width = table.meta["val"].shape
    embedding = torch.nn.Embedding(rows, width, device="meta")
    embedding.weight = torch.nn.Parameter(_attr(module, table), requires_grad=False)
    ao.quantize_(
        embedding,
        ao.IntxWeightOnlyConfig(
            weight_dtype=torch.int8, granularity=granularity.PerAxis(0), intx_choose_qparams_algorithm=ALGORITHM
        ),
        filter_fn=lambda submodule, _: isinstance(submodule, torch.nn.Embedding),
    )
    quantized: Any = embedding.weight  # torchao's IntxUnpackedToInt8Tensor: qdata, scale, zero_point
    assert not quantized.zero_point.any(), "torchao's scale-only choice is symmetric: its zero points are 0"
    name = str(table.target).replace(".", "_")
    module.register_buffer(f"{name}_int8", quantized.qdata)
    module.register_buffer(f"{name}_scales", quantized.scale)
    graph = module.graph
    with graph.inserting_before(node):
        values, scales = graph.get_attr(f"{name}_int8"), graph.get_attr(f"{name}_scales")
        gathered = graph.call_function(
            torch.ops.quantized_decomposed.embedding_byte.default, (values, scales, None, -128, 127, node.args[1])
        )
    gathered.meta = dict(node.meta)
    node.replace_all_uses_with(gathered)
    graph.erase_node(node)


def _as_linear(module: torch.fx.GraphModule, node: torch.fx.Node) -> torch.nn.Linear:
    """`node`'s linear as a call of an nn.Linear holding its weight and bias (what torchao's
    quantize_ takes), named after the weight."""
    x, weight, bias = cast(tuple[torch.fx.Node, torch.fx.Node, "torch.fx.Node | None"], (*node.args, None)[:3])
    out_features, in_features = weight.meta["val"].shape
    linear = torch.nn.Linear(in_features, out_features, bias=bias is not None, device="meta")
    linear.weight = torch.nn.Parameter(_attr(module, weight), requires_grad=False)
    if bias is not None:
        linear.bias = torch.nn.Parameter(_attr(module, bias), requires_grad=False)
    name = str(weight.target).replace(".", "_") + "_8da4w"
    module.add_submodule(name, linear)
    with module.graph.inserting_before(node):
        call = module.graph.call_module(name, (x,))
    call.meta = dict(node.meta)
    node.replace_all_uses_with(call)
    module.graph.erase_node(node)
    return linear


def _attr(module: torch.nn.Module, node: torch.fx.Node) -> torch.Tensor:
    weight: torch.Tensor = operator.attrgetter(str(node.target))(module)
    return weight


def _drop_unread(module: torch.fx.GraphModule) -> None:
    """The float weights nothing reads any more, dropped: the re-export would lift every
    parameter the module holds, read or not."""
    module.graph.eliminate_dead_code()
    read = {str(node.target) for node in module.graph.find_nodes(op="get_attr")}
    for name, _ in list(module.named_parameters(remove_duplicate=False)):
        if name not in read and ".parametrizations." not in name and "_8da4w." not in name:
            owner, _, leaf = name.rpartition(".")
            delattr(module.get_submodule(owner), leaf)
