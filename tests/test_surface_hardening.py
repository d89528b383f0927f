"""Issue 36, items 3, 5, 6 and 7: the new surfaces (.ptd data files, multi-method programs,
constant methods, --metadata, --partitioner, golden files) refuse what ExecuTorch's runtime
refuses, or what devplan cannot answer soundly, in one line naming the file and what to do.
Each test builds its bad input itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from devplan.errors import DevplanError
from tests.inspection.runner import invoke

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "samples" / "mlp.pt2"


def _one_line(result, *needles: str) -> str:
    """The one-line DevplanError an in-process command ended with, holding each needle."""
    assert isinstance(result.exception, DevplanError), (result.exception, result.output)
    message = str(result.exception)
    assert "\n" not in message and all(needle in message for needle in needles), message
    return message


# item 7: a partitioner is a class whose instances partition


@pytest.mark.parametrize(
    "spec, needle",
    [
        ("sys:exit:{}", "sys.exit is not a class"),
        ("builtins:print", "builtins.print is not a class"),
        ("builtins:dict", "builtins.dict has no partition method"),
    ],
)
def test_a_partitioner_that_is_no_partitioner_class_is_refused_before_it_is_called(spec, needle, tmp_path, capsys):
    from devplan.backend import Partitioner

    with pytest.raises(DevplanError, match=needle):
        Partitioner.parse_class(spec).make()
    assert capsys.readouterr().out == ""  # print was never called
    if spec != "sys:exit:{}":
        return  # one command line is enough: each imports ExecuTorch's lowering
    out = tmp_path / "m.pte"
    _one_line(invoke("compile", str(MLP), "-o", str(out), "--partitioner", spec), spec, needle)
    assert not out.exists()


# item 5: JSON nested deeper than devplan reads is refused in one line, not a RecursionError

_DEEP = "[" * 5_000 + "]" * 5_000  # 10 KB of brackets


@pytest.mark.parametrize("where", ["--metadata", "--constant-method", "--partitioner"])
def test_deeply_nested_json_options_are_refused_in_one_line(where, tmp_path):
    meta = tmp_path / "meta.json"
    meta.write_text('{"m": ' + _DEEP + "}")
    given = {
        "--metadata": [str(meta)],
        "--constant-method": [f"m={_DEEP}"],
        "--partitioner": ['tests.partitioners:AddsTo:{"a": ' + _DEEP + "}"],
    }[where]
    result = invoke("compile", str(MLP), "-o", str(tmp_path / "m.pte"), where, *given)
    _one_line(result, where, "nested deeper than")


def test_json_nesting_is_measured_outside_strings():
    from devplan.jsontext import loads

    inside = "[" * 100 + '\\" {'  # brackets, an escaped quote and a brace, all inside one string
    assert loads('{"a": "' + inside + '"}', "x") == {"a": "[" * 100 + '" {'}
    with pytest.raises(DevplanError, match=r"^x: JSON nested deeper than \d+ levels"):
        loads(_DEEP, "x")


# item 3d: a method of a million values is refused as ExecuTorch's runtime refuses it


def _export_add():
    import torch

    class Add(torch.nn.Module):
        def forward(self, x):
            return x + 1

    return torch.export.export(Add(), (torch.ones(2),))


def _wide_constant_method(outputs: int) -> bytes:
    """A program whose constant method m returns `outputs` ints: every value one table shared
    by offset (a FlatBuffer may point at one table many times), so it packs in a second where
    devplan's compile of as many items takes minutes."""
    import devplan
    from devplan.pte import read_pte
    from devplan.pte.fb.EValue import EValueT
    from devplan.pte.writer import dumps_pte

    pte = read_pte(devplan.compile(_export_add(), constant_methods={"m": [1, 2]}).data)
    (plan,) = [p for p in pte.program.executionPlan if p.name == b"m"]

    class Shared(EValueT):
        def Pack(self, builder):  # once; every later element points at the same table
            if not hasattr(self, "packed"):
                self.packed = super().Pack(builder)
            return self.packed

    shared = Shared()
    shared.valType, shared.val = plan.values[0].valType, plan.values[0].val
    plan.values, plan.outputs = [shared] * outputs, list(range(outputs))
    return dumps_pte(pte.program, [bytes(segment) for segment in pte.segments])


