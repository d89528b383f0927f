"""Issue 39's models for `--quantize`, at two sizes, and ExecuTorch's own quantized flow as the
baseline. "tiny" are the test corpus's configs (testbed/hf_models.py, and mobilenet_v3.py's
tiny one): 0.1 MB of weights, where the file's framing outweighs them. "real" are configs whose
weights dominate the file (hidden sizes 256-512, 3-12 MB of float weights), so that a file
ratio measures quantizing and not the flatbuffer around it: ResNet-18 itself, MobileNet-V3-Small
itself, a 4-layer ViT of width 256, a 4-layer BERT encoder of width 256 and a 4-layer Llama of
width 256. Vocabularies stay at 2,048 tokens: the XNNPACK quantizer has no pattern for an
embedding, so a table of 30,000 tokens would stay float and be most of the file.

Each builder returns (module, args, kwargs) as hf_models' do."""

from __future__ import annotations

from typing import Callable

import torch
import torch.utils._pytree as pytree

import devplan
from devplan.compiler.result import CompileResult
from testbed import hf_models
from testbed.hf_models import HFCase, _build, _randomize_batch_norm
from testbed.lowerings import patterns_exported_once
from testbed.mobilenet_v3 import mobilenet_v3

VOCAB = 2048


def resnet18() -> HFCase:
    from transformers import ResNetConfig, ResNetForImageClassification

    config = ResNetConfig(
        embedding_size=64, hidden_sizes=[64, 128, 256, 512], depths=[2, 2, 2, 2], layer_type="basic", num_labels=1000
    )
    return (
        _randomize_batch_norm(_build(ResNetForImageClassification, config, attn=None)),
        (torch.randn(1, 3, 64, 64),),
        {},
    )


def resnet_bottleneck(hidden_sizes: tuple[int, ...] = (16, 32), size: int = 64) -> HFCase:
    """Issue 51's ResNet: transformers' default block (bottleneck: 1x1, 3x3, 1x1 convolutions
    and a 1x1 shortcut reading the block's input), its batch norms fresh, as a new user's."""
    from transformers import ResNetConfig, ResNetForImageClassification

    config = ResNetConfig(
        embedding_size=16, hidden_sizes=list(hidden_sizes), depths=[1] * len(hidden_sizes), num_labels=10
    )
    return _build(ResNetForImageClassification, config, attn=None), (torch.randn(1, 3, size, size),), {}


def vit() -> HFCase:
    from transformers import ViTConfig, ViTModel

    config = ViTConfig(
        image_size=64, patch_size=8, hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024
    )
    return _build(ViTModel, config), (torch.randn(1, 3, 64, 64),), {}


def bert() -> HFCase:
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=1024,
        max_position_embeddings=128,
    )
    mask = torch.ones(2, 32, dtype=torch.long)
    mask[1, -8:] = 0
    return _build(BertModel, config), (torch.randint(3, VOCAB, (2, 32)),), {"attention_mask": mask}


def llama() -> HFCase:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=128,
        use_cache=False,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return _build(LlamaForCausalLM, config), (torch.randint(3, VOCAB, (1, 32)),), {}


# name -> size -> builder
MODELS: dict[str, dict[str, Callable[[], HFCase]]] = {
    "resnet": {"tiny": hf_models.resnet, "real": resnet18},
    "resnet_bottleneck": {"tiny": resnet_bottleneck, "real": lambda: resnet_bottleneck((32, 64, 128, 256), 128)},
    "mobilenet_v3": {"tiny": mobilenet_v3, "real": lambda: mobilenet_v3("small")},
    "vit": {"tiny": hf_models.vit, "real": vit},
    "bert": {"tiny": hf_models.bert, "real": bert},
    "llama": {"tiny": hf_models.llama, "real": llama},
}


def exported(name: str, size: str) -> tuple[torch.export.ExportedProgram, tuple]:
    """The model's export (under no_grad, non-strict, as the corpus's) and its flat inputs,
    keyword inputs after the positional ones; any family of hf_models at its tiny size too."""
    module, args, kwargs = MODELS[name][size]() if name in MODELS else hf_models.FAMILIES[name]()
    with torch.no_grad():
        ep = torch.export.export(module, args, kwargs, strict=False)
    return ep, (*args, *kwargs.values())


