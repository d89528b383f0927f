"""The JSON documents devplan prints and writes, as types: each a TypedDict mirroring its
schema in docs/schemas/ (tests/test_schemas.py holds every key and whether it is required
equal to the schema's), so that renaming a key is a type error where a document is built or
read, not a surprise in a golden file. Torch-free: the read side imports it."""

from typing import Any, Literal, Optional, final

from typing_extensions import NotRequired, TypedDict


class FileName(TypedDict):
    name: str


class WorkingMemory(TypedDict):
    """What a backend allocates itself at run time, where its payload says (XNNPACK's graph)."""

    bytes: Optional[int]
    values: Optional[int]
    bound: Literal["upper", None]


# --- devplan check --json (check.schema.json) -------------------------------------------


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
    peak: NotRequired[Optional[dict]]
    ok: bool


class CheckedGolden(TypedDict):
    file: FileName
    updated: bool
    ok: bool
    diff: Optional[dict]


class CheckDocument(TypedDict):
    schema_version: Literal[1]
    file: FileName
    ok: bool
    buffers: list[CheckedBuffer]
    golden: Optional[CheckedGolden]


# --- devplan run --json (run.schema.json) -----------------------------------------------


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
    min: float
    max: float
    mean: float


@final
class ValueSummary(TypedDict):
    value: Any


class RunDocument(TypedDict):
    schema_version: Literal[1]
    file: FileName
    method: str
    memory: NotRequired[list[DeviceMemory]]
    runs: list[list[TensorSummary | ValueSummary]]


# --- devplan compile --json (compile.schema.json) ---------------------------------------


class ExternalFile(TypedDict):
    size: int
    keys: int


class CompiledFile(TypedDict):
    name: str
    size: int
    constant_bytes: int
    external: NotRequired[ExternalFile]


class CompiledCounts(TypedDict):
    values: int
    instructions: int
    operators: int
    delegates: int


class CompiledBuffer(TypedDict):
    mem_id: int
    device: str
    size: int
    lower_bound: int
    tensors: int


class CompiledWindow(TypedDict):
    mem_id: int
    offset: int
    size: int


class CompiledDelegate(TypedDict):
    index: int
    id: str
    target_device: str
    payload_size: int
    working_memory: NotRequired[Optional[WorkingMemory]]
    window: Optional[CompiledWindow]


class CompiledMethod(TypedDict):
    name: str
    planner: str
    counts: CompiledCounts
    buffers: list[CompiledBuffer]
    delegates: list[CompiledDelegate]


class Folding(TypedDict):
    subgraphs: int
    shared_inputs: int
    constant_bytes_added: int
    run_bytes_removed: int


class QuantizationError(TypedDict):
    sqnr_db: Optional[float]
    max_abs_diff: float
    argmax_agreement: Optional[float]


class QuantizedWeights(TypedDict):
    float_bytes: int
    quantized_bytes: int


QuantizeMode = Literal["dynamic-int8", "int8", "dynamic-int4"]


class Quantization(TypedDict):
    mode: QuantizeMode
    samples: int
    calibration: Literal["file", "seeded"]
    error: QuantizationError
    float_ops: dict[str, int]
    weights: QuantizedWeights


class Timings(TypedDict):
    seconds: float
    stages: dict[str, float]


class CompileSummary(TypedDict):
    schema_version: Literal[1]
    file: CompiledFile
    methods: list[CompiledMethod]
    folding: Folding
    quantization: NotRequired[Quantization]
    timings: Timings


# --- devplan diff --json (diff.schema.json) ---------------------------------------------


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


class PeakDetail(TypedDict):
    moved: bool
    modules: list[ModuleChange]
    more: int


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
    exact: bool
    ok: bool
    changes: list[Change]


# --- golden files (golden.schema.json) --------------------------------------------------

# a golden file gives each size in bytes with its human form beside it (`size_text`), for a
# pull request's diff; readers compare the bytes


class GoldenFile(TypedDict):
    name: str
    constant_bytes: int
    constant_bytes_text: NotRequired[str]


class GoldenCounts(TypedDict):
    instructions: int
    values: int
    tensors: int
    delegates: int


class GoldenPeak(TypedDict, total=False):
    instruction: int
    op: str
    source: Optional[str]
    bytes: int
    bytes_text: str
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


class GoldenWindow(TypedDict):
    mem_id: int
    offset: int