def test_a_method_of_a_million_values_is_refused_at_once_as_executorch_refuses_it(tmp_path):
    """ExecuTorch's runtime verifies a program with FlatBuffers' verifier, which refuses more
    than 1,000,000 tables (each value is two: the EValue and its Int). devplan's inspect took a
    minute and 700 MB on a million values; it now refuses at the vector, before walking it (from
    500,001 values on, it refuses once its walk has counted the tables)."""
    import time

    from devplan.pte import read_pte
    from devplan.pte.verify import MAX_TABLES

    wide = tmp_path / "wide.pte"
    wide.write_bytes(_wide_constant_method(MAX_TABLES))
    started = time.monotonic()
    with pytest.raises(DevplanError, match=r"more than 1000000 tables.*ExecuTorch's runtime refuses"):
        read_pte(wide)
    assert time.monotonic() - started < 2
    for command in (("inspect", str(wide)), ("run", str(wide), "--method", "m")):
        _one_line(invoke(*command), str(wide), "tables")
    runtime = pytest.importorskip("executorch.runtime")
    with pytest.raises(RuntimeError, match="Failed to load program"):
        runtime.Runtime.get().load_program(str(wide))
    fewer = _wide_constant_method(1000)  # the same shape within the bound reads and runs
    from devplan.runtime import run

    assert run(fewer, [], method="m")[0] == [1] * 1000 and len(read_pte(fewer).program.executionPlan) == 2


