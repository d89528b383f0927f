"""--quantize's calibration inputs: a --calibration file's (or the tuples given), each checked
against what the program takes (layout, device, dtype, shape within its dimensions' ranges, an
index within the table it indexes), or seeded samples where none are given; the first
CALIBRATION_SAMPLES of them are run."""

from __future__ import annotations

import inspect
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.utils._pytree as pytree

from devplan.errors import DevplanError
from devplan.files import read_input

SAMPLES = 4  # seeded samples when no --calibration is given
SEED = 0
CALIBRATION_LIMIT = 1 << 30  # bytes of a --calibration file devplan reads
# the most --calibration inputs quantizing runs, the file's first: observers' ranges settle
# within tens, and each input runs the model three times (calibrating with its observers, 90 ms
# for a small MLP's in int8, then the float and the quantized model for the error), so 100,000
# ran for hours
CALIBRATION_SAMPLES = 100
Sample = tuple[Any, ...]  # one input per user input of the program, flat, in its order


@dataclass(frozen=True)
class Samples:
    """The program's user inputs (names, example values) and the samples quantizing runs: `used`,
    the first CALIBRATION_SAMPLES of the `given` ones."""

    names: list[str]
    specs: list[Any]
    used: list[Sample]
    given: int


def samples_of(ep: torch.export.ExportedProgram, calibration: "Path | Sample | None") -> Samples:
    """The calibration samples (checked against the program's inputs), or seeded ones."""
    names, specs = _user_inputs(ep)
    sizes = [_sizes(ep, name, spec) for name, spec in zip(names, specs)]
    given = _calibration_samples(calibration) if calibration is not None else _seeded_samples(specs, sizes)
    used = given[:CALIBRATION_SAMPLES]
    if calibration is not None:
        _checked_samples(used, names, specs, sizes, _tables(ep))
    return Samples(names, specs, used, len(given))


def _user_inputs(ep: torch.export.ExportedProgram) -> tuple[list[str], list[Any]]:
    """The names of the program's inputs, in the order it takes them, and each one's example
    value (a fake tensor, or a number)."""
    names = list(ep.graph_signature.user_inputs)
    placeholders = {node.name: node for node in ep.graph.find_nodes(op="placeholder")}
    return names, [placeholders[name].meta.get("val") for name in names]


def call(ep: torch.export.ExportedProgram, sample: Sample) -> tuple[Sample, dict[str, Any]]:
    """A flat sample as the (args, kwargs) the module takes: keyword inputs (BERT's
    attention_mask) come after the positional ones, as the program orders them."""
    args, kwargs = pytree.tree_unflatten(list(sample), ep.call_spec.in_spec)
    return tuple(args), dict(kwargs)


def _calibration_samples(calibration: "Path | Sample") -> list[Sample]:
    """The calibration inputs: the tuples given, or those a file saved with torch.save holds."""
    if not isinstance(calibration, (str, os.PathLike)):
        return [tuple(s) if isinstance(s, (list, tuple)) else (s,) for s in calibration]
    hint = "save a list of input tuples with torch.save"
    data = read_input(calibration, limit=CALIBRATION_LIMIT, hint=hint, name=f"--calibration {os.fspath(calibration)}")
    try:
        loaded = torch.load(io.BytesIO(data), weights_only=True)
    except Exception as error:  # torch.load raises pickle, zip and OS errors alike for a bad file
        raise DevplanError(
            f"--calibration {os.fspath(calibration)}: not a file saved with torch.save ({type(error).__name__}); {hint}"
        ) from None
    if not isinstance(loaded, (list, tuple)):
        raise DevplanError(f"--calibration {os.fspath(calibration)}: holds a {type(loaded).__name__}; {hint}")
    return _calibration_samples(tuple(loaded))


Sizes = list[tuple[int, int | None]]  # per dimension of an input, the least and the most (None: unbounded)


