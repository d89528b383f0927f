"""Two programs' planned tensors paired by what they are, not by value index: a graph that
gained one op renumbers every value after it, and a golden diff must still say which tensor
moved or grew (diff.py reads the pairs). Each tensor's identity is its role, name or the
module and op that made it; instructions are marked the same way, so that both sides'
lifetimes can be read on one clock."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Hashable

from devplan.documents import GoldenDocument, InspectDocument, InspectedMethod, InspectedTensor, Placement
from devplan.inspection.golden import placements
from devplan.inspection.placed import held_of
from devplan.inspection.sources import INPUTS, STATE, source_identity

Mark = tuple[str, str, int]  # an instruction as instruction_marks reads it: what runs, its source, alike before it


@dataclass(frozen=True)
class Planned:
    """One planned tensor of a program: its placement row, and what it is, to pair it with the
    other side's: `identity` (its role and position or name, else where it was made, without
    the file and line), `form` (shape and dtype), `source` (the document's, for people) and
    whether the identity names a source (else it is only the kernel that wrote it)."""

    row: Placement
    identity: str
    form: tuple[tuple[int, ...], str]  # (shape, dtype)
    source: str
    sourced: bool


def planned(method: InspectedMethod) -> list[Planned]:
    """The planned tensors of an inspection document's method, in value order."""
    inputs = {value: i for i, value in enumerate(method["inputs"])}
    outputs = {value: i for i, value in enumerate(method["outputs"])}
    rows = placements(method)
    found = []
    for row, tensor in zip(rows, (t for t in method["tensors"] if t["mem_id"] is not None)):
        identity, sourced = _identity(tensor, inputs, outputs)
        found.append(Planned(row, identity, (tuple(tensor["shape"]), tensor["dtype"]), tensor["source"], sourced))
    return found


def peak_operators(method: InspectedMethod) -> dict[int, dict[str, int]]:
    """Each buffer's bytes at its peak by the operator that wrote them (the kernel of the
    instruction from which a tensor's bytes are held; inputs and state a share each): what a
    peak is made of when a program names no modules, in terms both compilers' programs share."""
    rows, found = method["instructions"], {}
    for entry in method["peak"]:
        shares: dict[str, int] = {}
        for t in entry["tensors"]:
            at = held_of(t)[0]
            name = (
                INPUTS
                if t["role"].startswith("input")
                else STATE
                if t["role"] == "state"
                else (rows[at]["op"] or rows[at]["kind"])
                if at < len(rows)
                else "(unknown)"
            )
            shares[name] = shares.get(name, 0) + t["own_bytes"]
        found[entry["mem_id"]] = shares
    return found


def names_modules(doc: InspectDocument) -> bool:
    """Whether a program says which module made what: ExecuTorch's default programs keep no
    stacktrace, so they name none, and neither does devplan's with --no-source."""
    return any(row["module"] is not None for m in doc["methods"] for row in m["instructions"])


def golden_names_modules(golden: GoldenDocument) -> bool:
    """Whether a golden file's peaks name a block of the model, not only these stand-ins."""
    unnamed = {"(no module)", INPUTS, STATE}
    return any(
        block not in unnamed
        for m in golden["methods"]
        for b in m["buffers"]
        if "peak" in b
        for block in b["peak"]["modules"]
    )


def instruction_marks(method: InspectedMethod) -> list[Mark]:
    """Each instruction of an inspection document's method as what it runs, where it came from
    (without file and line) and how many alike ran before it: what stays of it when the graph
    gains or loses ops elsewhere."""
    seen: dict[tuple[str, str], int] = defaultdict(int)
    marks: list[Mark] = []
    for row in method["instructions"]:
        what = (row["op"] or row["kind"], source_identity(row["source"] or "")[0])
        marks.append((*what, seen[what]))
        seen[what] += 1
    return marks


def timelines(a: list[Mark], b: list[Mark]) -> tuple[list[int], list[int]]:
    """One clock for both sides' instructions: an instruction both have (by its mark) reads its
    index in a; one that only its side has, the time of the next that both have (an inserted
    op takes the place of the one it comes before), or the end, which each clock ends with.
    Lifetimes compared on this clock are equal when only the numbering moved."""
    at = {mark: i for i, mark in enumerate(a)}
    both = at.keys() & set(b)

    def clock(marks: list[Mark]) -> list[int]:
        times, following = [0] * len(marks), len(a)
        for i in reversed(range(len(marks))):
            following = at[marks[i]] if marks[i] in both else following
            times[i] = following
        return times + [len(a)]

    return clock(a), clock(b)


_NAMED = ("parameter ", "buffer ", "constant ")


def _identity(tensor: InspectedTensor, inputs: dict[int, int], outputs: dict[int, int]) -> tuple[str, bool]:
    """A weight the program names by its name; an input or output by its position; any other
    tensor by where it was made (module path and op), or the kernel that wrote it."""
    source, value = tensor["source"], tensor["value"]
    if source.startswith(_NAMED) and not source.startswith("constant of "):
        return source, True
    if value in outputs:
        return f"output {outputs[value]}", True
    if value in inputs:
        return f"input {inputs[value]}", True
    return source_identity(source)


def facts(t: Planned, clock: list[int]) -> tuple[int, int, str, int, tuple[int, ...] | None]:
    """A placement but for what renumbering changes: its value index, and its lifetime's
    instruction numbers (read on both sides' one clock)."""
    life = t.row["lifetime"]
    span = tuple(clock[min(i, len(clock) - 1)] for i in life) if life else None
    return t.row["mem_id"], t.row["offset"], t.row["device"], t.row["nbytes"], span


def pair_tensors(
    a: list[Planned], b: list[Planned]
) -> tuple[list[tuple[Planned, Planned]], list[Planned], list[Planned]]:
    """Each side's planned tensors paired by what they are, not by value index (a graph that
    gained one scalar renumbers every value after it): by identity and then shape and dtype,
    in order within each; then what is left of an identity, in order (the same tensor,
    resized); then, where one of the two has no source (ExecuTorch's default programs keep no
    stacktrace), by shape and dtype in order. Returns (pairs, a's unpaired, b's unpaired),
    in value order; grouping and sorting keep it n log n."""
    pairs: list[tuple[Planned, Planned]] = []
    by_identity: dict[str, tuple[list[Planned], list[Planned]]] = defaultdict(lambda: ([], []))
    for side, tensors in enumerate((a, b)):
        for t in tensors:
            by_identity[t.identity][side].append(t)
    rest_a: list[Planned] = []
    rest_b: list[Planned] = []
    for xs, ys in by_identity.values():
        left_x, left_y = _pair_in_order(xs, ys, lambda t: t.form, pairs)
        n = min(len(left_x), len(left_y))
        pairs += zip(left_x[:n], left_y[:n])
        rest_a += left_x[n:]
        rest_b += left_y[n:]
    # across identities only where one side cannot say where its tensor came from
    unsourced_a, sourced_a = [t for t in rest_a if not t.sourced], [t for t in rest_a if t.sourced]
    rest_b.sort(key=_value)
    unsourced_a, rest_b = _pair_in_order(unsourced_a, rest_b, lambda t: t.form, pairs)
    unsourced_b, sourced_b = [t for t in rest_b if not t.sourced], [t for t in rest_b if t.sourced]
    sourced_a, unsourced_b = _pair_in_order(sourced_a, unsourced_b, lambda t: t.form, pairs)
    pairs.sort(key=lambda pair: _value(pair[1]))
    return pairs, sorted(unsourced_a + sourced_a, key=_value), sorted(unsourced_b + sourced_b, key=_value)


def _value(t: Planned) -> int:
    return t.row["value"]


def _pair_in_order(
    xs: list[Planned],
    ys: list[Planned],
    key: Callable[[Planned], Hashable],
    pairs: list[tuple[Planned, Planned]],
) -> tuple[list[Planned], list[Planned]]:
    """Pairs xs and ys with equal key, in order within each key, onto pairs; returns what is
    left of each, in value order."""
    groups: dict[Hashable, tuple[list[Planned], list[Planned]]] = defaultdict(lambda: ([], []))
    for side, tensors in enumerate((xs, ys)):
        for t in tensors:
            groups[key(t)][side].append(t)
    left_x, left_y = [], []
    for gx, gy in groups.values():
        n = min(len(gx), len(gy))
        pairs += zip(gx[:n], gy[:n])
        left_x += gx[n:]
        left_y += gy[n:]
    return sorted(left_x, key=_value), sorted(left_y, key=_value)
