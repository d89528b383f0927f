"""Text views of what compile, check and run report: each takes the command's result and
returns the lines it prints (inspect's tables are render.py's, diff's text difftext.py's, the
CI formats reports_ci.py's; the command only writes them). Names that come from files are shown through units.printable, so a
terminal escape in one is shown escaped, never obeyed."""

from __future__ import annotations

from devplan.documents import (
    CheckedRuntime,
    CompiledAttention,
    CompiledDelegate,
    CompileSummary,
    FoldChoice,
    Quantization,
    Reference,
    RunDocument,
)
from devplan.inspection.check import BufferCheck, GoldenCheck
from devplan.inspection.difftext import WIDTH, cause_lines, change_lines, outcome, peak_text, wrapped
from devplan.inspection.kernels import how_to_get, needs_text
from devplan.units import counted, exact_size_text, printable, size_text


def compile_lines(
    summary: CompileSummary, constant_methods: list[str], written: str, external: str | None
) -> list[str]:
    """compile's summary: each method's buffers against their lower bounds, its delegates, the
    constants, and the files written (`written`: the program's name, `external`: the .ptd's)."""
    lines = [f"constant methods: {', '.join(constant_methods)}"] if constant_methods else []
    for shown in (m for m in summary["methods"] if m["name"] not in constant_methods):
        lines.append(
            f"method {shown['name']}: {counted(shown['counts']['instructions'], 'instruction')}, "
            f"{counted(shown['counts']['operators'], 'operator')}, planner {shown['planner']}"
        )
        for b in shown["buffers"]:
            ratio = b["size"] / b["lower_bound"] if b["lower_bound"] else 1.0
            lines.append(
                f"  buffer {b['mem_id']} ({b['device']}): {exact_size_text(b['size'])} planned, "
                f"lower bound {exact_size_text(b['lower_bound'])}, ratio {ratio:.3f}, {counted(b['tensors'], 'tensor')}"
            )
        lines.extend(_fold_lines([c for c in summary["folding"]["choices"] if c["method"] == shown["name"]]))
        if shown["attention"]:
            lines.append(f"  attention: {attention_text(shown['attention'])}")
        for f in shown["fallbacks"]:  # what a backend refused, which the portable kernels run instead
            lines.append(
                f"  {f['backend']} refused {', '.join(f['ops'])}, left on portable kernels: {printable(f['why'])}"
            )
        if shown["kernels"] or shown["backends"]:  # what the runtime that loads it must have
            lines.append(f"  needs {printable(needs_text(shown['kernels'], shown['backends'], how=True))}")
        for device, backend in sorted({(d["target_device"], d["id"]) for d in shown["delegates"]}):
            mine = [d for d in shown["delegates"] if (d["target_device"], d["id"]) == (device, backend)]
            windows = [d["window"] for d in mine if d["window"]]
            shared = (
                f", working memory in buffer {windows[0]['mem_id']} ({len(windows)} "
                f"{'window' if len(windows) == 1 else 'windows'}, largest "
                f"{size_text(max(w['size'] for w in windows))})"
                if windows
                else ""
            )
            lines.append(
                f"  {len(mine)} {'delegate' if len(mine) == 1 else 'delegates'} on {device} ({backend}), "
                f"payloads {size_text(sum(d['payload_size'] for d in mine))}{shared}{_own_memory(mine)}"
            )
    if "quantization" in summary:
        lines.extend(quantization_lines(summary["quantization"]))
        gathers = sorted(
            {
                op
                for method in summary["methods"]
                for row in method["kernels"]
                for op in row["operators"]
                if op.startswith("quantized_decomposed::embedding_")
            }
        )
        if gathers:  # devplan's choice, beyond what ExecuTorch's own flow needs: say what it adds
            lines.append(
                f"  embedding tables in 8 bits a row, gathered by {', '.join(gathers)}: the runtime needs "
                f"ExecuTorch's quantized kernels ({how_to_get('quantized')})"
            )
    file = summary["file"]
    lines.append(f"constants: {exact_size_text(file['constant_bytes'])}")
    if file.get("external") is not None:
        lines.append(
            f"wrote {external} ({exact_size_text(file['external']['size'])}, "
            f"{file['external']['keys']} keys): the weights"
        )
    # the time from loading the model to the program written: not Python's start-up nor torch's import
    lines.append(
        f"wrote {written} ({exact_size_text(file['size'])}); compiling took "
        f"{summary['timings']['seconds']:.2f} s (loading the model to writing the program)"
    )
    return lines


