"""Partitioning onto devices: which ops each backend takes, the et_copy ops at every
host/device crossing, per-device buffers, and payloads that are ET12 programs themselves."""

from __future__ import annotations

import re

import pytest
import torch

import devplan
from devplan.backend import Backend
from devplan.errors import DevplanError
from devplan.passes.export.split import from_exported
from devplan.passes.graph.decompose import decompose
from devplan.passes.graph.fold import fold_constants
from devplan.passes.graph.partition import partition
from devplan.spec import Device
from devplan.units import exact_size_text

CUDA0, CUDA1 = Device("cuda", 0), Device("cuda", 1)


class TwoLayers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.first, self.second = torch.nn.Linear(4, 8), torch.nn.Linear(8, 4)

    def forward(self, x):
        hidden = torch.relu(self.first(x))
        return self.second(hidden) + x, hidden


ARGS = (torch.randn(2, 4),)


def exported():
    return torch.export.export(TwoLayers().eval(), ARGS, strict=False)


def test_backend_parse_names_a_device_and_optionally_its_ops():
    assert Backend.parse("cuda:0") == Backend(CUDA0)
    assert Backend.parse("cuda:1=aten::linear, relu,aten.add.Tensor") == Backend(
        CUDA1, frozenset({"aten::linear", "aten::relu", "aten::add"})
    )
    for text, message in (
        ("tpu:0", r"--delegate 'tpu:0': unknown device 'tpu:0'"),
        ("cuda:0=aten::nope", r"--delegate 'cuda:0=aten::nope': unknown op 'aten::nope'"),
        ("cuda:0=", r"no op names after '='"),
    ):
        with pytest.raises(DevplanError, match=message):
            Backend.parse(text)


def test_each_backend_takes_its_ops_in_turn_and_calls_are_numbered_in_graph_order():
    low = from_exported(exported())
    low = fold_constants(decompose(low)).program
    low = partition(low, [Backend.parse("cuda:0=aten::linear"), Backend.parse("cuda:1=aten::relu")])
    calls = [node for node in low.gm.graph.nodes if node.op == "call_module"]
    assert [node.target for node in calls] == ["delegate_0", "delegate_1", "delegate_2"]
    assert [low.backends[node.target].device for node in calls] == [CUDA0, CUDA1, CUDA0]
    inside = [
        [n.target._schema.name for n in low.gm.get_submodule(c.target).graph.nodes if n.op == "call_function"]
        for c in calls
    ]
    assert inside == [["aten::linear"], ["aten::relu"], ["aten::linear"]]
    left = [n.target._schema.name for n in low.gm.graph.nodes if n.op == "call_function"]
    assert left == ["aten::add"]


def instructions(result):
    method = result.planned.method
    return [(k.op, k.args) for k in method.kernels], method


def test_tensors_cross_to_the_device_through_et_copy_ops_and_live_in_its_buffer():
    result = devplan.compile(exported(), delegates=["cuda:0=aten::linear"])
    steps, method = instructions(result)
    values = method.values
    assert [op for op, _ in steps] == [
        "et_copy::_h2d_copy.out",
        "DevplanDelegate",
        "et_copy::_d2h_copy.out",
        "aten::relu.out",
        "et_copy::_h2d_copy.out",
        "DevplanDelegate",
        "et_copy::_d2h_copy.out",
        "aten::add.out",
    ]
    for op, args in steps:
        if op.startswith("et_copy"):
            source, out, returned = args
            assert out == returned and values[source].shape == values[out].shape
            assert (values[source].device, values[out].device) == (
                (Device(), CUDA0) if "h2d" in op else (CUDA0, Device())
            )
        if op == "DevplanDelegate":
            assert {values[a].device for a in args} == {CUDA0}
    buffers = {b.mem_id: b.device for b in result.planned.buffers}
    assert buffers == {1: Device(), 2: CUDA0}
    for spec in values:
        if getattr(spec, "mem_id", None) is not None:
            assert buffers[spec.mem_id] == spec.device
    doc = devplan.inspect(result.data)["methods"][0]
    assert [d["target_device"] for d in doc["delegates"]] == ["cuda:0", "cuda:0"]
    for shown, delegate in zip(doc["delegates"], method.delegates):
        inner = devplan.inspect(delegate.payload)["methods"][0]["buffers"]
        assert shown["payload_buffers"] == [
            {
                "method": "forward",
                "mem_id": b["mem_id"],
                "device": "cuda:0",
                "size": b["size"],
                "lower_bound": b["lower_bound"],
            }
            for b in inner
        ]
    assert [(b["mem_id"], b["device"]) for b in doc["buffers"]] == [(1, "cpu"), (2, "cuda:0")]
    # both linear layers' weights went into the payloads, none stayed on the host
    assert result.constant_bytes == 0


