"""Tables repeated over the batch are read once: a gather whose index is a table expanded over
batch dims (index_select over flattened rows, not an int64 copy per batch entry), a batched
matmul against a table repeated over the batch (one matmul per entry, not a repeated copy)."""

import pytest
import torch

import devplan
from devplan.runtime import run
from testbed.models import eager_outputs, run_executorch


class RelativeGather(torch.nn.Module):
    """DeBERTa's shape: scores [batch*heads, tokens, positions] gathered along the last dim by
    a [tokens, tokens] table of positions, expanded over batch*heads."""

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, scores, table):
        index = table.clamp(0, scores.shape[self.dim] - 1).unsqueeze(0)
        return torch.gather(scores * 2, self.dim, index.expand([scores.shape[0], *table.shape])) + 1


def _gathers(result) -> dict[str, int]:
    ops = [k.op for k in result.planned.method.kernels]
    return {op: ops.count(op) for op in ("aten::gather.out", "aten::index_select.out", "aten::expand_copy.out")}


@pytest.mark.parametrize(
    "dim,shape,table",
    [(-1, (6, 12, 20), (12, 12)), (1, (4, 9, 7), (5, 7)), (-1, (3, 10, 8), (6, 5))],
    ids=["deberta", "gather_rows", "fewer_rows_and_columns"],
)
def test_a_gather_over_an_expanded_table_reads_it_once(dim, shape, table):
    module = RelativeGather(dim)
    args = (torch.randn(*shape), torch.randint(-3, 30, table))
    result = devplan.compile(torch.export.export(module, args, strict=False), fold="none")
    assert _gathers(result) == {"aten::gather.out": 0, "aten::index_select.out": 1, "aten::expand_copy.out": 0}
    want = eager_outputs(module, args)[0]
    for got in (run(result.data, list(args))[0], run_executorch(result.data, args)[0]):
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)


class BatchedIndex(torch.nn.Module):
    """An index that differs per batch entry is a gather as written."""

    def forward(self, scores, index):
        return torch.gather(scores, -1, index.expand(-1, 3, -1))


def test_an_index_of_its_own_per_batch_entry_stays_a_gather():
    args = (torch.randn(4, 3, 8), torch.randint(0, 8, (4, 1, 5)))
    result = devplan.compile(torch.export.export(BatchedIndex(), args, strict=False), fold="none")
    assert _gathers(result)["aten::gather.out"] == 1
    torch.testing.assert_close(run(result.data, list(args))[0][0], BatchedIndex()(*args), rtol=0, atol=0)


class RepeatedTable(torch.nn.Module):
    """DeBERTa's c2p and p2c products: queries [batch*heads, tokens, d] against the position
    table [heads, positions, d] repeated over the batch, transposed, on either side."""

    def __init__(self, batch: int):
        super().__init__()
        self.batch = batch

    def forward(self, queries, table):
        repeated = table.repeat(self.batch, 1, 1)
        left = torch.bmm(queries, repeated.transpose(-1, -2))
        right = torch.bmm(repeated, queries.transpose(-1, -2))
        return left * 2, right + 1


@pytest.mark.parametrize("batch", [1, 3])
def test_a_matmul_against_a_repeated_table_reads_it_once(batch):
    heads, tokens, positions, d = 2, 5, 24, 8
    module = RepeatedTable(batch)
    args = (torch.randn(batch * heads, tokens, d), torch.randn(heads, positions, d))
    result = devplan.compile(torch.export.export(module, args, strict=False), fold="none")
    ops = [k.op for k in result.planned.method.kernels]
    assert "aten::repeat.out" not in ops
    assert ops.count("aten::bmm.out") == 2 * batch
    assert "aten::cat.out" not in ops  # each entry's product is written into its place
    want = eager_outputs(module, args)[0]
    for got in (run(result.data, list(args))[0], run_executorch(result.data, args)[0]):
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)
