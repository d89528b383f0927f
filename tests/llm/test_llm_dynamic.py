"""The LLM blocks of test_llm_sweep exported with a dynamic sequence length, as the ExecuTorch
llama runner's prefill takes them: the sequence dim is a Dim("seq", min=2, max=16), the batch
stays static (1 or 2 as the case needs); for KV-cache cases the new tokens' sequence is dynamic
and input_pos (or the index tensor) has the same dynamic length.

Each case is compiled by devplan, which must plan no more bytes than ExecuTorch's own lowering
of the same export, and run in ExecuTorch's runtime and in devplan's at sequence lengths 16 (the
bound), 3 and 7, outputs close to eager. Stateless cases run all lengths on one loaded method
(shrinking and growing on the same memory); KV-cache cases get a fresh loaded method per length
(in ExecuTorch's runtime from a freshly loaded program: a second method loaded from one program
does not start from the initial buffer values, with ExecuTorch's own lowering too), compared
with eager on a fresh copy of the module. A case torch.export refuses with a dynamic sequence
(or specializes the dim) is skipped with torch's reason; devplan's failures are left to fail,
their message starting with what went wrong (DEVPLAN_REFUSED, MISMATCH,
RUNTIME_ERROR, LARGER_THAN_EXECUTORCH)."""

from __future__ import annotations

from typing import Callable

import pytest
import torch
from torch.export import Dim

import devplan
from devplan.errors import DevplanError
from devplan.pte import read_pte
from devplan.runtime import LoadedMethod
from testbed.executorch import executorch_pte
from testbed.models import eager_outputs
from tests.llm.test_llm_sweep import (
    DIM,
    HEAD_DIM,
    HEADS,
    KV_HEADS,
    MAX_SEQ,
    VOCAB,
    AlibiAttention,
    DecodeStep,
    GPT2Block,
    GQAttention,
    KVCacheIndexCopy,
    KVCacheIndexPut,
    KVCacheSlice,
    LearnedPositions,
    LlamaMLP,
    RMSNorm,
    RotaryHalf,
    RotaryPairs,
    Sampling,
    SdpaAttention,
    TiedEmbedding,
    TinyDecoder,
)
from tests.tiers import tiered

BOUND, LEAST, EXAMPLE = 16, 2, 8
LENGTHS = (BOUND, 3, 7)
RTOL, ATOL = 1e-4, 1e-5

r = torch.randn


def _positions(seq: int) -> torch.Tensor:
    """`seq` consecutive cache positions, all within MAX_SEQ."""
    start = (MAX_SEQ - seq) // 2
    return torch.arange(start, start + seq)


def _tokens(batch: int, seq: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, seq))


# name -> (module maker, inputs at sequence length s, which dim of each input is the sequence
# (None: static), stateful); each module is built right after torch.manual_seed(0).
Case = tuple[Callable[[], torch.nn.Module], Callable[[int], tuple], tuple, bool]
CASES: dict[str, Case] = {
    "rms_norm": (RMSNorm, lambda s: (r(2, s, DIM),), (1,), False),
    "rope_rotate_half": (RotaryHalf, lambda s: (r(1, HEADS, s, HEAD_DIM), r(1, KV_HEADS, s, HEAD_DIM)), (2, 2), False),
    "rope_pairs_stack_flatten": (
        RotaryPairs,
        lambda s: (r(1, s, HEADS, HEAD_DIM), r(1, s, KV_HEADS, HEAD_DIM)),
        (1, 1),
        False,
    ),
    "llama_mlp": (LlamaMLP, lambda s: (r(2, s, DIM),), (1,), False),
    "gqa_repeat_interleave_triu_mask": (GQAttention, lambda s: (r(2, s, DIM),), (1,), False),
    "gqa_repeat_interleave_triu_mask_no_upcast": (
        lambda: GQAttention(upcast=False),
        lambda s: (r(2, s, DIM),),
        (1,),
        False,
    ),
    "sdpa_is_causal": (SdpaAttention, lambda s: (r(2, s, DIM),), (1,), False),
    "kv_cache_index_copy_input_pos": (KVCacheIndexCopy, lambda s: (r(1, s, DIM), _positions(s)), (1, 0), True),
    "kv_cache_slice_assign_int_pos": (KVCacheSlice, lambda s: (r(1, s, DIM),), (1,), True),
    "kv_cache_index_put_tensor_idx": (KVCacheIndexPut, lambda s: (r(2, s, DIM), _positions(s)), (1, 0), True),
    "embedding_tied_head": (TiedEmbedding, lambda s: (_tokens(2, s),), (1,), False),
    "argmax_topk_sampling": (Sampling, lambda s: (r(2, s, DIM),), (1,), False),
    "tiny_decoder_2_layers": (TinyDecoder, lambda s: (_tokens(1, s),), (1,), False),
    "tiny_decoder_2_layers_no_upcast": (lambda: TinyDecoder(upcast=False), lambda s: (_tokens(1, s),), (1,), False),
    "gpt2_block_gelu_tanh": (GPT2Block, lambda s: (r(2, s, DIM),), (1,), False),
    "alibi_bias_arange": (AlibiAttention, lambda s: (r(2, s, DIM),), (1,), False),
    "learned_positions_arange": (LearnedPositions, lambda s: (_tokens(2, s),), (1,), False),
    "decode_step_kv_cache_rope_at_pos": (DecodeStep, lambda s: (_tokens(1, s), _positions(s)), (1, 0), True),
}


