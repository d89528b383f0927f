"""The `devplan` command: parse options, call a stage, render. Nothing else lives here.
Each command imports what it runs inside itself, so that `devplan inspect` never imports torch."""
from __future__ import annotations

import enum
import functools
import json
import os
import shutil
import sys
from inspect import cleandoc
from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperCommand, TyperGroup

try:  # newer typer releases carry their own copy of click
    from typer._click import exceptions as click_errors
except ImportError:
    from click import exceptions as click_errors  # type: ignore[no-redef]

from devplan.errors import (EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, BudgetExceeded,
                            DevplanError, first_line)
from devplan.inspection import sections as inspect_sections
from devplan.jsontext import repeated
from devplan.metadata import runner_value
from devplan.planning.model import DEFAULT_ALIGNMENT

class _Command(TyperCommand):
    """A command's help as rich should wrap it: each paragraph of the docstring one line (typer
    keeps a docstring's line breaks, which a narrow terminal then breaks again), and flags
    without typer's <bool> placeholder."""

    def __init__(self, *args, help: str | None = None, **kwargs) -> None:
        paragraphs = cleandoc(help or "").split("\n\n")
        super().__init__(*args, help="\n\n".join(" ".join(p.split()) for p in paragraphs), **kwargs)

    def get_params(self, ctx):
        return _bare_flags(super().get_params(ctx))

    def format_help(self, ctx, formatter) -> None:
        if _narrow():
            return super(TyperCommand, self).format_help(ctx, formatter)  # click's, past typer's rich one
        return super().format_help(ctx, formatter)


class _Group(TyperGroup):
    """devplan's own options (--version, --debug), with flags as _Command shows them."""

    def get_params(self, ctx):
        return _bare_flags(super().get_params(ctx))

    def format_help(self, ctx, formatter) -> None:
        if _narrow():
            return super(TyperGroup, self).format_help(ctx, formatter)
        return super().format_help(ctx, formatter)


def _narrow() -> bool:
    """Whether help goes to fewer than 100 columns (a CI log or a pipe, whose width is the
    80-column fallback, or a narrow terminal): rich's panels cut option names and their help
    there ('--partitio…'); click's own help wraps every line and cuts nothing."""
    return shutil.get_terminal_size().columns < 100


