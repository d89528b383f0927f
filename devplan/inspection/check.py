"""Checks for CI: does every planned buffer of a program, devplan's or ExecuTorch's, fit its
memory budget and stay close enough to its lower bound? Does the program still plan as its
golden file says?"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from typing import Final, Mapping, cast

from devplan.documents import (
    CheckDocument,
    CheckedBuffer,
    CheckedGolden,
    CheckedRuntime,
    GoldenPeak,
    Peak,
    WorkingMemory,
)
from devplan.errors import DevplanError
from devplan.files import STDIO, refuse_overwrite, write_atomic
from devplan.inspection import inspect
from devplan.inspection.changes import Tolerance
from devplan.inspection.diff import Diff, diff
from devplan.inspection.golden import golden_document, golden_text, peak_brief, read_golden, refuse_replacing
from devplan.inspection.own_memory import backend_bytes, device_of, memory_of, outside
from devplan.planning.budget import BACKENDS, budget_key, checked_budgets
from devplan.pte import PteFile

SCHEMA_VERSION: Final = 1  # of check_document; docs/check-json.md


@dataclass(frozen=True)
class BufferCheck:
    """One planned buffer, or (mem_id None) all `buffers` of a device that a budget names."""

    method: str
    mem_id: int | None
    device: str
    size: int
    lower_bound: int
    budget: int | None  # bytes allowed, if a budget names this buffer or device
    max_ratio: float | None  # size / lower_bound allowed, if asked
    buffers: int = 1
    problem: str | None = None  # the inspection document's: a plan no runtime can trust
    # a buffer's busiest instruction and the blocks holding it there (golden.py's); for a
    # device's total, its busiest buffer's
    peak: GoldenPeak | None = None
    backends: int = 0  # a DEVICE+backends row: the bytes of its delegates' own memory in `size`
    # a delegate's row, told and never failed: the memory its backend allocates outside the
    # plan (the inspection document's working_memory; size is its bytes, 0 when not known)
    working_memory: WorkingMemory | None = None

    @property
    def ratio(self) -> float:
        return self.size / self.lower_bound if self.lower_bound else 1.0

    @property
    def ok(self) -> bool:
        return (
            self.problem is None
            and (self.budget is None or self.size <= self.budget)
            and (self.max_ratio is None or self.ratio <= self.max_ratio)
        )


def check(
    source: str | os.PathLike[str] | bytes | PteFile,
    *,
    budgets: Mapping[str, int] | None = None,
    max_ratio: float | None = None,
    method: str | None = None,
) -> list[BufferCheck]:
    """One BufferCheck per planned buffer of each method (or of `method`), then one per buffer
    that a delegate's ET12 payload plans (method "forward delegate 0"), then one per device that
    a budget names or that holds several buffers, totalling that device's buffers of the
    method, its delegates' own included (they are all allocated at once; a delegate planned as
    a window of the method's buffer adds nothing), against the device's bound. A budget names a
    buffer by mem_id ("1", the method's own buffers) or a device ("cpu", "cuda:0"); one that
    names neither is an error. A delegate whose backend allocates its working memory itself
    (XNNPACK's) gets a row of its own, told and never failed, and a budget on "cpu+backends"
    totals the device's buffers with that memory (a delegate whose payload does not say how
    much is refused)."""
    if max_ratio is not None and not 1 <= max_ratio < math.inf:  # nan fails this too
        raise DevplanError(
            f"--max-ratio {max_ratio}: use a finite ratio of 1 or more (no plan is below its lower bound), e.g. 1.05"
        )
    doc = inspect(source, method=method)
    budgets = {budget_key(target): nbytes for target, nbytes in checked_budgets(budgets or {}).items()}
    checks, named = [], set()
    for m in doc["methods"]:
        peaks = {peak["mem_id"]: peak_brief(peak) for peak in m["peak"]}
        rows = [
            BufferCheck(
                m["name"],
                b["mem_id"],
                b["device"],
                b["size"],
                b["lower_bound"],
                budgets.get(str(b["mem_id"])),
                max_ratio,
                problem=b.get("problem"),
                peak=peaks.get(b["mem_id"]),
            )
            for b in m["buffers"]
        ]
        rows += [
            BufferCheck(
                f"{m['name']} delegate {d['index']}",
                b["mem_id"],
                b["device"],
                b["size"],
                b["lower_bound"],
                None,
                max_ratio,
                # no problem: a payload's buffers keep five facts of its document's (PayloadBuffer),
                # its `problem` not among them
            )
            for d in m["delegates"]
            for b in d["payload_buffers"] or ()
        ]
        named |= {str(b["mem_id"]) for b in m["buffers"]} | {row.device for row in rows}
        named |= {device["device"] + BACKENDS for device in m["devices"]}
        rows += [
            BufferCheck(
                f"{m['name']} delegate {d['index']} ({d['id']})",
                None,
                device_of(d),
                memory_of(d)["bytes"] or 0,
                0,
                None,
                None,
                0,
                working_memory=d["working_memory"],
            )
            for d in outside(m)
        ]
        # a device's total is checked when a budget names it, or against the device's bound
        # when it holds several buffers that could have shared bytes
        for device in m["devices"]:
            busiest = _busiest(m["peak"], device["device"])
            if device["device"] in budgets or device["buffers"] > 1:
                rows.append(
                    BufferCheck(
                        m["name"],
                        None,
                        device["device"],
                        device["size"],
                        device["lower_bound"],
                        budgets.get(device["device"]),
                        max_ratio,
                        device["buffers"],
                        peak=busiest,
                    )
                )
            if (key := device["device"] + BACKENDS) in budgets:  # its delegates' own memory on top
                own = backend_bytes(m, device["device"], key)
                rows.append(
                    BufferCheck(
                        m["name"],
                        None,
                        device["device"],
                        device["size"] + own,
                        device["lower_bound"] + own,
                        budgets[key],
                        max_ratio,
                        device["buffers"],
                        peak=busiest,
                        backends=own,
                    )
                )
        checks += rows
    unknown = sorted(set(budgets) - named)
    if unknown:
        raise DevplanError(
            f"--budget {unknown[0]}: {doc['file']['name']} has no such buffer; "
            f"budget one of: {', '.join(sorted(named)) or 'none (it plans no memory)'}"
        )
    return checks


def _busiest(peaks: list[Peak], device: str) -> GoldenPeak | None:
    """A device's busiest buffer's peak (its one buffer's, most often): where a budget on the
    device's total is failed, and which blocks hold it, as a golden failure says."""
    found = [peak for peak in peaks if peak["device"] == device]
    return peak_brief(max(found, key=lambda peak: (peak["bytes"], -peak["mem_id"]))) if found else None


@dataclass(frozen=True)
class GoldenCheck:
    """A program against its golden file: rewritten (updated), or compared (diff)."""

    path: str
    updated: bool
    diff: "Diff | None"

    @property
    def ok(self) -> bool:
        return self.updated or (self.diff is not None and self.diff.ok)  # not updated: compared

    def document(self) -> CheckedGolden:
        return {
            "file": {"name": os.path.basename(self.path)},
            "updated": self.updated,
            "ok": self.ok,
            "diff": self.diff.document() if self.diff is not None else None,
        }


def check_golden(
    source: str | os.PathLike[str] | bytes | PteFile,
    golden: str | os.PathLike[str],
    *,
    update: bool = False,
    tolerance: "Tolerance | str | None" = None,
    exact: bool = False,
    method: str | None = None,
    fail_on_shrink: bool = False,
    weights_tolerance: "Tolerance | str | None" = None,
) -> GoldenCheck:
    """Compare a program with its golden file (diff.py: sizes may shrink, unless
    `fail_on_shrink`, or grow within `tolerance`, the weights within `weights_tolerance` where
    given), or with `update` write the program's golden file (atomically, through a
    link, creating its folder) instead. `source` is a .pte path, its bytes, a read PteFile or a
    CompileResult."""
    if not isinstance(source, PteFile):  # whose data is the whole file it maps
        source = getattr(source, "data", source)  # a CompileResult: the program it wrote
    read_from = source.path if isinstance(source, PteFile) else source
    if update and isinstance(read_from, (str, os.PathLike)):
        refuse_overwrite(golden, [read_from], "--golden")
    if update:
        refuse_replacing(golden)
    doc = inspect(source)
    if update:  # a new golden file may start a new folder
        write_atomic(golden, golden_text(golden_document(doc)).encode(), parents=True)
        return GoldenCheck(os.fspath(golden), True, None)
    # "-" is standard input, as --update's "-" is standard output
    compared = read_golden(golden) if os.fspath(golden) == STDIO else golden
    compared_diff = diff(
        compared,
        doc,
        tolerance=tolerance,
        exact=exact,
        method=method,
        fail_on_shrink=fail_on_shrink,
        weights_tolerance=weights_tolerance,
    )
    return GoldenCheck(os.fspath(golden), False, compared_diff)


def check_document(
    name: str, checks: list[BufferCheck], golden: GoldenCheck | None = None, runtime: CheckedRuntime | None = None
) -> CheckDocument:
    """`devplan check --json` (docs/check-json.md): the budget checks, the golden's verdict and,
    with --runtime, what the runtime build lacks (devplan/inspection/runtime_build.py)."""
    rows = [cast(CheckedBuffer, asdict(c) | {"ratio": round(c.ratio, 6), "ok": c.ok}) for c in checks]
    document: CheckDocument = {
        "schema_version": SCHEMA_VERSION,
        "file": {"name": name},
        "ok": all(c.ok for c in checks) and (golden is None or golden.ok) and (runtime is None or runtime["ok"]),
        "buffers": rows,
        "golden": golden.document() if golden is not None else None,
    }
    if runtime is not None:
        document["runtime"] = runtime
    return document