def calibration(inputs: tuple, count: int = 8, seed: int = 1) -> list[tuple]:
    """`count` inputs like `inputs`: fresh normal floats, and each integer input's own values
    shuffled, so that token ids stay in the vocabulary and masks stay masks."""
    generator = torch.Generator().manual_seed(seed)

    def like(x: torch.Tensor) -> torch.Tensor:
        if x.dtype.is_floating_point:
            return torch.randn(x.shape, generator=generator).to(x.dtype)
        flat = x.flatten()
        return flat[torch.randperm(flat.numel(), generator=generator)].reshape(x.shape)

    return [tuple(like(x) for x in inputs) for _ in range(count)]


def wide_mlp() -> tuple[torch.export.ExportedProgram, tuple]:
    """Weights large enough that the program's size is the weights', not the file's framing."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).eval()
    inputs = (torch.randn(4, 64),)
    return torch.export.export(module, inputs), inputs


class TinyLM(torch.nn.Module):
    """A vocabulary table most of whose bytes are the embedding's, as a small LLM's or BERT's."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.proj = torch.nn.Embedding(2000, 64), torch.nn.Linear(64, 64)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.proj(self.embed(ids)).relu()


def devplan_quantized(ep: torch.export.ExportedProgram, **choices) -> CompileResult:
    """devplan.compile(ep, **choices), the quantizer's pattern graphs exported once per session."""
    with patterns_exported_once():
        return devplan.compile(ep, **choices)


def executorch_quantized(ep: torch.export.ExportedProgram, mode: str, samples: list[tuple]) -> bytes:
    """ExecuTorch's own flow for `mode`: the same quantizer configuration as devplan's, PT2E
    (prepare_pt2e on ep.module(), calibrated on `samples`, convert_pt2e), exported again and
    lowered by to_edge_transform_and_lower with XNNPACK's partitioner."""
    return executorch_quantized_edge(ep, mode, samples).to_executorch().buffer


def executorch_quantized_edge(ep: torch.export.ExportedProgram, mode: str, samples: list[tuple], own: bool = False):
    """executorch_quantized's EdgeProgramManager, before to_executorch: its delegates' graphs
    say which ops ExecuTorch's program computes in float. `own`: ExecuTorch's XNNPACKQuantizer
    as it ships, without devplan's departures (passes/export/quantize.py's xnnpack_quantizer)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from devplan.passes.export.quantize import xnnpack_quantizer

    def call(sample: tuple) -> tuple[tuple, dict]:
        return pytree.tree_unflatten(list(sample), ep.call_spec.in_spec)

    with torch.no_grad():
        prepared = prepare_pt2e(ep.module(), _shipped_quantizer(mode) if own else xnnpack_quantizer(mode))
        for sample in samples:
            args, kwargs = call(sample)
            prepared(*args, **kwargs)
        args, kwargs = call(samples[0])
        quantized = torch.export.export(convert_pt2e(prepared), args, kwargs, strict=False)
        return to_edge_transform_and_lower(quantized, partitioner=[XnnpackPartitioner()])


def _shipped_quantizer(mode: str):
    """ExecuTorch's quantizer for `mode`, as ExecuTorch's own examples set it: every op it has
    a pattern for, or in dynamic-int4 linear layers alone (XNNPACK packs 2-D weights alone in 4
    bits)."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    from devplan.quantization import MODES

    config = get_symmetric_quantization_config(**MODES[mode])
    if mode == "dynamic-int4":
        return XNNPACKQuantizer().set_operator_type(torch.ops.aten.linear.default, config)
    return XNNPACKQuantizer().set_global(config)


def float_computed(edge, op: str) -> int:
    """How many `op` nodes (an edge op's name, `aten.constant_pad_nd.default`) ExecuTorch's
    program computes in float, inside its delegates or outside: those whose input, or weight,
    no dequantize makes (XNNPACK runs an op quantized when dequantize feeds it: a static
    quantize-dequantize pair, or a dynamic one of choose_qparams' scale, and a weight's)."""
    program = edge.exported_program()
    graphs = [program.graph] + [
        module.original_module.graph
        for _, module in program.graph_module.named_children()
        if hasattr(module, "original_module")
    ]
    count = 0
    for graph in graphs:
        for node in graph.nodes:
            if node.op != "call_function" or _name(node) != op:
                continue
            read = [arg for arg in node.args[:2] if isinstance(arg, torch.fx.Node)]  # input, and weight if any
            count += not all(_name(arg).startswith("quantized_decomposed.dequantize") for arg in read)
    return count


def _name(node: torch.fx.Node) -> str:
    return getattr(node.target, "__name__", "") if node.op == "call_function" else ""
