"""--quantize on LLMs (issue 51): the recipes' decoders through transformers' ExecuTorch recipe
(a static KV cache, the prompt's length dynamic), quantized by devplan in the compile that
writes the runner's program: dynamic-int8 lowers, and 8da4w writes the program of ExecuTorch's
LLM recipe on the same weights (the runner's greedy tokens, the weights' bytes, no more planned
memory)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("executorch.extension.llm.runner")

import devplan  # noqa: E402
from devplan.errors import DevplanError  # noqa: E402
from testbed.cli import (
    devplan as devplan_cli,  # noqa: E402
    fresh_devplan,  # noqa: E402
)
from testbed.llama_export import (  # noqa: E402
    CUSTOM_OPS,
    export_hf_llama,
    export_hf_llama_8da4w,
    export_llama,
    generate,
    word_tokenizer,
)

# an end-of-sequence id these seeded models do not reach within 32 tokens, so that all 32 compare
SPECIAL = {"get_bos_id": 1, "get_eos_ids": [511]}
PROMPT = "the quick brown fox"


# Qwen2 is the reproducer; the same on README's Llama, to release
@pytest.mark.parametrize(
    "family",
    [
        pytest.param("qwen2", marks=pytest.mark.sweep),
        pytest.param("llama", marks=(pytest.mark.sweep, pytest.mark.release)),
    ],
)
def test_dynamic_int8_lowers_a_decoder_whose_projections_share_their_input(tmp_path, family):
    """q, k and v (and gate and up) read one normalized tensor: quantized once for all its
    readers, XNNPACK's partitioner put the shared quantize chain in one linear's partition that
    another linear's partition fed and read, and ExecuTorch's lowering refused the program
    ("Invalid partition, found dependency cycles"). Each reader quantizing for itself, as
    ExecuTorch's LLM export does (passes/export/quantize.py's _quantize_per_reader), lowers every
    linear to XNNPACK; before it both families failed so."""
    exported = export_hf_llama(tmp_path, family=family, metadata=SPECIAL)
    result = devplan.compile(
        exported.pt2, tmp_path / "dq.pte", llm=True, quantize="dynamic-int8", constant_methods=SPECIAL
    )
    (forward,) = [m for m in devplan.inspect(result.data)["methods"] if m["name"] == "forward"]
    assert forward["delegates"] and {d["id"] for d in forward["delegates"]} == {"XnnpackBackend"}
    report = result.quantization
    assert report is not None and report.measured_on == "executorch"
    assert report.error.sqnr_db is not None and report.error.sqnr_db > 25
    # the KV caches start empty, as ExecuTorch's program's: not what quantizing's samples wrote in them
    caches = [t for t in forward["tensors"] if t["role"] == "state" and "cache" in (t["source"] or "")]
    assert len(caches) == 4 and not any(t["constant"] for t in caches)


# README's Llama in the suite; the Qwen2 to release: every line of devplan it reaches, the Llama's
# cases reach, but a linear's bias, which the 8da4w command-line test below quantizes
@pytest.fixture(scope="module", params=["llama", pytest.param("qwen2", marks=pytest.mark.release)])
def quantized_8da4w(request, tmp_path_factory):
    """README's Llama (and a Qwen2) as a float export, `--quantize 8da4w` by devplan, beside
    ExecuTorch's program of the LLM recipe on the same weights (testbed's
    export_hf_llama_8da4w: optimum-executorch's --qlinear 8da4w --qembedding 8w)."""
    folder = tmp_path_factory.mktemp("recipe")
    exported = export_hf_llama_8da4w(folder, family=request.param, metadata=SPECIAL)
    result = devplan.compile(exported.pt2, folder / "devplan.pte", llm=True, quantize="8da4w", constant_methods=SPECIAL)
    return exported, result, folder


@pytest.mark.sweep  # ExecuTorch's lowering of the recipe alone takes about a minute
def test_8da4w_generates_the_tokens_of_executorchs_recipe_program(quantized_8da4w):
    exported, result, folder = quantized_8da4w
    tokenizer = word_tokenizer(folder)
    want, _ = generate(exported.pte, tokenizer, PROMPT)
    got, _ = generate(result.path, tokenizer, PROMPT)
    assert len(want) == 32 and got == want
    report = result.quantization
    assert report is not None and report.mode == "8da4w" and report.measured_on == "executorch"
    assert report.quantized_weight_bytes < report.float_weight_bytes / 3


@pytest.mark.sweep
def test_8da4w_holds_the_recipes_weights_and_plans_no_more(quantized_8da4w):
    """The same 4-bit weights and scales in XNNPACK's named data (keys are their bytes'
    hashes), the same 8-bit table gathered by embedding_byte, fewer planned bytes, and a file
    within 1.02x of ExecuTorch's as compile writes it by default: with the stack traces
    ExecuTorch's program does not carry (14 KB here), which each string and small vector of
    numbers written once (devplan/pte/sharing.py) pays for; 1.045x before."""
    exported, result, folder = quantized_8da4w
    theirs, ours = devplan.inspect(exported.pte.read_bytes()), devplan.inspect(result.data)
    named = lambda doc: sorted((d["key"], d["size"]) for d in doc["file"]["named_data"])  # noqa: E731
    assert named(ours) == named(theirs) and named(ours)
    gathers = lambda doc: [  # noqa: E731
        op for row in doc["methods"][0]["kernels"] for op in row["operators"] if "embedding_byte" in op
    ]
    assert gathers(ours) and gathers(theirs)
    delegates = lambda doc: len(doc["methods"][0]["delegates"])  # noqa: E731
    assert delegates(ours) == delegates(theirs)
    planned = lambda doc: sum(b["size"] for b in doc["methods"][0]["buffers"])  # noqa: E731
    assert 0 < planned(ours) <= planned(theirs)
    assert all(row["source"] for row in ours["methods"][0]["instructions"])  # the stack traces kept
    assert len(result.data) <= 1.02 * exported.pte.stat().st_size


