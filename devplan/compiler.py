"""`devplan.compile`: the pipeline as a row of stages, each a plain function.

per method (forward, then --method's):
load [-> llm] [-> quantize] [-> backends: ExecuTorch's partitioners and preprocess] -> split (from_exported)
     [-> adopt: the backends' delegates as foreign calls]
     -> GRAPH_PASSES (decompose, permutes, broadcasts, fold, views, sizes), each Lowered -> Lowered
     [-> partition -> each delegate_group: results_on_device, lower_method (as a payload), to_program, dumps_pte]
     -> lower_method: build_method -> method_passes (copies, alias, compact, [place,] concat, schedule,
                      inplace), each Method -> Method -> plan_method
then every planned method, constant methods too -> to_program -> pte_image (the pieces of the
     file: the weights stay the tensors they are, never copied) -> write (streamed, piece by piece);
     with external_constants, to_program gives the weights to ExternalWeights, whose image (the
     .ptd) is written first
"""

from __future__ import annotations

import copy
import os
import time
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Callable, Mapping, cast

import torch
from torch.utils import _pytree as pytree

from devplan.backend import Backend
from devplan.caches import releasing
from devplan.documents import CompiledFile, CompiledMethod, CompileSummary, Folding
from devplan.dump import stage_text
from devplan.emit.build import build_method, constant_method
from devplan.emit.program import ExternalWeights, stored_size, to_program
from devplan.errors import BudgetExceeded, DevplanError, InternalError
from devplan.files import is_stdout, refuse_overwrite, write_atomic
from devplan.gate.load import import_kernels, load
from devplan.inspection.kernels import libraries
from devplan.inspection.own_memory import working_memory
from devplan.ir.lowered import Lowered, Payload
from devplan.ir.planned import PlannedMethod
from devplan.ir.role import PROGRAM, Role
from devplan.llm import llm_metadata
from devplan.measure import measured
from devplan.options import CompileOptions
from devplan.parallel import cores
from devplan.passes import GRAPH_PASSES, method_passes
from devplan.passes.adopt import adopt_delegates
from devplan.passes.attention import Attention, chunk_attention
from devplan.passes.backends import lower_to_backends
from devplan.passes.delegates import Group, delegate_groups
from devplan.passes.device_results import results_on_device
from devplan.passes.fold import read_constants
from devplan.passes.partition import partition
from devplan.passes.quantize import QuantizeReport, Reference, quantize
from devplan.passes.refusals import Fallback
from devplan.passes.split import from_exported
from devplan.planning.budget import BACKENDS, budget_key
from devplan.planning.plan_method import plan_method
from devplan.planning.verify import PlanError
from devplan.pte import dumps_pte
from devplan.pte.writer import Spread, pte_image
from devplan.quantization import GROUP_SIZE
from devplan.wellformed import Malformed, check_stage


