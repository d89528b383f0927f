"""The compile-test corpus with a dynamic batch: each model is exported with dim 0 of its
batched inputs a `Dim` bounded by BOUND, devplan compiles it, ExecuTorch's runtime and
devplan's run the program at several batch sizes with outputs equal to eager PyTorch, and
devplan plans no more bytes than ExecuTorch's own lowering of the same dynamic export
(where that lowering runs at the bound at all).

Models whose batch torch.export cannot keep dynamic (it specializes the dim, or the model's
state fixes it) are skipped with torch's reason."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import pytest
import torch
from torch.export import Dim
from torch.utils import _pytree as pytree

import devplan
from devplan.pte import read_pte
from devplan.runtime import LoadedMethod
from tests.models import CORPUS, executorch_lower, run_executorch
from tests.tiers import tiered

BOUND = 8
EXAMPLE = 4  # batch of the example inputs: torch specializes a dim whose example size is 1
TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}
# the fast tier's sample: a stateful model, convolutions, a gated MLP, nested inputs
FAST = ("activations", "conv_bn_relu", "gated_mlp", "multi_input_nested", "rolling_cache")


@dataclass(frozen=True)
class Batch:
    """How a model's batch is dynamic: `shared` are the inputs whose dim 0 is the batch, which
    is `step` times a Dim of at least `least`; `sizes` are the batches the runtimes run, in order."""

    shared: tuple[int, ...] = (0,)
    least: int = 1
    step: int = 1
    sizes: tuple[int, ...] = (BOUND, 3, 1)


BATCHES = {
    "matmul_bmm": Batch(shared=(0, 1)),
    "multi_input_nested": Batch(shared=(0, 1, 2)),
    # x[1:3] guards batch >= 3 (torch's suggested fix: Dim('batch', min=3, max=8))
    "slicing": Batch(least=3, sizes=(BOUND, 3)),
    # chunk(2, dim=0) then left - right: torch specializes a plain Dim to the example's 4, but
    # keeps an even batch 2 * half dynamic (half >= 2: chunks of one row are guarded away)
    "cat_split_chunk": Batch(shared=(0, 1), least=2, step=2, sizes=(BOUND, 6, 4)),
}


def resized(t: torch.Tensor, batch: int) -> torch.Tensor:
    """An input like `t` with `batch` rows: normal floats, integers within `t`'s own range."""
    if t.dtype.is_floating_point:
        return torch.randn(batch, *t.shape[1:], dtype=t.dtype)
    return torch.randint(int(t.min()), int(t.max()) + 1, (batch, *t.shape[1:]), dtype=t.dtype)


def batched(name: str, args: tuple, batch: int) -> tuple:
    shared = BATCHES.get(name, Batch()).shared
    return tuple(resized(a, batch) if i in shared else a for i, a in enumerate(args))


def exported(name: str) -> tuple[torch.export.ExportedProgram, torch.nn.Module, tuple]:
    """A fresh dynamic export each call: ExecuTorch's lowering rewrites the shapes of a derived dim."""
    spec = BATCHES.get(name, Batch())
    module, args = CORPUS[name]()
    if not all(isinstance(a, torch.Tensor) and a.dim() > 0 for a in args):
        pytest.skip(f"{name}: not every input is a tensor with a batch dim")
    args = batched(name, args, EXAMPLE)
    dim = Dim(f"{name}_batch", min=spec.least, max=BOUND // spec.step)
    size = dim * spec.step if spec.step > 1 else dim
    dims = tuple({0: size} if i in spec.shared else None for i in range(len(args)))
    try:
        ep = torch.export.export(module, args, dynamic_shapes=dims, strict=False)
    except Exception as error:  # torch specializes the batch, or the model's state fixes it
        lines = [line.strip(" -") for line in str(error).splitlines() if line.strip(" -")]
        pytest.skip(f"{name}: torch.export keeps no dynamic batch: {type(error).__name__}: {' / '.join(lines[:2])}")
    return ep, module, args


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
    theirs = executorch_lower(exported(name)[0])
    try:
        run_executorch(theirs, batched(name, args, BOUND))
    except Exception:  # e.g. a derived dim (2 * half) that ExecuTorch plans at the example's size
        pytest.skip(f"{name}: ExecuTorch's own program refuses the bound's batch {BOUND}; no like-for-like plan")
    ours = planned_bytes(data)
    assert ours <= planned_bytes(theirs), f"{name}: devplan plans {ours} bytes, ExecuTorch {planned_bytes(theirs)}"
