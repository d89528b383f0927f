"""The inspection document of hand-built programs, whose every fact is known in advance."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import devplan
from devplan.errors import DevplanError
from tests.inspection.runner import REPO, invoke


def method_of(doc: dict, name: str = "forward") -> dict:
    (method,) = [m for m in doc["methods"] if m["name"] == name]
    return method


def tensors_of(method: dict) -> dict[int, dict]:
    return {t["value"]: t for t in method["tensors"]}


def test_devplan_inspect_is_callable_and_reads_a_path(hand_built):
    import devplan.inspection.document  # noqa: F401  (the package is devplan.inspection: devplan.inspect stays the function)

    doc = devplan.inspect(hand_built["lifetimes"])
    assert doc["schema_version"] == 1
    assert doc["format"] == "ET12"
    assert doc["file"]["name"] == "lifetimes.pte"
    assert doc["file"]["size"] == hand_built["lifetimes"].stat().st_size
    assert [m["name"] for m in doc["methods"]] == ["forward", "identity"]


def test_devplan_inspect_is_the_function_whatever_was_imported_before(hand_built):
    code = (
        "import sys, devplan; first = devplan.inspect(sys.argv[1]); import devplan.inspection.render;"
        "second = devplan.inspect(sys.argv[1]); print(first == second, first['file']['name'], type(devplan.inspect).__name__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(hand_built["cuda"])], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "cuda.pte", "function"]


def test_reading_bytes_gives_the_same_document_under_a_neutral_name(hand_built):
    from devplan.inspection import inspect

    from_path = inspect(str(hand_built["lifetimes"]))
    from_bytes = inspect(hand_built["lifetimes"].read_bytes())
    assert from_bytes["file"].pop("name") == "<bytes>"
    from_path["file"].pop("name")
    assert from_bytes == from_path


def test_lifetimes_span_chains_lists_and_frees(hand_built):
    forward = method_of(devplan.inspect(hand_built["lifetimes"]))
    lifetimes = {value: t["lifetime"] for value, t in tensors_of(forward).items()}
    assert lifetimes == {
        0: [0, 3],  # input from #0; an item of the optional tensor list at #3
        1: [0, 2],  # written at #0, read through the tensor list at #2
        2: [1, 4],  # freed at #4
        4: [2, 3],
        5: None,  # never used
        6: [0, 0],  # constant
        9: [3, 4],  # output: alive to the last instruction
    }


def test_roles_placement_and_sizes(hand_built):
    tensors = tensors_of(method_of(devplan.inspect(hand_built["lifetimes"])))
    assert {v: t["role"] for v, t in tensors.items()} == {
        0: "input",
        1: "activation",
        2: "activation",
        4: "activation",
        5: "activation",
        6: "constant",
        9: "output",
    }
    assert tensors[6]["constant"] is True and tensors[0]["constant"] is False
    assert (tensors[6]["mem_id"], tensors[6]["offset"]) == (None, None)
    assert (tensors[9]["mem_id"], tensors[9]["offset"], tensors[9]["nbytes"]) == (1, 48, 32)
    assert tensors[4]["dtype"] == "float32" and tensors[4]["shape"] == [8] and tensors[4]["dim_order"] == [0]


def test_peak_counts_in_place_aliases_once(hand_built):
    (buffer,) = method_of(devplan.inspect(hand_built["lifetimes"]))["buffers"]
    # At #2: v0, v1, v2 (16 B each) and v4 (32 B) = 80 B. At #3 v9 reuses v4's bytes, so
    # 64 B there, not 96 B.
    assert buffer == {
        "mem_id": 1,
        "size": 128,
        "device": "cpu",
        "tensors": 6,
        "peak": 80,
        "peak_instruction": 2,
        "lower_bound": 80,
    }


def test_instructions_number_across_chains(hand_built):
    forward = method_of(devplan.inspect(hand_built["lifetimes"]))
    assert [(i["index"], i["kind"], i["op"], i["args"]) for i in forward["instructions"]] == [
        (0, "kernel", "aten::mul.out", [0, 6, 1, 1]),
        (1, "kernel", "aten::relu.out", [1, 2, 2]),
        (2, "kernel", "aten::cat.out", [3, 7, 4, 4]),
        (3, "kernel", "aten::index.Tensor_out", [4, 8, 9, 9]),
        (4, "free", None, [2]),
    ]
    assert forward["counts"] == {"values": 10, "instructions": 5, "operators": 4, "delegates": 0}
    assert forward["values"] == {"int": 1, "optional_tensor_list": 1, "tensor": 7, "tensor_list": 1}


def test_method_without_instructions(hand_built):
    identity = method_of(devplan.inspect(hand_built["lifetimes"]), "identity")
    assert identity["buffers"] == []
    (tensor,) = identity["tensors"]
    assert tensor["role"] == "input+output"
    assert tensor["lifetime"] == [0, 0]


def test_method_filter_keeps_one_method(hand_built):
    doc = devplan.inspect(hand_built["lifetimes"], method="identity")
    assert [m["name"] for m in doc["methods"]] == ["identity"]


def test_unknown_method_names_the_ones_there_are(hand_built):
    with pytest.raises(DevplanError, match=r"no method 'backward'.*forward, identity"):
        devplan.inspect(hand_built["lifetimes"], method="backward")


def test_buffer_devices_come_from_the_sparse_device_table(hand_built):
    forward = method_of(devplan.inspect(hand_built["cuda"]))
    assert [(b["mem_id"], b["device"]) for b in forward["buffers"]] == [(1, "cuda:0"), (2, "cpu")]
    devices = {value: t["device"] for value, t in tensors_of(forward).items()}
    # v3's own extra info says cuda:1; the others follow their buffer.
    assert devices == {0: "cuda:0", 1: "cuda:0", 2: "cpu", 3: "cuda:1"}


def test_delegates_and_compile_specs(hand_built):
    forward = method_of(devplan.inspect(hand_built["cuda"]))
    assert forward["delegates"] == [
        {
            "index": 0,
            "id": "CudaBackend",
            "compile_specs": [{"key": "target_device", "value": "cuda:0"}, {"key": "blob", "value": "00ff10"}],
            "target_device": "cuda:0",
            "payload_size": 40,
            "location": "inline",
            "payload_index": 0,
            "payload_buffers": None,  # the payload is not an ET12 program
            "working_memory": {"bytes": None, "values": None, "bound": None},  # its backend's own, size untold
            "window": None,
            "calls": [2],
        }
    ]
    delegate_call = forward["instructions"][2]
    assert (delegate_call["kind"], delegate_call["delegate"], delegate_call["op"], delegate_call["args"]) == (
        "delegate",
        0,
        None,
        [1, 2],
    )


def test_file_facts(hand_built, lowered):
    assert devplan.inspect(hand_built["lifetimes"])["file"]["segments"] == []
    doc = devplan.inspect(lowered["mlp"])
    data = lowered["mlp"].read_bytes()
    (constants,) = doc["file"]["segments"]
    # The constant segment is the only segment; it ends the file and holds every weight.
    assert constants["offset"] + constants["size"] == len(data)
    assert doc["file"]["constant_bytes"] == constants["size"]
    weights = [t for t in method_of(doc)["tensors"] if t["constant"]]
    assert sum(t["nbytes"] for t in weights) <= doc["file"]["constant_bytes"]


def test_json_is_deterministic_and_sorted(lowered, hand_built):
    for path in (lowered["transformer"], hand_built["cuda"]):
        first = invoke("inspect", str(path), "--json")
        second = invoke("inspect", str(path), "--json")
        assert first.exit_code == 0, first.output
        assert first.stdout == second.stdout
        doc = json.loads(first.stdout)
        assert first.stdout == json.dumps(doc, sort_keys=True, indent=2) + "\n"
        assert str(path.parent) not in first.stdout


def test_section_trims_the_json(hand_built):
    result = invoke("inspect", str(hand_built["cuda"]), "--json", "-s", "buffers", "-s", "delegates")
    assert result.exit_code == 0, result.output
    (method,) = json.loads(result.stdout)["methods"]
    assert set(method) == {
        "name",
        "inputs",
        "outputs",
        "counts",
        "values",
        "kernels",
        "backends",
        "devices",
        "buffers",
        "delegates",
    }
    whole = json.loads(invoke("inspect", str(hand_built["cuda"]), "--json", "-s", "all").stdout)
    assert whole == devplan.inspect(hand_built["cuda"])
