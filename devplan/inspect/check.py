"""Checks for CI: does every planned buffer of a program, devplan's or ExecuTorch's, fit its
memory budget and stay close enough to its lower bound?"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from devplan.errors import DevplanError


@dataclass(frozen=True)
class BufferCheck:
    """One planned buffer, or (mem_id None) all `buffers` of a device that a budget names."""

    method: str
    mem_id: int | None
    device: str
    size: int
    lower_bound: int
    budget: int | None          # bytes allowed, if a budget names this buffer or device
    max_ratio: float | None     # size / lower_bound allowed, if asked
    buffers: int = 1

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
    that a delegate's ET12 payload plans (method "forward delegate 0"), then one per device a
    budget names, totalling that device's buffers of the method, its delegates' included
    (they are all allocated at once). A budget names a buffer by mem_id ("1", the method's
    own buffers) or a device ("cpu", "cuda:0"); one that names neither is an error."""
    from devplan.inspect import inspect
    from devplan.planning.budget import budget_key

    if max_ratio is not None and max_ratio < 1:
        raise DevplanError(f"--max-ratio {max_ratio}: no plan is below its lower bound; use a ratio of 1 or more")
    doc = inspect(source, method=method)
    budgets = {budget_key(target): nbytes for target, nbytes in (budgets or {}).items()}
    checks, named = [], set()
    for m in doc["methods"]:
        rows = [BufferCheck(m["name"], b["mem_id"], b["device"], b["size"], b["lower_bound"],
                            budgets.get(str(b["mem_id"])), max_ratio) for b in m["buffers"]]
        rows += [BufferCheck(f"{m['name']} delegate {d['index']}", b["mem_id"], b["device"], b["size"], b["lower_bound"],
                             None, max_ratio) for d in m["delegates"] for b in d["payload_buffers"] or ()]
        named |= {str(b["mem_id"]) for b in m["buffers"]} | {row.device for row in rows}
        for device in sorted({row.device for row in rows} & set(budgets)):
            mine = [row for row in rows if row.device == device]
            rows.append(BufferCheck(m["name"], None, device, sum(r.size for r in mine), sum(r.lower_bound for r in mine),
                                    budgets[device], None, len(mine)))
        checks += rows
    unknown = sorted(set(budgets) - named)
    if unknown:
        raise DevplanError(f"--budget {unknown[0]}: {doc['file']['name']} has no such buffer; "
                           f"budget one of: {', '.join(sorted(named)) or 'none (it plans no memory)'}")
    return checks