def _inputs(make_inputs: Callable[[int], tuple], seq: int) -> tuple:
    torch.manual_seed(1000 + seq)
    return make_inputs(seq)


def _export(module: torch.nn.Module, args: tuple, seq_dims: tuple) -> torch.export.ExportedProgram:
    seq = Dim("seq", min=LEAST, max=BOUND)
    dynamic = tuple(None if d is None else {d: seq} for d in seq_dims)
    try:
        ep = torch.export.export(module, args, dynamic_shapes=dynamic, strict=False)
    except Exception as error:  # torch.export's own limits are not devplan's to answer for
        pytest.skip(f"EXPORT_SKIPPED: {type(error).__name__}: {str(error).strip().splitlines()[0]}")
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder" and n.name in ep.graph_signature.user_inputs]
    kept = [n.meta["val"].shape[d] for n, d in zip(placeholders, seq_dims) if d is not None]
    if not any(isinstance(size, torch.SymInt) for size in kept):
        pytest.skip(f"EXPORT_SKIPPED: torch.export specialized the sequence to {kept}")
    return ep


def _mismatch(got, want, where: str) -> str | None:
    if not isinstance(got, torch.Tensor):
        return f"{where}: {type(got).__name__} instead of a tensor"
    if (got.dtype, got.shape) != (want.dtype, want.shape):
        return f"{where}: {got.dtype}{tuple(got.shape)} instead of {want.dtype}{tuple(want.shape)}"
    try:
        if want.dtype.is_floating_point:
            torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)
        else:
            torch.testing.assert_close(got, want)
    except AssertionError:
        error = (got.double() - want.double()).abs().nan_to_num(float("inf")).max().item()
        return f"{where}: max abs error {error:.3g}"
    return None


def _check(execute, args: tuple, want: list, runtime: str, seq: int, problems: list[str]) -> None:
    try:
        got = [t.clone() if isinstance(t, torch.Tensor) else t for t in execute(list(args))]
    except Exception as error:
        problems.append(
            f"RUNTIME_ERROR {runtime} seq={seq}: {type(error).__name__}: "
            f"{str(error).strip().splitlines()[0] if str(error).strip() else ''}"
        )
        return
    if len(got) != len(want):
        problems.append(f"MISMATCH {runtime} seq={seq}: {len(got)} outputs, eager has {len(want)}")
        return
    for i, (g, w) in enumerate(zip(got, want)):
        problem = _mismatch(g, w, f"MISMATCH {runtime} seq={seq} output {i}")
        if problem:
            problems.append(problem)


# the fast tier: a norm, a rotary embedding, attention with a mask, a KV cache, an embedding
@pytest.mark.parametrize(
    "name", tiered(CASES, ["rms_norm", "rope_rotate_half", "kv_cache_index_copy_input_pos", "embedding_tied_head"])
)
def test_dynamic_sequence_runs_in_both_runtimes_within_executorchs_plan(name):
    from executorch.runtime import Runtime

    make_module, make_inputs, seq_dims, stateful = CASES[name]
    torch.manual_seed(0)
    module = make_module().eval().requires_grad_(False)
    ep = _export(module, _inputs(make_inputs, EXAMPLE), seq_dims)
    theirs = sum(b["size"] for b in devplan.inspect(executorch_pte(ep))["methods"][0]["buffers"])
    try:
        result = devplan.compile(ep)
    except DevplanError as error:
        pytest.fail(f"DEVPLAN_REFUSED: {error}")
    data = result.data  # the loaded programs keep pointing into these bytes

    problems: list[str] = []
    planned = sum(buffer.size for buffer in result.planned.buffers)
    if planned > theirs:
        problems.append(f"LARGER_THAN_EXECUTORCH: devplan plans {planned} bytes, ExecuTorch {theirs}")

    program = method = loaded = None
    try:
        for seq in LENGTHS:
            args = _inputs(make_inputs, seq)
            want = eager_outputs(module, args)[0]  # on a fresh copy: module's buffers stay as built
            if stateful or method is None:
                # a fresh program too: methods loaded from one program share its mutable buffers
                program = Runtime.get().load_program(data)
                method = program.load_method("forward")
                if loaded is not None:
                    loaded.release()
                loaded = LoadedMethod(read_pte(data))
            _check(method.execute, args, want, "executorch", seq, problems)
            _check(loaded.execute, args, want, "devplan", seq, problems)
    finally:
        if loaded is not None:
            loaded.release()
    assert not problems, "; ".join(problems)
