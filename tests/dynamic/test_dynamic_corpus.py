"""The compile-test corpus with a dynamic batch: each model is exported with dim 0 of its
batched inputs a `Dim` bounded by BOUND, devplan compiles it, ExecuTorch's runtime and
devplan's run the program at several batch sizes with outputs equal to eager PyTorch, and
devplan plans no more bytes than ExecuTorch's own lowering of the same dynamic export
(where that lowering runs at the bound at all).

Models whose batch torch.export cannot keep dynamic (it specializes the dim, or the model's
state fixes it) are skipped with torch's reason."""

from __future__ import annotations

import functools

import pytest
import torch
from torch.utils import _pytree as pytree

import devplan
from devplan.pte import read_pte
from devplan.runtime import LoadedMethod
from testbed.dynamic_corpus import BATCHES, BOUND, Batch, batched, exported
from testbed.executorch import executorch_pte
from testbed.models import CORPUS, run_executorch
from tests.tiers import tiered

TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}
# the fast tier's sample: a stateful model, convolutions, a gated MLP, nested inputs
FAST = ("activations", "conv_bn_relu", "gated_mlp", "multi_input_nested", "rolling_cache")


@functools.cache
def compiled(name: str) -> tuple[bytes, torch.nn.Module, tuple]:
    """devplan's program, with the module and example inputs it was exported from."""
    ep, module, args = exported(name)
    return devplan.compile(ep).data, module, args


def planned_bytes(pte: bytes) -> int:
    return sum(b["size"] for b in devplan.inspect(pte)["methods"][0]["buffers"])


@pytest.mark.parametrize("name", tiered(sorted(CORPUS), FAST))
def test_both_runtimes_match_eager_at_any_batch(name):
    from executorch.runtime import Runtime

    data, module, args = compiled(name)  # the loaded program keeps pointing into these bytes
    inputs = [t for t in devplan.inspect(data)["methods"][0]["tensors"] if t["role"] == "input"]
    shared = BATCHES.get(name, Batch()).shared
    assert [t["shape"][0] for t in inputs] == [BOUND if i in shared else a.shape[0] for i, a in enumerate(args)]
    assert [t["dynamic"] for t in inputs] == [i in shared for i in range(len(args))]

    torch.manual_seed(1)
    method = Runtime.get().load_program(data).load_method("forward")
    loaded = LoadedMethod(read_pte(data))
    try:
        for batch in BATCHES.get(name, Batch()).sizes:  # shrinking on the same memory
            given = batched(name, args, batch)
            with torch.no_grad():
                want = pytree.tree_leaves(module(*given))
            for execute in (method.execute, loaded.execute):
                got = execute(list(given))
                assert len(got) == len(want)
                for a, b in zip(got, want):
                    torch.testing.assert_close(a, b, **TOLERANCE)
    finally:
        loaded.release()


@pytest.mark.parametrize("name", tiered(sorted(CORPUS), FAST))
def test_plans_no_more_than_executorch(name):
    data, module, args = compiled(name)
    theirs = executorch_pte(exported(name)[0])
    try:
        run_executorch(theirs, batched(name, args, BOUND))
    except Exception:  # e.g. a derived dim (2 * half) that ExecuTorch plans at the example's size
        pytest.skip(f"{name}: ExecuTorch's own program refuses the bound's batch {BOUND}; no like-for-like plan")
    ours = planned_bytes(data)
    assert ours <= planned_bytes(theirs), f"{name}: devplan plans {ours} bytes, ExecuTorch {planned_bytes(theirs)}"