def _bare_flags(params: list) -> list:
    """Flags take no value, so they show none (an empty metavar instead of typer's <bool>)."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


app = typer.Typer(
    cls=_Group,
    help="Compile, plan and inspect ExecuTorch .pte programs across devices.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion and --show-completion for bash, zsh, fish and PowerShell
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        from devplan import __version__

        typer.echo(f"devplan {__version__}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _options(
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print devplan's version and exit.")
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", help="On an internal error, print the full traceback (any command takes it); "
                           "compile also checks each stage's result.")
    ] = False,
) -> None:
    """Compile, plan and inspect ExecuTorch .pte programs across devices."""

DataFile = Annotated[
    Optional[Path],
    typer.Option("--data", metavar="FILE.ptd", help="The .ptd data file holding the weights the program keeps outside "
                 "it (compile --external-constants, ExecuTorch's external_constants), checked against the program.",
                 show_default=False),
]

InspectSection = enum.Enum(  # type: ignore[misc]  # members from the sections table
    "InspectSection", {name: name for name in (*inspect_sections.SECTIONS, inspect_sections.ALL)}, type=str
)


@app.command("inspect", cls=_Command)
def inspect_command(
    program: Annotated[
        Path, typer.Argument(metavar="PROGRAM.pte", help="The .pte program to inspect (- reads standard input).",
                             show_default=False)
    ],
    json_output: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the inspection document as JSON (keys described in docs/inspect-json.md) "
            "instead of tables. The whole document unless --section is given.",
        ),
    ] = False,
    method: Annotated[
        Optional[str],
        typer.Option("--method", "-m", metavar="NAME", help="Show only the method NAME (default: every method)."),
    ] = None,
    section: Annotated[
        Optional[list[InspectSection]],
        typer.Option(
            "--section",
            "-s",
            case_sensitive=False,
            help="Show this section; repeat for several, 'all' for every one. "
            f"Default: {', '.join(inspect_sections.DEFAULT_SECTIONS)}. "
            "With --json, keeps only the lists of each method that these sections need.",
            show_default=False,
        ),
    ] = None,
    exact_bytes: Annotated[
        bool, typer.Option("--bytes", help="Show every size as an exact byte count instead of KiB/MiB.")
    ] = False,
    shapes: Annotated[
        bool, typer.Option("--shapes", help="In instructions, show each tensor argument with its dtype and shape "
                           "(v12:float32[1×8×32]).")
    ] = False,
    delegate: Annotated[
        Optional[int],
        typer.Option("--delegate", "-d", metavar="N", min=0, help="Show the program inside delegate N's payload "
                     "(of the first method, or of --method) instead: devplan's delegates hold ET12 programs.",
                     show_default=False),
    ] = None,
    svg: Annotated[
        Optional[Path],
        typer.Option("--svg", metavar="FILE.svg", help="Also draw each buffer's layout over time as an SVG picture "
                     "(each block of the model named under its instructions; hover a rectangle to name its tensor).", show_default=False),
    ] = None,
    trace: Annotated[
        Optional[Path],
        typer.Option("--trace", metavar="FILE.json", help="Also write the plan as a Chrome trace for ui.perfetto.dev or "
                     "chrome://tracing: instructions, bytes in use per buffer, one slice per tensor (1 ms per instruction).",
                     show_default=False),
    ] = None,
    data: DataFile = None,
) -> None:
    """Show what a .pte program holds, devplan's or ExecuTorch's.

    Methods, planned buffers and their devices, what holds each buffer at its
    peak (tensors, sources, the model's blocks), tensors with offsets, lifetimes
    and sources, instructions with every argument, delegates, and a chart of
    each buffer's memory over time."""
    from devplan.files import refuse_one_stream, refuse_overwrite, write_atomic
    from devplan.inspection import inspect

    refuse_overwrite(svg, [program, data], "--svg")
    refuse_overwrite(trace, [program, data], "--trace")
    refuse_one_stream({"--svg": svg, "--trace": trace})
    doc = inspect(_program(program, data), method=method, delegate=delegate)
    chosen = inspect_sections.resolve([choice.value for choice in section or ()])
    if svg is not None:
        from devplan.inspection.svg import layout_svg

        write_atomic(svg, layout_svg(doc).encode())
    if trace is not None:
        from devplan.inspection.trace import trace_json

        write_atomic(trace, trace_json(doc).encode())
    if json_output:
        _echo_json(inspect_sections.only(doc, chosen) if section else doc)
        return
    # Imported only once there is something to draw, so a bad file fails fast.
    from devplan.inspection.render import render
    from devplan.units import printable_tree

    chosen = chosen or inspect_sections.DEFAULT_SECTIONS
    # only the lists the views draw from are made printable (a large program's instructions take seconds)
    kept = inspect_sections.only(doc, (*chosen, "tensors") if shapes else chosen)  # --shapes reads the tensors
    render(printable_tree(kept), _console(), chosen,
           exact_bytes=exact_bytes, shapes=shapes)


def _console(stderr: bool = False):
    """A rich Console for devplan's views. Under NO_COLOR (no-color.org) it writes no styles at
    all: rich itself drops only colours there, keeping bold and dim."""
    from rich.console import Console

    return Console(highlight=False, stderr=stderr, color_system=None if os.environ.get("NO_COLOR") else "auto")


def _program(path: Path, data: Path | None = None):
    """A program argument: its path, or for - or with a .ptd `data` file, the program read
    (standard input once: check reads its program twice, and standard input can be read only once)."""
    from devplan.files import STDIO, read_input
    from devplan.pte import read_pte
    from devplan.pte.reader import MAX_PROGRAM_BYTES

    if str(path) != STDIO:
        return path if data is None else read_pte(path, data=data)
    return read_pte(read_input(STDIO, limit=MAX_PROGRAM_BYTES, name="<stdin>", hint="pipe in a .pte program"),
                    name="<stdin>", data=data)


def _read_noting_external(path: Path, data: Path | None):
    """The program read, and on stderr one line when its weights are outside it and no .ptd
    was given: check and diff never need them."""
    from devplan.pte import read_pte

    return _noting_external(read_pte(_program(path, data)))


def _noting_external(pte):
    """`pte`, once one line on stderr has said when its weights are outside it and no .ptd was given."""
    from devplan.inspection.document import external_note

    note = external_note(pte)
    if note is not None:
        typer.echo(f"note: {note}", err=True)
    return pte


def _echo_json(document: dict, err: bool = False) -> None:
    """Every command's JSON: `document` as json.dumps(document, sort_keys=True, indent=2) prints
    it (on stderr with `err`), written a batch of pieces at a time: json.dumps holds every piece
    in a list before joining them (for a million instructions, 44 million strings and 2.5 GB)."""
    pieces: list[str] = []
    for piece in json.JSONEncoder(sort_keys=True, indent=2).iterencode(document):
        pieces.append(piece)
        if len(pieces) == 1 << 16:
            typer.echo("".join(pieces), nl=False, err=err)
            pieces.clear()
    typer.echo("".join(pieces), err=err)


Budgets = Annotated[
    Optional[list[str]],
    typer.Option("--budget", metavar="BUFFER=SIZE", help="Fail unless a buffer fits, e.g. 1=512KiB or cuda:0=2MiB; "
                 "BUFFER is a mem_id (that buffer) or a device (all of its buffers together, those its "
                 "delegates plan there included). Repeatable.", show_default=False),
]


def _in_order(ctx: typer.Context, param: typer.CallbackParam, value):
    """Click calls option callbacks in the order the options first appear on the command
    line: that order is the order backends choose ops in."""
    if value:
        ctx.meta.setdefault("devplan_order", []).append(param.name)
    return value


def _given_order(ctx: typer.Context, names) -> list[str]:
    return [name for name in ctx.meta.get("devplan_order", []) if name in names]


@app.command("compile", cls=_Command)
def compile_command(
    ctx: typer.Context,
    model: Annotated[Path, typer.Argument(metavar="MODEL.pt2", help="A program saved with torch.export.save.", show_default=False)],
    output: Annotated[
        Optional[Path],
        typer.Option("--output", "-o", metavar="PROGRAM.pte", help="Where to write the program (default: MODEL with .pte); "
                     "- writes it to standard output, and the summary to standard error.", show_default=False),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the compile summary as JSON.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors: no summary, and no "
                                        "progress (shown on stderr only when it is a terminal).")] = False,
    alignment: Annotated[int, typer.Option("--alignment", metavar="BYTES", help="Alignment of every planned tensor's offset (a power of two).")] = DEFAULT_ALIGNMENT,
    planner: Annotated[
        str,
        typer.Option("--planner", metavar="NAME", help="Placement algorithm: best (runs the others but naive and keeps the smallest "
                     "plan per buffer), greedy-size, greedy-breadth, greedy-order, hill-climb, or naive (no reuse)."),
    ] = "best",
    budget: Budgets = None,
    inplace: Annotated[
        bool, typer.Option("--inplace/--no-inplace", help="Let elementwise ops write over an input that dies there, and cat pieces be computed in place.")
    ] = True,
    reorder: Annotated[
        bool, typer.Option("--reorder/--keep-order", help="Run the instructions in the order that holds the fewest bytes at once "
                           "(--keep-order: the exported order).")
    ] = True,
    delegate: Annotated[
        Optional[list[str]],
        typer.Option("--delegate", metavar="DEVICE[=OPS]", callback=_in_order, help="Run ops on DEVICE as delegates: cuda:0 takes every op, "
                     "cuda:0=aten::linear,aten::relu only those. Tensors crossing to and from the device are copied "
                     "(et_copy ops) and planned in a buffer of that device. Repeatable; earlier ones choose first.",
                     show_default=False),
    ] = None,
    backend: Annotated[
        Optional[list[str]],
        typer.Option("--backend", metavar="NAME", callback=_in_order, help="Let ExecuTorch's backend NAME (xnnpack) take "
                     "the ops it supports, compiled by its own partitioner and preprocess into its delegates; devplan "
                     "plans everything around them. Needs pip install \"devplan\\[executorch]\". Combines with --delegate "
                     "and --partitioner in the order given.", show_default=False),
    ] = None,
    partitioner: Annotated[
        Optional[list[str]],
        typer.Option("--partitioner", metavar="MODULE:CLASS[:JSON]", callback=_in_order, help="Like --backend, for "
                     "any ExecuTorch partitioner installed: the class, and its keyword arguments as a JSON object.",
                     show_default=False),
    ] = None,
    device_io: Annotated[
        bool, typer.Option("--device-io", help="With --delegate: plan an input that only one device's delegates read on "
                           "that device, and return results from the device their delegate made them on; the caller's "
                           "copies in and out replace et_copy ops.")
    ] = False,
    source: Annotated[
        bool, typer.Option("--source/--no-source", help="Keep, per instruction, the module, op and source line it came "
                           "from, and the names of inputs and weights, in the program's stacktrace (inspect shows them).")
    ] = True,
    dump_dir: Annotated[
        Optional[Path],
        typer.Option("--dump-dir", metavar="DIR", help="Write the program after each stage to DIR, one readable file per stage.", show_default=False),
    ] = None,
    method: Annotated[
        Optional[list[str]],
        typer.Option("--method", metavar="NAME=FILE.pt2", help="Compile FILE.pt2 into the same program as method NAME "
                     "(MODEL.pt2 is forward); weights the methods share are stored once. Repeatable.", show_default=False),
    ] = None,
    constant_method: Annotated[
        Optional[list[str]],
        typer.Option("--constant-method", metavar="NAME=VALUE", help="Add a method NAME that returns VALUE and runs "
                     "nothing, as ExecuTorch's LLM runner reads them (get_max_seq_len=128, use_kv_cache=true, "
                     "get_eos_ids=[128001,128009]): a JSON int, float, true/false, list of ints, or else a string. "
                     "Repeatable.", show_default=False),
    ] = None,
    metadata: Annotated[
        Optional[Path],
        typer.Option("--metadata", metavar="FILE.json", help="Constant methods from a JSON object of NAME: VALUE "
                     "(--constant-method adds to them and wins).", show_default=False),
    ] = None,
    llm: Annotated[
        bool, typer.Option("--llm", help="Write the constant methods ExecuTorch's LLM runner reads (vocabulary, "
                           "layers, context and token lengths, KV cache, sdpa flavour, dynamic shape) from the "
                           "export itself; give only the tokenizer's ids (get_bos_id, get_eos_ids). A value given "
                           "that the export contradicts is refused.")
    ] = False,
    external_constants: Annotated[
        Optional[Path],
        typer.Option("--external-constants", metavar="FILE.ptd", help="Write the weights to FILE.ptd, ExecuTorch's "
                     "FlatTensor data file, instead of the program, each under its name, which the program's tensors "
                     "name: one copy for every method (run it with --data FILE.ptd; ExecuTorch's runtime loads the "
                     "program with it).", show_default=False),
    ] = None,
    kernels: Annotated[
        Optional[list[str]],
        typer.Option("--kernels", metavar="MODULE", help="Import the Python module MODULE before loading, for the op "
                     "libraries its import registers: a graph calling custom ops loads only once they exist. "
                     "An op namespace devplan knows stands for its library's module (transformers: its MoE "
                     "grouped_mm_fallback). Repeatable.", show_default=False),
    ] = None,
    quantize: Annotated[
        Optional[str],
        typer.Option("--quantize", metavar="MODE", help="Quantize the export first with ExecuTorch's XNNPACK quantizer "
                     "(torch's PT2E flow) and let XNNPACK's backend run it (--backend xnnpack is implied): "
                     "dynamic-int8 (int8 weights per channel, activations quantized at run time; needs no data), "
                     "dynamic-int4 (the same with 4-bit weights, linear layers only) or int8 (static: needs --calibration). The summary says what it cost: the error against the float "
                     "model and the ops left in float.", show_default=False),
    ] = None,
    calibration: Annotated[
        Optional[Path],
        typer.Option("--calibration", metavar="FILE.pt", help="With --quantize: the inputs to calibrate on and to "
                     "measure the error on, a list of input tuples saved with torch.save (without it, dynamic modes "
                     "use seeded samples).", show_default=False),
    ] = None,
) -> None:
    """Compile a torch.export program (.pt2) to an ExecuTorch program (.pte).

    Lowers to the portable kernels, folds constants, partitions ops onto devices (--delegate),
    plans memory per device, verifies the plan, and writes the program atomically. Prints a
    summary: buffers, planned bytes next to the lower bound, delegates, constant bytes,
    seconds taken."""
    from devplan.backend import Backend
    from devplan.compiler import compile
    from devplan.files import is_stdout, refuse_one_stream, refuse_overwrite
    from devplan.load import check_input
    from devplan.backend import Partitioner
    from devplan.planning import parse_budget

    parse = {"delegate": (Backend.parse, delegate), "backend": (Partitioner.parse, backend),
             "partitioner": (Partitioner.parse_class, partitioner)}
    backends = [make(text) for name in _given_order(ctx, parse) for make, texts in [parse[name]] for text in texts or ()]
    budgets = dict(parse_budget(text) for text in budget or ())
    methods = _named_once([_name_value(text, "--method", Path) for text in method or ()], "--method")
    constants = {**(_metadata(metadata) if metadata is not None else {}),
                 **_named_once([_name_value(text, "--constant-method", _constant) for text in constant_method or ()],
                               "--constant-method")}
    for path in (model, *methods.values()):
        check_input(path)  # a .pte given as the model is told so, not that -o would overwrite it
    target = output if output is not None else model.with_suffix(".pte")
    # every file the compile reads is an input no output may replace (the metadata can be rebuilt only by hand)
    read = [model, *methods.values(), metadata, calibration]
    refuse_overwrite(target, read, "-o")
    refuse_overwrite(external_constants, [*read, target], "--external-constants")
    refuse_one_stream({"-o": target, "--external-constants": external_constants})
    # the program on standard output leaves it no room for the summary, which goes to stderr
    to_stdout = is_stdout(target)
    echo = functools.partial(typer.echo, err=to_stdout)
    from devplan.progress import compile_progress

    with compile_progress(quiet or json_output) as progress:
        result = compile(model, target, alignment=alignment, planner=planner, budgets=budgets, inplace=inplace, reorder=reorder,
                         delegates=backends, device_io=device_io, source=source, dump_dir=dump_dir,
                         methods=methods, constant_methods=constants, kernels=kernels, llm=llm,
                         external_constants=external_constants, quantize=quantize, calibration=calibration,
                         on_stage=progress.stage, on_written=progress.written)
    if quiet:
        return
    summary = result.summary()
    if json_output:
        _echo_json(summary, err=to_stdout)
        return
    from devplan.reports import compile_lines

    for line in compile_lines(summary, [m["name"] for m in summary["methods"] if m["name"] not in ("forward", *methods)],
                              "standard output" if to_stdout else str(target),
                              str(external_constants) if external_constants is not None else None):
        echo(line)


