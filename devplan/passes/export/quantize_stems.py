"""dynamic-int8 leaves float a convolution that reads a zero pad of the model's own input.

ExecuTorch's XNNPACK lowering writes such a pad, once the convolution after it is dynamically
quantized, with its paddings in NCHW's order on the NHWC tensor the delegate permutes its
input to; the convolution then reads 3 channels from a tensor of 4 or 5, and XNNPACK refuses
the whole program on ExecuTorch's runtime ("Propagating input shapes failed",
devplan/inspection/xnnshapes.py names the node). MobileNetV2's and EfficientNet's stems pad so
(transformers pads as TensorFlow does), and ExecuTorch's own flow's program of the same
quantizer configuration fails the same way. Left float, the stem lowers as in a float program
and the program runs (a pad elsewhere, of a tensor the delegate computed, is written right and
its convolution stays quantized); it is one convolution of the image's few channels."""

from __future__ import annotations

import torch

_PADS = (torch.ops.aten.pad.default, torch.ops.aten.constant_pad_nd.default)
# conv2d.padding: a convolution whose padding is a word ("valid", EfficientNet's stem's)
_CONVOLUTIONS = (torch.ops.aten.conv2d.default, torch.ops.aten.conv2d.padding, torch.ops.aten.convolution.default)


def leave_padded_input_convolutions_float(model: torch.fx.GraphModule) -> None:
    """Take back the quantizer's annotation of each 2-D convolution whose input is a pad of
    one of the model's inputs."""
    for node in model.graph.nodes:
        if node.op == "call_function" and node.target in _CONVOLUTIONS and _pads_an_input(node.args[0]):
            node.meta.pop("quantization_annotation", None)


def _pads_an_input(node: object) -> bool:
    return (
        isinstance(node, torch.fx.Node)
        and node.target in _PADS
        and isinstance(node.args[0], torch.fx.Node)
        and node.args[0].op == "placeholder"
    )