@dataclass(frozen=True)
class CompileResult:
    image: Spread  # the .pte as the pieces written, the weights' own tensors among them
    path: Path | None  # where they were written, if anywhere
    planned: PlannedMethod  # forward's plan
    constant_bytes: int
    seconds: float
    stage_seconds: dict[str, float] = field(default_factory=dict)
    # fold_constants' record (passes/fold.py), all methods' summed, and under "choices" each
    # method's policies planned (arena, constant bytes) and the one kept
    folding: dict = field(default_factory=dict)
    methods: tuple[PlannedMethod, ...] = ()  # every method's plan, in the program's order (forward first)
    # with external_constants: the .ptd as the pieces written, and how many keys it holds
    external: Spread | None = None
    external_keys: int = 0
    quantization: QuantizeReport | None = None  # with --quantize: what quantizing cost
    attention: Mapping[str, tuple[Attention, ...]] = field(default_factory=dict)  # by method: each attention's form
    fallbacks: Mapping[str, tuple[Fallback, ...]] = field(default_factory=dict)  # by method: ops backends refused

    @cached_property
    def data(self) -> bytes:
        """The .pte's bytes, joined when first asked: a compile that writes its file never
        holds a second copy of the weights. The weights are read from the model's own tensors
        then; the initial state is what it was at compile time."""
        return bytes(self.image)

    def summary(self) -> CompileSummary:
        """`devplan compile --json` (docs/compile-json.md): the facts it prints, under the keys
        the inspection document gives the same facts; timings apart under `timings`, the one
        key that differs between two runs."""
        file: CompiledFile = {
            "name": self.path.name if self.path else "<bytes>",
            "size": len(self.image),
            "constant_bytes": self.constant_bytes,
        }
        if self.external is not None:
            file["external"] = {"size": len(self.external), "keys": self.external_keys}
        summary: CompileSummary = {
            "schema_version": 1,
            "file": file,
            "methods": [
                _method_summary(
                    planned,
                    self.attention.get(planned.method.name, ()),
                    self.fallbacks.get(planned.method.name, ()),
                )
                for planned in self.methods or (self.planned,)
            ],
            "folding": cast(
                Folding,
                {
                    **{key: int(self.folding.get(key, 0)) for key in _FOLDING},
                    "choices": list(self.folding.get("choices", [])),
                },
            ),
            "timings": {
                "seconds": round(self.seconds, 3),
                "stages": {name: round(seconds, 4) for name, seconds in self.stage_seconds.items()},
            },
        }
        if self.quantization is not None:
            summary["quantization"] = self.quantization.summary()
        return summary


def _method_summary(
    planned: PlannedMethod, attention: tuple[Attention, ...], fallbacks: tuple[Fallback, ...]
) -> CompiledMethod:
    method = planned.method
    return {
        "name": method.name,
        "planner": planned.algorithm,
        "counts": {
            "values": len(method.values),
            "instructions": len(method.kernels),
            "operators": len({k.op for k in method.kernels if k.delegate is None}),
            "delegates": len(method.delegates),
        },
        "buffers": [
            {
                "mem_id": b.mem_id,
                "device": str(b.device),
                "size": b.size,
                "lower_bound": b.lower_bound,
                "tensors": b.tensors,
            }
            for b in planned.buffers
        ],
        "delegates": [
            {
                "index": i,
                "id": d.backend,
                "target_device": str(d.device),
                "payload_size": len(d.payload),
                "working_memory": working_memory(d.backend, d.payload),
                "window": {"mem_id": d.window[0], "offset": d.window[1], "size": d.arena} if d.window else None,
            }
            for i, d in enumerate(method.delegates)
        ],
        "kernels": libraries(k.op for k in method.kernels if k.delegate is None),
        "backends": sorted({d.backend for d in method.delegates}),
        "attention": [
            {"node": a.node, "module": a.module, "keys": a.keys, "block": a.block, "why": a.why} for a in attention
        ],
        "fallbacks": [{"backend": f.backend, "ops": list(f.ops), "why": f.why} for f in fallbacks],
    }


_FOLDING = ("subgraphs", "shared_inputs", "constant_bytes_added", "run_bytes_removed")