def test_a_payload_is_an_et12_program_planned_on_the_device_holding_the_weights():
    result = devplan.compile(exported(), delegates=["cuda:0=aten::linear"])
    first = result.planned.method.delegates[0]
    assert first.compile_specs == (("target_device", b"cuda:0"),)
    doc = devplan.inspect(first.payload)["methods"][0]
    # a lone linear plans nothing: its input and result are the caller's tensors, on cuda:0
    assert doc["buffers"] == [] and first.arena == 0 and first.window is None
    io = [t for t in doc["tensors"] if t["role"] in ("input", "output")]
    assert len(io) == 2 and all(t["device"] == "cuda:0" and t["mem_id"] is None for t in io)
    constants = [t for t in doc["tensors"] if t["role"] == "constant"]
    assert sorted(tuple(t["shape"]) for t in constants) == [(8,), (8, 4)]


def test_same_device_delegates_pass_tensors_on_without_a_host_round_trip():
    result = devplan.compile(exported(), delegates=["cuda:0=aten::linear", "cuda:0=aten::relu"])
    ops = [op for op, _ in instructions(result)[0]]
    # linear -> relu -> linear all on cuda:0: one copy in, the last linear's result out for
    # the add, and the relu result out when the caller needs it, at the end
    assert ops == [
        "et_copy::_h2d_copy.out",
        "DevplanDelegate",
        "DevplanDelegate",
        "DevplanDelegate",
        "et_copy::_d2h_copy.out",
        "aten::add.out",
        "et_copy::_d2h_copy.out",
    ]


def test_between_two_devices_a_tensor_goes_through_the_host():
    result = devplan.compile(exported(), delegates=["cuda:0=aten::linear", "cuda:1=aten::relu"])
    steps, method = instructions(result)
    crossing = [
        (op, method.values[args[0]].device, method.values[args[1]].device)
        for op, args in steps
        if op.startswith("et_copy")
    ]
    assert crossing[:4] == [
        ("et_copy::_h2d_copy.out", Device(), CUDA0),
        ("et_copy::_d2h_copy.out", CUDA0, Device()),
        ("et_copy::_h2d_copy.out", Device(), CUDA1),
        ("et_copy::_d2h_copy.out", CUDA1, Device()),
    ]
    assert {str(b.device) for b in result.planned.buffers} == {"cpu", "cuda:0", "cuda:1"}


def test_delegated_programs_are_deterministic():
    first = devplan.compile(exported(), delegates=["cuda:0"]).data
    assert devplan.compile(exported(), delegates=["cuda:0"]).data == first


def test_device_io_plans_inputs_and_results_on_the_device_when_only_delegates_use_them():
    result = devplan.compile(exported(), delegates=["cuda:0=aten::linear"], device_io=True)
    steps, method = instructions(result)
    # x feeds the first linear and the host add: it stays on the host and is copied once;
    # the second linear's result feeds the add: copied back; hidden (relu, a host op) is returned from the host
    assert [op for op, _ in steps].count("et_copy::_h2d_copy.out") == 2
    assert [str(method.values[i].device) for i in method.inputs] == ["cpu"]
    everything = devplan.compile(exported(), delegates=["cuda:0"], device_io=True)
    steps, method = instructions(everything)
    assert [op for op, _ in steps] == ["DevplanDelegate"]
    assert {str(method.values[i].device) for i in (*method.inputs, *method.outputs)} == {"cuda:0"}
    assert [str(b.device) for b in everything.planned.buffers] == ["cuda:0"]


def test_payloads_are_planned_with_the_program_options():
    def payload_plan(**options):
        (delegate,) = devplan.compile(exported(), delegates=["cuda:0"], **options).planned.method.delegates
        return devplan.inspect(delegate.payload)["methods"][0]

    default, naive = payload_plan(), payload_plan(planner="naive", inplace=False)
    assert naive["buffers"][0]["size"] > default["buffers"][0]["size"]
    wide = payload_plan(alignment=256)
    assert all(t["offset"] % 256 == 0 for t in wide["tensors"] if t["offset"] is not None)


def test_a_device_budget_holds_the_device_buffer_with_its_delegates_windows_inside():
    result = devplan.compile(exported(), delegates=["cuda:0"])
    (outer,) = [b for b in result.planned.buffers if b.device == CUDA0]
    windows = [d.window for d in result.planned.method.delegates]
    assert windows and all(mem_id == outer.mem_id for mem_id, _ in windows)
    compile = lambda budgets: devplan.compile(exported(), delegates=["cuda:0"], budgets=budgets)  # noqa: E731
    assert compile({"cuda:0": outer.size}).data == result.data
    # the explanation names a delegate's window among what is alive at the device's peak
    with pytest.raises(
        DevplanError,
        match=rf"memory buffer 2 \(cuda:0\) needs {re.escape(exact_size_text(outer.size))} but its "
        rf"budget is {re.escape(exact_size_text(outer.size - 16))}; the lower bound is .*delegate \d's buffer",
    ):
        compile({"cuda:0": outer.size - 16})
    # a budget by mem_id holds that buffer alone
    assert compile({"2": outer.size}).data == result.data


def test_a_backend_taking_every_op_makes_one_delegate_even_across_multi_output_ops():
    from samples.make_samples import sample_models

    module, args = sample_models()["transformer"]  # layer norms: one op, three results picked by getitem
    result = devplan.compile(torch.export.export(module, args), delegates=["cuda:0"])
    assert [k.op for k in result.planned.method.kernels] == [
        "et_copy::_h2d_copy.out",
        "DevplanDelegate",
        "et_copy::_d2h_copy.out",
    ]
