"""A process that compiles many models keeps nothing of those it is done with (issue 52): torch,
torchao and ExecuTorch kept each graph a --quantize compile built for the life of the process
(about 4 MB a compile of a small model), so the Python API, or the names fuzz, compiling
hundreds grew past a GiB. devplan/caches.py releases them when compile returns; what the user
made before is kept."""

from __future__ import annotations

import gc

import pytest
import torch
from torch import nn

import devplan
from testbed.names import calibration, named_archive

pytest.importorskip("executorch.backends.xnnpack.quantizer.xnnpack_quantizer")

COMPILES = 8
# bytes of VmRSS the compiles may add: they kept about 4.5 MiB each (36 MiB), where the allocator's
# own noise in a worker that ran other tests first reached 9.5 MiB once over 4 compiles
GROWTH_BOUND = 16 << 20


def _rss() -> int:
    """This process's resident bytes now (VmRSS)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) << 10 for line in status if line.startswith("VmRSS:"))


def _graph_modules() -> int:
    gc.collect()
    return sum(1 for obj in gc.get_objects() if isinstance(obj, torch.fx.GraphModule))


@pytest.mark.sweep  # nine int8 compiles in a row
def test_quantize_compiles_keep_no_graphs(tmp_path):
    archive = tmp_path / "named.pt2"
    archive.write_bytes(named_archive())
    samples = calibration(tmp_path / "calibration.pt")
    traced = torch.fx.symbolic_trace(nn.Linear(2, 2))  # the user's own: tracebacks read its source
    devplan.compile(archive, quantize="int8", calibration=samples)  # imports, caches filled once
    graphs, sources, rss = _graph_modules(), len(torch.fx.graph_module._loader.eval_cache), _rss()
    for _ in range(COMPILES):
        devplan.compile(archive, quantize="int8", calibration=samples)
    assert _graph_modules() <= graphs
    assert len(torch.fx.graph_module._loader.eval_cache) <= sources
    grown = _rss() - rss
    assert grown < GROWTH_BOUND, f"{COMPILES} compiles kept {grown / 2**20:.1f} MiB"
    assert traced.forward.__code__.co_filename in torch.fx.graph_module._loader.eval_cache


def test_releasing_keeps_the_own_names_of_a_module_first_imported_during_the_compile():
    """torch._dynamo.functional_export first imported during a compile (ExecuTorch's XNNPACK
    lowering's strict pattern exports) had no names recorded before it: releasing what it added
    deleted the module's own __name__ too, and every later strict export in the process failed."""
    import importlib

    from devplan import caches

    module = importlib.import_module("torch._dynamo.functional_export")
    module.__dict__["__compiled_fn_devplan_test"] = object()  # as dynamo's install_global names one
    _, sources, finalizers = caches._state()
    caches._release((set(), sources, finalizers))  # the module absent when the compile began
    assert module.__name__ == "torch._dynamo.functional_export"
    assert "__compiled_fn_devplan_test" not in vars(module)
