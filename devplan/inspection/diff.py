"""Compare two programs' plans: `devplan diff A.pte B.pte` and `devplan check --golden`.

Both sides become golden documents (golden.py) and are compared fact by fact; where both are
programs, their planned tensors are compared one by one as well, paired by what they are
(pair_tensors), not by value index (a golden file only keeps their digest). Sizes (buffers,
lower bounds, constant bytes, delegate payloads) may shrink, or grow within a tolerance;
counts of values and instructions are reported; anything else that changes, an operator, a
device, a count of tensors, a delegate's window moved or resized, a buffer or delegate added
or removed, is always a difference. docs/diff-json.md
describes the document."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, cast

from devplan.documents import (
    GoldenDelegate,
    GoldenDevice,
    GoldenDocument,
    GoldenMethod,
    GoldenPeak,
    GoldenPlacements,
    InspectDocument,
    ModuleChange,
    OperatorChange,
    PlacementChange,
    PlacementsDetail,
    SizedWindow,
)
from devplan.errors import DevplanError
from devplan.files import open_input, present
from devplan.inspection import inspect
from devplan.inspection.changes import Change, Comparison, Tolerance, parse_tolerance
from devplan.inspection.difftext import WIDTH, diff_text
from devplan.inspection.golden import golden_document, is_golden, read_golden
from devplan.inspection.pairing import (
    Mark,
    Planned,
    facts,
    golden_names_modules,
    instruction_marks,
    names_modules,
    pair_tensors,
    peak_operators,
    planned,
    timelines,
)
from devplan.pte import PteFile
from devplan.units import natural_key

# counts reported, never failed (but with exact): one more scalar the emitter made, or one
# more instruction, is no memory; the tensors, operators and buffers that come with it are named
REPORTED = frozenset({"instructions", "values"})
# sizes of the weights (the program's constants, a delegate's payload holding its own), judged
# by the weights' tolerance; every other size is planned memory, judged by the tolerance
WEIGHTS = frozenset({"constant_bytes", "payload_size"})
LARGEST_SHOWN = 10


@dataclass(frozen=True)
class Diff(Comparison):
    """What devplan.diff returns: the comparison, and its text."""

    def text(self, labels: bool = True, width: int = WIDTH, placements: bool = False) -> str:
        """As a person reads it, in `width` columns; labels=False: without a gate's FAIL and ok;
        placements: each changed tensor listed even where the sides come from two compilers."""
        return diff_text(self, labels, width, placements)


@dataclass(frozen=True)
class Placements:
    """What a program says beyond its golden document (which keeps only their digest), by method."""

    placements: dict[str, list[Planned]]
    instructions: dict[str, list[Mark]]  # instruction_marks
    operators: dict[str, dict[int, dict[str, int]]]  # peak_operators


@dataclass(frozen=True)
class Side:
    """One side of a comparison: its golden document and, for a program, its placements."""

    name: str
    golden: GoldenDocument
    program: Placements | None = None  # None for a golden file or document
    modules: bool = True  # whether it names the model's modules (names_modules)


def side(source: str | os.PathLike[str] | bytes | PteFile | Mapping[str, Any]) -> Side:
    """A program (path or bytes of a .pte), a golden file (path of its JSON), an inspection
    document or a golden document (dicts)."""
    doc: Mapping[str, Any]
    if isinstance(source, Mapping):
        doc = source
    elif isinstance(source, (str, os.PathLike)) and looks_like_golden(Path(source)):
        golden = read_golden(source)
        return Side(os.path.basename(source), golden, modules=golden_names_modules(golden))
    else:
        doc = inspect(source)
    if is_golden(doc):
        golden = cast(GoldenDocument, doc)
        return Side(doc["file"]["name"], golden, modules=golden_names_modules(golden))
    inspected = cast(InspectDocument, doc)
    return Side(
        inspected["file"]["name"],
        golden_document(inspected),
        Placements(
            {m["name"]: planned(m) for m in inspected["methods"]},
            {m["name"]: instruction_marks(m) for m in inspected["methods"]},
            {m["name"]: peak_operators(m) for m in inspected["methods"]},
        ),
        names_modules(inspected),
    )


def looks_like_golden(path: Path) -> bool:
    """A golden file: named .json (so a missing one is reported as a golden file), or JSON inside."""
    if path.suffix == ".json":
        return True
    if not present(path):
        return False  # the program reader names the path and the problem
    # a pipe or device is refused here: reading it could block or never end
    with open_input(path, hint="pass a .pte program or a golden .json file") as file:
        return file.read(64).lstrip().startswith(b"{")


def diff(
    a: str | os.PathLike[str] | bytes | PteFile | Mapping[str, Any],
    b: str | os.PathLike[str] | bytes | PteFile | Mapping[str, Any],
    *,
    tolerance: Tolerance | str | None = None,
    exact: bool = False,
    method: str | None = None,
    fail_on_shrink: bool = False,
    weights_tolerance: Tolerance | str | None = None,
) -> Diff:
    """Compare a (the old side: a golden, or yesterday's program) with b. Each is a .pte path
    or bytes, a golden file's path, or an inspection or golden document. `tolerance` ('2%',
    '4KiB' or a Tolerance) lets the planned memory grow (buffers, bounds, device totals), and the
    weights too (the constants, delegates' payloads) unless `weights_tolerance` gives theirs;
    `exact` makes every change a difference,
    shrinking and moved placements included; `fail_on_shrink` makes a size that shrank one (a
    snapshot to record again); `method` compares that method only."""
    rule = parse_tolerance(tolerance) if isinstance(tolerance, str) else tolerance
    weights = (
        parse_tolerance(weights_tolerance, "--weights-tolerance")
        if isinstance(weights_tolerance, str)
        else weights_tolerance
    )
    left, right = side(a), side(b)
    # a side that names no modules would put its whole peak under "(no module)": both are told
    # by the operators that wrote what each peak holds instead
    by_operator = (
        None
        if left.modules and right.modules
        else (
            left.program.operators if left.program is not None else {},
            right.program.operators if right.program is not None else {},
        )
    )
    compare = _Compare(rule or Tolerance(), exact, fail_on_shrink, by_operator, weights or rule or Tolerance())
    compare.sized(
        None, "program", "constant_bytes", left.golden["file"]["constant_bytes"], right.golden["file"]["constant_bytes"]
    )
    methods_a = {m["name"]: m for m in left.golden["methods"] if method in (None, m["name"])}
    methods_b = {m["name"]: m for m in right.golden["methods"] if method in (None, m["name"])}
    if method is not None and not (methods_a and methods_b):
        missing = left.name if not methods_a else right.name
        raise DevplanError(f"{missing}: no method {method!r}; compare one that both sides have")
    for name, x, y in _pairs(methods_a, methods_b):
        if compare.matched(None, f"method {name}", x, y, lambda m: m["name"]):
            compare.method(name, x, y)
            programs = (left.program, right.program) if left.program is not None and right.program is not None else None
            compare.placements(name, x["placements"], y["placements"], programs)
    return Diff(left.name, right.name, tuple(compare.changes), rule, exact, left.modules == right.modules, weights)


def _pairs(a: Mapping[Any, Any], b: Mapping[Any, Any]) -> list[tuple[Any, Any, Any]]:
    """(key, a's item or None, b's item or None) for each key of either: a's in order, then b's own."""
    return [(key, a.get(key), b.get(key)) for key in list(a) + [key for key in b if key not in a]]


class _Compare:
    """Collects the changes between two golden documents, deciding which of them fail."""

    def __init__(
        self,
        tolerance: Tolerance,
        exact: bool,
        fail_on_shrink: bool = False,
        by_operator: tuple[Mapping[str, dict[int, dict[str, int]]], Mapping[str, dict[int, dict[str, int]]]]
        | None = None,
        weights: Tolerance | None = None,
    ) -> None:
        self.tolerance, self.exact, self.fail_on_shrink = tolerance, exact, fail_on_shrink
        self.changes: list[Change] = []
        self.by_operator = by_operator  # each side's peak_operators, where the peaks are told by operator
        self.weights = weights or tolerance

    def sized(self, method: str | None, subject: str, fact: str, a: int, b: int) -> None:
        if a != b:
            rule = self.weights if fact in WEIGHTS else self.tolerance
            fails = self.exact or (b > a and not rule.allows(a, b)) or (b < a and self.fail_on_shrink)
            self.changes.append(Change(method, subject, fact, a, b, fails))

    def reported(self, method: str, subject: str, fact: str, a: object, b: object) -> None:
        if a != b:
            self.changes.append(Change(method, subject, fact, a, b, self.exact))

    def fixed(self, method: str, subject: str, fact: str, a: object, b: object) -> None:
        if a != b:
            self.changes.append(Change(method, subject, fact, a, b, True))

    def matched(self, method: str | None, subject: str, x: Any, y: Any, brief: Callable[[Any], object]) -> bool:
        """Whether both sides have it; one that only a has was removed, one that only b has
        added (a change, described by brief(item))."""
        if x is not None and y is not None:
            return True
        what = brief(x if x is not None else y)
        self.changes.append(
            Change(
                method,
                subject,
                "removed" if y is None else "added",
                what if y is None else None,
                None if y is None else what,
                True,
            )
        )
        return False

    def method(self, name: str, a: GoldenMethod, b: GoldenMethod) -> None:
        for count in ("instructions", "values", "tensors"):  # delegates: each one added or removed says it
            if count in REPORTED:
                self.reported(name, count, "count", a["counts"][count], b["counts"][count])
            else:
                self.fixed(name, count, "count", a["counts"][count], b["counts"][count])
        if "returns" in a and "returns" in b:  # a constant method's values; golden files written before lack them
            self.fixed(name, "returns", "values", a["returns"], b["returns"])
        removed = sorted(set(a["operators"]) - set(b["operators"]))
        added = sorted(set(b["operators"]) - set(a["operators"]))
        for fact, ops in (("removed", removed), ("added", added)):
            if ops:
                self.changes.append(
                    Change(
                        name,
                        "operators",
                        fact,
                        ops if fact == "removed" else None,
                        ops if fact == "added" else None,
                        True,
                    )
                )
        self.buffers(name, "", a["buffers"], b["buffers"])
        self.devices(name, a["devices"], b["devices"])
        self.delegates(name, a["delegates"], b["delegates"])

    def buffers(self, method: str, prefix: str, a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> None:
        """Buffers matched by mem_id (and, inside a delegate, by the payload's method)."""

        def key(buffer: Mapping[str, Any]) -> tuple[str | None, int]:
            return buffer.get("method"), buffer["mem_id"]

        for (inner, mem_id), x, y in _pairs({key(x): x for x in a}, {key(x): x for x in b}):
            named = f"method {inner} " if inner not in (None, "forward") else ""
            subject = f"{prefix}{named}buffer {mem_id} ({(x or y)['device']})"
            if not self.matched(method, subject, x, y, lambda one: {"device": one["device"], "size": one["size"]}):
                continue
            self.fixed(method, subject, "device", x["device"], y["device"])
            self.sized(method, subject, "size", x["size"], y["size"])
            self.sized(method, subject, "lower_bound", x["lower_bound"], y["lower_bound"])
            if "tensors" in x:
                self.fixed(method, subject, "tensors", x["tensors"], y["tensors"])
            if not prefix:  # a delegate's payload buffers keep no peak
                self.peak(method, subject, mem_id, x.get("peak"), y.get("peak"))

    def peak(self, method: str, subject: str, mem_id: int, a: GoldenPeak | None, b: GoldenPeak | None) -> None:
        """Where a buffer's peak is and which blocks hold it (or, where a side names no modules,
        which operators wrote what it holds), when either changed: reported, never failed (the
        sizes fail), so that a grown buffer says what grew."""
        if a is None or b is None:
            return
        if self.by_operator is None:
            x, y = a["modules"], b["modules"]
        else:
            x, y = (side.get(method, {}).get(mem_id, {}) for side in self.by_operator)
        shares = [(name, x.get(name, 0), y.get(name, 0)) for name in sorted({*x, *y}, key=natural_key)]
        grown = sorted((s for s in shares if s[1] != s[2]), key=lambda s: -abs(s[2] - s[1]))[:LARGEST_SHOWN]
        modules: list[ModuleChange] = []
        operators: list[OperatorChange] = []
        if self.by_operator is None:
            modules = [{"module": name, "a": was, "b": now} for name, was, now in grown]
        else:
            operators = [{"operator": name, "a": was, "b": now} for name, was, now in grown]
        moved = (a["op"], a["source"]) != (b["op"], b["source"])
        more = sum(s[1] != s[2] for s in shares) - len(grown)
        if grown or moved:

            def brief(p: GoldenPeak) -> dict[str, object]:
                return {key: p[key] for key in ("instruction", "op", "source", "bytes")}

            self.changes.append(
                Change(
                    method,
                    subject,
                    "peak",
                    brief(a),
                    brief(b),
                    self.exact,
                    {
                        "moved": moved,
                        "by": "module" if self.by_operator is None else "operator",
                        "modules": modules,
                        "operators": operators,
                        "more": more,
                    },
                )
            )

    def devices(self, method: str, a: dict[str, GoldenDevice], b: dict[str, GoldenDevice]) -> None:
        """A device's total, where it holds more than one buffer (else its buffer's line says it)."""
        for device in sorted(set(a) & set(b)):
            x, y = a[device], b[device]
            if max(x["buffers"], y["buffers"]) > 1:
                subject = f"device {device} ({y['buffers']} buffers)"
                self.sized(method, subject, "size", x["size"], y["size"])
                self.sized(method, subject, "lower_bound", x["lower_bound"], y["lower_bound"])

    def delegates(self, method: str, a: list[GoldenDelegate], b: list[GoldenDelegate]) -> None:
        for index, x, y in _pairs({d["index"]: d for d in a}, {d["index"]: d for d in b}):
            subject = f"delegate {index}"
            if not self.matched(
                method, subject, x, y, lambda one: {"id": one["id"], "target_device": one["target_device"]}
            ):
                continue
            self.fixed(method, subject, "id", x["id"], y["id"])
            self.fixed(method, subject, "target_device", x["target_device"], y["target_device"])
            self.sized(method, subject, "payload_size", x["payload_size"], y["payload_size"])
            self.buffers(method, f"{subject} ", x["payload_buffers"] or [], y["payload_buffers"] or [])
            # where the delegate's working memory sits in the method's buffer: moved or resized,
            # it may lie over tensors alive while the delegate runs, so it always fails
            self.fixed(method, subject, "window", _window(x), _window(y))

    def placements(
        self, method: str, a: GoldenPlacements, b: GoldenPlacements, programs: tuple[Placements, Placements] | None
    ) -> None:
        """Moved placements are only a difference with exact: a plan that shrank, or grew
        within the tolerance, has moved its tensors too. A golden file keeps only the digest,
        so only two programs say which tensors changed."""
        if a["sha256"] != b["sha256"]:
            detail = None
            if programs is not None:
                left, right = programs
                detail = _placement_detail(
                    left.placements[method],
                    right.placements[method],
                    *timelines(left.instructions[method], right.instructions[method]),
                )
            self.changes.append(Change(method, "placements", "digest", a, b, self.exact, detail))


def _window(delegate: GoldenDelegate) -> SizedWindow | None:
    """A delegate's window with its size (its payload's buffers), None without one."""
    window = delegate.get("window")
    if window is None:
        return None
    return SizedWindow(
        mem_id=window["mem_id"],
        offset=window["offset"],
        size=sum(b["size"] for b in delegate["payload_buffers"] or ()),
    )


def _placement_detail(a: list[Planned], b: list[Planned], clock_a: list[int], clock_b: list[int]) -> PlacementsDetail:
    """What changed, tensor by tensor (paired by identity, pair_tensors; lifetimes on the
    clock of _timelines): counts of each kind of change, and the largest changed tensors first."""
    pairs, removed, added = pair_tensors(a, b)
    moved = resized = lifetime = 0
    changed: list[PlacementChange] = []
    for x, y in pairs:
        facts_x, facts_y = facts(x, clock_a), facts(y, clock_b)
        if facts_x == facts_y:
            continue
        moved += facts_x[:3] != facts_y[:3]
        resized += x.row["nbytes"] != y.row["nbytes"]
        lifetime += facts_x[4] != facts_y[4]
        changed.append({"value": y.row["value"], "source": y.source, "a": x.row, "b": y.row})
    changed += [{"value": x.row["value"], "source": x.source, "a": x.row, "b": None} for x in removed]
    changed += [{"value": y.row["value"], "source": y.source, "a": None, "b": y.row} for y in added]
    changed.sort(
        key=lambda row: (
            -max(r["nbytes"] if r is not None else 0 for r in (row["a"], row["b"])),
            row["b"] is None,
            row["value"],
        )
    )
    return {
        "changed": len(changed),
        "added": len(added),
        "removed": len(removed),
        "moved": moved,
        "resized": resized,
        "lifetime": lifetime,
        "largest": changed[:LARGEST_SHOWN],
    }
