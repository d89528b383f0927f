"""devplan/measure.py (issue 51): the error compile reports is the written program's, run where
it can run: here on devplan's runtime (a program without ExecuTorch's delegates), against a
reference made by hand, so that a program that parts from the eager estimate is one whose
weights differ from the module the reference ran."""

from __future__ import annotations

import torch
from torch import nn

import devplan
from devplan.measure import measured
from devplan.passes.export.quantize import Error, QuantizeReport, Reference


def _report(eager: Error) -> QuantizeReport:
    return QuantizeReport("dynamic-int8", 2, 2, False, eager, (), 0, 0, eager)


def _reference(module: nn.Module, samples: list[tuple]) -> Reference:
    with torch.no_grad():
        return Reference(tuple(samples), tuple((module(*sample),) for sample in samples))


def test_a_program_without_executorchs_delegates_is_measured_on_devplans_runtime():
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
    samples = [(torch.randn(2, 8),) for _ in range(2)]
    program = devplan.compile(torch.export.export(module, samples[0])).data
    report = measured(_report(Error(40.0, 0.01, 1.0)), _reference(module, samples), program, None)
    assert report.measured_on == "devplan" and report.warning is None
    assert report.error.sqnr_db is None or report.error.sqnr_db > 100  # the float program computes the module
    assert report.eager == Error(40.0, 0.01, 1.0)


def test_a_program_that_parts_from_the_estimate_names_the_operator_writing_the_output():
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
    samples = [(torch.randn(2, 8),) for _ in range(2)]
    broken = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()  # other weights
    program = devplan.compile(torch.export.export(broken, samples[0])).data
    report = measured(_report(Error(40.0, 0.01, 1.0)), _reference(module, samples), program, None)
    assert report.measured_on == "devplan" and report.error.sqnr_db is not None and report.error.sqnr_db < 10
    assert report.warning is not None and "SQNR" in report.warning and "40.0 dB" in report.warning
    assert "they part at output 0, written by operator aten::" in report.warning