@pytest.mark.sweep
def test_readmes_one_command_writes_the_same_program(quantized_8da4w, tmp_path):
    """README's LLM section: `devplan compile llama.pt2 --llm --quantize 8da4w --constant-method
    ...` in a fresh process writes the bytes the API wrote."""
    exported, result, _ = quantized_8da4w
    out = tmp_path / "cli.pte"
    done = fresh_devplan(
        "compile",
        exported.pt2,
        "-o",
        out,
        "--llm",
        "--quantize",
        "8da4w",
        "--constant-method",
        "get_bos_id=1",
        "--constant-method",
        "get_eos_ids=[511]",
    )
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == result.data


@pytest.mark.sweep  # export_llama twice (the float export, and ExecuTorch's 8da4w program): minutes
def test_8da4w_on_export_llamas_float_export_generates_export_llamas_8da4w_tokens(tmp_path_factory):
    """README's export_llama Llama: its float export compiled with --quantize 8da4w generates
    the tokens of `export_llama -X -qmode 8da4w -G 32 -E 8,0`'s program of the same checkpoint,
    with the same 4-bit weights and 8-bit table and fewer planned bytes. (export_llama hands
    XNNPACK only the quantized linears, which it groups into fewer delegates, 9 to devplan's 15
    here, so its file is the smaller, by their payloads' framing.)"""
    import importlib

    floating, quantized = tmp_path_factory.mktemp("float"), tmp_path_factory.mktemp("recipe")
    source = export_llama(floating, metadata=SPECIAL)
    recipe = export_llama(quantized, metadata=SPECIAL, xnnpack=True, qmode="8da4w", embedding_quantize="8,0")
    importlib.import_module(CUSTOM_OPS)
    result = devplan.compile(
        source.pt2,
        floating / "devplan.pte",
        kernels=["llama"],
        llm=True,
        quantize="8da4w",
        constant_methods=recipe.metadata,
    )
    tokenizer = word_tokenizer(floating)
    want, _ = generate(recipe.pte, tokenizer, PROMPT)
    got, _ = generate(result.path, tokenizer, PROMPT)
    assert len(want) == 32 and got == want
    theirs, ours = devplan.inspect(recipe.pte.read_bytes()), devplan.inspect(result.data)
    named = lambda doc: sorted((d["key"], d["size"]) for d in doc["file"]["named_data"])  # noqa: E731
    assert named(ours) == named(theirs) and named(ours)
    planned = lambda doc: sum(b["size"] for b in doc["methods"][0]["buffers"])  # noqa: E731
    assert 0 < planned(ours) <= planned(theirs)


def test_group_size_is_refused_without_8da4w_and_when_not_a_size():
    with pytest.raises(DevplanError, match="--group-size 32: only with --quantize 8da4w"):
        devplan.compile(
            torch.export.export(torch.nn.Linear(64, 8), (torch.randn(1, 64),)), quantize="dynamic-int8", group_size=32
        )
    with pytest.raises(DevplanError, match="--group-size 16: give a multiple of 32"):
        devplan.compile(
            torch.export.export(torch.nn.Linear(64, 8), (torch.randn(1, 64),)), quantize="8da4w", group_size=16
        )


@pytest.mark.sweep  # an 8da4w compile through the command line; the fast tier keeps README's 8da4w command
def test_8da4w_from_the_command_line_leaves_a_linear_the_group_does_not_divide_float(tmp_path):
    """`--quantize 8da4w --group-size 64` in a fresh process: the table and the linear of 64
    inputs quantized, the linear of 48 inputs left float (as the recipes leave it) and said so."""
    import json

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.nn.Embedding(100, 64)
            self.up = torch.nn.Linear(64, 48)
            self.down = torch.nn.Linear(48, 8)

        def forward(self, ids):
            return self.down(self.up(self.table(ids)))

    torch.manual_seed(0)
    torch.export.save(torch.export.export(Model().eval(), (torch.tensor([[1, 2, 3]]),)), tmp_path / "m.pt2")
    done = devplan_cli(
        "compile", tmp_path / "m.pt2", "-o", tmp_path / "m.pte", "--quantize", "8da4w", "--group-size", "64", "--json"
    )
    assert done.returncode == 0, done.stderr
    quantization = json.loads(done.stdout)["quantization"]
    assert quantization["mode"] == "8da4w" and quantization["float_ops"] == {"aten::linear": 1}
    assert quantization["error"]["sqnr_db"] > 20
