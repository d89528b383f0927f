"""--quantize's error measured on the program compile writes, not on the eager quantized module
the quantize stage made it from (issue 51: a program at 13 dB on ExecuTorch's runtime was
reported at 41 dB): run on ExecuTorch's runtime when the program holds its backends' delegates
(XNNPACK's, which devplan's runtime cannot run), else on devplan's. Where neither can run it,
the report stays the eager estimate and says so."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from devplan.errors import DevplanError, first_line
from devplan.extras import import_module
from devplan.passes.export.quantize import Error, MeasuredOn, QuantizeReport, Reference, error_of
from devplan.pte import PteFile, read_pte
from devplan.pte.decode import MethodView, methods
from devplan.pte.payloads import runs_here
from devplan.runtime.executor import run
from devplan.runtime.executorch import run_on_executorch

# the program's SQNR this far under the eager module's is not quantizing's rounding (ExecuTorch's
# runtime quantizes some activations per row, finer than the module's per tensor) but a program
# computing something else: issue 51's was 28 dB under
PARTED_DB = 10.0
RUNTIMES = {"executorch": "ExecuTorch's runtime", "devplan": "devplan's runtime"}


def measured(
    report: QuantizeReport,
    reference: Reference,
    written: str | os.PathLike[str] | bytes,
    data: str | os.PathLike[str] | None,
) -> QuantizeReport:
    """`report` with its error measured by running the program `written` (its path, or its
    bytes; its weights in the .ptd `data`, if any) on the reference's samples, and a warning
    where it parts from the eager estimate or fails to run."""
    pte = read_pte(written, data=data)
    (forward,) = [view for view in methods(pte) if view.name == "forward"]
    on = _runtime_for(forward)
    if on == "eager":
        return report
    try:
        outputs = [_outputs(pte, on, sample) for sample in reference.samples]
    except DevplanError as failed:  # the program fails where it will run: say so and where, keep the estimate
        where = "".join(f"; {fault}" for fault in _faults(pte, forward))
        return replace(report, warning=f"the program written fails on {RUNTIMES[on]}: {first_line(failed)}{where}")
    # the float outputs, as the reference keeps them, by their place among all the method's
    places = [k for k, value in enumerate(outputs[0]) if _is_float(value)]
    got = [tuple(sample[k] for k in places) for sample in outputs]
    error = error_of(reference.want, got)
    worst = _parted(report.eager, error, reference, got)
    warning = (
        None
        if worst is None
        else f"the program computes far from the eager quantized module (SQNR {error.sqnr_db} dB against its "
        f"{report.eager.sqnr_db} dB); they part at output {places[worst]}, written by {_writer(forward, places[worst])}"
    )
    return replace(report, error=error, measured_on=on, warning=warning)


def _runtime_for(forward: MethodView) -> MeasuredOn:
    """ExecuTorch's runtime for a program with its backends' delegates, when the
    devplan[executorch] extra is installed; devplan's for any other."""
    if all(runs_here(delegate.id) for delegate in forward.delegates):
        return "devplan"
    try:
        import_module("executorch.runtime", "--quantize")
    except DevplanError:  # no ExecuTorch: the eager estimate is all there is
        return "eager"
    return "executorch"


def _faults(pte: PteFile, forward: MethodView) -> list[str]:
    """The first node of each of forward's delegates whose graph contradicts itself, where its
    runtime stops without naming it (XNNPACK's shape propagation: inspection/xnnshapes.py):
    'delegate 0 (XnnpackBackend) node 1 StaticConstantPad (module op): what is wrong'."""
    from devplan.pte.payloads import named_function, payload_format
    from devplan.pte.program_view import program_view

    program, faults = program_view(pte), []
    for delegate in forward.delegates:
        named = payload_format(delegate.id).faults
        found = named_function(named)(program, forward.plan_index, delegate.index) if named else []
        faults += [f"delegate {delegate.index} ({delegate.id}) {found[0]}"] if found else []
    return faults


def _outputs(pte: PteFile, on: MeasuredOn, sample: tuple[Any, ...]) -> list[Any]:
    if on == "executorch":
        results, _ = run_on_executorch(pte, "forward", list(sample))
        return results[0]
    return run(pte, sample)[0]


def _is_float(value: object) -> bool:
    import torch  # the core's runtime runs without torch; measuring compares tensors

    return isinstance(value, torch.Tensor) and value.dtype.is_floating_point


def _parted(eager: Error, error: Error, reference: Reference, got: list[tuple[Any, ...]]) -> int | None:
    """When the program's SQNR is PARTED_DB or more under the eager module's, the float output
    that parts most."""
    if eager.sqnr_db is None or error.sqnr_db is None or error.sqnr_db > eager.sqnr_db - PARTED_DB:
        return None
    worst = min(
        range(len(got[0])),
        key=lambda k: error_of([w[k : k + 1] for w in reference.want], [g[k : k + 1] for g in got]).sqnr_db or 1e9,
    )
    return worst


def _writer(forward: MethodView, output: int) -> str:
    """The last instruction that writes the method's `output`: a delegate by index and
    backend, or a kernel by operator."""
    value = forward.outputs[output]
    for instruction in reversed(forward.instructions):
        if value not in instruction.results:
            continue
        if instruction.delegate is not None:
            backend = forward.delegates[instruction.delegate].id
            return f"delegate {instruction.delegate} ({backend}, instruction {instruction.index})"
        if instruction.op is not None:
            name, overload = forward.operators[instruction.op]
            return f"operator {name}{'.' + overload if overload else ''} (instruction {instruction.index})"
    return f"no instruction (value {value})"
