"""`devplan run --json` (docs/run-json.md): what each run returned, summarized."""
from __future__ import annotations

SCHEMA_VERSION = 1


def run_document(name: str, method: str, results: list[list]) -> dict:
    """name: the program's basename; results: the outputs of each run."""
    return {"schema_version": SCHEMA_VERSION, "file": {"name": name}, "method": method,
            "runs": [[describe(value) for value in outputs] for outputs in results]}


def describe(value) -> dict:
    """A tensor as dtype, shape and value range; anything else as itself."""
    import torch

    if not isinstance(value, torch.Tensor):
        return {"value": value}
    data = value.double() if value.numel() else torch.zeros(1, dtype=torch.float64)
    return {"dtype": str(value.dtype).removeprefix("torch."), "shape": list(value.shape),
            "min": float(data.min()), "max": float(data.max()), "mean": float(data.mean())}
