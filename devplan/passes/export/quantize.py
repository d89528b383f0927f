"""--quantize: a float export quantized by ExecuTorch's XNNPACK quantizer through torch's PT2E
flow (prepare_pt2e on `ep.module()`, calibrate, convert_pt2e, torch.export.export again), so
that ExecuTorch's XNNPACK backend, implied, takes the quantized ops. What it cost is estimated
on the way: the eager quantized module's outputs against the float model's on the calibration
inputs (or seeded samples), and the ops the quantizer left in float; the compile then measures
the program it writes on the same samples (devplan/measure.py). Only this stage imports the
quantizer (the `devplan[executorch]` extra)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Sequence, cast

import torch
import torch.utils._pytree as pytree

from devplan.documents import Quantization, QuantizationError, QuantizeMode
from devplan.errors import DevplanError, first_line
from devplan.extras import import_module
from devplan.gate.unlift import check_unliftable
from devplan.passes.export.calibration import call, dynamic_shapes, samples_of
from devplan.passes.export.quantize_embeddings import annotate_embeddings, fuse_embeddings
from devplan.passes.export.quantize_patterns import patterns_exported_once
from devplan.passes.export.quantize_stems import leave_padded_input_convolutions_float
from devplan.passes.export.quantize_torchao import quantize_8da4w, taken_8da4w
from devplan.quantization import GROUP_SIZE, MODES, TAKES, TORCHAO

QUANTIZER = "executorch.backends.xnnpack.quantizer.xnnpack_quantizer"  # the devplan[executorch] extra's
PT2E = "torchao.quantization.pt2e.quantize_pt2e"
DUPLICATE = (
    "executorch.backends.transforms.duplicate_dynamic_quant_chain"  # ExecuTorch's own, as its LLM export runs it
)


@dataclass(frozen=True)
class Error:
    """The quantized outputs against the float model's (every float output, all samples
    together)."""

    sqnr_db: float | None  # None when the outputs are equal, or the float ones all zeros
    max_abs_diff: float
    argmax_agreement: float | None  # of a 2-D first output (a classifier's logits), else None

    def summary(self) -> QuantizationError:
        return {"sqnr_db": self.sqnr_db, "max_abs_diff": self.max_abs_diff, "argmax_agreement": self.argmax_agreement}


# where `error` was measured: the written program on ExecuTorch's runtime or on devplan's, or
# (neither could run it) the eager quantized module, an estimate
MeasuredOn = Literal["executorch", "devplan", "eager"]


@dataclass(frozen=True)
class QuantizeReport:
    """What quantizing cost, measured on `samples` inputs (from --calibration, the first
    `given` holds, or seeded): the quantized outputs against the float model's, and the ops the
    quantizer took no pattern for, by op. The quantize stage measures the eager quantized module;
    the compile then measures the program it writes (devplan/measure.py) and keeps both."""

    mode: str
    samples: int
    given: int  # the inputs --calibration holds (or the seeded samples): more than `samples` when bounded
    calibrated: bool  # the samples were --calibration's, not seeded
    error: Error
    float_ops: tuple[tuple[str, int], ...]  # (op, how many), most first
    float_weight_bytes: int
    quantized_weight_bytes: int
    eager: Error  # the eager quantized module's, the estimate
    measured_on: MeasuredOn = "eager"
    warning: str | None = None  # the program computes far from the estimate, or fails to run

    def summary(self) -> Quantization:
        """compile --json's `quantization` (docs/compile-json.md)."""
        return {
            "mode": cast(QuantizeMode, self.mode),
            "samples": self.samples,
            "samples_given": self.given,
            "calibration": "file" if self.calibrated else "seeded",
            "error": self.error.summary(),
            "measured_on": self.measured_on,
            "eager_error": self.eager.summary(),
            "warning": self.warning,
            "float_ops": dict(self.float_ops),
            "weights": {"float_bytes": self.float_weight_bytes, "quantized_bytes": self.quantized_weight_bytes},
        }


@dataclass(frozen=True)
class Reference:
    """What the program is measured against: the samples, flat, and the float model's float
    outputs on each."""

    samples: tuple[tuple[Any, ...], ...]
    want: tuple[tuple[torch.Tensor, ...], ...]


@dataclass(frozen=True)
class Quantized:
    """The quantize stage's result: the quantized program, what quantizing cost, and the
    float model's outputs to measure the written program against."""

    program: torch.export.ExportedProgram
    report: QuantizeReport
    reference: Reference