def attention_text(attention: list[CompiledAttention]) -> str:
    """How each attention is computed, alike ones counted together: '2 in blocks of 256 of
    their 2048 keys, 1 materialized (scores within one block)'."""
    groups: dict[tuple[int | None, int | str], int] = {}
    for a in attention:
        form = (a["block"], a["keys"]) if a["block"] is not None else (None, a["why"])
        groups[form] = groups.get(form, 0) + 1
    return ", ".join(
        f"{count} in blocks of {block} of {'its' if count == 1 else 'their'} {detail} keys"
        if block is not None
        else f"{count} materialized ({printable(str(detail))})"
        for (block, detail), count in groups.items()
    )


def _fold_lines(choices: list[FoldChoice]) -> list[str]:
    """The folding policy a method kept, its arena plus constants, and what each other one planned."""
    kept = [c for c in choices if c["chosen"]]
    if not kept:
        return []

    def cost(c: FoldChoice) -> str:
        return size_text(c["arena"] + c["constant_bytes"])

    others = ", ".join(f"{c['policy']} {cost(c)}" for c in choices if not c["chosen"])
    return [
        f"  folding {kept[0]['policy']}: arena {size_text(kept[0]['arena'])} + constants "
        f"{size_text(kept[0]['constant_bytes'])} = {cost(kept[0])}" + (f" (against {others})" if others else "")
    ]


def _own_memory(delegates: list[CompiledDelegate]) -> str:
    """What the planned buffers leave out: the working memory these delegates' backend
    allocates itself at run time (XNNPACK's intermediates), summed where the payloads say."""
    own = [m for d in delegates if (m := d.get("working_memory")) is not None]
    if not own:
        return ""
    # a payload that says its bytes says its values too (own_memory.py sets both or neither)
    known = [(m["bytes"], m["values"]) for m in own if m["bytes"] is not None and m["values"] is not None]
    told = "" if len(known) == len(own) else "; not every payload says how much"
    amount = (
        f": up to {exact_size_text(sum(b for b, _ in known))}, {counted(sum(v for _, v in known), 'intermediate')} "
        f"from {'its graph' if len(own) == 1 else 'their graphs'} summed"
        if known
        else ""
    )
    return f"; working memory outside the plan, allocated by the backend{amount}{told}"


_MEASURED_ON = {
    "executorch": "by running the program written on ExecuTorch's runtime",
    "devplan": "by running the program written on devplan's runtime",
    "eager": "on the eager quantized module (an estimate): no runtime here could run the program written",
}


def quantization_lines(report: Quantization) -> list[str]:
    """--quantize's cost: the error against the float model on the samples, the weights' bytes
    before and after, and the ops left in float (the quantizer had no pattern for them)."""
    error = report["error"]
    facts = [
        f"SQNR {error['sqnr_db']:.1f} dB" if error["sqnr_db"] is not None else "outputs equal",
        f"max abs difference {error['max_abs_diff']:.3g}",
    ]
    if error["argmax_agreement"] is not None:
        facts.append(f"argmax agreement {error['argmax_agreement']:.1%}")
    inputs = f"{report['samples']:,} {'calibration inputs' if report['calibration'] == 'file' else 'seeded samples'}"
    if report["samples_given"] > report["samples"]:  # --calibration held more than quantizing runs
        inputs = f"the first {report['samples']:,} of {report['samples_given']:,} calibration inputs"
    weights = report["weights"]
    lines = [
        f"quantized {report['mode']} (XNNPACK): on {inputs} against the float model, {', '.join(facts)}",
        f"  measured {_MEASURED_ON[report['measured_on']]}",
        f"  weights {exact_size_text(weights['quantized_bytes'])}, float {exact_size_text(weights['float_bytes'])}",
    ]
    if report["warning"] is not None:
        lines.append(f"  warning: {printable(report['warning'])}")
    if report["float_ops"]:
        ops = ", ".join(f"{op} x{count}" for op, count in report["float_ops"].items())
        lines.append(f"  stayed float (no quantizer pattern for them in {report['mode']}): {printable(ops)}")
    return lines


