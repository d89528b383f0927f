"""`devplan generate`: an LLM program's text from the command line, through ExecuTorch's
TextLLMRunner (devplan.runtime.generate), streamed as it comes, then its speed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from devplan.cli.app import Command, DataFile, app, echo
from devplan.units import inert

# what may still become a workflow command with the next piece: the `#` or `##` of a `##[`
_OPEN = re.compile(r"#{1,2}\Z")


@app.command("generate", cls=Command)
def generate_command(
    program: Annotated[
        Path,
        typer.Argument(metavar="PROGRAM.pte", help="An LLM program (compiled with --llm).", show_default=False),
    ],
    tokenizer: Annotated[
        Path,
        typer.Option(
            "--tokenizer",
            metavar="FILE",
            help="The model's tokenizer, as ExecuTorch's runner loads it: a Hugging Face tokenizer.json "
            "(BPE, ByteLevel), a tiktoken file, a SentencePiece tokenizer.model or a llama2.c tokenizer.bin.",
            show_default=False,
        ),
    ],
    prompt: Annotated[str, typer.Option("--prompt", metavar="TEXT", help="The text to continue.", show_default=False)],
    max_new_tokens: Annotated[
        int,
        typer.Option(
            "--max-new-tokens",
            metavar="N",
            min=1,
            max=1 << 20,
            help="Generate at most N tokens (fewer where the context ends or the end-of-sequence token comes).",
        ),
    ] = 128,
    temperature: Annotated[
        float,
        typer.Option(
            "--temperature",
            metavar="T",
            min=0,
            max=100,
            help="Sampling temperature: 0 takes the likeliest token each step (the same text every run).",
        ),
    ] = 0.0,
    data: DataFile = None,
) -> None:
    """Generate text from an LLM program with ExecuTorch's TextLLMRunner.

    Needs devplan's executorch extra, as run --executorch does. Prints the prompt and the text as the
    runner makes it, then on standard error the prompt's and the generation's tokens per second."""
    from devplan.runtime.generate import generate

    stream = _Inert(prompt)
    done = generate(
        program, tokenizer, prompt, max_new_tokens=max_new_tokens, temperature=temperature, data=data, on_token=stream
    )
    stream.close()
    echo(
        f"prompt: {_count(done.prompt_tokens)}, {_rate(done.prompt_tokens_per_second)}; "
        f"generation: {_count(done.new_tokens)}, {_rate(done.generated_tokens_per_second)}",
        err=True,
    )


def _count(tokens: int) -> str:
    return f"{tokens:,} token{'' if tokens == 1 else 's'}"


def _rate(per_second: float | None) -> str:
    return "- tokens/s" if per_second is None else f"{per_second:,.1f} tokens/s"


def _shown(text: str) -> str:
    """`text` with its control characters escaped but its lines and tabs kept."""
    return "".join(c if c.isprintable() or c in "\n\t" else repr(c)[1:-1] for c in text)


class _Inert:
    """The model's text printed piece by piece as `units.inert` would print it whole: no
    terminal escapes, and no line a GitHub runner reads as a command, though a `::` or a `##[`
    may come split across pieces (what could still become one waits for the next piece). The
    prompt goes out with the first piece: a refusal prints nothing before its line."""

    def __init__(self, prompt: str) -> None:
        self.held = _shown(prompt)
        self.blank = True  # whether the line printed so far holds only whitespace

    def __call__(self, piece: str) -> None:
        text = self.held + _shown(piece)
        body = text.rstrip(":")
        hold = len(text) - len(body) if self._blank_after(body) else 0
        found = _OPEN.search(text)
        hold = hold or (len(found[0]) if found else 0)
        self._write(text[: len(text) - hold])
        self.held = text[len(text) - hold :]

    def close(self) -> None:
        self._write(self.held)
        self.held = ""
        echo("")

    def _blank_after(self, text: str) -> bool:
        _, newline, line = text.rpartition("\n")
        return (bool(newline) or self.blank) and not line.strip()

    def _write(self, text: str) -> None:
        if not text:
            return
        # inert reads a line start at the text's own start: only where the printed line is blank so far
        typer.echo(inert(text) if self.blank else inert("x" + text)[1:], nl=False)
        self.blank = self._blank_after(text)
