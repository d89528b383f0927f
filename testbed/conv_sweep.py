"""Issue 51's conv-net sweep: transformers' ResNet (bottleneck and basic), RegNet, ConvNeXt,
MobileNetV2 and EfficientNet and a torchvision-style ResNet, each quantized by devplan and by
ExecuTorch's own flow with its XNNPACKQuantizer as it ships (the same configuration), both run
on ExecuTorch's runtime against the float model. benchmarks/quantize.py --conv-sweep prints the
rows, and with --record keeps ExecuTorch's in RECORD; tests/quantize/test_conv_sweep.py holds
devplan's programs, made and run now, to issue 51's acceptance (sweep_failures) against it."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

import torch

from testbed.hf_models import HFCase, _build, _randomize_batch_norm
from testbed.quantize_models import calibration, executorch_quantized_edge

SWEEP_SIZE = 96  # pixels a side: a real input, small enough that each lowering takes seconds
# dynamic-int4 takes linear layers alone (a conv net's classifier): the benchmark runs it, the
# suite holds the modes that take convolutions
SWEEP_MODES = ("dynamic-int8", "int8")
ALL_MODES = ("dynamic-int8", "int8", "dynamic-int4")
CALIBRATION = 8  # int8's calibration inputs, the same to both flows
EVALUATIONS = 4  # fresh inputs each program runs on, against the float model


def _image(size: int) -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(1, 3, size, size)


def _classifier(model_class, config, size: int) -> HFCase:
    return _randomize_batch_norm(_build(model_class, config, attn=None)), (_image(size),), {}


def _resnet(layer_type: str, size: int) -> HFCase:
    from transformers import ResNetConfig, ResNetForImageClassification

    config = ResNetConfig(
        embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1], layer_type=layer_type, num_labels=10
    )
    return _classifier(ResNetForImageClassification, config, size)


def _regnet(size: int) -> HFCase:
    from transformers import RegNetConfig, RegNetForImageClassification

    config = RegNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 2, 1], num_labels=10)
    return _classifier(RegNetForImageClassification, config, size)


def _convnext(size: int) -> HFCase:
    from transformers import ConvNextConfig, ConvNextForImageClassification

    config = ConvNextConfig(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 2, 1], image_size=size, num_labels=10)
    return _classifier(ConvNextForImageClassification, config, size)


def _mobilenet_v2(size: int) -> HFCase:
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    config = MobileNetV2Config(image_size=size, depth_multiplier=0.35, num_labels=10)
    return _classifier(MobileNetV2ForImageClassification, config, size)


def _efficientnet(size: int) -> HFCase:
    from transformers import EfficientNetConfig, EfficientNetForImageClassification

    config = EfficientNetConfig(
        image_size=size, width_coefficient=0.25, depth_coefficient=0.3, hidden_dim=320, num_labels=10
    )
    return _classifier(EfficientNetForImageClassification, config, size)


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


def _torchvision_resnet(size: int) -> HFCase:
    torch.manual_seed(0)
    return _randomize_batch_norm(TorchvisionResNet().eval()), (_image(size),), {}


# name -> builder of its model at a side of so many pixels: every family's weights 0.1-2 MB
CONV_SWEEP: dict[str, Callable[[int], HFCase]] = {
    "resnet_bottleneck": lambda size: _resnet("bottleneck", size),
    "resnet_basic": lambda size: _resnet("basic", size),
    "regnet": _regnet,
    "convnext": _convnext,
    "mobilenet_v2": _mobilenet_v2,
    "efficientnet": _efficientnet,
    "torchvision_resnet": _torchvision_resnet,
}


@dataclass(frozen=True)
class SweepModel:
    """A CONV_SWEEP model exported once for every mode: the export (no_grad, non-strict), its
    inputs, the fresh inputs the programs are judged on and the float model's logits on them."""

    name: str
    size: int
    ep: torch.export.ExportedProgram
    inputs: tuple
    evaluated: tuple[tuple, ...]
    want: torch.Tensor


def _logits(outputs) -> torch.Tensor:
    first = outputs.logits if hasattr(outputs, "logits") else outputs
    return first[0] if isinstance(first, (tuple, list)) else first


def sweep_model(name: str, size: int = SWEEP_SIZE) -> SweepModel:
    module, args, kwargs = CONV_SWEEP[name](size)
    inputs = (*args, *kwargs.values())
    evaluated = tuple(calibration(inputs, EVALUATIONS, seed=2))
    with torch.no_grad():
        ep = torch.export.export(module, args, kwargs, strict=False)
        want = torch.cat([_logits(module(*sample)) for sample in evaluated])
    return SweepModel(name, size, ep, inputs, evaluated, want)


def _measured(model: SweepModel, pte: bytes) -> dict:
    """A program's SQNR against the float model (dB, over every evaluated input's logits) and
    argmax agreement on ExecuTorch's runtime (None where the runtime refuses it), planned bytes
    and delegates."""
    import devplan
    from testbed.executorch import planned_bytes
    from testbed.models import run_executorch

    measured: dict = {"planned_bytes": planned_bytes(pte)}
    measured["delegates"] = len(devplan.read_pte(pte).program.executionPlan[0].delegates)
    try:
        got = torch.cat([run_executorch(pte, sample)[0][0] for sample in model.evaluated])
    except RuntimeError as error:  # the program fails on ExecuTorch's runtime: no SQNR, no argmax
        return {**measured, "sqnr_db": None, "argmax": None, "error": str(error)}
    want = model.want
    sqnr = float(10 * torch.log10(want.square().sum() / (want - got).square().sum()))
    return {**measured, "sqnr_db": sqnr, "argmax": float((got.argmax(-1) == want.argmax(-1)).double().mean())}


