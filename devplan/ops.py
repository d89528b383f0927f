"""Op tables in one place: which kernels the target runtime has, and how a functional
ATen op maps to the `.out` overload that runs it.

executorch_ops.txt lists the operators that ExecuTorch 1.5.1's kernel libraries register
(`python -m devplan.runtime.executorch` writes it from the libraries themselves, and a test
checks it still matches); QUANTIZED holds the out schemas of the quantized kernels that
PT2E-quantized programs call."""

from __future__ import annotations

import functools
import math
import operator
from importlib import resources
from typing import AbstractSet

import torch
from torch._ops import OpOverload

from devplan.pte.kinds import COPIES

# The operators the runtime a program targets has kernels for: ExecuTorch's portable library
# (with its prim ops, dim order ops and et_copy), its quantized library and its LLM custom ops
REGISTERED: frozenset[str] = frozenset(resources.files("devplan").joinpath("executorch_ops.txt").read_text().split())

# PT2E quantization (torchao's convert_pt2e) leaves quantize and dequantize ops in a graph.
# ExecuTorch's quantized kernel library, linked beside the portable one, runs their out
# variants; torch defines only the functional forms (ExecuTorch's Python adds the rest), so
# the out schemas, as that library declares them, are written here under the functional
# overload each one runs.
_Q = "quantized_decomposed::"
_QPARAMS = "int quant_min, int quant_max, ScalarType dtype"
QUANTIZED: dict[str, torch._C.FunctionSchema] = {
    name: torch._C.parse_schema(_Q + out)
    for name, out in {
        _Q + "quantize_per_tensor": f"quantize_per_tensor.out(Tensor input, float scale, int zero_point, {_QPARAMS}, "
        "*, Tensor(a!) out) -> Tensor(a!)",
        _Q
        + "quantize_per_tensor.tensor": f"quantize_per_tensor.Tensor_out(Tensor input, Tensor scale, Tensor zero_point, "
        f"{_QPARAMS}, *, Tensor(a!) out) -> Tensor(a!)",
        _Q
        + "dequantize_per_tensor": f"dequantize_per_tensor.out(Tensor input, float scale, int zero_point, {_QPARAMS}, "
        "*, ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)",
        _Q
        + "dequantize_per_tensor.tensor": f"dequantize_per_tensor.Tensor_out(Tensor input, Tensor scale, Tensor zero_point, "
        f"{_QPARAMS}, *, ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)",
        _Q
        + "quantize_per_channel": f"quantize_per_channel.out(Tensor input, Tensor scales, Tensor zero_points, int axis, "
        f"{_QPARAMS}, *, Tensor(a!) out) -> Tensor(a!)",
        _Q + "dequantize_per_channel": f"dequantize_per_channel.out(Tensor input, Tensor scales, Tensor? zero_points, "
        f"int axis, {_QPARAMS}, *, ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)",
        _Q
        + "choose_qparams.tensor": "choose_qparams.Tensor_out(Tensor input, int quant_min, int quant_max, float eps, "
        "ScalarType dtype, *, Tensor(a!) scale_out, Tensor(b!) zero_point_out) "
        "-> (Tensor(a!), Tensor(b!))",
        _Q
        + "choose_qparams_per_token_asymmetric": "choose_qparams_per_token_asymmetric.out(Tensor input, ScalarType dtype, "
        "*, Tensor(a!) scale_out, Tensor(b!) zero_point_out) "
        "-> (Tensor(a!), Tensor(b!))",
        _Q
        + "quantize_per_token": f"quantize_per_token.out(Tensor input, Tensor scales, Tensor zero_points, {_QPARAMS}, "
        "*, Tensor(a!) out) -> Tensor(a!)",
        _Q + "dequantize_per_token": f"dequantize_per_token.out(Tensor input, Tensor scales, Tensor zero_points, "
        f"{_QPARAMS}, ScalarType output_dtype, *, Tensor(a!) out) -> Tensor(a!)",
    }.items()
}

# The Python module whose import registers the ops of a library namespace that torch does not
# define itself: `--kernels NAMESPACE` imports it (transformers registers its ops in a module
# that `import transformers` alone does not import), and the hint for an unregistered op names it
OP_LIBRARIES = {
    "transformers": "transformers.integrations.moe",
    "llama": "executorch.extension.llm.custom_ops.custom_ops",
    "quantized_decomposed": "executorch.exir.passes._quant_patterns_and_replacements",
}

# Ops whose (first) result element i depends only on element i of a same-shaped input
# (per-channel constants aside), so the result may take over the storage of such an input
# that dies at this op (the in-place pass reads this).
ELEMENTWISE = frozenset(
    f"aten::{name}"
    for name in (
        "abs ceil clamp cos exp floor gelu hardtanh leaky_relu log neg reciprocal relu round "
        "rsqrt sigmoid sign sin sqrt tanh trunc add sub mul div pow maximum minimum where masked_fill "
        "_native_batch_norm_legit_no_training"
    ).split()
)


