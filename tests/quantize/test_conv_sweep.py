"""Issue 51's conv-net sweep: every --quantize mode that takes a convolution (dynamic-int8, and
int8 calibrated on 8 inputs; dynamic-int4 takes linear layers alone, benchmarks/quantize.py
runs it) over transformers' ResNet (bottleneck and basic), RegNet, ConvNeXt, MobileNetV2 and
EfficientNet and a torchvision-style ResNet, at 96x96: devplan's program, run on ExecuTorch's
runtime, against ExecuTorch's own flow with its quantizer as it ships (the same configuration):
SQNR against the float model within 1 dB, argmax kept where ExecuTorch's keeps it, planned bytes
and delegates no more. MobileNetV2's and EfficientNet's dynamic-int8 programs run because devplan
leaves their stems' padded convolutions float (passes/export/quantize_stems.py; ExecuTorch's program
fails on its runtime there): those rows are judged against ExecuTorch's flow with devplan's
quantizer, which runs, the departure proven where it is taken.

ExecuTorch's rows are those `python benchmarks/quantize.py --conv-sweep --record` measured
(testbed/conv_sweep_executorch.json): its flows were half of each case's time and give the same
programs on every run of the same versions, which the last test holds on one row run now."""

from __future__ import annotations

from functools import lru_cache

import pytest

from testbed.conv_sweep import (
    CONV_SWEEP,
    SWEEP_MODES,
    SweepModel,
    executorch_flows,
    record_held,
    recorded,
    sweep_failures,
    sweep_model,
    sweep_row,
)
from testbed.lowerings import patterns_exported_once

pytest.importorskip("executorch.backends.xnnpack.quantizer.xnnpack_quantizer")
SHARE_BY = "model"  # a family's modes on one worker, sharing _model's export (tests/conftest.py)


@lru_cache(maxsize=1)  # a family's modes run one after another: its export and float outputs once
def _model(name: str) -> SweepModel:
    return sweep_model(name)


def _case(model: str, mode: str):
    # a quantized lowering of a conv net: 5-25 s on 2 cores
    return pytest.param(model, mode, marks=pytest.mark.sweep, id=f"{model}-{mode}")


@pytest.mark.parametrize("model,mode", [_case(model, mode) for model in CONV_SWEEP for mode in SWEEP_MODES])
def test_a_conv_net_quantizes_as_well_as_executorchs_flow_on_its_runtime(model, mode):
    import executorch.kernels.quantized  # noqa: F401 - the quantized kernels outside the delegates

    with patterns_exported_once():
        row = sweep_row(_model(model), mode, recorded(model, mode))
    assert not sweep_failures(row), row


@pytest.mark.sweep  # one of ExecuTorch's flows: 10 s on 2 cores
def test_the_recorded_rows_are_what_executorchs_flow_makes_now():
    """The record is of these versions of ExecuTorch and torch, and ExecuTorch's flow makes the
    program it recorded: the same planned bytes and delegates, its SQNR and argmax (XNNPACK's
    kernels may round otherwise on another CPU, far under the 1 dB the sweep allows)."""
    import executorch.kernels.quantized  # noqa: F401
    import executorch.version
    import torch

    held = record_held()
    assert (held["executorch"], held["torch"]) == (executorch.version.__version__, torch.__version__), (
        "run python benchmarks/quantize.py --conv-sweep --record"
    )
    with patterns_exported_once():
        now = executorch_flows(_model("torchvision_resnet"), "dynamic-int8")
    then = recorded("torchvision_resnet", "dynamic-int8")
    assert now.keys() == then.keys()
    for key, value in then.items():
        assert now[key] == (pytest.approx(value, abs=0.05) if key.endswith("sqnr_db") else value), key