def quantize(
    ep: torch.export.ExportedProgram,
    mode: str,
    calibration: "Path | tuple[Any, ...] | None",
    on_sample: Callable[[int, int], None] | None = None,
    group_size: int = GROUP_SIZE,
) -> Quantized:
    """`ep` quantized as `mode` says, calibrated on `calibration` (a file of input tuples or
    the tuples themselves; the first CALIBRATION_SAMPLES) or, for a dynamic mode without it, on
    seeded samples; `on_sample` is told the samples calibrated on so far and how many there are.
    8da4w (torchao's LLM recipe, passes/export/quantize_torchao.py) calibrates nothing: its weights'
    scales are their own, its activations' chosen at run time; `group_size` is its weights' groups."""
    _refuse_quantized(ep)
    check_unliftable(ep, f"--quantize {mode}")  # before ep.module() below builds and runs its code
    found = samples_of(ep, calibration)
    samples = found.used
    float_module = ep.module()
    restore = _restorer(ep)
    with torch.no_grad():
        if mode in TORCHAO:
            converted = ep.module()
            taken = taken_8da4w(converted, group_size)
            if not taken:
                raise DevplanError(
                    f"--quantize {mode}: takes none of this program's ops (it quantizes {TAKES[mode]}, "
                    f"--group-size {group_size})"
                )
            float_ops = _unannotated(converted, False, taken.__contains__)
            quantize_8da4w(converted, taken, group_size)
        else:
            converted, float_ops = _pt2e(ep, mode, samples, on_sample, restore)
        # the largest sample as the example: export takes a size of 1 as fixed, not dynamic
        args, kwargs = call(
            ep, max(samples, key=lambda sample: sum(t.numel() for t in sample if isinstance(t, torch.Tensor)))
        )
        try:
            program = torch.export.export(
                converted, args, kwargs, dynamic_shapes=dynamic_shapes(ep, converted, found.specs), strict=False
            )
        except Exception as error:  # torch's export of the quantized module: the user's model, not devplan
            raise DevplanError(
                f"--quantize {mode}: exporting the quantized module failed: {first_line(error)}"
            ) from None
        want = tuple(_float_outputs(float_module, ep, sample, restore) for sample in samples)
        eager = error_of(want, [_float_outputs(converted, ep, sample, restore) for sample in samples])
        restore()  # the program's initial state, as the export had it
    report = QuantizeReport(
        mode,
        len(samples),
        found.given,
        calibration is not None,
        eager,
        float_ops,
        _weight_bytes(ep),
        _weight_bytes(program),
        eager,
    )
    return Quantized(program, report, Reference(tuple(tuple(sample) for sample in samples), want))


def _restorer(ep: torch.export.ExportedProgram) -> Callable[[], None]:
    """A function that puts the program's buffers back as they are now. The modules made from
    `ep` hold its buffers' own tensors, as the re-export does, and an LLM's KV caches are written
    in place (transformers' recipe: index_copy_, never a buffer to mutate in the signature): run
    on one sample after another, the float and the quantized module each read what the samples
    before wrote, where the program measured starts each sample from its initial state; and that
    state was what the samples last wrote (4 times 8 KiB in the test Llama's file, where
    ExecuTorch's program stores none)."""
    held = {**ep.state_dict, **ep.constants}
    saved = {
        spec.target: held[spec.target].clone()
        for spec in ep.graph_signature.input_specs
        if spec.kind == torch.export.graph_signature.InputKind.BUFFER
        and isinstance(held.get(spec.target), torch.Tensor)
    }

    def restore() -> None:
        for name, value in saved.items():
            held[name].copy_(value)

    return restore


def _pt2e(
    ep: torch.export.ExportedProgram,
    mode: str,
    samples: list[tuple[Any, ...]],
    on_sample: Callable[[int, int], None] | None,
    restore: Callable[[], None],
) -> tuple[torch.fx.GraphModule, tuple[tuple[str, int], ...]]:
    """`ep`'s module quantized by ExecuTorch's XNNPACK quantizer through PT2E, calibrated on
    `samples` (each from the program's initial state, `restore`), and the ops the quantizer
    left in float."""
    pt2e = import_module(PT2E, "--quantize")
    with patterns_exported_once():  # 3 s of a small model's 5 otherwise
        prepared = pt2e.prepare_pt2e(ep.module(), xnnpack_quantizer(mode))
    float_ops = _unannotated(prepared, not MODES[mode]["is_dynamic"], _annotated)
    if not any(_annotated(node) for node in prepared.graph.nodes):
        raise DevplanError(
            f"--quantize {mode}: the XNNPACK quantizer takes none of this program's ops "
            f"(in {mode} it quantizes {TAKES[mode]})"
        )
    for index, sample in enumerate(samples):
        args, kwargs = call(ep, sample)
        restore()
        try:
            prepared(*args, **kwargs)
        except RuntimeError as error:  # an observer given NaN or an infinity has no range to quantize to
            if "is not finite" not in str(error):
                raise
            raise DevplanError(
                f"--calibration: on sample {index} the model computes NaN or infinite values where "
                f"{mode} measures them ({first_line(error)}); calibrate on the inputs it will run on"
            ) from None
        if on_sample is not None:
            on_sample(index + 1, len(samples))
    converted = pt2e.convert_pt2e(prepared)
    _quantize_per_reader(converted)
    fuse_embeddings(converted)
    return converted, float_ops