def check_lines(
    checks: list[BufferCheck],
    matched: GoldenCheck | None,
    golden: str,
    name: str,
    width: int = WIDTH,
    runtime: CheckedRuntime | None = None,
) -> list[str]:
    """check's verdicts: one line per buffer (and per device a budget names), what a failing
    one holds at its peak, the golden file's verdict and what changed, then the runtime build's
    verdict and what it lacks, each within `width` columns (the console's)."""
    lines = []
    for c in checks:
        mark = "note" if c.working_memory is not None else "ok  " if c.ok else "FAIL"
        lines.append(f"{mark}  {buffer_name(c)}: {'; '.join(buffer_facts(c))}")
        if not c.ok and c.peak is not None:  # what a reviewer needs to act on: where, and which blocks
            lines.append(f"        {peak_words(c)}, {peak_text(c.peak)}")
    if matched is not None:
        verdict = (
            f"wrote it from {name}" if matched.diff is None else outcome(matched.diff)
        )  # updated: nothing compared
        lines.append(f"{'ok  ' if matched.ok else 'FAIL'}  golden {golden}: {verdict}")
        if matched.diff is not None:
            lines += [*cause_lines(matched.diff, width), *change_lines(matched.diff, width=width)]
    if runtime is not None:
        lines += runtime_lines(runtime)
    lines = wrapped(lines, width)
    if matched is not None and not matched.ok:  # how to accept the change: a command, whole to copy
        lines.append(f"  to accept this plan: devplan check {name} --golden {golden} --update")
    elif matched is not None and matched.diff is not None and matched.diff.shrank:  # passed, and better: record it
        lines.append(f"  the plan shrank; to record it: devplan check {name} --golden {golden} --update")
    return [printable(line) for line in lines]


def runtime_lines(runtime: CheckedRuntime) -> list[str]:
    """The runtime build's verdict, then each thing a method needs that it lacks."""
    unchecked = "" if runtime["backends_checked"] else "; backends not checked (the list names none in build_features)"
    name = runtime["file"]["name"]
    if runtime["ok"]:
        return [f"ok    runtime build {name}: has every operator and kernel variant the program needs{unchecked}"]
    lacks = runtime["missing"]
    return [
        f"FAIL  runtime build {name}: lacks {counted(len(lacks), 'thing')} the program needs{unchecked}",
        *(f"        {m['method']} needs {m['kind']} {m['name']}: {m['detail']}" for m in lacks),
    ]


def peak_words(c: BufferCheck) -> str:
    """How a failing row's peak is introduced: a device's total of several buffers is told at
    its busiest buffer's peak."""
    return "at its peak" if c.mem_id is not None or c.buffers == 1 else "at its busiest buffer's peak"


def buffer_name(c: BufferCheck) -> str:
    """'forward buffer 1 (cpu)', or for a device's total 'forward cpu, all 2 buffers' (with
    'and backends' own memory' for a DEVICE+backends budget), or for a delegate's own memory
    'forward delegate 0 (XnnpackBackend) working memory (cpu)'."""
    if c.working_memory is not None:
        return f"{c.method} working memory ({c.device})"
    what = (
        f"buffer {c.mem_id} ({c.device})"
        if c.mem_id is not None
        else f"{c.device}, {'all ' if c.buffers > 1 else ''}{c.buffers} buffer{'s' if c.buffers > 1 else ''}"
    )
    return f"{c.method} {what}" + (" and backends' own memory" if c.backends else "")


