"""`devplan inspect`: what a .pte program holds, as tables or the inspection document."""

from __future__ import annotations

import enum
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from devplan import SCHEMAS
from devplan.cli.app import Command, DataFile, app, console, echo_json, noting_external, program_source
from devplan.errors import DevplanError
from devplan.inspection import sections as inspect_sections

if TYPE_CHECKING:
    from devplan.documents import XnnpackDocument

InspectSection = enum.Enum(  # type: ignore[misc]  # members from the sections table
    "InspectSection", {name: name for name in (*inspect_sections.SECTIONS, inspect_sections.ALL)}, type=str
)


@app.command("inspect", cls=Command)
def inspect_command(
    program: Annotated[
        Path,
        typer.Argument(
            metavar="PROGRAM.pte", help="The .pte program to inspect (- reads standard input).", show_default=False
        ),
    ],
    json_output: Annotated[
        bool,
        typer.Option(
            "--json",
            help=f"Print the inspection document as JSON (keys: {SCHEMAS}inspect.schema.json in the installed package) "
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
            metavar="SECTION",  # the choices, in the help: as a metavar they made a 95-column line
            case_sensitive=False,
            help=f"Show this section, one of {', '.join((*inspect_sections.SECTIONS, inspect_sections.ALL))}; "
            "repeat for several, 'all' for every one. "
            f"Default: {', '.join(inspect_sections.DEFAULT_SECTIONS)}. "
            "With --json, keeps only the lists of each method that these sections need.",
            show_default=False,
        ),
    ] = None,
    module: Annotated[
        Optional[str],
        typer.Option(
            "--module",
            metavar="PREFIX",
            help="List only the tensors from the module PREFIX and those under it (its path, or the name the "
            "program gives a weight or a KV cache; '(state)' and '(inputs)' too), and only the instructions "
            "it made: in tensors, the peak's held tensors, the layout, instructions, and --json's lists of them.",
            show_default=False,
        ),
    ] = None,
    min_size: Annotated[
        Optional[str],
        typer.Option(
            "--min-size",
            metavar="SIZE",
            help="List only the tensors of SIZE or more (4KiB, 1MiB, 4096): in tensors, the peak's held "
            "tensors, the layout, and --json's lists of them.",
            show_default=False,
        ),
    ] = None,
    exact_bytes: Annotated[
        bool, typer.Option("--bytes", help="Show every size as an exact byte count instead of KiB/MiB.")
    ] = False,
    shapes: Annotated[
        bool,
        typer.Option(
            "--shapes",
            help="In instructions, show each tensor argument with its dtype and shape (v12:float32[1×8×32]).",
        ),
    ] = False,
    delegate: Annotated[
        Optional[int],
        typer.Option(
            "--delegate",
            "-d",
            metavar="N",
            min=0,
            help="Show the program inside delegate N's payload "
            "(of the first method, or of --method) instead: devplan's delegates hold ET12 programs; "
            "of an ExecuTorch XNNPACK delegate, its graph: nodes, values, quantization and weights' keys.",
            show_default=False,
        ),
    ] = None,
    svg: Annotated[
        Optional[Path],
        typer.Option(
            "--svg",
            metavar="FILE.svg",
            help="Also draw each buffer's layout over time as an SVG picture "
            "(each block of the model named under its instructions; hover a rectangle to name its tensor). "
            "- writes standard output, and the view goes to standard error.",
            show_default=False,
        ),
    ] = None,
    trace: Annotated[
        Optional[Path],
        typer.Option(
            "--trace",
            metavar="FILE.json",
            help="Also write the plan as a Chrome trace for ui.perfetto.dev or "
            "chrome://tracing: instructions, bytes in use per buffer, one slice per tensor (1 ms per instruction). "
            "- writes standard output, and the view goes to standard error.",
            show_default=False,
        ),
    ] = None,
    oplist: Annotated[
        Optional[Path],
        typer.Option(
            "--oplist",
            metavar="FILE.yaml",
            help="Also write ExecuTorch's selective-build operator list (selected_operators.yaml, as its "
            "gen_oplist writes it for this file): every operator and kernel variant the program's methods call, "
            "for a runtime build that compiles only those. - writes standard output.",
            show_default=False,
        ),
    ] = None,
    etdump: Annotated[
        Optional[Path],
        typer.Option(
            "--etdump",
            metavar="FILE",
            help="Show the time ExecuTorch's runtime measured (the ETDump devplan run --executorch --etdump "
            "wrote) beside the plan: where the time goes by module beside the peak, each instruction's and "
            "delegate's time in -s instructions, and under timing in --json (of --method, default forward).",
            show_default=False,
        ),
    ] = None,
    data: DataFile = None,
) -> None:
    """Show what a .pte program holds, devplan's or ExecuTorch's.

    Methods, planned buffers and their devices, what holds each buffer at its
    peak (tensors, sources, the model's blocks), tensors with offsets, lifetimes
    and sources, instructions with every argument, delegates, and a chart of
    each buffer's memory over time."""
    from devplan.files import is_stdout, refuse_overwrite, refuse_shared_output, write_atomic
    from devplan.inspection import inspect

    refuse_overwrite(svg, [program, data], "--svg")
    refuse_overwrite(trace, [program, data], "--trace")
    refuse_overwrite(oplist, [program, data], "--oplist")
    refuse_shared_output({"--svg": svg, "--trace": trace, "--oplist": oplist})
    smallest = _min_size(min_size) if min_size is not None else None
    source = program_source(program, data)
    if data is not None and not isinstance(source, Path):  # read, to check it against the .ptd
        noting_external(source)
    doc = inspect(source, method=method, delegate=delegate)
    if doc["format"] == "XNNGraph":
        _xnngraph(
            doc,
            json_output,
            exact_bytes,
            {
                "--section": section,
                "--shapes": shapes,
                "--svg": svg,
                "--trace": trace,
                "--module": module,
                "--min-size": min_size,
                "--etdump": etdump,
            },
        )
        return
    if etdump is not None:
        from devplan.inspection.timing import with_timing
        from devplan.pte.etdump import read_etdump

        doc = with_timing(doc, read_etdump(etdump), method or "forward")
    chosen = inspect_sections.resolve([choice.value for choice in section or ()])
    if svg is not None:
        from devplan.inspection.svg import layout_svg

        write_atomic(svg, layout_svg(doc).encode())
    if trace is not None:
        from devplan.inspection.trace import trace_json

        write_atomic(trace, trace_json(doc).encode())
    if oplist is not None:
        from devplan.inspection.kernels import oplist_yaml
        from devplan.pte import read_pte
        from devplan.pte.decode import methods

        read = read_pte(source)  # the program's own methods, as ExecuTorch's tools list them (not a payload's)
        write_atomic(oplist, oplist_yaml(methods(read), read.name if str(program) == "-" else str(program)).encode())
    # a drawing on standard output leaves it no room for the view (as compile -o -)
    to_stderr = any(path is not None and is_stdout(path) for path in (svg, trace, oplist))
    doc = inspect_sections.matching(doc, module, smallest)  # the drawings above have every tensor
    if json_output:
        echo_json(inspect_sections.only(doc, chosen) if section else doc, err=to_stderr)
        return
    # Imported only once there is something to draw, so a bad file fails fast.
    from devplan.inspection.render import render
    from devplan.units import printable_tree

    chosen = chosen or inspect_sections.DEFAULT_SECTIONS
    if module is not None or smallest is not None:  # the lists below are not the whole of them
        console(stderr=to_stderr).print(
            inspect_sections.focus_line(module, smallest, exact_bytes), style="dim", markup=False, soft_wrap=True
        )
    # only the lists the views draw from are made printable (a large program's instructions take seconds)
    kept = inspect_sections.only(doc, (*chosen, "tensors") if shapes else chosen)  # --shapes reads the tensors
    render(printable_tree(kept), console(stderr=to_stderr), chosen, exact_bytes=exact_bytes, shapes=shapes)


def _xnngraph(doc: XnnpackDocument, json_output: bool, exact_bytes: bool, refused: dict[str, object]) -> None:
    """An XNNPACK delegate's graph: its document, or its view; the program's views do not apply."""
    from devplan.errors import DevplanError

    given = [option for option, value in refused.items() if value]
    if given:
        raise DevplanError(
            f"{', '.join(given)} show a program; delegate {doc['delegate']['index']} holds an XNNPACK graph, "
            "shown whole (leave them out, or --json for its document)"
        )
    if json_output:
        echo_json(doc)
        return
    from devplan.inspection.xnngraph import render_xnngraph
    from devplan.units import printable_tree

    render_xnngraph(printable_tree(doc), console(), exact_bytes=exact_bytes)


def _min_size(text: str) -> int:
    from devplan.units import size_bytes

    nbytes = size_bytes(text)
    if nbytes is None:
        raise DevplanError(f"bad --min-size {text!r}; give a size such as 4KiB, 1MiB or 4096")
    return math.ceil(nbytes)