def test_a_constant_method_too_long_for_executorch_is_refused_before_it_is_compiled():
    import devplan
    from devplan.pte.verify import MAX_TABLES

    with pytest.raises(DevplanError, match=r"constant method m: 500000 items.*ExecuTorch's runtime"):
        devplan.compile(_export_add(), constant_methods={"m": [1] * (MAX_TABLES // 2)})


# item 3a: a .ptd key the program reads as a tensor must say it is one


def _ptd_pair(tmp_path: Path) -> tuple[Path, Path]:
    import devplan

    pte, ptd = tmp_path / "p.pte", tmp_path / "p.ptd"
    devplan.compile(MLP, pte, external_constants=ptd)
    return pte, ptd


def test_a_ptd_entry_without_a_tensor_layout_under_a_tensors_key_is_refused(tmp_path):
    """ExecuTorch's runtime crashed (SIGSEGV) on such a key where devplan ran it."""
    from devplan.pte import read_pte
    from devplan.pte.ptd import ptd_image, read_ptd

    pte, ptd = _ptd_pair(tmp_path)
    data = read_ptd(ptd)
    first, *rest = data.entries.values()
    bare = tmp_path / "bare.ptd"
    bare.write_bytes(bytes(ptd_image([first._replace(layout=None), *rest], [bytes(s) for s in data.segments])))
    with pytest.raises(DevplanError, match=rf"^{bare}: key {first.key!r} holds bytes with no tensor layout"):
        read_pte(pte, data=bare)
    for command in ("run", "inspect", "check"):
        _one_line(invoke(command, str(pte), "--data", str(bare)), str(bare), first.key, "no tensor layout")
    assert invoke("run", str(pte), "--data", str(ptd)).exit_code == 0


# item 3b: duplicate method names


def _renamed(data: bytes, old: bytes, new: bytes) -> bytes:
    """The program with method `old` renamed `new` (as long), through its object tables."""
    from devplan.pte import read_pte
    from devplan.pte.writer import dumps_pte

    pte = read_pte(data)
    for plan in pte.program.executionPlan:
        if plan.name == old:
            plan.name = new
    return dumps_pte(pte.program, [bytes(segment) for segment in pte.segments])


@pytest.mark.parametrize("twin", [b"get_eos_ids", b"forward"])
def test_a_program_with_two_methods_of_one_name_is_refused_when_read(twin, tmp_path):
    """devplan took the last of two methods named alike, ExecuTorch's runtime the first."""
    import devplan
    from devplan.pte import read_pte

    data = devplan.compile(_export_add(), constant_methods={"get_eos_ids": [1, 2], "get_eos_idz": "hello"}).data
    twins = tmp_path / "twins.pte"
    twins.write_bytes(_renamed(data, b"get_eos_idz" if twin == b"get_eos_ids" else b"get_eos_ids", twin))
    with pytest.raises(DevplanError, match=rf"^{twins}: methods \d and \d are both named {twin.decode()!r}"):
        read_pte(twins)
    for command in (("inspect", str(twins)), ("run", str(twins), "--method", twin.decode())):
        _one_line(invoke(*command), str(twins), "both named")


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--method", "a=X.pt2", "--method", "a=Y.pt2"], "--method a given twice"),
        (["--method", "forward=X.pt2"], "forward"),
        (["--method", "a=X.pt2", "--constant-method", "a=1"], "given both as a program and as a constant method"),
        (["--constant-method", "a=1", "--constant-method", "a=2"], "--constant-method a given twice"),
        (["--metadata", "twice.json"], "twice.json: a given twice"),
    ],
)
def test_compile_refuses_two_methods_of_one_name(args, needle, tmp_path, monkeypatch):
    import torch

    monkeypatch.chdir(tmp_path)
    torch.export.save(_export_add(), tmp_path / "X.pt2")
    torch.export.save(_export_add(), tmp_path / "Y.pt2")
    (tmp_path / "twice.json").write_text('{"a": 1, "a": 2}')
    _one_line(invoke("compile", "X.pt2", "-o", "out.pte", *args), needle)
    assert not (tmp_path / "out.pte").exists()


# item 3c: keys and method names are the file's bytes, not text decoded with replacement


def _external_pair_with_key_tail(tmp_path: Path, program_tail: bytes, data_tail: bytes) -> tuple[Path, Path]:
    """The MLP's program and .ptd with the first weight's key ending in other bytes in each."""
    from devplan.pte import read_pte
    from devplan.pte.ptd import ptd_image, read_ptd
    from devplan.pte.writer import dumps_pte

    pte_path, ptd_path = _ptd_pair(tmp_path)
    pte, ptd = read_pte(pte_path), read_ptd(ptd_path)
    first, *rest = ptd.entries.values()
    for plan in pte.program.executionPlan:
        for value in plan.values:
            info = getattr(value.val, "extraTensorInfo", None)
            if info is not None and info.fullyQualifiedName == first.key.encode():
                info.fullyQualifiedName = first.key.encode() + program_tail
    program, data = tmp_path / "keyed.pte", tmp_path / "keyed.ptd"
    program.write_bytes(dumps_pte(pte.program, [bytes(segment) for segment in pte.segments]))
    renamed = first._replace(key=first.key.encode() + data_tail)
    data.write_bytes(bytes(ptd_image([renamed, *rest], [bytes(segment) for segment in ptd.segments])))
    return program, data


def test_keys_of_other_invalid_utf8_bytes_do_not_match(tmp_path):
    """'layers.0.weight\\xff' in the program and '...\\xfe' in the .ptd decoded alike (U+FFFD)
    and devplan ran the pair; ExecuTorch's runtime compares bytes and refuses it."""
    import torch

    from devplan.pte import read_pte
    from devplan.runtime import run

    program, data = _external_pair_with_key_tail(tmp_path, b"\xff", b"\xfe")
    with pytest.raises(DevplanError, match=r"the external weight 'layers\.0\.weight\\udcff', which .* does not hold"):
        read_pte(program, data=data)
    _one_line(invoke("run", str(program), "--data", str(data)), str(data), "does not hold")
    runtime = pytest.importorskip("executorch.runtime")
    with pytest.raises(RuntimeError, match="Failed to load method forward"):
        runtime.Runtime.get().load_program(str(program), data_path=str(data)).load_method("forward")
    # the same bytes on both sides are the same key, in both runtimes
    program, data = _external_pair_with_key_tail(tmp_path, b"\xff", b"\xff")
    (x,) = torch.export.load(MLP).example_inputs[0]
    got = run(program, [x], data=data)[0]
    want = runtime.Runtime.get().load_program(str(program), data_path=str(data)).load_method("forward").execute([x])
    assert torch.allclose(got[0], want[0], atol=1e-5)


def test_a_method_name_of_invalid_utf8_is_refused_as_executorchs_runtime_refuses_it(tmp_path):
    """ExecuTorch's runtime (its Python API) fails to load such a program (UnicodeDecodeError)."""
    import devplan

    data = _renamed(devplan.compile(_export_add(), constant_methods={"name": "x"}).data, b"name", b"na\xffme")
    odd = tmp_path / "odd.pte"
    odd.write_bytes(data)
    _one_line(invoke("inspect", str(odd)), str(odd), "method 1", "not UTF-8")
    runtime = pytest.importorskip("executorch.runtime")
    with pytest.raises(UnicodeDecodeError):
        runtime.Runtime.get().load_program(str(odd))


# item 6: golden files are read strictly, and - is standard input for reading as for writing

GOLDEN = ROOT / "tests" / "golden"


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
    _one_line(invoke("diff", str(golden), str(golden)), f"{golden}: not a valid golden file", needle)
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
    message = _one_line(invoke("diff", str(golden), str(golden)), "not a golden file", "once the file is removed")
    assert f"--golden {golden} --update" in message
    _one_line(invoke("check", str(tmp_path / "p.pte"), "--golden", str(golden), "--update"), "not a devplan golden")
    golden.unlink()
    assert invoke("check", str(tmp_path / "p.pte"), "--golden", str(golden), "--update").exit_code == 0


def test_a_golden_file_with_a_key_twice_is_refused(tmp_path):
    golden = tmp_path / "twice.golden.json"
    text = (GOLDEN / "two_io_cuda.golden.json").read_text()
    golden.write_text(text.replace('"schema_version": 1', '"schema_version": 1, "schema_version": 1'))
    _one_line(invoke("diff", str(golden), str(golden)), str(golden), "schema_version", "twice")


def test_golden_dash_reads_standard_input_as_update_dash_writes_standard_output(tmp_path):
    import json

    from tests.compile.test_cli import devplan as devplan_cli

    program = tmp_path / "m.pte"
    assert invoke("compile", str(MLP), "-o", str(program)).exit_code == 0
    written = subprocess_check(devplan_cli, ["check", str(program), "--golden", "-", "--update"], "")
    golden = written.stdout  # the golden file alone: the report goes to stderr
    assert written.returncode == 0 and json.loads(golden)["document"] == "devplan-golden", written.stderr
    assert "ok" in written.stderr
    checked = subprocess_check(devplan_cli, ["check", str(program), "--golden", "-"], golden)
    assert checked.returncode == 0, checked.stderr
    drifted = json.loads(golden)
    drifted["methods"][0]["buffers"][0]["size"] -= 16
    failed = subprocess_check(devplan_cli, ["check", str(program), "--golden", "-"], json.dumps(drifted))
    assert failed.returncode == 1 and "size" in failed.stdout
    both = subprocess_check(devplan_cli, ["check", "-", "--golden", "-"], golden)
    assert both.returncode == 2 and "standard input can be read once" in both.stderr
    from_stdin = subprocess_check(devplan_cli, ["diff", "-", str(program)], golden)
    assert from_stdin.returncode == 0, from_stdin.stderr


def subprocess_check(cli, args: list[str], stdin: str):
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "devplan", *args], input=stdin, capture_output=True, text=True, timeout=120
    )


