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

import copy
from typing import Callable

import torch
import torch.utils._pytree as pytree

from testbed import hf_models
from testbed.hf_models import HFCase, _build, _randomize_batch_norm
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
    """ExecuTorch's quantizer for dynamic-int8 or int8, every op it has a pattern for."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    from devplan.quantization import MODES

    return XNNPACKQuantizer().set_global(get_symmetric_quantization_config(**MODES[mode]))


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


# ------------------------------------------------------------------ issue 51's conv-net sweep

SWEEP_SIZE = 96  # pixels a side: a real input, small enough that each lowering takes seconds


def _image(size: int = SWEEP_SIZE) -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(1, 3, size, size)


def _classifier(model_class, config) -> HFCase:
    return _randomize_batch_norm(_build(model_class, config, attn=None)), (_image(),), {}


def _resnet(layer_type: str) -> HFCase:
    from transformers import ResNetConfig, ResNetForImageClassification

    config = ResNetConfig(
        embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1], layer_type=layer_type, num_labels=10
    )
    return _classifier(ResNetForImageClassification, config)


def _regnet() -> HFCase:
    from transformers import RegNetConfig, RegNetForImageClassification

    config = RegNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 2, 1], num_labels=10)
    return _classifier(RegNetForImageClassification, config)


def _convnext() -> HFCase:
    from transformers import ConvNextConfig, ConvNextForImageClassification

    config = ConvNextConfig(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 2, 1], image_size=SWEEP_SIZE, num_labels=10)
    return _classifier(ConvNextForImageClassification, config)


def _mobilenet_v2() -> HFCase:
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    config = MobileNetV2Config(image_size=SWEEP_SIZE, depth_multiplier=0.35, num_labels=10)
    return _classifier(MobileNetV2ForImageClassification, config)


def _efficientnet() -> HFCase:
    from transformers import EfficientNetConfig, EfficientNetForImageClassification

    config = EfficientNetConfig(
        image_size=SWEEP_SIZE, width_coefficient=0.25, depth_coefficient=0.3, hidden_dim=320, num_labels=10
    )
    return _classifier(EfficientNetForImageClassification, config)


class _BasicBlock(torch.nn.Module):
    """torchvision's ResNet BasicBlock: two 3x3 convolutions with batch norms, a 1x1 strided
    downsample on the shortcut where the shape changes, the add then ReLU."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        nn = torch.nn
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + (x if self.downsample is None else self.downsample(x)))


class TorchvisionResNet(torch.nn.Module):
    """torchvision's resnet18 written out (torchvision itself is not installed: it breaks
    transformers here), at widths 16-128, one block a stage: the 7x7 stem, max pooling,
    adaptive average pooling and a linear classifier."""

    def __init__(self, widths: tuple[int, ...] = (16, 32, 64, 128), classes: int = 10) -> None:
        super().__init__()
        nn = torch.nn
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 7, 2, 3, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
        )
        blocks, cin = [], widths[0]
        for i, width in enumerate(widths):
            blocks.append(_BasicBlock(cin, width, 1 if i == 0 else 2))
            cin = width
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


def _torchvision_resnet() -> HFCase:
    torch.manual_seed(0)
    return _randomize_batch_norm(TorchvisionResNet().eval()), (_image(),), {}


# name -> builder: issue 51's conv nets at 96x96, every family's weights 0.1-2 MB
CONV_SWEEP: dict[str, Callable[[], HFCase]] = {
    "resnet_bottleneck": lambda: _resnet("bottleneck"),
    "resnet_basic": lambda: _resnet("basic"),
    "regnet": _regnet,
    "convnext": _convnext,
    "mobilenet_v2": _mobilenet_v2,
    "efficientnet": _efficientnet,
    "torchvision_resnet": _torchvision_resnet,
}
SWEEP_MODES = ("dynamic-int8", "int8")  # dynamic-int4 takes linear layers alone: a conv net's classifier


