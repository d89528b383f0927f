"""`devplan compile --json` and `CompileResult.summary()` (compile.schema.json)."""

from typing import Literal, Optional

from typing_extensions import NotRequired, TypedDict

from devplan.documents.common import WorkingMemory
from devplan.documents.inspect import KernelLibrary


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


class CompiledAttention(TypedDict):
    node: str  # the export's scaled_dot_product_attention node
    module: str
    keys: int
    block: Optional[int]  # keys a block when computed in blocks; None: materialized, `why` says why
    why: str


class CompiledFallback(TypedDict):
    backend: str  # the backend id whose preprocess refused the ops (XnnpackBackend)
    ops: list[str]  # the ops left on portable kernels (aten.amax.default)
    why: str  # the backend's reason, its first line


class CompiledMethod(TypedDict):
    name: str
    planner: str
    counts: CompiledCounts
    buffers: list[CompiledBuffer]
    delegates: list[CompiledDelegate]
    kernels: list[KernelLibrary]  # what a runtime must link to load the method (inspect's, from the same table)
    backends: list[str]
    attention: list[CompiledAttention]
    fallbacks: list[CompiledFallback]


class FoldChoice(TypedDict):
    method: str
    policy: Literal["local", "all", "none"]
    arena: int
    constant_bytes: int
    chosen: bool


class Folding(TypedDict):
    subgraphs: int
    shared_inputs: int
    constant_bytes_added: int
    run_bytes_removed: int
    choices: list[FoldChoice]


class QuantizationError(TypedDict):
    sqnr_db: Optional[float]
    max_abs_diff: float
    argmax_agreement: Optional[float]


class QuantizedWeights(TypedDict):
    float_bytes: int
    quantized_bytes: int


QuantizeMode = Literal["dynamic-int8", "int8", "dynamic-int4", "8da4w"]


class Quantization(TypedDict):
    mode: QuantizeMode
    samples: int
    samples_given: int
    calibration: Literal["file", "seeded"]
    error: QuantizationError
    # where `error` was measured: the written program on ExecuTorch's runtime or devplan's,
    # or the eager quantized module (an estimate) when neither could run it
    measured_on: Literal["executorch", "devplan", "eager"]
    eager_error: QuantizationError
    warning: Optional[str]
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
