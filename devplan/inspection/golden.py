"""The golden document: the small, stable summary of a program's plan that a project keeps
beside it and reviews in pull requests (`devplan check --golden`, docs/golden-json.md), read
against the JSON Schema devplan ships (devplan/schemas/golden.schema.json).

Built from the inspection document alone, so it says the same of devplan's programs and
ExecuTorch's. Only facts of the plan go in: no paths, no timings, no file size; each method's
placements are one digest and a count, so a golden file stays a few dozen lines however
large the model."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any, Final, Iterator, Mapping, NoReturn, cast

from devplan import schemacheck
from devplan.documents import (
    GoldenBuffer,
    GoldenDelegate,
    GoldenDocument,
    GoldenMethod,
    GoldenPayloadBuffer,
    GoldenPeak,
    InspectDocument,
    InspectedMethod,
    PayloadBuffer,
    Peak,
    Placement,
)
from devplan.errors import DevplanError
from devplan.files import STDIO, is_stdout, present, read_input
from devplan.inspection.placed import offset_of
from devplan.jsontext import repeated
from devplan.units import inert, natural_key, size_text

SCHEMA_VERSION: Final = 1
# what a golden file says it is, under "document"; `format` is the program's format in every
# document ("ET12" in inspect's), so golden files written before say it under "format" and still read
DOCUMENT: Final = "devplan-golden"
# a golden file is a few dozen lines; anything near this is not one
MAX_GOLDEN_BYTES = 16 << 20
# the sizes in bytes that a golden file also gives in a human form, under the key and TEXT
SIZES = frozenset({"size", "lower_bound", "constant_bytes", "payload_size", "bytes"})
TEXT = "_text"
_VERBATIM = frozenset({"modules", "returns"})  # keys are the model's block names; values a method's own


def golden_document(doc: InspectDocument) -> GoldenDocument:
    """The golden document of an inspection document (the whole one: --section trims away
    the tensors that the placement digest is made of)."""
    if any(key not in method for method in doc["methods"] for key in ("buffers", "tensors", "operators", "delegates")):
        raise DevplanError(
            f"{doc['file']['name']}: this inspection document was trimmed with --section; "
            f"a golden document needs the whole one"
        )
    return {
        "schema_version": SCHEMA_VERSION,
        "document": DOCUMENT,
        "file": {"name": doc["file"]["name"], "constant_bytes": doc["file"]["constant_bytes"]},
        "methods": [_method(method) for method in doc["methods"]],
    }


def _method(method: InspectedMethod) -> GoldenMethod:
    rows = placements(method)
    delegates: list[GoldenDelegate] = [
        {
            "index": d["index"],
            "id": d["id"],
            "target_device": d["target_device"],
            "payload_size": d["payload_size"],
            "payload_buffers": _payload_buffers(d["payload_buffers"]),
            "window": d["window"],
        }
        for d in method["delegates"]
    ]
    peaks = {peak["mem_id"]: peak for peak in method.get("peak", ())}
    buffers: list[GoldenBuffer] = []
    for b in method["buffers"]:
        buffer: GoldenBuffer = {
            "mem_id": b["mem_id"],
            "device": b["device"],
            "size": b["size"],
            "lower_bound": b["lower_bound"],
            "tensors": b["tensors"],
        }
        if b["mem_id"] in peaks:
            buffer["peak"] = peak_brief(peaks[b["mem_id"]])
        buffers.append(buffer)
    golden: GoldenMethod = {
        "name": method["name"],
        "counts": {
            "instructions": method["counts"]["instructions"],
            "values": method["counts"]["values"],
            "tensors": len(method["tensors"]),
            "delegates": method["counts"]["delegates"],
        },
        "buffers": buffers,
        "devices": {
            d["device"]: {"buffers": d["buffers"], "size": d["size"], "lower_bound": d["lower_bound"]}
            for d in method["devices"]
        },
        "operators": sorted(
            {f"{op['name']}.{op['overload']}" if op["overload"] else op["name"] for op in method["operators"]}
        ),
        "delegates": delegates,
        "placements": {"count": len(rows), "sha256": placement_digest(rows)},
    }
    # a constant method's values (what an LLM runner reads), only where there is one
    if "returns" in method:
        golden["returns"] = method["returns"]
    return golden


def _payload_buffers(found: list[PayloadBuffer] | None) -> list[GoldenPayloadBuffer] | None:
    """A delegate's payload buffers as a golden file keeps them: all the inspection says."""
    if found is None:
        return None
    return [
        {
            "method": b["method"],
            "mem_id": b["mem_id"],
            "device": b["device"],
            "size": b["size"],
            "lower_bound": b["lower_bound"],
        }
        for b in found
    ]


