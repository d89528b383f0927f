"""What compile --quantize takes (issues 39 and 52): a dynamic export stays dynamic and is
calibrated within its range; calibration inputs of the wrong count, shape, dtype, layout or
device, token ids outside the embedding's table, a model with no op the quantizer takes, an
export already quantized and options quantizing cannot use are refused in one line; a long
calibration list runs a bounded first few and says so."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import devplan
from devplan.errors import DevplanError
from testbed.models import run_executorch
from testbed.quantize_models import TinyLM, devplan_quantized, wide_mlp

pytest.importorskip("executorch.backends.xnnpack.quantizer.xnnpack_quantizer")


class Masked(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, mask):
        return self.fc(x) * mask


def _dynamic():
    torch.manual_seed(0)
    batch = torch.export.Dim("batch", min=1, max=16)
    return torch.export.export(
        Masked().eval(),
        (torch.randn(4, 8),),
        {"mask": torch.ones(4, 8)},
        dynamic_shapes={"x": {0: batch}, "mask": {0: batch}},
    )


def test_a_dynamic_export_stays_dynamic_and_calibrates_within_its_range():
    ep = _dynamic()
    samples = [(torch.randn(n, 8), torch.ones(n, 8)) for n in (1, 5, 16)]
    result = devplan_quantized(ep, quantize="dynamic-int8", calibration=samples)
    for inputs in samples:
        ours = run_executorch(result.data, inputs)[0][0]
        assert ours.shape == (len(inputs[0]), 8)
        torch.testing.assert_close(ours, ep.module()(inputs[0], mask=inputs[1]), rtol=0, atol=0.05)
    assert result.summary()["quantization"]["float_ops"] == {"aten::mul.Tensor": 1}
    _refused(
        ep,
        r"sample 0, input 'x' is float32 \[17, 8\]; the program takes float32 \[1..16, 8\]",
        quantize="int8",
        calibration=[(torch.randn(17, 8), torch.ones(17, 8))],
    )


def test_an_unbounded_dynamic_dimension_stays_unbounded_through_quantizing():
    """torch's default Dim has no maximum (int_oo), which the quantize stage took for a number:
    an internal error (exit 3) on a valid export (issue 52, finding 3). It quantizes, calibrates
    at any batch, stays unbounded (a bound would have compiled), and the compile refuses it as it
    refuses an unbounded float program: no upper bound to plan for."""
    batch = torch.export.Dim("batch")
    ep = torch.export.export(
        Masked().eval(),
        (torch.randn(4, 8),),
        {"mask": torch.ones(4, 8)},
        dynamic_shapes={"x": {0: batch}, "mask": {0: batch}},
    )
    samples = [(torch.randn(n, 8), torch.ones(n, 8)) for n in (2, 40)]
    _refused(ep, "has no upper bound to plan for", quantize="dynamic-int8", calibration=samples)


def _refused(ep, match: str, **choices) -> str:
    with pytest.raises(DevplanError, match=match) as caught:
        devplan_quantized(ep, **choices)
    message = str(caught.value)
    assert "\n" not in message and len(message) < 300
    return message


def test_a_model_with_no_op_the_quantizer_takes_is_refused():
    ep = torch.export.export(nn.Sequential(nn.ReLU(), nn.Tanh()), (torch.randn(2, 8),))
    _refused(ep, "the XNNPACK quantizer takes none of this program's ops", quantize="dynamic-int8")
    conv = torch.export.export(nn.Conv2d(3, 4, 3).eval(), (torch.randn(1, 3, 8, 8),))
    _refused(
        conv,
        r"takes none .* \(in dynamic-int4 it quantizes linear layers \(embedding tables in 8 bits\)\)",
        quantize="dynamic-int4",
    )


def test_an_export_already_quantized_is_refused():
    from testbed.quantized import quantize

    ep, _, _ = quantize("mlp", "per_tensor")
    _refused(ep, "already quantized .*quantized_decomposed::", quantize="dynamic-int8")


@pytest.mark.parametrize(
    "samples,match",
    [
        ([], "holds no inputs"),
        ([(torch.randn(4, 64), torch.randn(4, 64))], r"sample 0 has 2 inputs, the program takes 1 \(input\)"),
        (
            [(torch.randn(4, 64),), (torch.randn(3, 64),)],
            r"sample 1, input 'input' is float32 \[3, 64\]; the program takes float32 \[4, 64\]",
        ),
        ([(torch.randn(4, 64, dtype=torch.float64),)], r"input 'input' is float64 \[4, 64\]"),
        # an observer's histogram of NaN was an internal error in the quantize stage (exit 3)
        (
            [(torch.randn(4, 64),), (torch.full((4, 64), float("nan")),)],
            r"on sample 1 the model computes NaN or infinite values where int8 measures them",
        ),
    ],
)
def test_calibration_inputs_of_the_wrong_count_shape_or_dtype_are_refused(samples, match):
    ep, _ = wide_mlp()
    _refused(ep, match, quantize="int8", calibration=samples)


@pytest.mark.parametrize(
    "make,kind",
    [
        (lambda: torch.randn(4, 64).to_sparse(), "a sparse_coo tensor"),
        (lambda: torch.randn(4, 64).to_sparse_csr(), "a sparse_csr tensor"),
        (lambda: torch.empty(4, 64, device="meta"), "a tensor on device meta"),
        (lambda: torch.nested.nested_tensor([torch.randn(4, 64), torch.randn(3, 64)]), "a nested tensor"),
    ],
    ids=["sparse-coo", "sparse-csr", "meta", "nested"],
)
def test_a_calibration_tensor_that_holds_no_dense_values_is_refused_naming_the_sample(tmp_path, make, kind):
    """Each passed the dtype and shape check and ended in an internal error (exit 3) as the
    model ran on it (issue 52, finding 5)."""
    ep, _ = wide_mlp()
    torch.save([(torch.randn(4, 64),), (make(),)], tmp_path / "c.pt")
    message = _refused(ep, f"sample 1, input 'input' is {kind}", quantize="int8", calibration=tmp_path / "c.pt")
    assert "save each input as a plain CPU tensor" in message


@pytest.mark.parametrize("token", [10**6, -5, 2000])
def test_token_ids_outside_the_embedding_table_are_refused_naming_the_sample(tmp_path, token):
    """Ids past the table's 2,000 rows, or negative, indexed outside it: an internal error
    (exit 3) as the model ran on them (issue 52, finding 5)."""
    ep = torch.export.export(TinyLM().eval(), (torch.randint(0, 2000, (1, 16)),))
    ids = torch.randint(0, 2000, (1, 16))
    ids[0, 3] = token
    torch.save([(torch.randint(0, 2000, (1, 16)),), (ids,)], tmp_path / "c.pt")
    _refused(
        ep,
        rf"sample 1, input 'ids' holds the index {token}, outside the 2000 rows node embedding indexes \(0 to 1999\)",
        quantize="int8",
        calibration=tmp_path / "c.pt",
    )


def test_a_hundred_thousand_calibration_inputs_run_a_bounded_first_few_and_say_so(monkeypatch):
    """100,000 inputs ran for minutes with nothing shown (issue 52, finding 5): quantizing runs
    the first CALIBRATION_SAMPLES (100; 3 here, to keep the test fast), tells on_calibrated (the
    terminal's progress) each one, and the report says how many of how many."""
    from devplan.inspection.reports import quantization_lines
    from devplan.passes.export import calibration

    assert calibration.CALIBRATION_SAMPLES == 100
    monkeypatch.setattr(calibration, "CALIBRATION_SAMPLES", 3)
    ep, (inputs,) = wide_mlp()
    told: list[tuple[int, int]] = []
    result = devplan_quantized(
        ep,
        quantize="int8",
        calibration=[(inputs,)] * 100_000,
        on_calibrated=lambda done, total: told.append((done, total)),
    )
    report = result.summary()["quantization"]
    assert (report["samples"], report["samples_given"]) == (3, 100_000)
    assert told == [(1, 3), (2, 3), (3, 3)]
    assert "on the first 3 of 100,000 calibration inputs" in quantization_lines(report)[0]


def test_a_calibration_file_that_is_not_a_list_of_inputs_is_refused(tmp_path):
    ep, _ = wide_mlp()
    torch.save({"x": torch.randn(4, 64)}, tmp_path / "c.pt")
    _refused(ep, "holds a dict; save a list of input tuples", quantize="int8", calibration=tmp_path / "c.pt")
    (tmp_path / "junk.pt").write_bytes(b"junk")
    _refused(ep, "not a file saved with torch.save", quantize="int8", calibration=tmp_path / "junk.pt")


@pytest.mark.parametrize(
    "choices,match",
    [
        ({"quantize": "int8"}, "needs --calibration FILE.pt"),
        ({"quantize": "int3"}, "unknown mode; use one of: dynamic-int8, int8, dynamic-int4"),
        ({"calibration": [(torch.randn(4, 64),)]}, "--calibration: only with --quantize"),
        ({"quantize": "dynamic-int8", "delegates": ["cuda:0"]}, "--delegate cuda:0 cannot run the quantized ops"),
        ({"quantize": "dynamic-int8", "backends": ["tests.partitioners:AddsTo"]}, "cannot run the quantized ops"),
    ],
)
def test_options_quantizing_cannot_use_are_refused_before_anything_is_loaded(choices, match):
    with pytest.raises(DevplanError, match=match):
        devplan.compile("no-such.pt2", **choices)


def test_xnnpack_is_implied_and_may_be_given():
    from devplan.options import CompileOptions

    implied = CompileOptions.of(quantize="dynamic-int8").delegates
    assert [d.label for d in implied] == ["xnnpack"]
    assert CompileOptions.of(quantize="dynamic-int8", backends=["xnnpack"]).delegates == implied


@pytest.mark.sweep  # end to end through the command line
def test_the_command_line_refuses_in_one_line_and_reports_the_cost(tmp_path):
    from testbed.cli import assert_one_line_error, devplan as devplan_cli

    ep, inputs = wide_mlp()
    torch.export.save(ep, tmp_path / "m.pt2")
    assert_one_line_error(devplan_cli("compile", tmp_path / "m.pt2", "--quantize", "int8"), "needs --calibration")
    torch.save([(torch.randn(4, 32),)], tmp_path / "bad.pt")
    assert_one_line_error(
        devplan_cli("compile", tmp_path / "m.pt2", "--quantize", "int8", "--calibration", tmp_path / "bad.pt"),
        "input 'input' is float32 [4, 32]",
    )
    torch.save([inputs] * 8, tmp_path / "good.pt")
    done = devplan_cli("compile", tmp_path / "m.pt2", "--quantize", "int8", "--calibration", tmp_path / "good.pt")
    assert done.returncode == 0, done.stderr
    assert "quantized int8 (XNNPACK): on 8 calibration inputs against the float model, SQNR" in done.stdout
