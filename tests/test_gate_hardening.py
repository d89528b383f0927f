"""Issue 29, findings 4, 7 and 8: the CI gate (check, diff, golden files) sees a moved
delegate window and an unsound peak, refuses odd input in one line, and keeps a file's
escape sequences off the terminal. Each test builds its bad input itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import devplan
from devplan.errors import DevplanError
from tests.compile.test_cli import assert_one_line_error
from tests.inspection.runner import invoke, run_devplan
from tests.runtime.test_device_arena import two_blocks


@pytest.fixture(scope="module")
def blocks(tmp_path_factory):
    """Two cuda:0 delegates whose working memory is a window at byte 1024 of the device buffer,
    and the same program with both windows moved to byte 0, over tensors alive at their calls."""
    folder = tmp_path_factory.mktemp("windows")
    data = two_blocks().data
    # both delegates' compile specs read the one string compile writes for them (pte/sharing.py):
    # replacing it moves both windows
    assert data.count(b"mem_id=2,offset=1024") == 1
    paths = {"good": folder / "blocks.pte", "moved": folder / "moved.pte"}
    paths["good"].write_bytes(data)
    paths["moved"].write_bytes(data.replace(b"mem_id=2,offset=1024", b"mem_id=2,offset=0000"))
    return paths


def test_a_moved_delegate_window_fails_diff_and_the_golden_check(blocks, tmp_path):
    result = devplan.diff(blocks["good"], blocks["moved"])
    windows = [c for c in result.changes if c.fact == "window"]
    assert not result.ok and [(c.subject, c.fails) for c in windows] == [("delegate 0", True), ("delegate 1", True)]
    assert windows[0].a == {"mem_id": 2, "offset": 1024, "size": 1024} and windows[0].b["offset"] == 0
    assert "FAIL  delegate 0 window: buffer 2 @1024 (1.0 KiB) -> buffer 2 @0 (1.0 KiB)" in result.text()
    golden = tmp_path / "blocks.golden.json"
    assert invoke("check", str(blocks["good"]), "--golden", str(golden), "--update").exit_code == 0
    assert not devplan.diff(golden, blocks["moved"]).ok  # a golden file as either side
    assert not devplan.diff(blocks["moved"], golden).ok
    checked = invoke("check", str(blocks["moved"]), "--golden", str(golden), "--tolerance", "50%")
    assert checked.exit_code == 1 and "delegate 0 window: buffer 2 @1024" in checked.stdout


def test_a_peak_below_the_bytes_that_must_be_apart_is_flagged_and_fails_check(blocks):
    (good, moved) = (devplan.inspect(blocks[name])["methods"][0]["buffers"][1] for name in ("good", "moved"))
    # the good plan is as small as its bound at CUDA's 512-byte alignment; its live bytes are fewer
    assert "problem" not in good and good["peak"] <= good["lower_bound"] == good["size"]
    assert moved["peak"] < moved["lower_bound"] and moved["problem"].startswith("unsound plan: peak 1024 bytes")
    text = invoke("inspect", str(blocks["moved"]), "--section", "buffers")
    assert text.exit_code == 0 and "buffer 2 (cuda:0): unsound plan: peak 1024 bytes" in text.stdout
    assert all(c.ok for c in devplan.check(blocks["good"]))
    (bad,) = [c for c in devplan.check(blocks["moved"]) if not c.ok]
    assert (bad.mem_id, bad.problem) == (2, moved["problem"])
    run = invoke("check", str(blocks["moved"]), "--json")
    report = json.loads(run.stdout)
    assert run.exit_code == 1 and report["ok"] is False and report["buffers"][1]["problem"] == moved["problem"]


GOLDEN = Path(__file__).parent / "golden"
SCHEMA = json.loads((Path(__file__).parents[1] / "docs" / "schemas" / "golden.schema.json").read_text())


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


def test_escape_sequences_from_files_reach_check_and_diff_output_escaped(tmp_path):
    """An operator name, a delegate id and a device from a golden file, and a method name in
    a program, holding ESC [31m and BEL."""
    doc = json.loads((GOLDEN / "two_io_cuda.golden.json").read_text())
    method = doc["methods"][0]
    method["operators"].append("evil\x1b[31m::op\x07")
    method["delegates"][0]["id"] = "Back\x1b[2Jend"
    method["buffers"][0]["device"] = "cpu\x1b]0;title\x07"
    odd = tmp_path / "odd.golden.json"
    odd.write_text(json.dumps(doc))
    runs = [
        invoke("diff", str(GOLDEN / "two_io_cuda.golden.json"), str(odd)),
        invoke("diff", str(odd), str(GOLDEN / "two_io_cuda.golden.json")),
    ]
    program = tmp_path / "two_io_cuda.pte"
    devplan.compile(GOLDEN.parent.parent / "samples" / "two_io.pt2", program, delegates=["cuda:0=aten::linear"])
    runs.append(invoke("check", str(program), "--golden", str(odd)))
    for run in runs:
        assert run.exit_code == 1, run.output
        assert "\x1b" not in run.output and "\x07" not in run.output, run.output
        assert "\\x1b[31m" in run.output or "\\x1b[2J" in run.output, run.output


def test_ctrl_c_exits_130_with_one_line(monkeypatch, capsys):
    from devplan.cli import exits as cli

    def interrupted(**_):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "app", interrupted)
    monkeypatch.setattr("sys.argv", ["devplan", "check", "x.pte"])
    monkeypatch.setattr("signal.signal", lambda *_: None)  # leave pytest's handlers alone
    with pytest.raises(SystemExit) as done:
        cli.main()
    assert done.value.code == 130 and capsys.readouterr().err == "devplan: interrupted\n"


def test_a_legal_244_character_output_name_is_written(tmp_path):
    """The temporary file beside it keeps only part of the name, so it stays within 255 bytes."""
    from devplan.files import write_atomic

    for length in (244, 255):
        target = tmp_path / ("p" * (length - 4) + ".pte")
        write_atomic(target, b"program")
        assert target.read_bytes() == b"program" and [p.name for p in tmp_path.iterdir()] == [target.name]
        target.unlink()


@pytest.mark.parametrize("make", [lambda: torch.eye(3).to_sparse(), lambda: torch.empty(3, 3, device="meta")])
def test_sparse_or_meta_inputs_are_refused_in_one_line(make, tmp_path):
    from devplan.cli.run import _load_inputs
    from devplan.runtime.memory import Memory

    saved = tmp_path / "inputs.pt"
    torch.save([torch.ones(3, 3), make()], saved)
    with pytest.raises(
        DevplanError, match=r"inputs.pt: input 1 is a (sparse_coo tensor on cpu|strided tensor on meta)"
    ):
        _load_inputs(saved, Memory(1 << 20))


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