def _sizes(ep: torch.export.ExportedProgram, name: str, spec: object) -> Sizes:
    """The sizes each dimension of an input may take: its size, or the range the export gave a
    dynamic one."""
    if not isinstance(spec, torch.Tensor):
        return []
    sizes: Sizes = []
    for size in spec.shape:
        if isinstance(size, int):
            sizes.append((size, size))
            continue
        if not size.node.expr.is_Symbol:  # a size computed from another: the re-export cannot say it
            raise DevplanError(
                f"--quantize: input {name!r} has a dimension of size {size.node.expr}; export it with "
                f"a dimension of its own (a Dim) there, or static shapes"
            )
        sizes.append(_range(ep, size))
    return sizes


def _range(ep: torch.export.ExportedProgram, size: torch.SymInt) -> tuple[int, int | None]:
    """The least and the most a dynamic size may be (None: unbounded). torch's unbounded is
    int_oo, which sympy takes as finite (for its integer reasoning) but no int can hold."""
    bounds = ep.range_constraints[size.node.expr]
    return int(bounds.lower), int(bounds.upper) if bounds.upper.is_Integer else None


def _sizes_text(sizes: Sizes) -> str:
    return (
        "["
        + ", ".join(str(low) if low == high else f"{low}..{high if high is not None else ''}" for low, high in sizes)
        + "]"
    )


def dynamic_shapes(
    ep: torch.export.ExportedProgram, module: torch.nn.Module, specs: list[Any]
) -> dict[str, Any] | None:
    """The export's dynamic dimensions as the re-export takes them, by the module's argument
    names: one Dim per symbol of the export, within its range; None for a static export."""
    dims: dict[Any, Any] = {}
    flat = []
    for spec in specs:
        shapes: dict[int, Any] = {}
        for index, size in enumerate(spec.shape if isinstance(spec, torch.Tensor) else ()):
            if not isinstance(size, int):
                low, high = _range(ep, size)
                dims.setdefault(size.node.expr, torch.export.Dim(str(size.node.expr), min=low, max=high))
                shapes[index] = dims[size.node.expr]
        flat.append(shapes or None)
    if not dims:
        return None
    args, kwargs = pytree.tree_unflatten(flat, ep.call_spec.in_spec)
    return {**dict(zip(inspect.signature(module.forward).parameters, args)), **kwargs}


def _checked_samples(
    samples: list[Sample], names: list[str], specs: list[Any], sizes: list[Sizes], tables: dict[str, "_Table"]
) -> None:
    """Each sample with as many inputs as the program takes, each a plain tensor of its dtype
    and of sizes its dimensions may take, and an input that indexes a table within its rows."""
    if not samples:
        raise DevplanError("--calibration: holds no inputs; save a list of at least one input tuple")
    for index, sample in enumerate(samples):
        if len(sample) != len(names):
            raise DevplanError(
                f"--calibration: sample {index} has {len(sample)} inputs, the program takes "
                f"{len(names)} ({', '.join(names)})"
            )
        for name, value, spec, allowed in zip(names, sample, specs, sizes):
            if isinstance(spec, torch.Tensor):  # else a number the program was specialized to: export checks it
                _check_input(f"--calibration: sample {index}, input {name!r}", value, spec, allowed, tables.get(name))


def _check_input(who: str, value: object, spec: torch.Tensor, allowed: Sizes, table: "_Table | None") -> None:
    """One tensor input of a sample (`who` names it): a dense tensor in this process's memory
    (a sparse, nested or meta tensor has no sizes or values the model can run on), of the
    program's dtype and sizes, and, where it indexes a table, within the table's rows."""
    if isinstance(value, torch.Tensor) and (
        value.is_nested or value.layout != torch.strided or value.device.type != "cpu"
    ):
        raise DevplanError(
            f"{who} is {_tensor_kind(value)}; the program takes dense tensors in memory: save each "
            f"input as a plain CPU tensor (.to_dense(), .cpu())"
        )
    if not isinstance(value, torch.Tensor) or value.dtype != spec.dtype or not _fits(value.shape, allowed):
        got = (
            f"{str(value.dtype).removeprefix('torch.')} {list(value.shape)}"
            if isinstance(value, torch.Tensor)
            else type(value).__name__
        )
        raise DevplanError(
            f"{who} is {got}; the program takes {str(spec.dtype).removeprefix('torch.')} {_sizes_text(allowed)}"
        )
    if table is not None and value.numel():
        low, high = int(value.min()), int(value.max())
        if low < 0 or high >= table.rows:
            raise DevplanError(
                f"{who} holds the index {low if low < 0 else high}, outside the {table.rows} rows "
                f"node {table.node} indexes (0 to {table.rows - 1}); calibrate on indices the model takes"
            )


