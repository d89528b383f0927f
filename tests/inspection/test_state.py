"""Mutable buffers (state: a KV cache, running statistics, a counter) are alive for the whole
method in every view that reads a program: inspect's tensors and peak, check's lower bound and
--max-ratio, and the golden file's lower_bound, which then equal what compile reports. The
format marks no tensor as state; the reader knows it by the program reading it before (or as)
it writes it, or by its initial data, in devplan's programs and ExecuTorch's alike."""

from __future__ import annotations

import copy
import json

import pytest
import torch

import devplan
from devplan.inspection.golden import golden_document
from testbed.cli import devplan as cli
from testbed.lowerings import executorch_lowered


class Accumulator(torch.nn.Module):
    """Adds to a registered buffer late in the method, then reads it: the state is first named
    after the largest activations are gone, but its bytes are kept from the run before."""

    def __init__(self, initial: float = 0.0) -> None:
        super().__init__()
        self.register_buffer("state", torch.full((256,), initial))

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        h = (y * 2).relu().reshape(4, 256).sum(0)
        self.state.add_(h)
        return self.state.sum()


def _export(initial: float = 0.0) -> torch.export.ExportedProgram:
    return torch.export.export(Accumulator(initial), (torch.ones(1024),))


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict:
    """name -> (.pte path, compile's lower bound of buffer 1 or None for ExecuTorch's)."""
    folder = tmp_path_factory.mktemp("state")
    found = {}
    for name, initial in (("zeros", 0.0), ("ones", 1.0)):  # ones: devplan stores the initial value
        result = devplan.compile(_export(initial), folder / f"{name}.pte")
        found[name] = (folder / f"{name}.pte", result.planned.buffers[0].lower_bound)
    (folder / "executorch.pte").write_bytes(executorch_lowered(_export()))
    found["executorch"] = (folder / "executorch.pte", None)
    return found


def _state_rows(doc: dict) -> list[dict]:
    return [t for t in doc["methods"][0]["tensors"] if t["role"] == "state"]


@pytest.mark.parametrize("name", ["zeros", "ones", "executorch"])
def test_inspect_names_the_buffer_state_alive_for_the_whole_method(programs, name):
    doc = devplan.inspect(programs[name][0])
    last = doc["methods"][0]["counts"]["instructions"] - 1
    (state,) = _state_rows(doc)
    assert state["shape"] == [256] and state["lifetime"] == state["held"] == [0, last]
    assert not state["source"].startswith("constant")
    # nothing else is taken for state: the activations keep their own lives
    assert all(t["role"] != "state" for t in doc["methods"][0]["tensors"] if t["value"] != state["value"])


@pytest.mark.parametrize("name", ["zeros", "executorch"])
def test_the_peak_holds_the_state_from_the_first_instruction(programs, name):
    doc = devplan.inspect(programs[name][0])
    (state,) = _state_rows(doc)
    (peak,) = doc["methods"][0]["peak"]
    assert state["value"] in {t["value"] for t in peak["tensors"]}
    assert {m["module"]: m["bytes"] for m in peak["modules"]}.get("(state)") == state["nbytes"]


@pytest.mark.parametrize("name", ["zeros", "ones"])
def test_check_and_golden_give_compiles_lower_bound(programs, name):
    path, bound = programs[name]
    (buffer,) = devplan.check(path)
    assert buffer.lower_bound == bound and buffer.ratio == 1.0
    (golden,) = golden_document(devplan.inspect(path))["methods"][0]["buffers"]
    assert golden["lower_bound"] == bound


# A kernel of the test's own that writes its state argument in place, as ExecuTorch's
# llama::update_cache writes the KV cache (a namespace apart from tests/compile/test_methods.py's,
# since a namespace is defined once per process).
_LIB = torch.library.Library("devplan_state_test", "DEF")
_LIB.define("accumulate(Tensor x, Tensor(a!) state) -> Tensor")
_LIB.define("accumulate.out(Tensor x, Tensor(a!) state, *, Tensor(b!) out) -> Tensor(b!)")


