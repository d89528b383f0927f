"""`devplan diff` pairs tensors by what they are (role and position or name, else module path
and op), not by value index, so a graph that gained one op or one scalar renumbers nothing it
reports; and counts that are no memory (values, instructions) are reported, never failed."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import devplan
from devplan.inspection.diff import side
from devplan.inspection.pairing import pair_tensors
from tests.inspection.runner import invoke


class Net(nn.Module):
    """linear, relu, linear, tanh; `double` inserts h * 2 between the linears."""

    def __init__(self, double: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.double = nn.Linear(16, 32), nn.Linear(32, 8), double

    def forward(self, x):
        h = torch.relu(self.a(x))
        if self.double:
            h = h * 2
        return torch.tanh(self.b(h))


@pytest.fixture(scope="module")
def nets(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("identity")
    paths = {}
    for name, double in (("base", False), ("doubled", True)):
        paths[name] = folder / f"{name}.pte"
        devplan.compile(torch.export.export(Net(double).eval(), (torch.randn(4, 16),), strict=False), paths[name])
    return paths


def test_one_added_op_is_one_added_tensor_named_by_its_source(nets):
    result = devplan.diff(nets["base"], nets["doubled"])
    (placements,) = [c for c in result.changes if c.subject == "placements"]
    detail = placements.detail
    # the tensors after it are renumbered and live one instruction later: neither is a change
    assert (detail["added"], detail["removed"], detail["resized"], detail["moved"], detail["lifetime"]) == (
        1,
        0,
        0,
        0,
        0,
    ), detail
    (added,) = detail["largest"]
    assert added["a"] is None and "mul" in added["source"] and added["b"]["nbytes"] == 4 * 32 * 4, added
    text = result.text()
    assert "placements: 5 -> 6 tensors: 1 added\n" in text and "lifetime" not in text, text


def test_devplan_and_executorch_programs_pair_tensors_of_one_shape_and_dtype(tmp_path):
    from testbed.executorch import executorch_pte
    from testbed.hf_models import gpt2

    module, args, kwargs = gpt2()
    ep = torch.export.export(module, args, kwargs, strict=False)
    theirs, mine = tmp_path / "executorch.pte", tmp_path / "devplan.pte"
    theirs.write_bytes(executorch_pte(ep))
    mine.write_bytes(devplan.compile(ep).data)
    a, b = side(theirs).program.placements["forward"], side(mine).program.placements["forward"]
    pairs, removed, added = pair_tensors(a, b)
    assert pairs and len(pairs) + len(removed) == len(a) and len(pairs) + len(added) == len(b)
    assert all(x.form == y.form for x, y in pairs), [
        (x.source, x.form, y.source, y.form) for x, y in pairs if x.form != y.form
    ][:5]
    # the input and the logits pair by their role and position
    inputs = {x.row["value"]: y.row["value"] for x, y in pairs}
    for role in ("inputs", "outputs"):
        (x,), (y,) = (devplan.inspect(path)["methods"][0][role] for path in (theirs, mine))
        assert inputs[x] == y
    detail = next(c for c in devplan.diff(theirs, mine).changes if c.subject == "placements").detail
    for row in detail["largest"]:
        if row["a"] is not None and row["b"] is not None:
            assert row["a"]["nbytes"] == row["b"]["nbytes"], row


def test_one_more_value_passes_within_the_tolerance_but_an_added_operator_fails(nets, tmp_path):
    path = tmp_path / "net.golden.json"
    assert invoke("check", str(nets["base"]), "--golden", str(path), "--update").exit_code == 0
    golden = json.loads(path.read_text())
    method = golden["methods"][0]
    method["counts"]["values"] -= 1  # the program has one more scalar than its golden
    for buffer in method["buffers"]:  # and is a little wider (the human sizes, optional, left out)
        buffer["size"] -= 16
        buffer["lower_bound"] -= 16
        buffer.pop("size_text", None), buffer.pop("lower_bound_text", None)
    method["placements"]["sha256"] = "0" * 64
    path.write_text(json.dumps(golden))
    result = invoke("check", str(nets["base"]), "--golden", str(path), "--tolerance", "50%")
    assert result.exit_code == 0, result.output
    assert "ok    values: " in result.stdout and "ok    buffer 1 (cpu) size: " in result.stdout, result.stdout
    assert invoke("check", str(nets["base"]), "--golden", str(path), "--tolerance", "50%", "--exact").exit_code == 1
    method["operators"] = method["operators"][1:]  # and now an operator the golden has not
    path.write_text(json.dumps(golden))
    result = invoke("check", str(nets["base"]), "--golden", str(path), "--tolerance", "50%")
    assert result.exit_code == 1 and "FAIL  operators added: " in result.stdout, result.output
