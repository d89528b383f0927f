"""A process that compiles many models keeps nothing of those it is done with (issue 52): torch,
torchao and ExecuTorch kept each graph a --quantize compile built for the life of the process
(about 4 MB a compile of a small model), so the Python API, or the names fuzz, compiling
hundreds grew past a GiB. devplan/caches.py releases them when compile returns; what the user
made before is kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("executorch.backends.xnnpack.quantizer.xnnpack_quantizer")

COMPILES = 8
# bytes of VmRSS the compiles may add in a fresh process: before devplan/caches.py they kept about
# 4.5 MiB each (36 MiB); now under 1 MiB in all
GROWTH_BOUND = 8 << 20
# In a fresh interpreter: a pytest worker's own state (what it captured of earlier tests, a
# coverage tracer noting each generated source) grew by 10 MiB over 4 compiles there
MEASURE = """
import gc, json, sys
import torch
from torch import nn
import devplan
from testbed.names import calibration, named_archive
from pathlib import Path

def rss():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) << 10 for line in status if line.startswith("VmRSS:"))

def graph_modules():
    gc.collect()
    return sum(1 for obj in gc.get_objects() if isinstance(obj, torch.fx.GraphModule))

folder = Path(sys.argv[1])
archive = folder / "named.pt2"
archive.write_bytes(named_archive())
samples = calibration(folder / "calibration.pt")
traced = torch.fx.symbolic_trace(nn.Linear(2, 2))  # the user's own: tracebacks read its source
devplan.compile(archive, quantize="int8", calibration=samples)  # imports, caches filled once
before = graph_modules(), len(torch.fx.graph_module._loader.eval_cache), rss()
for _ in range(int(sys.argv[2])):
    devplan.compile(archive, quantize="int8", calibration=samples)
after = graph_modules(), len(torch.fx.graph_module._loader.eval_cache), rss()
kept = traced.forward.__code__.co_filename in torch.fx.graph_module._loader.eval_cache
print(json.dumps({"before": before, "after": after, "traced_kept": kept}))
"""


@pytest.mark.sweep  # nine int8 compiles in a row in a fresh interpreter
def test_quantize_compiles_keep_no_graphs(tmp_path):
    env = {name: value for name, value in os.environ.items() if not name.startswith("COVERAGE")}
    run = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", MEASURE, str(tmp_path), str(COMPILES)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.splitlines()[-1])
    (graphs, sources, rss), (graphs_now, sources_now, rss_now) = got["before"], got["after"]
    assert graphs_now <= graphs and sources_now <= sources and got["traced_kept"]
    assert rss_now - rss < GROWTH_BOUND, f"{COMPILES} compiles kept {(rss_now - rss) / 2**20:.1f} MiB"


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