# item 3e: an XNNPACK weight in the .ptd holds at least the bytes its payload's graph reads


@pytest.mark.parametrize("cut", ["short", "empty"])
def test_an_xnnpack_weight_cut_short_in_the_ptd_is_refused(cut, tmp_path):
    """ExecuTorch's XNNPACK backend read past such a weight (all NaN or zeros under --executorch)."""
    pytest.importorskip("executorch.backends.xnnpack")
    import devplan
    from devplan.pte import read_pte
    from devplan.pte.ptd import ptd_image, read_ptd
    from tests.compile.test_external_constants import _block

    ep, _ = _block()
    pte, ptd = tmp_path / "x.pte", tmp_path / "x.ptd"
    devplan.compile(ep, pte, backends=["xnnpack"], external_constants=ptd)
    data = read_ptd(ptd)
    entries = list(data.entries.values())
    victim = max(entries, key=lambda entry: len(data.segments[entry.segment]))  # the 8x8 weight: 256 bytes
    segments = [bytes(segment) for segment in data.segments]
    segments[victim.segment] = segments[victim.segment][:-4] if cut == "short" else b""
    damaged = tmp_path / "cut.ptd"
    damaged.write_bytes(bytes(ptd_image(entries, segments)))
    held = len(segments[victim.segment])
    with pytest.raises(
        DevplanError,
        match=rf"^{damaged}: key {victim.key!r} holds {held} bytes but method forward: "
        rf"delegate 0 \(XnnpackBackend\) reads 256",
    ):
        read_pte(pte, data=damaged)
    for command in ("check", "run"):
        _one_line(
            invoke(command, str(pte), "--data", str(damaged), *(["--executorch"] if command == "run" else [])),
            str(damaged),
            victim.key,
            "reads 256",
        )
    read_pte(pte, data=ptd)  # the whole .ptd still reads


