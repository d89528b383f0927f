"""`devplan inspect --delegate N --json` on an XNNPACK delegate, and `devplan.inspect(...,
delegate=N)` (xnnpack.schema.json): the graph inside ExecuTorch's XnnpackBackend payload."""

from typing import Any, Literal, Optional

from typing_extensions import TypedDict

from devplan.documents.common import FileName


class XnnDelegate(TypedDict):
    method: str
    index: int
    id: str
    payload_size: int
    source: Optional[str]  # where the program says the delegate call came from
    module: Optional[str]


class XnnHeader(TypedDict):
    graph_offset: int
    graph_size: int
    constant_offset: int
    constant_size: int


class XnnCounts(TypedDict):
    nodes: int
    values: int
    constants: int


class XnnNode(TypedDict):
    index: int
    op: str
    inputs: list[int]
    outputs: list[int]
    params: dict[str, Any]  # an integer, a number, a list of integers, or "inf", "-inf", "nan"
    debug_handle: int
    source: Optional[str]  # where the program says the node's debug handle came from
    module: Optional[str]
    output_min: Optional[float]
    output_max: Optional[float]


class XnnQuantization(TypedDict):
    kind: Literal["per_tensor", "per_channel", "per_channel_group", "per_token_dynamic"]
    scale: Optional[float]
    zero_point: Optional[int]
    channel_dim: Optional[int]
    group_size: Optional[int]
    scales: int
    scale_min: Optional[float]
    scale_max: Optional[float]
    scale_constant: Optional[int]
    nonbatch_dims: Optional[int]


class XnnValue(TypedDict):
    id: int
    dtype: str
    shape: list[int]
    role: Literal["input", "output", "input+output", "constant", "intermediate"]
    external_id: Optional[int]
    constant: Optional[int]
    key: Optional[str]
    quantization: Optional[XnnQuantization]


class XnnConstant(TypedDict):
    index: int
    key: Optional[str]
    offset: Optional[int]
    size: int


class XnnpackDocument(TypedDict):
    schema_version: int
    format: Literal["XNNGraph"]
    file: FileName
    delegate: XnnDelegate
    version: str
    header: Optional[XnnHeader]
    counts: XnnCounts
    inputs: list[int]
    outputs: list[int]
    nodes: list[XnnNode]
    values: list[XnnValue]
    constants: list[XnnConstant]
