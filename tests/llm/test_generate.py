"""`devplan generate` (issue 55.5): README's Llama, compiled as README prints it, generates through
ExecuTorch's TextLLMRunner the tokens that runner generates itself, printed once, then the
prompt's and the generation's tokens per second; a tokenizer file ExecuTorch's loaders refuse
(a WordLevel model split by WhitespaceSplit), or a program without the runner's constant
methods, is one line saying what works, exit 2."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("executorch.extension.llm.runner")

import devplan  # noqa: E402
from devplan.cli.generate import _Inert  # noqa: E402
from testbed.llama_export import generate, word_tokenizer  # noqa: E402
from tests.inspection.runner import REPO  # noqa: E402
from tests.inspection.test_llm_view import readme_export_and_compile  # noqa: E402

PROMPT = "the quick brown fox"
RATES = re.compile(r"prompt: (\d+) tokens?, [\d,]+\.\d tokens/s; generation: (\d+) tokens?, [\d,]+\.\d tokens/s\n")


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    """README's Llama (steps 1 and 2 of its transformers block, as printed) beside a tokenizer.json."""
    folder = tmp_path_factory.mktemp("readme_llama")
    here = os.getcwd()
    os.chdir(folder)
    try:
        exec(compile(readme_export_and_compile(), "README.md", "exec"), {})
    finally:
        os.chdir(here)
    word_tokenizer(folder)
    return folder


def _generate(*args: str, cwd: Path, before: str = "") -> subprocess.CompletedProcess:
    """`devplan generate ARGS` as a user runs it (after the code `before`): ExecuTorch's runner
    writes to the process's own standard output, which only a fresh process shows."""
    code = f"import sys; {before}from devplan.cli import main; sys.argv[0] = 'devplan'; main()"
    return subprocess.run(
        [sys.executable, "-c", code, "generate", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_generate_prints_the_runners_text_once_then_tokens_per_second(llama):
    want, _ = generate(llama / "llama.pte", llama / "tokenizer.json", PROMPT, new_tokens=16)
    done = _generate(
        "llama.pte", "--tokenizer", "tokenizer.json", "--prompt", PROMPT, "--max-new-tokens", "16", cwd=llama
    )
    assert done.returncode == 0, done.stderr
    # the prompt, then the text as the runner streams it, and nothing else: its own printing is off
    assert done.stdout == PROMPT + "".join(want) + "\n"
    rates = RATES.fullmatch(done.stderr)
    assert rates is not None, done.stderr
    assert int(rates[1]) > 0 and int(rates[2]) == len(want) == 16


def test_the_python_function_returns_the_text_and_its_speed(llama):
    want, stats = generate(llama / "llama.pte", llama / "tokenizer.json", PROMPT, new_tokens=16)
    pieces: list[str] = []
    done = devplan.generate(
        llama / "llama.pte", llama / "tokenizer.json", PROMPT, max_new_tokens=16, on_token=pieces.append
    )
    assert pieces == want and done.text == "".join(want)
    assert (done.prompt_tokens, done.new_tokens) == (stats["prompt_tokens"], 16)
    assert done.prompt_tokens_per_second > 0 and done.generated_tokens_per_second > 0


def test_a_tokenizer_executorch_cannot_load_is_one_line_saying_what_works(llama):
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = Tokenizer(models.WordLevel({"<unk>": 0, "the": 1, "fox": 2}, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    words.save(str(llama / "words.json"))
    done = _generate("llama.pte", "--tokenizer", "words.json", "--prompt", PROMPT, cwd=llama)
    assert done.returncode == 2 and done.stdout == "", done
    (line,) = done.stderr.splitlines()
    assert line.startswith("devplan: error: words.json: ExecuTorch's LLM runner cannot load this tokenizer"), line
    assert "WhitespaceSplit" in line and "BPE model with a ByteLevel pre-tokenizer" in line and "tiktoken" in line


def test_a_program_without_the_runners_constant_methods_is_refused(tmp_path):
    devplan.compile(REPO / "samples" / "mlp.pt2", tmp_path / "mlp.pte")
    word_tokenizer(tmp_path)
    done = _generate("mlp.pte", "--tokenizer", "tokenizer.json", "--prompt", PROMPT, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == "", done
    (line,) = done.stderr.splitlines()
    assert "mlp.pte: no get_max_seq_len method" in line and "--llm" in line, line


def test_without_the_executorch_extra_it_says_how_to_install_it(llama):
    hidden = "sys.modules['executorch'] = None; "  # as where the extra is not installed
    done = _generate("llama.pte", "--tokenizer", "tokenizer.json", "--prompt", PROMPT, cwd=llama, before=hidden)
    assert done.returncode == 2 and done.stdout == "", done
    (line,) = done.stderr.splitlines()
    assert line.startswith("devplan: error: generate: cannot import executorch") and line.endswith(
        'pip install "devplan[executorch]"'
    ), line


@pytest.mark.parametrize(
    ("pieces", "shown"),
    [
        (["ok", "\n", ":", ":error::x"], "ok\n\\u003a:error::x\n"),  # a workflow command split across pieces
        (["a ", "::b"], "a ::b\n"),  # mid-line: no command
        (["#", "#[group]"], "#\\u0023[group]\n"),
        (["\x1b[2J", "x"], "\\x1b[2Jx\n"),  # a terminal escape written as one
        ([" :", ":"], " \\u003a:\n"),  # held to the end, then printed inert
    ],
)
def test_the_models_text_is_printed_inert_across_pieces(capsys, pieces, shown):
    stream = _Inert("")
    for piece in pieces:
        stream(piece)
    stream.close()
    assert capsys.readouterr().out == shown