def sweep_exported(name: str) -> tuple[torch.export.ExportedProgram, torch.nn.Module, tuple]:
    """A CONV_SWEEP model's export (no_grad, non-strict), the module and its inputs."""
    module, args, kwargs = CONV_SWEEP[name]()
    with torch.no_grad():
        ep = torch.export.export(module, args, kwargs, strict=False)
    return ep, module, (*args, *kwargs.values())


def _logits(outputs) -> torch.Tensor:
    first = outputs.logits if hasattr(outputs, "logits") else outputs
    return first[0] if isinstance(first, (tuple, list)) else first


def sweep_row(name: str, mode: str, evaluations: int = 4) -> dict:
    """devplan's program and ExecuTorch's own flow's (executorch_quantized: the same quantizer
    configuration; int8 calibrated on 8 inputs) of a CONV_SWEEP model, each run on ExecuTorch's
    runtime on `evaluations` fresh inputs against the float module: SQNR (dB, over all their
    outputs), argmax agreement, planned bytes and delegates of each."""
    import devplan
    from testbed.executorch import planned_bytes
    from testbed.models import run_executorch

    ep, module, inputs = sweep_exported(name)
    samples = calibration(inputs)
    evaluated = calibration(inputs, evaluations, seed=2)
    static = mode == "int8"
    ours = devplan.compile(copy.deepcopy(ep), quantize=mode, calibration=samples if static else None).data
    theirs = executorch_quantized(ep, mode, samples if static else [inputs])
    shipped = executorch_quantized_edge(ep, mode, samples if static else [inputs], own=True).to_executorch().buffer
    with torch.no_grad():
        want = torch.cat([_logits(module(*sample)) for sample in evaluated])
    row: dict = {"model": name, "mode": mode}
    for key, pte in (("devplan", ours), ("executorch", theirs), ("shipped", shipped)):
        try:
            got = torch.cat([run_executorch(pte, sample)[0][0] for sample in evaluated])
        except RuntimeError as error:  # the program fails on ExecuTorch's runtime: no SQNR, no argmax
            row[f"{key}_sqnr_db"] = row[f"{key}_argmax"] = None
            row[f"{key}_error"] = str(error)
        else:
            row[f"{key}_sqnr_db"] = float(10 * torch.log10(want.square().sum() / (want - got).square().sum()))
            row[f"{key}_argmax"] = float((got.argmax(-1) == want.argmax(-1)).double().mean())
        row[f"{key}_planned_bytes"] = planned_bytes(pte)
        row[f"{key}_delegates"] = len(devplan.read_pte(pte).program.executionPlan[0].delegates)
    return row


def sweep_failures(row: dict, tolerance_db: float = 1.0) -> list[str]:
    """Issue 51's acceptance for a sweep_row: devplan's SQNR within `tolerance_db` of
    ExecuTorch's, argmax kept where ExecuTorch's keeps it, planned bytes and delegates no more."""
    failures = []
    if row["devplan_sqnr_db"] is None:
        failures.append(f"devplan's program fails on ExecuTorch's runtime: {row['devplan_error']}")
    elif row["executorch_sqnr_db"] is not None:  # where ExecuTorch's fails, devplan's running is enough
        if row["devplan_sqnr_db"] < row["executorch_sqnr_db"] - tolerance_db:
            failures.append(
                f"SQNR {row['devplan_sqnr_db']:.1f} dB < ExecuTorch's {row['executorch_sqnr_db']:.1f} - {tolerance_db}"
            )
        if row["devplan_argmax"] < row["executorch_argmax"]:
            failures.append(f"argmax {row['devplan_argmax']:.2f} < ExecuTorch's {row['executorch_argmax']:.2f}")
    for what in ("planned_bytes", "delegates"):
        if row[f"devplan_{what}"] > row[f"executorch_{what}"]:
            failures.append(f"{what} {row[f'devplan_{what}']:,} > ExecuTorch's {row[f'executorch_{what}']:,}")
    return failures
