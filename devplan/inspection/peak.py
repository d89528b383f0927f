"""The peak, explained: for each planned buffer, the tensors holding bytes at its busiest
instruction, largest first, and how much of the peak each top-level module of the model holds."""

from __future__ import annotations

from devplan.documents import InspectedBuffer, InspectedInstruction, InspectedTensor, Peak, PeakTensor
from devplan.inspection.placed import offset_of
from devplan.inspection.sources import block_of
from devplan.units import natural_key


def peak(buffer: InspectedBuffer, placed: list[InspectedTensor], instructions: list[InspectedInstruction]) -> Peak:
    """`placed`: the buffer's tensors, each with its module."""
    at = buffer["peak_instruction"]
    alive = (
        [t for t in placed if t["nbytes"] and t["held"] is not None and t["held"][0] <= at <= t["held"][1]]
        if at is not None
        else []
    )
    alive.sort(key=lambda t: (-t["nbytes"], t["value"]))
    covered: list[tuple[int, int]] = []
    rows: list[PeakTensor] = []
    shares: dict[str, int] = {}
    for t in alive:
        start, end = offset_of(t), offset_of(t) + t["nbytes"]
        own = t["nbytes"] - sum(max(0, min(end, b) - max(start, a)) for a, b in covered)  # aliases count once
        covered = _merged(covered, (start, end))
        rows.append(
            {
                "value": t["value"],
                "nbytes": t["nbytes"],
                "own_bytes": own,
                "held": t["held"],
                "role": t["role"],
                "source": t["source"],
            }
        )
        block = block_of(t)
        shares[block] = shares.get(block, 0) + own
    # a method of no instructions still has its inputs alive "at" instruction 0
    row = instructions[at] if at is not None and at < len(instructions) else None
    return {
        "mem_id": buffer["mem_id"],
        "device": buffer["device"],
        "instruction": at,
        "bytes": buffer["peak"],
        "source": row["source"] if row else None,
        "op": (row["op"] or row["kind"]) if row else None,
        "tensors": rows,
        "modules": [
            {"module": name, "bytes": size}
            for name, size in sorted(shares.items(), key=lambda item: (-item[1], natural_key(item[0])))
            if size
        ],
    }


def _merged(ranges: list[tuple[int, int]], new: tuple[int, int]) -> list[tuple[int, int]]:
    """Disjoint sorted ranges with `new` added."""
    result, (start, end) = [], new
    for a, b in ranges:
        if b < start or a > end:
            result.append((a, b))
        else:
            start, end = min(a, start), max(b, end)
    return sorted(result + [(start, end)])
