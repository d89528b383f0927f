"""Backend: a target that runs a group of ops on a device, as --delegate names it; Adopted: a
delegate one of ExecuTorch's backends compiled, taken in whole; Partitioner: an ExecuTorch
partitioner, as --backend and --partitioner name it. A module of its own, below
the passes that read them (graph, partition, backends) and the options holding them."""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from devplan.errors import DevplanError, first_line
from devplan.extras import BACKENDS, import_module
from devplan.jsontext import loads
from devplan.spec import DEVPLAN_BACKEND, Device

if TYPE_CHECKING:
    import torch

BACKEND_ID = DEVPLAN_BACKEND  # devplan's own delegate backend

TARGET_DEVICE = "target_device"  # the compile spec key ExecuTorch reads a delegate's device from


@dataclass(frozen=True)
class Backend:
    """A target that runs a group of ops on `device`: those named in `ops` ("aten::linear"),
    or every op when `ops` is None; devplan's own backend compiles its groups."""

    device: Device
    ops: frozenset[str] | None = None
    backend_id: ClassVar[str] = BACKEND_ID

    @classmethod
    def parse(cls, text: str) -> "Backend":
        """'cuda:0' takes every op; 'cuda:0=aten::linear,aten::relu' only those."""
        where, _, names = text.partition("=")
        try:
            device = Device.parse(where)
            ops = frozenset(_op_name(name) for name in names.split(",") if name.strip()) if "=" in text else None
        except DevplanError as error:
            raise DevplanError(f"--delegate {text!r}: {error}") from None
        if ops is not None and not ops:
            raise DevplanError(f"--delegate {text!r}: no op names after '='; e.g. cuda:0=aten::linear,aten::relu")
        return cls(device, ops)

    def takes(self, node: torch.fx.Node) -> bool:
        import torch  # here, not at the top: options (which parse backends) stay torch-free to import

        from devplan.ops import NUMBER_OPS

        if node.op != "call_function":
            return False
        if node.target is operator.getitem:  # picks a result of a multi-output op: goes where the op goes
            return isinstance(node.args[0], torch.fx.Node) and self.takes(node.args[0])
        if node.target in NUMBER_OPS:  # sizes are computed on the host, where the runtime's number values live
            return False
        schema = getattr(node.target, "_schema", None)  # higher-order ops (a delegate call) have none
        return schema is not None and (self.ops is None or schema.name in self.ops)

    @property
    def compile_specs(self) -> tuple[tuple[str, bytes], ...]:
        return ((TARGET_DEVICE, str(self.device).encode()),)


@dataclass(frozen=True)
class Adopted:
    """A delegate one of ExecuTorch's backends compiled (passes/export/backends.py, passes/graph/adopt.py),
    taken in whole: its backend's id, the compile specs it wrote, and the device its
    target_device spec names (else the host), where the program plans its inputs and outputs."""

    device: Device
    backend_id: str
    compile_specs: tuple[tuple[str, bytes], ...]


def _op_name(name: str) -> str:
    import torch  # as in Backend.takes

    short = name.strip().removeprefix("aten::").removeprefix("aten.").split(".")[0]
    if not hasattr(torch.ops.aten, short):
        raise DevplanError(f"unknown op {name.strip()!r}; name aten ops as aten::linear")
    return f"aten::{short}"


KNOWN = BACKENDS  # --backend NAME: the partitioner ExecuTorch ships for it


@dataclass(frozen=True)
class Partitioner:
    """An ExecuTorch partitioner, named as MODULE:CLASS with keyword arguments as JSON."""

    module: str
    cls: str
    kwargs: str = "{}"  # JSON, kept as text so that the options stay hashable and printable
    label: str = ""  # what the user wrote, for messages

    @classmethod
    def parse(cls, text: str) -> "Partitioner":
        """A backend's name ('xnnpack'), or a partitioner as parse_class reads it."""
        if text.strip().lower() in KNOWN:
            module, _, name = KNOWN[text.strip().lower()].partition(":")
            return cls(module, name, "{}", text.strip().lower())
        if ":" not in text:
            raise DevplanError(
                f"--backend {text!r}: unknown backend; use one of: {', '.join(KNOWN)}, "
                f"or --partitioner MODULE:CLASS for another"
            )
        return cls.parse_class(text)

    @classmethod
    def parse_class(cls, text: str) -> "Partitioner":
        """'MODULE:CLASS' or 'MODULE:CLASS:{"json": "kwargs"}'."""
        module, _, rest = text.partition(":")
        name, _, kwargs = rest.partition(":")
        if not module or not name.isidentifier():
            raise DevplanError(
                f"--partitioner {text!r}: write MODULE:CLASS[:JSON_KWARGS], e.g. "
                f"{KNOWN['xnnpack']}; or --backend with one of: {', '.join(KNOWN)}"
            )
        try:
            if not isinstance(loads(kwargs or "{}", f"--partitioner {text[:60]!r}"), dict):
                raise ValueError("not an object")
        except ValueError as error:
            raise DevplanError(
                f"--partitioner {text!r}: its keyword arguments must be a JSON object ({error})"
            ) from None
        return cls(module, name, kwargs or "{}", text)

    def make(self) -> Any:  # an ExecuTorch Partitioner, which ships no types
        module = import_module(self.module, self.label)
        factory = getattr(module, self.cls, None)
        if factory is None:
            raise DevplanError(f"{self.label}: {self.module} has no partitioner class {self.cls}")
        _refuse_non_partitioner(factory, f"{self.label}: {self.module}.{self.cls}")
        try:
            return factory(**json.loads(self.kwargs))
        # the user's partitioner: its failure is bad input, not devplan's bug; a SystemExit from
        # its constructor would otherwise end devplan with exit 0 and the old output in place
        except (Exception, SystemExit) as error:
            raise DevplanError(
                f"{self.label}: {self.module}.{self.cls}(**{self.kwargs}) failed: {first_line(error)}"
            ) from None


def _refuse_non_partitioner(factory: object, where: str) -> None:
    """Refuse, before calling it, what is not a class whose instances partition: any other
    callable (sys:exit, os:system) would run with the user's keyword arguments and do whatever
    it does instead of partitioning."""
    if not isinstance(factory, type):
        raise DevplanError(
            f"{where} is not a class but a {type(factory).__name__}; name an ExecuTorch partitioner "
            f"class (a subclass of executorch.exir.backend.partitioner.Partitioner)"
        )
    if not callable(getattr(factory, "partition", None)):
        raise DevplanError(
            f"{where} has no partition method, so it is not a partitioner; name an ExecuTorch "
            f"partitioner class (a subclass of executorch.exir.backend.partitioner.Partitioner)"
        )
