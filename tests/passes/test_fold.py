"""Constant folding: work that depends only on weights is done at compile time."""

import copy
import itertools

import pytest
import torch

import devplan
from testbed.models import eager_outputs, run_executorch


class TransposedWeight(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(64, 32))
        self.scale = torch.nn.Parameter(torch.randn(64))

    def forward(self, x):
        return x @ (self.weight * 2.0).t() + self.scale


def compile_it(module, args):
    module.eval().requires_grad_(False)
    return devplan.compile(torch.export.export(module, args, strict=False))


def test_weight_transform_is_stored_not_planned():
    module, args = TransposedWeight(), (torch.randn(4, 32),)
    result = compile_it(module, args)
    method = result.planned.method
    ops = [k.op for k in method.kernels]
    assert "aten::permute_copy.out" not in ops and "aten::t_copy.out" not in ops
    assert "aten::mul.Scalar_out" not in ops
    weight_bytes = 64 * 32 * 4 + 64 * 4
    assert result.constant_bytes <= weight_bytes
    # the activation buffer holds only input, matmul result and output, never a 64x32 weight copy
    assert result.planned.buffers[0].size < 64 * 32 * 4
    got = run_executorch(result.data, args)[0][0]
    torch.testing.assert_close(got, eager_outputs(module, args)[0][0], rtol=1e-4, atol=1e-5)


class SharedWeight(torch.nn.Module):
    """The weight is used both as is and transposed: folding the transpose would store it twice."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(16, 16))

    def forward(self, x):
        return x @ self.weight.t() + x @ self.weight


def test_folding_never_grows_constant_bytes():
    module, args = SharedWeight(), (torch.randn(2, 16),)
    result = compile_it(module, args)
    assert result.constant_bytes <= 16 * 16 * 4
    got = run_executorch(result.data, args)[0][0]
    torch.testing.assert_close(got, eager_outputs(module, args)[0][0], rtol=1e-4, atol=1e-5)


class TwinWeights(torch.nn.Module):
    """Two weights with equal data (per-channel zero points across layers are such twins)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Parameter(torch.ones(8, 8))
        self.b = torch.nn.Parameter(torch.ones(8, 8))

    def forward(self, x):
        return x @ self.a + x @ self.b


def test_constant_bytes_are_what_the_program_stores():
    """Equal constants are stored once; the count is inspect's, alignment included."""
    result = compile_it(TwinWeights(), (torch.randn(2, 8),))
    assert result.constant_bytes == devplan.inspect(result.data)["file"]["constant_bytes"] == 8 * 8 * 4


# ------------------------------------------------------- constants whose inputs the run reads too


class SharedProjection(torch.nn.Module):
    """DeBERTa's relative positions in small: one projection applied to the input and to a
    normalized position table. The table's projection depends on weights only, but the
    weights are read at run time too (issue 28)."""

    def __init__(self):
        super().__init__()
        self.proj, self.norm = torch.nn.Linear(32, 32), torch.nn.LayerNorm(32)
        self.rel = torch.nn.Parameter(torch.randn(64, 32))

    def forward(self, x):
        return self.proj(x) @ self.proj(self.norm(self.rel)).T


def _against_executorch_const_prop(ep, result):
    """devplan's arena no larger than ExecuTorch's with constant propagation, nor its arena
    and constants together; returns both programs' (arena, constant bytes)."""
    from testbed.executorch import executorch_pte, planned_bytes

    theirs = executorch_pte(ep, const_prop=True)
    ours_arena, theirs_arena = planned_bytes(result.data), planned_bytes(theirs)
    theirs_constants = devplan.inspect(theirs)["file"]["constant_bytes"]
    assert ours_arena <= theirs_arena, (ours_arena, theirs_arena)
    assert ours_arena + result.constant_bytes <= theirs_arena + theirs_constants, (
        ours_arena,
        result.constant_bytes,
        theirs_arena,
        theirs_constants,
    )
    return (ours_arena, result.constant_bytes), (theirs_arena, theirs_constants)


