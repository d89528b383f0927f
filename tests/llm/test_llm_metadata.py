"""`--llm` (devplan/llm.py): the constant methods ExecuTorch's LLM runner reads, read from the
export, equal to what ExecuTorch's own export path writes (export_llama's
_load_llama_model_metadata; for transformers' recipe, what optimum-executorch writes from the
model's config), with only the tokenizer's ids given; a given value the export contradicts,
and an export that is no LLM for the runner, refused in one line."""

from __future__ import annotations

import importlib

import pytest
import torch

pytest.importorskip("executorch.extension.llm.runner")

import devplan  # noqa: E402
from devplan.errors import DevplanError  # noqa: E402
from devplan.llm import read_export  # noqa: E402
from testbed.llama_export import CUSTOM_OPS, export_hf_llama, export_llama  # noqa: E402
from tests.tiers import tiered  # noqa: E402

TOKENIZER = {"get_bos_id": 1, "get_eos_ids": [2]}


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """Each family's export through transformers' recipe, made once."""
    made: dict = {}

    def export(family: str):
        if family not in made:
            made[family] = export_hf_llama(tmp_path_factory.mktemp(family), family=family, layers=3, max_seq=48)
        return made[family]

    return export


def _returns(data: bytes) -> dict:
    return {m["name"]: m["returns"] for m in devplan.inspect(data)["methods"] if "returns" in m}


@pytest.mark.parametrize(
    "family", tiered(["llama", "qwen2", "gemma"], fast=set())
)  # the fast tier: export_llama's path
def test_llm_writes_what_the_transformers_recipe_path_writes(exports, family):
    exported = exports(family)
    result = devplan.compile(exported.pt2, llm=True, constant_methods=TOKENIZER)
    returns = _returns(result.data)
    assert {name: returns[name][0] for name in exported.metadata} == exported.metadata
    assert returns["get_eos_ids"] == [2] and returns["get_bos_id"] == [1]


@pytest.mark.sweep
def test_llm_writes_what_export_llama_writes(tmp_path):
    exported = export_llama(tmp_path, layers=3, max_seq=48)
    importlib.import_module(CUSTOM_OPS)
    assert read_export(torch.export.load(exported.pt2)) == exported.metadata
    result = devplan.compile(exported.pt2, llm=True, kernels=(CUSTOM_OPS,), constant_methods=TOKENIZER)
    returns = _returns(result.data)
    assert {name: returns[name][0] for name in exported.metadata} == exported.metadata


def test_a_given_value_the_export_contradicts_is_refused(exports):
    exported = exports("llama")
    with pytest.raises(DevplanError, match=r"get_n_layers=2 is given, but the export has get_n_layers=3"):
        devplan.compile(exported.pt2, llm=True, constant_methods={"get_n_layers": 2})
    agreed = devplan.compile(exported.pt2, llm=True, constant_methods={"get_n_layers": "3", "use_kv_cache": "true"})
    assert _returns(agreed.data)["get_n_layers"] == [3]


def test_an_export_that_is_no_llm_for_the_runner_is_refused():
    ep = torch.export.export(torch.nn.Linear(4, 4), (torch.randn(2, 4),))
    with pytest.raises(DevplanError, match="first input is not a \\(batch, tokens\\) tensor of token ids"):
        devplan.compile(ep, llm=True)
