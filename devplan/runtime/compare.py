"""`devplan run --reference` and `--runs`: a program's outputs held against a reference's, output
by output, and how long its method took. Both judge the bytes that run, wherever they ran."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

from devplan.documents import Latency, OutputComparison
from devplan.jsontext import number


@dataclass(frozen=True)
class OutputTolerance:
    """What an output must meet: allclose under atol/rtol (torch.allclose's sense) and, where
    given, a signal-to-quantization-noise ratio of at least min_sqnr_db."""

    atol: float = 1e-4
    rtol: float = 1e-4
    min_sqnr_db: float | None = None


def compare_outputs(got: list[Any], want: list[Any], tolerance: OutputTolerance) -> list[OutputComparison]:
    """Each of the program's outputs against the reference's at the same place."""
    return [_compare(index, g, w, tolerance) for index, (g, w) in enumerate(zip(got, want))]


def _compare(index: int, got: Any, want: Any, tolerance: OutputTolerance) -> OutputComparison:
    import torch

    if not isinstance(got, torch.Tensor) or not isinstance(want, torch.Tensor):
        return _unmeasured(index, got == want, f"{got!r} against the reference's {want!r}")
    if got.shape != want.shape:
        return _unmeasured(index, False, f"shape {tuple(got.shape)} against the reference's {tuple(want.shape)}")
    g, w = got.double(), want.double()
    difference = (g - w).abs()
    noise, signal = float(difference.square().sum()), float(w.square().sum())
    # no noise: the outputs are equal (None, "exact"); noise over a zero signal: -Infinity
    sqnr = None if noise == 0 else (10 * math.log10(signal / noise) if signal else -math.inf)
    close = bool(torch.allclose(g, w, atol=tolerance.atol, rtol=tolerance.rtol, equal_nan=True))
    loud_enough = tolerance.min_sqnr_db is None or sqnr is None or sqnr >= tolerance.min_sqnr_db
    agreement = None
    if got.dim() == 2 and got.dtype.is_floating_point and got.numel():  # a classifier's logits: the top class kept?
        agreement = float((got.argmax(-1) == want.argmax(-1)).double().mean())
    return {
        "index": index,
        "sqnr_db": number(round(sqnr, 2)) if sqnr is not None else None,
        "max_abs": number(float(difference.max())) if got.numel() else 0.0,
        "mean_abs": number(float(difference.mean())) if got.numel() else 0.0,
        "argmax_agreement": agreement,
        "allclose": close,
        # with --min-sqnr the ratio judges (a quantized program is never allclose to its float model)
        "passed": loud_enough if tolerance.min_sqnr_db is not None else close,
        "note": None,
    }


def _unmeasured(index: int, same: bool, differs: str) -> OutputComparison:
    """An output with no error to measure: a value, or a tensor of another shape."""
    return {
        "index": index,
        "sqnr_db": None,
        "max_abs": None,
        "mean_abs": None,
        "argmax_agreement": None,
        "allclose": bool(same),
        "passed": bool(same),
        "note": None if same else differs,
    }


def timed_runs(call: Callable[[], list[Any]], runs: int) -> tuple[list[list[Any]], list[float]]:
    """`runs` calls in a row (state carries over) and the seconds each took."""
    results, seconds = [], []
    for _ in range(runs):
        start = time.perf_counter()
        results.append(call())
        seconds.append(time.perf_counter() - start)
    return results, seconds


def latency(seconds: list[float]) -> Latency | None:
    """The method's warm time: the runs after the first (which loads kernels, warms caches and
    records any CUDA graph), in milliseconds; None with fewer than two runs."""
    warm = [s * 1000 for s in seconds[1:]]
    if not warm:
        return None
    return {"runs": len(warm), "median_ms": statistics.median(warm), "min_ms": min(warm), "max_ms": max(warm)}
