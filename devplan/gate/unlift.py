"""What torch's unlifting (`ep.module()`, which --quantize and `run --reference MODEL.pt2` call)
needs of a loaded program's names, beyond the grammar the archive gate holds them to.

ep.module() builds a GraphModule, sets each weight, buffer and constant on it (and on the plain
modules it makes for the submodules on their paths), then runs a forward generated from the
graph. A name torch.export writes from an ordinary model can still break that: a submodule
called `graph` or `code` (attributes every GraphModule has), or an input called `pytree` or
`torch` (globals the generated forward reads by those names, which the argument shadows). A
crafted archive adds `forward` or `__class__`. Compiling never unlifts, so the gate lets these
pass; what unlifts checks here first and refuses in one line."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from devplan.errors import DevplanError
from devplan.gate.allowlist import shown

if TYPE_CHECKING:
    import torch

# the globals torch.fx's generated code reads by these fixed names (torch.fx.graph's custom
# builtins), never renamed to make way for a value
FX_GLOBALS = frozenset({"torch", "fx_pytree", "pytree", "device", "inf", "nan", "NoneType"})

# ep.module() makes a module for each part of a path and compiles `self.a.b...` in its forward,
# recursing once a part: 2,500 parts was a RecursionError (Python's compiler alone fails near
# 3,000). A model's paths are tens of parts deep.
MAX_PATH_PARTS = 256


@functools.cache
def _attributes() -> tuple[frozenset[str], frozenset[str]]:
    """The attributes of the GraphModule ep.module() builds, and of any module, before it sets
    the program's own: a name among them is refused (register_buffer) or replaces a method."""
    import torch

    plain = torch.nn.Module()
    return frozenset(dir(torch.fx.GraphModule(plain, torch.fx.Graph()))), frozenset(dir(plain))


def check_unliftable(ep: "torch.export.ExportedProgram", needed_by: str) -> None:
    """Refuse, in one line starting with `needed_by`, a program ep.module() cannot build: a
    weight's, constant's or submodule's path deeper than MAX_PATH_PARTS or through an attribute
    torch's modules have, or a value or forward argument named as a global its generated code
    reads."""
    root, below = _attributes()
    signature = ep.graph_signature
    paths = [("weight", name) for name in (*signature.parameters, *signature.buffers)]
    paths += [("constant", name) for name in (*signature.lifted_tensor_constants, *signature.lifted_custom_objs)]
    paths += [("submodule", entry.fqn.partition("@")[0]) for entry in ep.module_call_graph if entry.fqn]
    for kind, path in paths:
        parts = path.split(".")
        if len(parts) > MAX_PATH_PARTS:
            raise DevplanError(
                f"{needed_by}: torch cannot build a module of this program (ep.module()): the {kind} "
                f"{shown(path)!r} is a path {len(parts):,} modules deep, past the {MAX_PATH_PARTS} devplan "
                f"lets torch nest; rename it in the model and export again"
            )
        for depth, part in enumerate(parts):
            if part in (root if depth == 0 else below):
                raise DevplanError(
                    f"{needed_by}: torch cannot build a module of this program (ep.module()): the {kind} "
                    f"{shown(path)!r} goes through {shown(part)!r}, which torch's modules have as an attribute "
                    f"already; rename it in the model and export again"
                )
    # what the generated forward binds: its arguments (forward_arg_names), then the graph's values
    bound = [("forward's argument", "input", name) for name in _forward_arg_names(ep) or ()]
    bound += [("value", "input" if node.op == "placeholder" else "value", node.name) for node in ep.graph.nodes]
    for kind, what, name in bound:
        if name in FX_GLOBALS:
            raise DevplanError(
                f"{needed_by}: torch cannot run a module of this program (ep.module()): its {kind} "
                f"{name!r} shadows the global of that name torch's generated code reads; rename the "
                f"model's {what} and export again"
            )
    _check_argument_names(ep, needed_by)


def _check_argument_names(ep: "torch.export.ExportedProgram", needed_by: str) -> None:
    """Refuse a program whose forward's argument names (what ep.module()'s forward takes) are
    not its input spec's: positional ones first, then the keywords the spec names, in order.
    Disagreeing, the module refused its own inputs (a TypeError, exit 3)."""
    names, spec = _forward_arg_names(ep), ep.call_spec.in_spec
    if not names or spec is None or spec.num_children != 2:
        return
    positional, keywords = spec.child(0).num_children, list(spec.child(1).context or ())
    if len(names) != positional + len(keywords) or list(names[positional:]) != keywords:
        raise DevplanError(
            f"{needed_by}: torch cannot run a module of this program (ep.module()): its forward's "
            f"argument names {shown(str(list(names)))} are not its inputs' ({positional} positional, "
            f"keywords {shown(str(keywords))}); export the model again"
        )


def _forward_arg_names(ep: "torch.export.ExportedProgram") -> list[str] | None:
    """The names ep.module()'s forward takes (module_call_graph's forward_arg_names), if any."""
    signature = ep.module_call_graph[0].signature if ep.module_call_graph else None
    names: list[str] | None = getattr(signature, "forward_arg_names", None)
    return names
