"""Issue 57: every program says which kernel libraries and backends it needs, and `inspect
--oplist` writes ExecuTorch's selective-build operator list, equal to what ExecuTorch's own
gen_oplist writes for the same file, devplan's programs and ExecuTorch's alike."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
import torch

import devplan
from devplan.inspection.kernels import oplist_yaml
from devplan.pte import read_pte
from devplan.pte.decode import methods
from testbed.lowerings import executorch_lowered
from testbed.models import CORPUS as MODELS, export
from testbed.small_programs import xnnpack_program
from tests.inspection.runner import invoke
from tests.tiers import tiered

gen_oplist = pytest.importorskip("executorch.codegen.tools.gen_oplist").gen_oplist

# every corpus model; the fast tier keeps tensor lists (cat) and integer indices (embedding)
CORPUS = tuple(MODELS)


def executorch_oplist(path) -> str:
    with contextlib.redirect_stdout(io.StringIO()):  # it prints each operator as it goes
        gen_oplist(output_path=str(path) + ".yaml", model_file_path=str(path))
    return (path.parent / (path.name + ".yaml")).read_text()


def devplan_oplist(path) -> str:
    return oplist_yaml(methods(read_pte(path)), str(path))


@pytest.mark.parametrize("name", tiered(CORPUS, fast=["cat_split_chunk", "embedding"]))
def test_oplist_is_executorchs_for_devplans_and_executorchs_programs(name, tmp_path):
    ep, _, _ = export(name)
    ours, theirs = tmp_path / "devplan.pte", tmp_path / "executorch.pte"
    devplan.compile(ep, ours)
    theirs.write_bytes(executorch_lowered(ep))
    for program in (ours, theirs):
        assert devplan_oplist(program) == executorch_oplist(program), program.name


def test_a_quantized_program_needs_the_quantized_library_and_says_so(tmp_path):
    ep, _, _ = export("embedding")
    program = tmp_path / "embedding_q8.pte"
    devplan.compile(ep, program, quantize="dynamic-int8")
    assert devplan_oplist(program) == executorch_oplist(program)
    result = invoke("inspect", str(program), "--json")
    (method,) = json.loads(result.stdout)["methods"]
    libraries = {row["library"]: row["operators"] for row in method["kernels"]}
    assert "quantized_decomposed::embedding_byte.out" in libraries["quantized"]
    text = invoke("inspect", str(program)).stdout
    assert "quantized" in text and "embedding_byte" in text


def test_an_xnnpack_program_names_its_backend(tmp_path):
    program = tmp_path / "xnnpack.pte"
    program.write_bytes(xnnpack_program())
    assert devplan_oplist(program) == executorch_oplist(program)
    (method,) = json.loads(invoke("inspect", str(program), "--json").stdout)["methods"]
    assert method["backends"] == ["XnnpackBackend"]


def test_oplist_on_the_command_line(tmp_path):
    program = tmp_path / "linear.pte"
    devplan.compile(torch.export.export(torch.nn.Linear(4, 2), (torch.randn(3, 4),)), program)
    out = tmp_path / "selected_operators.yaml"
    result = invoke("inspect", str(program), "--oplist", str(out))
    assert result.exit_code == 0, result.stdout
    assert out.read_text() == executorch_oplist(program)
    assert "aten::linear.out" in out.read_text()


@pytest.mark.sweep  # a transformers model quantized: the full suite runs it
def test_a_quantized_bert_says_it_needs_embedding_byte(tmp_path):
    """The issue's case: BERT's embedding tables in 8 bits are gathered by ExecuTorch's quantized
    kernels, which compile's summary names, and which a build list from --oplist holds."""
    from testbed.hf_models import bert

    module, args, kwargs = bert()
    torch.export.save(torch.export.export(module, args, kwargs, strict=False), tmp_path / "bert.pt2")
    program = tmp_path / "bert.pte"
    compiled = invoke("compile", str(tmp_path / "bert.pt2"), "-o", str(program), "--quantize", "dynamic-int8")
    assert compiled.exit_code == 0, compiled.output
    needs = " ".join(" ".join(compiled.stdout.split()).split(" needs ")[1:])
    assert "quantized kernels (quantized_ops_lib; in Python, import executorch.kernels.quantized)" in needs
    assert "quantized_decomposed::embedding_byte" in needs
    assert devplan_oplist(program) == executorch_oplist(program)
