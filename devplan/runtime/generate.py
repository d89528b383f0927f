"""`devplan generate`: text from an LLM program (compiled with --llm) through ExecuTorch's own
`TextLLMRunner` (the `devplan[executorch]` extra), its tokens handed over as they come and its
speed measured. ExecuTorch's failures, logged in C++ and raised as one vague line, are said in
one line of what to do: a tokenizer file its loader refuses above all."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from devplan.errors import DevplanError, first_line
from devplan.files import open_input
from devplan.pte.program_view import program_view
from devplan.pte.reader import read_pte
from devplan.runtime.executorch import load_runtime

RUNNER = "executorch.extension.llm.runner"
# the constant method the runner cannot start without (llm_runner_helper.cpp's required metadata)
REQUIRED = "get_max_seq_len"
# what ExecuTorch 1.5.1's runner loads, tried in this order; of a Hugging Face tokenizer.json only
# a BPE model split by ByteLevel (GPT-2's, Llama 3's and Qwen2's) encodes a prompt
TOKENIZERS = (
    "a Hugging Face tokenizer.json of a BPE model with a ByteLevel pre-tokenizer (GPT-2's, Llama 3's, "
    "Qwen2's), a tiktoken file, a SentencePiece tokenizer.model or a llama2.c tokenizer.bin"
)
# a line of ExecuTorch's C++ log: "E tokenizers:hf_tokenizer.cpp:482] Failed to ..." or "[text_llm_runner.cpp:138] ..."
_LOGGED = re.compile(r"^(?:[EWI] )?(?:\w+:)?\[?(?P<file>[\w.]+\.(?:cpp|h)):\d+\]\s*(?P<text>.+)$", re.MULTILINE)


@dataclass(frozen=True)
class Generated:
    """What the runner generated after the prompt and how fast: the prompt's tokens over the
    time to the first new token (the prefill), the new tokens after the first over the time from
    it to the last (the decode), as ExecuTorch's runner reports its own rates."""

    text: str
    prompt_tokens: int
    new_tokens: int
    prefill_seconds: float
    decode_seconds: float

    @property
    def prompt_tokens_per_second(self) -> float | None:
        return self.prompt_tokens / self.prefill_seconds if self.prefill_seconds > 0 else None

    @property
    def generated_tokens_per_second(self) -> float | None:
        return (self.new_tokens - 1) / self.decode_seconds if self.new_tokens > 1 and self.decode_seconds > 0 else None


def generate(
    program: str | os.PathLike[str],
    tokenizer: str | os.PathLike[str],
    prompt: str,
    *,
    max_new_tokens: int = 128,
    temperature: float = 0.0,
    data: str | os.PathLike[str] | None = None,
    on_token: Callable[[str], None] | None = None,
) -> Generated:
    """Text that ExecuTorch's TextLLMRunner generates after `prompt` from `program` (an LLM
    program: compile --llm), at most `max_new_tokens` (fewer where the context ends or the
    program's end-of-sequence id comes), greedily at temperature 0. `on_token` gets each new
    piece of text as the runner makes it; `data` is the program's .ptd."""
    pte = read_pte(program, data=data)
    name = pte.name
    if pte.path is None or (pte.external is not None and pte.external.path is None):
        raise DevplanError(f"{name}: ExecuTorch's runner loads a program and its .ptd by their paths; pass files")
    if REQUIRED not in program_view(pte).method_names:
        raise DevplanError(
            f"{name}: no {REQUIRED} method, which ExecuTorch's LLM runner reads first; compile the model with "
            f"--llm (devplan compile MODEL.pt2 --llm) to write the runner's constant methods"
        )
    open_input(tokenizer, hint="pass the tokenizer file").close()
    if not prompt:
        raise DevplanError("--prompt is empty: the runner generates after at least one token of prompt")
    load_runtime("generate")  # the quantized and LLM kernels an LLM program calls
    pieces: list[str] = []
    times: list[float] = []
    counts: list[int] = []

    def piece(text: str) -> None:
        times.append(time.perf_counter())
        pieces.append(text)
        if on_token is not None:
            on_token(text)

    with native_logs_kept() as logged:
        runner_module = _import_runner()
        try:
            runner = runner_module.TextLLMRunner(
                pte.path, str(tokenizer), None if pte.external is None else pte.external.path
            )
        except RuntimeError as error:
            raise DevplanError(_refusal(name, Path(tokenizer), first_line(error), logged())) from None
        # warming: the runner then prints neither the text (each piece to the process's stdout, which
        # `on_token` already gets) nor its report; it calls both callbacks all the same
        config = runner_module.GenerationConfig(
            echo=False, max_new_tokens=max_new_tokens, temperature=temperature, warming=True
        )
        start = time.perf_counter()
        try:
            runner.generate(
                prompt, config, token_callback=piece, stats_callback=lambda s: counts.append(s.num_prompt_tokens)
            )
        except RuntimeError as error:
            raise DevplanError(_refusal(name, Path(tokenizer), first_line(error), logged())) from None
    first, last = (times[0], times[-1]) if times else (start, start)
    return Generated("".join(pieces), counts[-1] if counts else 0, len(pieces), first - start, last - first)


