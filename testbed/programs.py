"""Hand-built programs whose every fact the inspector tests know in advance."""

from __future__ import annotations

from devplan.pte import dumps_pte
from devplan.pte.fb.AllocationDetails import AllocationDetailsT
from devplan.pte.fb.BackendDelegate import BackendDelegateT
from devplan.pte.fb.BackendDelegateDataReference import BackendDelegateDataReferenceT
from devplan.pte.fb.BackendDelegateInlineData import BackendDelegateInlineDataT
from devplan.pte.fb.Buffer import BufferT
from devplan.pte.fb.Chain import ChainT
from devplan.pte.fb.CompileSpec import CompileSpecT
from devplan.pte.fb.DataLocation import DataLocation
from devplan.pte.fb.DelegateCall import DelegateCallT
from devplan.pte.fb.DeviceType import DeviceType
from devplan.pte.fb.EValue import EValueT
from devplan.pte.fb.ExecutionPlan import ExecutionPlanT
from devplan.pte.fb.ExtraTensorInfo import ExtraTensorInfoT
from devplan.pte.fb.FreeCall import FreeCallT
from devplan.pte.fb.Instruction import InstructionT
from devplan.pte.fb.InstructionArguments import InstructionArguments
from devplan.pte.fb.Int import IntT
from devplan.pte.fb.KernelCall import KernelCallT
from devplan.pte.fb.KernelTypes import KernelTypes
from devplan.pte.fb.NonConstBufferDevice import NonConstBufferDeviceT
from devplan.pte.fb.Operator import OperatorT
from devplan.pte.fb.OptionalTensorList import OptionalTensorListT
from devplan.pte.fb.Program import ProgramT
from devplan.pte.fb.Tensor import TensorT
from devplan.pte.fb.TensorList import TensorListT

FLOAT32 = 6


def tensor(sizes, mem_id=None, offset=0, constant_index=0, device=None) -> EValueT:
    """A float32 tensor value: planned at (mem_id, offset), constant, or runtime-supplied."""
    allocation = None
    if mem_id is not None:
        allocation = AllocationDetailsT(
            memoryId=mem_id, memoryOffsetLow=offset & 0xFFFFFFFF, memoryOffsetHigh=offset >> 32
        )
    extra = None
    if device is not None:
        extra = ExtraTensorInfoT(deviceType=device[0], deviceIndex=device[1])
    value = TensorT(
        scalarType=FLOAT32,
        sizes=list(sizes),
        dimOrder=list(range(len(sizes))),
        dataBufferIdx=constant_index,
        allocationInfo=allocation,
        extraTensorInfo=extra,
    )
    return EValueT(valType=KernelTypes.Tensor, val=value)


def kernel(op_index: int, *args: int) -> InstructionT:
    call = KernelCallT(opIndex=op_index, args=list(args))
    return InstructionT(instrArgsType=InstructionArguments.KernelCall, instrArgs=call)


def lifetimes_program() -> bytes:
    """Two chains, a tensor list, an optional tensor list with a None, a free, an unused
    tensor, and an in-place alias (v9 over v4's bytes). Sizes are float32 bytes.

        #0 chain 0  aten::mul.out(v0, v6, v1) -> v1
        #1 chain 0  aten::relu.out(v1, v2) -> v2
        #2 chain 1  aten::cat.out(v3 = [v1, v2], v7, v4) -> v4
        #3 chain 1  aten::index.Tensor_out(v4, v8 = [None, v0], v9) -> v9
        #4 chain 1  free(v2)
    """
    values = [
        tensor([4], mem_id=1, offset=0),  # v0 input, 16 B
        tensor([4], mem_id=1, offset=16),  # v1
        tensor([4], mem_id=1, offset=32),  # v2
        EValueT(valType=KernelTypes.TensorList, val=TensorListT(items=[1, 2])),  # v3
        tensor([8], mem_id=1, offset=48),  # v4, 32 B
        tensor([4], mem_id=1, offset=96),  # v5, never used
        tensor([4], constant_index=1),  # v6 constant
        EValueT(valType=KernelTypes.Int, val=IntT(intVal=0)),  # v7
        EValueT(valType=KernelTypes.OptionalTensorList, val=OptionalTensorListT(items=[-1, 0])),  # v8
        tensor([8], mem_id=1, offset=48),  # v9 output, in place over v4
    ]
    chains = [
        ChainT(inputs=[0], outputs=[2], instructions=[kernel(0, 0, 6, 1, 1), kernel(1, 1, 2, 2)]),
        ChainT(
            inputs=[1, 2],
            outputs=[9],
            instructions=[
                kernel(2, 3, 7, 4, 4),
                kernel(3, 4, 8, 9, 9),
                InstructionT(instrArgsType=InstructionArguments.FreeCall, instrArgs=FreeCallT(valueIndex=2)),
            ],
        ),
    ]
    forward = ExecutionPlanT(
        name="forward",
        values=values,
        inputs=[0],
        outputs=[9],
        chains=chains,
        operators=[
            OperatorT(name="aten::mul", overload="out"),
            OperatorT(name="aten::relu", overload="out"),
            OperatorT(name="aten::cat", overload="out"),
            OperatorT(name="aten::index", overload="Tensor_out"),
        ],
        nonConstBufferSizes=[0, 128],
    )
    identity = ExecutionPlanT(
        name="identity",
        values=[tensor([2])],
        inputs=[0],
        outputs=[0],
        chains=[ChainT(inputs=[0], outputs=[0], instructions=[])],
        nonConstBufferSizes=[0],
    )
    program = ProgramT(
        version=0,
        executionPlan=[forward, identity],
        constantBuffer=[BufferT(storage=b""), BufferT(storage=bytes(16))],
    )
    return dumps_pte(program)


