"""Issue 51: ExecuTorch's XNNPACK lowering writes a delegate its own runtime refuses for
dynamic-int8 on a zero pad of the model's input before a quantized convolution (MobileNetV2's
and EfficientNet's stems: XNNExecutor's "Propagating input shapes failed"). devplan's
dynamic-int8 leaves that convolution float, so its program runs (passes/export/quantize_stems.py);
where a program fails so all the same, compile's warning names the delegate, the XNNPACK node
and the module and op it came from (devplan/inspection/xnnshapes.py); a delegate XNNPACK runs
contradicts none of its shapes."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import devplan
from devplan.inspection.xnnshapes import graph_faults, shape_faults
from devplan.pte import read_pte
from devplan.pte.program_view import program_view

pytest.importorskip("executorch.backends.xnnpack.quantizer.xnnpack_quantizer")


class _PaddedStem(nn.Module):
    """transformers' MobileNetV2 stem in small: a "same" zero pad on the bottom and right, a
    strided convolution, relu6, then pooling and a classifier."""

    def __init__(self, padding: int | str = 0) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, 2, padding=padding)  # "valid": conv2d.padding, as EfficientNet's stem
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        y = nn.functional.hardtanh(self.stem(nn.functional.pad(x, (0, 1, 0, 1))), 0, 6)
        return self.head(y.mean((2, 3)))


def _export(padding: int | str = 0) -> torch.export.ExportedProgram:
    torch.manual_seed(0)
    return torch.export.export(_PaddedStem(padding).eval(), (torch.randn(1, 3, 16, 16),))


class _PaddedInside(_PaddedStem):
    """The pad of a tensor a convolution computed, not of the model's input."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x):  # no ReLU after `first`: dynamic-int8 leaves such a convolution float, as ExecuTorch's
        return super().forward(self.first(x))


@pytest.mark.parametrize("padding", [0, "valid"])
def test_dynamic_int8_leaves_a_padded_inputs_convolution_float_and_the_program_runs(padding):
    """Before, the stem's convolution was quantized, the program failed on ExecuTorch's runtime
    and compile's warning said only `method->execute() failed with error 0x1`. A pad inside
    the model keeps its convolution quantized: ExecuTorch lowers that one right."""
    pytest.importorskip("executorch.runtime")
    report = devplan.compile(_export(padding), quantize="dynamic-int8").quantization
    assert report is not None and report.warning is None and report.measured_on == "executorch"
    convolution = "aten::conv2d" + (".padding" if padding == "valid" else "")
    assert dict(report.float_ops).get(convolution) == 1 and "aten::linear" not in dict(report.float_ops)
    assert report.error.sqnr_db is not None and report.error.sqnr_db > 30
    torch.manual_seed(0)
    inside = torch.export.export(_PaddedInside().eval(), (torch.randn(1, 3, 16, 16),))
    report = devplan.compile(inside, quantize="dynamic-int8").quantization
    assert report is not None and report.warning is None and report.measured_on == "executorch"
    assert "aten::conv2d" not in dict(report.float_ops)


def test_a_program_executorchs_runtime_refuses_is_told_at_the_node_that_fails():
    """ExecuTorch's own flow with its quantizer as it ships writes the failing program; the
    warning measuring it gives names the convolution and the pad that made its input."""
    pytest.importorskip("executorch.runtime")
    from devplan.measure import measured
    from devplan.passes.export.quantize import Error, QuantizeReport, Reference
    from testbed.quantize_models import executorch_quantized_edge

    exported = _export()
    x = exported.example_inputs[0]
    theirs = executorch_quantized_edge(exported, "dynamic-int8", [x], own=True).to_executorch().buffer
    eager = Error(40.0, 0.01, 1.0)
    report = QuantizeReport("dynamic-int8", 1, 1, False, eager, (), 0, 0, eager)
    with torch.no_grad():
        reference = Reference((x,), ((exported.module()(*x),),))
    warning = measured(report, reference, theirs, None).warning or ""
    assert warning.startswith("the program written fails on ExecuTorch's runtime: ")
    assert warning.endswith(
        "; delegate 0 (XnnpackBackend) node 3 Conv2d: reads 3 input channels (1 group of 3) from an input of 4 "
        "(its [1, 16, 17, 4], channels last), which node 1 StaticConstantPad makes of [1, 16, 16, 3] with "
        "paddings [0, 0, 0, 0] before and [0, 0, 1, 1] after"
    )


def test_delegates_xnnpack_runs_contradict_none_of_their_shapes():
    """The same model lowered float, and quantized int8 (calibrated), runs on ExecuTorch's
    runtime and every node of its delegates agrees with the shapes its values record."""
    pytest.importorskip("executorch.runtime")
    from testbed.models import run_executorch

    exported = _export()
    x = exported.example_inputs[0]
    for options in ({"backends": ["xnnpack"]}, {"quantize": "int8", "calibration": [x]}):
        data = devplan.compile(exported, **options).data
        view = program_view(read_pte(data))
        delegates = view.methods[0].delegates
        assert delegates and [graph_faults(view, 0, d.index) for d in delegates] == [[]] * len(delegates), options
        run_executorch(data, x)


def _document(nodes: list, values: dict) -> dict:
    return {
        "nodes": [{"index": i, "source": None, **node} for i, node in enumerate(nodes)],
        "values": [{"id": value_id, "shape": shape} for value_id, shape in values.items()],
    }


def test_a_convolutions_input_is_worked_out_as_xnnpack_works_it_out():
    """Through pads, transposes and conversions from the delegate's input, never from the
    shapes the graph records for their outputs (ExecuTorch records a dynamic quantization's
    output in NCHW's order where the graph runs); a convolution reading other channels than
    that input has is told, with the node that made the shape."""
    values = {0: [1, 3, 8, 8], 1: [1, 8, 8, 3], 2: [1, 3, 8, 8], 3: [1, 3, 10, 10], 4: [1, 4, 4, 8]}
    transpose = {"op": "StaticTranspose", "inputs": [0], "outputs": [1], "params": {"perm": [0, 2, 3, 1]}}
    convert = {"op": "Convert", "inputs": [1], "outputs": [2], "params": {}}
    conv = {"op": "Conv2d", "inputs": [2], "outputs": [4], "params": {"groups": 1, "group_input_channels": 3}}
    assert shape_faults(_document([transpose, convert, conv], values)) == []
    pad = {
        "op": "StaticConstantPad",
        "inputs": [1],
        "outputs": [3],
        "params": {"pre_paddings": [0, 0, 1, 1], "post_paddings": [0, 0, 1, 1]},
    }
    padded = {**convert, "inputs": [3]}
    assert shape_faults(_document([transpose, pad, padded, conv], values)) == [
        "node 3 Conv2d: reads 3 input channels (1 group of 3) from an input of 5 (its [1, 8, 10, 5], channels "
        "last), which node 1 StaticConstantPad makes of [1, 8, 8, 3] with paddings [0, 0, 1, 1] before and "
        "[0, 0, 1, 1] after"
    ]