def _accumulate(x, state):
    state.add_(x)
    return state.sum(0, keepdim=True)


_LIB.impl("accumulate", _accumulate, "CompositeExplicitAutograd")
_LIB.impl("accumulate.out", lambda x, state, *, out: out.copy_(_accumulate(x, state)), "CompositeExplicitAutograd")
_LIB.impl("accumulate", lambda x, state: state.new_empty((1, *state.shape[1:])), "Meta")


class InPlace(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.zeros(4, 8))

    def forward(self, x):
        return torch.ops.devplan_state_test.accumulate(x * 2, self.state) + self.state.mean()


def test_state_a_custom_op_updates_in_place_is_state():
    """No instruction names the state as what it writes, and no copy_ follows."""
    result = devplan.compile(torch.export.export(InPlace(), (torch.randn(4, 8),)))
    doc = devplan.inspect(result.data)
    last = doc["methods"][0]["counts"]["instructions"] - 1
    (state,) = _state_rows(doc)
    assert state["shape"] == [4, 8] and state["lifetime"] == [0, last]
    assert devplan.check(result.data)[0].lower_bound == result.planned.buffers[0].lower_bound


def test_check_max_ratio_passes_devplans_plan_of_state(programs):
    run = cli("check", programs["zeros"][0], "--max-ratio", "1.05", "--json")
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads(run.stdout)["buffers"][0]["ratio"] == 1.0


def test_executorch_s_plan_of_state_is_measured_with_the_state_alive(programs):
    (buffer,) = devplan.check(programs["executorch"][0])
    (state,) = _state_rows(devplan.inspect(programs["executorch"][0]))
    assert buffer.lower_bound >= 1024 * 4 + state["nbytes"]  # the input with the state beside it


@pytest.mark.sweep
def test_check_max_ratio_passes_a_transformers_kv_cache_llama(tmp_path):
    """transformers' static-cache Llama (its ExecuTorch recipe): its caches are state, so
    check's bound is compile's and --max-ratio 1.05 passes devplan's optimal plan; ExecuTorch's
    program of the same export names the same caches."""
    from testbed.hf_models import static_cache_decoder

    module, steps = static_cache_decoder()
    with torch.no_grad():
        ep = torch.export.export(copy.deepcopy(module), (), steps[0], strict=True)
    result = devplan.compile(ep, tmp_path / "llama.pte")
    caches = result.planned.method.state  # the caches, and the recipe's counters of cached positions
    run = cli("check", tmp_path / "llama.pte", "--max-ratio", "1.05")
    assert run.returncode == 0, run.stdout + run.stderr
    (buffer,) = devplan.check(tmp_path / "llama.pte")
    assert buffer.lower_bound == result.planned.buffers[0].lower_bound
    ours = _state_rows(devplan.inspect(tmp_path / "llama.pte"))
    assert len(ours) == len(caches) and all(t["source"].startswith("buffer ") for t in ours)
    theirs = tmp_path / "executorch.pte"
    theirs.write_bytes(executorch_lowered(ep))
    assert len(_state_rows(devplan.inspect(theirs))) == len(caches)


class Split(torch.nn.Module):
    def forward(self, x):
        a, b, c = torch.split(x * 2, [4, 4, 8], dim=1)
        return a + b, c.relu()


def test_the_out_list_of_a_split_is_written_not_read_so_not_state():
    """split_with_sizes_copy names its results twice, as its out= list and as the list it
    returns (two list values of the same tensors): neither is a read, so nothing is state (a
    GRU's ExecuTorch program once checked with a lower bound above its buffer's size)."""
    data = executorch_lowered(torch.export.export(Split(), (torch.randn(2, 16),)))
    doc = devplan.inspect(data)
    assert not _state_rows(doc)
    (buffer,) = devplan.check(data)
    assert buffer.lower_bound <= buffer.size