def cuda_program() -> bytes:
    """Buffer 1 on cuda:0 (buffer 2 left to the CPU default), a tensor whose extra info puts
    it on cuda:1, and a delegate with a text and a binary compile spec.

        #0 aten::relu.out(v0, v1) -> v1          v0 input, v1 in buffer 1
        #1 aten::relu.out(v3) -> v3
        #2 delegate 0 (v1, v2)                    v2 output in buffer 2
    """
    values = [
        tensor([2, 2], mem_id=1, offset=0),  # v0 input on buffer 1 -> cuda:0
        tensor([2, 2], mem_id=1, offset=16),  # v1 -> cuda:0
        tensor([2, 2], mem_id=2, offset=0),  # v2 output on buffer 2 -> cpu
        tensor([2], mem_id=1, offset=32, device=(DeviceType.CUDA, 1)),  # v3 says cuda:1 itself
    ]
    delegate = BackendDelegateT(
        id="CudaBackend",
        processed=BackendDelegateDataReferenceT(location=DataLocation.INLINE, index=0),
        compileSpecs=[
            CompileSpecT(key="target_device", value=list(b"cuda:0")),
            CompileSpecT(key="blob", value=[0, 255, 16]),
        ],
    )
    forward = ExecutionPlanT(
        name="forward",
        values=values,
        inputs=[0],
        outputs=[2],
        chains=[
            ChainT(
                inputs=[0],
                outputs=[2],
                instructions=[
                    kernel(0, 0, 1, 1),
                    kernel(0, 3, 3),
                    InstructionT(
                        instrArgsType=InstructionArguments.DelegateCall,
                        instrArgs=DelegateCallT(delegateIndex=0, args=[1, 2]),
                    ),
                ],
            )
        ],
        operators=[OperatorT(name="aten::relu", overload="out")],
        delegates=[delegate],
        nonConstBufferSizes=[0, 48, 16],
        nonConstBufferDevice=[NonConstBufferDeviceT(bufferIdx=1, deviceType=DeviceType.CUDA, deviceIndex=0)],
    )
    program = ProgramT(
        version=0,
        executionPlan=[forward],
        backendDelegateData=[BackendDelegateInlineDataT(data=bytes(range(40)))],
    )
    return dumps_pte(program)


def one_offset_program(tensors: int) -> bytes:
    """`tensors` float32[4] tensors all at offset 0 of buffer 1, all held at once: one
    instruction concatenates them into an output at offset 16. They meet in bytes, so they are
    one storage of 16 bytes: the lower bound is 16 + 16 * tensors, the output's bytes and one
    storage's.

        #0 aten::cat.out(v{n} = [v0 .. v{n-1}], v{n+1} = 0, v{n+2}) -> v{n+2}
    """
    values = [tensor([4], mem_id=1, offset=0) for _ in range(tensors)]
    values += [
        EValueT(valType=KernelTypes.TensorList, val=TensorListT(items=list(range(tensors)))),
        EValueT(valType=KernelTypes.Int, val=IntT(intVal=0)),
        tensor([4 * tensors], mem_id=1, offset=16),
    ]
    out = tensors + 2
    forward = ExecutionPlanT(
        name="forward",
        values=values,
        inputs=[0],
        outputs=[out],
        chains=[ChainT(inputs=[0], outputs=[out], instructions=[kernel(0, tensors, tensors + 1, out, out)])],
        operators=[OperatorT(name="aten::cat", overload="out")],
        nonConstBufferSizes=[0, 16 + 16 * tensors],
    )
    return dumps_pte(ProgramT(version=0, executionPlan=[forward], constantBuffer=[BufferT(storage=b"")]))


def wide_program(tensors: int, instructions: int) -> bytes:
    """`tensors` float32[4] tensors, each at its own offset of buffer 1, all held from the first
    instruction to the last (a cat reads them all at both), with a relu between two more
    tensors at every instruction between: many tensors alive across many instructions.

        #0 aten::cat.out(v{n} = [v0 .. v{n-1}], v{n+1} = 0, v{n+2}) -> v{n+2}
        #1 .. #{instructions - 2} aten::relu.out(v{n+3} <-> v{n+4})
        #{instructions - 1} aten::cat.out(v{n}, v{n+1}, v{n+2}) -> v{n+2}
    """
    base = 16 * tensors
    values = [tensor([4], mem_id=1, offset=16 * i) for i in range(tensors)]
    values += [
        EValueT(valType=KernelTypes.TensorList, val=TensorListT(items=list(range(tensors)))),
        EValueT(valType=KernelTypes.Int, val=IntT(intVal=0)),
        tensor([4 * tensors], mem_id=1, offset=base),
        tensor([4], mem_id=1, offset=2 * base),
        tensor([4], mem_id=1, offset=2 * base + 16),
    ]
    listed, dim, out, a, b = range(tensors, tensors + 5)
    body = [kernel(0, listed, dim, out, out)]
    body += [kernel(1, a, b, b) if k % 2 == 0 else kernel(1, b, a, a) for k in range(instructions - 2)]
    body.append(kernel(0, listed, dim, out, out))
    forward = ExecutionPlanT(
        name="forward",
        values=values,
        inputs=[a],
        outputs=[out],
        chains=[ChainT(inputs=[a], outputs=[out], instructions=body)],
        operators=[OperatorT(name="aten::cat", overload="out"), OperatorT(name="aten::relu", overload="out")],
        nonConstBufferSizes=[0, 2 * base + 32],
    )
    return dumps_pte(ProgramT(version=0, executionPlan=[forward], constantBuffer=[BufferT(storage=b"")]))