def _import_runner() -> Any:
    from devplan.extras import import_module

    return import_module(RUNNER, "generate")


def _refusal(name: str, tokenizer: Path, raised: str, logged: str) -> str:
    """ExecuTorch's failure as one line saying what to do: a tokenizer its loaders all refused
    (with its Hugging Face loader's reason where the file is JSON) or that makes no tokens of
    the prompt, else the reason the runner logged last."""
    lines = [(found["file"], found["text"].strip()) for found in _LOGGED.finditer(logged)]
    if raised.startswith("Failed to load tokenizer"):
        reason = next((text for file, text in lines if file == "hf_tokenizer.cpp" and _is_json(tokenizer)), None)
        said = f" (its Hugging Face loader: {reason})" if reason else ""
        return f"{tokenizer}: ExecuTorch's LLM runner cannot load this tokenizer{said}; it loads {TOKENIZERS}"
    # the runner logs its reason before it raises a line that names none ("Generation failed")
    reason = next((text for _, text in reversed(lines) if not text.startswith(("Doing a warmup", "Warmup"))), None)
    if reason is not None and "prompt token" in reason:  # loaded, but without the pre-tokenizer it needs to encode
        return f"{tokenizer}: ExecuTorch's LLM runner makes no tokens of the prompt with it ({reason}); it encodes with {TOKENIZERS}"
    because = f": {reason}" if reason else " (--debug prints its log)"
    return f"{name}: ExecuTorch's LLM runner failed ({raised}){because}"


def _is_json(path: Path) -> bool:
    try:
        with open_input(path, hint="pass the tokenizer file") as stream:
            json.loads(stream.read(1 << 30))
    except (ValueError, DevplanError):
        return False
    return True


@contextlib.contextmanager
def native_logs_kept() -> Iterator[Callable[[], str]]:
    """ExecuTorch's C++ logs (the runner's metadata, cpuinfo's probing, the tokenizer loaders'
    errors) kept off standard error and in a file, which the callable yielded reads back: the
    reason behind the runner's vague exceptions. With --debug (the devplan logger at DEBUG) they
    pass through."""
    if logging.getLogger("devplan").isEnabledFor(logging.DEBUG):
        yield lambda: ""
        return
    sys.stderr.flush()
    with tempfile.TemporaryFile() as kept:
        saved = os.dup(2)
        os.dup2(kept.fileno(), 2)

        def read() -> str:
            kept.seek(0)
            return kept.read(1 << 20).decode(errors="replace")

        try:
            yield read
        finally:
            os.dup2(saved, 2)
            os.close(saved)
