"""`devplan inspect --json` agrees with ExecuTorch's own reading of files ExecuTorch wrote."""

from __future__ import annotations

import json

import pytest
import torch

from tests.inspection.lowered import NAMES as MODELS
from tests.inspection.runner import invoke


def executorch_program(path):
    from executorch.exir._serialize._program import deserialize_pte_binary

    return deserialize_pte_binary(path.read_bytes()).program


def executorch_dtype_names() -> dict[int, str]:
    """ScalarType code -> torch dtype name, as ExecuTorch maps them."""
    from executorch.exir.tensor import scalar_type_enum

    dtypes = (
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.float64,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
    )
    return {int(scalar_type_enum(dtype)): str(dtype).removeprefix("torch.") for dtype in dtypes}


def device_name(device_type, index: int) -> str:
    return "cpu" if int(device_type) == 0 and index == 0 else f"{device_type.name.lower()}:{index}"


def qualified(operator) -> str:
    """aten::add.out, or aten::copy_ when the overload is empty."""
    return f"{operator.name}.{operator.overload}" if operator.overload else operator.name


def inspect_json(path, *options: str) -> dict:
    result = invoke("inspect", str(path), "--json", *options)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def documents(lowered) -> dict[str, dict]:
    return {name: inspect_json(lowered[name]) for name in MODELS}


@pytest.mark.parametrize("name", MODELS)
def test_methods_inputs_outputs_and_operators_match(name, lowered, documents):
    expected = executorch_program(lowered[name])
    doc = documents[name]
    assert [m["name"] for m in doc["methods"]] == [plan.name for plan in expected.execution_plan]
    for method, plan in zip(doc["methods"], expected.execution_plan):
        assert method["inputs"] == list(plan.inputs)
        assert method["outputs"] == list(plan.outputs)
        assert [(op["name"], op["overload"]) for op in method["operators"]] == [
            (op.name, op.overload) for op in plan.operators
        ]
        assert method["counts"]["values"] == len(plan.values)
        assert method["counts"]["instructions"] == sum(len(chain.instructions) for chain in plan.chains)
        kernel_ops = [row["op"] for row in method["instructions"] if row["kind"] == "kernel"]
        expected_ops = [
            qualified(plan.operators[instruction.instr_args.op_index])
            for chain in plan.chains
            for instruction in chain.instructions
            if hasattr(instruction.instr_args, "op_index")
        ]
        assert kernel_ops == expected_ops


@pytest.mark.parametrize("name", MODELS)
def test_buffer_sizes_match(name, lowered, documents):
    expected = executorch_program(lowered[name])
    for method, plan in zip(documents[name]["methods"], expected.execution_plan):
        assert [b["mem_id"] for b in method["buffers"]] == list(range(1, len(plan.non_const_buffer_sizes)))
        assert [b["size"] for b in method["buffers"]] == list(plan.non_const_buffer_sizes[1:])
        # ExecuTorch lists only non-CPU buffers; one it leaves out is the CPU's
        devices = {e.buffer_idx: device_name(e.device_type, e.device_index) for e in plan.non_const_buffer_device or ()}
        for buffer in method["buffers"]:
            assert buffer["device"] == devices.get(buffer["mem_id"], "cpu")
            assert 0 < buffer["peak"] <= buffer["size"]


@pytest.mark.parametrize("name", MODELS)
def test_every_tensor_matches(name, lowered, documents):
    expected = executorch_program(lowered[name])
    dtype_names = executorch_dtype_names()
    for method, plan in zip(documents[name]["methods"], expected.execution_plan):
        tensors = {t["value"]: t for t in method["tensors"]}
        expected_tensors = {
            index: value.val for index, value in enumerate(plan.values) if type(value.val).__name__ == "Tensor"
        }
        assert sorted(tensors) == sorted(expected_tensors)
        for index, tensor in expected_tensors.items():
            got = tensors[index]
            assert got["dtype"] == dtype_names[int(tensor.scalar_type)], index
            assert got["shape"] == list(tensor.sizes), index
            assert got["dim_order"] == list(tensor.dim_order), index
            assert got["nbytes"] == torch.empty(tensor.sizes, dtype=getattr(torch, got["dtype"])).nbytes, index
            allocation = tensor.allocation_info
            if allocation is None:
                assert (got["mem_id"], got["offset"]) == (None, None), index
            else:
                offset = allocation.memory_offset_low + (allocation.memory_offset_high << 32)
                assert (got["mem_id"], got["offset"]) == (allocation.memory_id, offset), index
                assert got["offset"] + got["nbytes"] <= plan.non_const_buffer_sizes[allocation.memory_id], index
            assert got["constant"] == (tensor.data_buffer_idx > 0), index
            extra = tensor.extra_tensor_info
            device = device_name(extra.device_type, extra.device_index) if extra is not None else "cpu"
            assert got["device"] == device, index


@pytest.mark.parametrize("name", MODELS)
def test_inputs_and_outputs_live_across_the_method(name, documents):
    for method in documents[name]["methods"]:
        tensors = {t["value"]: t for t in method["tensors"]}
        last = method["counts"]["instructions"] - 1
        for value in method["inputs"]:
            assert tensors[value]["role"] in ("input", "input+output")
            assert tensors[value]["lifetime"][0] == 0
        for value in method["outputs"]:
            assert tensors[value]["role"] in ("output", "input+output")
            assert tensors[value]["lifetime"][1] == last


def test_device_program_shows_devices_copies_and_delegates(documents):
    method = documents["device"]["methods"][0]
    assert {b["device"] for b in method["buffers"]} == {"cpu", "cuda:0"}
    assert [d["target_device"] for d in method["delegates"]] == ["cuda:0", "cuda:0"]
    ops = [row.get("op") for row in method["instructions"]]
    assert ops.count("et_copy::_h2d_copy.out") == 4 and ops.count("et_copy::_d2h_copy.out") == 2


def test_xnnpack_delegate_matches(lowered, documents):
    from executorch.exir._serialize._program import deserialize_pte_binary

    data = lowered["xnnpack"].read_bytes()
    # ExecuTorch moves segment payloads inline when it reads a file back.
    restored = deserialize_pte_binary(data).program
    method = documents["xnnpack"]["methods"][0]
    (delegate,) = method["delegates"]
    (expected,) = restored.execution_plan[0].delegates
    assert delegate["id"] == expected.id
    assert delegate["payload_size"] == len(restored.backend_delegate_data[expected.processed.index].data)
    assert delegate["location"] == "segment"
    segment = documents["xnnpack"]["file"]["segments"][delegate["payload_index"]]
    assert segment["size"] == delegate["payload_size"]
    assert segment["offset"] + segment["size"] <= len(data)
    assert [row["delegate"] for row in method["instructions"] if row["kind"] == "delegate"] == [0]