def _name_value(text: str, option: str, parse):
    """NAME=VALUE of a repeatable option, the value parsed by `parse`."""
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise DevplanError(f"{option} {text}: write it as NAME=VALUE, e.g. {option} get_max_seq_len=128")
    return name, parse(value)


def _named_once(pairs: list, option: str) -> dict:
    """NAME=VALUE pairs as a dict, refusing a NAME given twice: a dict would silently keep the
    last, and a program of two methods alike is one ExecuTorch's runtime reads otherwise."""
    if (name := repeated(pairs)) is not None:
        raise DevplanError(f"{option} {name} given twice; give each method once, under a name of its own")
    return dict(pairs)


def _constant(text: str):
    """A constant method's value as JSON (7, 1.5, true, [1, 2], "text"), or else the text itself."""
    from devplan.jsontext import loads

    try:
        return loads(text, f"--constant-method {text[:40]}")
    except ValueError:
        return text


def _unique_keys(path: Path, pairs: list) -> dict:
    """A JSON object of --metadata, refusing a key given twice (json would keep the last)."""
    if (key := repeated(pairs)) is not None:
        raise DevplanError(f"--metadata {path}: {key} given twice; give each constant method once")
    return dict(pairs)


def _metadata(path: Path) -> dict:
    from devplan.files import read_input

    from devplan.jsontext import loads

    text = read_input(path, limit=1 << 20, hint="pass a JSON file of constant methods")
    try:
        found = loads(text, f"--metadata {path}", object_pairs_hook=functools.partial(_unique_keys, path))
    except ValueError as error:
        raise DevplanError(f"--metadata {path}: not JSON ({error}); write an object of NAME: VALUE") from None
    if not isinstance(found, dict):
        raise DevplanError(f"--metadata {path}: holds a {type(found).__name__}; write an object of NAME: VALUE")
    # checked here too, so that a wrong type is told as the file's
    return {name: runner_value(name, value, f"--metadata {path}:") for name, value in found.items()}


