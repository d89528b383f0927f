"""Stage 1: a .pt2 archive on disk to a torch.export ExportedProgram."""
from __future__ import annotations

import contextlib
import json
import os
import re
import zipfile
from collections import Counter
from pathlib import Path

from devplan.errors import DevplanError, first_line
from devplan.pte.header import is_program


def load(path: str | os.PathLike) -> "torch.export.ExportedProgram":
    """Load a torch.export archive, refusing first any archive member that torch.export.load
    would unpickle (unpickling can run code that a crafted file carries)."""
    path = Path(path)
    if not path.exists():
        raise DevplanError(f"{path}: no such file; pass a .pt2 written by torch.export.save")
    if path.is_dir():
        raise DevplanError(f"{path}: is a directory; pass a .pt2 file")
    if not zipfile.is_zipfile(path):
        with open(path, "rb") as f:
            head = f.read(8)
        hint = " (it is an ET12 .pte program; use 'devplan inspect')" if is_program(head) else ""
        raise DevplanError(f"{path}: not a .pt2 archive{hint}; export the model with torch.export.save")
    _refuse_pickles(path)
    import logging

    import torch
    import torch.ao.quantization.fx._decomposed  # noqa: F401 - defines the quantize/dequantize ops PT2E graphs call

    # torch logs the real reason, with a traceback, before it tries an older archive reader
    # and fails with a generic message; keep the log to ourselves and report its reason
    logger = logging.getLogger("torch.export")
    records: list[logging.LogRecord] = []
    catcher = logging.Handler()
    catcher.emit = records.append
    handlers, propagate = logger.handlers, logger.propagate
    logger.handlers, logger.propagate = [catcher], False
    try:
        with _stand_ins(_unknown_tree_types(path)), _type_hints_once():
            return _plain_specs(torch.export.load(path))
    except Exception as error:  # torch raises many kinds here; all mean the archive is unusable
        logged = [r.exc_info[1] for r in records if r.exc_info and r.exc_info[1] is not None]
        reason = first_line(logged[0] if logged else error)
        unknown = re.match(r"Failed deserializing node Node\(target='([^']+)'", reason)
        if unknown:  # torch prints the whole node; the op is what the user needs
            raise DevplanError(f"{path}: the graph calls {unknown[1]}, which no library loaded here defines; "
                               f"export the model with ops of torch's own libraries") from None
        raise DevplanError(f"{path}: cannot load the .pt2 archive ({reason}); re-export it with torch.export.save") from None
    finally:
        logger.handlers, logger.propagate = handlers, propagate


_SAFE_PREFIXES = {"weights_config.json": "weight_", "constants_config.json": "tensor_"}


def _refuse_pickles(path: Path) -> None:
    """torch.export.load unpickles weights and constants marked use_pickle, custom and opaque
    objects, sample inputs that fail a weights-only load, and the whole of an old-format
    archive. Plain tensors, which is what torch.export.save writes for ordinary models, are
    raw bytes and pass."""
    import io
    import json

    def refuse(member: str, what: str) -> DevplanError:
        return DevplanError(f"{path}: archive member {member} is {what}, which loading would unpickle, and "
                            f"unpickling can run code; export the model with plain tensors and torch.export.save")

    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            if "version" in names:
                raise DevplanError(f"{path}: an old-format .pt2 archive, which torch loads by unpickling; "
                                   f"re-export the model with torch.export.save")
            repeated = [name for name, count in Counter(names).items() if count > 1]
            if repeated:  # zipfile reads the last copy, torch's reader the first: what we check is not what loads
                raise DevplanError(f"{path}: archive member {repeated[0]} appears more than once, so devplan and "
                                   f"torch would read different bytes; re-export the model with torch.export.save")
            models = [n for n in names if re.search(r"(^|/)models/[^/]+\.json$", n)]
            if len(models) > 1:
                raise DevplanError(f"{path}: the archive holds {len(models)} models ({', '.join(models[:3])}); "
                                   f"devplan compiles one: save each program to its own .pt2")
            for name in names:  # torch falls back to unpickling whole legacy state files
                if re.search(r"(^|/)data/(weights|constants)/[^/]+\.pt$", name):
                    raise refuse(name, "a legacy weights or constants file")
            if not any(n.endswith("archive_format") for n in names):
                raise DevplanError(f"{path}: cannot load the .pt2 archive (it has no archive_format member, so "
                                   f"torch.export.save did not write it); re-export it with torch.export.save")
            for name in names:
                kind = next((k for k in _SAFE_PREFIXES if name.endswith("_" + k)), None)
                if kind is not None:
                    config = json.loads(archive.read(name)).get("config") or {}
                    for fqn, meta in config.items():
                        if meta.get("use_pickle") or not str(meta.get("path_name", "")).startswith(_SAFE_PREFIXES[kind]):
                            raise refuse(name, f"{fqn!r}, a pickled object")
                elif "/data/sample_inputs/" in f"/{name}" and name.endswith(".pt"):
                    import torch

                    try:
                        torch.load(io.BytesIO(archive.read(name)), weights_only=True)
                    except Exception:  # anything a weights-only load rejects would be unpickled in full
                        raise refuse(name, "sample inputs that are not plain tensors") from None
    except (zipfile.BadZipFile, ValueError, AttributeError, OSError) as error:
        raise DevplanError(f"{path}: cannot load the .pt2 archive ({first_line(error)}); "
                           f"re-export it with torch.export.save") from None


def _unknown_tree_types(path: Path) -> set[str]:
    """Pytree node types that the archive's calling convention names and this process has not
    registered: a model's output class (transformers' ModelOutputs) is registered by its
    library's import, which devplan does not make, and a type never is needed to plan."""
    from torch.utils._pytree import SERIALIZED_TYPE_TO_PYTHON_TYPE

    def types(spec) -> set[str]:
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
def _type_hints_once():
    """torch's deserializer asks typing.get_type_hints of the same few schema dataclasses for
    every field of every node (25,000 times for a 32-layer transformer, half of
    torch.export.load); their answers never change, so while it reads, each is asked once."""
    import types
    import typing

    from torch._export.serde import serialize

    answers: dict = {}

    def get_type_hints(obj, globalns=None, localns=None, include_extras=False):
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
def _stand_ins(names: set[str]):
    """Register a dict-like stand-in for each named type while torch reads the archive, and
    take them out again afterwards (they would clash with the real types' registration)."""
    from torch.utils import _pytree as pytree

    classes = []
    for name in sorted(names):
        cls = type(name.rpartition(".")[2] or "StandIn", (dict,), {"__module__": __name__, "stand_in_for": name})
        pytree.register_pytree_node(cls, lambda d: (list(d.values()), list(d.keys())),
                                    lambda values, keys: dict(zip(keys, values)), serialized_type_name=name)
        classes.append(cls)
    try:
        yield
    finally:
        for cls in classes:
            pytree._deregister_pytree_node(cls)


def _plain_specs(ep):
    """Rewrite the calling convention's stand-in nodes as dicts (a ModelOutput's context is
    its keys) or tuples, which every reader of the program knows."""
    from torch.utils._pytree import TreeSpec

    def plain(spec):
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
