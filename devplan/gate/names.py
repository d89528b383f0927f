"""The names an archive gives its values, weights, modules and inputs, in the grammar torch's
code generation writes safely.

torch turns a loaded program into Python source and runs it: building the graph module as
torch.export.load reads (GraphModule.recompile), and again unlifting it (`ep.module()`, which
--quantize and ExecuTorch's lowering call). It writes the archive's names into that source
unescaped: a value's name as a variable (`add = torch.ops.aten.add.Tensor(x, y)`) or an op's
keyword, a weight's path as attribute lookups (`getattr(self, "NAME")`), a keyword input as a
dict key (`{'NAME': NAME}`); torch.export.unflatten and the quantizers look modules up by the
paths of a node's module stack. A name with a quote, a newline or a bracket in it is code, so
only names in the grammar torch itself writes pass: a value is a Python identifier, a path is
components of letters, digits and `_` joined by `.`. Each check returns what is wrong with a
name, or None; devplan.gate.allowlist names the field and refuses."""

from __future__ import annotations

import json
import keyword
import re

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_COMPONENT = r"[A-Za-z0-9_]+"  # a module's children may be numbered: layers.0.weight
_PATH = re.compile(rf"{_COMPONENT}(\.{_COMPONENT})*")
# a module's path in the call graph or a node's module stack: "" is the root, "@N" its Nth call
_MODULE = re.compile(rf"({_COMPONENT}(\.{_COMPONENT})*)?(@\d+)?")
_STACK_KEY = re.compile(r"[A-Za-z0-9_.@]*")  # L__self__seq.0, or an id, each with its "@N"
_STACK_DELIMITER = ";"  # between a node's module stack entries, as torch's serializer joins them


def value(name: str) -> str | None:
    """A graph value's name: a variable in the generated source (`self` is the module's)."""
    if not _IDENTIFIER.fullmatch(name) or keyword.iskeyword(name) or name == "self":
        return "which is not a Python identifier that torch can write as a variable"
    return None


def keyword_argument(name: str) -> str | None:
    """An op argument's name, written as a keyword of the call (`from` and `self` are real ones);
    empty for a positional argument of a Python callable (`operator.getitem`), never written."""
    if name == "" or _IDENTIFIER.fullmatch(name):
        return None
    return "which is not a Python identifier that torch can write as a keyword"


def path(name: str) -> str | None:
    """A weight's, buffer's, constant's or object's path, written as attribute lookups."""
    return None if _PATH.fullmatch(name) else "which is not a path torch can write as attribute lookups"


def module(name: str) -> str | None:
    """A module's path in the module call graph ("" for the root)."""
    return None if _MODULE.fullmatch(name) else "which is not a module path torch can write as attribute lookups"


def module_stack(text: str) -> str | None:
    """A node's nn_module_stack: entries `key,path,type` joined by ';'; the key and the
    module's path must be names (the type, a class's qualified name, is never looked up)."""
    for entry in text.split(_STACK_DELIMITER):
        key, _, rest = entry.partition(",")
        where = rest.partition(",")[0]
        if not _STACK_KEY.fullmatch(key) or not _MODULE.fullmatch(where):
            return f"holds the entry {entry!r}, whose key or module path is not a name torch can write"
    return None


def torch_fn(text: str) -> str | None:
    """A node's torch_fn: the function's name and its qualified name joined by ';', which
    torch's reader splits there and the quantizer unpacks as two."""
    return None if text.count(";") == 1 else "is not a name and a qualified name joined by one ';'"


def keywords(in_spec: str) -> str | None:
    """A call signature's inputs (a pytree spec as JSON text): when the program takes keyword
    inputs, `ep.module()` writes each keyword as a parameter and a dict key. A spec that is
    malformed is left to torch's reader, which refuses it."""
    try:
        _, spec = json.loads(in_spec)
        if spec["type"] != "builtins.tuple":
            return None
        args, kwargs = spec["children_spec"]
        names = json.loads(kwargs["context"]) if kwargs["type"] == "builtins.dict" else []
    except (ValueError, TypeError, KeyError):
        return None
    for name in names:
        if not isinstance(name, str) or value(name):
            return f"takes the keyword input {name!r}, {value(str(name)) or 'which is not a name'}"
    return None