def peak_brief(peak: Peak) -> GoldenPeak:
    """A buffer's busiest instruction (its number, op and where in the model it came from), the
    bytes held there, and each block's share of them: what a reviewer reads when the size grows."""
    instruction, op = peak["instruction"], peak["op"]
    if instruction is None or op is None:  # a buffer's peak is at an instruction once it holds any bytes
        raise ValueError(f"buffer {peak['mem_id']} has no peak instruction to brief")
    return {
        "instruction": instruction,
        "op": op,
        "source": peak["source"],
        "bytes": peak["bytes"],
        "modules": {m["module"]: m["bytes"] for m in peak["modules"]},
    }


def placements(method: InspectedMethod) -> list[Placement]:
    """Where each planned tensor of an inspection document's method lives, by value index."""
    return [
        {
            "value": tensor["value"],
            "mem_id": tensor["mem_id"],
            "offset": offset_of(tensor),
            "nbytes": tensor["nbytes"],
            "lifetime": tensor["lifetime"],
            "device": tensor["device"],
        }
        for tensor in method["tensors"]
        if tensor["mem_id"] is not None
    ]


def placement_digest(rows: list[Placement]) -> str:
    text = json.dumps(rows, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def golden_text(golden: GoldenDocument) -> str:
    """The file's text as a pull request's diff shows it: each size in bytes with its human form
    beside it ("size": 1536, "size_text": "1.5 KiB"), sources as written (no \\u00b7 escapes),
    keys sorted naturally (a peak's blocks h.2 before h.10) and a final newline, so a rewrite of
    the same plan is byte-identical. Inert (units.inert): printed with --golden - --update, no
    name in it may command a CI runner; JSON reads the same names back."""
    return inert(json.dumps(_readable(golden), indent=2, ensure_ascii=False) + "\n")


def _readable(value: Any, key: str | None = None) -> Any:
    if key in _VERBATIM:  # the model's names: only sorted
        return {name: value[name] for name in sorted(value, key=natural_key)} if isinstance(value, dict) else value
    if isinstance(value, dict):
        shown = {name: _readable(item, name) for name, item in value.items()}
        shown |= {name + TEXT: size_text(item) for name, item in value.items() if name in SIZES and type(item) is int}
        return {name: shown[name] for name in sorted(shown, key=natural_key)}
    if isinstance(value, list):
        return [_readable(item) for item in value]
    return value


def _walk_sizes(value: Any, key: str | None = None) -> Iterator[dict[str, Any]]:
    """Every object of a golden document that may hold sizes (not a peak's blocks, whose keys
    are the model's names, nor what a constant method returns)."""
    if key in _VERBATIM:
        return
    if isinstance(value, dict):
        yield value
        for name, item in value.items():
            yield from _walk_sizes(item, name)
    elif isinstance(value, list):
        for item in value:
            yield from _walk_sizes(item)


def _text_disagrees(golden: dict[str, Any]) -> str | None:
    """A human form that says other than its bytes (a hand edit of one of the two): None when
    each agrees. Only the bytes are compared, so a review must not read a stale text."""
    for found in _walk_sizes(golden):
        for name, text in found.items():
            base = name.removesuffix(TEXT)
            if name.endswith(TEXT) and base in SIZES and text != size_text(found.get(base, -1)):
                return (
                    f'"{name}": "{text}" says other than "{base}": {found.get(base)} '
                    f"({size_text(found[base]) if base in found else 'missing'}); the bytes are what is compared"
                )
    return None


def _without_text(golden: dict[str, Any]) -> dict[str, Any]:
    """The document without its human forms, as golden_document makes it: what is compared."""
    for found in _walk_sizes(golden):
        for name in [name for name in found if name.endswith(TEXT) and name.removesuffix(TEXT) in SIZES]:
            del found[name]
    return golden


def is_golden(document: Mapping[str, Any]) -> bool:
    return DOCUMENT in (document.get("document"), document.get("format"))


def read_golden(path: str | os.PathLike[str]) -> GoldenDocument:
    """A golden file's document, from standard input for "-" (as --update writes standard output
    for it); a missing, damaged or foreign file is a DevplanError saying how to write one."""
    stdin = os.fspath(path) == STDIO
    path = Path(path)
    rewrite = f"write it with `devplan check PROGRAM.pte --golden {path} --update`"
    if not stdin and not present(path) and not path.is_symlink():
        raise DevplanError(f"{path}: no such golden file; {rewrite}")
    name = "<stdin>" if stdin else os.fspath(path)
    return parse_golden(read_input(path, limit=MAX_GOLDEN_BYTES, hint=rewrite, name=name), name, rewrite)


# --update replaces a golden file only (refuse_replacing): a file that is none, a damaged one
# among them, must go first, or the advice to write it again would be refused in turn
_REMOVED = "once the file is removed (--update replaces only a golden file)"


def parse_golden(text: bytes, name: str, rewrite: str) -> GoldenDocument:
    """The golden document in `text`, checked as read_golden checks a file's (`name` names it)."""
    try:
        golden = json.loads(text.decode(), parse_constant=_no_constant, object_pairs_hook=_once)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, ValueError) as error:
        why = (
            "nested too deeply"
            if isinstance(error, RecursionError)
            else str(error)
            if type(error) is ValueError
            else type(error).__name__
        )
        raise DevplanError(f"{name}: not a golden file ({why}); {rewrite} {_REMOVED}") from None
    if not isinstance(golden, dict) or not is_golden(golden):
        raise DevplanError(f'{name}: not a devplan golden file (no "document": "{DOCUMENT}"); {rewrite} {_REMOVED}')
    version = golden.get("schema_version")
    if type(version) is not int or version != SCHEMA_VERSION:
        raise DevplanError(
            f"{name}: golden schema_version {version!r}, this devplan reads "
            f"{SCHEMA_VERSION}; rewrite it with --update after checking the program"
        )
    found = schemacheck.problem(golden, schemacheck.schema("golden"), schemacheck.schema("golden"))
    found = found or _method_twice(golden["methods"]) or _text_disagrees(golden)
    if found is not None:
        raise DevplanError(f"{name}: not a valid golden file: {found}; {rewrite}")
    return cast(GoldenDocument, _without_text(golden))  # as the schema checked it


