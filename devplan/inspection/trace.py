"""The plan as a Chrome trace (Trace Event Format), for chrome://tracing and ui.perfetto.dev:
time is the instruction index (one instruction per millisecond of trace time), and each
method is a process with
- a track of its instructions, one slice each, named by operator or delegate;
- a counter per planned buffer: the bytes its tensors hold while each instruction runs;
- a slice per tensor for as long as it holds its bytes (its offset, size and role in the
  slice's arguments), packed onto as few tracks per buffer as never overlap.

Drawn from the inspection document alone, so ExecuTorch's programs trace the same, and
deterministic to the byte."""

from __future__ import annotations

import heapq
import json
from typing import Any

from devplan.documents import InspectDocument, InspectedMethod, InspectedTensor
from devplan.inspection.overlap import busiest
from devplan.inspection.placed import held_of, offset_of
from devplan.units import inert

STEP = 1000  # trace microseconds per instruction


def memory_trace(doc: InspectDocument) -> dict[str, Any]:
    events: list[dict[str, Any]] = []
    for pid, method in enumerate(doc["methods"], start=1):
        events += _method(pid, method)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"file": doc["file"]["name"], "time": "instruction index (1 ms per instruction)"},
    }


def trace_json(doc: InspectDocument) -> str:
    # inert: printed with --trace -, and the same trace as JSON reads it
    return inert(json.dumps(memory_trace(doc), sort_keys=True, separators=(",", ":")) + "\n")


def _method(pid: int, method: InspectedMethod) -> list[dict[str, Any]]:
    events = [_name("process_name", pid, 0, f"method {method['name']}"), _name("thread_name", pid, 0, "instructions")]
    for row in method["instructions"]:
        name = row["op"] or (f"delegate {row['delegate']}" if row["delegate"] is not None else row["kind"])
        events.append(
            {
                "ph": "X",
                "name": name,
                "cat": "instruction",
                "pid": pid,
                "tid": 0,
                "ts": row["index"] * STEP,
                "dur": STEP,
                "args": {"instruction": row["index"], "args": row["arguments"], "source": row["source"]},
            }
        )
    tid = 1
    for buffer in method["buffers"]:
        label = f"buffer {buffer['mem_id']} ({buffer['device']})"
        held = sorted(
            (t for t in method["tensors"] if t["mem_id"] == buffer["mem_id"] and t["held"] and t["nbytes"]),
            key=lambda t: (held_of(t)[0], offset_of(t), t["value"]),
        )
        events += _counter(pid, label, held, method["counts"]["instructions"])
        lanes = 0  # tracks so far; a tensor takes the lowest track whose latest slice has ended
        busy: list[tuple[int, int]] = []  # (last instruction, track) of the tracks holding a slice
        free: list[int] = []
        for t in held:
            while busy and busy[0][0] < held_of(t)[0]:
                heapq.heappush(free, heapq.heappop(busy)[1])
            if free:
                lane = heapq.heappop(free)
            else:
                lane, lanes = lanes, lanes + 1
                events.append(_name("thread_name", pid, tid + lane, f"{label} tensors {lane + 1}"))
            heapq.heappush(busy, (held_of(t)[1], lane))
            first, last = held_of(t)
            events.append(
                {
                    "ph": "X",
                    "name": f"v{t['value']} {t['dtype']}{list(t['shape'])}",
                    "cat": "tensor",
                    "pid": pid,
                    "tid": tid + lane,
                    "ts": first * STEP,
                    "dur": (last - first + 1) * STEP,
                    "args": {
                        "value": t["value"],
                        "offset": t["offset"],
                        "nbytes": t["nbytes"],
                        "role": t["role"],
                        "lifetime": t["lifetime"],
                        "held": t["held"],
                        "source": t["source"],
                    },
                }
            )
        tid += lanes
    return events


def _counter(pid: int, label: str, held: list[InspectedTensor], steps: int) -> list[dict[str, Any]]:
    """Bytes in use at each instruction (aliases counted once), and zero once the method ends.
    One sweep adds and removes each tensor's bytes once."""
    points = list(busiest(held, range(steps)))
    points.append((steps, 0))
    return [
        {"ph": "C", "name": f"{label} bytes in use", "pid": pid, "ts": step * STEP, "args": {"bytes": used}}
        for step, used in points
    ]


def _name(kind: str, pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": {"name": name}}