def buffer_facts(c: BufferCheck) -> list[str]:
    """Its size, and against each limit asked for, by how much it passes or fails."""
    if c.working_memory is not None:  # told, not checked: no plan holds it
        values = c.working_memory["values"]
        if c.working_memory["bytes"] is None or values is None:  # own_memory.py sets both or neither
            return ["not known (its payload does not say)", "outside the plan, allocated by its backend"]
        return [
            f"up to {exact_size_text(c.size)}",
            f"outside the plan, allocated by its backend: "
            f"{counted(values, 'intermediate')} from its graph summed; "
            f"--budget {c.device}+backends=SIZE counts it",
        ]
    facts = [exact_size_text(c.size)]
    if c.backends:
        facts.append(f"of which backends' own memory up to {exact_size_text(c.backends)}")
    if c.budget is not None:
        facts.append(
            f"budget {size_text(c.budget)}"
            + ("" if c.size <= c.budget else f", over by {exact_size_text(c.size - c.budget)}")
        )
    facts.append(
        f"lower bound {size_text(c.lower_bound)}, ratio {c.ratio:.3f}"
        + ("" if c.max_ratio is None or c.ratio <= c.max_ratio else f" > {c.max_ratio:g}")
    )
    if c.problem is not None:
        facts.append(c.problem)
    return facts


def _statistic(value: float | str) -> str:
    """A run's statistic as run prints it: six digits, or the word JSON holds for NaN and the
    infinities ("NaN", "Infinity", "-Infinity")."""
    return value if isinstance(value, str) else f"{value:.6g}"


def run_lines(report: RunDocument) -> list[str]:
    """run's outputs, each a value or a tensor's dtype, shape and range (per run when several)."""
    lines = []
    several = len(report["runs"]) > 1
    for number, outputs in enumerate(report["runs"], 1):
        for index, out in enumerate(outputs):
            prefix = f"run {number} " if several else ""
            lines.append(
                f"{prefix}output {index}: {out['value']!r}"
                if "value" in out
                else f"{prefix}output {index}: {out['dtype']} {tuple(out['shape'])}  min {_statistic(out['min'])}  "
                f"max {_statistic(out['max'])}  mean {_statistic(out['mean'])}"
            )
    for row in report.get("memory", ()):
        # what a device really held, beside what the plan said it would (report.py sets both or neither)
        if row["peak"] is not None and row["beyond_plan"] is not None:
            lines.append(
                f"{row['device']}: planned {size_text(row['planned'])}, constants "
                f"{size_text(row['constants'])}, peak {size_text(row['peak'])} "
                f"({size_text(max(row['beyond_plan'], 0))} beyond them)"
            )
    if "reference" in report:
        lines += reference_lines(report["reference"])
    if "latency" in report:
        timed = report["latency"]
        lines.append(
            # the first run is the warm-up, untimed
            f"latency: median {timed['median_ms']:.3g} ms (min {timed['min_ms']:.3g}, max {timed['max_ms']:.3g}) "
            f"over {counted(timed['runs'], 'warm run')}"
        )
    return lines


def reference_lines(reference: Reference) -> list[str]:
    """The last run's outputs against the reference's: the verdict first, then a line per output."""
    judged = (
        f"SQNR at least {reference['min_sqnr_db']:g} dB"
        if reference["min_sqnr_db"] is not None
        else f"allclose, atol {reference['atol']:g}, rtol {reference['rtol']:g}"
    )
    failed = [output for output in reference["outputs"] if not output["passed"]]
    verdict = f"FAIL, {len(failed)} of {counted(len(reference['outputs']), 'output')} off" if failed else "ok"
    lines = [f"against {printable(reference['file']['name'])} ({judged}): {verdict}"]
    for output in reference["outputs"]:
        mark = "ok  " if output["passed"] else "FAIL"
        if output["note"] is not None:
            lines.append(f"  output {output['index']}: {mark}  {printable(output['note'])}")
            continue
        max_abs, mean_abs = output["max_abs"], output["mean_abs"]
        if max_abs is None or mean_abs is None:  # a value (not a tensor) equal to the reference's
            lines.append(f"  output {output['index']}: {mark}  equal")
            continue
        sqnr = "exact" if output["sqnr_db"] is None else f"SQNR {_statistic(output['sqnr_db'])} dB"
        argmax = output["argmax_agreement"]
        lines.append(
            f"  output {output['index']}: {mark}  {sqnr}  max abs {_statistic(max_abs)}  "
            f"mean abs {_statistic(mean_abs)}"
            + ("" if output["allclose"] else "  not allclose")
            + ("" if argmax is None else f"  argmax agreement {argmax:.1%}")
        )
    return lines