def _matches_eager(module, args, kwargs, result):
    from torch.utils import _pytree as pytree

    flat = pytree.tree_leaves((args, kwargs))
    with torch.no_grad():
        want = [t for t in pytree.tree_leaves(module(*args, **kwargs)) if isinstance(t, torch.Tensor)]
    for runtime, got in (
        ("devplan", devplan.run(result.data, flat)[0]),
        ("executorch", run_executorch(result.data, flat)[0]),
    ):
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5, msg=lambda m: f"{runtime}: {m}")


def test_a_constant_subgraph_of_shared_weights_is_folded_when_the_arena_gains():
    torch.manual_seed(0)
    module, args = SharedProjection(), (torch.randn(1, 8, 32),)
    module.eval().requires_grad_(False)
    ep = torch.export.export(module, args, strict=False)
    result = devplan.compile(ep)
    folding = result.summary()["folding"]
    assert folding["shared_inputs"] == 1 and folding["run_bytes_removed"] > max(folding["constant_bytes_added"], 0)
    assert "aten::native_layer_norm.out" not in {k.op for k in result.planned.method.kernels}
    _against_executorch_const_prop(ep, result)
    _matches_eager(module, args, {}, result)


# benchmarks/fold_sweep.py's grid: model, hidden size, tokens, batch (2 pads its second), position
# buckets; DeBERTa v1 at its corners
FOLD_GRID = [
    *itertools.product(["deberta_v2"], (32, 128), (8, 64), (1, 2), (16, 64)),
    ("deberta", 32, 8, 2, 16),
    ("deberta", 128, 64, 2, 64),
]


FAST_SIZE = ("deberta_v2", 32, 8, 2, 64)
# the suite holds the grid's corners; the rest of it, to release (benchmarks/fold_sweep.py prints it all)
SUITE_SIZES = {FAST_SIZE, ("deberta_v2", 128, 64, 2, 64), ("deberta", 32, 8, 2, 16), ("deberta", 128, 64, 2, 64)}


@pytest.mark.parametrize(
    "model,hidden,tokens,batch,buckets",
    [
        pytest.param(
            *size,
            marks=()
            if size == FAST_SIZE
            else pytest.mark.sweep
            if size in SUITE_SIZES
            else (pytest.mark.sweep, pytest.mark.release),
        )
        for size in FOLD_GRID
    ],
    ids=["{}-h{}-t{}-b{}-k{}".format(*size) for size in FOLD_GRID],
)
def test_deberta_folding_holds_across_sizes(model, hidden, tokens, batch, buckets):
    """--fold auto on DeBERTa-v2 at every size of the sweep, and on DeBERTa: an arena no larger than ExecuTorch
    const-prop's (nor arena plus constants), arena plus constants no larger than not folding's,
    the same outputs as eager on both runtimes."""
    pytest.importorskip("transformers")
    from testbed.executorch import planned_bytes
    from testbed.hf_models import deberta, deberta_v2

    module, args, kwargs = (deberta if model == "deberta" else deberta_v2)(hidden, tokens, batch, buckets)
    ep = torch.export.export(module, args, kwargs, strict=False)
    export = lambda: copy.deepcopy(ep)  # noqa: E731  # compiling edits it
    result, unfolded = devplan.compile(export()), devplan.compile(export(), fold="none")
    _against_executorch_const_prop(export(), result)
    total = lambda r: planned_bytes(r.data) + r.constant_bytes  # noqa: E731
    assert total(result) <= total(unfolded), (total(result), total(unfolded))
    choices = result.summary()["folding"]["choices"]
    kept = [c for c in choices if c["chosen"]]
    assert len(kept) == 1 and kept[0]["arena"] == planned_bytes(result.data)
    assert kept[0]["constant_bytes"] == result.constant_bytes
    _matches_eager(module, args, kwargs, result)


