"""passes/export/slices.py: a slice of an op over broadcast operands becomes the op over their slices,
a size the program computes among those operands read whole."""

from __future__ import annotations

import torch
from torch._guards import detect_fake_mode

from devplan.passes.export.slices import SLICE, sink_slices


class AddsItsBatch(torch.nn.Module):
    def forward(self, x):
        return (x + x.shape[0])[:, 2:6]


def test_a_slice_sinks_past_an_op_that_adds_a_computed_size():
    batch = torch.export.Dim("batch", max=10)
    ep = torch.export.export(AddsItsBatch(), (torch.randn(3, 8),), dynamic_shapes={"x": {0: batch}})
    gm = ep.graph_module
    fake = detect_fake_mode([n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"])
    assert sink_slices(gm, fake) == 1
    gm.recompile()
    (sliced,) = [n for n in gm.graph.nodes if n.target is SLICE]
    assert sliced.args[0].op == "placeholder"  # the input sliced, the sum made of the slice
    x = torch.randn(5, 8)
    torch.testing.assert_close(gm(x)[0], AddsItsBatch()(x))