# Ops whose result holds exactly the bytes of their first argument (every tensor devplan
# plans is contiguous): they need no kernel and no memory, the result views the input.
SAME_BYTES = frozenset(
    {
        "aten::view_copy.out",
        "aten::unsqueeze_copy.out",
        "aten::squeeze_copy.dim_out",
        "aten::squeeze_copy.dims_out",
        "aten::alias_copy.out",
        "aten::clone.out",
        "aten::detach_copy.out",
        "aten::lift_fresh_copy.out",
    }
)


# ExecuTorch's copies between the host and a device (self, out) -> out: named where the
# torch-free inspection reads them too
TO_DEVICE, TO_HOST = COPIES

# Input ranks a portable kernel accepts where its schema allows more: a program outside them
# would fail only when it runs, so such a node is decomposed instead, or, with no
# decomposition, refused by name.
RANKS = {
    "aten::convolution.out": ((3, 4), "ExecuTorch's portable convolution runs 1-D and 2-D convolutions only"),
    "aten::linear.out": (tuple(range(2, 17)), "ExecuTorch's portable linear takes inputs of 2 or more dims"),
}

# Ops whose results' shapes or dtypes depend on the device whose kernel runs them (name -> those
# results, by position among the op's outs): CUDA's batch norms return the saved mean and inverse
# std with one element per channel, the CPU's with none; CUDA's layer norm keeps a bfloat16
# input's mean and inverse std in float, the CPU's in bfloat16. A delegate plans what its device's kernel
# writes (passes/graph/device_results.py, from torch's meta functions); a runtime that runs such a
# program on another device's kernels lets these results take that kernel's shape within their
# planned bytes (runtime/steps.py). Test-checked against the meta functions over the device corpus.
DEVICE_SHAPED = {
    f"aten::{op}": (1, 2)
    for op in (
        "_native_batch_norm_legit_no_training.out",
        "_native_batch_norm_legit.out",
        "_native_batch_norm_legit.no_stats_out",
        "native_batch_norm.out",
        "native_layer_norm.out",
    )
}

# Ops whose portable out kernel checks its results' sizes instead of setting them: a dynamic
# input goes through torch's decomposition instead (split -> split_with_sizes, unbind -> select,
# which set them).
CHECKS_OUT_SIZES = frozenset({torch.ops.aten.split.Tensor, torch.ops.aten.unbind.int})

# ExecuTorch's view of a dynamic tensor: its result takes the source's bytes under the shape
# the size list gives at run time, the way a static view shares them at plan time.
ET_VIEW = "executorch_prim::et_view.default"

# Ops on sizes that a dynamic shape makes known only while the program runs (a flatten's
# batch size, say): the fx target, and the runtime's name for it. Each writes a number value
# of its own, which later ops' size lists refer to; calling the target on real tensors and
# numbers computes what the runtime's kernel does.
NUMBER_OPS = {
    torch.ops.aten.sym_size.int: "aten::sym_size.int",
    torch.ops.aten._local_scalar_dense.default: "aten::_local_scalar_dense",  # tensor.item(): an LLM's cache position
    torch.ops.aten.sym_numel.default: "aten::sym_numel",
    operator.add: "executorch_prim::add.Scalar",
    operator.sub: "executorch_prim::sub.Scalar",
    operator.mul: "executorch_prim::mul.Scalar",
    operator.floordiv: "executorch_prim::floordiv.Scalar",
    operator.truediv: "executorch_prim::truediv.Scalar",
    operator.mod: "executorch_prim::mod.Scalar",
    operator.neg: "executorch_prim::neg.Scalar",
    torch.sym_max: "executorch_prim::sym_max.Scalar",
    torch.sym_min: "executorch_prim::sym_min.Scalar",
    torch.sym_float: "executorch_prim::sym_float.Scalar",
    torch.sym_int: "executorch_prim::sym_int.Scalar",
    torch.sym_not: "executorch_prim::sym_not.Scalar",
    math.ceil: "executorch_prim::ceil.Scalar",
    math.trunc: "executorch_prim::trunc.Scalar",
    round: "executorch_prim::round.Scalar",
    operator.eq: "executorch_prim::eq.Scalar",
    operator.gt: "executorch_prim::gt.Scalar",
    operator.lt: "executorch_prim::lt.Scalar",
    operator.ge: "executorch_prim::ge.Scalar",
    operator.le: "executorch_prim::le.Scalar",
}


def schema_name(schema: torch._C.FunctionSchema) -> str:
    """The runtime's name for an operator schema: 'aten::add.out'."""
    return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


def kernel_name(op: OpOverload) -> str:
    return schema_name(op._schema)


# ExecuTorch's quantized kernel library also runs the embedding lookups of its LLM quantization
# recipes (export_llama's --embedding-quantize); ExecuTorch's Python registers their ops with torch
# (OP_LIBRARIES' quantized_decomposed), out variants with no kernel of torch's own.
QUANTIZED_EMBEDDINGS = frozenset(
    f"quantized_decomposed::embedding_{bits}.{overload}"
    for bits in ("byte", "4bit", "2bit")
    for overload in ("out", "dtype_out")
)
# Namespaces of torch's own operators: an op of any other namespace comes from a kernel library
# the user loads (ExecuTorch's llama:: custom ops register a .out overload beside each op, and
# the runtime the program targets links their kernels), so its out variant is called by name.
TORCH_NAMESPACES = frozenset({"aten", "prim", "prims", "quantized_decomposed"})
# Namespaces whose operators the runtime has exactly as REGISTERED lists them: torch's and those
# of ExecuTorch's libraries. Another namespace is a kernel library the user links (--kernels).
LISTED_NAMESPACES = TORCH_NAMESPACES | {name.partition("::")[0] for name in REGISTERED}


