"""Every machine-readable document validates against its JSON Schema in docs/schemas/,
built from real outputs: devplan's programs (one with a delegate) and ExecuTorch's."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import jsonschema
import pytest
import torch
import typing_extensions

import devplan
from devplan.inspection.check import check_document
from devplan.inspection.golden import golden_document
from devplan.runtime.report import run_document
from testbed.lowerings import executorch_lowered
from testbed.models import export
from tests.inspection.runner import invoke

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "docs" / "schemas"
DOCUMENTS = ("compile", "inspect", "golden", "diff", "check", "run", "xnnpack")


def validate(name: str, document: dict) -> None:
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(document)


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("schemas")
    paths = {name: folder / f"{name}.pte" for name in ("two_io", "two_io_cuda", "executorch")}
    devplan.compile(ROOT / "samples" / "two_io.pt2", paths["two_io"])
    devplan.compile(ROOT / "samples" / "two_io.pt2", paths["two_io_cuda"], delegates=["cuda:0"])
    paths["executorch"].write_bytes(executorch_lowered(export("gated_mlp")[0]))
    return paths


def test_every_document_has_a_schema_and_a_page():
    assert sorted(p.name for p in SCHEMAS.iterdir()) == sorted(f"{name}.schema.json" for name in DOCUMENTS)
    for name in DOCUMENTS:
        jsonschema.Draft202012Validator.check_schema(json.loads((SCHEMAS / f"{name}.schema.json").read_text()))
        assert f"schemas/{name}.schema.json" in (ROOT / "docs" / f"{name}-json.md").read_text()


def test_compile_inspect_and_golden_documents_validate(programs, tmp_path):
    result = devplan.compile(ROOT / "samples" / "two_io.pt2", tmp_path / "p.pte", delegates=["cuda:0=aten::linear"])
    validate("compile", json.loads(json.dumps(result.summary())))
    for path in programs.values():
        doc = devplan.inspect(path)
        validate("inspect", doc)
        validate("golden", golden_document(doc))
    validate("inspect", json.loads(invoke("inspect", str(programs["two_io"]), "--json", "-s", "buffers").stdout))


def test_an_xnnpack_delegates_document_validates(tmp_path):
    """A quantized linear's graph: quantization of each kind it has, weights by key, a clamp."""
    pytest.importorskip("executorch.backends.xnnpack")
    from testbed.models import pt2e_quantize

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())
    ep = pt2e_quantize(module, (torch.randn(2, 8),), is_per_channel=True)[0]
    devplan.compile(ep, tmp_path / "q.pte", backends=["xnnpack"])
    doc = json.loads(invoke("inspect", str(tmp_path / "q.pte"), "--delegate", "0", "--json").stdout)
    assert {v["quantization"]["kind"] for v in doc["values"] if v["quantization"]} == {"per_tensor", "per_channel"}
    validate("xnnpack", doc)


def test_diff_check_and_run_documents_validate(programs, tmp_path):
    golden = tmp_path / "golden.json"
    devplan.check_golden(programs["two_io"], golden, update=True)
    for a, b, options in (
        (programs["executorch"], programs["two_io"], {}),
        (programs["two_io"], programs["two_io_cuda"], {"tolerance": "2%"}),
        (golden, programs["two_io_cuda"], {"tolerance": "4KiB", "exact": True}),
        (programs["two_io"], programs["two_io"], {}),
    ):
        validate("diff", devplan.diff(a, b, **options).document())
    for updated in (True, False):
        report = json.loads(
            invoke(
                "check",
                str(programs["two_io_cuda"]),
                "--golden",
                str(golden),
                "--budget",
                "cuda:0=1MiB",
                "--json",
                *(["--update"] if updated else []),
            ).stdout
        )
        validate("check", report)
        if report["golden"]["diff"] is not None:
            validate("diff", report["golden"]["diff"])
    validate("check", check_document("x.pte", devplan.check(programs["executorch"], max_ratio=1.0)))
    validate("run", json.loads(invoke("run", str(programs["two_io_cuda"]), "--devices-on-host", "--json").stdout))
    validate("run", run_document("x.pte", "forward", [[3, None]]))


_SCALARS = {int: "integer", float: "number", str: "string", bool: "boolean"}


