"""Programs of several methods: more exports compiled into one program (`methods=`,
`--method NAME=FILE.pt2`), constant methods (`constant_methods=`, `--constant-method`,
`--metadata`) written as ExecuTorch writes them, and ops of kernel libraries outside torch's
namespaces (ExecuTorch's LLM custom ops), each checked by running the program."""

from __future__ import annotations

import json
import re

import pytest
import torch
from typer.testing import CliRunner

import devplan
from devplan.cli import app
from devplan.errors import DevplanError
from devplan.runtime import run
from testbed.cli import devplan as devplan_cli
from testbed.models import eager_outputs, run_executorch

runner = CliRunner()


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x).relu()


def _export(batch: int, module: torch.nn.Module | None = None):
    torch.manual_seed(0)
    module = module or Block().eval()
    return torch.export.export(module, (torch.randn(batch, 8),)), module


@pytest.mark.parametrize(
    "value",
    [64, -3, 1.5, True, False, "llama", [128001, 128009], [0.5, 2.0], []],
    ids=["int", "negative", "float", "true", "false", "string", "int_list", "float_list", "empty"],
)
def test_constant_method_returns_its_value_on_both_runtimes(value):
    ep, _ = _export(2)
    data = devplan.compile(ep, constant_methods={"meta": value}).data
    expected = value if isinstance(value, list) else [value]
    assert run(data, [], method="meta")[0] == expected
    runtime = pytest.importorskip("executorch.runtime")
    got = runtime.Runtime.get().load_program(data).load_method("meta").execute([])
    assert list(got) == pytest.approx(expected)


def test_constant_methods_match_executorchs_values_and_order():
    """The same names, order, value kinds and pytree specs as ExecuTorch's to_edge(constant_methods=)."""
    edge = pytest.importorskip("executorch.exir")
    from devplan import inspect

    metadata = {"get_max_seq_len": 128, "use_kv_cache": True, "get_eos_ids": [2, 3], "name": "x", "scale": 0.5}
    ep, _ = _export(2)
    ours = inspect(devplan.compile(ep, constant_methods=metadata).data)
    theirs = inspect(edge.to_edge(ep, constant_methods=metadata).to_executorch().buffer)
    pick = lambda doc: [(m["name"], m["values"], m["outputs"], m["counts"]) for m in doc["methods"][1:]]  # noqa: E731
    assert pick(ours) == pick(theirs)


@pytest.mark.parametrize(
    "value",
    [[[1]], {"a": 1}, None, 1 << 70, [1, "a"], ["a", "b"], [1, 2.0]],
    ids=["nested", "dict", "null", "huge", "mixed", "strings", "int_and_float"],
)
def test_constant_method_of_another_type_is_refused(value):
    ep, _ = _export(2)
    with pytest.raises(DevplanError, match="constant method meta: .* is not an int, float, bool, string or a list"):
        devplan.compile(ep, constant_methods={"meta": value})


def test_method_names_are_checked():
    ep, _ = _export(2)
    with pytest.raises(DevplanError, match="the model itself is forward"):
        devplan.compile(ep, constant_methods={"forward": 1})
    with pytest.raises(DevplanError, match="given both as a program and as a constant method"):
        devplan.compile(ep, methods={"m": ep}, constant_methods={"m": 1})
    with pytest.raises(DevplanError, match="use a name of letters, digits and _"):
        devplan.compile(ep, methods={"two words": ep})


def test_methods_share_weights_and_each_runs(tmp_path):
    two, module = _export(2)
    five, _ = _export(5, module)
    alone = devplan.compile(two)
    both = devplan.compile(two, methods={"batch5": five})
    assert [m["name"] for m in both.summary()["methods"]] == ["forward", "batch5"]
    assert both.constant_bytes == alone.constant_bytes  # the one Linear's weights, stored once
    for name, ep in (("forward", two), ("batch5", five)):
        args = tuple(p for p in ep.example_inputs[0])
        (want,) = eager_outputs(module, args)
        torch.testing.assert_close(run(both.data, list(args), method=name)[0], want)
    (want,) = eager_outputs(module, tuple(two.example_inputs[0]))
    torch.testing.assert_close(run_executorch(both.data, tuple(two.example_inputs[0]))[0], want)


