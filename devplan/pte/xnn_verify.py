"""Structural check of an XNNPACK payload's graph (schema/xnnpack.fbs, the XNNGraph FlatBuffer
ExecuTorch's XnnpackBackend builds its subgraph from), walked as verify.py walks a program:
every offset, vtable, string, vector and union tag of every table, nodes and quantization
parameters included, before the generated bindings (devplan/pte/xnn_fb) read any of it."""

from __future__ import annotations

from devplan.pte.verify import Field, _scalar, _scalars, _slots, _string, _table, _tables, _union, _Walker


def _uints(*names: str) -> tuple[Field, ...]:
    return tuple(_scalar(name, "Uint32") for name in names)


_IO = ("input_id", "output_id", "flags")
_PADDING = ("padding_top", "padding_right", "padding_bottom", "padding_left")
_DILATION = ("dilation_height", "dilation_width")

# Mirrors schema/xnnpack.fbs as verify.TABLES mirrors program.fbs (tests/pte checks it against the
# bindings). A deprecated field keeps its slot: the writers leave it out, ExecuTorch's runtime
# never reads it, so it is checked as a vector and no further (DEPRECATED).
XNN_GRAPH_TABLES: dict[str, tuple[Field, ...]] = {
    "Buffer": (_scalars("storage", "Uint8"),),
    "PerChannelGroupQuant": (
        _scalars("scale", "Float32"),
        _scalar("channel_dim", "Int32"),
        _scalar("group_size", "Int32"),
        _scalars("scale_bf16", "Uint16"),
        *_uints("scale_buffer_idx", "num_scales"),
    ),
    "PerChannelQuant": (
        _scalars("scale", "Float32"),
        _scalar("channel_dim", "Int32"),
        *_uints("scale_buffer_idx", "num_scales"),
    ),
    "PerTokenDynamicQuant": (_scalar("num_nonbatch_dims", "Int32"),),
    "PerTensorQuant": (_scalar("scale", "Float32"), _scalar("zero_point", "Int32")),
    "XNNTensorValue": (
        _scalar("datatype", "Int16"),
        _scalar("num_dims", "Uint32"),
        _scalars("dims", "Uint32"),
        *_uints("constant_buffer_idx", "external_id", "flags", "id_out"),
    ),
    "XNNQuantizedTensorValue": (
        _table("tensor_value", "XNNTensorValue"),
        _union("quant_params", "QuantParams"),
    ),
    "OutputMinMax": (_scalar("output_min", "Float32"), _scalar("output_max", "Float32")),
    "XNode": (
        _union("xnode_union", "NodeOperator"),
        _scalar("debug_handle", "Uint32"),
        _table("output_min_max", "OutputMinMax"),
    ),
    "XValue": (_union("xvalue_union", "ValueKind"),),
    "XNNStaticTranspose": (_scalar("num_dims", "Uint32"), _scalars("perm", "Uint32"), *_uints(*_IO)),
    "XNNStaticResizeBilinear2D": _uints("new_height", "new_width", *_IO),
    "XNNStaticConstantPad": (
        _scalars("pre_paddings", "Uint32"),
        _scalars("post_paddings", "Uint32"),
        _scalar("padding_value", "Float32"),
        *_uints(*_IO),
    ),
    "Node2x1": _uints("input1_id", "input2_id", "output_id", "flags"),
    "Node1x1": _uints(*_IO),
    "NodeConcatenate": _uints(
        "axis", "input1_id", "input2_id", "input3_id", "input4_id", "output_id", "flags", "input5_id"
    ),
    "XNNELU": (_scalar("alpha", "Float32"), *_uints(*_IO)),
    "XNNFullyConnected": _uints("input1_id", "filter_id", "bias_id", "output_id", "flags"),
    "NodeConv": _uints(
        *_PADDING,
        "kernel_height",
        "kernel_width",
        "subsampling_height",
        "subsampling_width",
        *_DILATION,
        "group_input_channels",
        "group_output_channels",
        "groups",
        "adjustment_height",
        "adjustment_width",
        "input1_id",
        "filter_id",
        "bias_id",
        "output_id",
        "flags",
    ),
    "NodePooling2d": _uints(
        *_PADDING, "pooling_height", "pooling_width", "stride_height", "stride_width", *_DILATION, *_IO
    ),
    "XNNStaticReshape": (_scalar("num_dims", "Uint32"), _scalars("new_shape", "Uint32"), *_uints(*_IO)),
    "XNNStaticSlice": (
        _scalar("num_dims", "Uint32"),
        _scalars("offsets", "Uint32"),
        _scalars("sizes", "Uint32"),
        *_uints(*_IO),
    ),
    "XNNScaledDotProductAttention": _uints(
        "query_id", "key_id", "value_id", "scale_id", "mask_id", "output_id", "flags"
    ),
    "XNNArgMaxPooling2d": _uints(
        *_PADDING, "pooling_height", "pooling_width", "input_id", "output_value_id", "output_index_id", "flags"
    ),
    "XNNLeakyReLU": (_scalar("negative_slope", "Float32"), *_uints(*_IO)),
    "ConstantDataOffset": (_scalar("offset", "Uint64"), _scalar("size", "Uint64"), _string("named_key")),
    "XNNGraph": (
        _string("version"),
        _tables("xnodes", "XNode"),
        _tables("xvalues", "XValue"),
        _scalar("num_externs", "Uint32"),
        _scalars("input_ids", "Uint32"),
        _scalars("output_ids", "Uint32"),
        _scalars("constant_buffer", "Uint32"),
        _scalars("mem_buffer_sizes", "Uint32"),
        _tables("constant_data", "ConstantDataOffset"),
    ),
}
DEPRECATED = frozenset(
    {
        ("Buffer", "storage"),
        ("PerChannelGroupQuant", "scale_bf16"),
        ("XNNGraph", "constant_buffer"),
        ("XNNGraph", "mem_buffer_sizes"),
    }
)

