"""devplan: compile, plan and inspect ExecuTorch .pte programs across devices.

    devplan.compile("model.pt2", "model.pte")   -> CompileResult
    devplan.inspect("model.pte")                -> the inspection document (a dict)
    devplan.read_pte("model.pte")               -> PteFile
    devplan.run("model.pte", [x])               -> outputs of each run (the reference runtime)
    devplan.check("model.pte", budgets={"cpu": 2 << 20}) -> a BufferCheck per planned buffer
    devplan.check_golden("model.pte", "model.golden.json")   -> GoldenCheck (update=True writes the file)
    devplan.diff("old.pte", "new.pte", tolerance="2%")       -> Diff: .ok, .text(), .document()
    devplan.generate("llm.pte", "tokenizer.json", "Hello")  -> Generated: .text, tokens/s (ExecuTorch's runner)

Imports are lazy so that reading and inspecting programs never pays for importing torch."""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"  # the package's one version: pyproject.toml reads it from here
# the JSON documents' descriptions, which --help links: a pip install has no docs/ folder
# (pyproject.toml's Documentation URL; tests/cli/test_help.py holds the two together)
# where each JSON document's keys are stated, installed with the package (docs/ holds the prose)
SCHEMAS = "devplan/schemas/"

_HOMES = {
    "compile": "devplan.compiler",
    "inspect": "devplan.inspection",
    "read_pte": "devplan.pte",
    "write_pte": "devplan.pte",
    "run": "devplan.runtime",
    "check": "devplan.inspection.check",
    "check_golden": "devplan.inspection.check",
    "diff": "devplan.inspection.diff",
    "generate": "devplan.runtime.generate",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'devplan' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
