"""`devplan.compile`: the row of stages for each method, then the program emitted and written."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping, TypeVar

import torch
from torch.utils import _pytree as pytree

from devplan.backend import Backend
from devplan.caches import releasing
from devplan.compiler.budgets import check_backend_budgets
from devplan.compiler.fold_choice import choice, fold_auto
from devplan.compiler.lower import Lowering, after_fold
from devplan.compiler.result import FOLDING, CompileResult
from devplan.compiler.stages import Stages
from devplan.emit.build import constant_method
from devplan.emit.program import ExternalWeights, to_program
from devplan.errors import DevplanError
from devplan.etrecord import require_etrecord, write_etrecord
from devplan.files import is_stdout, write_atomic
from devplan.gate.load import import_kernels, load
from devplan.ir.lowered import Lowered
from devplan.ir.planned import PlannedMethod
from devplan.llm import llm_metadata
from devplan.measure import measured
from devplan.options import CompileOptions
from devplan.parallel import cores
from devplan.passes import PIPELINE, Pipeline
from devplan.passes.export.attention import Attention, chunk_attention
from devplan.passes.export.backends import lower_to_backends
from devplan.passes.export.quantize import QuantizeReport, Reference, quantize
from devplan.passes.export.refusals import Fallback
from devplan.passes.export.split import from_exported
from devplan.passes.graph.adopt import adopt_delegates
from devplan.planning.budget import BACKENDS, budget_key
from devplan.planning.plan_method import plan_method
from devplan.pte.writer import pte_image
from devplan.quantization import GROUP_SIZE

T = TypeVar("T")
Model = str | os.PathLike[str] | torch.export.ExportedProgram  # a .pt2 path, or the export itself


@releasing  # torch keeps each graph a compile builds for the life of the process (issue 52)
def compile(
    model: Model,
    output: str | os.PathLike[str] | None = None,
    options: CompileOptions | None = None,
    *,
    methods: Mapping[str, Model] | None = None,
    constant_methods: Mapping[str, object] | None = None,
    on_stage: Callable[[str], None] | None = None,
    on_written: Callable[[int, int], None] | None = None,
    on_calibrated: Callable[[int, int], None] | None = None,
    pipeline: Pipeline = PIPELINE,
    **choices: Any,
) -> CompileResult:
    """Compile a .pt2 path or an ExportedProgram to an ET12 program, as its method `forward`.
    `methods` maps more method names to .pt2 paths or ExportedPrograms, each compiled the same
    way into the same program (their equal weights stored once); `constant_methods` maps names
    to values (int, float, bool, str, a list of ints) that methods running nothing return, as
    ExecuTorch's LLM runner reads them (get_max_seq_len, use_kv_cache, get_eos_ids). Writes
    `output` when given (atomically); nothing is written when any stage fails. `on_stage` is
    told each stage's name as it starts, `on_written` the bytes of `output` written so far and
    the file's size as they go out, `on_calibrated` (with `quantize`) the inputs calibrated on so
    far and how many there are. `options` (a
    CompileOptions) or keywords of the same names choose: `delegates` are backends ('cuda:0',
    'cuda:0=aten::linear,aten::relu', or Backend objects), each taking the ops it supports, in
    turn, to run them on its device; with `device_io`, inputs only they read are planned on
    their device and their results are returned from there. `reorder` runs the instructions
    in the order that holds the fewest bytes at once, `inplace` lets results take the bytes of
    inputs that die with them; `fold` ('auto', 'all' or 'none') chooses which constant
    subgraphs are computed here and stored. `source` keeps, per instruction, the module, op and line it came
    from, and the user's names of inputs and weights (ET12's stacktrace). `budgets` maps a
    buffer's mem_id or a device to the bytes it may plan; `kernels` names modules to import
    first, for the op libraries they register; `external_constants` is a path where the weights
    are written instead, as ExecuTorch's .ptd data file, which the program's tensors name by key
    (one copy for every method; the runtime loads the program with it); `jobs` is how many
    processes preprocess the backends' partitions (default one per core; the same bytes
    whatever it is); `alignment`, `planner`, `dump_dir`. `pipeline` holds the pass tables run."""
    options = CompileOptions.of(options, **choices)
    start = time.perf_counter()
    if options.etrecord is not None:  # the extra's one-line refusal before any work
        require_etrecord()
    import_kernels(options.kernels)
    files = {"forward": model, **_named(methods, "method")}  # as given: errors name the file
    kept = tuple(
        path
        for path in (*files.values(), options.calibration, options.external_constants, output)
        if isinstance(path, (str, os.PathLike))  # not a program or inputs given
    )
    stage = Stages(options.dump_dir, on_stage, checks=options.checks, kept=kept)
    sources = dict(files)
    constants = _named(constant_methods, "constant method")
    if options.quantize is not None and methods:
        raise DevplanError(
            "--quantize with --method: quantizing is done for forward alone so far; quantize each "
            "export with ExecuTorch's quantizer and compile them without --quantize"
        )
    taken = sorted(set(sources) & set(constants))
    if taken:
        raise DevplanError(f"method {taken[0]} is given both as a program and as a constant method; name them apart")
    if options.llm:  # read once, from the loaded export, which forward then compiles
        sources["forward"], constants = _llm(model, constants, stage)
    folding: dict[str, int] = {}
    fold_choices: list[dict[str, Any]] = []
    planned = []
    quantization = None
    attention = {}
    fallbacks = {}
    for name, source in sources.items():  # forward's stages keep their plain names
        try:
            plan, fold_record, quantization, attention[name], fallbacks[name] = _plan_program(
                source, options, pipeline, stage if name == "forward" else stage.within(name), name, on_calibrated
            )
        except DevplanError as error:  # a graph stage names the node or op; the line names the file too
            given = files[name]
            if isinstance(given, (str, os.PathLike)) and not str(error).startswith(os.fspath(given)):
                error.args = (f"{os.fspath(given)}: {error}",)
            raise
        planned.append(plan)
        folding = {key: folding.get(key, 0) + fold_record.get(key, 0) for key in FOLDING}
        fold_choices += fold_record["choices"]
    planned += [stage(f"{name}.plan", plan_method, constant_method(name, value)) for name, value in constants.items()]
    external = ExternalWeights() if options.external_constants is not None else None
    program, segments = stage("emit", to_program, *planned, source=options.source, external=external)
    image = stage("serialize", pte_image, program, segments, share=True)
    if any(budget_key(target).endswith(BACKENDS) for target, _ in options.budgets):
        stage("budget", check_backend_budgets, planned, dict(options.budgets))
    data = stage("serialize_ptd", external.image) if external is not None else None
    # what the program stores: equal tensors once, each aligned, and the named data that
    # ExecuTorch's backends keep beside their payloads (inspect's constant_bytes too)
    stored = len(segments[0]) + sum(len(segments[entry.segmentIndex]) for entry in program.namedData or ())
    path = Path(output) if output is not None else None
    if data is not None:  # before the program, whose tensors name its keys
        stage("write_ptd", write_atomic, options.external_constants, data.parts)
    if path is not None:
        told = None if on_written is None else lambda done: on_written(done, image.size)
        stage("write", write_atomic, path, image.parts, on_written=told)
    # the file as written, mapped; the bytes when there is none to read back (standard output)
    written = path if path is not None and not is_stdout(path) else None
    if options.etrecord is not None:
        stage("etrecord", write_etrecord, options.etrecord, sources["forward"], planned, written or bytes(image))
    report = None
    if quantization is not None:  # what compile reports is what the program written computes
        report = stage("measure", measured, *quantization, written or bytes(image), options.external_constants)
    return CompileResult(
        image,
        path,
        planned[0],
        stored,
        time.perf_counter() - start,
        stage.seconds,
        {**folding, "choices": fold_choices},
        tuple(planned),
        data,
        external.count if external is not None else 0,
        report,
        attention,
        fallbacks,
    )


def _llm(model: Model, constants: dict[str, Any], stage: Stages) -> tuple[Model, dict[str, Any]]:
    """The loaded forward export, and the constant methods with what --llm reads from it."""
    try:
        ep = stage("load", load, model) if isinstance(model, (str, os.PathLike)) else model
        return ep, stage("llm", llm_metadata, ep, constants)
    except DevplanError as error:
        if isinstance(model, (str, os.PathLike)) and not str(error).startswith(os.fspath(model)):
            error.args = (f"{os.fspath(model)}: {error}",)
        raise


def _named(given: Mapping[str, T] | None, kind: str) -> dict[str, T]:
    """A mapping of method names, each checked: the runtime looks methods up by these names."""
    named = dict(given or {})
    for name in named:
        if not isinstance(name, str) or not name.isidentifier():
            raise DevplanError(f"{kind} name {name!r}: use a name of letters, digits and _ (e.g. get_max_seq_len)")
    if "forward" in named:
        raise DevplanError(f"{kind} name forward: the model itself is forward; give the other methods other names")
    return named


def _plan_program(
    model: Model,
    options: CompileOptions,
    pipeline: Pipeline,
    stage: Stages,
    name: str,
    on_calibrated: Callable[[int, int], None] | None,
) -> tuple[
    PlannedMethod, dict[str, Any], tuple[QuantizeReport, Reference] | None, tuple[Attention, ...], tuple[Fallback, ...]
]:
    """One method: a .pt2 path or an ExportedProgram through the graph stages, its delegates'
    payloads compiled on the way, to its plan; with what folding chose, with --quantize,
    what quantizing cost and the float model's outputs to measure the program against, and
    what became of each attention, and the ops ExecuTorch's backends refused."""
    ep = stage("load", load, model) if isinstance(model, (str, os.PathLike)) else model
    report = None
    if options.quantize is not None:  # before the backends: XNNPACK's takes the quantized ops
        quantized = stage(
            "quantize",
            quantize,
            ep,
            options.quantize,
            options.calibration,
            on_calibrated,
            group_size=options.group_size or GROUP_SIZE,
        )
        ep, report = quantized.program, (quantized.report, quantized.reference)
    # before the backends, so that none takes a whole attention's scores into its own memory
    blocked = stage("attention", chunk_attention, ep, options.attention, options.attention_block)
    ep, attention = blocked.program, blocked.attention
    # ExecuTorch's backends compile their groups first; devplan's own (Backend) payloads come after fold
    to_executorch = any(not isinstance(d, Backend) for d in options.delegates)
    fallbacks: tuple[Fallback, ...] = ()
    if to_executorch:
        delegated = stage(
            "backends", lower_to_backends, ep, options.delegates, options.jobs or cores(), options.strict_backend
        )
        ep, fallbacks = delegated.program, delegated.fallbacks
    low = stage("split", from_exported, ep)
    options = _aligned_to_elements(options, low)
    if to_executorch:
        low = stage("adopt", adopt_delegates, low)
    lowering = Lowering(options, pipeline, name)
    for pass_name, graph_pass in pipeline.before_fold:
        low = stage(pass_name, graph_pass, low)
    if options.fold != "auto":
        plan, folding = after_fold(stage("fold", pipeline.fold, low, policy=options.fold), lowering, stage)
        return (
            plan,
            {**folding, "choices": [choice(name, options.fold, plan, folding, True)]},
            report,
            attention,
            fallbacks,
        )
    plan, folding = fold_auto(low, lowering, stage)
    return plan, folding, report, attention, fallbacks


def _aligned_to_elements(options: CompileOptions, low: Lowered) -> CompileOptions:
    """`options` with an alignment no smaller than the widest element the graph holds: the
    planner puts tensors at multiples of the alignment, and a tensor starts at a multiple of its
    element size or no runtime can read it (an int64 at byte 12 under --alignment 4). One floor
    for the whole graph, so a delegate's window sits where its payload's widest tensor can."""
    widest = max(
        (
            leaf.dtype.itemsize
            for node in low.gm.graph.nodes
            for leaf in pytree.tree_leaves(node.meta.get("val"))
            if isinstance(leaf, torch.Tensor)
        ),
        default=1,
    )
    # unset, every buffer's alignment (16 at least) already holds any element
    return options if options.alignment is None or options.alignment >= widest else replace(options, alignment=widest)
