"""What the transformers corpus's tests share (test_transformers_corpus.py, its static KV
cache's in test_transformers_static_cache.py): a cache that remembers a raised exception, the
comparison with eager, and ExecuTorch's planned bytes for the same program."""

from __future__ import annotations

import copy
import functools

import pytest
import torch
from torch import Tensor

from testbed.lowerings import by_program

RTOL, ATOL = 1e-4, 1e-5


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"[:300]


def memo(fn):
    """lru_cache that also remembers a raised exception and raises it again, so that the
    checks sharing a failed stage do not pay for it again."""

    @functools.lru_cache(maxsize=None)
    def outcome(*key):
        try:
            return True, fn(*key)
        except Exception as error:  # noqa: BLE001 - re-raised by the caller
            return False, error

    @functools.wraps(fn)
    def call(*key):
        ok, value = outcome(*key)
        if not ok:
            raise value
        return value

    call.cache_clear = outcome.cache_clear
    return call


def compare(runtime: str, got_runs: list[list], want_runs: list[list]) -> None:
    assert len(got_runs) == len(want_runs), f"{runtime}: {len(got_runs)} runs instead of {len(want_runs)}"
    for run, (got, want) in enumerate(zip(got_runs, want_runs)):
        assert len(got) == len(want), f"{runtime} run {run}: {len(got)} outputs, eager has {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            where = f"{runtime} run {run} output {i}"
            assert isinstance(g, Tensor), f"{where}: {type(g).__name__} instead of a tensor"
            assert (g.dtype, g.shape) == (w.dtype, w.shape), (
                f"{where}: {g.dtype}{tuple(g.shape)} instead of {w.dtype}{tuple(w.shape)}"
            )
            tolerance = {"rtol": RTOL, "atol": ATOL} if w.dtype.is_floating_point else {"rtol": 0, "atol": 0}
            torch.testing.assert_close(g, w, **tolerance, msg=lambda m: f"{where}: {m}")


def executorch_baseline(ep: torch.export.ExportedProgram) -> tuple[int, str]:
    """ExecuTorch's smaller planned total over its two configurations (default, constant
    propagation), and which one; xfails when ExecuTorch lowers the program in neither."""
    sizes, errors = executorch_sizes(ep)
    if not sizes:
        pytest.xfail(f"executorch: {errors[0]}")
    config = min(sizes, key=sizes.get)
    return sizes[config], config


@by_program(limit=1024, size=lambda _: 1)  # a family's grad and no_grad exports are often the same program
def executorch_sizes(ep: torch.export.ExportedProgram) -> tuple[dict[str, int], list[str]]:
    """({config: planned bytes} for the configurations ExecuTorch lowers the program in, the
    errors of the others); cached per distinct program (testbed/lowerings.py).

    benchmarks.harness.executorch_pte's pipeline, with the edge lowering (three quarters of
    the time) shared by both configurations; the sizes are the same as two executorch_pte calls."""
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

    from testbed.executorch import planned_bytes

    sizes, errors = {}, []
    with torch.no_grad():
        try:
            edge = to_edge_transform_and_lower(ep)  # by_program hands over a copy
        except Exception as error:  # ExecuTorch's own failure
            return {}, [first_line(error)]
        signature = edge.exported_program().graph_signature
        mutated = set(signature.buffers_to_mutate.values())
        placeholders = [name for name, fqn in signature.inputs_to_buffers.items() if fqn in mutated]
        for config, const_prop in (("const_prop", True), ("default", False)):
            config_edge = copy.deepcopy(edge) if const_prop else edge
            backend = ExecutorchBackendConfig(
                passes=[InitializedMutableBufferPass(placeholders)], do_quant_fusion_and_const_prop=const_prop
            )
            try:
                sizes[config] = planned_bytes(config_edge.to_executorch(backend).buffer)
            except Exception as error:  # ExecuTorch's own failure
                errors.append(f"{config}: {first_line(error)}")
    return sizes, errors
