"""`devplan check --json` (check.schema.json)."""

from typing import Literal, Optional

from typing_extensions import NotRequired, TypedDict

from devplan.documents.common import FileName, WorkingMemory
from devplan.documents.diff import DiffDocument
from devplan.documents.golden import GoldenPeak


class CheckedBuffer(TypedDict):
    method: str
    mem_id: Optional[int]
    device: str
    size: int
    lower_bound: int
    budget: Optional[int]
    max_ratio: Optional[float]
    buffers: int
    ratio: float
    problem: Optional[str]
    backends: NotRequired[int]
    working_memory: NotRequired[Optional[WorkingMemory]]
    peak: NotRequired[Optional[GoldenPeak]]  # the schema says: as golden.schema.json has it
    ok: bool


class CheckedGolden(TypedDict):
    file: FileName
    updated: bool
    ok: bool
    diff: Optional[DiffDocument]  # the schema says: diff.schema.json


class MissingKernel(TypedDict):
    method: str
    kind: Literal["operator", "kernel", "backend"]
    name: str
    detail: str


class CheckedRuntime(TypedDict):
    file: FileName
    ok: bool
    backends_checked: bool  # the build list names the backends it links (build_features)
    missing: list[MissingKernel]


class CheckDocument(TypedDict):
    schema_version: Literal[1]
    file: FileName
    ok: bool
    buffers: list[CheckedBuffer]
    golden: Optional[CheckedGolden]
    runtime: NotRequired[CheckedRuntime]  # with --runtime only