def sweep_row(model: SweepModel, mode: str, executorch: dict | None = None) -> dict:
    """devplan's program of `model` in `mode` (int8 calibrated on CALIBRATION inputs) measured
    on ExecuTorch's runtime (_measured: keys devplan_*), beside ExecuTorch's (`executorch`, as
    recorded, or else executorch_flows run now)."""
    import devplan

    static = mode == "int8"
    given = _given(model, mode)
    ours = devplan.compile(copy.deepcopy(model.ep), quantize=mode, calibration=given if static else None).data
    row: dict = {"model": model.name, "mode": mode, "size": model.size}
    row.update({f"devplan_{what}": value for what, value in _measured(model, ours).items()})
    row.update(executorch_flows(model, mode) if executorch is None else executorch)
    return row


def _given(model: SweepModel, mode: str) -> list[tuple]:
    """What both flows calibrate on: CALIBRATION seeded inputs for int8, the example for the
    dynamic modes (whose activations' ranges are taken at run time)."""
    return calibration(model.inputs, CALIBRATION) if mode == "int8" else [model.inputs]


def executorch_flows(model: SweepModel, mode: str) -> dict:
    """ExecuTorch's own flow's program of `model` in `mode`, with its quantizer as it ships,
    measured on its runtime (keys executorch_*); where that program fails there, also its flow
    with devplan's quantizer (passes/export/quantize.py's xnnpack_quantizer: its departures, such as the
    stems dynamic-int8 leaves float; keys departed_*): the departure proven on the runtime, as
    issue 51 asks, and the row judged against that program."""
    given = _given(model, mode)
    shipped = executorch_quantized_edge(model.ep, mode, given, own=True).to_executorch().buffer
    row = {f"executorch_{what}": value for what, value in _measured(model, shipped).items()}
    if row["executorch_sqnr_db"] is None:
        departed = executorch_quantized_edge(model.ep, mode, given).to_executorch().buffer
        row.update({f"departed_{what}": value for what, value in _measured(model, departed).items()})
    return row


# ExecuTorch's rows as benchmarks/quantize.py --conv-sweep --record measured them: ExecuTorch's
# flows are half of each row's time, and the same for every run of the same versions
RECORD = Path(__file__).with_name("conv_sweep_executorch.json")


def recorded(name: str, mode: str) -> dict:
    """ExecuTorch's keys of the row of `name` in `mode` at SWEEP_SIZE, as RECORD holds them."""
    return record_held()["rows"][f"{name} {mode}"]


@lru_cache(maxsize=1)
def record_held() -> dict:
    return json.loads(RECORD.read_text())


def record(rows: list[dict]) -> None:
    """RECORD with ExecuTorch's keys of `rows` (run at SWEEP_SIZE) in place of what it held."""
    import executorch.version

    held = json.loads(RECORD.read_text()) if RECORD.exists() else {"rows": {}}
    held.update(
        executorch=executorch.version.__version__,
        torch=torch.__version__,
        side=SWEEP_SIZE,
        calibration=CALIBRATION,
        evaluations=EVALUATIONS,
    )
    for row in rows:
        assert row["size"] == SWEEP_SIZE, "the record is of SWEEP_SIZE's rows"
        held["rows"][f"{row['model']} {row['mode']}"] = {
            key: value.splitlines()[0] if key.endswith("_error") else value
            for key, value in row.items()
            if key.startswith(("executorch_", "departed_"))
        }
    held["rows"] = dict(sorted(held["rows"].items()))
    RECORD.write_text(json.dumps(held, indent=1) + "\n")
    record_held.cache_clear()


def sweep_failures(row: dict, tolerance_db: float = 1.0) -> list[str]:
    """Issue 51's acceptance for a sweep_row: devplan's program runs; its SQNR within
    `tolerance_db` of ExecuTorch's, argmax kept where ExecuTorch's keeps it, planned bytes and
    delegates no more. ExecuTorch's is its flow with its quantizer as it ships, or where that
    program fails on its runtime, its flow with devplan's quantizer (departed_*)."""
    failures = []
    judge = "departed" if "departed_sqnr_db" in row else "executorch"
    if row["devplan_sqnr_db"] is None:
        failures.append(f"devplan's program fails on ExecuTorch's runtime: {row['devplan_error']}")
    elif row[f"{judge}_sqnr_db"] is not None:  # where ExecuTorch's fails too, devplan's running is enough
        if row["devplan_sqnr_db"] < row[f"{judge}_sqnr_db"] - tolerance_db:
            failures.append(
                f"SQNR {row['devplan_sqnr_db']:.1f} dB < ExecuTorch's {row[f'{judge}_sqnr_db']:.1f} - {tolerance_db}"
            )
        if row["devplan_argmax"] < row[f"{judge}_argmax"]:
            failures.append(f"argmax {row['devplan_argmax']:.2f} < ExecuTorch's {row[f'{judge}_argmax']:.2f}")
    for what in ("planned_bytes", "delegates"):
        if row[f"devplan_{what}"] > row[f"{judge}_{what}"]:
            failures.append(f"{what} {row[f'devplan_{what}']:,} > ExecuTorch's {row[f'{judge}_{what}']:,}")
    return failures
