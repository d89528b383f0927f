"""Checks for CI: does every planned buffer of a program, devplan's or ExecuTorch's, fit its
memory budget and stay close enough to its lower bound?"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from devplan.errors import DevplanError


@dataclass(frozen=True)
class BufferCheck:
    method: str
    mem_id: int
    device: str
    size: int
    lower_bound: int
    budget: int | None          # bytes allowed, if a budget names this buffer
    max_ratio: float | None     # size / lower_bound allowed, if asked

    @property
    def ratio(self) -> float:
        return self.size / self.lower_bound if self.lower_bound else 1.0

    @property
    def ok(self) -> bool:
        return ((self.budget is None or self.size <= self.budget)
                and (self.max_ratio is None or self.ratio <= self.max_ratio))


def check(source: str | os.PathLike | bytes, *, budgets: Mapping[str, int] | None = None,
          max_ratio: float | None = None, method: str | None = None) -> list[BufferCheck]:
    """One BufferCheck per planned buffer of each method (or of `method`), then one per buffer
    that a delegate's ET12 payload plans (method "forward delegate 0"): device memory too. A
    budget names a buffer by mem_id ("1", the method's own buffers) or by device ("cpu",
    "cuda:0", each buffer on it); one that names no buffer is an error."""
    from devplan.inspect import inspect
    from devplan.planning.budget import budget_key

    if max_ratio is not None and max_ratio < 1:
        raise DevplanError(f"--max-ratio {max_ratio}: no plan is below its lower bound; use a ratio of 1 or more")
    doc = inspect(source, method=method)
    budgets = {budget_key(target): nbytes for target, nbytes in (budgets or {}).items()}
    checks = [BufferCheck(m["name"], b["mem_id"], b["device"], b["size"], b["lower_bound"],
                          budgets.get(str(b["mem_id"]), budgets.get(b["device"])), max_ratio)
              for m in doc["methods"] for b in m["buffers"]]
    checks += [BufferCheck(f"{m['name']} delegate {d['index']}", b["mem_id"], b["device"], b["size"], b["lower_bound"],
                           budgets.get(b["device"]), max_ratio)
               for m in doc["methods"] for d in m["delegates"] for b in d["payload_buffers"] or ()]
    named = {str(c.mem_id) for c in checks} | {c.device for c in checks}
    unknown = sorted(set(budgets) - named)
    if unknown:
        raise DevplanError(f"--budget {unknown[0]}: {doc['file']['name']} has no such buffer; "
                           f"budget one of: {', '.join(sorted(named)) or 'none (it plans no memory)'}")
    return checks
