"""Issue 57: `devplan check --runtime BUILD.yaml` holds a program to the runtime build it ships on
(ExecuTorch's selective-build list): every operator, kernel variant and backend it lacks fails
the check, in every report format; a build that has them all passes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
import torch
import yaml

import devplan
from devplan.errors import EXIT_FAILED, DevplanError
from testbed.models import export
from testbed.small_programs import xnnpack_program
from tests.inspection.runner import invoke
from tests.test_schemas import validate

pytest.importorskip("executorch")  # --quantize's XNNPACK quantizer

EMBEDDING = "quantized_decomposed::embedding_byte.out"


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    """An embedding model quantized as BERT's tables are (8 bits a row), compiled from the command
    line, and the build list of exactly what it needs."""
    folder = tmp_path_factory.mktemp("runtime_build")
    ep, _, _ = export("embedding")
    torch.export.save(ep, folder / "model.pt2")
    compiled = invoke("compile", str(folder / "model.pt2"), "-o", str(folder / "q.pte"), "--quantize", "dynamic-int8")
    assert compiled.exit_code == 0, compiled.output
    assert invoke("inspect", str(folder / "q.pte"), "--oplist", str(folder / "build.yaml")).exit_code == 0
    return folder, compiled.stdout


def _without(folder, name: str, **changes) -> str:
    build = yaml.safe_load((folder / "build.yaml").read_text())
    build["operators"].pop(name, None)
    build["et_kernel_metadata"].pop(name, None)
    build.update(changes)
    path = folder / f"build_{len(list(folder.glob('build_*')))}.yaml"
    path.write_text(yaml.safe_dump(build))
    return str(path)


def test_the_compile_summary_names_the_quantized_library_and_embedding_byte(quantized):
    _, summary = quantized
    needs = " ".join(line.strip() for line in summary.splitlines() if "needs" in line or "embedding" in line)
    assert "quantized kernels (quantized_ops_lib; in Python, import executorch.kernels.quantized)" in needs
    assert "embedding_byte" in needs
    flat = " ".join(summary.split())
    assert (
        "embedding tables in 8 bits a row, gathered by quantized_decomposed::embedding_byte.out: the runtime " in flat
    )


def test_a_build_with_what_the_program_needs_passes(quantized):
    folder, _ = quantized
    result = invoke("check", str(folder / "q.pte"), "--runtime", str(folder / "build.yaml"), "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    validate("check", document)
    assert document["runtime"] == {
        "file": {"name": "build.yaml"},
        "ok": True,
        "backends_checked": False,
        "missing": [],
    }


def test_a_build_without_embedding_byte_fails_in_every_format(quantized, tmp_path):
    folder, _ = quantized
    build = _without(folder, EMBEDDING)
    program = str(folder / "q.pte")
    text = invoke("check", program, "--runtime", build)
    assert text.exit_code == EXIT_FAILED
    flat = " ".join(text.stdout.split())
    assert f"FAIL runtime build {build.rsplit('/', 1)[1]}: lacks 1 thing the program needs" in flat
    assert f"forward needs operator {EMBEDDING}: the build selects no kernel for it" in flat
    github = invoke("check", program, "--runtime", build, "--format", "github").stdout.splitlines()
    assert [line.split("::")[1] for line in github] == [
        f"error file={build},title=devplan check%3A forward needs operator quantized_decomposed%3A%3Aembedding_byte.out"
    ]
    markdown = invoke("check", program, "--runtime", build, "--format", "markdown").stdout
    assert "runtime build `" in markdown and f"`{EMBEDDING}`" in markdown
    junit = tmp_path / "report.xml"
    assert invoke("check", program, "--runtime", build, "--junit", str(junit)).exit_code == EXIT_FAILED
    (suite,) = [s for s in ET.parse(junit).getroot() if s.get("name", "").startswith("runtime build")]
    (case,) = list(suite)
    assert case.get("name") == f"forward needs operator {EMBEDDING}" and case.find("failure") is not None
    missing = json.loads(invoke("check", program, "--runtime", build, "--json").stdout)["runtime"]["missing"]
    assert [(m["kind"], m["name"]) for m in missing] == [("operator", EMBEDDING)]


def test_a_kernel_variant_the_build_lacks_fails(quantized):
    folder, _ = quantized
    build = yaml.safe_load((folder / "build.yaml").read_text())
    build["et_kernel_metadata"][EMBEDDING] = ["v1/3;0|3;0"]  # another dtype than the program's tables
    path = folder / "variant.yaml"
    path.write_text(yaml.safe_dump(build))
    result = invoke("check", str(folder / "q.pte"), "--runtime", str(path), "--json")
    assert result.exit_code == EXIT_FAILED
    (lacking,) = json.loads(result.stdout)["runtime"]["missing"]
    assert (
        lacking["kind"] == "kernel" and lacking["name"] == EMBEDDING and "the build has v1/3;0|3;0" in lacking["detail"]
    )
    build["et_kernel_metadata"][EMBEDDING] = ["default"]  # every variant
    path.write_text(yaml.safe_dump(build))
    assert invoke("check", str(folder / "q.pte"), "--runtime", str(path)).exit_code == 0


def test_backends_are_checked_where_the_build_names_them(tmp_path):
    program = tmp_path / "xnnpack.pte"
    program.write_bytes(xnnpack_program())
    assert invoke("inspect", str(program), "--oplist", str(tmp_path / "build.yaml")).exit_code == 0
    unnamed = invoke("check", str(program), "--runtime", str(tmp_path / "build.yaml"))
    assert unnamed.exit_code == 0 and "backends not checked" in " ".join(unnamed.stdout.split())
    build = yaml.safe_load((tmp_path / "build.yaml").read_text())
    for features, code in ((["VulkanBackend"], EXIT_FAILED), (["XnnpackBackend"], 0)):
        (tmp_path / "named.yaml").write_text(yaml.safe_dump({**build, "build_features": features}))
        result = invoke("check", str(program), "--runtime", str(tmp_path / "named.yaml"), "--json")
        assert result.exit_code == code
        missing = json.loads(result.stdout)["runtime"]["missing"]
        assert [(m["kind"], m["name"]) for m in missing] == ([("backend", "XnnpackBackend")] if code else [])


def test_a_build_that_is_not_a_list_is_one_line(tmp_path):
    program = tmp_path / "linear.pte"
    devplan.compile(torch.export.export(torch.nn.Linear(4, 2), (torch.randn(3, 4),)), program)
    aliases = "a: &a [x, x, x, x, x, x, x, x]\n" + "".join(
        f"{b}: &{b} [{', '.join(['*' + a] * 8)}]\n" for a, b in zip("abcdefgh", "bcdefghi")
    )  # 8**9 strings if expanded
    for text, said in (
        ("operators: [a", "not YAML"),
        ("- 1\n- 2\n", "no `operators` table"),
        (aliases + "operators: {}\net_kernel_metadata: {op: *i}\n", "not a table of lists of strings"),
        ("operators: {[1, 2]: {}}\n", "not YAML"),
        ("operators: {1: {}}\n", "an operator's name is not a string"),
    ):
        (tmp_path / "bad.yaml").write_text(text)
        result = invoke("check", str(program), "--runtime", str(tmp_path / "bad.yaml"))
        assert isinstance(result.exception, DevplanError) and said in str(result.exception)
    (tmp_path / "all.yaml").write_text("operators: {}\ninclude_all_operators: true\n")
    assert invoke("check", str(program), "--runtime", str(tmp_path / "all.yaml")).exit_code == 0


RUNTIME_TEST = """
from devplan.testing import assert_fits_runtime