_HUGE_FROM_SMALL = """
import sys, torch, devplan

class Huge(torch.nn.Module):
    '''A 32-byte weight whose constant-only subgraph makes 2 GiB before it is reduced: in one
    step, or (adds) in 2,000 steps of 1 MiB each; or (expands) 1,200 views of it 1 MiB each,
    which --fold all (auto plans it too) stores whole.'''
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(1, 8))

    def forward(self, x):
        if sys.argv[1] == "expand":
            big = self.w.expand(2 ** 26, 8).contiguous()
        elif sys.argv[1] == "adds":
            big = self.w.expand(2 ** 15, 8)
            for _ in range(2000):
                big = big + 1
        elif sys.argv[1] == "expands":
            big = x.expand(2 ** 15, 8)
            for _ in range(1200):
                big = big + self.w.expand(2 ** 15, 8)
        else:
            big = self.w.repeat(2 ** 26, 1)
        return x + big.sum(0)

module = Huge().eval().requires_grad_(False)
result = devplan.compile(torch.export.export(module, (torch.randn(8),), strict=False))
print(result.constant_bytes)
"""


@pytest.mark.parametrize(
    "how", [*(pytest.param(how, marks=pytest.mark.sweep) for how in ("expand", "expands")), "repeat", "adds"]
)
def test_constant_subgraph_too_large_to_fold_stays_a_run_time_op(how):
    """Folding checks each step's result size (its fake value) before evaluating it: a step
    larger than the constants it comes from is left to run time, and so is one that would
    take the results held so far, or stored, past twice the bytes the program stores or
    HELD_FLOOR (each of 2,000 steps was within its own bound, and together they held 2 GiB),
    so compiling a tiny export whose constants would make 2 GiB neither takes the time nor
    the memory."""
    from testbed.peak import run_measured

    done, peak = run_measured(["-c", _HUGE_FROM_SMALL, how], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) <= 64  # the weight, not a folded copy of anything
    assert peak is not None and peak < 2**30, peak


