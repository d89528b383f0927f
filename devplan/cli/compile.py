"""`devplan compile`: a torch.export program (.pt2) to an ExecuTorch program (.pte)."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from devplan.cli.app import BUDGET_HELP, Command, app, console, echo, echo_json
from devplan.cli.values import (
    complete_attention,
    complete_backends,
    complete_folding,
    complete_planners,
    constant_methods,
    given_order,
    in_order,
    name_value,
    named_once,
    size_option,
)
from devplan.errors import DevplanError

OUTPUT = "Output"
PLANNING = "Memory planning"
DEVICES = "Devices, backends and kernels"
QUANTIZE = "Quantization"
METHODS = "Methods and LLMs"
DIAGNOSE = "Diagnostics"


@app.command("compile", cls=Command)
def compile_command(
    ctx: typer.Context,
    model: Annotated[
        Path, typer.Argument(metavar="MODEL.pt2", help="A program saved with torch.export.save.", show_default=False)
    ],
    output: Annotated[
        Optional[Path],
        typer.Option(
            "--output",
            "-o",
            rich_help_panel=OUTPUT,
            metavar="PROGRAM.pte",
            help="Where to write the program (default: MODEL with .pte); "
            "- writes it to standard output, and the summary to standard error.",
            show_default=False,
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", rich_help_panel=OUTPUT, help="Print the compile summary as JSON.")
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            "-q",
            rich_help_panel=OUTPUT,
            help="Print nothing but errors: no summary, and no progress (shown on stderr only when it is a terminal).",
        ),
    ] = False,
    alignment: Annotated[
        Optional[int],
        typer.Option(
            "--alignment",
            rich_help_panel=PLANNING,
            metavar="BYTES",
            help="Alignment of every planned tensor's offset, in every buffer (a power of two; never below the "
            "widest element the program holds, so an int64 starts at a multiple of 8). Default: each buffer its "
            "device's, 16 on the host and 512 on CUDA (where torch's allocator puts eager's tensors, whose "
            "kernels choose by it); 16 plans CUDA buffers as ExecuTorch does.",
            show_default=False,
        ),
    ] = None,
    planner: Annotated[
        str,
        typer.Option(
            "--planner",
            rich_help_panel=PLANNING,
            metavar="NAME",
            autocompletion=complete_planners,
            help="Placement algorithm: best (runs the others but naive and keeps the smallest "
            "plan per buffer), greedy-size, greedy-breadth, greedy-order, hill-climb, or naive (no reuse).",
        ),
    ] = "best",
    budget: Annotated[  # app.Budgets, in compile's planning panel
        Optional[list[str]],
        typer.Option("--budget", rich_help_panel=PLANNING, metavar="BUFFER=SIZE", help=BUDGET_HELP, show_default=False),
    ] = None,
    fold: Annotated[
        str,
        typer.Option(
            "--fold",
            rich_help_panel=PLANNING,
            metavar="HOW",
            autocompletion=complete_folding,
            help="Constant folding: auto (plans local, all and none and keeps the least arena plus "
            "constants; the summary says which), local (a subgraph folded where its own bytes say so), all "
            "(every one, as ExecuTorch's const-prop: a smaller arena, a larger file), or none.",
        ),
    ] = "auto",
    attention: Annotated[
        str,
        typer.Option(
            "--attention",
            rich_help_panel=PLANNING,
            metavar="HOW",
            autocompletion=complete_attention,
            help="Scaled-dot-product attention: auto (computed a block of keys at a time, with portable "
            "kernels, wherever its scores would pass --attention-block: memory that grows with the context, not its "
            "square) or materialized (the whole score matrix, as the export has it). The summary says "
            "which each attention got.",
        ),
    ] = "auto",
    attention_block: Annotated[
        str,
        typer.Option(
            "--attention-block",
            rich_help_panel=PLANNING,
            metavar="SIZE",
            help="With --attention auto: the most bytes of scores one block of keys holds (the fewer, "
            "the less memory and the more instructions).",
        ),
    ] = "8MiB",  # options.ATTENTION_BLOCK
    inplace: Annotated[
        bool,
        typer.Option(
            "--inplace/--no-inplace",
            rich_help_panel=PLANNING,
            help="Let elementwise ops write over an input that dies there, and cat pieces be computed in place.",
        ),
    ] = True,
    reorder: Annotated[
        bool,
        typer.Option(
            "--reorder/--keep-order",
            rich_help_panel=PLANNING,
            help="Run the instructions in the order that holds the fewest bytes at once "
            "(--keep-order: the exported order).",
        ),
    ] = True,
    delegate: Annotated[
        Optional[list[str]],
        typer.Option(
            "--delegate",
            rich_help_panel=DEVICES,
            metavar="DEVICE[=OPS]",
            callback=in_order,
            help="Run ops on DEVICE as delegates: cuda:0 takes every op, "
            "cuda:0=aten::linear,aten::relu only those. Tensors crossing to and from the device are copied "
            "(et_copy ops) and planned in a buffer of that device. Repeatable; earlier ones choose first.",
            show_default=False,
        ),
    ] = None,
    backend: Annotated[
        Optional[list[str]],
        typer.Option(
            "--backend",
            rich_help_panel=DEVICES,
            metavar="NAME",
            callback=in_order,
            autocompletion=complete_backends,
            help="Let ExecuTorch's backend NAME (xnnpack) take "
            "the ops it supports, compiled by its own partitioner and preprocess into its delegates; devplan "
            'plans everything around them. Needs pip install "devplan[executorch]". Combines with --delegate '
            "and --partitioner in the order given.",
            show_default=False,
        ),
    ] = None,
    partitioner: Annotated[
        Optional[list[str]],
        typer.Option(
            "--partitioner",
            rich_help_panel=DEVICES,
            metavar="MODULE:CLASS[:JSON]",
            callback=in_order,
            help="Like --backend, for "
            "any ExecuTorch partitioner installed: the class, and its keyword arguments as a JSON object.",
            show_default=False,
        ),
    ] = None,
    jobs: Annotated[
        Optional[int],
        typer.Option(
            "--jobs",
            "-j",
            rich_help_panel=DEVICES,
            metavar="N",
            min=1,
            help="Processes compiling --backend and --partitioner partitions at once (default: one per "
            "core). The program is the same bytes whatever N.",
            show_default=False,
        ),
    ] = None,
    strict_backend: Annotated[
        bool,
        typer.Option(
            "--strict-backend",
            rich_help_panel=DEVICES,
            help="Fail when a --backend or --partitioner backend refuses a partition, instead of "
            "leaving the ops it refused on portable kernels (named in the summary).",
        ),
    ] = False,
    device_io: Annotated[
        bool,
        typer.Option(
            "--device-io",
            rich_help_panel=DEVICES,
            help="With --delegate: plan an input that only one device's delegates read on "
            "that device, and return results from the device their delegate made them on; the caller's "
            "copies in and out replace et_copy ops.",
        ),
    ] = False,
    source: Annotated[
        bool,
        typer.Option(
            "--source/--no-source",
            rich_help_panel=OUTPUT,
            help="Keep, per instruction, the module, op and source line it came "
            "from, and the names of inputs and weights, in the program's stacktrace (inspect shows them).",
        ),
    ] = True,
    method: Annotated[
        Optional[list[str]],
        typer.Option(
            "--method",
            rich_help_panel=METHODS,
            metavar="NAME=FILE.pt2",
            help="Compile FILE.pt2 into the same program as method NAME "
            "(MODEL.pt2 is forward); weights the methods share are stored once. Repeatable.",
            show_default=False,
        ),
    ] = None,
    constant_method: Annotated[
        Optional[list[str]],
        typer.Option(
            "--constant-method",
            rich_help_panel=METHODS,
            metavar="NAME=VALUE",
            help="Add a method NAME that returns VALUE and runs "
            "nothing, as ExecuTorch's LLM runner reads them (get_max_seq_len=128, use_kv_cache=true, "
            "get_eos_ids=[128001,128009]): a JSON int (within 64 bits), float, true/false, or list of them; "
            "text that is not JSON is a string (null and objects are refused). "
            "Repeatable.",
            show_default=False,
        ),
    ] = None,
    metadata: Annotated[
        Optional[Path],
        typer.Option(
            "--metadata",
            rich_help_panel=METHODS,
            metavar="FILE.json",
            help="Constant methods from a JSON object of NAME: VALUE (--constant-method adds to them and wins).",
            show_default=False,
        ),
    ] = None,
    llm: Annotated[
        bool,
        typer.Option(
            "--llm",
            rich_help_panel=METHODS,
            help="Write the constant methods ExecuTorch's LLM runner reads (vocabulary, "
            "layers, context and token lengths, KV cache, sdpa flavour, dynamic shape) from the "
            "export itself; give only the tokenizer's ids (get_bos_id, get_eos_ids). A value given "
            "that the export contradicts is refused.",
        ),
    ] = False,
    external_constants: Annotated[
        Optional[Path],
        typer.Option(
            "--external-constants",
            rich_help_panel=OUTPUT,
            metavar="FILE.ptd",
            help="Write the weights to FILE.ptd, ExecuTorch's "
            "FlatTensor data file, instead of the program, each under its name, which the program's tensors "
            "name: one copy for every method (run it with --data FILE.ptd; ExecuTorch's runtime loads the "
            "program with it).",
            show_default=False,
        ),
    ] = None,
    etrecord: Annotated[
        Optional[Path],
        typer.Option(
            "--etrecord",
            rich_help_panel=OUTPUT,
            metavar="FILE",
            help='Also write ExecuTorch\'s ETRecord of the program (needs pip install "devplan[executorch]"): '
            "its Inspector then maps an ETDump's events (run --executorch --etdump) to the model's ops and "
            "modules, and calculate_numeric_gap compares outputs with the export on run's default inputs.",
            show_default=False,
        ),
    ] = None,
    kernels: Annotated[
        Optional[list[str]],
        typer.Option(
            "--kernels",
            rich_help_panel=DEVICES,
            metavar="MODULE",
            help="Import the Python module MODULE before loading, for the op "
            "libraries its import registers: a graph calling custom ops loads only once they exist. "
            "An op namespace devplan knows stands for its library's module (transformers: its MoE "
            "grouped_mm_fallback). Repeatable.",
            show_default=False,
        ),
    ] = None,
    quantize: Annotated[
        Optional[str],
        typer.Option(
            "--quantize",
            rich_help_panel=QUANTIZE,
            metavar="MODE",
            help="Quantize the export first with ExecuTorch's XNNPACK quantizer "
            "(torch's PT2E flow) and let XNNPACK's backend run it (--backend xnnpack is implied): "
            "dynamic-int8 (int8 weights per channel, activations quantized at run time; needs no data), "
            "dynamic-int4 (the same with 4-bit weights, linear layers only), int8 (static: needs --calibration) "
            "or 8da4w (LLMs: torchao's recipe, as ExecuTorch's export_llama -qmode 8da4w -E 8,0: 8-bit dynamic "
            "activations, 4-bit weights in groups of --group-size, 8-bit embedding tables). The summary says what "
            "it cost: the error against the float model and the ops left in float.",
            show_default=False,
        ),
    ] = None,
    calibration: Annotated[
        Optional[Path],
        typer.Option(
            "--calibration",
            rich_help_panel=QUANTIZE,
            metavar="FILE.pt",
            help="With --quantize: the inputs to calibrate on and to "
            "measure the error on, a list of input tuples saved with torch.save (without it, dynamic modes "
            "use seeded samples).",
            show_default=False,
        ),
    ] = None,
    group_size: Annotated[
        Optional[int],
        typer.Option(
            "--group-size",
            rich_help_panel=QUANTIZE,
            metavar="N",
            help="With --quantize 8da4w: the weights' groups, N inputs each, a multiple of 32 as XNNPACK requires "
            "(default 32, as export_llama -G 32); a linear whose input size N does not divide stays float, as in "
            "the recipe.",
            show_default=False,
        ),
    ] = None,
    dump_dir: Annotated[
        Optional[Path],
        typer.Option(
            "--dump-dir",
            rich_help_panel=DIAGNOSE,
            metavar="DIR",
            help="Write the program after each stage to DIR, one readable file per stage.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Compile a torch.export program (.pt2) to an ExecuTorch program (.pte).

    Lowers to the portable kernels, folds constants, partitions ops onto devices (--delegate),
    plans memory per device, verifies the plan, and writes the program atomically. Prints a
    summary: buffers, planned bytes next to the lower bound, delegates, constant bytes,
    seconds taken."""
    from devplan.backend import Backend, Partitioner
    from devplan.compiler import compile
    from devplan.files import is_stdout, refuse_overwrite, refuse_shared_output
    from devplan.gate.load import check_input
    from devplan.planning import parse_budget

    parse = {
        "delegate": (Backend.parse, delegate),
        "backend": (Partitioner.parse, backend),
        "partitioner": (Partitioner.parse_class, partitioner),
    }
    backends = [make(text) for name in given_order(ctx, parse) for make, texts in [parse[name]] for text in texts or ()]
    budgets = dict(parse_budget(text) for text in budget or ())
    methods = named_once([name_value(text, "--method", Path) for text in method or ()], "--method")
    constants = constant_methods(metadata, constant_method or [])
    if output is not None and is_stdout(output) and sys.stdout.isatty():
        # as gzip refuses: a program's bytes are noise on a terminal, and some of them its commands
        raise DevplanError(
            f"-o {output}: standard output is a terminal, and a program is binary; redirect it "
            f"(-o {output} > PROGRAM.pte) or pipe it to the command that reads it"
        )
    for path in (model, *methods.values()):
        check_input(path)  # a .pte given as the model is told so, not that -o would overwrite it
    target = output if output is not None else model.with_suffix(".pte")
    # every file the compile reads is an input no output may replace (the metadata can be rebuilt only by hand)
    read = [model, *methods.values(), metadata, calibration]
    refuse_overwrite(target, read, "-o")
    refuse_overwrite(external_constants, read, "--external-constants")
    refuse_overwrite(etrecord, read, "--etrecord")
    refuse_shared_output({"-o": target, "--external-constants": external_constants, "--etrecord": etrecord})
    # the program on standard output leaves it no room for the summary, which goes to stderr
    to_stdout = is_stdout(target)
    shown = functools.partial(echo, err=to_stdout)
    from devplan.cli.progress import compile_progress

    with compile_progress(quiet or json_output) as progress:
        result = compile(
            model,
            target,
            alignment=alignment,
            planner=planner,
            budgets=budgets,
            inplace=inplace,
            reorder=reorder,
            fold=fold,
            attention=attention,
            attention_block=size_option(attention_block, "--attention-block", "8MiB or 2MiB"),
            delegates=backends,
            jobs=jobs,
            strict_backend=strict_backend,
            device_io=device_io,
            source=source,
            dump_dir=dump_dir,
            methods=methods,
            constant_methods=constants,
            kernels=kernels,
            llm=llm,
            external_constants=external_constants,
            etrecord=etrecord,
            quantize=quantize,
            calibration=calibration,
            group_size=group_size,
            on_stage=progress.stage,
            on_written=progress.written,
            on_calibrated=progress.calibrated,
        )
    if quiet:
        return
    summary = result.summary()
    if json_output:
        echo_json(summary, err=to_stdout)
        return
    from devplan.inspection.difftext import wrapped
    from devplan.inspection.reports import compile_lines

    lines = compile_lines(
        summary,
        [m["name"] for m in summary["methods"] if m["name"] not in ("forward", *methods)],
        "standard output" if to_stdout else str(target),
        str(external_constants) if external_constants is not None else None,
    )
    for line in wrapped(lines, console(stderr=to_stdout).width):  # as check's lines: at the console's width
        shown(line)