@releasing  # torch keeps each graph a compile builds for the life of the process (issue 52)
def compile(
    model,
    output: str | os.PathLike | None = None,
    options: CompileOptions | None = None,
    *,
    methods: Mapping[str, object] | None = None,
    constant_methods: Mapping[str, object] | None = None,
    on_stage: Callable[[str], None] | None = None,
    on_written: Callable[[int, int], None] | None = None,
    on_calibrated: Callable[[int, int], None] | None = None,
    **choices,
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
    whatever it is); `alignment`, `planner`, `dump_dir`."""
    options = CompileOptions.of(options, **choices)
    start = time.perf_counter()
    import_kernels(options.kernels)
    files = {"forward": model, **_named(methods, "method")}  # as given: errors name the file
    kept = (*files.values(), options.calibration, options.external_constants, output)
    kept = tuple(path for path in kept if isinstance(path, (str, os.PathLike)))  # not a program or inputs given
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
    fold_choices: list[dict] = []
    planned = []
    quantization = None
    attention = {}
    fallbacks = {}
    for name, source in sources.items():  # forward's stages keep their plain names
        try:
            plan, folded, quantization, attention[name], fallbacks[name] = _plan_program(
                source, options, stage if name == "forward" else stage.within(name), name, on_calibrated
            )
        except DevplanError as error:  # a graph stage names the node or op; the line names the file too
            given = files[name]
            if isinstance(given, (str, os.PathLike)) and not str(error).startswith(os.fspath(given)):
                error.args = (f"{os.fspath(given)}: {error}",)
            raise
        planned.append(plan)
        folding = {key: folding.get(key, 0) + folded.get(key, 0) for key in _FOLDING}
        fold_choices += folded["choices"]
    planned += [stage(f"{name}.plan", plan_method, constant_method(name, value)) for name, value in constants.items()]
    external = ExternalWeights() if options.external_constants is not None else None
    program, segments = stage("emit", to_program, *planned, source=options.source, external=external)
    image = stage("serialize", pte_image, program, segments)
    if any(budget_key(target).endswith(BACKENDS) for target, _ in options.budgets):
        from devplan.inspection.check import check_backend_budgets

        stage("budget", check_backend_budgets, bytes(image), dict(options.budgets))
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
    report = None
    if quantization is not None:  # what compile reports is what the program written computes
        # the file as written, mapped; the bytes when there is none to read back (standard output)
        written = path if path is not None and not is_stdout(path) else bytes(image)
        report = stage("measure", measured, *quantization, written, options.external_constants)
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


def _llm(model, constants: dict, stage: "Stages") -> tuple[object, dict]:
    """The loaded forward export, and the constant methods with what --llm reads from it."""
    try:
        ep = stage("load", load, model) if isinstance(model, (str, os.PathLike)) else model
        return ep, stage("llm", llm_metadata, ep, constants)
    except DevplanError as error:
        if isinstance(model, (str, os.PathLike)) and not str(error).startswith(os.fspath(model)):
            error.args = (f"{os.fspath(model)}: {error}",)
        raise


def _named(given: Mapping[str, object] | None, kind: str) -> dict[str, object]:
    """A mapping of method names, each checked: the runtime looks methods up by these names."""
    named = dict(given or {})
    for name in named:
        if not isinstance(name, str) or not name.isidentifier():
            raise DevplanError(f"{kind} name {name!r}: use a name of letters, digits and _ (e.g. get_max_seq_len)")
    if "forward" in named:
        raise DevplanError(f"{kind} name forward: the model itself is forward; give the other methods other names")
    return named


def _plan_program(
    model, options: CompileOptions, stage: "Stages", name: str, on_calibrated: Callable[[int, int], None] | None
) -> tuple[PlannedMethod, dict, tuple[QuantizeReport, Reference] | None, tuple[Attention, ...], tuple[Fallback, ...]]:
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
    own = tuple(d for d in options.delegates if isinstance(d, Backend))
    fallbacks: tuple[Fallback, ...] = ()
    if len(own) < len(options.delegates):  # ExecuTorch's backends compile their groups first
        delegated = stage(
            "backends", lower_to_backends, ep, options.delegates, options.jobs or cores(), options.strict_backend
        )
        ep, fallbacks = delegated.program, delegated.fallbacks
    low = stage("split", from_exported, ep)
    options = _aligned_to_elements(options, low)
    if len(own) < len(options.delegates):
        low = stage("adopt", adopt_delegates, low)
    before, fold, _ = _around_fold()
    for pass_name, graph_pass in before:
        low = stage(pass_name, graph_pass, low)
    if options.fold != "auto":
        plan, folding = _folded(low, options.fold, options, stage, own, name)
        choices = [_choice(name, options.fold, plan, folding, True)]
        return plan, {**folding, "choices": choices}, report, attention, fallbacks
    plan, folding = _fold_auto(low, options, stage, own, name)
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


def _fold_auto(
    low: Lowered, options: CompileOptions, stage: "Stages", own: tuple, name: str
) -> tuple[PlannedMethod, dict]:
    """--fold auto: each policy planned, the one whose arena plus constants is least kept (the
    smaller arena where they tie); a policy that folds what another did is not planned again, nor
    none where one folds without growing the constants. Each is planned under the stages' own
    names, its timings and dumps kept only for the one kept."""
    _, fold, _ = _around_fold()
    tried: dict[tuple[int, ...], tuple[str, PlannedMethod, dict, Stages]] = {}
    over: list[BudgetExceeded] = []  # a policy whose plan is over a --budget is not kept
    for policy in FOLD_POLICIES:
        if policy == "none" and any(f["constant_bytes_added"] <= 0 for _, _, f, _ in tried.values()):
            continue  # a folding that stores no more than it replaces only drops run-time values: none cannot beat it
        quiet = replace(stage, dump_dir=None, seconds={})
        folded = quiet("fold", fold, _copied(low), policy=policy)
        same = tuple(folded.folding.get(key, 0) for key in _FOLDING)
        if same not in tried:
            try:
                tried[same] = (policy, *_folded(folded, None, options, quiet, own, name), quiet)
            except BudgetExceeded as error:
                over.append(error)
    if not tried:
        raise over[0]  # the local rule's
    policy, plan, folding, kept = min(tried.values(), key=lambda t: (_cost(t[1], t[2]), _arena(t[1])))
    choices = [_choice(name, p, planned, f, p == policy) for p, planned, f, _ in tried.values()]
    if stage.dump_dir is None:
        stage.seconds.update(kept.seconds)
    else:  # its stages again, dumped (the same results: a compile is deterministic)
        plan, folding = _folded(low, policy, options, stage, own, name)
    return plan, {**folding, "choices": choices}


# the policies --fold auto plans, the local rule first: it is kept where all cost the same
FOLD_POLICIES = ("local", "all", "none")


def _folded(
    low: Lowered, policy: str | None, options: CompileOptions, stage: "Stages", own: tuple, name: str
) -> tuple[PlannedMethod, dict]:
    """The graph folded by `policy` (None: folded already), through the rest of the graph stages
    and its delegates' payloads to its plan; with what folding stored."""
    _, fold, after = _around_fold()
    if policy is not None:
        low = stage("fold", fold, low, policy=policy)
    for pass_name, graph_pass in after:
        low = stage(pass_name, graph_pass, low)
    folding = {**low.folding, "stored": stored_size(read_constants(low))}
    if options.delegates:
        low = stage("partition", partition, low, own)
        # the recursion: each delegate's group is lowered by the program's own stages, as a payload
        payloads = {group.call: _payload(group, options, stage.within(group.call)) for group in delegate_groups(low)}
        low = replace(low, payloads={**low.payloads, **payloads})
    return lower_method(low, options, stage, name=name), folding


