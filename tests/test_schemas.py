"""Every machine-readable document validates against its JSON Schema in docs/schemas/,
built from real outputs: devplan's programs (one with a delegate) and ExecuTorch's."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

import devplan
from devplan.inspection.check import check_document
from devplan.inspection.golden import golden_document
from devplan.runtime.report import run_document
from tests.inspect.runner import invoke
from testbed.lowerings import executorch_lowered
from testbed.models import export

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "docs" / "schemas"
DOCUMENTS = ("compile", "inspect", "golden", "diff", "check", "run")


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


def test_diff_check_and_run_documents_validate(programs, tmp_path):
    golden = tmp_path / "golden.json"
    devplan.check_golden(programs["two_io"], golden, update=True)
    for a, b, options in ((programs["executorch"], programs["two_io"], {}),
                          (programs["two_io"], programs["two_io_cuda"], {"tolerance": "2%"}),
                          (golden, programs["two_io_cuda"], {"tolerance": "4KiB", "exact": True}),
                          (programs["two_io"], programs["two_io"], {})):
        validate("diff", devplan.diff(a, b, **options).document())
    for updated in (True, False):
        report = json.loads(invoke("check", str(programs["two_io_cuda"]), "--golden", str(golden), "--budget",
                                   "cuda:0=1MiB", "--json", *(["--update"] if updated else [])).stdout)
        validate("check", report)
        if report["golden"]["diff"] is not None:
            validate("diff", report["golden"]["diff"])
    validate("check", check_document("x.pte", devplan.check(programs["executorch"], max_ratio=1.0)))
    validate("run", json.loads(invoke("run", str(programs["two_io_cuda"]), "--devices-on-host", "--json").stdout))
    validate("run", run_document("x.pte", "forward", [[3, None]]))
