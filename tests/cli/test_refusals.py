"""What a command refuses before any work, in one line naming the option or file and what to do:
a --partitioner that is no partitioner class, JSON options nested deeper than devplan reads,
methods of one name, names the system cannot look up, the words of a few refusals, and saved
inputs `run` cannot take (sparse, meta); a file name that is not UTF-8 is no refusal."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from devplan.errors import DevplanError
from tests.inspection.runner import invoke, one_line
from tests.pte.test_method_refusals import _export_add

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "samples" / "mlp.pt2"


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
    one_line(invoke("compile", str(MLP), "-o", str(out), "--partitioner", spec), spec, needle)
    assert not out.exists()


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
    one_line(result, where, "nested deeper than")


def test_json_nesting_is_measured_outside_strings():
    from devplan.jsontext import loads

    inside = "[" * 100 + '\\" {'  # brackets, an escaped quote and a brace, all inside one string
    assert loads('{"a": "' + inside + '"}', "x") == {"a": "[" * 100 + '" {'}
    with pytest.raises(DevplanError, match=r"^x: JSON nested deeper than \d+ levels"):
        loads(_DEEP, "x")


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
    one_line(invoke("compile", "X.pt2", "-o", "out.pte", *args), needle)
    assert not (tmp_path / "out.pte").exists()


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
    one_line(invoke(*[arg.replace("PROGRAM", "program.pte") for arg in args]), LONG, "cannot look it up")


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
    one_line(invoke("inspect", str(tmp_path / "p.ptd")), "p.ptd: not an ET12 program but a .ptd data file", "--data")
    for given in ("x=", "=mlp.pt2"):
        one_line(
            invoke("compile", str(MLP), "-o", str(tmp_path / "q.pte"), "--method", given),
            f"--method {given}: write it as NAME=VALUE, e.g. --method decode=decode.pt2",
        )
    assert (size_bytes("1TiB"), size_bytes("2 TB")) == (2**40, 2 * 10**12)


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
