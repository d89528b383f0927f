"""Stage 1: a .pt2 archive on disk to a torch.export ExportedProgram.

torch.export.load trusts its archive, so the archive is checked first (devplan/gate/archive.py)
and torch reads only what passed. The loaded program loses its guards code and sample
inputs, which only ever feed the source torch execs when it unlifts; while torch reads, the
weights it stores uncompressed become views of a private mapping of the archive, and pytree
types this process has not registered get stand-ins, rewritten as dicts or tuples after."""

from __future__ import annotations

import contextlib
import json
import os
import re
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from devplan.errors import DevplanError, first_line
from devplan.files import open_input, present, stdout_to_stderr
from devplan.gate.archive import check_archive
from devplan.gate.results import check_results
from devplan.pte.header import is_program
from devplan.spec import INT32_MAX

if TYPE_CHECKING:
    import torch
    from torch.export import ExportedProgram
    from torch.utils._pytree import TreeSpec


def load(path: str | os.PathLike[str]) -> ExportedProgram:
    """Load a torch.export archive, refusing first any archive that is not what
    torch.export.save writes for one program (a crafted one can run code as torch reads it)."""
    path = check_input(path)
    check_archive(path)
    import logging

    import torch
    import torch.ao.quantization.fx._decomposed  # noqa: F401 - defines the quantize/dequantize ops PT2E graphs call

    # torch logs the real reason, with a traceback, before it tries an older archive reader
    # and fails with a generic message; keep the log to ourselves and report its reason
    logger = logging.getLogger("torch.export")
    records: list[logging.LogRecord] = []
    catcher = logging.Handler()
    catcher.emit = records.append  # type: ignore[method-assign,assignment]
    handlers, propagate, level = logger.handlers, logger.propagate, logger.level
    # the CLI quiets torch's loggers (TORCH_LOGS); the reason is logged as a warning, keep those
    logger.handlers, logger.propagate = [catcher], False
    logger.setLevel(logging.WARNING)
    try:
        with _stand_ins(_unknown_tree_types(path)), _type_hints_once(), _weights_mapped(path), _readable(path) as pt2:
            ep = _without_guards(_plain_specs(torch.export.load(pt2)))
    except Exception as error:  # torch raises many kinds here; all mean the archive is unusable
        logged = [r.exc_info[1] for r in records if r.exc_info and r.exc_info[1] is not None]
        reason = first_line(logged[0] if logged else error)
        node = re.match(r"Failed deserializing node Node\(target='([^']+)'(?:.*, name='([^']*)'\))?", reason)
        if node:  # torch prints the whole node; which node, its op and what is wrong is what the user needs
            who = f"node {node[2]}" if node[2] else "a node"
            raise DevplanError(f"{path}: {_node_failure(who, node[1], _innermost(logged[0]))}") from None
        raise DevplanError(
            f"{path}: cannot load the .pt2 archive ({reason}); re-export it with torch.export.save"
        ) from None
    finally:
        logger.handlers, logger.propagate = handlers, propagate
        logger.setLevel(level)
    try:
        signature = ep.call_spec.in_spec
    except (AttributeError, AssertionError):  # a damaged module call graph: no signature, or not the root's first
        signature = None
    if signature is None:
        raise DevplanError(
            f"{path}: the program has no call signature (its module call graph names none for the "
            f"root module); "
            f"re-export the model with torch.export.save"
        )
    _check_sizes(ep, path)
    check_results(ep, path)
    return ep