def test_fits_with_the_fixture(devplan_golden):
    devplan_golden("q.pte", "golden.json", runtime="BUILD")


def test_fits_with_the_helper():
    assert_fits_runtime("q.pte", "BUILD")
"""


@pytest.mark.sweep  # end to end through fresh pytest processes; the full suite runs it
def test_the_pytest_plugin_holds_a_program_to_its_runtime_build(quantized, tmp_path):
    from tests.test_pytest_plugin import pytest_in

    folder, _ = quantized
    for name in ("q.pte", "build.yaml"):
        (tmp_path / name).write_bytes((folder / name).read_bytes())
    lacking = _without(folder, EMBEDDING)
    (tmp_path / "lacking.yaml").write_bytes(open(lacking, "rb").read())
    (tmp_path / "test_fit.py").write_text(RUNTIME_TEST.replace("BUILD", "build.yaml"))
    assert pytest_in(tmp_path, "--devplan-update-golden").returncode == 0
    fits = pytest_in(tmp_path)
    assert fits.returncode == 0, fits.stdout
    (tmp_path / "test_fit.py").write_text(RUNTIME_TEST.replace("BUILD", "lacking.yaml"))
    lacks = pytest_in(tmp_path)
    assert lacks.returncode == 1 and "2 failed" in lacks.stdout, lacks.stdout
    assert lacks.stdout.count(f"forward needs operator {EMBEDDING}") >= 2
