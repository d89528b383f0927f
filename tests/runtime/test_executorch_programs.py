"""devplan's reference runtime runs the programs ExecuTorch itself writes as ExecuTorch's runtime does.

Each model is exported (non-strict), lowered by ExecuTorch 1.5.1's own pipeline
(testbed.executorch.executorch_pte, once per program in a session: no devplan compile step at all), then

  (a) run twice on one loaded method by ExecuTorch's runtime and twice by devplan's runtime, so
      buffer updates of the first run show in the second; devplan's outputs must equal
      ExecuTorch's (integers and bools exactly, float32 at rtol=1e-5, atol=1e-6, half types
      within a few rounding steps of the largest magnitude, since ExecuTorch's kernels
      accumulate them in that type) and match eager's (float32 at rtol=1e-4, atol=1e-5,
      other dtypes at assert_close's defaults);
  (b) inspected by devplan.inspect: every planned buffer's peak and lower bound fit its size,
      and every kernel instruction's op is one of the document's operators.

Each model ends in one status: PASS, MISMATCH, DEVPLAN_RUNTIME_ERROR, INSPECT_PROBLEM, CRASH (an
exception from devplan other than DevplanError), or one of the skips EXPORT_FAILED and
EXECUTORCH_LOWER_FAILED (ExecuTorch's own limits are not devplan's to answer for). Every
devplan failure fails its test.

The models are a representative subset of the four tables (ExecuTorch's lowering costs 0.5-2 s a
model, so the whole sweep stays within a few minutes on two cores): all of testbed.models.CORPUS
(stateful ones included), and picks from test_module_sweep, test_more_ops, test_llm_sweep (KV
caches over two runs) and test_io_conventions (aliasing outputs, buffers, dtypes, strides).

Run it as a script (`PYTHONPATH=. python tests/runtime/test_executorch_programs.py [names]`) for
the table of every model's status."""

from __future__ import annotations

import copy
import sys
import traceback
from typing import Any, Callable

import pytest
import torch
from torch.utils import _pytree as pytree

import devplan
import devplan.runtime
from devplan.errors import DevplanError
from testbed import models
from testbed.lowerings import executorch_lowered
from testbed.models import run_executorch
from tests.compile import test_io_conventions, test_module_sweep, test_more_ops
from tests.llm import test_llm_sweep
from tests.tiers import tiered

RUNS = 2
# Statuses that skip the model rather than fail it: the limits of torch.export and of ExecuTorch.
SKIPS = {"EXPORT_FAILED", "EXECUTORCH_LOWER_FAILED"}

MODULE_SWEEP = [
    "lstm_1layer",
    "gru_2layer",
    "conv_transpose2d",
    "conv_transpose1d",
    "pixel_shuffle",
    "interp_bilinear_align",
    "interp_nearest_scale",
    "unfold",
    "pad_reflect_replicate",
    "pad_circular",
    "adaptive_avg_uneven",
    "max_pool2d_indices",
    "avg_pool1d",
    "instance_norm2d",
    "rms_norm",
    "vector_norm",
    "squeeze_excite",
    "gelu_tanh_prelu",
    "transformer_encoder_layer",
    "multihead_attention",
    "sdpa_causal",
    "masked_softmax",
    "one_hot",
    "cross_entropy",
    "index_put_scatter_add",
    "sort",
    "median",
    "min_max_dim",
    "logsumexp",
    "bucketize",
    "bool_masks",
    "float16_softmax_relu",
    "bfloat16_matmul_sigmoid",
    "bfloat16_rms_norm_linear",
    "int8_arith",
    "uint8_arith",
    "int_shift",
    "int_div_rounding",
    "cat_then_view",
    "cat_piece_reused",
    "stack_then_view",
    "argsort",
    "fold",
    "einsum",
    "roll",
    "nll_loss",
    "cosine_similarity",
    "bfloat16_layer_norm",
    "cat_then_slice",
]
MORE_OPS = [
    "index",
    "topk",
    "argmax",
    "expand_repeat",
    "group_norm",
    "to_dtype",
    "two_splices_one_reader",
    "arange_full",
    "mean_var",
    "scatter_gather",
    "tril_triu",
    "int_math",
]
LLM_SWEEP = [
    "rope_pairs_stack_flatten",
    "gqa_repeat_interleave_triu_mask",
    "kv_cache_index_copy_input_pos",
    "kv_cache_slice_assign_int_pos",
    "kv_cache_index_put_tensor_idx",
    "argmax_topk_sampling",
    "tiny_decoder_2_layers",
    "decode_step_kv_cache_rope_at_pos",
    "gpt2_block_gelu_tanh",
    "alibi_bias_arange",
    "embedding_tied_head",
]
IO_CONVENTIONS = [
    "01b_input_returned_first_and_last",
    "02_same_result_twice",
    "03_parameter_and_constant_returned",
    "05_mutated_buffer_returned",
    "05b_buffer_clone_then_mutate",
    "05c_buffers_swapped",
    "05d_buffer_set_to_input",
    "06_unused_input",
    "08_kwargs_only",
    "09_dict_in_dict_out",
    "11_zero_size",
    "12_zero_dim",
    "13_int64",
    "13_bool",
    "13_float16",
    "13_int8",
    "13_uint8",
    "13_bfloat16",
    "04_buffer_returned",
    "07_int_float_bool_scalars",
    "14_input_views_together",
    "15_intermediate_views",
    "16c_inplace_over_cat_read_by_piece",
    "17_aliasing_outputs",
    "18_no_ops",
    "19_noncontiguous_input",
    "20_odd_sizes",
]