def _check_sizes(ep: ExportedProgram, path: Path) -> None:
    """Refuse a tensor with a size no .pte can hold, or a size whose symbol has no range (a
    damaged or crafted archive's), before anything plans bytes for it."""
    import torch

    for node in ep.graph.nodes:
        val = node.meta.get("val")
        sizes = val.shape if isinstance(val, torch.Tensor) else [val] if isinstance(val, torch.SymInt) else []
        if any(isinstance(n, int) and n > INT32_MAX for n in sizes):
            raise DevplanError(
                f"{path}: node {node.name} is a tensor of shape {list(sizes)}, a size over "
                f"{INT32_MAX:,}, more than a .pte program can hold; re-export the model with "
                f"torch.export.save"
            )
        # torch reads each symbol's range from the archive's range constraints; one left out has
        # no range at all (not an unbounded one), and torch's range arithmetic fails on it later
        for size in (n for n in sizes if isinstance(n, torch.SymInt)):
            ranges = size.node.shape_env.var_to_range
            unranged = sorted(str(s) for s in size.node.expr.free_symbols if ranges.get(s) is None)
            if unranged:
                raise DevplanError(
                    f"{path}: node {node.name}: size {unranged[0]} has no range, so no upper bound "
                    f"to plan for (the archive's range constraints leave it out); re-export the "
                    f"model with torch.export.save"
                )


def import_kernels(modules: Iterable[str]) -> None:
    """Import each module named (--kernels), for the op libraries its import registers: a
    graph that calls a library's custom ops loads only once they exist in torch. A known op
    namespace (ops.OP_LIBRARIES: transformers) stands for the module that registers its ops."""
    import importlib

    from devplan.ops import OP_LIBRARIES

    for name in modules:
        try:
            with stdout_to_stderr():  # standard output may carry the program (-o -): what the module prints must not
                importlib.import_module(OP_LIBRARIES.get(name, name))
        except Exception as error:  # whatever the module raises, it is the user's module that failed
            raise DevplanError(
                f"--kernels {name}: cannot import it ({first_line(error)}); install the package "
                f"that provides it, or name the module that registers the ops"
            ) from None


def _innermost(error: BaseException) -> BaseException:
    """The exception at the bottom of the chain torch raised `error` from."""
    seen = {id(error)}
    while (cause := error.__cause__ or error.__context__) is not None and id(cause) not in seen:
        seen.add(id(cause))
        error = cause
    return error


def _node_failure(who: str, target: str, cause: BaseException) -> str:
    """What is wrong with graph node `who` ("node relu"), calling `target` (torch's name for an op,
    torch.ops.NS.NAME.OVERLOAD), that torch could not read: its op does not exist, or the
    node itself is broken (an argument naming no value, say)."""
    import torch

    from devplan.ops import OP_LIBRARIES, TORCH_NAMESPACES

    parts = target.split(".")
    named = len(parts) == 5 and parts[:2] == ["torch", "ops"]
    if "failed to resolve" not in str(cause):  # the op exists: the node's own fields are broken
        what = (
            f"names {cause}, which no earlier node or input defines"
            if isinstance(cause, KeyError)
            else (f"cannot be read ({type(cause).__name__}: {first_line(cause)})")
        )
        return f"{who} ({target}) {what}; the archive is damaged; re-export it with torch.export.save"
    if not named:
        return f"{who} calls {target}, which is not an operator; the archive is damaged; re-export it with torch.export.save"
    namespace, op, overload = parts[2:]
    if namespace in TORCH_NAMESPACES:  # torch's own ops: no library to load, the name is wrong
        packet = getattr(getattr(torch.ops, namespace, None), op, None) if not op.startswith("__") else None
        has = (
            f"torch has {namespace}::{op} but no overload {overload!r}"
            if packet is not None
            else (f"torch has no operator {namespace}::{op}")
        )
        return (
            f"{who} calls {target}, and {has}: the graph names an op that does not exist (the archive is "
            f"damaged, or saved by another torch version); re-export it with this torch"
        )
    option = (
        f"--kernels {namespace}"
        if namespace in OP_LIBRARIES
        else f"--kernels MODULE, the Python module whose import registers the {namespace} ops"
    )
    return f"{who} calls {namespace}::{op}, an op that no library imported here registers; pass {option}"


