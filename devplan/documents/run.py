"""`devplan run --json` (run.schema.json)."""

from typing import Any, Literal, Optional, final

from typing_extensions import NotRequired, TypedDict

from devplan.documents.common import FileName


class DeviceMemory(TypedDict):
    device: str
    planned: int
    constants: int
    peak: Optional[int]
    beyond_plan: Optional[int]


@final  # so that `"value" in summary` tells the two apart
class TensorSummary(TypedDict):
    dtype: str
    shape: list[int]
    min: float | str  # "NaN", "Infinity" or "-Infinity" where JSON has no number (jsontext.number)
    max: float | str
    mean: float | str


@final
class ValueSummary(TypedDict):
    value: Any


class OutputComparison(TypedDict):
    index: int
    sqnr_db: float | str | None  # None: no noise at all; "-Infinity": noise over an all-zero reference
    max_abs: float | str | None  # None where there is nothing to measure (a value, another shape: `note`)
    mean_abs: float | str | None
    argmax_agreement: Optional[float]  # 2-D float outputs only: the rows whose top class is the reference's
    allclose: bool
    passed: bool
    note: Optional[str]


class Reference(TypedDict):
    file: FileName
    atol: float
    rtol: float
    min_sqnr_db: Optional[float]
    passed: bool
    outputs: list[OutputComparison]


class Latency(TypedDict):
    runs: int
    median_ms: float
    min_ms: float
    max_ms: float


class RunDocument(TypedDict):
    schema_version: Literal[1]
    file: FileName
    method: str
    memory: NotRequired[list[DeviceMemory]]
    reference: NotRequired[Reference]
    latency: NotRequired[Latency]
    runs: list[list[TensorSummary | ValueSummary]]