def _around_fold() -> tuple[tuple, Callable[..., Lowered], tuple]:
    """GRAPH_PASSES split at fold: the passes before it, fold, the passes after it (read when
    called, so that a test's replacement of the tuple is what runs)."""
    at = [pass_name for pass_name, _ in GRAPH_PASSES].index("fold")
    return GRAPH_PASSES[:at], GRAPH_PASSES[at][1], GRAPH_PASSES[at + 1 :]


def _arena(plan: PlannedMethod) -> int:
    return sum(buffer.size for buffer in plan.buffers)


def _cost(plan: PlannedMethod, folding: dict) -> int:
    return _arena(plan) + folding["stored"]


def _choice(method: str, policy: str, plan: PlannedMethod, folding: dict, chosen: bool) -> dict:
    return {
        "method": method,
        "policy": policy,
        "arena": _arena(plan),
        "constant_bytes": folding["stored"],
        "chosen": chosen,
    }


def _copied(low: Lowered) -> Lowered:
    """The program with a graph of its own, for a pass that edits it in place; the weights shared."""
    graph = torch.fx.Graph()
    graph._codegen = copy.deepcopy(low.gm.graph._codegen)
    graph.output(graph.graph_copy(low.gm.graph, {}))
    return replace(low, gm=torch.fx.GraphModule(low.gm, graph))


