"""transformers' own ExecuTorch recipe (issue 12's corpus): a tiny Llama with a static KV cache
in buffers (TorchExportableModuleWithStaticCache), exported under no_grad strict (the recipe's
default) and non-strict. test_static_cache_decode runs three decode steps on one loaded method
of each runtime, so that the cache carries over, and compares each step with eager at rtol=1e-4,
atol=1e-5. torch's own ep.module() must decode as eager does first, else the case is torch's.
Marked `sweep`."""

from __future__ import annotations

import copy
import functools

import pytest
import torch
from torch import Tensor
from torch.utils import _pytree as pytree

import devplan
from devplan.errors import DevplanError
from testbed.hf_models import static_cache_decoder
from testbed.lowerings import released_after_module
from testbed.models import eager_runs
from tests.compile.corpus_checks import ATOL, RTOL, compare, executorch_baseline, first_line, memo

pytestmark = pytest.mark.sweep


STATIC_MODES = {"no_grad": False, "strict_no_grad": True}  # the recipe exports under no_grad, strict by default


@functools.lru_cache(maxsize=None)
def static_cache() -> tuple[torch.nn.Module, list[dict[str, Tensor]], list[list]]:
    module, steps = static_cache_decoder()
    return module, steps, eager_runs(module, [((), step) for step in steps])


@functools.lru_cache(maxsize=None)
def static_cache_exported(mode: str) -> tuple[torch.export.ExportedProgram | None, str | None]:
    module, steps, _ = static_cache()
    try:
        with torch.no_grad():
            return torch.export.export(copy.deepcopy(module), (), steps[0], strict=STATIC_MODES[mode]), None
    except Exception as error:
        return None, first_line(error)


@memo
def static_cache_compiled(mode: str) -> devplan.compiler.CompileResult:
    return devplan.compile(static_cache_exported(mode)[0])


@functools.lru_cache(maxsize=None)
def _static_cache_in_torch(mode: str) -> str | None:
    """None when the exported program itself (ep.module(), in torch) reproduces eager over the
    three steps, else what differs: a program that loses the cache is torch's to answer for."""
    ep, _ = static_cache_exported(mode)
    _, steps, want = static_cache()
    try:
        program = ep.module()
        with torch.no_grad():
            got = [[out.clone() for out in pytree.tree_leaves(program(**copy.deepcopy(step)))] for step in steps]
        compare("torch", got, want)
    except Exception as error:
        return first_line(error)
    return None


def _static_cache_program(mode: str) -> torch.export.ExportedProgram:
    ep, reason = static_cache_exported(mode)
    if ep is None:
        pytest.xfail(f"torch.export: {reason}")
    reason = _static_cache_in_torch(mode)
    if reason is not None:
        pytest.xfail(f"torch.export: its program does not decode as eager does: {reason}")
    reason = _static_cache_functionalizes(mode)
    if reason is not None:  # devplan cannot do better than torch here, but it says so in one line
        with pytest.raises(DevplanError, match="writes in place to .*lifted as a constant") as refused:
            devplan.compile(copy.deepcopy(ep))
        assert "\n" not in str(refused.value)
        pytest.xfail(
            f"torch.export: non-strict export lifts the cache as constants that the program writes in "
            f"place; torch's own run_decompositions fails on it ({reason}), as ExecuTorch's lowering does"
        )
    return ep


@functools.lru_cache(maxsize=None)
def _static_cache_functionalizes(mode: str) -> str | None:
    """None when torch's functionalizing retrace (ep.run_decompositions) takes the program."""
    try:
        static_cache_exported(mode)[0].run_decompositions()
    except Exception as error:
        return first_line(error)
    return None


_release_caches = released_after_module(
    static_cache, static_cache_exported, static_cache_compiled, _static_cache_in_torch, _static_cache_functionalizes
)


@pytest.mark.parametrize("mode", list(STATIC_MODES))
@pytest.mark.parametrize("runtime", ["executorch", "devplan"])
def test_static_cache_decode(runtime, mode):
    from devplan.runtime import LoadedMethod

    _static_cache_program(mode)
    _, steps, want = static_cache()
    data = static_cache_compiled(mode).data
    inputs = [pytree.tree_leaves(step) for step in steps]
    if runtime == "executorch":
        from executorch.runtime import Runtime

        program = Runtime.get().load_program(data)  # keep it referenced while the method runs
        method = program.load_method("forward")
        got = [[out.clone() for out in method.execute(flat)] for flat in inputs]
    else:
        method = LoadedMethod(devplan.read_pte(data), "forward")
        try:
            got = [[out.clone() for out in method.execute(flat)] for flat in inputs]
        finally:
            method.release()
    compare(runtime, got, want)


def test_static_cache_steps_depend_on_the_cache():
    """The comparison above tells a carried cache from a fresh one: the last step alone, on
    an empty cache, gives other logits than after the first two steps."""
    module, steps, want = static_cache()
    alone = eager_runs(module, [((), steps[-1])])[0][0]
    assert not torch.allclose(alone, want[-1][0], rtol=RTOL, atol=ATOL)


def test_static_cache_planned_bytes():
    from testbed.executorch import planned_bytes

    ep = _static_cache_program("strict_no_grad")  # the recipe's own export mode
    ours = planned_bytes(static_cache_compiled("strict_no_grad").data)
    theirs, config = executorch_baseline(ep)
    print(f"static cache: devplan {ours} planned bytes, executorch {theirs} ({config})")
    assert ours <= theirs, f"devplan plans {ours} bytes, ExecuTorch ({config}) {theirs}"
