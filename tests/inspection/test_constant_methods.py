"""inspect shows what each constant method returns (the values an LLM runner reads before it
runs anything): in the text view, in the JSON document and in the golden file, which diff and
check --golden compare."""

from __future__ import annotations

import json

import pytest
import torch

import devplan
from devplan.inspection.golden import golden_document
from testbed.cli import devplan as cli

METADATA = {
    "get_max_seq_len": 128,
    "use_kv_cache": True,
    "get_eos_ids": [128001, 128009],
    "temperature": 0.5,
    "name": "llama",
}


def _program(**changes) -> bytes:
    ep = torch.export.export(torch.nn.Linear(4, 4), (torch.randn(1, 4),))
    return devplan.compile(ep, constant_methods={**METADATA, **changes}).data


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    path = tmp_path_factory.mktemp("constants") / "meta.pte"
    path.write_bytes(_program())
    return path


def test_the_document_and_the_golden_file_give_each_value(program):
    doc = devplan.inspect(program)
    returns = {m["name"]: m["returns"] for m in doc["methods"] if "returns" in m}
    assert returns == {
        "get_max_seq_len": [128],
        "use_kv_cache": [True],
        "get_eos_ids": [128001, 128009],
        "temperature": [0.5],
        "name": ["llama"],
    }
    assert "returns" not in doc["methods"][0]  # forward runs instructions: it returns what they compute
    golden = {m["name"]: m.get("returns") for m in golden_document(doc)["methods"]}
    assert golden == {"forward": None, **returns}


def test_the_text_view_prints_each_value(program):
    run = cli("inspect", program, "-s", "summary")
    assert run.returncode == 0, run.stderr
    # one line for them all beside forward, each as --constant-method takes it (issue 55.1)
    shown = " ".join(run.stdout.split())
    listed = 'get_max_seq_len=128, use_kv_cache=true, get_eos_ids=[128001, 128009], temperature=0.5, name="llama"'
    assert f"methods forward; constant methods: {listed}" in shown, run.stdout
    assert "method get_max_seq_len" not in cli("inspect", program).stdout
    alone = cli("inspect", program, "--method", "get_eos_ids").stdout  # shown alone, a method keeps its view
    assert "returns 128001, 128009" in alone and "method get_eos_ids" in alone, alone
    trimmed = json.loads(cli("inspect", program, "--json", "-s", "tensors").stdout)
    assert [m.get("returns") for m in trimmed["methods"]][1] == [128]  # --section keeps it


def test_a_changed_value_fails_the_golden_check(program, tmp_path):
    golden = tmp_path / "meta.golden.json"
    assert cli("check", program, "--golden", golden, "--update").returncode == 0
    changed = tmp_path / "changed.pte"
    changed.write_bytes(_program(get_max_seq_len=64))
    run = cli("check", changed, "--golden", golden)
    assert run.returncode == 1 and "returns values: [128] -> [64]" in run.stdout, run.stdout
    assert not devplan.diff(program, changed).ok


def _strict(text: str):
    def refuse(token):
        raise ValueError(f"{token} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_nan_and_infinite_values_are_json_a_golden_file_holds(tmp_path):
    """A constant method of NaN (or an infinity) wrote bare NaN tokens: `check --update` wrote a
    golden file that `check --golden` then refused as "not a golden file", and `inspect --json`
    and `run --json` printed what no strict parser reads. They are the strings protobuf's JSON
    mapping writes, and the golden check passes on the file it wrote."""
    from tests.test_schemas import validate

    program = tmp_path / "nan.pte"
    program.write_bytes(_program(eps=float("nan"), big=float("inf"), low=[float("-inf"), 1.5]))
    golden = tmp_path / "nan.golden.json"
    assert cli("check", program, "--golden", golden, "--update").returncode == 0
    again = cli("check", program, "--golden", golden)
    assert again.returncode == 0, again.stdout + again.stderr
    assert {m["name"]: m.get("returns") for m in _strict(golden.read_text())["methods"]}["eps"] == ["NaN"]
    document = _strict(cli("inspect", program, "--json").stdout)
    returns = {m["name"]: m["returns"] for m in document["methods"] if "returns" in m}
    assert (returns["eps"], returns["big"], returns["low"]) == (["NaN"], ["Infinity"], ["-Infinity", 1.5])
    validate("inspect", document)
    ran = _strict(cli("run", program, "-m", "eps", "--json").stdout)
    assert ran["runs"] == [[{"value": "NaN"}]]
    validate("run", ran)


def test_a_run_whose_outputs_are_nan_prints_json(tmp_path):
    from tests.test_schemas import validate

    ep = torch.export.export(torch.nn.Linear(4, 4), (torch.randn(1, 4),))
    program, inputs = tmp_path / "linear.pte", tmp_path / "nan.pt"
    devplan.compile(ep, program)
    torch.save([torch.full((1, 4), float("nan"))], inputs)
    ran = _strict(cli("run", program, "-i", inputs, "--json").stdout)
    (summary,) = ran["runs"][0]
    assert (summary["min"], summary["max"], summary["mean"]) == ("NaN", "NaN", "NaN")
    validate("run", ran)
    text = cli("run", program, "-i", inputs)
    assert text.returncode == 0 and "min NaN  max NaN  mean NaN" in text.stdout, text.stderr