Tolerance = Annotated[
    Optional[str],
    typer.Option("--tolerance", metavar="T", help="Let sizes grow by up to T and still match: a percentage (2%) or "
                 "bytes (4KiB). Shrinking always matches, unless --exact.", show_default=False),
]
Exact = Annotated[
    bool, typer.Option("--exact", help="Every change is a difference: sizes that shrank, tensors that moved.")
]


class ReportFormat(str, enum.Enum):
    """How check and diff print their report (reports.py, reports_ci.py)."""

    text = "text"
    markdown = "markdown"
    github = "github"


Format = Annotated[
    ReportFormat,
    typer.Option("--format", help="text (for people), markdown (a table for $GITHUB_STEP_SUMMARY or a pull request "
                 "comment) or github (::error annotations naming the file and the change).", case_sensitive=False),
]
JUnit = Annotated[
    Optional[Path],
    typer.Option("--junit", metavar="FILE.xml", help="Also write a JUnit XML report: a test case per buffer check and "
                 "per golden difference, failing where it fails.", show_default=False),
]


def _report_outputs(json_output: bool, report_format: ReportFormat, junit: Path | None, inputs: list) -> None:
    """Refuse --json with another --format, and a --junit file that is an input or standard
    output (where the report goes)."""
    from devplan.files import refuse_one_stream, refuse_overwrite

    if json_output and report_format is not ReportFormat.text:
        raise DevplanError(f"--json and --format {report_format.value}: pick one")
    refuse_one_stream({"the report": "-", "--junit": junit})
    refuse_overwrite(junit, inputs, "--junit")


