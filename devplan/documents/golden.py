"""Golden files (golden.schema.json): a summary of the inspection document.

A golden file gives each size in bytes with its human form beside it (`size_text`), for a
pull request's diff; readers compare the bytes."""

from typing import Any, Literal, Optional

from typing_extensions import NotRequired, TypedDict

from devplan.documents.inspect import PayloadBuffer, Window


class GoldenFile(TypedDict):
    name: str
    constant_bytes: int
    constant_bytes_text: NotRequired[str]


class GoldenCounts(TypedDict):
    instructions: int
    values: int
    tensors: int
    delegates: int


class GoldenPeak(TypedDict):
    instruction: int
    op: str
    source: Optional[str]
    bytes: int
    bytes_text: NotRequired[str]
    modules: dict[str, int]


class GoldenBuffer(TypedDict):
    mem_id: int
    device: str
    size: int
    size_text: NotRequired[str]
    lower_bound: int
    lower_bound_text: NotRequired[str]
    tensors: int
    peak: NotRequired[GoldenPeak]


class GoldenDevice(TypedDict):
    buffers: int
    size: int
    size_text: NotRequired[str]
    lower_bound: int
    lower_bound_text: NotRequired[str]


class GoldenPayloadBuffer(PayloadBuffer):
    size_text: NotRequired[str]
    lower_bound_text: NotRequired[str]


class GoldenDelegate(TypedDict):
    index: int
    id: str
    target_device: Optional[str]
    payload_size: int
    payload_size_text: NotRequired[str]
    window: Optional[Window]
    payload_buffers: Optional[list[GoldenPayloadBuffer]]


class GoldenPlacements(TypedDict):
    count: int
    sha256: str


class GoldenMethod(TypedDict):
    name: str
    returns: NotRequired[list[Any]]
    counts: GoldenCounts
    buffers: list[GoldenBuffer]
    devices: dict[str, GoldenDevice]
    operators: list[str]
    delegates: list[GoldenDelegate]
    placements: GoldenPlacements


class GoldenDocument(TypedDict):
    schema_version: Literal[1]
    document: NotRequired[Literal["devplan-golden"]]
    format: NotRequired[Literal["devplan-golden"]]
    file: GoldenFile
    methods: list[GoldenMethod]
