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


class RunDocument(TypedDict):
    schema_version: Literal[1]
    file: FileName
    method: str
    memory: NotRequired[list[DeviceMemory]]
    runs: list[list[TensorSummary | ValueSummary]]
