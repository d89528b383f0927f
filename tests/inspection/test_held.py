"""A view that no instruction writes holds its bytes from when the tensor under it was
written: inspect's `held`, peak and lower bound count those bytes through the gap."""

import torch

import devplan


class LateView(torch.nn.Module):
    def forward(self, x):
        h = x * 2.0  # written at instruction 0
        head = h[:2]  # a view of h's first rows, first read at the end
        big = torch.relu(x @ x.mT)  # work in between that needs bytes of its own
        return head + 1.0, big.sum()


def test_a_late_view_holds_its_bytes_from_the_write_under_it():
    args = (torch.randn(8, 4),)
    # in the exported order (reordering would run the matmul first and close the gap)
    result = devplan.compile(torch.export.export(LateView(), args, strict=False), reorder=False)
    method = devplan.inspect(result.data)["methods"][0]
    tensors = {t["value"]: t for t in method["tensors"]}
    planned = result.planned.method
    h = next(k.args[-1] for k in planned.kernels if k.op == "aten::mul.Scalar_out")
    view = next(k.args[0] for k in planned.kernels if k.op == "aten::add.Scalar_out")
    assert planned.values[view].alias_of == h
    assert tensors[view]["lifetime"][0] > tensors[h]["lifetime"][1]  # a gap between the uses
    assert tensors[view]["held"] == [tensors[h]["lifetime"][0], tensors[view]["lifetime"][1]]
    assert tensors[h]["held"] == tensors[h]["lifetime"]
    (buffer,) = method["buffers"]
    assert buffer["lower_bound"] == result.planned.buffers[0].lower_bound
    # the bytes the view keeps are busy while the matmul runs, so nothing else sits there
    matmul = next(i for i, k in enumerate(planned.kernels) if k.op == "aten::mm.out")
    alive = [t for t in method["tensors"] if t["held"] and t["mem_id"] == 1 and t["held"][0] <= matmul <= t["held"][1]]
    assert any(t["value"] == view for t in alive)
    assert buffer["peak"] >= sum(t["nbytes"] for t in alive if t["value"] != h)


def test_the_tensors_table_says_when_a_view_holds_its_bytes():
    import io

    from rich.console import Console

    from devplan.inspection.render import render

    args = (torch.randn(8, 4),)
    result = devplan.compile(torch.export.export(LateView(), args, strict=False))
    doc = devplan.inspect(result.data)
    out = io.StringIO()
    render(doc, Console(file=out, width=80, color_system=None), ("tensors",))
    view = next(t for t in doc["methods"][0]["tensors"] if t["held"] and t["held"] != t["lifetime"])
    (row,) = [line for line in out.getvalue().splitlines() if line.split() and line.split()[0] == f"v{view['value']}"]
    assert f"{view['lifetime'][0]}-{view['lifetime'][1]} held {view['held'][0]}-{view['held'][1]}" in row
