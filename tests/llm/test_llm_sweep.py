"""A sweep of small LLM building blocks as phones run them: RMSNorm, rotary embeddings
(rotate-half and interleaved pairs), gated MLPs, grouped-query and SDPA attention, KV caches
kept in buffers and updated in place (index_copy_, slice assignment, index_put_), tied
embedding heads, greedy and top-k selection, whole tiny decoders, a GPT-2 block, ALiBi and
learned absolute positions.

Each case is exported with static shapes (strict=False), compiled by devplan and run twice on
one loaded method in ExecuTorch's runtime, so buffer updates of the first run show in the
second; eager runs twice on a fresh copy of the module, so both start from the same buffers.
KV caches add to what they already hold, so the second run differs from the first. A case
torch.export itself cannot export is skipped; devplan's failures are left to fail."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import devplan
from testbed.models import eager_outputs, run_executorch

pytestmark = pytest.mark.sweep  # the slow tier: deselect with -m 'not sweep'

RUNS = 2
DIM, HEADS, KV_HEADS, SEQ, MAX_SEQ, VOCAB = 32, 4, 2, 8, 16, 64
HEAD_DIM = DIM // HEADS


class RMSNorm(nn.Module):
    def __init__(self, dim: int = DIM, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.rand(dim) + 0.5)

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rope_tables(head_dim: int, max_seq: int = MAX_SEQ, base: float = 10000.0):
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs = torch.outer(torch.arange(max_seq).float(), inv_freq)  # (max_seq, head_dim / 2)
    return freqs.cos(), freqs.sin()


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class RotaryHalf(nn.Module):
    """HF-llama rotary embedding: cos/sin of the full head width, rotate_half with cat and slices."""

    def __init__(self, head_dim: int = HEAD_DIM) -> None:
        super().__init__()
        cos, sin = _rope_tables(head_dim)
        self.register_buffer("cos", torch.cat((cos, cos), -1), persistent=False)
        self.register_buffer("sin", torch.cat((sin, sin), -1), persistent=False)

    def forward(self, q, k):  # (B, H, S, D)
        seq = q.shape[-2]
        cos, sin = self.cos[:seq], self.sin[:seq]
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def _rope_pairs(x, cos, sin):
    pairs = x.reshape(*x.shape[:-1], -1, 2)
    x0, x1 = pairs[..., 0], pairs[..., 1]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), -1).flatten(-2)


class RotaryPairs(nn.Module):
    """Meta-llama rotary embedding on interleaved pairs (x.view(..., -1, 2)), real arithmetic only."""

    def __init__(self, head_dim: int = HEAD_DIM) -> None:
        super().__init__()
        cos, sin = _rope_tables(head_dim)
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)

    def forward(self, q, k):  # (B, S, H, D) as meta-llama keeps them
        seq = q.shape[1]
        cos, sin = self.cos[:seq, None, :], self.sin[:seq, None, :]
        return _rope_pairs(q, cos, sin), _rope_pairs(k, cos, sin)


class LlamaMLP(nn.Module):
    def __init__(self, dim: int = DIM, hidden: int = 2 * DIM + 8) -> None:
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class GQAttention(nn.Module):
    """Grouped-query attention: k/v heads repeated with repeat_interleave, causal mask from
    torch.full + torch.triu added, and a boolean triu mask applied with masked_fill. With
    `upcast`, softmax runs on scores.float() and comes back with type_as, as meta-llama's
    reference code writes it (on float32 scores, a no-op aten.to.dtype)."""

    def __init__(self, rope: bool = False, upcast: bool = True) -> None:
        super().__init__()
        self.upcast = upcast
        self.wq = nn.Linear(DIM, HEADS * HEAD_DIM, bias=False)
        self.wk = nn.Linear(DIM, KV_HEADS * HEAD_DIM, bias=False)
        self.wv = nn.Linear(DIM, KV_HEADS * HEAD_DIM, bias=False)
        self.wo = nn.Linear(HEADS * HEAD_DIM, DIM, bias=False)
        self.rope = RotaryHalf() if rope else None

    def forward(self, x):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.wk(x).view(b, s, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = self.wv(x).view(b, s, KV_HEADS, HEAD_DIM).transpose(1, 2)
        if self.rope is not None:
            q, k = self.rope(q, k)
        k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
        v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(HEAD_DIM)
        scores = scores + torch.triu(torch.full((s, s), float("-inf")), diagonal=1)
        future = torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(future, float("-inf"))
        out = (torch.softmax(scores.float(), dim=-1).type_as(q) if self.upcast else torch.softmax(scores, dim=-1)) @ v
        return self.wo(out.transpose(1, 2).reshape(b, s, HEADS * HEAD_DIM))


class SdpaAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(DIM, 3 * DIM, bias=False)
        self.out = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4).unbind(0)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(out.transpose(1, 2).reshape(b, s, DIM))


class _CacheAttention(nn.Module):
    """Projections into a (B, KV_HEADS, MAX_SEQ, HEAD_DIM) cache held in buffers, then attention
    of the new queries over the whole cache with a mask for the positions not yet written.
    The new k/v are added to what the cache held, so a second run reads the first run's state."""

    def __init__(self, batch: int = 1) -> None:
        super().__init__()
        self.wq = nn.Linear(DIM, HEADS * HEAD_DIM, bias=False)
        self.wk = nn.Linear(DIM, KV_HEADS * HEAD_DIM, bias=False)
        self.wv = nn.Linear(DIM, KV_HEADS * HEAD_DIM, bias=False)
        self.wo = nn.Linear(HEADS * HEAD_DIM, DIM, bias=False)
        shape = (batch, KV_HEADS, MAX_SEQ, HEAD_DIM)
        self.register_buffer("k_cache", torch.zeros(shape))
        self.register_buffer("v_cache", torch.zeros(shape))

    def project(self, x):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.wk(x).view(b, s, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = self.wv(x).view(b, s, KV_HEADS, HEAD_DIM).transpose(1, 2)
        return q, k, v

    def attend(self, q, mask):
        b, _, s, _ = q.shape
        k = self.k_cache.repeat_interleave(HEADS // KV_HEADS, dim=1)
        v = self.v_cache.repeat_interleave(HEADS // KV_HEADS, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.wo(out.transpose(1, 2).reshape(b, s, DIM)), self.k_cache.sum((1, 3))


class KVCacheIndexCopy(_CacheAttention):
    """llama-ExecuTorch style: index_copy_ at positions given as an input tensor, mask rows
    picked from a causal-mask buffer by the same positions."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mask", torch.tril(torch.ones(MAX_SEQ, MAX_SEQ, dtype=torch.bool)))

    def forward(self, x, input_pos):
        q, k, v = self.project(x)
        self.k_cache.index_copy_(2, input_pos, self.k_cache.index_select(2, input_pos) + k)
        self.v_cache.index_copy_(2, input_pos, self.v_cache.index_select(2, input_pos) + v)
        return self.attend(q, self.mask[input_pos][None, None])


class KVCacheSlice(_CacheAttention):
    """Slice assignment at a python int position baked into the program."""

    POS = 3

    def forward(self, x):
        q, k, v = self.project(x)
        pos, s = self.POS, x.shape[1]
        self.k_cache[:, :, pos : pos + s] = self.k_cache[:, :, pos : pos + s] + k
        self.v_cache[:, :, pos : pos + s] = self.v_cache[:, :, pos : pos + s] + v
        mask = torch.arange(MAX_SEQ)[None, :] <= (torch.arange(s) + pos)[:, None]
        return self.attend(q, mask)


class KVCacheIndexPut(_CacheAttention):
    """cache[:, :, idx] = k (index_put_ with None leading indices) for an index tensor input,
    and the same through torch.Tensor.index_put_ for v; batch of 2."""

    def __init__(self) -> None:
        super().__init__(batch=2)

    def forward(self, x, idx):
        q, k, v = self.project(x)
        self.k_cache[:, :, idx] = self.k_cache[:, :, idx] + k
        self.v_cache.index_put_(
            (torch.arange(2)[:, None, None], torch.arange(KV_HEADS)[None, :, None], idx[None, None, :]),
            self.v_cache[:, :, idx] + v,
        )
        mask = torch.arange(MAX_SEQ)[None, :] <= idx[:, None]
        return self.attend(q, mask)


class TiedEmbedding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.norm = RMSNorm()

    def forward(self, tokens):
        h = self.norm(self.embed(tokens) * math.sqrt(DIM))
        return h @ self.embed.weight.T


class Sampling(nn.Module):
    """Greedy and top-k selection without randomness: argmax, topk, softmax over the kept
    logits, and the chosen token's log-probability."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, h):
        logits = self.head(h)[:, -1, :]
        greedy = torch.argmax(logits, dim=-1)
        values, indices = torch.topk(logits, 5, dim=-1)
        probs = torch.softmax(values / 0.7, dim=-1)
        pick = indices.gather(-1, torch.argmax(probs, -1, keepdim=True)).squeeze(-1)
        logp = torch.log_softmax(logits, -1).gather(-1, greedy[:, None])
        return greedy, values, indices, probs, pick, logp


class DecoderLayer(nn.Module):
    def __init__(self, upcast: bool = True) -> None:
        super().__init__()
        self.attn_norm = RMSNorm()
        self.attn = GQAttention(rope=True, upcast=upcast)
        self.mlp_norm = RMSNorm()
        self.mlp = LlamaMLP()

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class TinyDecoder(nn.Module):
    def __init__(self, layers: int = 2, upcast: bool = True) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(DecoderLayer(upcast) for _ in range(layers))
        self.norm = RMSNorm()
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h)
        logits = self.head(self.norm(h))
        return logits, logits[:, -1].argmax(-1)


class GPT2Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(DIM)
        self.c_attn = nn.Linear(DIM, 3 * DIM)
        self.c_proj = nn.Linear(DIM, DIM)
        self.ln_2 = nn.LayerNorm(DIM)
        self.c_fc = nn.Linear(DIM, 4 * DIM)
        self.mlp_proj = nn.Linear(4 * DIM, DIM)
        self.register_buffer("bias", torch.tril(torch.ones(MAX_SEQ, MAX_SEQ)).view(1, 1, MAX_SEQ, MAX_SEQ))
        for ln in (self.ln_1, self.ln_2):
            nn.init.uniform_(ln.weight, 0.5, 1.5)
            nn.init.uniform_(ln.bias, -0.5, 0.5)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(DIM, dim=2)
        q, k, v = (t.view(b, s, HEADS, HEAD_DIM).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HEAD_DIM))
        att = att.masked_fill(self.bias[:, :, :s, :s] == 0, float("-inf"))
        y = (torch.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(b, s, DIM)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


def _alibi_slopes(heads: int) -> torch.Tensor:
    start = 2 ** (-8.0 / heads)
    return torch.tensor([start ** (i + 1) for i in range(heads)])


class AlibiAttention(nn.Module):
    """BLOOM/MPT-style ALiBi: slopes * (j - i) from torch.arange(seq), causal, no positions table."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.register_buffer("slopes", _alibi_slopes(HEADS))

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
        pos = torch.arange(s)
        distance = (pos[None, :] - pos[:, None]).float()
        bias = self.slopes[:, None, None] * distance
        bias = bias.masked_fill(pos[None, :] > pos[:, None], float("-inf"))
        scores = q @ k.transpose(-2, -1) / math.sqrt(HEAD_DIM) + bias
        return (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(b, s, DIM)


class LearnedPositions(nn.Module):
    """GPT-2 input: wte(tokens) + wpe(torch.arange(seq)), then a final LayerNorm."""

    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, DIM)
        self.wpe = nn.Embedding(MAX_SEQ, DIM)
        self.ln_f = nn.LayerNorm(DIM)

    def forward(self, tokens):
        positions = torch.arange(0, tokens.shape[1], dtype=torch.long)
        return self.ln_f(self.wte(tokens) + self.wpe(positions))


class DecodeStep(nn.Module):
    """One decode step as ExecuTorch's llama runner takes it: one token and its position as
    tensors, RoPE tables and mask rows picked by input_pos, caches updated by index_copy_."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.norm = RMSNorm()
        self.attn = KVCacheIndexCopy()
        cos, sin = _rope_tables(HEAD_DIM)
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens, input_pos):
        h = self.norm(self.embed(tokens))
        q, k, v = self.attn.project(h)
        cos, sin = self.cos[input_pos][None, None], self.sin[input_pos][None, None]
        q, k = _rope_pairs(q, cos, sin), _rope_pairs(k, cos, sin)
        attn = self.attn
        attn.k_cache.index_copy_(2, input_pos, attn.k_cache.index_select(2, input_pos) + k)
        attn.v_cache.index_copy_(2, input_pos, attn.v_cache.index_select(2, input_pos) + v)
        out, _ = attn.attend(q, attn.mask[input_pos][None, None])
        logits = self.head(h + out)
        return logits[:, -1].argmax(-1), logits


r = torch.randn


def _tokens(batch: int = 1, seq: int = SEQ):
    return torch.randint(0, VOCAB, (batch, seq))


def _qk_bhsd():
    return r(1, HEADS, SEQ, HEAD_DIM), r(1, KV_HEADS, SEQ, HEAD_DIM)


# name -> () -> (module, args); each is built right after torch.manual_seed(0).
CASES = {
    "rms_norm": lambda: (RMSNorm(), (r(2, SEQ, DIM),)),
    "rope_rotate_half": lambda: (RotaryHalf(), _qk_bhsd()),
    "rope_pairs_stack_flatten": lambda: (RotaryPairs(), (r(1, SEQ, HEADS, HEAD_DIM), r(1, SEQ, KV_HEADS, HEAD_DIM))),
    "llama_mlp": lambda: (LlamaMLP(), (r(2, SEQ, DIM),)),
    "gqa_repeat_interleave_triu_mask": lambda: (GQAttention(), (r(2, SEQ, DIM),)),
    "gqa_repeat_interleave_triu_mask_no_upcast": lambda: (GQAttention(upcast=False), (r(2, SEQ, DIM),)),
    "sdpa_is_causal": lambda: (SdpaAttention(), (r(2, SEQ, DIM),)),
    "kv_cache_index_copy_input_pos": lambda: (KVCacheIndexCopy(), (r(1, 4, DIM), torch.tensor([2, 3, 4, 5]))),
    "kv_cache_slice_assign_int_pos": lambda: (KVCacheSlice(), (r(1, 4, DIM),)),
    "kv_cache_index_put_tensor_idx": lambda: (KVCacheIndexPut(), (r(2, 4, DIM), torch.tensor([1, 4, 5, 6]))),
    "embedding_tied_head": lambda: (TiedEmbedding(), (_tokens(2),)),
    "argmax_topk_sampling": lambda: (Sampling(), (r(2, SEQ, DIM),)),
    "tiny_decoder_2_layers": lambda: (TinyDecoder(), (_tokens(1),)),
    "tiny_decoder_2_layers_no_upcast": lambda: (TinyDecoder(upcast=False), (_tokens(1),)),
    "gpt2_block_gelu_tanh": lambda: (GPT2Block(), (r(2, SEQ, DIM),)),
    "alibi_bias_arange": lambda: (AlibiAttention(), (r(2, SEQ, DIM),)),
    "learned_positions_arange": lambda: (LearnedPositions(), (_tokens(2),)),
    "decode_step_kv_cache_rope_at_pos": lambda: (DecodeStep(), (_tokens(1, 1), torch.tensor([5]))),
}


def _close(got: torch.Tensor, want: torch.Tensor, where: str) -> None:
    assert isinstance(got, torch.Tensor), f"{where}: {type(got).__name__} instead of a tensor"
    assert (got.dtype, got.shape) == (want.dtype, want.shape), (
        f"{where}: {got.dtype}{tuple(got.shape)} instead of {want.dtype}{tuple(want.shape)}"
    )
    if want.dtype.is_floating_point:
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=lambda m: f"{where}: {m}")
    else:
        torch.testing.assert_close(got, want, msg=lambda m: f"{where}: {m}")


@pytest.mark.parametrize("name", list(CASES))
def test_executorch_matches_eager_over_two_runs(name):
    torch.manual_seed(0)
    module, args = CASES[name]()
    module.eval().requires_grad_(False)
    want = eager_outputs(module, args, runs=RUNS)  # on a copy: module's buffers stay as built
    try:
        ep = torch.export.export(module, args, strict=False)
    except Exception as error:  # torch.export's own limits are not devplan's to answer for
        pytest.skip(f"torch.export cannot export it: {type(error).__name__}: {str(error).splitlines()[0]}")
    data = devplan.compile(ep).data
    got = run_executorch(data, args, runs=RUNS)
    assert len(got) == len(want) == RUNS
    for run, (g_run, w_run) in enumerate(zip(got, want)):
        assert len(g_run) == len(w_run), f"run {run}: {len(g_run)} outputs, eager has {len(w_run)}"
        for i, (g, w) in enumerate(zip(g_run, w_run)):
            _close(g, w, f"run {run} output {i}")
