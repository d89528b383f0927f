"""The `devplan` app: its commands' help as it should read, devplan's own options (--version,
--debug), and what several commands share: option types, reading a program argument, the
JSON writer and the console. Each command imports what it runs inside itself, so that
`devplan inspect` never imports torch."""

from __future__ import annotations

import enum
import json
import os
import re
import shutil
from inspect import cleandoc
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any, Mapping, Optional, cast

import typer
from typer.core import TyperCommand, TyperGroup

from devplan.errors import EXIT_OK
from devplan.units import inert, printable

if TYPE_CHECKING:
    from rich.console import Console

    from devplan.pte import PteFile


# The overrides below take click's types as Any: typer's own copy of click since 0.2x, click
# itself before (cli/exits.py reads either)
class Command(TyperCommand):
    """A command's help as rich should wrap it: each paragraph of the docstring one line (typer
    keeps a docstring's line breaks, which a narrow terminal then breaks again), and flags
    without typer's <bool> placeholder."""

    def __init__(self, *args: Any, help: str | None = None, **kwargs: Any) -> None:
        paragraphs = cleandoc(help or "").split("\n\n")
        super().__init__(*args, help="\n\n".join(" ".join(p.split()) for p in paragraphs), **kwargs)

    def get_params(self, ctx: Any) -> list[Any]:
        return _bare_flags(super().get_params(ctx))

    def format_help(self, ctx: Any, formatter: Any) -> None:
        if _narrow():
            return super(TyperCommand, self).format_help(ctx, formatter)  # click's, past typer's rich one
        return super().format_help(ctx, formatter)

    def format_options(self, ctx: Any, formatter: Any) -> None:
        """click's plain help (the narrow one) in the panels rich draws on a wide terminal: the
        arguments, the options of no panel, then each panel's, in the order they first appear."""
        sections: dict[str, list[tuple[str, str]]] = {"Arguments": [], "Options": []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                panel = "Arguments" if param.param_type_name == "argument" else getattr(param, "rich_help_panel", None)
                sections.setdefault(panel or "Options", []).append(record)
        for title, records in sections.items():
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)


class Group(TyperGroup):
    """devplan's own options (--version, --debug), with flags as Command shows them, and the
    commands in the order a user meets them (compile makes what the others read), whatever
    order their modules were imported in."""

    ORDER = ("compile", "inspect", "check", "diff", "run", "generate")

    def list_commands(self, ctx: Any) -> list[str]:
        return sorted(super().list_commands(ctx), key=lambda name: (self.ORDER + (name,)).index(name))

    def get_params(self, ctx: Any) -> list[Any]:
        return _bare_flags(super().get_params(ctx))

    def format_help(self, ctx: Any, formatter: Any) -> None:
        if _narrow():
            return super(TyperGroup, self).format_help(ctx, formatter)
        return super().format_help(ctx, formatter)


def _narrow() -> bool:
    """Whether help goes to fewer than 100 columns (a CI log or a pipe, whose width is the
    80-column fallback, or a narrow terminal): rich's panels cut option names and their help
    there ('--partitio…'); click's own help wraps every line and cuts nothing."""
    return shutil.get_terminal_size().columns < 100


def _bare_flags(params: list[Any]) -> list[Any]:
    """Flags take no value, so they show none (an empty metavar instead of typer's <bool>)."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


app = typer.Typer(
    cls=Group,
    help="Compile, plan and inspect ExecuTorch .pte programs across devices.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion and --show-completion for bash, zsh, fish and PowerShell
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        from devplan import __version__

        echo(f"devplan {__version__}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print devplan's version and exit."),
    ] = False,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            help="On an internal error, print the full traceback (any command takes it); "
            "compile also checks each stage's result.",
        ),
    ] = False,
) -> None:
    """Compile, plan and inspect ExecuTorch .pte programs across devices."""


DataFile = Annotated[
    Optional[Path],
    typer.Option(
        "--data",
        metavar="FILE.ptd",
        help="The .ptd data file holding the weights the program keeps outside "
        "it (compile --external-constants, ExecuTorch's external_constants), checked against the program.",
        show_default=False,
    ),
]


def console(stderr: bool = False) -> Console:
    """A rich Console for devplan's views. Under NO_COLOR (no-color.org) it writes no styles at
    all: rich itself drops only colours there, keeping bold and dim. Rich pads a table's cells
    to the console's width; those spaces go before they reach a CI log or a diff of output."""
    import sys

    from rich.console import Console

    made = Console(
        highlight=False,
        file=cast("IO[str]", _Trimmed(sys.stderr if stderr else sys.stdout)),
        color_system=None if os.environ.get("NO_COLOR") else "auto",
    )
    made.width = max(made.width, MIN_WIDTH)  # at COLUMNS=0 rich printed nothing at all
    return made


_VERDICT = re.compile(r"^\s*(FAIL)\b")


