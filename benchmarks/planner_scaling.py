"""How the memory planner scales: plan synthetic networks of 1k, 10k and 100k tensors with
every algorithm and print time, buffer bytes and the ratio to the lower bound.

    python benchmarks/planner_scaling.py [--sizes 1000,10000,100000] [--algorithms best,...] [--json]

The lifetimes imitate a deep network run as a chain of ops: most activations are read
only by the next op, some feed a nearby op (skip connections), every block's input lives
across the block (residuals), and a few tensors (inputs, state such as a KV cache) live
for the whole run. Activation sizes shrink stage by stage as in a CNN backbone."""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devplan.planning import ALGORITHMS, Interval, lower_bound, plan  # noqa: E402

HEADERS = ("n", "algorithm", "seconds", "bytes", "/ bound")

SEED = 1234
BLOCK = 24  # ops per residual block
WHOLE_RUN = 32  # tensors alive from the first instruction to the last
STAGES = 8


def network(count: int, seed: int = SEED) -> list[Interval]:
    rng = random.Random(seed)
    end = count - WHOLE_RUN
    intervals = [Interval(key, rng.choice([4096, 65536, 262144]), 0, end) for key in range(WHOLE_RUN)]
    for op in range(end):
        stage = op * STAGES // max(1, end)
        base = (1 << 20) >> stage
        size = int(base * rng.choice([0.25, 1, 1, 1, 2, 4])) + rng.randrange(16)
        roll = rng.random()
        if op % BLOCK == 0:
            last = op + BLOCK + rng.randrange(BLOCK)
        elif roll < 0.12:
            last = op + rng.randint(2, 24)
        else:
            last = op + 1
        intervals.append(Interval(WHOLE_RUN + op, size, op, min(last, end)))
    return intervals


def measure(count: int, algorithms: Sequence[str]) -> list[dict]:
    intervals = network(count)
    start = time.perf_counter()
    (bound,) = lower_bound(intervals).values()
    rows = [
        {"n": count, "algorithm": "lower bound", "seconds": time.perf_counter() - start, "bytes": bound, "ratio": 1.0}
    ]
    for name in algorithms:
        start = time.perf_counter()
        result = plan(intervals, 16, name)
        seconds = time.perf_counter() - start
        (size,) = result.sizes.values()
        label = name if name == result.algorithm else f"{name} ({result.algorithm})"
        rows.append({"n": count, "algorithm": label, "seconds": seconds, "bytes": size, "ratio": size / bound})
    return rows


def table(rows: Sequence[dict]) -> str:
    cells = [list(HEADERS)] + [
        [str(row["n"]), row["algorithm"], f"{row['seconds']:.2f}", str(row["bytes"]), f"{row['ratio']:.3f}"]
        for row in rows
    ]
    widths = [max(len(line[i]) for line in cells) for i in range(len(HEADERS))]
    lines = [
        "  ".join(
            text.ljust(width) if i == 1 else text.rjust(width) for i, (text, width) in enumerate(zip(line, widths))
        )
        for line in cells
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="tensor counts, comma-separated")
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS), help="planning algorithms, comma-separated")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    args = parser.parse_args(argv)
    algorithms = args.algorithms.split(",")
    rows = [row for count in args.sizes.split(",") for row in measure(int(count), algorithms)]
    print(json.dumps({"rows": rows}, indent=2) if args.json else table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
