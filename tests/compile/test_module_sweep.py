"""A sweep of common torch.nn building blocks and functional ops that test_more_ops.py and
the testbed.models CORPUS leave out: recurrent layers, transposed and 1-D/3-D convolutions,
resampling, norms, losses, attention masks, sorting and searching, low-precision and
small-integer dtypes, and cat results read through views.

Each case is exported with static shapes, compiled by devplan, run by ExecuTorch's runtime
and by devplan's reference runtime, and both are compared with eager. Cases devplan refuses
or gets wrong are strict xfails whose reason is the one-line error they end in, so a fix
shows up as an XPASS to turn into a plain case."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils import _pytree as pytree

import devplan
import devplan.runtime
from devplan.errors import DevplanError
from testbed.models import eager_outputs, run_executorch

pytestmark = pytest.mark.sweep  # the slow tier: deselect with -m 'not sweep'


def m(fn):
    class Wrapped(nn.Module):
        def forward(self, *args):
            return fn(*args)

    return Wrapped()


def _randomized(module: nn.Module) -> nn.Module:
    """Non-trivial running stats and affine parameters, so norms are not near-identities."""
    for child in module.modules():
        if isinstance(child, nn.modules.batchnorm._BatchNorm):
            child.running_mean.uniform_(-0.5, 0.5)
            child.running_var.uniform_(0.5, 2.0)
        if isinstance(child, (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm)) and child.affine:
            nn.init.uniform_(child.weight, 0.5, 1.5)
            nn.init.uniform_(child.bias, -0.5, 0.5)
    return module


class Recurrent(nn.Module):
    """nn.LSTM or nn.GRU, batch_first, returning the sequence and the final states."""

    def __init__(self, kind: type[nn.RNNBase], layers: int) -> None:
        super().__init__()
        self.rnn = kind(6, 8, num_layers=layers, batch_first=True)

    def forward(self, x):
        out, state = self.rnn(x)
        return (out, *state) if isinstance(state, tuple) else (out, state)


class SqueezeExcite(nn.Module):
    """MobileNetV3 block: expand, depthwise, squeeze-excite (hardsigmoid gate), project, residual."""

    def __init__(self) -> None:
        super().__init__()
        self.expand = nn.Conv2d(8, 16, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc1 = nn.Conv2d(16, 4, 1)
        self.fc2 = nn.Conv2d(4, 16, 1)
        self.project = nn.Conv2d(16, 8, 1, bias=False)
        self.act = nn.Hardswish()

    def forward(self, x):
        h = self.act(self.bn1(self.expand(x)))
        h = self.act(self.bn2(self.dw(h)))
        s = F.hardsigmoid(self.fc2(F.relu(self.fc1(F.adaptive_avg_pool2d(h, 1)))))
        return x + self.project(h * s)


def _masked_attention(q, k, mask):
    scores = (q @ k.transpose(-1, -2)).masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, -1)


def _nll(logits, target):
    log_probs = F.log_softmax(logits, -1)
    return F.nll_loss(log_probs, target), -log_probs.gather(1, target[:, None]).squeeze(1)


r = torch.randn


def _img():
    return r(1, 4, 6, 6)


def _x():
    return r(4, 6)


def _int8():
    return torch.randint(-50, 50, (4, 6), dtype=torch.int8)


def _uint8():
    return torch.randint(0, 256, (4, 6), dtype=torch.uint8)


# name -> () -> (module, args); each is built right after torch.manual_seed(0).
CASES = {
    # recurrent layers
    "lstm_1layer": lambda: (Recurrent(nn.LSTM, 1), (r(2, 5, 6),)),
    # ExecuTorch's portable linear takes 2-D and wider inputs only: a 1-D one decomposes
    "linear_on_1d_input": lambda: (nn.Linear(16, 4), (r(16),)),
    "lstm_2layer": lambda: (Recurrent(nn.LSTM, 2), (r(2, 5, 6),)),
    "gru_1layer": lambda: (Recurrent(nn.GRU, 1), (r(2, 5, 6),)),
    "gru_2layer": lambda: (Recurrent(nn.GRU, 2), (r(2, 5, 6),)),
    # convolutions and resampling
    "conv_transpose2d": lambda: (nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1), (_img(),)),
    "conv_transpose1d": lambda: (nn.ConvTranspose1d(4, 3, 4, stride=2, padding=1), (r(1, 4, 7),)),
    "pixel_shuffle": lambda: (nn.PixelShuffle(2), (r(1, 8, 3, 3),)),
    "pixel_unshuffle": lambda: (nn.PixelUnshuffle(2), (_img(),)),
    "channel_shuffle": lambda: (nn.ChannelShuffle(2), (r(1, 4, 3, 3),)),
    "interp_bilinear_align": lambda: (
        m(lambda x: F.interpolate(x, size=(9, 11), mode="bilinear", align_corners=True)),
        (_img(),),
    ),
    "interp_bilinear_scale": lambda: (
        m(lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=False)),
        (_img(),),
    ),
    "interp_nearest_scale": lambda: (m(lambda x: F.interpolate(x, scale_factor=(2, 3), mode="nearest")), (_img(),)),
    "interp_nearest_1d": lambda: (m(lambda x: F.interpolate(x, scale_factor=2, mode="nearest")), (r(1, 3, 5),)),
    "upsample_module": lambda: (nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True), (_img(),)),
    "unfold": lambda: (m(lambda x: F.unfold(x, kernel_size=2, stride=2)), (_img(),)),
    "fold": lambda: (m(lambda x: F.fold(x, output_size=(4, 4), kernel_size=2, stride=2)), (r(1, 8, 4),)),
    "pad_reflect_replicate": lambda: (
        m(lambda x: (F.pad(x, (1, 1, 2, 0), mode="reflect"), F.pad(x, (2, 1, 1, 1), mode="replicate"))),
        (_img(),),
    ),
    "pad_circular": lambda: (m(lambda x: F.pad(x, (1, 2, 2, 0), mode="circular") + 1), (_img(),)),
    # pooling
    "adaptive_avg_1x1": lambda: (nn.AdaptiveAvgPool2d((1, 1)), (r(1, 4, 7, 5),)),
    "adaptive_avg_uneven": lambda: (nn.AdaptiveAvgPool2d((3, 4)), (r(1, 4, 7, 5),)),
    "adaptive_max": lambda: (nn.AdaptiveMaxPool2d((2, 3)), (r(1, 4, 7, 5),)),
    "max_pool1d_indices": lambda: (nn.MaxPool1d(3, stride=2, return_indices=True), (r(1, 3, 11),)),
    "max_pool2d_indices": lambda: (nn.MaxPool2d(2, return_indices=True), (_img(),)),
    "avg_pool1d": lambda: (nn.AvgPool1d(3, stride=2, padding=1, count_include_pad=False), (r(1, 3, 10),)),
    # norms
    "instance_norm2d": lambda: (_randomized(nn.InstanceNorm2d(4, affine=True)), (_img(),)),
    "batch_norm1d_ncl": lambda: (_randomized(nn.BatchNorm1d(4)), (r(2, 4, 7),)),
    "rms_norm": lambda: (nn.RMSNorm(6), (_x(),)),
    "normalize": lambda: (m(lambda x: F.normalize(x, dim=1)), (_x(),)),
    "vector_norm": lambda: (
        m(lambda x: (torch.linalg.vector_norm(x, dim=1), torch.linalg.vector_norm(x, ord=1, dim=0))),
        (_x(),),
    ),
    "cosine_similarity": lambda: (
        m(lambda a, b: (F.cosine_similarity(a, b, dim=1), F.cosine_similarity(a, b[:1], 0))),
        (_x(), _x()),
    ),
    # activations and blocks
    "hardswish_module": lambda: (nn.Hardswish(), (_x() * 4,)),
    "squeeze_excite": lambda: (_randomized(SqueezeExcite()), (r(1, 8, 6, 6),)),
    "glu_silu": lambda: (m(lambda x: F.glu(x, -1) + F.silu(x[:, :3])), (_x(),)),
    "log_sigmoid": lambda: (m(lambda x: F.logsigmoid(x)), (_x(),)),
    "gelu_tanh_prelu": lambda: (nn.Sequential(nn.GELU(approximate="tanh"), nn.PReLU(6)), (_x(),)),
    "transformer_encoder_layer": lambda: (
        nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True),
        (r(2, 5, 16),),
    ),
    "multihead_attention": lambda: (
        nn.MultiheadAttention(8, 2, batch_first=True),
        (r(1, 4, 8), r(1, 4, 8), r(1, 4, 8)),
    ),
    "sdpa_causal": lambda: (
        m(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
        (r(1, 2, 5, 4), r(1, 2, 5, 4), r(1, 2, 5, 4)),
    ),
    "masked_softmax": lambda: (
        m(_masked_attention),
        (r(2, 4, 8), r(2, 4, 8), (torch.rand(2, 4, 4) > 0.3) | torch.eye(4, dtype=torch.bool)),
    ),
    # embeddings, losses, gathers
    "embedding_bag_mean": lambda: (nn.EmbeddingBag(20, 6, mode="mean"), (torch.randint(0, 20, (3, 4)),)),
    "one_hot": lambda: (m(lambda i: F.one_hot(i, 7)), (torch.tensor([0, 3, 6, 2]),)),
    "nll_loss": lambda: (m(_nll), (r(4, 5), torch.tensor([1, 0, 4, 3]))),
    "cross_entropy": lambda: (m(lambda logits, t: F.cross_entropy(logits, t)), (r(4, 5), torch.tensor([1, 0, 4, 3]))),
    "mse_l1_loss": lambda: (m(lambda a, b: (F.mse_loss(a, b), F.l1_loss(a, b), F.smooth_l1_loss(a, b))), (_x(), _x())),
    "index_put_scatter_add": lambda: (
        m(
            lambda x, v: x.index_put((torch.tensor([0, 2]),), v[:2]).scatter_add(
                1, torch.tensor([[0, 1], [2, 2], [5, 0], [1, 1]]), v[:, :2]
            )
        ),
        (_x(), _x()),
    ),
    # reductions, scans, sorting, searching
    "einsum": lambda: (
        m(lambda a, b: torch.einsum("bij,bjk->bik", a, b) + torch.einsum("bij->bi", a)[..., None]),
        (r(2, 3, 4), r(2, 4, 3)),
    ),
    "roll": lambda: (m(lambda x: torch.roll(x, shifts=(1, -2), dims=(0, 1))), (_x(),)),
    "sort": lambda: (m(lambda x: torch.sort(x, dim=1, descending=True)), (_x(),)),
    "argsort": lambda: (m(lambda x: torch.argsort(x, dim=0)), (_x(),)),
    "median": lambda: (
        m(lambda x: (*torch.median(x, 1), *torch.median(x, 0, keepdim=True), *torch.median(x[:3], 0))),
        (_x(),),
    ),
    "min_max_dim": lambda: (m(lambda x: (torch.max(x, 1), torch.min(x, 0))), (_x(),)),
    "cumprod": lambda: (m(lambda x: torch.cumprod(x, 1)), (_x(),)),
    "logsumexp": lambda: (m(lambda x: torch.logsumexp(x, dim=1)), (_x(),)),
    "std": lambda: (m(lambda x: (torch.std(x, dim=1), torch.std(x))), (_x(),)),
    "bucketize": lambda: (m(lambda x, b: torch.bucketize(x, b)), (_x(), torch.tensor([-1.0, 0.0, 0.5, 1.0]))),
    "searchsorted": lambda: (m(lambda s, v: torch.searchsorted(s, v)), (torch.sort(r(3, 6), 1).values, r(3, 4))),
    # elementwise with tensors, masks and dtypes
    "clamp_min_tensor": lambda: (
        m(lambda x, y: torch.clamp_min(x, y) + torch.clamp(x, min=y, max=y + 1)),
        (_x(), _x()),
    ),
    "where_mask_select": lambda: (m(lambda x: torch.where(x > 0, x, torch.zeros_like(x)).sum(1)), (_x(),)),
    "bool_masks": lambda: (
        m(lambda x, mask: (x * mask, mask.logical_not() | (x > 0), torch.any(mask, 1), torch.all(mask, 0))),
        (_x(), torch.rand(4, 6) > 0.5),
    ),
    "float16_softmax_relu": lambda: (m(lambda x: torch.softmax(x * 2, -1) + x.relu()), (_x().half(),)),
    "bfloat16_matmul_sigmoid": lambda: (m(lambda x, y: (x @ y.t()).sigmoid()), (_x().bfloat16(), r(3, 6).bfloat16())),
    "bfloat16_layer_norm": lambda: (m(lambda x: F.layer_norm(x, (6,))), (_x().bfloat16(),)),
    # bfloat16 weights: constants numpy cannot hold
    "bfloat16_rms_norm_linear": lambda: (nn.Sequential(nn.RMSNorm(6), nn.Linear(6, 4)).bfloat16(), (_x().bfloat16(),)),
    "int8_arith": lambda: (m(lambda a, b: (a + b, a * 2, a - b)), (_int8(), _int8())),
    "uint8_arith": lambda: (
        m(lambda a, b: (a + b, a.to(torch.float32) / 255.0, torch.maximum(a, b))),
        (_uint8(), _uint8()),
    ),
    "int_shift": lambda: (
        m(lambda a: (a << 1, a >> 1, a << (a % 3))),
        (torch.randint(0, 100, (8,), dtype=torch.int32),),
    ),
    "int_div_rounding": lambda: (
        m(lambda a, b: (torch.div(a, b, rounding_mode="floor"), torch.div(a, b, rounding_mode="trunc"), a / b)),
        (torch.tensor([-7, 7, 9, -9]), torch.tensor([2, -2, 4, 4])),
    ),
    # a cat whose result is read only through a view (devplan's concat pass)
    "cat_then_view": lambda: (m(lambda a, b: torch.cat([a * 2, b + 1]).view(2, 4, 6)), (_x(), _x())),
    "cat_then_slice": lambda: (m(lambda a, b: torch.cat([a * 2, b + 1])[2:6]), (_x(), _x())),
    "cat_piece_reused": lambda: (m(lambda a, b: (lambda y: (torch.cat([y, b * 2]), y + 1))(a * 2)), (_x(), _x())),
    "stack_then_view": lambda: (m(lambda a, b: torch.stack([a * 2, b + 1]).view(8, 6)), (_x(), _x())),
}


def _refused(message: str):
    return pytest.mark.xfail(strict=True, raises=DevplanError, reason=message)


# Cases devplan refuses today, each in one line that names the user's node and the op.
XFAIL = {
    # Refusals naming the op, where ExecuTorch's lowering fails too.
    "adaptive_max": _refused(
        "node adaptive_max_pool2d: op aten.adaptive_max_pool2d.default has no portable kernel "
        "and torch cannot decompose it (argument of type: <class 'NotImplementedType'>); "
        "rewrite the model without it"
    ),
    "embedding_bag_mean": _refused(
        "node embedding_bag (aten.embedding_bag.padding_idx): op "
        "aten._embedding_bag_forward_only.default has no kernel in the portable library; "
        "rewrite the model without it"
    ),
    "cumprod": _refused(
        "node cumprod: op aten.cumprod.default is not supported (it lowers to prims.prod.default): "
        "no portable kernel and no decomposition; rewrite the model without it"
    ),
    "searchsorted": _refused(
        "node searchsorted: op aten.searchsorted.Tensor is not supported: no portable kernel "
        "and no decomposition; rewrite the model without it"
    ),
}
assert set(XFAIL) <= set(CASES)


def _close(got: torch.Tensor, want: torch.Tensor, runtime: str) -> None:
    assert isinstance(got, torch.Tensor), f"{runtime}: {type(got).__name__} instead of a tensor"
    assert (got.dtype, got.shape) == (want.dtype, want.shape), f"{runtime}: {got.dtype}{tuple(got.shape)}"
    if want.dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=lambda m: f"{runtime}: {m}")
    else:  # exact for integers and bools, dtype defaults for float16 and bfloat16
        torch.testing.assert_close(got, want, msg=lambda m: f"{runtime}: {m}")


@pytest.mark.parametrize("name", [pytest.param(n, marks=XFAIL[n]) if n in XFAIL else n for n in CASES])
def test_both_runtimes_match_eager(name):
    torch.manual_seed(0)
    module, args = CASES[name]()
    module.eval().requires_grad_(False)
    want = eager_outputs(module, args)[0]
    data = devplan.compile(torch.export.export(module, args, strict=False)).data
    outputs = {
        "executorch": run_executorch(data, args)[0],
        "devplan": devplan.runtime.run(data, pytree.tree_leaves(args))[0],
    }
    for runtime, got in outputs.items():
        assert len(got) == len(want), f"{runtime}: {len(got)} outputs, eager has {len(want)}"
        for g, w in zip(got, want):
            _close(g, w, runtime)


def test_a_convolution_the_portable_kernel_cannot_run_is_refused_by_name():
    """ExecuTorch's portable convolution takes 1-D and 2-D convolutions: a 3-D one would load
    and then fail when it runs, so compile refuses it naming the user's node."""
    module = nn.Conv3d(2, 3, 3, padding=1).eval()
    ep = torch.export.export(module, (torch.randn(1, 2, 4, 5, 5),))
    with pytest.raises(
        DevplanError,
        match=r"^node conv3d \(aten.conv3d.default\): ExecuTorch's portable convolution "
        r"runs 1-D and 2-D convolutions only \(its input has 5 dims\)",
    ):
        devplan.compile(ep)
