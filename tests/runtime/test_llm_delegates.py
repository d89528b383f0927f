"""The LLM blocks of tests.llm.test_llm_sweep (static shapes) compiled with each delegate
setting of test_delegate_sweep and run by devplan's reference runtime with host memory
standing in for CUDA: two runs on one loaded method, so KV-cache buffer updates of the first
run show in the second, compared with eager (two calls on a fresh deep copy) at rtol=1e-4,
atol=1e-5. A few dynamic-sequence cases of tests.llm.test_llm_dynamic run with everything
delegated at sequence lengths 16, 3 and 7.

Every failure fails, its message starting with what went wrong: DEVPLAN_REFUSED (a
DevplanError from devplan.compile), RUNTIME_ERROR (a DevplanError from the runtime),
MISMATCH (outputs not close to eager, with the largest error), DOCUMENT (the inspection
document does not show the delegates as test_delegate_sweep expects) or CRASH (any other
exception: a bug in devplan)."""

from __future__ import annotations

import functools
import traceback

import pytest
import torch
from torch.utils import _pytree as pytree

import devplan
from devplan.errors import DevplanError, first_line
from devplan.pte import read_pte
from devplan.runtime import HostAllocator, LoadedMethod, registered
from testbed.models import eager_outputs
from tests.llm import test_llm_dynamic as dynamic
from tests.llm.test_llm_sweep import CASES
from tests.runtime.test_delegate_sweep import SETTINGS, _check_document
from tests.tiers import tiered

RUNS = 2
SHARE_BY = "name"  # a case's settings share its export (tests/conftest.py)
RTOL, ATOL = 1e-4, 1e-5
DYNAMIC = (
    "sdpa_is_causal",
    "tiny_decoder_2_layers",
    "kv_cache_index_copy_input_pos",
    "decode_step_kv_cache_rope_at_pos",
)


def _crash(stage: str, error: BaseException) -> str:
    """The last lines of a non-DevplanError's traceback: where in devplan it broke."""
    lines = "".join(traceback.format_exception(error)).rstrip().splitlines()
    return f"CRASH ({stage}): {type(error).__name__}: {first_line(error)}\n" + "\n".join(lines[-8:])


def _mismatch(got, want, where: str) -> str | None:
    if not isinstance(got, torch.Tensor):
        return f"{where}: {type(got).__name__} instead of a tensor"
    if (got.dtype, tuple(got.shape)) != (want.dtype, tuple(want.shape)):
        return f"{where}: {got.dtype}{tuple(got.shape)} instead of {want.dtype}{tuple(want.shape)}"
    try:
        if want.dtype.is_floating_point:
            torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)
        else:
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    except AssertionError:
        error = (got.double() - want.double()).abs().nan_to_num(float("inf")).max().item()
        return f"{where}: max abs error {error:.3g}"
    return None


def _compile(ep, delegates, options):
    try:
        return devplan.compile(ep, delegates=delegates, **options)
    except DevplanError as error:
        pytest.fail(f"DEVPLAN_REFUSED: {error}", pytrace=False)
    except Exception as error:  # noqa: BLE001 - any other exception is a devplan bug
        pytest.fail(_crash("compile", error), pytrace=False)


def _execute(loaded: LoadedMethod, inputs: list, where: str) -> list:
    try:
        return [t.clone() if isinstance(t, torch.Tensor) else t for t in loaded.execute(inputs)]
    except DevplanError as error:
        pytest.fail(f"RUNTIME_ERROR {where}: {error}", pytrace=False)
    except Exception as error:  # noqa: BLE001
        pytest.fail(_crash(f"runtime {where}", error), pytrace=False)


def _compare(got: list, want: list, where: str) -> list[str]:
    if len(got) != len(want):
        return [f"{where}: {len(got)} outputs, eager has {len(want)}"]
    return [p for i, (g, w) in enumerate(zip(got, want)) if (p := _mismatch(g, w, f"{where} output {i}"))]


@functools.lru_cache(maxsize=1)
def exported(name: str):
    """The case's args, eager outputs of RUNS calls on a fresh copy, and its static export
    (compile leaves the ExportedProgram as it was, so a case's settings share one)."""
    torch.manual_seed(0)
    module, args = CASES[name]()
    module.eval().requires_grad_(False)
    want = eager_outputs(module, args, runs=RUNS)
    try:
        ep = torch.export.export(module, args, strict=False)
    except Exception as error:  # torch.export's own limits are not devplan's to answer for
        pytest.skip(f"torch.export cannot export it: {type(error).__name__}: {first_line(error)}")
    return args, want, ep


@pytest.mark.parametrize("setting", tiered(SETTINGS, ["all"]))
@pytest.mark.parametrize("name", list(CASES))
def test_llm_block_delegated_matches_eager(name, setting):
    args, want, ep = exported(name)
    delegates, options = SETTINGS[setting]
    result = _compile(ep, delegates, options)
    problems: list[str] = []
    try:
        _check_document(result, delegates, options.get("device_io", False))
    except AssertionError as error:
        problems.append(f"DOCUMENT: {first_line(error)}")
    except Exception as error:  # noqa: BLE001
        pytest.fail(_crash("inspect", error), pytrace=False)
    inputs = pytree.tree_leaves(args)
    before = [t.clone() for t in inputs]
    with registered("cuda", HostAllocator()):
        try:
            loaded = LoadedMethod(read_pte(result.data))
        except DevplanError as error:
            pytest.fail(f"RUNTIME_ERROR load: {error}", pytrace=False)
        except Exception as error:  # noqa: BLE001
            pytest.fail(_crash("load", error), pytrace=False)
        try:
            got = [_execute(loaded, inputs, f"run {run}") for run in range(RUNS)]
        finally:
            loaded.release()
    for index, (now, then) in enumerate(zip(inputs, before)):
        if not torch.equal(now, then):
            problems.append(f"MISMATCH: input {index} changed")
    for run, (got_run, want_run) in enumerate(zip(got, want)):
        problems += [f"MISMATCH: {p}" for p in _compare(got_run, want_run, f"run {run}")]
    assert not problems, "; ".join(problems)


@pytest.mark.parametrize("name", tiered(DYNAMIC, ["tiny_decoder_2_layers", "kv_cache_index_copy_input_pos"]))
def test_llm_dynamic_sequence_all_on_cuda(name):
    """Everything on cuda:0, sequence lengths 16, 3, 7: stateless cases on one loaded method,
    KV-cache cases on a fresh loaded method per length (as test_llm_dynamic runs them)."""
    make_module, make_inputs, seq_dims, stateful = dynamic.CASES[name]
    torch.manual_seed(0)
    module = make_module().eval().requires_grad_(False)
    ep = dynamic._export(module, dynamic._inputs(make_inputs, dynamic.EXAMPLE), seq_dims)
    result = _compile(ep, ["cuda:0"], {})
    data = result.data
    problems: list[str] = []
    loaded = None
    with registered("cuda", HostAllocator()):
        try:
            for seq in dynamic.LENGTHS:
                args = dynamic._inputs(make_inputs, seq)
                want = eager_outputs(module, args)[0]
                if stateful or loaded is None:
                    if loaded is not None:
                        loaded.release()
                    loaded = LoadedMethod(read_pte(data))
                got = _execute(loaded, list(args), f"seq={seq}")
                problems += _compare(got, want, f"seq={seq}")
        finally:
            if loaded is not None:
                loaded.release()
    assert not problems, "MISMATCH: " + "; ".join(problems)
