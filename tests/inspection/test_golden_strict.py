"""Golden files are read strictly, each refusal one line naming the file and the field: odd
contents of the right format, a method twice, an unknown or missing field, a key twice, a file
cut short (told to go before --update writes it again); the validator requires what the JSON
Schema does; `format` is the program's format; and - is standard input for reading as for writing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import devplan
from devplan.errors import DevplanError
from testbed.cli import assert_one_line_error, devplan as devplan_cli
from tests.inspection.runner import invoke, one_line, run_devplan

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "samples" / "mlp.pt2"
GOLDEN = ROOT / "tests" / "golden"
SCHEMA = json.loads((ROOT / "docs" / "schemas" / "golden.schema.json").read_text())


def _odd_goldens() -> dict[str, tuple[str, str]]:
    """Golden files of the right format and odd contents: name -> (text, the field path the refusal names)."""
    base = json.loads((GOLDEN / "two_io_cuda.golden.json").read_text())

    def edited(path: str, value) -> str:
        doc = json.loads(json.dumps(base))
        *parents, last = [int(key) if key.isdigit() else key for key in path.split(".")]
        target = doc
        for key in parents:
            target = target[key]
        if value is _DROP:
            del target[last]
        else:
            target[last] = value
        return json.dumps(doc)

    nested = '{"format": "devplan-golden", "schema_version": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    return {
        "deep nesting": (nested, "nested too deeply"),
        "huge integer": (edited("methods.0.buffers.0.size", 10**400), "methods[0].buffers[0].size"),
        "NaN size": (edited("methods.0.buffers.1.size", float("nan")), "not a golden file (NaN is not JSON)"),
        "wrong type": (edited("methods.0.operators", "aten::add.out"), "methods[0].operators should be an array"),
        "missing key": (edited("methods.0.delegates.0.window", _DROP), 'methods[0].delegates[0] has no "window"'),
        "schema_version true": (edited("schema_version", True), "golden schema_version True"),
        "float count": (edited("methods.0.counts.values", 11.0), "methods[0].counts.values"),
        "device entry": (edited("methods.0.devices.cpu", []), "methods[0].devices.cpu should be an object"),
        "bad window": (edited("methods.0.delegates.0.window", {"mem_id": 0, "offset": 0}), "window.mem_id"),
    }


_DROP = object()


@pytest.mark.parametrize("case", list(_odd_goldens()))
def test_an_odd_golden_file_is_refused_naming_the_file_and_the_field(case, tmp_path):
    text, field = _odd_goldens()[case]
    golden = tmp_path / "odd.golden.json"
    golden.write_text(text)
    with pytest.raises(DevplanError) as refused:
        devplan.diff(golden, golden)
    message = str(refused.value)
    assert message.startswith(f"{golden}: ") and field in message and "\n" not in message, message


def test_odd_goldens_exit_2_in_diff_and_check(blocks, tmp_path):
    golden = tmp_path / "odd.golden.json"
    golden.write_text(_odd_goldens()["schema_version true"][0])
    for args in (
        ("diff", golden, blocks["good"]),
        ("diff", blocks["good"], golden),
        ("check", blocks["good"], "--golden", golden),
    ):
        assert_one_line_error(run_devplan(*map(str, args)), str(golden))


def test_the_golden_validator_requires_what_the_schema_requires():
    """Every key the JSON Schema requires, removed from a golden file with delegates and
    windows, makes the validator refuse it; and the committed golden files pass both."""
    import jsonschema

    from devplan import schemacheck

    shipped = schemacheck.schema("golden")
    assert shipped == SCHEMA  # docs/schemas/ links the file the package ships

    for path in sorted(GOLDEN.glob("*.golden.json")):
        doc = json.loads(path.read_text())
        jsonschema.validate(doc, SCHEMA)
        assert schemacheck.problem(doc, shipped, shipped) is None, path

    def required(schema, doc, where):
        schema = SCHEMA["$defs"][schema["$ref"].rsplit("/", 1)[1]] if "$ref" in schema else schema
        if isinstance(doc, dict):
            for key in schema.get("required", ()):
                yield where, doc, key
            for key, inner in schema.get("properties", {}).items():
                if isinstance(doc.get(key), (dict, list)):
                    yield from required(inner, doc[key], f"{where}.{key}")
            if isinstance(schema.get("additionalProperties"), dict):
                for key, item in doc.items():
                    yield from required(schema["additionalProperties"], item, f"{where}.{key}")
        elif isinstance(doc, list) and doc and "items" in schema:
            yield from required(schema["items"], doc[0], f"{where}[0]")

    doc = json.loads(json.dumps({**json.loads((GOLDEN / "two_io_cuda.golden.json").read_text())}))
    doc["methods"][0]["delegates"][0]["window"] = {"mem_id": 2, "offset": 0}
    doc["methods"][0]["delegates"][0]["payload_buffers"] = [
        {"method": "forward", "mem_id": 1, "device": "cuda:0", "size": 16, "lower_bound": 16}
    ]
    checked = 0
    for where, parent, key in list(required(SCHEMA, doc, "")):
        if key in ("schema_version", "document"):
            continue  # refused before the shape, with messages of their own
        value = parent.pop(key)
        assert schemacheck.problem(doc, shipped, shipped) is not None, f"{where}.{key}"
        parent[key] = value
        checked += 1
    assert checked > 30


def _golden_edited(edit) -> str:
    import json

    doc = json.loads((GOLDEN / "two_io_cuda.golden.json").read_text())
    edit(doc)
    return json.dumps(doc)


@pytest.mark.parametrize(
    "case, edit, needle",
    [
        ("method twice", lambda d: d["methods"].append(d["methods"][0]), "method 'forward' is listed twice"),
        ("file.external", lambda d: d["file"].update(external={"keys": 1}), 'file has an unknown field "external"'),
        (
            "method constants",
            lambda d: d["methods"][0].update(constants=1),
            'methods[0] has an unknown field "constants"',
        ),
        (
            "peak field",
            lambda d: d["methods"][0]["buffers"][0]["peak"].update(extra=2),
            'methods[0].buffers[0].peak has an unknown field "extra"',
        ),
        # a peak without one of its fields was an internal error (KeyError) in check and diff
        *[
            (f"peak {key}", lambda d, key=key: d["methods"][0]["buffers"][0]["peak"].pop(key), f'peak has no "{key}"')
            for key in ("op", "source", "modules")
        ],
    ],
)
def test_a_golden_file_with_a_method_twice_or_an_unknown_field_is_refused(case, edit, needle, tmp_path):
    import json

    import jsonschema

    golden = tmp_path / "odd.golden.json"
    golden.write_text(_golden_edited(edit))
    one_line(invoke("diff", str(golden), str(golden)), f"{golden}: not a valid golden file", needle)
    schema = json.loads((ROOT / "docs" / "schemas" / "golden.schema.json").read_text())
    if case != "method twice":  # the schema says which fields exist
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(json.loads(golden.read_text()), schema)


def test_a_damaged_golden_file_is_told_to_go_before_update_writes_it_again(tmp_path):
    """The advice for a golden file that is not JSON was `--update`, which refuses to replace
    what is not a golden file: the advice says to remove it first, and following it works."""
    import devplan

    golden = tmp_path / "cut.golden.json"
    golden.write_text((GOLDEN / "two_io_cuda.golden.json").read_text()[:200])
    devplan.compile(ROOT / "samples" / "two_io.pt2", tmp_path / "p.pte")
    message = one_line(invoke("diff", str(golden), str(golden)), "not a golden file", "once the file is removed")
    assert f"--golden {golden} --update" in message
    one_line(invoke("check", str(tmp_path / "p.pte"), "--golden", str(golden), "--update"), "not a devplan golden")
    golden.unlink()
    assert invoke("check", str(tmp_path / "p.pte"), "--golden", str(golden), "--update").exit_code == 0


def test_a_golden_file_with_a_key_twice_is_refused(tmp_path):
    golden = tmp_path / "twice.golden.json"
    text = (GOLDEN / "two_io_cuda.golden.json").read_text()
    golden.write_text(text.replace('"schema_version": 1', '"schema_version": 1, "schema_version": 1'))
    one_line(invoke("diff", str(golden), str(golden)), str(golden), "schema_version", "twice")


def test_golden_dash_reads_standard_input_as_update_dash_writes_standard_output(tmp_path):
    program = tmp_path / "m.pte"
    assert invoke("compile", str(MLP), "-o", str(program)).exit_code == 0
    written = devplan_cli("check", str(program), "--golden", "-", "--update", input="")
    golden = written.stdout  # the golden file alone: the report goes to stderr
    assert written.returncode == 0 and json.loads(golden)["document"] == "devplan-golden", written.stderr
    assert "ok" in written.stderr
    checked = devplan_cli("check", str(program), "--golden", "-", input=golden)
    assert checked.returncode == 0, checked.stderr
    drifted = json.loads(golden)
    drifted["methods"][0]["buffers"][0]["size"] -= 16
    failed = devplan_cli("check", str(program), "--golden", "-", input=json.dumps(drifted))
    assert failed.returncode == 1 and "size" in failed.stdout
    both = devplan_cli("check", "-", "--golden", "-", input=golden)
    assert both.returncode == 2 and "standard input can be read once" in both.stderr
    from_stdin = devplan_cli("diff", "-", str(program), input=golden)
    assert from_stdin.returncode == 0, from_stdin.stderr


def test_format_is_the_programs_format_and_golden_files_say_what_they_are_as_document(tmp_path):
    """`format` means one thing in every document (the program's format, "ET12" in inspect's);
    a golden file says what it is under `document`, and one written before, under `format`, still reads."""
    program = tmp_path / "mlp.pte"
    devplan.compile(GOLDEN.parent.parent / "samples" / "mlp.pt2", program)
    golden = tmp_path / "mlp.golden.json"
    assert invoke("check", str(program), "--golden", str(golden), "--update").exit_code == 0
    written = json.loads(golden.read_text())
    assert written["document"] == "devplan-golden" and "format" not in written
    assert json.loads(invoke("inspect", str(program), "--json").output)["format"] == "ET12"
    older = {("format" if key == "document" else key): value for key, value in written.items()}
    golden.write_text(json.dumps(older))
    assert invoke("check", str(program), "--golden", str(golden)).exit_code == 0
    assert invoke("diff", str(golden), str(program)).exit_code == 0
