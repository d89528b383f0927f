"""ExecuTorch's LLM runner on devplan's programs, two ways users export an LLM: a
Llama-3-style model of ExecuTorch's examples, exported by ExecuTorch's export_llama pipeline
with a KV cache and its sdpa and update_cache custom ops; and a transformers Llama through
transformers' ExecuTorch recipe (a static cache, input_ids and cache_position). devplan compiles
each export (also one with ExecuTorch's quantized embeddings) with the same constant methods as
ExecuTorch's own program of it; the 8da4w recipe with XNNPACK is README's examples, run as
printed by tests/test_readme_llm.py. `TextLLMRunner` loads both programs
and must generate the same 32 tokens greedily; devplan's program must plan no more bytes, the
KV cache included, and pass `check --max-ratio 1.05`."""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import re

import pytest

pytest.importorskip("executorch.extension.llm.runner")

import devplan  # noqa: E402
from devplan import inspect  # noqa: E402
from devplan.inspection.kernels import oplist_yaml  # noqa: E402
from devplan.pte.decode import methods  # noqa: E402
from testbed.llama_export import CUSTOM_OPS, export_hf_llama, export_llama, generate, word_tokenizer  # noqa: E402

PROMPT = "the quick brown fox"
# an end-of-sequence id these seeded models do not reach within 32 tokens, so that all 32 compare
SPECIAL = {"get_bos_id": 1, "get_eos_ids": [511]}
EXPORTS = {
    "executorch_export_llama": export_llama,
    "transformers_recipe": export_hf_llama,
    # ExecuTorch's quantized embedding (quantized_decomposed::embedding_byte), as export_llama -E 8,0 makes it
    "executorch_quantized_embedding": functools.partial(export_llama, embedding_quantize="8,0"),
    # ExecuTorch's LLM quantization recipe (8da4w, XNNPACK), by export_llama and by transformers' recipe, is
    # README's examples, run as printed against ExecuTorch's program of the same export by tests/test_readme_llm.py
}


@pytest.fixture(scope="module", params=list(EXPORTS))
def llama(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp("llama")  # never a name export_llama reads as pre-quantized
    exported = EXPORTS[request.param](folder, metadata=SPECIAL)
    importlib.import_module(CUSTOM_OPS)
    importlib.import_module("executorch.exir.passes._quant_patterns_and_replacements")  # quantized embeddings
    result = devplan.compile(
        exported.pt2,
        folder / "devplan.pte",
        constant_methods=exported.metadata,
    )
    return exported, result, word_tokenizer(folder), request.param


@pytest.mark.sweep
def test_runner_generates_executorchs_tokens(llama):
    exported, result, tokenizer, _ = llama
    want, _ = generate(exported.pte, tokenizer, PROMPT)
    got, _ = generate(result.path, tokenizer, PROMPT)
    assert len(want) == 32
    assert got == want


@pytest.mark.sweep
def test_plans_no_more_than_executorch_with_every_constant_method(llama):
    exported, result, _, _ = llama
    theirs, ours = inspect(exported.pte.read_bytes()), inspect(result.data)
    assert [m["name"] for m in ours["methods"]] == [m["name"] for m in theirs["methods"]]
    size = lambda doc: sum(b["size"] for b in doc["methods"][0]["buffers"])  # noqa: E731
    assert 0 < size(ours) <= size(theirs)
    # the KV caches are planned buffers of the method, as in ExecuTorch's program
    caches = [
        t
        for t in ours["methods"][0]["tensors"]
        if (t["source"] or "").startswith("buffer ") and re.search("k_cache|v_cache|key_cache|value_cache", t["source"])
    ]
    assert len(caches) == 4 and all(t["mem_id"] == 1 for t in caches)


@pytest.mark.sweep
def test_cli_compiles_the_same_program(llama, tmp_path):
    """`devplan compile --kernels llama --metadata` in a fresh process: the same bytes as the API's."""
    import json
    import subprocess
    import sys

    exported, result, _, _ = llama
    (tmp_path / "llm.json").write_text(json.dumps(exported.metadata))
    out = tmp_path / "cli.pte"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "devplan",
            "compile",
            str(exported.pt2),
            "-o",
            str(out),
            "--kernels",
            "llama",
            "--kernels",
            "quantized_decomposed",
            "--metadata",
            str(tmp_path / "llm.json"),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == result.data


@pytest.mark.sweep
def test_check_max_ratio_passes(llama):
    """The README's CI gate on each program: its KV caches are state, alive for the whole
    method in check's bound as in compile's plan, so devplan's optimal plan passes."""
    _, result, _, _ = llama
    checks = devplan.check(result.data, max_ratio=1.05)
    assert checks and all(c.ok for c in checks), [c for c in checks if not c.ok]


def test_export_llama_refuses_a_folder_it_would_read_as_pre_quantized(tmp_path):
    """export_llama takes a checkpoint whose path holds "8da4w" or "int8" as quantized already
    and swaps its linears before loading it: a Llama of width 256 exported from such a folder
    failed in torch.export (the benchmark's), one of width 64 passed unnoticed (this corpus's)."""
    with pytest.raises(ValueError, match="already quantized"):
        export_llama(tmp_path / "export_llama-8da4w", qmode="8da4w")


@pytest.mark.sweep  # three LLM exports; the fast tier lists kernels in tests/inspection/test_kernels.py
def test_the_program_names_the_llm_kernels_it_needs_and_lists_them_as_executorch_does(llama, tmp_path):
    """Issue 57: an LLM program says it needs ExecuTorch's LLM custom ops (and, with a quantized
    embedding, its quantized kernels), and --oplist writes what gen_oplist writes for it."""
    exported, result, _, name = llama
    (forward,) = [m for m in inspect(result.path)["methods"] if m["name"] == "forward"]
    libraries = {row["library"]: row["operators"] for row in forward["kernels"]}
    if name != "transformers_recipe":  # export_llama's model code calls the custom ops
        assert {"llama::custom_sdpa.out", "llama::update_cache.out"} <= set(libraries["llm"])
    if name == "executorch_quantized_embedding":
        assert any(op.startswith("quantized_decomposed::embedding_byte.") for op in libraries["quantized"])
    gen_oplist = pytest.importorskip("executorch.codegen.tools.gen_oplist").gen_oplist
    for program in (result.path, exported.pte):
        listed = tmp_path / f"{program.stem}.yaml"
        with contextlib.redirect_stdout(io.StringIO()):
            gen_oplist(output_path=str(listed), model_file_path=str(program))
        assert oplist_yaml(methods(devplan.read_pte(program)), str(program)) == listed.read_text()