def _payload(group: Group, options: CompileOptions, stage: "Stages") -> Payload:
    """A delegate's group through lower_method on its backend's device, then emitted and
    serialized as a program of its own; its stages named after its call (delegate_0.build)."""
    try:
        program = stage("device results", results_on_device, group.program, group.device)
        planned = lower_method(program, options, stage, Role.payload_on(group.device))
        data = stage("serialize", dumps_pte, *stage("emit", to_program, planned, source=options.source))
    except DevplanError as error:
        raise group.refused(error) from None
    return group.payload(planned, data)


def lower_method(
    low: Lowered, options: CompileOptions, stage: "Stages", role: Role = PROGRAM, name: str = "forward"
) -> PlannedMethod:
    """A Lowered graph to its planned method, for the program and, by `role`, for a delegate's
    payload: every tensor it computes on its backend's device, its inputs and outputs its caller's."""
    method = stage("build", build_method, low, name, device_io=options.device_io and not role.payload)
    for pass_name, method_pass in method_passes(options, role):
        method = stage(pass_name, method_pass, method)
    return stage(
        "plan",
        plan_method,
        method,
        alignment=options.alignment,
        algorithm=options.planner,
        budgets=() if role.payload else options.budgets,
        home=role.home,
        borrowed_io=role.payload,
    )


@dataclass
class Stages:
    """Runs a compile's stages: each timed, reported to `on_stage`, dumped to `dump_dir`, and
    a failure that is not a DevplanError, or the plan verifier refusing devplan's own plan,
    named as devplan's own bug in that stage (EXIT_INTERNAL)."""

    dump_dir: Path | None = None
    on_stage: Callable[[str], None] | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    prefix: str = ""
    checks: bool = False  # each result checked (devplan/wellformed.py), so a broken pass is named by its stage
    kept: tuple = ()  # the files the compile reads and writes, which no dump may replace

    def __call__(self, name: str, fn, *args, **kwargs):
        name = self.prefix + name
        if self.on_stage:
            self.on_stage(name)
        began = time.perf_counter()
        try:
            result = fn(*args, **kwargs)
        except PlanError as error:  # the verifier refusing a plan devplan made: devplan's bug, not the input's
            raise InternalError.of(name, error) from error
        except (DevplanError, KeyboardInterrupt, MemoryError):
            raise
        except Exception as error:  # anything else is devplan's own bug: say where it happened
            raise InternalError.of(name, error) from error
        self.seconds[name] = time.perf_counter() - began
        if self.dump_dir is not None:  # the write stage returns nothing: what it wrote where
            _dump(self.dump_dir, len(self.seconds), name, result if result is not None else args[0], self.kept)
        if self.checks:
            try:
                check_stage(result)
            except Malformed as error:
                raise InternalError(name) from error
        return result

    def within(self, prefix: str) -> "Stages":
        """The same run, its stage names prefixed (a delegate payload's: delegate_0.build)."""
        return replace(self, prefix=f"{self.prefix}{prefix}.")


def _dump(folder: Path, step: int, name: str, result, kept: tuple) -> None:
    """One readable file per stage (devplan/dump.py), so that a regression shows as a file diff;
    never over one of the compile's own files (a model named 01-load.txt in the folder was
    replaced by its dump)."""
    path = folder / f"{step:02d}-{name}.txt"
    refuse_overwrite(path, kept, "--dump-dir")
    # devplan names these files: a link planted as one of them is replaced, never written through
    write_atomic(path, stage_text(result, name).encode(), follow_links=False, parents=True)
