"""Kernels that write into their planned bytes on a device where torch's out variant does not.

Many of torch's `.out` ops are generated wrappers: they compute a fresh result and copy it into
`out`, so on a GPU every such call allocates its whole result again beside the plan (measured on
an H200: a batch-8 256x256 conv net's `relu.out` and `convolution.out` took 64 and 192 MiB more
than its plan). Each kernel here computes the same values with ops that write `out` itself (a
view copied into it, a fill, a structured op's own out kernel, cuDNN's out convolution), and
runs only where `out` is on a CUDA device: on the host the program's own op runs as before.
What still allocates (cuDNN's workspace, the norms' results) is what benchmarks/gpu.py reports
by operator."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

aten = torch.ops.aten
Kernel = Callable[..., torch.Tensor]


def _view_copy(view: Callable[..., torch.Tensor]) -> Kernel:
    """A `*_copy` op as its view copied into `out` (the generated kernel makes the copy first)."""

    def kernel(self: torch.Tensor, *args: Any, out: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        kwargs.pop("implicit", None)  # expand_copy's flag changes nothing a view sees
        result = view(self, *args, **kwargs)
        return out.copy_(result) if out.shape == result.shape else out.resize_(result.shape).copy_(result)

    return kernel


def _relu(self: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    return torch.clamp_min(self, 0, out=out)  # clamp_min's out kernel writes `out`; relu.out's allocates


def _full_like(
    self: torch.Tensor, fill_value: float, *, memory_format: torch.memory_format | None = None, out: torch.Tensor
) -> torch.Tensor:
    return out.fill_(fill_value)


def _embedding(
    weight: torch.Tensor,
    indices: torch.Tensor,
    padding_idx: int = -1,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
    *,
    out: torch.Tensor,
) -> torch.Tensor:
    if weight.dim() != 2 or not out.is_contiguous() or out.shape != (*indices.shape, weight.shape[1]):
        aten.embedding.out(weight, indices, padding_idx, scale_grad_by_freq, sparse, out=out)  # returns `out`
        return out
    torch.index_select(weight, 0, indices.reshape(-1), out=out.view(-1, weight.shape[1]))
    return out


def _scalar(op: Callable[..., torch.Tensor], alpha: bool) -> Kernel:
    """A `.Scalar_out` op through the Tensor overload's out kernel (the scalar wrapped), which
    writes `out`; the Scalar one's generated kernel allocates. `alpha`: the op takes one (add,
    sub: positional in the schema, keyword-only in torch's Python)."""

    def kernel(self: torch.Tensor, other: float, alpha: float = 1, *, out: torch.Tensor) -> torch.Tensor:
        return op(self, other, alpha=alpha, out=out)

    return kernel if alpha else lambda self, other, *, out: op(self, other, out=out)


def _convolution(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    transposed: bool,
    output_padding: list[int],
    groups: int,
    *,
    out: torch.Tensor,
) -> torch.Tensor:
    """cuDNN's out convolution, then the bias added in place, where cuDNN runs it; else torch's."""
    if (
        transposed
        or input.dim() != 4
        or not torch.backends.cudnn.is_available()  # type: ignore[no-untyped-call]  # torch leaves it untyped
        or not torch.backends.cudnn.enabled
        or input.dtype not in (torch.float32, torch.float16, torch.bfloat16)
        or not out.is_contiguous()
    ):
        aten.convolution.out(
            input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, out=out
        )
        return out
    aten.cudnn_convolution.out(
        input,
        weight,
        padding,
        stride,
        dilation,
        groups,
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.allow_tf32,
        out=out,
    )
    if bias is not None:
        out.add_(bias.view(1, -1, 1, 1))
    return out


IN_PLACE: dict[str, Kernel] = {
    "aten::relu.out": _relu,
    "aten::full_like.out": _full_like,
    "aten::embedding.out": _embedding,
    "aten::convolution.out": _convolution,
    **{
        f"aten::{name}.Scalar_out": _scalar(getattr(torch, name), name in ("add", "sub"))
        for name in ("add", "sub", "mul", "div")
    },
    **{
        f"aten::{copy}": _view_copy(view)
        for copy, view in (
            ("transpose_copy.int_out", aten.transpose.int),
            ("permute_copy.out", aten.permute.default),
            ("expand_copy.out", aten.expand.default),
            ("slice_copy.Tensor_out", aten.slice.Tensor),
            ("select_copy.int_out", aten.select.int),
            ("unsqueeze_copy.out", aten.unsqueeze.default),
            ("squeeze_copy.dims_out", aten.squeeze.dims),
            ("view_copy.out", aten.view.default),
            ("t_copy.out", aten.t.default),
            ("alias_copy.out", aten.alias.default),
        )
    },
}


@dataclass(frozen=True)
class OnDevice:
    """torch's op, or on a CUDA device the kernel that writes its out tensor in place."""

    _schema: torch._C.FunctionSchema
    op: Any
    kernel: Kernel

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out = kwargs.get("out")
        if isinstance(out, torch.Tensor) and out.is_cuda:
            return self.kernel(*args, **kwargs)
        return self.op(*args, **kwargs)
