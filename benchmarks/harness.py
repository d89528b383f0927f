"""What the devplan-vs-ExecuTorch benchmarks share: the models by name, best-of timings and
plain-text tables. ExecuTorch's lowering, the baseline, is testbed/executorch.py, which the
tests use too.

Import as `benchmarks.harness` with the repository root on sys.path."""

from __future__ import annotations

import gc
import math
import statistics
import time
import warnings
from typing import Callable, Sequence

import torch

from samples.make_samples import sample_models
from testbed.models import CORPUS, transformer

# ExecuTorch's lowering warns once per model about deprecated pytree calls and buffer
# mutation; hundreds of identical lines would bury the table.
warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", message="Mutation on a buffer")

TRANSFORMER_LAYERS = (2, 8, 32)
SAMPLES = ("mlp", "cnn", "transformer", "two_io")
TRANSFORMERS = tuple(f"transformer_{layers}" for layers in TRANSFORMER_LAYERS)

Build = Callable[[], tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]


def catalogue() -> dict[str, Build]:
    """Every benchmark model by name: samples, the test corpus and the transformer stacks.
    Builders are lazy so that naming a model never builds the 32-layer stack."""
    models: dict[str, Build] = {name: (lambda name=name: sample_models()[name]) for name in SAMPLES}
    models.update(CORPUS)
    models.update(
        {f"transformer_{layers}": (lambda layers=layers: transformer(layers)) for layers in TRANSFORMER_LAYERS}
    )
    return models


def choose(selection: str | None, default: Sequence[str], known: Sequence[str] | None = None) -> list[str]:
    """The models named in a comma-separated `--models` value, or `default`; each must be one
    of `known` (by default, any model of the catalogue)."""
    if not selection:
        return list(default)
    known = list(catalogue()) if known is None else list(known)
    names = [name.strip() for name in selection.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    return names


def export(name: str) -> torch.export.ExportedProgram:
    module, args = catalogue()[name]()
    return torch.export.export(module, args, strict=False)


def best_time(
    run: Callable[[torch.export.ExportedProgram], object],
    fresh: Callable[[], torch.export.ExportedProgram],
    repeat: int,
) -> tuple[float, object]:
    """Fastest of `repeat` runs of `run` and the last result; each run gets its own program from
    `fresh` (made and garbage-collected outside the clock) so no run sees another's mutations."""
    best, result = math.inf, None
    for _ in range(repeat):
        ep = fresh()
        gc.collect()
        start = time.perf_counter()
        result = run(ep)
        best = min(best, time.perf_counter() - start)
    return best, result


def geometric_mean(values: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else math.nan


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns padded to their widest cell; the first column left-aligned, the rest right."""
    cells = [list(headers)] + [[_cell(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        padded = (text.ljust(w) if i == 0 else text.rjust(w) for i, (text, w) in enumerate(zip(row, widths)))
        return "  ".join(padded).rstrip()

    return "\n".join([line(cells[0]), line(["-" * w for w in widths])] + [line(row) for row in cells[1:]])


def number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:#.4g}"


def _cell(value: object) -> str:
    return number(value) if value is None or isinstance(value, float) else str(value)