def _tensor_kind(value: torch.Tensor) -> str:
    if value.is_nested:
        return "a nested tensor"
    if value.layout != torch.strided:
        return f"a {str(value.layout).removeprefix('torch.')} tensor"
    return f"a tensor on device {value.device}"


@dataclass(frozen=True)
class _Table:
    """What an integer input indexes: the op's node, and how many rows the indices may pick."""

    node: str
    rows: int


# op -> (its table, the dimension it indexes, its indices) among the op's arguments
_INDEXING: dict[object, Callable[[tuple[Any, ...]], tuple[Any, Any, Any]]] = {
    torch.ops.aten.embedding.default: lambda args: (args[0], 0, args[1]),
    torch.ops.aten.index_select.default: lambda args: (args[0], args[1], args[2]),
}


def _tables(ep: torch.export.ExportedProgram) -> dict[str, _Table]:
    """The tables the program's inputs index (token ids an embedding's), by input: an index
    outside the table fails the op, so a calibration sample must hold none. Indices reach the
    op through views (a reshape of the ids); an input indexing two tables is held to the smaller."""
    inputs = set(ep.graph_signature.user_inputs)
    tables: dict[str, _Table] = {}
    for node in ep.graph.nodes:
        if node.op != "call_function" or node.target not in _INDEXING:
            continue
        table, dim, indices = _INDEXING[node.target](node.args)
        while isinstance(indices, torch.fx.Node) and getattr(indices.target, "is_view", False):
            indices = indices.args[0]
        value = table.meta.get("val") if isinstance(table, torch.fx.Node) else None
        rows = value.shape[dim] if isinstance(value, torch.Tensor) and isinstance(dim, int) else None
        if isinstance(indices, torch.fx.Node) and indices.name in inputs and isinstance(rows, int):
            if indices.name not in tables or rows < tables[indices.name].rows:
                tables[indices.name] = _Table(node.name, rows)
    return tables


def _fits(shape: torch.Size, allowed: Sizes) -> bool:
    return len(shape) == len(allowed) and all(
        low <= size and (high is None or size <= high) for size, (low, high) in zip(shape, allowed)
    )


def _seeded_samples(specs: list[Any], sizes: list[Sizes]) -> list[Sample]:
    """SAMPLES inputs of the program's dtypes and example sizes (a dynamic dimension's at its
    example's, else its least), the same on every run: normal floats, and integers 0 and 1,
    which any index input (token ids, masks) may hold."""
    generator = torch.Generator().manual_seed(SEED)

    def value(spec: Any, allowed: Sizes) -> Any:
        if not isinstance(spec, torch.Tensor):
            return spec
        shape = [
            size if isinstance(size, int) else size.node.hint or low for size, (low, _) in zip(spec.shape, allowed)
        ]
        if spec.dtype.is_floating_point:
            return torch.randn(shape, generator=generator).to(spec.dtype)
        if spec.dtype == torch.bool:
            return torch.randint(0, 2, shape, generator=generator).bool()
        return torch.randint(0, 2, shape, generator=generator, dtype=spec.dtype)

    return [tuple(value(spec, allowed) for spec, allowed in zip(specs, sizes)) for _ in range(SAMPLES)]