def check_input(path: str | os.PathLike[str]) -> Path:
    """Refuse what is plainly no .pt2 (missing, a folder, not a zip, a .pte program) before
    anything else looks at it: `devplan compile X.pte` is told the input is a program, not
    that its output would overwrite it."""
    path = Path(path)
    if not present(path):
        raise DevplanError(f"{path}: no such file; pass a .pt2 written by torch.export.save")
    if path.is_dir():
        raise DevplanError(f"{path}: is a directory; pass a .pt2 file")
    with open_input(path, hint="pass a .pt2 file") as f:  # a pipe or device is refused, not read forever
        head = f.read(8)
    if not zipfile.is_zipfile(path):
        hint = " (it is an ET12 .pte program; use 'devplan inspect')" if is_program(head) else ""
        raise DevplanError(f"{path}: not a .pt2 archive{hint}; export the model with torch.export.save")
    return path


def _without_guards(ep: ExportedProgram) -> ExportedProgram:
    """The loaded program without its guards code and sample inputs: unlifting it
    (run_decompositions, ep.module()) builds Python source from both and execs it, and a
    crafted archive chooses that text. A .pte program carries neither, and devplan drops the
    asserts a retrace would make of them."""
    ep._guards_code = []
    ep.example_inputs = None
    return ep


def _unknown_tree_types(path: Path) -> set[str]:
    """Pytree node types that the archive's calling convention names and this process has not
    registered: a model's output class (transformers' ModelOutputs) is registered by its
    library's import, which devplan does not make, and a type never is needed to plan."""
    from torch.utils._pytree import SERIALIZED_TYPE_TO_PYTHON_TYPE

    def types(spec: Any) -> set[str]:
        if isinstance(spec, list):
            return set().union(*map(types, spec)) if spec else set()
        if not isinstance(spec, dict):
            return set()
        own = {spec["type"]} if isinstance(spec.get("type"), str) else set()
        return own | types(spec.get("children_spec") or [])

    names: set[str] = set()
    with zipfile.ZipFile(path) as archive:
        for member in archive.namelist():
            if "/models/" in f"/{member}" and member.endswith(".json"):
                graph = json.loads(archive.read(member)).get("graph_module") or {}
                for entry in graph.get("module_call_graph") or []:
                    for key in ("in_spec", "out_spec"):
                        text = (entry.get("signature") or {}).get(key)
                        names |= types(json.loads(text)) if isinstance(text, str) and text else set()
    return {name for name in names if name not in SERIALIZED_TYPE_TO_PYTHON_TYPE}


@contextlib.contextmanager
def _weights_mapped(path: Path) -> Iterator[None]:
    """torch's reader copies every weight out of the archive, all read before any is needed
    and then held beside the archive's pages. torch.export.save stores its members
    uncompressed and aligned, so while torch reads, each such tensor is instead a view of a
    private mapping of the archive: its pages are read when a pass or the writer touches them,
    and whatever writes to it changes this process's copy only. Compressed or unaligned members
    (a re-zipped archive) are read as torch reads them."""
    import mmap

    import torch
    from torch.export.pt2_archive import _package as package

    with zipfile.ZipFile(path) as archive:
        stored = {
            info.filename.partition("/")[2] for info in archive.infolist() if info.compress_type == zipfile.ZIP_STORED
        }
    with open(path, "rb") as file:
        mapping = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY)
    original = package._build_file_map

    def build_file_map(archive_reader: Any, config: Any, base_dir: str) -> dict[str, Any]:
        mapped: dict[str, torch.Tensor] = {}
        for meta in config.config.values():
            record, tensor_meta = os.path.join(base_dir, meta.path_name), meta.tensor_meta
            if meta.use_pickle or tensor_meta is None or meta.path_name in mapped or record not in stored:
                continue
            dtype = package.deserialize_scalar_type(tensor_meta.dtype)
            offset = archive_reader.archive_file.get_record_offset(record)
            size = archive_reader.archive_file.get_record_size(record)
            if size == 0 or size % dtype.itemsize or offset % dtype.itemsize:
                continue
            tensor = torch.frombuffer(mapping, dtype=torch.uint8, count=size, offset=offset).view(dtype)
            if tensor_meta.requires_grad:
                tensor.requires_grad_(True)
            device = package.deserialize_device(tensor_meta.device)
            mapped[meta.path_name] = tensor if device == torch.device("cpu") else tensor.to(device)
        rest = {key: meta for key, meta in config.config.items() if meta.path_name not in mapped}
        return {**original(archive_reader, replace(config, config=rest), base_dir), **mapped}

    package._build_file_map = build_file_map
    try:
        yield
    finally:
        package._build_file_map = original


