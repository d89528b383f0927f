"""Checks between a compile's stages: what every stage's result must be, whatever the stage did,
so that a pass that breaks the IR is named by the stage that broke it rather than by a later
one tripping over it. A graph (Lowered) gets torch's graph.lint() and devplan's own facts about
it; a Method (and a PlannedMethod's) has every value it reads written before, every tensor a
spec on a device, and every kernel's arguments matching its schema.

They cost a walk over the program per stage, so they run only when asked: in the tests
(tests/conftest.py sets DEVPLAN_CHECK_STAGES) and with `devplan --debug compile`."""

from __future__ import annotations

import functools
from typing import Iterable

import torch

from devplan.ir.lowered import Lowered
from devplan.ir.method import IntList, Method, OptionalTensorList, TensorList, Use
from devplan.ir.planned import PlannedMethod
from devplan.ops import DIM_ORDER_OPS, ET_VIEW, NUMBER_NAMES, TO_DEVICE, TO_HOST, op_schema
from devplan.passes.graph.fold import Folded
from devplan.spec import Device, TensorSpec


class Malformed(Exception):
    """A stage's result that breaks what the next stage relies on: devplan's own bug."""


def check_stage(result: object) -> None:
    """Check a stage's result by its kind; results of other kinds (bytes, a program) pass."""
    if isinstance(result, Lowered):
        check_graph(result)
    elif isinstance(result, Folded):
        check_graph(result.program)
    elif isinstance(result, Method):
        check_method(result)
    elif isinstance(result, PlannedMethod):
        check_method(result.method)


def check_graph(low: Lowered) -> None:
    """torch's lint (each node defined before use, targets that exist, one output), and that
    every name the Lowered program keeps is one of the graph's placeholders or calls."""
    graph = low.gm.graph
    try:
        graph.lint()
    except RuntimeError as error:
        raise Malformed(f"graph lint: {error}") from error
    placeholders = {node.name for node in graph.find_nodes(op="placeholder")}
    for role, names in (
        ("constant", low.constants),
        ("state", low.state),
        ("input", low.inputs),
        ("mutated input", low.mutated),
    ):
        missing = sorted(set(names) - placeholders)
        if missing:
            raise Malformed(f"{role} {missing[0]!r} is no placeholder of the graph")
    calls = {node.target for node in graph.find_nodes(op="call_module")}
    for role, targets in (("backend", low.backends), ("payload", low.payloads)):
        missing = sorted(set(targets) - calls)
        if missing:
            raise Malformed(f"the {role} of {missing[0]!r} belongs to no call_module node of the graph")
    for node in graph.nodes:  # a call whose result nothing reads (an assertion) may have none
        if (node.op == "placeholder" or node.op == "call_function" and node.users) and "val" not in node.meta:
            raise Malformed(f"node {node.name} ({node.op}) has no meta['val'], which later stages read")