def _resolve(schema: dict, root: dict) -> dict:
    while "$ref" in schema:
        schema = root["$defs"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _types(schema: dict) -> set[str]:
    kinds = schema.get("type", ())
    return {kinds} if isinstance(kinds, str) else set(kinds)


def _mirrors(hint, schema: dict, root: dict, where: str) -> list[str]:
    """What differs between a type hint of devplan.documents and the schema of the same place."""
    schema = _resolve(schema, root)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        present = [a for a in args if a is not type(None)]
        nullable = len(present) < len(args)
        if nullable and "null" not in _types(schema) and schema.get("type") is not None:
            return [f"{where}: Optional, but the schema allows no null"]
        if len(present) > 1:  # the schema's alternatives, in order
            alternatives = schema.get("oneOf", [])
            if len(alternatives) != len(present):
                return [f"{where}: {len(present)} alternatives, the schema {len(alternatives)}"]
            return [p for a, s in zip(present, alternatives) for p in _mirrors(a, s, root, where)]
        hint = present[0]
        origin, args = typing.get_origin(hint), typing.get_args(hint)
    elif "null" in _types(schema):
        return [f"{where}: the schema allows null, the type is not Optional"]
    if typing_extensions.is_typeddict(hint):
        if "object" not in _types(schema) and "properties" not in schema:
            return [f"{where}: an object in the type, not in the schema"]
        if not {"properties", "required"} & schema.keys():  # an object another schema describes
            return _described_elsewhere(hint, schema, where)
        hints = typing.get_type_hints(hint)
        properties = {key: {} for key in schema.get("required", ())} | schema.get("properties", {})
        problems = [f"{where}.{key}: in the type only" for key in hints.keys() - properties.keys()]
        problems += [f"{where}.{key}: in the schema only" for key in properties.keys() - hints.keys()]
        if set(hint.__required_keys__) != set(schema.get("required", ())):
            problems.append(
                f"{where}: required {sorted(hint.__required_keys__)}, schema {sorted(schema.get('required', ()))}"
            )
        return problems + [
            p
            for key in hints.keys() & properties.keys()
            for p in _mirrors(hints[key], properties[key], root, f"{where}.{key}")
        ]
    if origin is list:
        if "array" not in _types(schema):
            return [f"{where}: a list in the type, not in the schema"]
        return _mirrors(args[0], schema.get("items", {}), root, f"{where}[]") if args else []
    if origin is dict:
        extra = schema.get("additionalProperties")
        return _mirrors(args[1], extra, root, f"{where}.*") if isinstance(extra, dict) else []
    if hint in _SCALARS and schema.get("type") is not None and _SCALARS[hint] not in _types(schema) - {"null"}:
        return [f"{where}: {hint.__name__}, the schema {schema.get('type')}"]
    if origin is typing.Literal:
        allowed = schema.get("enum", [schema["const"]] if "const" in schema else None)
        if allowed is not None and sorted(map(str, args)) != sorted(map(str, allowed)):
            return [f"{where}: {args}, the schema {allowed}"]
    return []


def _described_elsewhere(hint, schema: dict, where: str) -> list[str]:
    """An object the schema leaves open, naming in its description the schema that describes
    it: a whole document (check's golden diff) is mirrored against that schema; a part of one
    (check's peak, as golden files record it) against the type of the same name there."""
    from devplan.documents import SCHEMAS as TYPES

    named = [name for name in DOCUMENTS if f"{name}.schema.json" in schema.get("description", "")]
    if len(named) != 1:
        return [f"{where}: an object in the type, and the schema names no schema describing it"]
    other = json.loads((SCHEMAS / f"{named[0]}.schema.json").read_text())
    if hint is TYPES[named[0]]:
        return _mirrors(hint, other, other, where)
    found = [p for p in _parts(TYPES[named[0]], other, other) if p[0] is hint]
    if not found:
        return [f"{where}: {hint.__name__} is no part of {named[0]}.schema.json's document"]
    return _mirrors(hint, found[0][1], other, where)


def _parts(hint, schema: dict, root: dict):
    """(type, schema) for every TypedDict in a document's type and the schema of its place."""
    schema = _resolve(schema, root)
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing_extensions.is_typeddict(hint):
        yield hint, schema
        properties = schema.get("properties", {})
        for key, inner in typing.get_type_hints(hint).items():
            if key in properties:
                yield from _parts(inner, properties[key], root)
    elif typing.get_origin(hint) is list and args:
        yield from _parts(args[0], schema.get("items", {}), root)
    elif typing.get_origin(hint) is typing.Union and len(args) == 1:
        yield from _parts(args[0], schema, root)


@pytest.mark.parametrize("name", DOCUMENTS)
def test_the_document_types_mirror_their_schemas(name):
    """devplan.documents' TypedDicts have every key of the schema at every depth, each as
    required as the schema says, each of its type; a key renamed on one side fails here."""
    from devplan.documents import SCHEMAS as TYPES

    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    assert _mirrors(TYPES[name], schema, schema, name) == []
