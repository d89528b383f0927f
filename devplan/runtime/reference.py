"""`devplan run --reference`: what a program's outputs are held against, from the model it was
compiled from (.pt2), another program (.pte, run on the same runtime), or outputs saved with
torch.save."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from devplan.errors import DevplanError
from devplan.pte.header import is_program
from devplan.runtime.saved import saved_tensors

# a saved reference holds outputs, not a model: as much as an inputs file may
SAVED_LIMIT = 8 << 30


def reference_outputs(
    path: Path, inputs: list[Any], runs: int, run_program: Callable[[Path, list[Any], int], list[list[Any]]]
) -> list[Any]:
    """The reference's outputs for the last of `runs` calls on `inputs` (state carries over as in
    the program's runs); `run_program` runs a .pte reference as the program itself was run."""
    from devplan.files import open_input, read_input

    hint = "pass a .pt2 model, a .pte program or outputs saved with torch.save"
    with open_input(path, hint=hint, name=f"--reference {path}") as file:
        head = file.read(8)
    if is_program(head):
        return run_program(path, inputs, runs)[-1]
    if path.suffix == ".pt2":
        return _model_outputs(path, inputs, runs)
    name = f"--reference {path}"
    return saved_tensors(name, read_input(path, limit=SAVED_LIMIT, hint=hint, name=name), "output")


def _model_outputs(path: Path, inputs: list[Any], runs: int) -> list[Any]:
    import torch
    from torch.utils import _pytree as pytree

    from devplan.gate.load import load
    from devplan.gate.unlift import check_unliftable

    ep = load(path)  # the gate: every name the module's generated code holds has been checked
    check_unliftable(ep, f"--reference {path}")  # and each one ep.module() sets or shadows
    module = ep.module()
    outputs: list[Any] = []
    with torch.no_grad():
        for _ in range(runs):
            try:
                args, kwargs = pytree.tree_unflatten([_copy(value) for value in inputs], ep.call_spec.in_spec)
            except Exception:  # another count of inputs than the program's
                raise DevplanError(
                    f"{path}: the model takes other inputs than the program ({len(inputs)} given); "
                    f"pass the model the program was compiled from"
                ) from None
            outputs = pytree.tree_leaves(module(*args, **kwargs))
    return outputs


def _copy(value: Any) -> Any:
    import torch

    return value.clone() if isinstance(value, torch.Tensor) else value