def _seeded(build: Callable[[], tuple]) -> Callable[[], tuple]:
    def make() -> tuple:
        torch.manual_seed(0)
        built = build()
        return built if len(built) == 3 else (*built, {})

    return make


def _prebuilt(case: tuple) -> Callable[[], tuple]:
    # test_more_ops builds its modules and tensors once at import: hand out copies.
    return lambda: (*copy.deepcopy(case), {})


# "table/name" -> () -> (module, args, kwargs)
CASES: dict[str, Callable[[], tuple]] = {
    **{f"corpus/{n}": _seeded(lambda n=n: models.CORPUS[n]()) for n in models.CORPUS},
    **{f"module_sweep/{n}": _seeded(test_module_sweep.CASES[n]) for n in MODULE_SWEEP},
    **{f"more_ops/{n}": _prebuilt(test_more_ops.cases[n]) for n in MORE_OPS},
    **{f"llm_sweep/{n}": _seeded(test_llm_sweep.CASES[n]) for n in LLM_SWEEP},
    **{f"io_conventions/{n}": _seeded(test_io_conventions.CASES[n]) for n in IO_CONVENTIONS},
}


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def _crash(where: str) -> str:
    return f"{where}: " + " | ".join(line.strip() for line in traceback.format_exc().strip().splitlines()[-4:])


def _eager(module: torch.nn.Module, args: tuple, kwargs: dict) -> list[list[Any]]:
    """Flat outputs of RUNS successive eager calls on a copy (inputs copied each call)."""
    module = copy.deepcopy(module)
    with torch.no_grad():
        return [
            [
                leaf.clone() if isinstance(leaf, torch.Tensor) else leaf
                for leaf in pytree.tree_leaves(module(*copy.deepcopy(args), **copy.deepcopy(kwargs)))
            ]
            for _ in range(RUNS)
        ]


def _difference(got: Any, want: Any, exact_floats: bool) -> str | None:
    """None when `got` matches `want`, else what differs."""
    if not isinstance(want, torch.Tensor):
        return None if got == want else f"{got!r} instead of {want!r}"
    if not isinstance(got, torch.Tensor):
        return f"{type(got).__name__} instead of a tensor"
    if (got.dtype, got.shape) != (want.dtype, want.shape):
        return f"{got.dtype}{tuple(got.shape)} instead of {want.dtype}{tuple(want.shape)}"
    if want.dtype.is_floating_point or want.dtype.is_complex:
        if exact_floats and want.dtype == torch.float32:  # devplan against ExecuTorch
            tolerance = {"rtol": 1e-5, "atol": 1e-6}
        elif exact_floats:  # ExecuTorch's portable kernels accumulate half types in that type, torch in
            # float32: results may differ by rounding steps of the largest magnitude, no more
            scale = want.abs().max().item() if want.numel() else 0.0
            tolerance = {"rtol": 0, "atol": 4 * torch.finfo(want.dtype).eps * scale}
        else:  # against eager
            tolerance = {"rtol": 1e-4, "atol": 1e-5} if want.dtype == torch.float32 else {}
    else:
        tolerance = {"rtol": 0, "atol": 0}
    try:
        torch.testing.assert_close(got, want, equal_nan=True, **tolerance)
    except AssertionError:
        err = (got.double() - want.double()).abs().nan_to_num(float("inf")).max().item() if got.numel() else 0.0
        return f"max abs error {err:.3g} ({want.dtype}{tuple(want.shape)})"
    return None


def _compare(got_runs: list[list], want_runs: list[list], exact_floats: bool) -> str | None:
    for run, (got, want) in enumerate(zip(got_runs, want_runs, strict=True)):
        if len(got) != len(want):
            return f"run {run}: {len(got)} outputs instead of {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            problem = _difference(g, w, exact_floats)
            if problem:
                return f"run {run} output {i}: {problem}"
    return None


def _inspect_problems(doc: dict) -> list[str]:
    problems = []
    for method in doc["methods"]:
        where = method["name"]
        buffers = [(f"buffer mem_id {b['mem_id']}", b) for b in method["buffers"]]
        buffers += [
            (f"delegate {d['index']} buffer mem_id {b['mem_id']}", b)
            for d in method.get("delegates") or ()
            for b in d.get("payload_buffers") or ()
        ]
        for name, buffer in buffers:
            if buffer["peak"] is not None and buffer["peak"] > buffer["size"]:
                problems.append(f"{where} {name}: peak {buffer['peak']} > size {buffer['size']}")
            if buffer["lower_bound"] > buffer["size"]:
                problems.append(f"{where} {name}: lower_bound {buffer['lower_bound']} > size {buffer['size']}")
        operators = {f"{op['name']}.{op['overload']}" if op["overload"] else op["name"] for op in method["operators"]}
        for row in method["instructions"]:
            if row["kind"] == "kernel" and row["op"] not in operators:
                problems.append(f"{where} instruction {row['index']}: op {row['op']!r} is not among the operators")
    return problems


