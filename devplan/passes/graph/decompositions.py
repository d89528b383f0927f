"""devplan's own decompositions, for ops whose torch decomposition ends in ops the portable
library has no kernel for (prims, in-place copies, sort), or takes a longer road than needed."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch


@functools.cache
def table() -> dict[Any, Callable[..., Any]]:
    """op -> the function that decomposes it: torch's tables, then devplan's own."""
    # torch's full table covers a few ops (e.g. _unsafe_view) that the core ATen table leaves alone
    # and prims that some decompositions emit; batch norm in eval goes straight to its
    # inference kernel instead of through the training form's scratch buffers
    ours: dict[Any, Callable[..., Any]] = {
        torch.ops.prims.convert_element_type.default: lambda x, dtype: torch.ops.aten._to_copy.default(x, dtype=dtype),
        torch.ops.aten.batch_norm.default: _batch_norm,
        torch.ops.aten.rms_norm.default: _rms_norm,
        torch.ops.aten.cosine_similarity.default: _cosine_similarity,
        torch.ops.aten.pad.default: _pad,
        torch.ops.aten.sort.default: _sort,
        torch.ops.aten.median.dim: _median,
        # counting and grouped products of mixture-of-experts routing
        torch.ops.aten.histc.default: histc,
        torch.ops.aten._grouped_mm.default: grouped_mm,
        # torch's goes through empty_permuted, which has no kernel; every planned tensor is contiguous
        torch.ops.aten.empty_like.default: _empty_like,
        # and ExecuTorch's lowering runs torch's, so its graphs may hold the empty_permuted itself
        torch.ops.aten.empty_permuted.default: _empty_permuted,
        # views that restride: the portable library has as_strided_copy, which reads its input
        # as the contiguous tensor every planned value is; the in-place forms (adaptive
        # pooling's restride of its fresh mean on a channels-last input) as the functional one
        torch.ops.aten.as_strided.default: as_strided,
        torch.ops.aten.as_strided_.default: as_strided,
        torch.ops.aten.as_strided_copy.default: as_strided,
        torch.ops.aten.squeeze_.dim: torch.ops.aten.squeeze.dim,
        torch.ops.aten.squeeze_.default: torch.ops.aten.squeeze.default,
        torch.ops.aten.squeeze_.dims: torch.ops.aten.squeeze.dims,
        torch.ops.aten.unsqueeze_.default: torch.ops.aten.unsqueeze.default,
        torch.ops.aten.transpose_.default: torch.ops.aten.transpose.int,
        torch.ops.aten.t_.default: torch.ops.aten.t.default,
        # `x << 1` exports as the dunder op, which has no kernel of its own
        torch.ops.aten.__lshift__.Scalar: torch.ops.aten.bitwise_left_shift.Tensor_Scalar,
        torch.ops.aten.__lshift__.Tensor: torch.ops.aten.bitwise_left_shift.Tensor,
        torch.ops.aten.__rshift__.Scalar: torch.ops.aten.bitwise_right_shift.Tensor_Scalar,
        torch.ops.aten.__rshift__.Tensor: torch.ops.aten.bitwise_right_shift.Tensor,
    }
    return {**torch._decomp.decomposition_table, **torch._decomp.core_aten_decompositions(), **ours}


# Ops of libraries devplan does not import (they exist only once their library is), by name
NAMED: dict[str, Callable[..., Any]] = {
    "transformers::grouped_mm_fallback": lambda input, weight, offs: grouped_mm(input, weight, offs)
}


def decomposition(op: torch._ops.OpOverload) -> Callable[..., Any] | None:
    """The function that decomposes op, from torch's tables, devplan's, or NAMED; None if none."""
    found = table().get(op)
    return found if found is not None else NAMED.get(op._schema.name) if op._overloadname == "default" else None


def as_strided(
    x: torch.Tensor, size: Sequence[int], stride: Sequence[int], storage_offset: int | None = None
) -> torch.Tensor:
    """`x.as_strided(size, stride, offset)` over the bytes every planned value has, its
    elements in row-major order: x's own layout first made row-major (a permute to the order
    of its strides, when x is a dense non-contiguous view such as a transpose); the identity
    when the new strides are x's; a slice and a view when they are contiguous ones; otherwise
    as_strided_copy, the portable kernel, on the row-major tensor."""
    from devplan.errors import DevplanError

    offset = x.storage_offset() if storage_offset is None else storage_offset
    size, stride = list(size), list(stride)
    order = sorted(range(x.dim()), key=lambda d: (x.shape[d] == 1, -x.stride()[d], d))
    expected, dense = 1, True
    for d in reversed([d for d in order if x.shape[d] != 1]):
        dense, expected = dense and x.stride(d) == expected, expected * x.shape[d]
    if x.storage_offset() != 0 or not dense:
        raise DevplanError(
            f"as_strided reads a view of a larger tensor (sizes {list(x.shape)}, strides "
            f"{list(x.stride())}, offset {x.storage_offset()}), which devplan stores apart; "
            f"rewrite the model without it"
        )
    if size == list(x.shape) and offset == 0 and _significant(size, stride) == _significant(x.shape, x.stride()):
        return x
    flat = x.permute(order) if order != list(range(x.dim())) else x
    numel = 1
    for n in size:
        numel *= n
    contiguous = [1] * len(size)
    for d in range(len(size) - 2, -1, -1):
        contiguous[d] = contiguous[d + 1] * size[d + 1]
    if _significant(size, stride) == _significant(size, contiguous) and offset + numel <= x.numel():
        return flat.reshape(-1)[offset : offset + numel].reshape(size)
    copied: torch.Tensor = torch.ops.aten.as_strided_copy.default(flat.contiguous(), size, stride, offset)
    return copied


def _significant(sizes: Sequence[int], strides: Sequence[int]) -> list[tuple[int, int]]:
    """The (size, stride) pairs of a layout that place elements: a dim of size 1 places none."""
    return [(n, s) for n, s in zip(sizes, strides) if n != 1]


def _empty_like(
    x: torch.Tensor, *, dtype: torch.dtype | None = None, device: torch.device | None = None, **_: Any
) -> torch.Tensor:
    return torch.empty(x.shape, dtype=dtype or x.dtype, device=device or x.device)


def _empty_permuted(
    size: Sequence[int],
    physical_layout: Sequence[int],
    *,
    dtype: torch.dtype | None = None,
    device: torch.device | None = None,
    **_: Any,
) -> torch.Tensor:
    return torch.empty(size, dtype=dtype, device=device)


def _batch_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    mean: torch.Tensor | None,
    var: torch.Tensor | None,
    training: bool,
    momentum: float,
    eps: float,
    cudnn_enabled: bool,
) -> torch.Tensor:
    normed: torch.Tensor = (
        torch.ops.aten.batch_norm.default(x, weight, bias, mean, var, training, momentum, eps, cudnn_enabled)
        if training or mean is None
        else torch.ops.aten._native_batch_norm_legit_no_training.default(x, weight, bias, mean, var, momentum, eps)[0]
    )
    return normed


def _rms_norm(
    x: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None = None, eps: float | None = None
) -> torch.Tensor:
    """As ATen computes it: in float32 for half types, eps that type's epsilon by default
    (torch's own decomposition of it goes through prims that have no kernel)."""
    wide = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    eps = torch.finfo(wide.dtype).eps if eps is None else eps
    dims = tuple(range(-len(normalized_shape), 0))
    y = (wide * torch.rsqrt(wide.pow(2).mean(dims, keepdim=True) + eps)).to(x.dtype)
    return y * weight if weight is not None else y


def _cosine_similarity(x1: torch.Tensor, x2: torch.Tensor, dim: int = 1, eps: float = 1e-8) -> torch.Tensor:
    """ATen's formula without its in-place clamps (torch's decomposition keeps them)."""
    broadcast: tuple[torch.Tensor, torch.Tensor] = torch.broadcast_tensors(x1, x2)  # type: ignore[no-untyped-call]  # torch leaves it untyped
    x1, x2 = broadcast
    norm1: torch.Tensor = torch.linalg.vector_norm(x1, 2, dim, keepdim=True).clamp_min(eps)
    norm2: torch.Tensor = torch.linalg.vector_norm(x2, 2, dim, keepdim=True).clamp_min(eps)
    return ((x1 / norm1) * (x2 / norm2)).sum(dim)


def _sort(x: torch.Tensor, dim: int = -1, descending: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """A full sort is a top-k of every element: the portable library has topk, not sort."""
    values, indices = torch.topk(x, x.shape[dim] if x.dim() else 1, dim, largest=descending, sorted=True)
    return values, indices


def _median(x: torch.Tensor, dim: int, keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The lower median is the ((n - 1) // 2)-th smallest: the last of a sorted top-k."""
    k = (x.shape[dim] - 1) // 2
    values, indices = torch.topk(x, k + 1, dim, largest=False, sorted=True)
    values, indices = values.narrow(dim, k, 1), indices.narrow(dim, k, 1)
    return (values, indices) if keepdim else (values.squeeze(dim), indices.squeeze(dim))


def _pad(x: torch.Tensor, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> torch.Tensor:
    """Circular padding as concatenations of the wrapped-around slices (torch's decomposition
    copies into slices in place); other modes as torch decomposes them."""
    if mode != "circular" or any(p < 0 for p in pad):
        padded: torch.Tensor = torch.ops.aten.pad.default(x, pad, mode, value)
        return padded
    for i in range(len(pad) // 2):
        dim, before, after = x.dim() - 1 - i, pad[2 * i], pad[2 * i + 1]
        size = x.shape[dim]
        x = torch.cat([x.narrow(dim, size - before, before), x, x.narrow(dim, 0, after)], dim)
    return x


def histc(x: torch.Tensor, bins: int = 100, min: float = 0, max: float = 0) -> torch.Tensor:
    """`torch.histc` as comparisons with its bin edges: an element counts in bin b when
    edges[b] <= x < edges[b + 1] (the last bin also takes x == max), elements outside
    [min, max] in none. The edges are those ATen's kernel compares with, linspace(min, max,
    bins + 1) in x's dtype: below halfway min + i * step, from there max - (bins - i) * step.
    min == max means the data's own range, widened by one each way when it is one value."""
    flat = x.reshape(-1)
    if min == max:
        low, high = torch.amin(flat, 0), torch.amax(flat, 0)
        same = low == high
        low, high = torch.where(same, low - 1, low), torch.where(same, high + 1, high)
    else:
        low, high = torch.full((), min, dtype=x.dtype), torch.full((), max, dtype=x.dtype)
    step = (high - low) / bins
    i = torch.arange(bins + 1, dtype=x.dtype)
    edges = torch.where(i < (bins + 1) // 2, low + i * step, high - (bins - i) * step)
    column = flat.unsqueeze(1)
    above = column >= edges[:-1]
    last = column <= edges[-1:]
    below = torch.cat([column < edges[1:-1], last], 1) if bins > 1 else last  # (no empty pieces: one bin has none)
    return (above & below).to(x.dtype).sum(0)


def bincount(x: torch.Tensor, weights: torch.Tensor | None = None, minlength: int = 0, *, size: int) -> torch.Tensor:
    """`torch.bincount` with `size` counts, the size export bounded its result to: the
    (weighted) number of elements equal to each of 0 .. size - 1."""
    hits = x.unsqueeze(1) == torch.arange(size, dtype=x.dtype)
    if weights is None:
        return hits.sum(0)
    dtype = torch.float32 if weights.dtype == torch.float32 else torch.float64
    return torch.where(hits, weights.to(dtype).unsqueeze(1), 0).sum(0)


def grouped_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    offs: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """`torch._grouped_mm` (and transformers' grouped_mm_fallback, the same product) without
    its data-dependent slices: every group's product over all rows (or columns, or the shared
    dimension), each kept where the offsets put it in that group, zeros past the last offset.
    The cost is the number of groups times one product, with no size that the data chooses."""
    if bias is not None:
        raise NotImplementedError("grouped_mm with a bias")
    if a.dim() == 3 and b.dim() == 3:
        out = torch.bmm(a, b)
    elif a.dim() == 2 and b.dim() == 3:  # rows grouped: (S, K) x (G, K, N) -> (S, N)
        groups, k, n = b.shape
        each = torch.mm(a, b.permute(1, 0, 2).reshape(k, groups * n)).reshape(a.shape[0], groups, n)
        out = torch.where(_in_group(offs, a.shape[0]).t().unsqueeze(2), each, 0).sum(1)
    elif a.dim() == 3 and b.dim() == 2:  # columns grouped: (G, M, K) x (K, N) -> (M, N)
        out = torch.where(_in_group(offs, b.shape[1]).unsqueeze(1), torch.matmul(a, b), 0).sum(0)
    else:  # the shared dimension grouped: (M, K) x (K, N) -> (G, M, N)
        mask = _in_group(offs, a.shape[1]).unsqueeze(1)
        out = torch.bmm(torch.where(mask, a.unsqueeze(0), 0), b.unsqueeze(0).expand(mask.shape[0], *b.shape))
    return out.to(out_dtype) if out_dtype is not None else out


def _in_group(offs: torch.Tensor | None, count: int) -> torch.Tensor:
    """(groups, count) booleans: whether index j lies in group g, offs[g - 1] <= j < offs[g]."""
    if offs is None:
        raise NotImplementedError("grouped_mm of a 2-D operand without offsets")
    index = torch.arange(count).unsqueeze(0)
    ends = offs.to(torch.int64).unsqueeze(1)
    starts = torch.cat([torch.zeros(1, 1, dtype=torch.int64), ends[:-1]])
    return (index >= starts) & (index < ends)
