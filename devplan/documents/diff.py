"""`devplan diff --json`, and a golden check's differences (diff.schema.json)."""

from typing import Any, Literal, Optional, final

from typing_extensions import NotRequired, TypedDict

from devplan.documents.common import FileName
from devplan.documents.inspect import Window


class Tolerance(TypedDict):
    percent: Optional[float]
    bytes: Optional[int]


class Placement(TypedDict):
    value: int
    mem_id: int
    offset: int
    nbytes: int
    lifetime: Optional[list[int]]
    device: str


class PlacementChange(TypedDict):
    value: int
    source: str
    a: Optional[Placement]
    b: Optional[Placement]


@final  # so that `"largest" in detail` tells it from a PeakDetail
class PlacementsDetail(TypedDict):
    changed: int
    added: int
    removed: int
    moved: int
    resized: int
    lifetime: int
    largest: list[PlacementChange]


class ModuleChange(TypedDict):
    module: str
    a: int
    b: int


class OperatorChange(TypedDict):
    operator: str
    a: int
    b: int


@final  # so that `"by" in detail` tells it from a PlacementsDetail
class PeakDetail(TypedDict):
    moved: bool
    by: Literal["module", "operator"]
    modules: list[ModuleChange]
    operators: list[OperatorChange]
    more: int


class SizedWindow(Window):
    """A delegate's window with the bytes its payload's buffers take: a and b of a window change."""

    size: int


class Change(TypedDict):
    method: Optional[str]
    subject: str
    fact: str
    a: Any  # the fact's value in A and in B (a size, a list of names, a placement...)
    b: Any
    fails: bool
    detail: NotRequired[PlacementsDetail | PeakDetail]


class DiffFiles(TypedDict):
    a: FileName
    b: FileName


class DiffDocument(TypedDict):
    schema_version: Literal[1]
    files: DiffFiles
    tolerance: Optional[Tolerance]
    weights_tolerance: Optional[Tolerance]
    exact: bool
    ok: bool
    changes: list[Change]