def test_an_xnnpack_weight_cut_short_in_the_program_is_refused(tmp_path):
    pytest.importorskip("executorch.backends.xnnpack")
    import devplan
    from devplan.pte import read_pte
    from devplan.pte.writer import dumps_pte
    from tests.compile.test_external_constants import _block

    pte = read_pte(devplan.compile(_block()[0], backends=["xnnpack"]).data)
    named = max(pte.program.namedData, key=lambda entry: len(pte.segments[entry.segmentIndex]))
    segments = [bytes(segment) for segment in pte.segments]
    segments[named.segmentIndex] = segments[named.segmentIndex][:-8]
    cut = tmp_path / "cut.pte"
    cut.write_bytes(dumps_pte(pte.program, segments))
    _one_line(invoke("inspect", str(cut)), str(cut), f"named data {named.key.decode()!r} holds 248 bytes", "reads 256")


# item 4: an archive costs what it holds, not what its directory claims


def _archive_refusal(path: Path) -> str:
    from devplan.gate.archive import check_archive

    with pytest.raises(DevplanError) as refused:
        check_archive(path)
    message = str(refused.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    return message


def test_archive_members_sharing_their_bytes_are_refused(tmp_path):
    """Forty members pointing at one stored 24 MB entry compiled to a 1.23 GB peak."""
    import zipfile

    from tests.gate.test_hostile_archives import build, member, patch_member

    path = build(tmp_path / "shared.pt2")
    first, second = member("weights/weight_0"), member("weights/weight_1")
    with zipfile.ZipFile(path) as archive:
        target = archive.getinfo(first)
    sizes = target.compress_size.to_bytes(4, "little")
    patch_member(path, second, {}, {42: target.header_offset.to_bytes(4, "little"), 20: sizes, 24: sizes})
    assert "weight_1" in (message := _archive_refusal(path)) and "overlaps" in message and "weight_0" in message


def test_an_archive_member_claiming_more_than_the_archive_holds_is_refused(tmp_path):
    """A sample-inputs member declaring 3 GiB (stored) while holding 2 KB ended in exit 3 (EOFError)."""
    from tests.gate.test_hostile_archives import build, member, patch_member

    path = build(tmp_path / "claims.pt2")
    claim = (3 << 30).to_bytes(4, "little")
    patch_member(path, member("sample_inputs/model.pt"), {18: claim, 22: claim}, {20: claim, 24: claim})
    message = _archive_refusal(path)
    assert "sample_inputs/model.pt" in message and "3221225472" in message


def test_a_tensor_of_more_dimensions_than_executorch_holds_is_refused_before_loading(tmp_path):
    """ExecuTorch's runtime holds tensors of up to 16 dimensions (kTensorDimensionLimit); one
    of 2 million sizes took 151 s and 2.1 GB before anything said so."""
    import time

    from tests.gate.test_hostile_archives import build, edit_json, set_sizes, weight_meta

    wide = build(tmp_path / "wide.pt2", weight_meta(set_sizes([1] * 200_000)))
    started = time.monotonic()
    assert "layers.0.weight" in (message := _archive_refusal(wide)) and "200000 dimensions" in message
    assert time.monotonic() - started < 10
    seventeen = build(
        tmp_path / "seventeen.pt2",
        edit_json(
            "models/model.json",
            lambda doc: doc["graph_module"]["graph"]["tensor_values"]["x"].update(
                sizes=[{"as_int": 1}] * 17, strides=[{"as_int": 1}] * 17
            ),
        ),
    )
    assert "17 dimensions" in _archive_refusal(seventeen)


def test_a_member_whose_local_extra_field_moves_its_bytes_past_the_end_is_refused(tmp_path):
    """The central directory's sizes fit, but the local header's extra length (64 KB) moves
    where zipfile and torch's reader find the member's bytes: EOFError, exit 3, before."""
    from tests.gate.test_hostile_archives import build, member, patch_member

    path = build(tmp_path / "extra.pt2")
    patch_member(path, member("sample_inputs/model.pt"), {28: (0xFFFF).to_bytes(2, "little")}, {})
    message = _archive_refusal(path)
    assert "sample_inputs/model.pt" in message and "extra field" in message and "past the archive's end" in message


def _sample_inputs_declaring(data: bytes, size: int) -> bytes:
    """The torch.save zip `data` with its largest record declaring `size` bytes (stored) in
    its local header and directory entry, holding what it held."""
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(data)) as inner:
        infos = inner.infolist()
        entry, target = inner.start_dir, max(infos, key=lambda info: info.file_size)
    for info in infos[: infos.index(target)]:
        entry += 46 + len(info.orig_filename.encode()) + len(info.extra) + len(info.comment)
    patched, claim = bytearray(data), size.to_bytes(4, "little")
    for at in (target.header_offset + 18, target.header_offset + 22, entry + 20, entry + 24):
        patched[at : at + 4] = claim
    return bytes(patched)