class PayloadBuffer(TypedDict):
    method: str
    mem_id: int
    device: str
    size: int
    lower_bound: int


class GoldenPayloadBuffer(PayloadBuffer):
    size_text: NotRequired[str]
    lower_bound_text: NotRequired[str]


class GoldenDelegate(TypedDict):
    index: int
    id: str
    target_device: Optional[str]
    payload_size: int
    payload_size_text: NotRequired[str]
    window: Optional[GoldenWindow]
    payload_buffers: Optional[list[GoldenPayloadBuffer]]


class GoldenPlacements(TypedDict):
    count: int
    sha256: str


class GoldenMethod(TypedDict):
    name: str
    returns: NotRequired[list]
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


# --- devplan inspect --json (inspect.schema.json) ---------------------------------------


class Segment(TypedDict):
    index: int
    offset: int
    size: int


class NamedData(TypedDict):
    key: str
    segment: int
    size: int


class ExternalData(TypedDict):
    keys: int
    data: Optional[str]
    bytes: Optional[int]


class InspectedFile(TypedDict):
    name: str
    size: int
    program_version: int
    segments: list[Segment]
    constant_bytes: int
    named_data: list[NamedData]
    external: NotRequired[ExternalData]


class InspectedCounts(TypedDict):
    values: int
    instructions: int
    operators: int
    delegates: int


class DeviceTotal(TypedDict):
    device: str
    buffers: int
    size: int
    lower_bound: int


class InspectedBuffer(TypedDict):
    mem_id: int
    size: int
    device: str
    tensors: int
    peak: int
    peak_instruction: Optional[int]
    lower_bound: int
    problem: NotRequired[str]


class PeakTensor(TypedDict):
    value: int
    nbytes: int
    own_bytes: int
    held: Optional[list[int]]
    role: str
    source: str


class PeakModule(TypedDict):
    module: str
    bytes: int


class Peak(TypedDict):
    mem_id: int
    device: str
    instruction: Optional[int]
    bytes: int
    source: Optional[str]
    op: Optional[str]
    tensors: list[PeakTensor]
    modules: list[PeakModule]


class InspectedTensor(TypedDict):
    value: int
    dtype: str
    shape: list[int]
    dim_order: list[int]
    dynamic: bool
    mem_id: Optional[int]
    offset: Optional[int]
    nbytes: int
    device: str
    lifetime: Optional[list[int]]
    held: Optional[list[int]]
    role: Literal["input", "output", "input+output", "state", "constant", "activation"]
    constant: bool
    source: str
    module: Optional[str]


class InspectedInstruction(TypedDict):
    index: int
    kind: str
    op: Optional[str]
    delegate: Optional[int]
    args: list[int]
    arguments: list[str]
    source: Optional[str]
    module: Optional[str]


class InspectedOperator(TypedDict):
    index: int
    name: str
    overload: str


class CompileSpec(TypedDict):
    key: str
    value: str


class InspectedDelegate(TypedDict):
    index: int
    id: str
    compile_specs: list[CompileSpec]
    target_device: Optional[str]
    payload_size: int
    location: Literal["inline", "segment"]
    payload_index: int
    working_memory: NotRequired[Optional[WorkingMemory]]
    window: Optional[GoldenWindow]
    calls: list[int]
    payload_buffers: Optional[list[PayloadBuffer]]


class InspectedMethod(TypedDict):
    name: str
    inputs: list[int]
    outputs: list[int]
    counts: InspectedCounts
    values: dict[str, int]
    returns: NotRequired[list]
    devices: NotRequired[list[DeviceTotal]]
    buffers: NotRequired[list[InspectedBuffer]]
    peak: NotRequired[list[Peak]]
    tensors: NotRequired[list[InspectedTensor]]
    instructions: NotRequired[list[InspectedInstruction]]
    operators: NotRequired[list[InspectedOperator]]
    delegates: NotRequired[list[InspectedDelegate]]


class InspectDocument(TypedDict):
    schema_version: Literal[1]
    format: Literal["ET12"]
    file: InspectedFile
    methods: list[InspectedMethod]


# the document each schema describes, by the schema's file name
SCHEMAS = {
    "check": CheckDocument,
    "run": RunDocument,
    "compile": CompileSummary,
    "diff": DiffDocument,
    "golden": GoldenDocument,
    "inspect": InspectDocument,
}