# Each operator of NodeOperator, in tag order (from 1), with the table that holds its fields.
XNODE_OPERATORS: tuple[tuple[str, str], ...] = tuple(
    (f"XNN{name}", table or f"XNN{name}")
    for name, table in (
        ("Add", "Node2x1"),
        ("FullyConnected", None),
        ("Softmax", "Node1x1"),
        ("Sigmoid", "Node1x1"),
        ("StaticTranspose", None),
        ("Clamp", "Node1x1"),
        ("Conv2d", "NodeConv"),
        ("Div", "Node2x1"),
        ("StaticResizeBilinear2D", None),
        ("StaticConstantPad", None),
        ("AvgPooling2d", "NodePooling2d"),
        ("Minimum", "Node2x1"),
        ("DepthwiseConv2d", "NodeConv"),
        ("MaxPooling2d", "NodePooling2d"),
        ("Multiply", "Node2x1"),
        ("Subtract", "Node2x1"),
        ("Floor", "Node1x1"),
        ("Convert", "Node1x1"),
        ("GlobalAvgPooling2d", "Node1x1"),
        ("StaticReshape", None),
        ("ArgMaxPooling2d", None),
        ("SquareRoot", "Node1x1"),
        ("Ceiling", "Node1x1"),
        ("Hardswish", "Node1x1"),
        ("LeakyReLU", None),
        ("Maximum", "Node2x1"),
        ("Negate", "Node1x1"),
        ("Square", "Node1x1"),
        ("ELU", None),
        ("Abs", "Node1x1"),
        ("PReLU", "Node2x1"),
        ("Concatenate2", "NodeConcatenate"),
        ("Concatenate3", "NodeConcatenate"),
        ("Concatenate4", "NodeConcatenate"),
        ("StaticSlice", None),
        ("ScaledDotProductAttention", None),
        ("BatchMatrixMultiply", "Node2x1"),
        ("Concatenate5", "NodeConcatenate"),
        ("ConvTranspose2d", "NodeConv"),
        ("ReciprocalSquareRoot", "Node1x1"),
        ("Log", "Node1x1"),
        ("Gelu", "Node1x1"),
        ("Tanh", "Node1x1"),
        ("Exp", "Node1x1"),
        ("Sin", "Node1x1"),
        ("Copy", "Node1x1"),
        ("Cos", "Node1x1"),
    )
)
# union -> the table of each member, in tag order: what the walker follows a tag to
XNN_GRAPH_UNIONS: dict[str, tuple[str, ...]] = {
    "NodeOperator": tuple(table for _, table in XNODE_OPERATORS),
    "ValueKind": ("XNNTensorValue", "XNNQuantizedTensorValue"),
    "QuantParams": ("PerChannelQuant", "PerTensorQuant", "PerTokenDynamicQuant", "PerChannelGroupQuant"),
}
XNN_GRAPH_ROOT = "XNNGraph"
DAMAGED = "the XNNPACK payload is damaged"


def verify_xnn_graph(data: bytes, name: str) -> None:
    """Check all of an XNNPACK payload's XNNGraph FlatBuffer (`data`, the graph alone)."""
    walker = _Walker(
        data,
        len(data),
        name,
        whole_file=False,
        compiled=_COMPILED,
        damaged=DAMAGED,
        unions=XNN_GRAPH_UNIONS,
    )
    walker.table(walker.follow(0, None), XNN_GRAPH_ROOT, None, 0)


_COMPILED = {name: _slots(fields) for name, fields in XNN_GRAPH_TABLES.items()}