class Adds(torch.nn.Module):
    """A 4-byte weight expanded to 1 MiB, then 1 added 20 times: each step within its own bound."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(1))

    def forward(self, x):
        y = self.w.expand(2**18)
        for _ in range(20):
            y = y + 1
        return x + y


def test_the_step_past_the_pass_bound_is_named_and_left_to_run_time(caplog):
    """The first 16 adds hold 16 MiB (HELD_FLOOR, the program storing 4 bytes); the 17th
    would hold more, so it is left to run time with what is computed from it, and the log
    (`--debug` prints it) names it; the program still runs as eager."""
    torch.manual_seed(0)
    module, args = Adds().eval().requires_grad_(False), (torch.randn(2**18),)
    with caplog.at_level("INFO", logger="devplan.fold"):
        result = devplan.compile(torch.export.export(module, args, strict=False), fold="all")
    assert "fold: node add_16 runs at run time" in caplog.text and "more than 16.0 MiB" in caplog.text
    assert [k.op for k in result.planned.method.kernels].count("aten::add.Scalar_out") == 4  # add_16 to add_19
    _matches_eager(module, args, {}, result)


# ------------------------------------------------------------------------------- --fold


class RepeatedTable(torch.nn.Module):
    """DeBERTa's relative keys in small: a position table projected by the weight the input
    meets too, then repeated over the batch."""

    def __init__(self):
        super().__init__()
        self.proj, self.table = torch.nn.Linear(16, 16), torch.nn.Parameter(torch.randn(32, 16))

    def forward(self, x):
        keys = self.proj(self.table).unsqueeze(0).repeat(x.shape[0], 1, 1)
        return torch.bmm(self.proj(x), keys.transpose(1, 2))


class RepeatedWeight(torch.nn.Module):
    """A weight repeated to the input's rows: the repeat outweighs the weight it comes from."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(8, 16))

    def forward(self, x):
        return torch.relu(x) * self.weight.repeat(x.shape[0] // 8, 1)


@pytest.mark.parametrize("fold", ["auto", "local", "all", "none"])
def test_fold_policy_runs_as_eager(fold):
    torch.manual_seed(0)
    module, args = RepeatedTable().eval().requires_grad_(False), (torch.randn(4, 8, 16),)
    _matches_eager(module, args, {}, devplan.compile(torch.export.export(module, args, strict=False), fold=fold))


def test_fold_all_stores_what_local_leaves_to_run_time_and_none_folds_nothing():
    """--fold all stores the repeated weight (a smaller arena, a larger file), as ExecuTorch's
    const-prop does; local leaves the repeat to run time; none folds nothing; auto plans the
    three and keeps the least arena plus constants, saying so."""
    from testbed.executorch import planned_bytes

    torch.manual_seed(0)
    module, args = RepeatedWeight().eval().requires_grad_(False), (torch.randn(64, 16),)
    auto, local, every, none = (
        devplan.compile(torch.export.export(module, args, strict=False), fold=fold)
        for fold in ("auto", "local", "all", "none")
    )
    ops = lambda result: [k.op for k in result.planned.method.kernels]  # noqa: E731
    assert "aten::repeat.out" in ops(local) and "aten::repeat.out" not in ops(every)
    assert planned_bytes(every.data) < planned_bytes(local.data) and every.constant_bytes > local.constant_bytes
    assert none.summary()["folding"]["subgraphs"] == 0 and "aten::repeat.out" in ops(none)
    total = lambda result: planned_bytes(result.data) + result.constant_bytes  # noqa: E731
    assert total(auto) == min(total(r) for r in (local, every, none))
    choices = {c["policy"]: c for c in auto.summary()["folding"]["choices"]}
    assert set(choices) == {"local", "all"}  # local stores no more than it replaces here: none cannot beat it
    cost = lambda c: c["arena"] + c["constant_bytes"]  # noqa: E731
    assert [p for p, c in choices.items() if c["chosen"]] == [min(choices, key=lambda p: cost(choices[p]))]
    for policy, result in (("local", local), ("all", every)):
        assert (choices[policy]["arena"], choices[policy]["constant_bytes"]) == (
            planned_bytes(result.data),
            result.constant_bytes,
        )
    _matches_eager(module, args, {}, auto)


def test_an_unknown_fold_policy_is_refused_in_one_line():
    from devplan.errors import DevplanError

    with pytest.raises(DevplanError, match="--fold most: use one of: auto, local, all, none"):
        devplan.compile(
            torch.export.export(TransposedWeight().eval(), (torch.randn(4, 32),), strict=False), fold="most"
        )


def test_auto_keeps_a_policy_within_the_budget():
    """wav2vec2: not folding stores least (its weight-norm branch folded costs the file more than
    the arena saves) but plans the larger arena; under a budget between the two, auto keeps the
    folding that fits, and with a budget none fits it refuses as the local rule's plan would."""
    pytest.importorskip("transformers")
    from devplan.errors import BudgetExceeded
    from testbed.executorch import planned_bytes
    from testbed.hf_models import FAMILIES

    module, args, kwargs = FAMILIES["wav2vec2"]()
    ep = torch.export.export(module, args, kwargs, strict=False)
    export = lambda: copy.deepcopy(ep)  # noqa: E731  # compiling edits it
    free = {c["policy"]: c for c in devplan.compile(export()).summary()["folding"]["choices"]}
    assert free["none"]["chosen"] and free["local"]["arena"] < free["none"]["arena"]
    budget = (free["local"]["arena"] + free["none"]["arena"]) // 2
    fits = devplan.compile(export(), budgets={"1": budget})
    assert planned_bytes(fits.data) == free["local"]["arena"] <= budget
    assert [c["policy"] for c in fits.summary()["folding"]["choices"] if c["chosen"]] == ["local"]
    with pytest.raises(BudgetExceeded):
        devplan.compile(export(), budgets={"1": free["local"]["arena"] - 1024})