def test_cli_methods_constant_methods_and_metadata(tmp_path):
    two, module = _export(2)
    five, _ = _export(5, module)
    torch.export.save(two, tmp_path / "two.pt2")
    torch.export.save(five, tmp_path / "five.pt2")
    (tmp_path / "meta.json").write_text(json.dumps({"get_max_seq_len": 64, "use_kv_cache": False}))
    out = tmp_path / "both.pte"
    result = runner.invoke(
        app,
        [
            "compile",
            str(tmp_path / "two.pt2"),
            "-o",
            str(out),
            "--method",
            f"batch5={tmp_path / 'five.pt2'}",
            "--metadata",
            str(tmp_path / "meta.json"),
            "--constant-method",
            "use_kv_cache=true",
            "--constant-method",
            "get_eos_ids=[2,3]",
            "--constant-method",
            "name=llama",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "constant methods: get_max_seq_len, use_kv_cache, get_eos_ids, name" in result.output
    data = out.read_bytes()
    assert run(data, [], method="use_kv_cache")[0] == [True]  # --constant-method wins over --metadata
    assert run(data, [], method="get_eos_ids")[0] == [2, 3] and run(data, [], method="name")[0] == ["llama"]
    shown = runner.invoke(app, ["inspect", str(out), "--json"])
    assert [m["name"] for m in json.loads(shown.output)["methods"]] == [
        "forward",
        "batch5",
        "get_max_seq_len",
        "use_kv_cache",
        "get_eos_ids",
        "name",
    ]
    golden = tmp_path / "golden.json"
    assert runner.invoke(app, ["check", str(out), "--golden", str(golden), "--update"]).exit_code == 0
    assert [m["name"] for m in json.loads(golden.read_text())["methods"]][:2] == ["forward", "batch5"]
    assert runner.invoke(app, ["check", str(out), "--golden", str(golden)]).exit_code == 0
    single = tmp_path / "single.pte"
    assert runner.invoke(app, ["compile", str(tmp_path / "two.pt2"), "-o", str(single)]).exit_code == 0
    compared = runner.invoke(app, ["diff", str(single), str(out)])
    assert all(f"method {name} added" in compared.output for name in ("batch5", "get_max_seq_len", "name"))


def test_the_runners_keys_are_stored_as_the_types_it_reads(tmp_path):
    """ExecuTorch's TextLLMRunner aborts on a string 'True' where it reads a bool, or a double
    where it reads an int: the names it reads are made its types; other names stay as given."""
    torch.export.save(_export(2)[0], tmp_path / "m.pt2")
    (tmp_path / "llm.json").write_text(
        json.dumps({"get_max_seq_len": "128", "use_sdpa_with_kv_cache": 0, "get_eos_ids": 2})
    )
    result = devplan_cli(
        "compile",
        "m.pt2",
        "-o",
        "m.pte",
        "--metadata",
        "llm.json",
        "--constant-method",
        "use_kv_cache=True",
        "--constant-method",
        "enable_dynamic_shape=False",
        "--constant-method",
        "note=True",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    doc = devplan.inspect(tmp_path / "m.pte")
    found = {m["name"]: (m["returns"], m["values"]) for m in doc["methods"] if "returns" in m}
    assert found == {
        "get_max_seq_len": ([128], {"int": 1}),
        "use_sdpa_with_kv_cache": ([False], {"bool": 1}),
        "get_eos_ids": ([2], {"int": 1}),
        "use_kv_cache": ([True], {"bool": 1}),
        "enable_dynamic_shape": ([False], {"bool": 1}),
        "note": (["True"], {"string": 1}),
    }
    typed = devplan.compile(_export(2)[0], constant_methods={"get_n_layers": "2", "use_kv_cache": 1})
    assert run(typed.data, [], method="get_n_layers")[0] == [2] and run(typed.data, [], method="use_kv_cache")[0] == [
        True
    ]
    with pytest.raises(DevplanError, match=r"^constant method get_bos_id=True is not an int"):
        devplan.compile(_export(2)[0], constant_methods={"get_bos_id": True})


@pytest.mark.parametrize(
    "args, message",
    [
        (["--constant-method", "novalue"], "--constant-method novalue: write it as NAME=VALUE"),
        (["--constant-method", "x=[[1]]"], r"constant method x: \[\[1\]\] is not an int"),
        (["--method", "m=missing.pt2"], "missing.pt2: no such file"),
        (["--metadata", "list.json"], "--metadata .*list.json: holds a list; write an object of NAME: VALUE"),
        (["--metadata", "bad.json"], "--metadata .*bad.json: not JSON"),
        (
            ["--constant-method", "get_max_seq_len=128.0"],
            "constant method get_max_seq_len=128.0 is not an int, the type "
            "ExecuTorch's LLM runner reads get_max_seq_len as",
        ),
        (["--constant-method", "use_kv_cache=yes"], "constant method use_kv_cache='yes' is not a bool"),
        (
            ["--constant-method", "get_eos_ids=[1,true]"],
            r"constant method get_eos_ids=\[1, True\] is not a list of ints",
        ),
        (["--metadata", "typed.json"], "--metadata .*typed.json: get_vocab_size='many' is not an int"),
    ],
)
def test_cli_refusals_are_one_line(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    torch.export.save(_export(2)[0], tmp_path / "m.pt2")
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "bad.json").write_text("{nope")
    (tmp_path / "typed.json").write_text(json.dumps({"use_kv_cache": "True", "get_vocab_size": "many"}))
    result = devplan_cli("compile", "m.pt2", "-o", "m.pte", *args, cwd=tmp_path)
    assert result.returncode == 2 and not result.stdout
    assert re.search(message, result.stderr) and result.stderr.count("\n") == 1, result.stderr


# A kernel library of the test's own, as ExecuTorch's LLM custom ops are made: a functional
# op that writes its state argument in place, and its .out twin.
_LIB = torch.library.Library("devplan_test", "DEF")
_LIB.define("accumulate(Tensor x, Tensor(a!) state) -> Tensor")
_LIB.define("accumulate.out(Tensor x, Tensor(a!) state, *, Tensor(b!) out) -> Tensor(b!)")
_LIB.define("no_out(Tensor x) -> Tensor")


def _accumulate(x, state):
    state.add_(x)
    return state.sum(0, keepdim=True)


def _accumulate_out(x, state, *, out):
    return out.copy_(_accumulate(x, state))


_LIB.impl("accumulate", _accumulate, "CompositeExplicitAutograd")
_LIB.impl("accumulate.out", _accumulate_out, "CompositeExplicitAutograd")
_LIB.impl("accumulate", lambda x, state: state.new_empty((1, *state.shape[1:])), "Meta")
_LIB.impl("no_out", lambda x: x * 2, "CompositeExplicitAutograd")
_LIB.impl("no_out", lambda x: torch.empty_like(x), "Meta")


class Accumulator(torch.nn.Module):
    """State a custom op updates in place, read after the update, as a KV cache is."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.zeros(4, 8))

    def forward(self, x):
        total = torch.ops.devplan_test.accumulate(x * 2, self.state)
        return total + self.state.mean()


@pytest.mark.parametrize("functional", [False, True], ids=["as_exported", "auto_functionalized"])
def test_custom_op_writing_state_in_place_runs_across_calls(functional):
    """Export keeps the op writing its buffer; torch's functionalization (ExecuTorch's pipeline
    runs it) wraps it in auto_functionalized_v2. Either way the kernel writes the state."""
    module = Accumulator()
    x = torch.randn(4, 8)
    ep = torch.export.export(Accumulator(), (x,))
    if functional:
        ep = ep.run_decompositions({})
        assert any("auto_functionalized" in str(n.target) for n in ep.graph.nodes)
    result = devplan.compile(ep)
    kernels = [k.op for k in result.planned.method.kernels]
    assert "devplan_test::accumulate.out" in kernels and "aten::copy_" not in kernels  # written in place, no copy back
    from devplan.pte import read_pte
    from devplan.runtime import LoadedMethod

    method = LoadedMethod(read_pte(result.data))
    for _ in range(3):  # the state carries over between runs, as the KV cache does
        torch.testing.assert_close(method.execute([x])[0], module(x))


def test_custom_op_without_out_variant_is_refused_by_name():
    class Doubler(torch.nn.Module):
        def forward(self, x):
            return torch.ops.devplan_test.no_out(x) + 1

    ep = torch.export.export(Doubler(), (torch.randn(2, 3),))
    with pytest.raises(
        DevplanError, match=r"custom op devplan_test.no_out.default has no out variant.*register no_out.out"
    ):
        devplan.compile(ep)
