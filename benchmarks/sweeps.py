"""The release tier: the long sweeps over families and options that the suite samples (tests
marked `release`, tests/tiers.py), run before a release. One pytest run on every core
(`pytest --release -m release`), then a row per test file: tests passed, failed, skipped and
expected to fail, and the seconds they took. Exits 1 when a test fails, as the suite does.

    python benchmarks/sweeps.py [--json] [PYTEST ARGS...]

Anything after the options goes to pytest (`-k corpus:linear`, a file to narrow the run to)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADERS = ("file", "passed", "failed", "skipped", "xfailed", "seconds")


def outcome(case: ElementTree.Element) -> str:
    """What JUnit's testcase element says became of the test."""
    for child in case:
        if child.tag in ("failure", "error"):
            return "failed"
        if child.tag == "skipped":
            return "xfailed" if child.get("type") == "pytest.xfail" else "skipped"
    return "passed"


def test_file(classname: str) -> str:
    """The file of a JUnit classname: its module's dotted path, then any class inside it."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        if (ROOT / Path(*parts[:end])).with_suffix(".py").exists():
            return "/".join(parts[:end]) + ".py"
    return classname


def tally(junit: Path) -> dict[str, dict[str, float]]:
    """file -> {outcome: count, seconds} from a JUnit file pytest wrote."""
    rows: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(HEADERS[1:], 0.0))
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        row = rows[test_file(case.get("classname", ""))]
        row[outcome(case)] += 1
        row["seconds"] += float(case.get("time", 0))
    return dict(sorted(rows.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args, pytest_args = parser.parse_known_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        junit = Path(scratch) / "release.xml"
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "--release", "-m", "release", "-n", "auto", "-q"]
            + [f"--junitxml={junit}", *pytest_args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        rows = tally(junit) if junit.exists() else {}
    if not rows:  # pytest could not start, or selected nothing: its own words say why
        print(run.stdout[-4000:], file=sys.stderr)
        return 1 if run.returncode not in (0, 5) else 0
    if args.json:
        print(json.dumps([{"file": name, **row} for name, row in rows.items()], indent=2))
    else:
        width = max(len(HEADERS[0]), *map(len, rows))
        print(f"{HEADERS[0]:<{width}}" + "".join(f"{h:>9}" for h in HEADERS[1:]))
        print("-" * (width + 9 * (len(HEADERS) - 1)))
        for name, row in rows.items():
            counts = "".join(f"{int(row[h]):>9}" for h in HEADERS[1:-1])
            print(f"{name:<{width}}{counts}{row['seconds']:>9.1f}")
        if run.returncode not in (0, 5):  # the failures, as pytest printed them
            print("\n" + "\n".join(line for line in run.stdout.splitlines() if line.startswith("FAILED")))
    return 0 if run.returncode in (0, 5) else 1


if __name__ == "__main__":
    sys.exit(main())