def print_verdicts(lines: list[str], console: "Console") -> None:
    """check's lines on `console`, each FAIL in bold red where the console shows colour (a
    terminal, without NO_COLOR: see app.console); the text itself is the same everywhere."""
    from rich.text import Text

    for line in lines:
        shown = Text(line)
        if found := _VERDICT.match(line):
            shown.stylize("bold red", *found.span(1))
        console.print(shown, soft_wrap=True)


MIN_WIDTH = 40  # columns: a narrower terminal (or COLUMNS) gets lines this wide, wrapped by the terminal


class _Trimmed:
    """A text stream that writes each line without its trailing spaces (kept before a style's
    closing escape sequence, they are dropped from there too), and inert (units.inert): a name
    in a view cannot command a GitHub runner."""

    _TRAILING = re.compile(r" +((?:\x1b\[[0-9;]*m)*)$")

    def __init__(self, stream: IO[str]) -> None:
        self._stream, self._pending = stream, ""

    def write(self, text: str) -> int:
        *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            self._stream.write(inert(self._TRAILING.sub(r"\1", line)) + "\n")
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._stream.write(inert(self._pending))
            self._pending = ""
        self._stream.flush()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding: the stream's, as rich asks them
        return getattr(self._stream, name)


def program_source(path: Path, data: Path | None = None) -> Path | PteFile:
    """A program argument: its path, or for - or with a .ptd `data` file, the program read
    (standard input once: check reads its program twice, and standard input can be read only once)."""
    import sys

    from devplan.files import STDIO
    from devplan.pte import read_pte
    from devplan.pte.piped import read_piped

    if str(path) != STDIO:
        return path if data is None else read_pte(path, data=data)
    return read_pte(read_piped(sys.stdin.buffer, "<stdin>", "pipe in a .pte program"), name="<stdin>", data=data)


def read_noting_external(path: Path, data: Path | None) -> PteFile:
    """The program read, and on stderr one line when its weights are outside it and no .ptd
    was given: check and diff never need them."""
    from devplan.pte import read_pte

    return noting_external(read_pte(program_source(path, data)))


def noting_external(pte: PteFile) -> PteFile:
    """`pte`, once one line on stderr has said when its weights are outside it and no .ptd was given."""
    from devplan.inspection.document import external_note

    note = external_note(pte)
    if note is not None:
        echo(f"note: {printable(note)}", err=True)
    return pte


def echo(text: str, err: bool = False, nl: bool = True) -> None:
    """What a command prints outside its views (JSON, reports, notes), inert as the console's
    lines are: only check's and diff's --format github annotations are printed otherwise."""
    typer.echo(inert(text), nl=nl, err=err)


def echo_json(document: Mapping[str, Any], err: bool = False) -> None:
    """Every command's JSON: `document` as json.dumps(document, sort_keys=True, indent=2) prints
    it (on stderr with `err`), written a batch of pieces at a time: json.dumps holds every piece
    in a list before joining them (for a million instructions, 44 million strings and 2.5 GB)."""
    pieces: list[str] = []
    for piece in json.JSONEncoder(sort_keys=True, indent=2).iterencode(document):
        pieces.append(piece)
        if len(pieces) == 1 << 16:
            echo("".join(pieces), nl=False, err=err)
            pieces.clear()
    echo("".join(pieces), err=err)


class ReportFormat(str, enum.Enum):
    """How check, diff and run print their report (inspection/reports.py, reports_ci.py)."""

    text = "text"
    markdown = "markdown"
    github = "github"


Format = Annotated[
    ReportFormat,
    typer.Option(
        "--format",
        help="text (for people), markdown (a table for $GITHUB_STEP_SUMMARY or a pull request "
        "comment) or github (::error annotations naming the file and the change).",
        case_sensitive=False,
    ),
]
JUnit = Annotated[
    Optional[Path],
    typer.Option(
        "--junit",
        metavar="FILE.xml",
        help="Also write a JUnit XML report: a test case per check (a buffer, a golden file's "
        "difference, a run's output against its reference), failing where it fails.",
        show_default=False,
    ),
]


def report_outputs(
    json_output: bool, report_format: ReportFormat, junit: Path | None, inputs: list[Path | None]
) -> None:
    """The report options of check, diff and run: refuse --json with another --format, and a
    --junit file that is an input or standard output (where the report goes)."""
    from devplan.errors import DevplanError
    from devplan.files import STDIO, refuse_overwrite, refuse_shared_output

    if json_output and report_format is not ReportFormat.text:
        raise DevplanError(f"--json and --format {report_format.value}: pick one")
    refuse_shared_output({"the report": STDIO, "--junit": junit})
    refuse_overwrite(junit, inputs, "--junit")


BUDGET_HELP = (
    "Fail unless a buffer fits, e.g. 1=512KiB or cuda:0=2MiB; "
    "BUFFER is a mem_id (that buffer) or a device (all of its buffers together, those its "
    "delegates plan there included); cpu+backends=SIZE adds the working memory ExecuTorch's "
    "backends allocate themselves (XNNPACK's intermediates, an upper bound). Repeatable."
)
Budgets = Annotated[
    Optional[list[str]], typer.Option("--budget", metavar="BUFFER=SIZE", help=BUDGET_HELP, show_default=False)
]
