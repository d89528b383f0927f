"""The JSON Schema keywords devplan's own schemas use (draft 2020-12: type, const, properties,
required, additionalProperties, items, anyOf, $ref to $defs, minimum, maximum, pattern,
uniqueItems), checked in a few dozen lines, so that a golden file is read against the schema
devplan ships (devplan/schemas/) rather than a hand-kept copy of it, without making the
`jsonschema` package (and its compiled rpds-py) a dependency of the core. The test suite holds
this reading to jsonschema's on every committed golden file and on damaged ones."""

from __future__ import annotations

import functools
import json
import re
from importlib import resources
from typing import Any

_TYPES: dict[str, type] = {"object": dict, "array": list, "string": str, "null": type(None), "boolean": bool}


@functools.lru_cache(maxsize=None)
def schema(name: str) -> dict[str, Any]:
    """devplan/schemas/NAME.schema.json, as shipped in the package."""
    loaded: dict[str, Any] = json.loads(resources.files("devplan").joinpath(f"schemas/{name}.schema.json").read_text())
    return loaded


def problem(value: Any, node: dict[str, Any], root: dict[str, Any], where: str = "") -> str | None:
    """The first place (a field path: methods[0].buffers[1].size) where `value` breaks the schema
    `node` (of the document `root`, for $ref), and what it should be there; None when it fits."""
    here = where or "the top level"
    if "$ref" in node:
        node = root["$defs"][node["$ref"].rsplit("/", 1)[1]]
    if "const" in node and (value != node["const"] or type(value) is not type(node["const"])):
        return f"{here} should be {json.dumps(node['const'])}"
    if "type" in node:
        kinds = node["type"] if isinstance(node["type"], list) else [node["type"]]
        if not any(_is(value, kind) for kind in kinds):
            return f"{here} should be {' or '.join(_NAMES[kind] for kind in kinds)}"
    if _is(value, "integer") and not node.get("minimum", value) <= value <= node.get("maximum", value):
        return f"{here} should be a whole number from {node.get('minimum')} to {node.get('maximum')}"
    if isinstance(value, str) and "pattern" in node and not re.search(node["pattern"], value):
        return f"{here} should match {node['pattern']}"
    if isinstance(value, dict):
        return _object(value, node, root, where)
    if isinstance(value, list):
        if node.get("uniqueItems") and len({json.dumps(item, sort_keys=True) for item in value}) < len(value):
            return f"{here} lists an item twice"
        items = node.get("items")
        return (
            None
            if items is None
            else next(
                (
                    found
                    for index, item in enumerate(value)
                    if (found := problem(item, items, root, f"{where}[{index}]"))
                ),
                None,
            )
        )
    return None


def _object(value: dict[str, Any], node: dict[str, Any], root: dict[str, Any], where: str) -> str | None:
    here = where or "the top level"
    missing = next((key for key in node.get("required", ()) if key not in value), None)
    if missing is not None:
        return f'{here} has no "{missing}"'
    if "anyOf" in node and not any(problem(value, option, root, where) is None for option in node["anyOf"]):
        return f"{here} has none of {', '.join(key for option in node['anyOf'] for key in option.get('required', ()))}"
    known, rest = node.get("properties", {}), node.get("additionalProperties", True)
    for key, item in value.items():
        inner = known.get(key, rest)
        if inner is False:
            return f'{here} has an unknown field "{key}"'
        if isinstance(inner, dict) and (found := problem(item, inner, root, f"{where}.{key}" if where else key)):
            return found
    return None


def _is(value: object, kind: str) -> bool:
    if kind in ("integer", "number"):  # not a bool, which Python counts as an int; a float for number only
        return type(value) is int or (kind == "number" and type(value) is float)
    return isinstance(value, _TYPES[kind])


_NAMES = {
    "object": "an object",
    "array": "an array",
    "string": "a string",
    "null": "null",
    "boolean": "true or false",
    "integer": "a whole number",
    "number": "a number",
}