def _once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are each given once: json keeps the last of two, unsaid."""
    if (key := repeated(pairs)) is not None:
        raise ValueError(f"the key {key!r} is given twice in one object")
    return dict(pairs)


def _method_twice(methods: list[Any]) -> str | None:
    """A method listed twice, which a comparison would see once (the last): None when none is."""
    first: dict[str, int] = {}
    for index, method in enumerate(methods):
        if method["name"] in first:
            return f"method {method['name']!r} is listed twice (methods[{first[method['name']]}] and methods[{index}])"
        first[method["name"]] = index
    return None


def refuse_replacing(path: str | os.PathLike[str]) -> None:
    """--update rewrites a golden file, never another file named by mistake (a program, its
    .ptd): what is there must be missing, empty, or a devplan golden document of any schema
    version (rewriting an old one is what --update is for). Streams (-, /dev/null, a FIFO)
    hold nothing to lose; write_atomic judges them."""
    name = os.fspath(path)
    if is_stdout(name):
        return
    try:
        found = os.stat(name)
    except OSError:  # missing (a new golden file), or a path write_atomic names the problem of
        return
    if not stat.S_ISREG(found.st_mode) or found.st_size == 0 or _is_golden_file(name, found.st_size):
        return
    raise DevplanError(
        f"{name}: --golden --update would replace a file that is not a devplan golden file; "
        f"pass --golden a golden .json file or a new name"
    )


def _is_golden_file(path: str, size: int) -> bool:
    if size > MAX_GOLDEN_BYTES:  # read nothing of a large program to learn it is one
        return False
    try:
        document = json.loads(
            read_input(path, limit=MAX_GOLDEN_BYTES, hint="pass a golden .json file"), parse_constant=_no_constant
        )
    except (DevplanError, ValueError, RecursionError):  # unreadable, not UTF-8, not JSON, nested too deeply
        return False
    return isinstance(document, dict) and is_golden(document)


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")