@app.command("check", cls=_Command)
def check_command(
    program: Annotated[
        Path, typer.Argument(metavar="PROGRAM.pte", help="The .pte program to check, devplan's or ExecuTorch's "
                             "(- reads standard input).", show_default=False)
    ],
    budget: Budgets = None,
    max_ratio: Annotated[
        Optional[float],
        typer.Option("--max-ratio", metavar="R", help="Fail when a buffer is more than R times its lower bound, e.g. 1.05.",
                     show_default=False),
    ] = None,
    golden: Annotated[
        Optional[Path],
        typer.Option("--golden", metavar="GOLDEN.json", help="Fail when the program no longer plans as this golden file "
                     "records (buffers, bounds, operators, counts, delegates, placements); the diff says what changed.",
                     show_default=False),
    ] = None,
    update: Annotated[
        bool, typer.Option("--update", help="Write (or rewrite) the --golden file from this program instead of comparing.")
    ] = False,
    tolerance: Tolerance = None,
    exact: Exact = False,
    method: Annotated[Optional[str], typer.Option("--method", "-m", metavar="NAME", help="Check only this method.")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the checks as JSON (docs/check-json.md).")] = False,
    data: DataFile = None,
    report_format: Format = ReportFormat.text,
    junit: JUnit = None,
) -> None:
    """Check a program's planned memory in CI: exit 0 when every buffer passes and the program
    matches its --golden file, 1 when not (each line says why), 2 for bad input.

    Each buffer is checked against a --budget naming its mem_id and, with --max-ratio, against
    its lower bound; each device a --budget names, against the total of its buffers, those
    its delegates plan there included. With --golden, the program is also compared with its
    golden file (--update writes it)."""
    from devplan.files import is_stdout, refuse_overwrite
    from devplan.inspection.check import check, check_document, check_golden
    from devplan.planning import parse_budget

    if golden is None and (update or tolerance is not None or exact):
        raise DevplanError(f"{program}: --update, --tolerance and --exact apply to a golden file; add --golden GOLDEN.json")
    if update:  # the .ptd holds the program's weights: only a recompile would bring them back
        refuse_overwrite(golden, [program, data], "--golden")
    elif str(golden) == str(program) == "-":
        raise DevplanError("-: standard input can be read once; pass the program or the --golden file as a file")
    _report_outputs(json_output, report_format, junit, [program, data, golden])
    source = _read_noting_external(program, data)
    checks = check(source, budgets=dict(parse_budget(text) for text in budget or ()), max_ratio=max_ratio,
                   method=method)
    matched = (check_golden(source, golden, update=update, tolerance=tolerance, exact=exact, method=method)
               if golden is not None else None)
    name = source.name if str(program) == "-" else program.name
    report = check_document(name, checks, matched)
    # a golden file written to standard output leaves it no room for the report, which goes to stderr
    to_stderr = update and is_stdout(golden)
    if json_output:
        _echo_json(report, err=to_stderr)
    elif report_format is ReportFormat.text:
        from devplan.reports import check_lines

        for line in check_lines(checks, matched, str(golden), name):
            typer.echo(line, err=to_stderr)
    else:
        from devplan import reports_ci

        if report_format is ReportFormat.markdown:
            typer.echo(reports_ci.check_markdown(checks, matched, str(golden), name), nl=False, err=to_stderr)
        else:
            typer.echo("".join(line + "\n" for line in reports_ci.check_github(checks, matched, str(golden), str(program))),
                       nl=False, err=to_stderr)
    if junit is not None:
        from devplan.files import write_atomic
        from devplan.reports_ci import check_junit

        write_atomic(junit, check_junit(checks, matched, str(golden), name, str(program)))
    if not report["ok"]:
        raise typer.Exit(EXIT_FAILED)


@app.command("diff", cls=_Command)
def diff_command(
    a: Annotated[Path, typer.Argument(metavar="A.pte", help="The old program (or a golden file); - reads standard "
                                      "input.", show_default=False)],
    b: Annotated[Path, typer.Argument(metavar="B.pte", help="The new program (or a golden file).", show_default=False)],
    tolerance: Tolerance = None,
    exact: Exact = False,
    method: Annotated[Optional[str], typer.Option("--method", "-m", metavar="NAME", help="Compare only this method.")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the differences as JSON (docs/diff-json.md).")] = False,
    data: Annotated[
        Optional[list[Path]],
        typer.Option("--data", metavar="FILE.ptd", help="The .ptd data file of A, then of B (given once: of both), "
                     "for programs that keep their weights outside them.", show_default=False),
    ] = None,
    report_format: Format = ReportFormat.text,
    junit: JUnit = None,
) -> None:
    """Compare two programs' plans, devplan's or ExecuTorch's: exit 0 when they plan the same
    (within --tolerance), 1 when they differ, 2 for bad input.

    Per method: buffers added, removed or resized (per device), lower bounds, constant bytes,
    operators, counts, delegates, and the tensors whose placement changed."""
    from devplan.inspection.diff import diff
    from devplan.units import printable

    if str(a) == str(b) == "-":
        raise DevplanError("-: standard input can be read once; pass one of A and B as a file")
    if len(data or ()) > 2:
        raise DevplanError(f"--data given {len(data or ())} times; give it once (both programs' .ptd) or twice (A's, "
                           f"then B's)")
    data_a, data_b = (data or [None])[0], (data or [None])[-1]
    _report_outputs(json_output, report_format, junit, [a, b, *(data or ())])
    side_a = _diff_side(a, data_a)
    result = diff(side_a, _diff_side(b, data_b), tolerance=tolerance, exact=exact, method=method)
    # an annotation belongs on the golden file when A is one (what a review changes), else on B
    changed = str(a) if isinstance(side_a, Path) else str(b)
    # names from the files (operators, backend ids, devices) may hold terminal escapes: shown escaped
    if json_output:
        _echo_json(result.document())
    elif report_format is ReportFormat.text:
        typer.echo("".join(printable(line) + "\n" for line in result.text().splitlines()), nl=False)
    else:
        from devplan import reports_ci

        typer.echo(reports_ci.diff_markdown(result) if report_format is ReportFormat.markdown else
                   "".join(line + "\n" for line in reports_ci.diff_github(result, changed)), nl=False)
    if junit is not None:
        from devplan.files import write_atomic
        from devplan.reports_ci import diff_junit

        write_atomic(junit, diff_junit(result, changed))
    if not result.ok:
        raise typer.Exit(EXIT_FAILED)


def _diff_side(path: Path, data: Path | None):
    """A or B as diff reads it: a golden file by its path, a program read (saying when its
    weights are outside it and no .ptd was given)."""
    from devplan.inspection.diff import looks_like_golden

    if str(path) == "-":
        return _stdin_side(data)
    if looks_like_golden(path):
        return path
    return _read_noting_external(path, data)


def _stdin_side(data: Path | None):
    """- as diff reads it: a golden file's JSON (as `check --golden - --update` writes it) or a
    program, told apart by their first byte."""
    from devplan.files import STDIO, read_input
    from devplan.inspection.golden import parse_golden
    from devplan.pte import read_pte
    from devplan.pte.reader import MAX_PROGRAM_BYTES

    piped = read_input(STDIO, limit=MAX_PROGRAM_BYTES, name="<stdin>", hint="pipe in a .pte program or a golden file")
    if piped.lstrip()[:1] == b"{":
        return parse_golden(piped, "<stdin>", "write it with `devplan check PROGRAM.pte --golden - --update`")
    return _noting_external(read_pte(piped, name="<stdin>", data=data))


@app.command("run", cls=_Command)
def run_command(
    program: Annotated[
        Path, typer.Argument(metavar="PROGRAM.pte", help="The .pte program to run (- reads standard input).",
                             show_default=False)
    ],
    inputs: Annotated[
        Optional[Path],
        typer.Option("--inputs", "-i", metavar="FILE.pt",
                     help="Inputs saved with torch.save (a tensor, or a list or tuple of them). "
                          "Default: seeded random floats, zeros for integer inputs."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", min=0, max=2**63 - 1, help="Seed for the random inputs.")] = 0,
    runs: Annotated[int, typer.Option("--runs", min=1, max=10_000, help="Run the method this many times in a row "
                                      "(state carries over).")] = 1,
    method: Annotated[str, typer.Option("--method", "-m", metavar="NAME", help="The method to run.")] = "forward",
    save: Annotated[
        Optional[Path], typer.Option("--save", metavar="FILE.pt", help="Also save the last run's outputs with torch.save.")
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the outputs' summaries as JSON.")] = False,
    devices_on_host: Annotated[
        bool, typer.Option("--devices-on-host", help="Back every device buffer (cuda:N) with host memory, to prove a "
                           "device program's plan on a machine without the device.")
    ] = False,
    max_memory: Annotated[
        str, typer.Option("--max-memory", metavar="SIZE", help="Refuse a program whose inputs, buffers and "
                          "unplanned tensors take more than this (units B, KiB, MiB, GiB, ...): sizes come from the file.")
    ] = "8GiB",
    executorch: Annotated[
        bool, typer.Option("--executorch", help="Run on ExecuTorch's own runtime instead (needs pip install "
                           "\"devplan\\[executorch]\"): any program, those with XNNPACK delegates too.")
    ] = False,
    data: Annotated[
        Optional[Path],
        typer.Option("--data", metavar="FILE.ptd", help="The .ptd data file holding the weights the program keeps "
                     "outside it (compile --external-constants, ExecuTorch's external_constants).", show_default=False),
    ] = None,
    cuda_graphs: Annotated[
        bool, typer.Option("--cuda-graphs/--no-cuda-graphs", help="Replay each delegate on a CUDA device as one CUDA "
                           "graph from its second run on (--debug says why one cannot be).")
    ] = True,
) -> None:
    """Run a .pte in devplan's reference runtime and summarize its outputs.

    Every planned tensor lives where the plan put it, in one arena per buffer from the
    DeviceAllocator registered for the buffer's device, so a broken plan shows as wrong outputs.
    Delegates devplan compiled (--delegate) run their payloads on their device; ExecuTorch's
    backends' delegates (--backend) need --executorch."""
    import io
    from contextlib import nullcontext

    import torch

    from devplan.files import refuse_overwrite, write_atomic
    from devplan.pte import read_pte
    from devplan.pte.decode import methods
    from devplan.runtime import HostAllocator, LoadedMethod, registered
    from devplan.runtime.allocator import peaks, reset_peaks
    from devplan.runtime.memory import Memory
    from devplan.runtime.program_validation import check_planned_total
    from devplan.runtime.report import device_memory, run_document

    # one limit for the inputs, read or made, and all the program's memory
    memory = Memory(_memory_limit(max_memory))
    refuse_overwrite(save, [program, data, inputs], "--save")
    pte = read_pte(_program(program, data))
    given = _load_inputs(inputs, memory) if inputs is not None else None
    held = None
    if executorch:
        from devplan.runtime.executor import method_view, sample_inputs
        from devplan.runtime.executorch import run_on_executorch

        results = run_on_executorch(pte, method, given if given is not None else sample_inputs(method_view(pte, method), seed, memory), runs)
    else:
        with registered("cuda", HostAllocator()) if devices_on_host else nullcontext():
            devices = {d for view in methods(pte) for d in view.buffer_devices.values()}
            reset_peaks(devices)
            check_planned_total(pte, memory.limit)  # ExecuTorch's runtime allocates every method's buffers
            loaded = LoadedMethod(pte, method, memory=memory, cuda_graphs=cuda_graphs)
            try:
                given = given if given is not None else loaded.sample_inputs(seed)
                results = [loaded.execute(given) for _ in range(runs)]
                held = device_memory(loaded, peaks(devices))
            finally:
                loaded.release()
    if save is not None:
        buffer = io.BytesIO()
        torch.save(results[-1], buffer)
        write_atomic(save, buffer.getvalue())
    report = run_document(program.name, method, results, held)
    if json_output:
        _echo_json(report)
        return
    from devplan.reports import run_lines

    for line in run_lines(report):
        typer.echo(line)


def _memory_limit(text: str) -> int:
    from devplan.units import size_bytes

    nbytes = size_bytes(text)
    if nbytes is None or nbytes < 1:
        raise DevplanError(f"bad --max-memory {text!r}; give a size such as 4GiB or 512MiB")
    return int(nbytes)


def _load_inputs(path: Path, memory) -> list:
    """The --inputs file's tensors, read once into memory: a regular file, whose bytes (what its
    tensors take once loaded) are counted against `memory`'s limit before they are loaded."""
    import io

    import torch

    from devplan.files import read_input

    data = read_input(path, limit=memory.limit - memory.taken, hint="pass a file of tensors saved with torch.save")
    memory.take(len(data), f"{path}: the inputs")
    try:
        loaded = torch.load(io.BytesIO(data), weights_only=True)
    except Exception as error:  # torch.load raises pickle, zip and OS errors alike for a bad file
        raise DevplanError(f"{path}: not a file of tensors saved with torch.save ({type(error).__name__}); "
                           f"save a tensor or a list of tensors with torch.save") from None
    tensors = list(loaded) if isinstance(loaded, (list, tuple)) else [loaded]
    for index, tensor in enumerate(tensors):
        if isinstance(tensor, torch.Tensor) and (tensor.layout != torch.strided or tensor.is_meta):
            raise DevplanError(f"{path}: input {index} is a {str(tensor.layout).removeprefix('torch.')} tensor on "
                               f"{tensor.device.type}; save dense tensors that hold their values (tensor.to_dense())")
    return tensors


def main() -> None:
    """Entry point: every user-facing failure becomes one line on stderr and EXIT_BAD_INPUT; a bug
    in devplan itself one line too, EXIT_INTERNAL, with its traceback in a log file (or printed
    with --debug, which any command takes)."""
    debug = "--debug" in sys.argv[1:]
    sys.argv[1:] = [arg for arg in sys.argv[1:] if arg != "--debug"]
    import signal

    if os.environ.get("NO_COLOR"):  # typer's help, like devplan's views (_console), then has no styles at all
        from typer import rich_utils  # (an `import typer.rich_utils` here would make typer local to main)

        rich_utils.COLOR_SYSTEM = None

    # SIGTERM as an exit, so that a write in progress removes its temporary file on the way out
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if debug:  # a compile checks each stage's result too (devplan/wellformed.py), naming the stage that broke it
        os.environ["DEVPLAN_CHECK_STAGES"] = "1"
        import logging

        # what devplan notes on the way (a delegate that runs without a CUDA graph, and why)
        logging.getLogger("devplan").addHandler(logging.StreamHandler())
        logging.getLogger("devplan").setLevel(logging.DEBUG)
    else:  # torch's deprecation chatter is not the user's to act on; --debug shows it
        import logging
        import warnings

        # nor is a logging call failing inside torch (a message with more %s than arguments, a
        # closed stream): logging would print '--- Logging error ---' and a traceback for it
        logging.raiseExceptions = False
        # nor what libraries log on the way with no handler of their own (torchao's "Failed to
        # load ..." for kernels this machine lacks, as --kernels llama imports it), which Python
        # prints through its last-resort handler; handlers devplan adds (load reads torch's
        # warnings for their reasons) still get every record
        logging.lastResort = None

        warnings.simplefilter("ignore")
        # and what torch warns from C++ (TORCH_WARN, e.g. a kernel resizing an out tensor) goes to
        # stderr through its own logging, which reads this once, when torch is first imported
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
        # and its Python warnings (a range it cannot bound in a damaged archive's sizes) before
        # devplan's own line: torch sets its loggers' levels from this when first imported
        os.environ.setdefault("TORCH_LOGS", "-all")
    try:
        # outside standalone mode click hands back a command's exit code instead of exiting
        code = app(standalone_mode=False)
        sys.stdout.flush()  # inside the try: a Ctrl-C while the last lines go out is an interruption too
        if isinstance(code, int) and code:
            sys.exit(code)
    except BudgetExceeded as error:  # the program fails a check, as `devplan check` exits for it
        _fail(str(error), code=EXIT_FAILED)
    except DevplanError as error:
        _fail(str(error))
    except click_errors.UsageError as error:
        if type(error).__name__ == "NoArgsIsHelpError":  # bare `devplan` or `devplan compile`: show help
            print(error.format_message())
            sys.exit(EXIT_OK)
        command = error.ctx.command_path if error.ctx else "devplan"
        _fail(f"{error.format_message()} (see '{command} --help')")
    except typer.Exit as done:
        sys.exit(done.exit_code)
    except typer.Abort:
        _fail("aborted")
    except KeyboardInterrupt:  # no traceback; a write in progress has removed its temporary file
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C on the way out changes nothing
        print("devplan: interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except MemoryError:
        _fail("out of memory; try a smaller model or a machine with more memory")
    except Exception as error:  # devplan's own bug: one line, the traceback kept for the report
        _internal(error, debug)


def _internal(error: Exception, debug: bool) -> None:
    import tempfile
    import traceback

    from devplan import __version__
    from devplan.errors import InternalError
    from devplan.units import printable

    cause = error.__cause__ if isinstance(error, InternalError) and error.__cause__ else error
    where = (f"in stage {error.stage}" + (f" at node {error.node}" if error.node else "")
             if isinstance(error, InternalError) else f"in devplan {' '.join(sys.argv[1:2])}".rstrip())
    text = "".join(traceback.format_exception(error))
    if debug:
        print(text, file=sys.stderr, end="")
        kept = "printed above"
    else:
        handle, log = tempfile.mkstemp(prefix="devplan-internal-error-", suffix=".log")
        with open(handle, "w") as f:
            f.write(text)
        kept = f"traceback in {log}; rerun with --debug to print it"
    print(printable(f"devplan: internal error {where} (devplan {__version__}): {type(cause).__name__}: "
                    f"{first_line(cause)}; {kept}; please report it"), file=sys.stderr)
    sys.exit(EXIT_INTERNAL)


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    from devplan.units import printable

    print(f"devplan: error: {printable(message)}", file=sys.stderr)
    sys.exit(code)