def test_a_record_inside_the_sample_inputs_claiming_3_gib_is_refused_by_name(tmp_path):
    """The sample inputs are a zip of their own: a record declaring 3 GiB while holding 8 KB was
    refused as 'not plain tensors, which loading would unpickle', which it is not."""
    from tests.gate.test_hostile_archives import build, replaced, sample_members

    inputs = next(data for info, data in sample_members() if info.filename.endswith("sample_inputs/model.pt"))
    path = build(tmp_path / "inner.pt2", replaced("sample_inputs/model.pt", _sample_inputs_declaring(inputs, 3 << 30)))
    message = _archive_refusal(path)
    assert "sample_inputs/model.pt/archive/data/0" in message and "claims 3221225472" in message


def test_an_archive_member_claiming_3_gib_in_its_zip64_fields_is_refused(tmp_path):
    """The same claim made where a zip of more than 4 GiB makes it, in zip64 extra fields of
    the local header and the directory entry (which zipfile reads over the 32-bit ones)."""
    import struct
    import zipfile

    from tests.gate.test_hostile_archives import member, sample_members

    path, limit = tmp_path / "zip64.pt2", zipfile.ZIP64_LIMIT
    zipfile.ZIP64_LIMIT = 0  # every entry written with zip64 extra fields
    try:
        with zipfile.ZipFile(path, "w") as new:
            for info, data in sample_members():
                new.writestr(info.filename, data)
    finally:
        zipfile.ZIP64_LIMIT = limit
    with zipfile.ZipFile(path) as archive:
        size = archive.getinfo(member("sample_inputs/model.pt")).file_size
    data = bytearray(path.read_bytes())
    for length in (16, 24):  # the local header's zip64 field holds both sizes, the directory's the offset too
        at = data.find(struct.pack("<HHQQ", 1, length, size, size))
        data[at + 4 : at + 20] = struct.pack("<QQ", 3 << 30, 3 << 30)
    path.write_bytes(bytes(data))
    message = _archive_refusal(path)
    assert "sample_inputs/model.pt" in message and "claims 3221225472" in message


def _forward_damaged(tmp_path: Path, change) -> Path:
    """testbed's multi-method program with change(forward) applied to its forward method,
    written; ExecuTorch's runtime refuses to load it, even to run batch5 (asserted here)."""
    import copy

    from devplan.pte import dumps_pte, read_pte
    from devplan.pte.reader import text
    from testbed.small_programs import multi_method

    pte = read_pte(multi_method())
    program = copy.deepcopy(pte.program)
    change(next(plan for plan in program.executionPlan if text(plan.name) == "forward"))
    damaged = tmp_path / "damaged.pte"
    damaged.write_bytes(dumps_pte(program, pte.segments))
    runtime = pytest.importorskip("executorch.runtime")
    with pytest.raises((RuntimeError, MemoryError), match="Failed to (load program|get size of planned buffer)|alloc"):
        runtime.Runtime.get().load_program(damaged.read_bytes()).load_method("batch5")
    return damaged


def test_a_negative_buffer_size_in_another_method_is_refused_as_executorch_refuses_the_program(tmp_path):
    """Found by the fuzz run's multi-method mode: one byte made forward's buffer sizes longer,
    reading a negative one; `run --method batch5` ran in devplan while ExecuTorch's runtime
    refused to load the program ("Failed to get size of planned buffer"), as it reads every
    method's planned buffers at load."""
    damaged = _forward_damaged(
        tmp_path, lambda forward: setattr(forward, "nonConstBufferSizes", [*forward.nonConstBufferSizes, -8])
    )
    _one_line(
        invoke("run", str(damaged), "--method", "batch5"),
        str(damaged),
        "method forward: buffer 2",
        "negative size (-8)",
    )