def xnnpack_quantizer(mode: str) -> Any:
    """ExecuTorch's XNNPACKQuantizer for `mode`, except that the scalars of integer add and
    mul stay numbers: ExecuTorch 1.5.1 makes every such scalar a float tensor before it
    annotates, and integer arithmetic on one (BERT's position ids) then indexes with floats;
    that dynamic-int8 leaves float a convolution reading a pad of the model's input, whose
    program ExecuTorch's runtime refuses otherwise (passes/export/quantize_stems.py); and that
    every mode stores embedding tables in 8 bits a row (passes/export/quantize_embeddings.py). A
    convolution a ReLU follows stays float in the dynamic modes, as ExecuTorch's quantizer leaves
    it (to conv_relu, a static-only pattern): taken, it cost 1.3-4.3 dB SQNR against
    ExecuTorch's own program on its runtime (the conv sweep's ResNets and RegNet, issue 51)."""
    xnnpack = import_module(QUANTIZER, "--quantize")
    config = xnnpack.get_symmetric_quantization_config(**MODES[mode])
    rows = xnnpack.get_symmetric_quantization_config(is_per_channel=True).weight  # 8 bits, whatever the mode

    class Quantizer(xnnpack.XNNPACKQuantizer):  # type: ignore[name-defined, misc]  # imported at run time, untyped
        def annotate(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
            model = super().annotate(model)
            if mode == "dynamic-int8":
                leave_padded_input_convolutions_float(model)
            annotate_embeddings(model, rows)
            return model

        def transform_for_annotation(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
            integer = [
                node for node in model.graph.nodes if node.target in _SCALAR_OPS and not _is_float(node.meta.get("val"))
            ]
            for node in integer:  # hidden from the conversion under another overload, then restored
                node.target = _SCALAR_OPS[node.target]
            model = super().transform_for_annotation(model)
            for node in integer:
                node.target = _SCALAR_OPS[node.target]
            return model

    if mode == "dynamic-int4":
        return Quantizer().set_operator_type(torch.ops.aten.linear.default, config)
    return Quantizer().set_global(config)


def _quantize_per_reader(converted: torch.fx.GraphModule) -> None:
    """Each reader of a dynamically quantized tensor given its own choose_qparams, quantize and
    dequantize (the same numbers): XNNPACK computes wrong a tensor quantized once and read by
    a 1x1 stride-1 convolution and by another convolution (a bottleneck block's first
    convolution and its shortcut: 13 dB against the float model where the eager module has 41;
    issue 51), which ExecuTorch's own program does too when both are quantized; and a decoder's
    q, k and v (gate and up) linears, reading one normalized tensor quantized once, made
    XNNPACK's partitions a cycle that ExecuTorch's lowering refuses ("Invalid partition, found
    dependency cycles": every transformers Llama and Qwen2, tests/llm/test_llm_quantize.py). A
    no-op for static quantization, whose parameters are constants."""
    import_module(DUPLICATE, "--quantize").DuplicateDynamicQuantChainPass()(converted)


# add.Tensor <-> add.Scalar, mul.Tensor <-> mul.Scalar: the overloads xnnpack_quantizer swaps
_SCALAR_OPS = {
    torch.ops.aten.add.Tensor: torch.ops.aten.add.Scalar,
    torch.ops.aten.mul.Tensor: torch.ops.aten.mul.Scalar,
}
_SCALAR_OPS.update({scalar: tensor for tensor, scalar in _SCALAR_OPS.items()})


def _refuse_quantized(ep: torch.export.ExportedProgram) -> None:
    """An export that already holds quantize/dequantize ops was quantized once: doing it again
    would quantize the dequantized weights a second time."""
    for node in ep.graph.nodes:
        if node.op == "call_function" and getattr(node.target, "namespace", "") == "quantized_decomposed":
            raise DevplanError(
                f"--quantize: the export is already quantized (node {node.name} calls "
                f"{node.target.name()}); compile it without --quantize"
            )


def _annotated(node: torch.fx.Node) -> bool:
    annotation = node.meta.get("quantization_annotation")
    return annotation is not None and getattr(annotation, "_annotated", False)


def _unannotated(
    prepared: torch.fx.GraphModule, static: bool, taken: Callable[[torch.fx.Node], bool]
) -> tuple[tuple[str, int], ...]:
    """The ops that compute float tensors and that the quantizer left alone, by op: views,
    shape arithmetic and dropout outside training are left out, since they compute nothing to
    quantize (the lowering drops an eval-mode dropout; ViT and BERT have one per block); so is
    a static program's zero pad of a quantized tensor, which XNNPACK's lowering pads quantized."""
    ops: Counter[str] = Counter()
    for node in prepared.graph.nodes:
        value = node.meta.get("val")
        if (
            node.op != "call_function"
            or not isinstance(node.target, torch._ops.OpOverload)
            or node.target.is_view
            or not isinstance(value, torch.Tensor)
            or not value.dtype.is_floating_point
            or taken(node)
            or _identity(node)
            or (static and _quantized_pad(node))
        ):
            continue
        ops[node.target.name()] += 1  # type: ignore[no-untyped-call]  # torch leaves OpOverload.name untyped
    return tuple(sorted(ops.items(), key=lambda item: (-item[1], item[0])))


def _quantized_pad(node: torch.fx.Node) -> bool:
    """A zero pad, by no negative amount, of a tensor the prepared module observes (which
    convert_pt2e quantizes and dequantizes): ExecuTorch's XNNPACK lowering (InsertPadQDQPass)
    quantizes its result with its input's parameters and runs it as a quantized pad.
    MobileNetV2 (transformers pads as TensorFlow does) has one before each strided or depthwise
    convolution: all but the image's own stay int8."""
    if node.target not in (torch.ops.aten.pad.default, torch.ops.aten.constant_pad_nd.default):
        return False
    source, amounts, args = node.args[0], node.args[1], node.args
    if node.target is torch.ops.aten.pad.default:  # pad(input, pad, mode="constant", value=None)
        mode = args[2] if len(args) > 2 else node.kwargs.get("mode", "constant")
        fill = args[3] if len(args) > 3 else node.kwargs.get("value")
    else:  # constant_pad_nd(input, pad, value=0)
        mode, fill = "constant", args[2] if len(args) > 2 else node.kwargs.get("value", 0)
    observed = (
        isinstance(source, torch.fx.Node)
        and source.op == "call_module"
        and "activation_post_process" in str(source.target)
    )
    return (
        observed
        and mode == "constant"
        and not fill
        and isinstance(amounts, (list, tuple))
        and all(isinstance(amount, int) and amount >= 0 for amount in amounts)
    )


def _identity(node: torch.fx.Node) -> bool:
    """A dropout that is not training: its input, unchanged."""
    if node.target is not torch.ops.aten.dropout.default:
        return False
    train = node.args[2] if len(node.args) > 2 else node.kwargs.get("train")
    return train is False


def _float_outputs(
    module: torch.nn.Module, ep: torch.export.ExportedProgram, sample: tuple[Any, ...], restore: Callable[[], None]
) -> tuple[torch.Tensor, ...]:
    """`module`'s float outputs on `sample`, from the program's initial state (`restore`)."""
    restore()
    args, kwargs = call(ep, sample)
    return tuple(t for t in pytree.tree_leaves(module(*args, **kwargs)) if _is_float(t))


def error_of(want: Sequence[Sequence[torch.Tensor]], got: Sequence[Sequence[torch.Tensor]]) -> Error:
    """The error of `got`'s float outputs against `want`'s, sample by sample, over every
    sample: SQNR in dB, max abs difference and argmax agreement."""
    signal = noise = 0.0
    largest = 0.0
    agree = rows = 0
    for wants, gots in zip(want, got):
        for w, g in zip(wants, gots):
            w, g = w.double(), g.double()
            signal += float(w.square().sum())
            noise += float((w - g).square().sum())
            largest = max(largest, float((w - g).abs().max())) if w.numel() else largest
        if wants and wants[0].dim() == 2:  # a classifier's logits: does the top class stay?
            agree += int((wants[0].argmax(-1) == gots[0].argmax(-1)).sum())
            rows += wants[0].shape[0]
    sqnr = round(10 * math.log10(signal / noise), 2) if noise and signal else None  # JSON has no infinities
    return Error(sqnr, largest, agree / rows if rows else None)


def _is_float(value: object) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype.is_floating_point


def _weight_bytes(ep: torch.export.ExportedProgram) -> int:
    """Bytes of the weights and constants the graph reads: the re-exported module still holds
    the float originals of the weights it quantized, which nothing reads and no program stores."""
    read = {node.name for node in ep.graph.find_nodes(op="placeholder") if node.users}
    held = {**ep.state_dict, **ep.constants}
    return sum(
        held[spec.target].nbytes
        for spec in ep.graph_signature.input_specs
        if spec.arg.name in read and spec.target in held and isinstance(held[spec.target], torch.Tensor)
    )
