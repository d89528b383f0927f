"""Every stage after load sizes a tensor by the result its node records (folding bounds its
work by it, planning gives it that many bytes), so load holds each node's recorded result to
what its arguments make: an archive whose expand names 16384x16384 while every tensor_meta
says 4x4 is refused in one line, whatever --fold says, before anything computes or plans it."""

import json
import subprocess
import zipfile

import pytest
import torch
from torch.export import Dim

from devplan.errors import DevplanError
from devplan.gate.load import load
from testbed.peak import run_measured
from tests.tiers import tiered

PEAK_RSS = 1 << 30  # the bound for any hostile input (tests/gate/test_hostile_archives.py)


class Expanded(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(1, 1))

    def forward(self, x):
        return x + self.w.expand(4, 4) * 2


def expand_naming(tmp_path, sizes: list[int]):
    """A torch.export archive of Expanded whose expand node's sizes argument is `sizes`, its
    recorded result (tensor_meta) still 4x4."""
    source, crafted = tmp_path / "source.pt2", tmp_path / "crafted.pt2"
    ep = torch.export.export(Expanded().eval().requires_grad_(False), (torch.randn(4, 4),), strict=False)
    torch.export.save(ep, source)
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(crafted, "w") as new:
        for item in old.infolist():
            data = old.read(item)
            if item.filename.endswith("models/model.json"):
                document = json.loads(data)
                expand = next(n for n in document["graph_module"]["graph"]["nodes"] if "expand" in n["target"])
                expand["inputs"][1]["arg"] = {"as_ints": sizes}
                data = json.dumps(document).encode()
            new.writestr(item, data)
    return crafted


@pytest.mark.parametrize("fold", tiered(["local", "none"], fast=["none"]))
def test_an_op_whose_arguments_disagree_with_its_recorded_result_is_refused(tmp_path, fold):
    """Folding computed the 1 GiB expand the 8 KB archive names (1.34 GB, exit 0; 65536x65536
    asked torch for 16 GiB), and --fold none wrote a program planned for 4x4 whose expand
    names 16384x16384 (exit 0)."""
    archive = expand_naming(tmp_path, [16384, 16384])
    assert archive.stat().st_size < 16 << 10
    child, peak = run_measured(
        ["-m", "devplan", "compile", str(archive), "-o", str(tmp_path / "out.pte"), "--fold", fold],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=120,
    )
    lines = child.stderr.decode(errors="replace").strip().splitlines()
    assert child.returncode == 2 and len(lines) == 1 and lines[0].startswith("devplan: error:"), lines
    for needle in ("crafted.pt2", "node expand (aten::expand)", "[4, 4]", "[16384, 16384]", "re-export"):
        assert needle in lines[0], (needle, lines[0])
    assert peak is not None and peak < PEAK_RSS, f"peak RSS {peak and peak >> 20} MiB"
    assert not (tmp_path / "out.pte").exists()


def test_an_op_that_cannot_take_its_arguments_is_refused_at_load(tmp_path):
    """Sizes the op refuses outright (a 1x1 weight expanded to 3 dims of which one shrinks)
    are named as such, at load, rather than by the stage that first runs the op."""
    with pytest.raises(DevplanError, match=r"node expand \(aten::expand\) cannot run on the arguments"):
        load(expand_naming(tmp_path, [4, -2, 4]))


def test_a_dynamic_archive_loads_with_its_symbols_as_exported(tmp_path):
    """The check runs each op in the export's own fake mode with its guards suppressed: a
    dynamic batch loads, and the shape environment the later stages read gains no guard and
    no replacement (a size symbol specialized by the check would plan a fixed batch)."""
    module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    ep = torch.export.export(module, (torch.randn(4, 8),), dynamic_shapes=({0: Dim("batch", max=16)},), strict=False)
    torch.export.save(ep, tmp_path / "dynamic.pt2")
    loaded = load(tmp_path / "dynamic.pt2")
    user = loaded.graph_signature.user_inputs[0]
    env = next(n.meta["val"] for n in loaded.graph.nodes if n.name == user).fake_mode.shape_env
    assert not env.guards and not env.replacements and not env.pending_fresh_unbacked_symbols


def test_a_size_read_from_data_is_left_as_recorded(tmp_path):
    """item() makes a new size symbol each time it runs: running it again would leave one
    pending in the export's shape environment, where a later fake run trips over it."""

    class Sliced(torch.nn.Module):
        def forward(self, x, n):
            return x[: n.item()]

    ep = torch.export.export(Sliced(), (torch.randn(8), torch.tensor(4)), strict=False)
    torch.export.save(ep, tmp_path / "sliced.pt2")
    loaded = load(tmp_path / "sliced.pt2")
    env = next(n.meta["val"] for n in loaded.graph.nodes if n.op == "placeholder").fake_mode.shape_env
    assert not env.pending_fresh_unbacked_symbols
