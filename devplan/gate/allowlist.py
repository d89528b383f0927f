"""What `torch.export.save` writes for one plain program, as an allowlist that devplan checks
before torch reads an archive.

torch.export.load trusts its archive: it unpickles members, hands expression strings to
`sympy.sympify` (which evaluates them as Python) and reads whatever a member's name says. So
rather than refusing what is known to be dangerous, devplan accepts only what torch writes:

- members: the fixed files of the archive format, one model named `model` with its weights
  config, constants config and sample inputs, numbered weight and constant files, and files
  under `extra/`, each name in a plain grammar (`member_kind`);
- the model's JSON and the payload configs: exactly the fields of torch's serialization schema
  (torch._export.serde.schema, read at run time so that devplan follows torch's own format),
  each of its type (`check_document`);
- the strings torch evaluates or looks up: every symbolic expression (`expr_str`) and range
  constraint in the small grammar of devplan.gate.expressions, node targets as operator names, node
  metadata by known keys, namedtuple fields as identifiers;
- the names torch writes into the Python source it generates and runs (values, weights' and
  modules' paths, the call's inputs, module stacks) in the grammar of devplan.gate.names.

Everything here raises `Unexpected`, which devplan.gate.archive turns into its one-line refusal.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import re
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any

from devplan.gate import expressions, names

MODEL = "model"  # torch.export.save names its one program so
FIXED = {  # member (under the archive's folder) -> whether torch.export.load needs it
    "archive_format": True,
    "archive_version": False,
    "byteorder": False,
    ".data/version": False,
    ".data/serialization_id": False,
    f"models/{MODEL}.json": True,
    f"data/sample_inputs/{MODEL}.pt": True,
    f"data/weights/{MODEL}_weights_config.json": True,
    f"data/constants/{MODEL}_constants_config.json": True,
}
PAYLOAD = re.compile(r"data/(weights/weight|constants/tensor)_\d{1,9}")
EXTRA = "extra/"

# node metadata torch's deserializer reads (stack_trace ... from_node); others it ignores
NODE_METADATA = {"stack_trace", "nn_module_stack", "source_fn_stack", "torch_fn", "custom", "from_node"}
PROGRAM_METADATA = {"custom"}
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
# what export names as a node's target: a registered operator, a Python operator on sizes, one
# of torch's symbolic functions, a math function; torch resolves other text by attribute lookups
TARGET = re.compile(
    rf"torch\.ops\.{_IDENTIFIER}\.{_IDENTIFIER}(\.{_IDENTIFIER})?"
    r"|_operator\.(add|sub|mul|truediv|floordiv|mod|pow|neg|pos|abs|eq|ne|lt|le|gt|ge"
    r"|and_|or_|xor|not_|invert|lshift|rshift|getitem)"
    rf"|torch\.(sym_{_IDENTIFIER}|_sym_sqrt|_assert|_check|_check_is_size)|math\.[a-z]+"
)
FLOAT_WORDS = {"Infinity", "-Infinity", "NaN"}  # torch's JSON has no other words for floats


class Unexpected(ValueError):
    """Something torch.export.save does not write: `where` names the member or field."""

    def __init__(self, where: str, what: str) -> None:
        super().__init__(f"{where} {what}")
        self.where, self.what = where, what


def safe_component(part: str) -> bool:
    """A path component that means one thing to every reader: printable (a newline in a name
    hides it from line-based checks), no separators or parent references."""
    return bool(part) and part.isprintable() and part not in (".", "..") and "\\" not in part and len(part) <= 255


def member_kind(inner: str) -> str | None:
    """'fixed', 'payload' or 'extra' for a member name (under the archive's folder) that
    torch.export.save writes; None for any other."""
    if inner in FIXED:
        return "fixed"
    if PAYLOAD.fullmatch(inner):
        return "payload"
    if inner.startswith(EXTRA) and all(map(safe_component, inner[len(EXTRA) :].split("/"))):
        return "extra"
    return None


# ----------------------------------------------------------------------------- JSON documents


def check_document(cls_name: str, document: Any) -> None:
    """`document` holds exactly the fields of torch's schema dataclass `cls_name`
    (ExportedProgram, PayloadConfig), each of its type, and its evaluated strings parse."""
    from torch._export.serde import schema

    _check(getattr(schema, cls_name), document, cls_name)


@functools.cache
def _fields(cls: type) -> tuple[dict[str, object], frozenset[str]]:
    """A schema dataclass's field types, and the fields torch always writes (no default)."""
    from torch._export.serde import schema

    hints = typing.get_type_hints(cls, globalns=vars(schema))
    required = frozenset(
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}, required


def _check(tp: Any, value: Any, where: str) -> None:
    """`value` as torch's JSON writes a value of schema type `tp`."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return
        _check(next(a for a in args if a is not type(None)), value, where)
    elif origin is list:
        _expect(isinstance(value, list), where, "a list")
        for i, item in enumerate(value):
            _check(args[0], item, f"{where}[{i}]")
    elif origin is dict:
        _expect(isinstance(value, dict), where, "an object")
        for key, item in value.items():
            _check(args[1], item, f"{where}[{key!r}]")
    elif dataclasses.is_dataclass(tp):
        _check_object(tp, value, where)
    else:
        _check_scalar(tp, value, where)


def _check_object(cls: Any, value: Any, where: str) -> None:
    from torch._export.serde.union import _Union

    _expect(isinstance(value, dict), where, "an object")
    fields, required = _fields(cls)
    unknown = [key for key in value if key not in fields]
    if unknown:
        raise Unexpected(f"{where}.{shown(unknown[0])}", f"is a field that {cls.__name__} does not have")
    if issubclass(cls, _Union):  # one field set, named by its key
        _expect(len(value) == 1, where, f"one of {cls.__name__}'s fields")
    else:
        missing = sorted(required - value.keys())
        if missing:
            raise Unexpected(f"{where}.{missing[0]}", "is missing")
    for key, item in value.items():
        _check(fields[key], item, f"{where}.{key}")
        rule = _RULES.get((cls.__name__, key))
        if rule is not None:
            rule(item, f"{where}.{key}")


def _check_scalar(tp: Any, value: Any, where: str) -> None:
    if tp is bool:
        _expect(type(value) is bool, where, "true or false")
    elif tp is int:
        _expect(type(value) is int, where, "an integer")
    elif tp is float:
        _expect(type(value) in (int, float) or value in FLOAT_WORDS, where, "a number")
    elif tp is str:  # a lone surrogate (JSON's \udcff) is no text devplan can write into a program
        _expect(isinstance(value, str) and (value.isascii() or _encodable(value)), where, "a string of Unicode text")
    elif isinstance(tp, type) and issubclass(tp, enum.IntEnum):
        _expect(type(value) is int and value in tp._value2member_map_, where, f"a {tp.__name__} number")
    else:  # a schema type devplan does not know: torch's format changed, so refuse rather than guess
        raise Unexpected(where, f"has schema type {tp!r}, which devplan does not check")


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _expect(condition: bool, where: str, what: str) -> None:
    if not condition:
        raise Unexpected(where, f"is not {what}")


def shown(text: str) -> str:
    """Text fit for a one-line message (a crafted name may hold newlines): non-printable
    characters escaped, long text cut."""
    text = text if text.isprintable() else ascii(text)[1:-1]
    return text if len(text) <= 80 else text[:77] + "..."


# ----------------------------------------------------------------------------- evaluated strings

Rule = Callable[[Any, str], None]  # a field's value, and where it is: refused with Unexpected
NameCheck = Callable[[str], str | None]  # devplan.gate.names': what is wrong with a name, or None


def _expression(text: str, where: str) -> None:
    """A string torch hands to sympy.sympify, which runs it as Python."""
    try:
        expressions.check(text)
    except expressions.Refused as refused:
        raise Unexpected(where, f"is not a size expression export writes ({shown(text)!r} {refused})") from None


def _range_constraints(constraints: dict[str, Any], where: str) -> None:
    for key in constraints:
        _expression(key, f"{where}[{shown(key)!r}]")


def _target(target: str, where: str) -> None:
    if not TARGET.fullmatch(target):
        raise Unexpected(where, f"is {shown(target)!r}, not an operator that export calls")


def _metadata_keys(allowed: set[str]) -> Rule:
    def check(metadata: dict[str, Any], where: str) -> None:
        unknown = sorted(set(metadata) - allowed)
        if unknown:
            raise Unexpected(f"{where}[{shown(unknown[0])!r}]", "is metadata that torch.export.save does not write")

    return check


_node_metadata_keys = _metadata_keys(NODE_METADATA)


def _node_metadata(metadata: dict[str, Any], where: str) -> None:
    """A node's metadata by known keys, its module stack's paths names."""
    _node_metadata_keys(metadata, where)
    stack = metadata.get("nn_module_stack")
    wrong = names.module_stack(stack) if isinstance(stack, str) else None
    if wrong:
        raise Unexpected(f"{where}['nn_module_stack']", f"{shown(wrong)}{_NAMES}")
    torch_fn = metadata.get("torch_fn")
    if isinstance(torch_fn, str) and (wrong := names.torch_fn(torch_fn)):
        raise Unexpected(f"{where}['torch_fn']", wrong)


# torch writes the archive's names into the Python source it generates and runs (devplan.gate.names)
_NAMES = " (torch writes names into Python code it runs: letters, digits and '_', paths joined by '.')"


def _name(check: NameCheck) -> Rule:
    """A rule holding a name to `check`, one of devplan.gate.names'."""

    def rule(name: str, where: str) -> None:
        wrong = check(name)
        if wrong:
            raise Unexpected(where, f"is {shown(name)!r}, {wrong}{_NAMES}")

    return rule


def _each(check: NameCheck) -> Rule:
    """A rule holding each name of a list, or each key of an object, to `check`."""
    one = _name(check)

    def rule(items: Iterable[str] | None, where: str) -> None:
        for item in items or ():  # forward_arg_names may be null
            one(item, where)

    return rule


def _signature_keywords(in_spec: str, where: str) -> None:
    wrong = names.keywords(in_spec)
    if wrong:
        raise Unexpected(where, f"{shown(wrong)}{_NAMES}")


def _identifiers(names: list[str], where: str) -> None:
    """namedtuple field names: torch builds a namedtuple class of them."""
    for name in names:
        if not re.fullmatch(_IDENTIFIER, name):
            raise Unexpected(where, f"holds {shown(name)!r}, which is no field name")


# the name fields torch writes into the Python it generates, by their grammar (devplan.gate.names)
_NAMES_BY_GRAMMAR = {
    names.value: (  # values, as variables
        ("TensorArgument", "name"),
        ("SymIntArgument", "as_name"),
        ("SymFloatArgument", "as_name"),
        ("SymBoolArgument", "as_name"),
        ("CustomObjArgument", "name"),
        ("TokenArgument", "name"),
        ("GraphArgument", "name"),
        ("Node", "name"),
        ("InputToConstantInputSpec", "name"),
        ("UserInputMutationSpec", "user_input_name"),
        ("GradientToUserInputSpec", "user_input_name"),
    ),
    names.keyword_argument: (("NamedArgument", "name"),),
    names.path: (  # the weights, buffers, constants and objects the program reads, as attribute lookups
        ("InputToParameterSpec", "parameter_name"),
        ("InputToBufferSpec", "buffer_name"),
        ("InputToTensorConstantSpec", "tensor_constant_name"),
        ("InputToCustomObjSpec", "custom_obj_name"),
        ("ParameterMutationSpec", "parameter_name"),
        ("BufferMutationSpec", "buffer_name"),
        ("GradientToParameterSpec", "parameter_name"),
    ),
    names.module: (("ModuleCallEntry", "fqn"),),
}

# (schema class, field) -> a check of that field's value, after its type is checked
_RULES: dict[tuple[str, str], Rule] = {
    ("SymExpr", "expr_str"): _expression,
    ("ExportedProgram", "range_constraints"): _range_constraints,
    ("Node", "target"): _target,
    ("Node", "metadata"): _node_metadata,
    ("GraphModule", "metadata"): _metadata_keys(PROGRAM_METADATA),
    ("NamedTupleDef", "field_names"): _identifiers,
    **{field: _name(check) for check, fields in _NAMES_BY_GRAMMAR.items() for field in fields},
    ("Graph", "tensor_values"): _each(names.value),
    ("Graph", "sym_int_values"): _each(names.value),
    ("Graph", "sym_float_values"): _each(names.value),
    ("Graph", "sym_bool_values"): _each(names.value),
    ("Graph", "custom_obj_values"): _each(names.value),
    ("PayloadConfig", "config"): _each(names.path),
    ("ModuleCallSignature", "forward_arg_names"): _each(names.value),
    ("ModuleCallSignature", "in_spec"): _signature_keywords,
}
