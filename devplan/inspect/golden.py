"""The golden document: the small, stable summary of a program's plan that a project keeps
beside it and reviews in pull requests (`devplan check --golden`, docs/golden-json.md).

Built from the inspection document alone, so it says the same of devplan's programs and
ExecuTorch's. Only facts of the plan go in: no paths, no timings, no file size; each method's
placements are one digest and a count, so a golden file stays a few dozen lines however
large the model."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from devplan.errors import DevplanError
from devplan.files import read_input

SCHEMA_VERSION = 1
FORMAT = "devplan-golden"
# a golden file is a few dozen lines; anything near this is not one
MAX_GOLDEN_BYTES = 16 << 20
_PLACEMENT_KEYS = ("value", "mem_id", "offset", "nbytes", "lifetime", "device")


def golden_document(doc: dict) -> dict:
    """The golden document of an inspection document (the whole one: --section trims away
    the tensors that the placement digest is made of)."""
    if any(key not in method for method in doc["methods"] for key in ("buffers", "tensors", "operators", "delegates")):
        raise DevplanError(f"{doc['file']['name']}: this inspection document was trimmed with --section; "
                           f"a golden document needs the whole one")
    return {
        "schema_version": SCHEMA_VERSION,
        "format": FORMAT,
        "file": {"name": doc["file"]["name"], "constant_bytes": doc["file"]["constant_bytes"]},
        "methods": [_method(method) for method in doc["methods"]],
    }


def _method(method: dict) -> dict:
    rows = placements(method)
    delegates = [{"index": d["index"], "id": d["id"], "target_device": d["target_device"],
                  "payload_size": d["payload_size"], "payload_buffers": d["payload_buffers"], "window": d["window"]}
                 for d in method["delegates"]]
    buffers = [{key: b[key] for key in ("mem_id", "device", "size", "lower_bound", "tensors")} for b in method["buffers"]]
    return {
        "name": method["name"],
        "counts": {"instructions": method["counts"]["instructions"], "values": method["counts"]["values"],
                   "tensors": len(method["tensors"]), "delegates": method["counts"]["delegates"]},
        "buffers": buffers,
        "devices": {d["device"]: {key: d[key] for key in ("buffers", "size", "lower_bound")} for d in method["devices"]},
        "operators": sorted({f"{op['name']}.{op['overload']}" if op["overload"] else op["name"]
                             for op in method["operators"]}),
        "delegates": delegates,
        "placements": {"count": len(rows), "sha256": placement_digest(rows)},
    }


def placements(method: dict) -> list[dict]:
    """Where each planned tensor of an inspection document's method lives, by value index."""
    return [{key: tensor[key] for key in _PLACEMENT_KEYS} for tensor in method["tensors"] if tensor["mem_id"] is not None]


def placement_digest(rows: list[dict]) -> str:
    text = json.dumps(rows, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def golden_text(golden: dict) -> str:
    """The file's text: sorted keys and a final newline, so a rewrite of the same plan is byte-identical."""
    return json.dumps(golden, sort_keys=True, indent=2) + "\n"


def is_golden(document: dict) -> bool:
    return document.get("format") == FORMAT


def read_golden(path: str | os.PathLike) -> dict:
    """A golden file's document; a missing, damaged or foreign file is a DevplanError saying how to write one."""
    path = Path(path)
    rewrite = f"write it with `devplan check PROGRAM.pte --golden {path} --update`"
    if not path.exists() and not path.is_symlink():
        raise DevplanError(f"{path}: no such golden file; {rewrite}")
    text = read_input(path, limit=MAX_GOLDEN_BYTES, hint=rewrite)
    try:
        golden = json.loads(text.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DevplanError(f"{path}: not a golden file ({type(error).__name__}); {rewrite}") from None
    if not isinstance(golden, dict) or not is_golden(golden):
        raise DevplanError(f"{path}: not a devplan golden file (no \"format\": \"{FORMAT}\"); {rewrite}")
    if golden.get("schema_version") != SCHEMA_VERSION:
        raise DevplanError(f"{path}: golden schema_version {golden.get('schema_version')!r}, this devplan reads "
                           f"{SCHEMA_VERSION}; rewrite it with --update after checking the program")
    return golden