@pytest.mark.parametrize("command", [("inspect",), ("inspect", "--json"), ("check",)])
def test_a_negative_buffer_size_is_refused_by_every_reader_not_shown(tmp_path, command):
    """Left from the third round's fuzz: `inspect` printed a buffer of -8 bytes (and summed it
    into the planned total) where `run` refused the program; a size is never negative, so the
    decoded view refuses it for every command that reads the method."""
    damaged = _forward_damaged(
        tmp_path, lambda forward: setattr(forward, "nonConstBufferSizes", [*forward.nonConstBufferSizes, -8])
    )
    _one_line(invoke(*command, str(damaged)), str(damaged), "method forward: buffer 2", "negative size (-8)")


def _xnnpack_damaged(tmp_path: Path, damage) -> tuple[Path, Path]:
    """testbed's XNNPACK program and its .ptd, written after damage(program, payload's start)
    changes the program's bytes."""
    from devplan.pte import read_pte
    from testbed.small_programs import with_data_file

    pytest.importorskip("executorch.backends.xnnpack")
    program, data = with_data_file(backends=["xnnpack"])
    damaged = bytearray(program)
    damage(damaged, program.index(bytes(read_pte(program).delegate_payload(0, 0))))
    pte, ptd = tmp_path / "damaged.pte", tmp_path / "damaged.ptd"
    pte.write_bytes(bytes(damaged))
    ptd.write_bytes(data)
    return pte, ptd


def _refused_before_executorch_aborts(pte: Path, ptd: Path, needle: str) -> None:
    """`check` and `run --executorch` (a process of its own: ExecuTorch aborted it) refuse in one
    line naming the delegate."""
    from tests.compile.test_cli import assert_one_line_error, devplan

    _one_line(invoke("check", str(pte), "--data", str(ptd)), str(pte), "delegate 0 (XnnpackBackend)", needle)
    assert_one_line_error(devplan("run", pte, "--data", ptd, "--executorch"), "delegate 0 (XnnpackBackend)", needle)


def test_an_xnnpack_graph_devplan_finds_damaged_is_refused_before_executorch_aborts_on_it(tmp_path):
    """Found by the fuzz run's XNNPACK mode: the graph's root table claiming 24 KB of an 888-byte
    graph and a key with a byte that is not UTF-8 passed `check`, and `run --executorch` died
    (SIGABRT, exit 134, no message): ExecuTorch's XNNPACK compiler logs the bytes it reads, and
    its Python binding aborts on a log line that is not UTF-8."""
    import struct

    from devplan.pte.xnnpack import named_keys

    def damage(program: bytearray, payload: int) -> None:
        graph = payload + struct.unpack_from("<I", program, payload + 10)[0]
        key = named_keys(bytes(program[payload:]))[0].encode()
        root = graph + struct.unpack_from("<I", program, graph)[0]
        vtable = root - struct.unpack_from("<i", program, root)[0]
        struct.pack_into("<H", program, vtable + 2, 0x5F00)  # the root table's size: 24 KB
        program[program.index(key, graph) + 9] = 0x86

    _refused_before_executorch_aborts(*_xnnpack_damaged(tmp_path, damage), "the XNNPACK payload is damaged")


@pytest.mark.parametrize("at, needle", [(4, "b'\\xbbH00'"), (32 + 4, "identifier is b'\\xbbN01'")])
def test_an_xnnpack_magic_that_is_not_utf8_is_refused_before_executorch_aborts_on_it(at, needle, tmp_path):
    """Found by the second and third fuzz runs: one byte of the payload's XH00 magic, or of its
    graph's XN01 identifier (the graph starts at byte 32), made 0xBB passed `check`, and
    ExecuTorch's XNNPACK backend logs those bytes as the graph's identifier and aborts the
    process on them."""

    def damage(program: bytearray, payload: int) -> None:
        program[payload + at] = 0xBB

    _refused_before_executorch_aborts(*_xnnpack_damaged(tmp_path, damage), needle)


