"""What a comparison of two plans finds: each fact that differs (Change), all of them with the
tolerances they were judged by (Comparison), and the tolerance itself, parsed from a flag. The
text views (difftext.py) read these; diff.py's Diff is a Comparison with its text."""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from devplan import documents
from devplan.documents import PeakDetail, PlacementsDetail
from devplan.errors import DevplanError
from devplan.units import size_bytes, size_text

SCHEMA_VERSION: Final = 1  # of the diff document; docs/diff-json.md


@dataclass(frozen=True)
class Tolerance:
    """How much a size may grow and still count as the same plan: a percentage of the old
    size, or a number of bytes."""

    percent: Fraction | None = None
    nbytes: int | None = None

    def allows(self, old: int, new: int) -> bool:
        growth = new - old
        if self.percent is not None:
            return growth * 100 <= old * self.percent
        return growth <= (self.nbytes or 0)

    def __str__(self) -> str:
        return f"{float(self.percent):g}%" if self.percent is not None else size_text(self.nbytes or 0)

    def document(self) -> documents.Tolerance:
        return {"percent": float(self.percent) if self.percent is not None else None, "bytes": self.nbytes}


def parse_tolerance(text: str, flag: str = "--tolerance") -> Tolerance:
    """'2%', '0.5%', '4KiB', '4096' -> Tolerance; `flag` names it in a refusal."""
    percent = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*%\s*", text)
    if percent:
        try:  # the document states it as a float; bytes have no such bound (units.size_text counts in integers)
            float(Fraction(percent.group(1)))
        except OverflowError:
            raise DevplanError(
                f"{flag} {text!r}: a percentage too large to compare sizes by; write one such as 2%"
            ) from None
        return Tolerance(percent=Fraction(percent.group(1)))
    nbytes = size_bytes(text)
    if nbytes is None or nbytes.denominator != 1:
        raise DevplanError(
            f"{flag} {text!r}: write a percentage such as 2% or a whole number of bytes "
            f"such as 4KiB (units: B, KB, KiB, MB, MiB, GB, GiB)"
        )
    return Tolerance(nbytes=int(nbytes))


@dataclass(frozen=True)
class Change:
    """One fact that differs. method None is the program as a whole; subject names what it is
    about ("buffer 1 (cpu)", "delegate 0", "operators", "instructions"), fact which of its
    facts ("size", "device", "added", "count", ...); a and b are its values on each side."""

    method: str | None
    subject: str
    fact: str
    a: object
    b: object
    fails: bool
    detail: PlacementsDetail | PeakDetail | None = None  # placements compared tensor by tensor, or the peak's blocks

    def document(self) -> documents.Change:
        row: documents.Change = {
            "method": self.method,
            "subject": self.subject,
            "fact": self.fact,
            "a": self.a,
            "b": self.b,
            "fails": self.fails,
        }
        if self.detail is not None:
            row["detail"] = self.detail
        return row


@dataclass(frozen=True)
class Comparison:
    a: str  # the sides' names (file basenames)
    b: str
    changes: tuple[Change, ...]
    tolerance: Tolerance | None = None  # of the planned memory; of the weights too unless weights_tolerance
    exact: bool = False
    # whether both sides number their values alike: one names the model's modules and the other
    # none (ExecuTorch's default programs against devplan's) comes from another compiler
    comparable: bool = True
    weights_tolerance: Tolerance | None = None

    @property
    def ok(self) -> bool:
        """No change fails: the programs plan the same, within the tolerance."""
        return not any(change.fails for change in self.changes)

    @property
    def shrank(self) -> bool:
        """Some size is smaller on b's side: a plan that improved, which a golden file should record."""
        return any(isinstance(c.a, int) and isinstance(c.b, int) and c.b < c.a for c in self.changes)

    def document(self) -> documents.DiffDocument:
        return {
            "schema_version": SCHEMA_VERSION,
            "files": {"a": {"name": self.a}, "b": {"name": self.b}},
            "tolerance": self.tolerance.document() if self.tolerance is not None else None,
            "weights_tolerance": self.weights_tolerance.document() if self.weights_tolerance is not None else None,
            "exact": self.exact,
            "ok": self.ok,
            "changes": [change.document() for change in self.changes],
        }
