"""`devplan inspect --json` and `devplan.inspect()` (inspect.schema.json)."""

from typing import Any, Literal, Optional

from typing_extensions import NotRequired, TypedDict

from devplan.documents.common import WorkingMemory


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


# what a tensor is to its method
Role = Literal["input", "output", "input+output", "state", "constant", "activation"]


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
    role: Role
    constant: bool
    source: str
    module: Optional[str]
    name: Optional[str]


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


class KernelLibrary(TypedDict):
    library: str  # portable, prim, quantized, llm, or custom:NAMESPACE (devplan/inspection/kernels.py)
    operators: list[str]


class CompileSpec(TypedDict):
    key: str
    value: str


class Window(TypedDict):
    """Where a delegate's working memory lies in the method's buffer."""

    mem_id: int
    offset: int


class PayloadBuffer(TypedDict):
    method: str
    mem_id: int
    device: str
    size: int
    lower_bound: int


class InspectedDelegate(TypedDict):
    index: int
    id: str
    compile_specs: list[CompileSpec]
    target_device: Optional[str]
    payload_size: int
    location: Literal["inline", "segment"]
    payload_index: int
    working_memory: NotRequired[Optional[WorkingMemory]]
    window: Optional[Window]
    calls: list[int]
    payload_buffers: Optional[list[PayloadBuffer]]


class InstructionTime(TypedDict):
    index: int
    ns: int  # median over the warm runs


class DelegatedTime(TypedDict):
    instruction: int  # the delegate call it ran in
    name: str  # what the backend names it (XNNPACK: the operator and its number)
    ns: int


class ModuleTime(TypedDict):
    module: str  # an instruction's module, "(no module)", or "(delegate N)" for a delegate's calls
    ns: int
    instructions: int


class Timing(TypedDict):
    """inspect --etdump: what ExecuTorch's runtime measured running the method (its ETDump)."""

    etdump: str
    runs: int
    warm_runs: int  # the runs after the first, whose medians these are; 0: the one run
    execute_ns: Optional[int]  # the whole call, as the runtime timed it
    instructions: list[InstructionTime]
    delegated: list[DelegatedTime]
    modules: list[ModuleTime]  # most time first


class InspectedMethod(TypedDict):
    name: str
    inputs: list[int]
    outputs: list[int]
    counts: InspectedCounts
    values: dict[str, int]
    returns: NotRequired[list[Any]]
    devices: NotRequired[list[DeviceTotal]]
    buffers: NotRequired[list[InspectedBuffer]]
    peak: NotRequired[list[Peak]]
    tensors: NotRequired[list[InspectedTensor]]
    instructions: NotRequired[list[InspectedInstruction]]
    operators: NotRequired[list[InspectedOperator]]
    delegates: NotRequired[list[InspectedDelegate]]
    timing: NotRequired[Timing]
    kernels: list[KernelLibrary]
    backends: list[str]


class InspectDocument(TypedDict):
    schema_version: Literal[1]
    format: Literal["ET12"]
    file: InspectedFile
    methods: list[InspectedMethod]