@pytest.mark.parametrize(
    "field, value, needle",
    [("scalarType", 115, "tensor of scalar type 115"), ("sizes", None, "tensor without its sizes table")],
)
def test_a_tensor_executorch_refuses_in_another_method_is_refused_whichever_method_runs(field, value, needle, tmp_path):
    """Found by the fuzz runs' multi-method mode: forward's input given scalar type 115 (one
    byte), or no sizes table; `run --method batch5` ran in devplan, while ExecuTorch's runtime
    validates every method's tensors as it loads the program (program_validation.cpp) and
    refused it. (Sizes that are negative or overflow are refused for every method as the
    program is read.)"""
    from devplan.pte.fb.KernelTypes import KernelTypes

    def change(forward):
        setattr(next(value.val for value in forward.values if value.valType == KernelTypes.Tensor), field, value)

    damaged = _forward_damaged(tmp_path, change)
    _one_line(invoke("run", str(damaged), "--method", "batch5"), str(damaged), "method forward: value ", needle)


def test_a_huge_buffer_in_another_method_counts_against_max_memory(tmp_path):
    """Found by the second fuzz run: one byte made forward's buffer 1 claim 266 TB; `run --method
    batch5` ran in devplan, while ExecuTorch's runtime allocates every method's planned buffers
    as it loads the program and failed (std::bad_alloc)."""
    damaged = _forward_damaged(tmp_path, lambda forward: setattr(forward, "nonConstBufferSizes", [0, 1 << 48]))
    _one_line(
        invoke("run", str(damaged), "--method", "batch5"),
        str(damaged),
        "method forward: 281,474,976,710,656",
        "--max-memory",
    )


LONG = "c" * 300  # a path component over the 255 bytes a file name may take


@pytest.mark.parametrize(
    "args",
    [
        ["compile", f"{LONG}.pt2"],
        ["compile", str(MLP), "--method", f"p={LONG}.pt2"],
        ["compile", str(MLP), "-o", "out.pte", "--dump-dir", LONG],
        ["diff", f"{LONG}.pte", "PROGRAM"],
        ["check", "PROGRAM", "--golden", f"{LONG}.json"],
    ],
    ids=["compile", "method", "dump-dir", "diff", "golden"],
)
def test_a_name_too_long_to_look_up_is_one_line(args, tmp_path, monkeypatch):
    """Path.exists raises on a name the system cannot look up (ENAMETOOLONG): each of these was
    an internal error (exit 3); inspect, run and --data already said so in one line."""
    import devplan

    monkeypatch.chdir(tmp_path)
    devplan.compile(MLP, "program.pte")
    _one_line(invoke(*[arg.replace("PROGRAM", "program.pte") for arg in args]), LONG, "cannot look it up")


def test_a_model_whose_file_name_is_not_utf8_compiles(tmp_path):
    """A Linux file name may hold any bytes: torch's archive reader takes a name as UTF-8 text,
    and refused such a model as "cannot load the .pt2 archive ('str' object has no attribute
    'tell')"; it compiles to a program that runs as the same model under a plain name does."""
    import os
    import shutil

    import devplan

    odd = os.fsdecode(bytes(tmp_path) + b"/mlp-\xff.pt2")
    shutil.copyfile(MLP, odd)
    assert invoke("compile", odd, "-o", str(tmp_path / "odd.pte")).exit_code == 0
    assert (tmp_path / "odd.pte").read_bytes() == devplan.compile(MLP).data


def test_the_words_of_a_few_refusals(tmp_path):
    """From a hostile run over the options: a .ptd given as the program is named as one (it was
    "damaged or not a .pte"), a --method of no file is refused as NAME=VALUE with a --method
    example (it named the current folder, or gave a --constant-method example), and sizes take
    the TiB that --max-memory's help implies."""
    import devplan
    from devplan.units import size_bytes

    devplan.compile(MLP, tmp_path / "p.pte", external_constants=tmp_path / "p.ptd")
    _one_line(invoke("inspect", str(tmp_path / "p.ptd")), "p.ptd: not an ET12 program but a .ptd data file", "--data")
    for given in ("x=", "=mlp.pt2"):
        _one_line(
            invoke("compile", str(MLP), "-o", str(tmp_path / "q.pte"), "--method", given),
            f"--method {given}: write it as NAME=VALUE, e.g. --method decode=decode.pt2",
        )
    assert (size_bytes("1TiB"), size_bytes("2 TB")) == (2**40, 2 * 10**12)
