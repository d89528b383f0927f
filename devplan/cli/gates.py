"""The gates CI runs: `devplan check` (a program's planned memory against budgets, its lower
bound and its golden file) and `devplan diff` (two programs' plans), each exiting 1 when it fails."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from devplan import SCHEMAS
from devplan.cli.app import (
    Budgets,
    Command,
    DataFile,
    Format,
    JUnit,
    ReportFormat,
    app,
    console,
    echo,
    echo_json,
    noting_external,
    print_verdicts,
    read_noting_external,
    report_outputs,
)
from devplan.errors import EXIT_FAILED, DevplanError
from devplan.files import STDIO

if TYPE_CHECKING:
    from devplan.documents import GoldenDocument
    from devplan.pte import PteFile

Tolerance = Annotated[
    Optional[str],
    typer.Option(
        "--tolerance",
        metavar="T",
        help="Let the planned memory (buffers, lower bounds, device totals) grow by up to T and still "
        "match: a percentage (2%) or bytes (4KiB); the weights too, unless --weights-tolerance gives theirs. "
        "Shrinking always matches, unless --exact.",
        show_default=False,
    ),
]
WeightsTolerance = Annotated[
    Optional[str],
    typer.Option(
        "--weights-tolerance",
        metavar="T",
        help="Let the weights (the program's constants, each delegate's payload) grow by up to T and still "
        "match, apart from --tolerance, which then judges the planned memory alone.",
        show_default=False,
    ),
]
Exact = Annotated[
    bool, typer.Option("--exact", help="Every change is a difference: sizes that shrank, tensors that moved.")
]


@app.command("check", cls=Command)
def check_command(
    program: Annotated[
        Path,
        typer.Argument(
            metavar="PROGRAM.pte",
            help="The .pte program to check, devplan's or ExecuTorch's (- reads standard input).",
            show_default=False,
        ),
    ],
    budget: Budgets = None,
    max_ratio: Annotated[
        Optional[float],
        typer.Option(
            "--max-ratio",
            metavar="R",
            help="Fail when a buffer is more than R times its lower bound, e.g. 1.05.",
            show_default=False,
        ),
    ] = None,
    golden: Annotated[
        Optional[Path],
        typer.Option(
            "--golden",
            metavar="GOLDEN.json",
            help="Fail when the program no longer plans as this golden file "
            "records (buffers, bounds, operators, counts, delegates, placements); the diff says what changed.",
            show_default=False,
        ),
    ] = None,
    update: Annotated[
        bool,
        typer.Option("--update", help="Write (or rewrite) the --golden file from this program instead of comparing."),
    ] = False,
    tolerance: Tolerance = None,
    weights_tolerance: WeightsTolerance = None,
    exact: Exact = False,
    fail_on_shrink: Annotated[
        bool,
        typer.Option(
            "--fail-on-shrink",
            help="A size that shrank is a difference too, as snapshot tools fail a snapshot to record "
            "again (without it, a smaller plan passes and the text says how to record it).",
        ),
    ] = False,
    method: Annotated[
        Optional[str], typer.Option("--method", "-m", metavar="NAME", help="Check only this method.")
    ] = None,
    json_output: Annotated[
        bool,
        typer.Option(
            "--json", help=f"Print the checks as JSON (keys: {SCHEMAS}check.schema.json in the installed package)."
        ),
    ] = False,
    runtime: Annotated[
        Optional[Path],
        typer.Option(
            "--runtime",
            metavar="BUILD.yaml",
            help="Fail when the runtime build this program ships on lacks an operator, kernel variant "
            "(dtype and dim order) or backend it needs: the build's selective-build list, "
            "selected_operators.yaml as ExecuTorch's gen_oplist writes it (or one merged from several models); "
            "backends are checked where its build_features names those the build links.",
            show_default=False,
        ),
    ] = None,
    data: DataFile = None,
    report_format: Format = ReportFormat.text,
    junit: JUnit = None,
) -> None:
    """Check a program's planned memory in CI: exit 0 when every buffer passes and the program
    matches its --golden file, 1 when not (each line says why), 2 for bad input.

    Each buffer is checked against a --budget naming its mem_id and, with --max-ratio, against
    its lower bound; each device a --budget names, against the total of its buffers, those
    its delegates plan there included. With --golden, the program is also compared with its
    golden file (--update writes it); with --runtime, held to the runtime build it ships on."""
    from devplan.files import is_stdout, refuse_overwrite
    from devplan.inspection.check import check, check_document, check_golden
    from devplan.inspection.runtime_build import check_runtime
    from devplan.planning import parse_budget

    if golden is None and (update or tolerance is not None or weights_tolerance is not None or exact or fail_on_shrink):
        raise DevplanError(
            f"{program}: --update, --tolerance, --weights-tolerance, --exact and --fail-on-shrink apply to a "
            f"golden file; add --golden GOLDEN.json"
        )
    if update:  # the .ptd holds the program's weights: only a recompile would bring them back
        refuse_overwrite(golden, [program, data], "--golden")
    elif str(golden) == str(program) == STDIO:
        raise DevplanError("-: standard input can be read once; pass the program or the --golden file as a file")
    report_outputs(json_output, report_format, junit, [program, data, golden, runtime])
    source = read_noting_external(program, data)
    checks = check(
        source, budgets=dict(parse_budget(text) for text in budget or ()), max_ratio=max_ratio, method=method
    )
    matched = (
        check_golden(
            source,
            golden,
            update=update,
            tolerance=tolerance,
            exact=exact,
            method=method,
            fail_on_shrink=fail_on_shrink,
            weights_tolerance=weights_tolerance,
        )
        if golden is not None
        else None
    )
    built = check_runtime(source, runtime, method) if runtime is not None else None
    name = source.name if str(program) == STDIO else program.name
    report = check_document(name, checks, matched, built)
    # a golden file written to standard output leaves it no room for the report, which goes to stderr
    to_stderr = update and golden is not None and is_stdout(golden)
    if json_output:
        echo_json(report, err=to_stderr)
    elif report_format is ReportFormat.text:
        from devplan.inspection.reports import check_lines

        shown = console(stderr=to_stderr)
        print_verdicts(check_lines(checks, matched, str(golden), name, shown.width, built), shown)
    else:
        from devplan.inspection import reports_ci

        if report_format is ReportFormat.markdown:
            echo(reports_ci.check_markdown(checks, matched, str(golden), name, built), nl=False, err=to_stderr)
        else:
            typer.echo(  # devplan's own workflow commands: the one output not made inert
                "".join(
                    line + "\n"
                    for line in reports_ci.check_github(
                        checks,
                        matched,
                        str(golden),
                        reports_ci.declared(budget or [], str(golden) if golden is not None else None),
                        built,
                        str(runtime),
                    )
                ),
                nl=False,
                err=to_stderr,
            )
    if junit is not None:
        from devplan.files import write_atomic
        from devplan.inspection.reports_ci import check_junit

        write_atomic(junit, check_junit(checks, matched, str(golden), name, str(program), built, str(runtime)))
    if not report["ok"]:
        raise typer.Exit(EXIT_FAILED)


@app.command("diff", cls=Command)
def diff_command(
    a: Annotated[
        Path,
        typer.Argument(
            metavar="A.pte", help="The old program (or a golden file); - reads standard input.", show_default=False
        ),
    ],
    b: Annotated[Path, typer.Argument(metavar="B.pte", help="The new program (or a golden file).", show_default=False)],
    tolerance: Tolerance = None,
    weights_tolerance: WeightsTolerance = None,
    exact: Exact = False,
    method: Annotated[
        Optional[str], typer.Option("--method", "-m", metavar="NAME", help="Compare only this method.")
    ] = None,
    json_output: Annotated[
        bool,
        typer.Option(
            "--json", help=f"Print the differences as JSON (keys: {SCHEMAS}diff.schema.json in the installed package)."
        ),
    ] = False,
    data: Annotated[
        Optional[list[Path]],
        typer.Option(
            "--data",
            metavar="FILE.ptd",
            help="The .ptd data file of A, then of B (given once: of both), "
            "for programs that keep their weights outside them.",
            show_default=False,
        ),
    ] = None,
    report_format: Format = ReportFormat.text,
    junit: JUnit = None,
    placements: Annotated[
        bool,
        typer.Option(
            "--placements",
            help="List the tensors whose placement changed (value ids, offsets, lifetimes) even when the two "
            "programs come from different compilers (one names the model's modules, the other none, as "
            "ExecuTorch's default programs), whose value ids are each their own.",
        ),
    ] = False,
) -> None:
    """Compare two programs' plans, devplan's or ExecuTorch's: exit 0 when they plan the same
    (within --tolerance), 1 when they differ, 2 for bad input.

    Per method: buffers added, removed or resized (per device), lower bounds, constant bytes,
    operators, counts, delegates, and the tensors whose placement changed. With --tolerance or
    --exact, each change is labelled FAIL or ok by that gate; without, the changes are listed as
    they are (growth still exits 1).

    Where a side names no modules (ExecuTorch's programs), each peak is told by the operators
    that wrote what it holds, never by module."""
    from devplan.inspection.diff import diff
    from devplan.units import printable

    if str(a) == str(b) == STDIO:
        raise DevplanError("-: standard input can be read once; pass one of A and B as a file")
    if len(data or ()) > 2:
        raise DevplanError(
            f"--data given {len(data or ())} times; give it once (both programs' .ptd) or twice (A's, then B's)"
        )
    data_a, data_b = (data[0], data[-1]) if data else (None, None)
    report_outputs(json_output, report_format, junit, [a, b, *(data or ())])
    side_a = _diff_side(a, data_a)
    result = diff(
        side_a,
        _diff_side(b, data_b),
        tolerance=tolerance,
        exact=exact,
        method=method,
        weights_tolerance=weights_tolerance,
    )
    # an annotation belongs on the golden file when A is one (what a review changes), else on B
    changed = str(a) if isinstance(side_a, Path) else str(b)
    # names from the files (operators, backend ids, devices) may hold terminal escapes: shown escaped
    if json_output:
        echo_json(result.document())
    elif report_format is ReportFormat.text:
        # FAIL and ok are a gate's words: without --tolerance or --exact the changes are listed as they are
        gated = tolerance is not None or weights_tolerance is not None or exact
        # wrapped as rich would, at the console's width
        text = result.text(labels=gated, width=console().width, placements=placements)
        # names are escaped in the text already: its line breaks are devplan's own
        echo("".join(printable(line) + "\n" for line in text.rstrip("\n").split("\n")), nl=False)
    else:
        from devplan.inspection import reports_ci

        if report_format is ReportFormat.markdown:
            echo(reports_ci.diff_markdown(result), nl=False)
        else:  # devplan's own workflow commands: the one output not made inert
            lines = reports_ci.golden_lines(changed) if isinstance(side_a, Path) else {}  # A, a golden file
            typer.echo("".join(line + "\n" for line in reports_ci.diff_github(result, changed, lines)), nl=False)
    if junit is not None:
        from devplan.files import write_atomic
        from devplan.inspection.reports_ci import diff_junit

        write_atomic(junit, diff_junit(result, changed))
    if not result.ok:
        raise typer.Exit(EXIT_FAILED)


def _diff_side(path: Path, data: Path | None) -> Path | PteFile | GoldenDocument:
    """A or B as diff reads it: a golden file by its path, a program read (saying when its
    weights are outside it and no .ptd was given)."""
    from devplan.inspection.diff import looks_like_golden

    if str(path) == STDIO:
        return _stdin_side(data)
    if looks_like_golden(path):
        return path
    return read_noting_external(path, data)


def _stdin_side(data: Path | None) -> PteFile | GoldenDocument:
    """- as diff reads it: a golden file's JSON (as `check --golden - --update` writes it) or a
    program, told apart by their first byte."""
    import sys

    from devplan.inspection.golden import MAX_GOLDEN_BYTES, parse_golden
    from devplan.pte import read_pte
    from devplan.pte.piped import read_piped

    hint = "pipe in a .pte program or a golden file"
    piped = read_piped(sys.stdin.buffer, "<stdin>", hint, json_limit=MAX_GOLDEN_BYTES)
    if piped.lstrip()[:1] == b"{":
        return parse_golden(piped, "<stdin>", "write it with `devplan check PROGRAM.pte --golden - --update`")
    return noting_external(read_pte(piped, name="<stdin>", data=data))