def unregistered(name: str) -> bool:
    """Whether the runtime a program targets refuses to load a program calling operator `name`
    ("aten::erfinv.out"): a name of torch's or ExecuTorch's namespaces that its kernel libraries
    do not register."""
    return name.partition("::")[0] in LISTED_NAMESPACES and name not in REGISTERED


def has_kernel(schema: torch._C.FunctionSchema) -> bool:
    """Whether an out variant's schema names a kernel the program may call: one ExecuTorch's
    kernel libraries register, or an op of a kernel library the user links."""
    name = schema_name(schema)
    return name in REGISTERED or (not unregistered(name) and any(a.is_out for a in schema.arguments))


def torch_op(name: str) -> OpOverload | None:
    """torch's op "namespace::op.overload", or None: a name from the file reaches getattr only
    as an op's name (never a dunder), and only an OpOverload comes back."""
    qualified, _, overload = name.partition(".")
    namespace, _, op = qualified.partition("::")
    if not (namespace and op) or any(part.startswith("__") for part in (namespace, op, overload)):
        return None
    packet = getattr(getattr(torch.ops, namespace, None), op, None)
    found = getattr(packet, overload or "default", None) if packet is not None else None
    return found if isinstance(found, OpOverload) else None


# ExecuTorch's dim order ops (no schema in torch): their out tensor last, after a dim order
DIM_ORDER_OPS = frozenset(
    {
        "dim_order_ops::_to_dim_order_copy.out",
        "dim_order_ops::_clone_dim_order.out",
        "dim_order_ops::_empty_dim_order.out",
    }
)
NUMBER_NAMES = frozenset(NUMBER_OPS.values())
_QUANTIZED_OUTS = {schema_name(schema): schema for schema in QUANTIZED.values()}


def op_schema(name: str) -> torch._C.FunctionSchema | None:
    """The schema of the kernel a program calls by `name`: an ExecuTorch quantized out
    variant's (which torch does not define), else torch's op's; None for an op torch does not
    know. The compiler's checks read it here; the runtime keeps its own kernel table."""
    if name in _QUANTIZED_OUTS:
        return _QUANTIZED_OUTS[name]
    op = torch_op(name)
    return op._schema if op is not None else None


@functools.cache
def written_inputs(name: str) -> tuple[int, ...]:
    """Positions of the arguments other than outs that kernel `name` writes in place
    (`llama::update_cache.out` writes the cache it is given); () when torch does not know it."""
    op = torch_op(name)
    arguments = op._schema.arguments if op is not None else ()
    return tuple(
        i for i, a in enumerate(arguments) if not a.is_out and a.alias_info is not None and a.alias_info.is_write
    )


# Factory options (arange(..., dtype=...)) that an out variant takes from its out tensor
_OPTIONS = {"dtype", "layout", "device", "pin_memory"}


def _signature(schema: torch._C.FunctionSchema, drop: AbstractSet[str] = frozenset()) -> list[tuple[str, str]]:
    return [(a.name, str(a.type)) for a in schema.arguments if not a.is_out and a.name not in drop]


def is_view(op: OpOverload) -> bool:
    """True for ops whose result aliases their input (slice, expand, split, ...)."""
    return any(r.alias_info is not None and not r.alias_info.is_write for r in op._schema.returns)


@functools.cache
def out_schema(op: OpOverload) -> torch._C.FunctionSchema | None:
    """The schema of the `.out` overload with the same non-out arguments as `op` (views map
    to their `_copy` forms), found from torch's schemas or QUANTIZED; None if there is none."""
    schema = op._schema
    namespace, name = schema.name.split("::")
    if schema.arguments and any(a.is_out for a in schema.arguments):
        return schema
    if kernel_name(op) in QUANTIZED:
        return QUANTIZED[kernel_name(op)]
    packet = getattr(getattr(torch.ops, namespace), f"{name}_copy" if is_view(op) else name, None)
    if packet is None:
        return None
    for overload in sorted(packet.overloads()):
        candidate = getattr(packet, overload)
        cs: torch._C.FunctionSchema = candidate._schema
        if not any(a.is_out for a in cs.arguments):
            continue
        # options the out variant lacks are carried by the out tensor's own dtype
        drop = _OPTIONS - {a.name for a in cs.arguments}
        if _signature(cs, drop) == _signature(schema, drop):
            return cs
    return None


def runnable(op: OpOverload) -> bool:
    """True when the op, or its out variant, has a kernel in a library the program may call (has_kernel)."""
    if op in NUMBER_OPS:
        return True
    out = out_schema(op)
    return out is not None and has_kernel(out)
