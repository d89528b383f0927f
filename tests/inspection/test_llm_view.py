"""`inspect` of an LLM program says the important thing first (issue 55.1): README's Llama and a
Qwen2 compiled with --llm print at most 60 lines by default, their constant methods on one line,
every fact still reachable (--method, --section, --json); no torch-internal name stands for a
source; the KV caches are named as the state they are; and --module and --min-size trim every
list of tensors, in the view and in --json alike."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import devplan
from devplan.cli import app
from testbed.llama_export import export_hf_decoder
from tests.inspection.runner import run_devplan

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = {"get_bos_id": 1, "get_eos_ids": [2]}
# what torch's export names a node's module with when it knows none (torch._export.passes._node_metadata_hook)
TORCH_INTERNAL = re.compile(r"_\w+_hook\b")


def readme_export_and_compile() -> str:
    """Steps 1 and 2 of README's transformers block, as printed (step 3 needs ExecuTorch's runner)."""
    text = (ROOT / "README.md").read_text()
    found = re.search(r"<!-- llm-example -->\n```python\n(.*?)\n# 3\. ", text, re.DOTALL)
    assert found, "README.md lost its LLM example's steps"
    return found.group(1)


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict[str, Path]:
    llama = tmp_path_factory.mktemp("readme_llama")
    here = os.getcwd()
    os.chdir(llama)  # the block writes llama.pt2 and llama.pte where it runs
    try:
        exec(compile(readme_export_and_compile(), "README.md", "exec"), {})
    finally:
        os.chdir(here)
    qwen2 = tmp_path_factory.mktemp("qwen2")
    export_hf_decoder(qwen2, family="qwen2")
    devplan.compile(qwen2 / "model.pt2", qwen2 / "qwen2.pte", llm=True, constant_methods=TOKENIZER)
    return {"llama": llama / "llama.pte", "qwen2": qwen2 / "qwen2.pte"}


def inspect(*args) -> str:
    result = CliRunner().invoke(app, ["inspect", *map(str, args)], env={"COLUMNS": "80", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_the_default_view_fits_60_lines_with_the_constant_methods_on_one_line(programs, name):
    shown = inspect(programs[name])
    assert len(shown.splitlines()) <= 60, f"{len(shown.splitlines())} lines:\n{shown}"
    assert "no planned buffers" not in shown and "method get_max_seq_len" not in shown
    listed = " ".join(shown.split("constant methods", 1)[1].split("\n\n")[0].split())
    returns = {m["name"]: m["returns"] for m in devplan.inspect(programs[name])["methods"] if "returns" in m}
    assert len(returns) == 9
    for method, values in returns.items():
        assert f"{method}={','.join(json.dumps(v) for v in values)}" in listed, (method, listed)


def test_a_constant_methods_facts_stay_reachable(programs):
    one = inspect(programs["qwen2"], "--method", "get_max_seq_len")
    assert "returns 64" in one and "method get_max_seq_len" in one and "buffers: none" in one
    doc = json.loads(inspect(programs["qwen2"], "--json"))
    assert {m["name"]: m["returns"] for m in doc["methods"] if "returns" in m}["get_max_seq_len"] == [64]


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_no_torch_internal_name_is_a_source(programs, name):
    everything = inspect(programs[name], "-s", "all")
    assert not TORCH_INTERNAL.search(everything), TORCH_INTERNAL.search(everything)
    assert not TORCH_INTERNAL.search(inspect(programs[name], "--json"))


def legend(shown: str) -> str:
    return shown.split("each glyph:", 1)[1]


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_the_kv_caches_are_named_as_the_state_they_are(programs, name):
    shown = legend(inspect(programs[name], "-s", "layout"))
    assert "(no module)" not in shown
    state = next(line for line in shown.splitlines() if "(state)" in line)
    assert "(state) key_cache_*" in state, state  # the largest state by the name the export gives it
    assert "(inputs)" in shown


def _filtered(path: Path, *options: str) -> dict:
    return json.loads(inspect(path, "--json", *options))["methods"][0]


def test_module_and_min_size_filter_the_tensors_in_the_view_and_the_json(programs):
    path = programs["qwen2"]
    whole = _filtered(path)
    prefix = "model.model.layers.1"
    mine = _filtered(path, "--module", prefix)
    assert 0 < len(mine["tensors"]) < len(whole["tensors"])
    for t in mine["tensors"]:
        assert any(name == prefix or (name or "").startswith(prefix + ".") for name in (t["module"], t["name"])), t
    # a tensor the export names (a KV cache: state, no module writes it) by its name
    cache = _filtered(path, "--module", "key_cache_1")["tensors"]
    assert [(t["name"], t["role"]) for t in cache] == [("key_cache_1", "state")]
    large = _filtered(path, "--min-size", "4KiB")
    assert large["tensors"] and all(t["nbytes"] >= 4096 for t in large["tensors"])
    assert all(t["nbytes"] >= 4096 for entry in large["peak"] for t in entry["tensors"])
    assert len(large["peak"][0]["tensors"]) < len(whole["peak"][0]["tensors"])
    # the text view lists the same tensors as --json
    listed = inspect(path, "-s", "tensors", "--min-size", "4KiB")
    assert {int(v) for v in re.findall(r"^\s*v(\d+) ", listed, re.MULTILINE)} == {t["value"] for t in large["tensors"]}
    held = inspect(path, "-s", "peak", "--module", prefix, "--min-size", "1KiB")
    rows = {int(v) for v in re.findall(r"^\s*v(\d+) ", held, re.MULTILINE)}
    both = _filtered(path, "--module", prefix, "--min-size", "1KiB")
    assert rows == {t["value"] for t in both["peak"][0]["tensors"][:10]}


def test_a_bad_min_size_is_one_line(programs):
    run = run_devplan("inspect", str(programs["qwen2"]), "--min-size", "lots")
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "bad --min-size 'lots'" in run.stderr, run.stderr