@contextlib.contextmanager
def _readable(path: Path) -> Iterator[Path | BinaryIO]:
    """`path` as torch's archive reader can open it: it takes a name as UTF-8 text, so a name
    that is not (bytes a Linux file name may hold) is handed over as an open file."""
    try:
        str(path).encode()
    except UnicodeEncodeError:
        with open(path, "rb") as file:
            yield file
        return
    yield path


@contextlib.contextmanager
def _type_hints_once() -> Iterator[None]:
    """torch's deserializer asks typing.get_type_hints of the same few schema dataclasses for
    every field of every node (25,000 times for a 32-layer transformer, half of
    torch.export.load); their answers never change, so while it reads, each is asked once."""
    import types
    import typing

    from torch._export.serde import serialize

    answers: dict[tuple[Any, ...], dict[str, Any]] = {}

    def get_type_hints(
        obj: Any, globalns: Any = None, localns: Any = None, include_extras: bool = False
    ) -> dict[str, Any]:
        key = (obj, id(globalns), id(localns), include_extras)
        if key not in answers:
            answers[key] = typing.get_type_hints(obj, globalns, localns, include_extras)
        return answers[key]

    cached = types.ModuleType("typing")  # typing itself, but for the one function
    cached.__dict__.update(vars(typing), get_type_hints=get_type_hints)
    original, serialize.typing = serialize.typing, cached
    try:
        yield
    finally:
        serialize.typing = original


@contextlib.contextmanager
def _stand_ins(names: set[str]) -> Iterator[None]:
    """Register a dict-like stand-in for each named type while torch reads the archive, and
    take them out again afterwards (they would clash with the real types' registration)."""
    from torch.utils import _pytree as pytree

    classes = []
    for name in sorted(names):
        cls = type(name.rpartition(".")[2] or "StandIn", (dict,), {"__module__": __name__, "stand_in_for": name})
        pytree.register_pytree_node(
            cls,
            lambda d: (list(d.values()), list(d.keys())),
            lambda values, keys: dict(zip(keys, values)),
            serialized_type_name=name,
        )
        classes.append(cls)
    try:
        yield
    finally:
        for cls in classes:
            pytree._deregister_pytree_node(cls)


def _plain_specs(ep: ExportedProgram) -> ExportedProgram:
    """Rewrite the calling convention's stand-in nodes as dicts (a ModelOutput's context is
    its keys) or tuples, which every reader of the program knows."""
    from torch.utils._pytree import TreeSpec

    def plain(spec: TreeSpec) -> TreeSpec:
        children = [plain(child) for child in spec.children()]
        # torch caches parsed specs by their text, so a spec may hold an earlier load's stand-in
        if not hasattr(spec.type, "stand_in_for") or spec.type.__module__ != __name__:
            return TreeSpec(spec.type, spec.context, children) if children else spec
        keys = spec.context
        if isinstance(keys, list) and len(keys) == len(children) and all(isinstance(k, str) for k in keys):
            return TreeSpec(dict, keys, children)
        return TreeSpec(tuple, None, children)

    for entry in ep.module_call_graph:
        if entry.signature is not None:
            entry.signature.in_spec = plain(entry.signature.in_spec)
            entry.signature.out_spec = plain(entry.signature.out_spec)
    return ep