def outcome(name: str) -> tuple[str, str]:
    """(status, detail) for one model."""
    module, args, kwargs = CASES[name]()
    module.eval().requires_grad_(False)
    want = _eager(module, args, kwargs)
    try:
        ep = torch.export.export(module, copy.deepcopy(args), copy.deepcopy(kwargs) or None, strict=False)
    except Exception as error:  # noqa: BLE001 - torch.export's limit, not devplan's
        return "EXPORT_FAILED", _first_line(error)
    try:
        data = executorch_lowered(ep)
    except Exception as error:  # noqa: BLE001 - ExecuTorch's limit, not devplan's
        return "EXECUTORCH_LOWER_FAILED", _first_line(error)

    notes = []
    flat = pytree.tree_leaves((args, kwargs))
    executorch = None
    try:
        try:
            executorch = run_executorch(data, copy.deepcopy((args, kwargs)), runs=RUNS)
        except RuntimeError as error:
            if "contiguous" not in str(error):
                raise
            # ExecuTorch's binding takes only contiguous tensors: try the same values contiguous.
            notes.append(f"ExecuTorch refuses the strided input ({_first_line(error)})")
            executorch = run_executorch(
                data,
                pytree.tree_map(lambda t: t.contiguous() if isinstance(t, torch.Tensor) else t, (args, kwargs)),
                runs=RUNS,
            )
    except Exception as error:  # noqa: BLE001 - then devplan is checked against eager alone
        notes.append(f"ExecuTorch's runtime fails: {_first_line(error)}")
    try:
        got = devplan.run(data, copy.deepcopy(flat), runs=RUNS)
    except DevplanError as error:
        return "DEVPLAN_RUNTIME_ERROR", "; ".join([str(error), *notes])
    except Exception:  # noqa: BLE001
        return "CRASH", _crash("devplan.run")

    if executorch is not None:
        problem = _compare(got, executorch, exact_floats=True)
        if problem:  # say which of the two eager agrees with, to tell kernel rounding from a wrong program
            return "MISMATCH", (
                f"devplan vs ExecuTorch {problem}; devplan vs eager: "
                f"{_compare(got, want, exact_floats=True) or 'equal'}; ExecuTorch vs eager: "
                f"{_compare(executorch, want, exact_floats=True) or 'equal'}"
            )
    problem = _compare(got, want, exact_floats=False)
    if problem:
        if executorch is not None and _compare(executorch, want, exact_floats=False) is None:
            return "MISMATCH", f"devplan vs eager (ExecuTorch matches eager) {problem}"
        notes.append(f"both runtimes differ from eager: {problem}")

    try:
        doc = devplan.inspect(data)
    except DevplanError as error:
        return "INSPECT_PROBLEM", f"devplan.inspect: {error}"
    except Exception:  # noqa: BLE001
        return "CRASH", _crash("devplan.inspect")
    problems = _inspect_problems(doc)
    if problems:
        return "INSPECT_PROBLEM", "; ".join(problems)
    return "PASS", "; ".join(notes)


# one corpus program of each kind in the fast tier (convolutions, matmuls, norms, lookups,
# slices, nested inputs, stored buffers, state); the rest, and the other families, in the full suite
FAST = [
    f"corpus/{name}"
    for name in (
        "conv_bn_relu",
        "matmul_bmm",
        "layer_norm",
        "embedding",
        "slicing",
        "multi_input_nested",
        "constant_buffer",
        "accumulator",
        "rolling_cache",
        "pooling",
    )
]


# ExecuTorch lowers these to an op its kernel libraries do not register, so its runtime refuses
# the program it wrote (Missing operator), and devplan's refuses it too, naming the op
UNREGISTERED = {"module_sweep/argsort": "aten::sort.values"}


@pytest.mark.parametrize("name", tiered(CASES, FAST))
def test_devplan_runs_executorch_programs_as_executorch_does(name):
    status, detail = outcome(name)
    if status in SKIPS:
        pytest.skip(f"{status}: {detail}")
    if name in UNREGISTERED:
        assert status == "DEVPLAN_RUNTIME_ERROR" and "ExecuTorch's runtime fails" in detail, f"{status}: {detail}"
        assert f"calls {UNREGISTERED[name]}, which ExecuTorch's kernel libraries" in detail, detail
        return
    assert status == "PASS", f"{status}: {detail}"


if __name__ == "__main__":
    import time

    counts: dict[str, int] = {}
    for case in sys.argv[1:] or list(CASES):
        start = time.perf_counter()
        status, detail = outcome(case)
        counts[status] = counts.get(status, 0) + 1
        print(f"{status:24} {time.perf_counter() - start:5.1f}s {case}  {detail}", flush=True)
    print(counts)
