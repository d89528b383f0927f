"""The model corpus and the samples are valid inputs: they run eagerly and ExecuTorch 1.5.1 reproduces them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from samples.make_samples import EncoderBlock, sample_models
from testbed.lowerings import executorch_lowered
from testbed.models import CORPUS, STATEFUL, eager_outputs, export, run_executorch, transformer

SAMPLES_DIR = Path(__file__).resolve().parents[1] / "samples"
RTOL, ATOL = 1e-4, 1e-5


def assert_runs_match(got: list[list[Tensor]], expected: list[list[Tensor]]) -> None:
    assert len(got) == len(expected)
    for run, (got_outputs, expected_outputs) in enumerate(zip(got, expected)):
        assert len(got_outputs) == len(expected_outputs), f"run {run}: output count"
        for index, (actual, wanted) in enumerate(zip(got_outputs, expected_outputs)):
            assert actual.dtype == wanted.dtype, f"run {run} output {index}: dtype"
            assert actual.shape == wanted.shape, f"run {run} output {index}: shape"
            torch.testing.assert_close(actual, wanted, rtol=RTOL, atol=ATOL, msg=f"run {run} output {index}")


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_model_runs_the_same_in_executorch(name: str) -> None:
    ep, module, args = export(name)
    runs = 2 if name in STATEFUL else 1
    expected = eager_outputs(module, args, runs)
    if name in STATEFUL:
        assert not torch.equal(expected[0][0], expected[1][0]), "a stateful model must change its output between calls"
    assert_runs_match(run_executorch(executorch_lowered(ep), args, runs), expected)


@pytest.mark.parametrize("name", sorted(sample_models()))
def test_sample_model_runs_the_same_in_executorch(name: str) -> None:
    module, args = sample_models()[name]
    ep = torch.export.export(module, args)
    assert_runs_match(run_executorch(executorch_lowered(ep), args), eager_outputs(module, args))


@pytest.mark.parametrize("name", sorted(sample_models()))
def test_saved_sample_is_the_scripted_model(name: str) -> None:
    path = SAMPLES_DIR / f"{name}.pt2"
    assert path.stat().st_size < 2 * 1024 * 1024
    module, args = sample_models()[name]
    loaded = torch.export.load(path).module()
    assert_runs_match(eager_outputs(loaded, args), eager_outputs(module, args))


def test_corpus_builds_are_deterministic() -> None:
    for name, build in CORPUS.items():
        (first, first_args), (second, second_args) = build(), build()
        assert not first.training, name
        for key, value in first.state_dict().items():
            assert torch.equal(value, second.state_dict()[key]), f"{name}: {key}"
        assert all(torch.equal(a, b) for a, b in zip(first_args, second_args)), name


def _buffers_change(module: nn.Module, args: tuple) -> bool:
    before = {key: value.clone() for key, value in module.named_buffers()}
    with torch.no_grad():
        module(*args)
    return any(not torch.equal(before[key], value) for key, value in module.named_buffers())


def test_stateful_lists_exactly_the_models_that_mutate_buffers() -> None:
    mutating = {name for name, build in CORPUS.items() if _buffers_change(*build())}
    assert mutating == STATEFUL


def test_eager_outputs_leaves_the_module_untouched() -> None:
    module, args = CORPUS["accumulator"]()
    state = module.state.clone()
    first = eager_outputs(module, args, runs=2)
    assert torch.equal(module.state, state)
    assert_runs_match(eager_outputs(module, args, runs=2), first)


def _exported_calls(name: str) -> list[torch.fx.Node]:
    ep, _, _ = export(name)
    return [node for node in ep.graph.nodes if node.op == "call_function"]


def test_corpus_covers_the_required_ops() -> None:
    calls = [node for name in CORPUS for node in _exported_calls(name)]
    ops = {node.target._schema.name for node in calls if isinstance(node.target, torch._ops.OpOverload)}
    required = {
        "aten::linear", "aten::conv2d", "aten::batch_norm", "aten::relu", "aten::relu6", "aten::hardswish",
        "aten::gelu", "aten::sigmoid", "aten::tanh", "aten::silu", "aten::max_pool2d", "aten::avg_pool2d",
        "aten::adaptive_avg_pool2d", "aten::matmul", "aten::bmm", "aten::softmax", "aten::log_softmax",
        "aten::layer_norm", "aten::embedding", "aten::cat", "aten::split_with_sizes", "aten::chunk",
        "aten::view", "aten::reshape", "aten::permute", "aten::transpose", "aten::flatten", "aten::unsqueeze",
        "aten::upsample_nearest2d", "aten::upsample_bilinear2d", "aten::mean", "aten::sum", "aten::add",
        "aten::sub", "aten::mul", "aten::div", "aten::pow", "aten::slice", "aten::add_", "aten::copy_",
    }  # fmt: skip
    assert required <= ops, f"missing: {sorted(required - ops)}"

    convs = [node for node in calls if node.target == torch.ops.aten.conv2d.default]
    # conv2d(input, weight, bias, stride, padding, dilation, groups)
    groups = [node.args[6] if len(node.args) > 6 else 1 for node in convs]
    in_channels = [node.args[0].meta["val"].shape[1] for node in convs]
    assert any(g > 1 and g != c for g, c in zip(groups, in_channels)), "grouped convolution"
    assert any(g > 1 and g == c for g, c in zip(groups, in_channels)), "depthwise convolution"
    assert any(len(node.args) > 3 and max(node.args[3]) > 1 for node in convs), "strided convolution"
    assert any(len(node.args) > 4 and max(node.args[4]) > 0 for node in convs), "padded convolution"

    embedding_inputs = [
        node.args[1].meta["val"].dtype for node in calls if node.target == torch.ops.aten.embedding.default
    ]
    assert torch.int64 in embedding_inputs


@pytest.mark.parametrize("layers", [2, 8])
def test_benchmark_transformer_has_the_requested_depth(layers: int) -> None:
    module, args = transformer(layers)
    assert sum(isinstance(child, EncoderBlock) for child in module.modules()) == layers
    assert args[0].shape == (1, 32, 64)
    (output,) = eager_outputs(module, args)[0]
    assert output.shape == (1, 32, 64)
    assert torch.isfinite(output).all()
    rebuilt, rebuilt_args = transformer(layers)
    assert torch.equal(rebuilt_args[0], args[0])
    assert torch.equal(eager_outputs(rebuilt, args)[0][0], output)