def check_method(method: Method) -> None:
    """Every value index in range, every tensor a TensorSpec on a Device, every kernel's
    arguments as its schema takes them, and every tensor read (by a kernel, or by the caller
    as an output) written before: an input, a constant, state, or an earlier kernel's result
    (a tensor sharing a storage counts as written once any tensor of that storage is)."""
    values = method.values

    def index(i: int, where: str) -> int:
        if not 0 <= i < len(values):
            raise Malformed(f"{where} names value {i}, but the method has {len(values)}")
        return i

    for i in (*method.inputs, *method.outputs, *method.constants, *method.state, *method.mutated):
        index(i, "the method's inputs, outputs, constants or state")
    for i, value in enumerate(values):
        if isinstance(value, (TensorSpec, Use)) and not isinstance(value.device, Device):
            raise Malformed(f"value {i} is a tensor on no device ({value.device!r})")
        if isinstance(value, TensorSpec) and value.alias_of is not None:
            index(value.alias_of, f"value {i}'s alias_of")
        elif isinstance(value, Use):
            index(value.source, f"value {i} (a use)")
        elif isinstance(value, (IntList, TensorList, OptionalTensorList)):
            for item in value.items:
                if not (isinstance(value, OptionalTensorList) and item == -1):
                    index(item, f"value {i}'s list")

    def root(i: int) -> int:
        value = values[i]
        if isinstance(value, Use):
            return root(value.source)
        return value.alias_of if isinstance(value, TensorSpec) and value.alias_of is not None else i

    written = {root(i) for i in (*method.inputs, *method.constants, *method.state)}
    written |= {i for i, value in enumerate(values) if isinstance(value, TensorSpec) and value.constant}
    for step, kernel in enumerate(method.kernels):
        where = f"instruction {step} ({kernel.op}, node {kernel.node})"
        for a in kernel.args:
            index(a, where)
        reads, writes = _reads_writes(method, kernel.op, kernel.args, kernel.delegate, where)
        for i in _tensors(method, reads):
            if root(i) not in written:
                raise Malformed(f"{where} reads value {i} before any instruction writes it")
        written |= {root(i) for i in _tensors(method, writes)}
    for i in method.outputs:
        if isinstance(values[i], (TensorSpec, Use)) and root(i) not in written:
            raise Malformed(f"output value {i} is written by no instruction")


def _tensors(method: Method, indices: Iterable[int]) -> list[int]:
    """The tensors among `indices`, a tensor list's items included."""
    found = []
    for i in indices:
        value = method.values[i]
        if isinstance(value, (TensorList, OptionalTensorList)):
            found += [item for item in value.items if item >= 0]
        elif isinstance(value, (TensorSpec, Use)):
            found.append(i)
    return found


def _reads_writes(
    method: Method, op: str, args: tuple[int, ...], delegate: int | None, where: str
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(arguments a kernel reads, arguments it writes), checking them against its schema."""
    if delegate is not None:  # its inputs then its outputs, as many as its payload takes: not told apart here
        if not 0 <= delegate < len(method.delegates):
            raise Malformed(f"{where} calls delegate {delegate}, but the method has {len(method.delegates)}")
        return (), args
    if op in (TO_DEVICE, TO_HOST):
        return args[:1], args[1:]
    if op == ET_VIEW:
        return args[:2], args[2:]
    if op in NUMBER_NAMES:
        return args[:-1], args[-1:]
    if op in DIM_ORDER_OPS:
        return args[:-2], args[-2:]
    arguments, results = _schema(op)
    if arguments is None:
        raise Malformed(f"{where}: no operator of that name has a schema")
    if not len(arguments) <= len(args) <= len(arguments) + results:
        raise Malformed(
            f"{where} has {len(args)} arguments and results; its schema takes {len(arguments)} "
            f"arguments and {results} results"
        )
    for a, argument in zip(args, arguments):
        wanted = _KINDS.get(str(argument.type))
        if wanted is not None and not isinstance(method.values[a], wanted):
            raise Malformed(
                f"{where}: argument {argument.name} ({argument.type}) is value {a}, a {type(method.values[a]).__name__}"
            )
    written = {
        position
        for position, argument in enumerate(arguments)
        if argument.is_out or (argument.alias_info is not None and argument.alias_info.is_write)
    }
    reads = tuple(a for position, a in enumerate(args[: len(arguments)]) if not arguments[position].is_out)
    writes = tuple(a for position, a in enumerate(args) if position in written or position >= len(arguments))
    return reads, writes


# a schema argument's type -> the values that may stand for it
_KINDS: dict[str, type | tuple[type, ...]] = {
    "Tensor": (TensorSpec, Use),
    "Tensor?": (TensorSpec, Use, type(None)),
    "Tensor[]": TensorList,
    "Tensor?[]": OptionalTensorList,
}


@functools.lru_cache(maxsize=None)
def _schema(op: str) -> tuple[tuple[torch._C.Argument, ...] | None, int]:
    found = op_schema(op)
    if found is None:
        return None, 0
    return tuple(found.arguments), max(1, len(found.returns))
