"""Issue 36, items 3, 5, 6 and 7: the new surfaces (.ptd data files, multi-method programs,
constant methods, --metadata, --partitioner, golden files) refuse what ExecuTorch's runtime
refuses, or what devplan cannot answer soundly, in one line naming the file and what to do.
Each test builds its bad input itself."""
from __future__ import annotations

from pathlib import Path

import pytest

from devplan.errors import DevplanError
from tests.inspect.runner import invoke

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "samples" / "mlp.pt2"


def _one_line(result, *needles: str) -> str:
    """The one-line DevplanError an in-process command ended with, holding each needle."""
    assert isinstance(result.exception, DevplanError), (result.exception, result.output)
    message = str(result.exception)
    assert "\n" not in message and all(needle in message for needle in needles), message
    return message


# item 7: a partitioner is a class whose instances partition

@pytest.mark.parametrize("spec, needle", [
    ("sys:exit:{}", "sys.exit is not a class"),
    ("builtins:print", "builtins.print is not a class"),
    ("builtins:dict", "builtins.dict has no partition method"),
])
def test_a_partitioner_that_is_no_partitioner_class_is_refused_before_it_is_called(spec, needle, tmp_path, capsys):
    from devplan.passes.backends import Partitioner

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
    given = {"--metadata": [str(meta)], "--constant-method": [f"m={_DEEP}"],
             "--partitioner": ['tests.partitioners:AddsTo:{"a": ' + _DEEP + "}"]}[where]
    result = invoke("compile", str(MLP), "-o", str(tmp_path / "m.pte"), where, *given)
    _one_line(result, where, "nested deeper than")


def test_json_nesting_is_measured_outside_strings():
    from devplan.jsontext import loads

    assert loads('{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\\" {"}', "x") == {
        "a": "[" * 74 + '" {'}
    with pytest.raises(DevplanError, match=r"^x: JSON nested deeper than \d+ levels"):
        loads(_DEEP, "x")
