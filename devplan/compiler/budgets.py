"""compile's --budget DEVICE+backends: checked on the plans the compile made, not on its image
read back (which held a second copy of the weights), as `check` counts them on a program."""

from __future__ import annotations

from typing import Iterable, Mapping

from devplan.errors import BudgetExceeded, DevplanError
from devplan.inspection.own_memory import working_memory
from devplan.ir.planned import PlannedMethod
from devplan.planning.budget import BACKENDS, budget_key
from devplan.units import exact_size_text


def check_backend_budgets(methods: Iterable[PlannedMethod], budgets: Mapping[str, int]) -> None:
    """Raise BudgetExceeded, as a plan over its budget does, when a method's buffers on a device,
    its delegates' own buffers there (those not in a window of them) and the working memory its
    backends allocate there themselves are more than the device's DEVICE+backends budget. A
    delegate whose payload does not say how much it allocates is refused: the budget cannot count it."""
    own = {budget_key(target): nbytes for target, nbytes in budgets.items() if budget_key(target).endswith(BACKENDS)}
    planned_on: set[str] = set()
    for planned in methods:
        totals: dict[str, int] = {}
        for buffer in planned.buffers:
            totals[str(buffer.device)] = totals.get(str(buffer.device), 0) + buffer.size
        outside: dict[str, int] = {}
        for index, delegate in enumerate(planned.method.delegates):
            device = str(delegate.device)
            memory = working_memory(delegate.backend, delegate.payload)
            if memory is None:  # an ET12 payload: its buffer is planned, in a window or beside
                if delegate.window is None:
                    totals[device] = totals.get(device, 0) + delegate.arena
                continue
            key = device + BACKENDS
            if key in own and memory["bytes"] is None:
                raise DevplanError(
                    f"--budget {key}: {planned.method.name} delegate {index} ({delegate.backend}) allocates its "
                    f"working memory itself, and its payload does not say how much; budget {device} alone"
                )
            outside[device] = outside.get(device, 0) + (memory["bytes"] or 0)
        planned_on |= set(totals)
        for device, size in totals.items():
            budget = own.get(device + BACKENDS)
            if budget is not None and size + outside.get(device, 0) > budget:
                raise BudgetExceeded(
                    f"memory {device}{BACKENDS} needs {exact_size_text(size + outside.get(device, 0))} but its "
                    f"budget is {exact_size_text(budget)}; of it, {exact_size_text(outside.get(device, 0))} is its "
                    f"delegates' own working memory (an upper bound, read from their payloads)"
                )
    unknown = sorted(key for key in own if key[: -len(BACKENDS)] not in planned_on)
    if unknown:
        raise DevplanError(
            f"--budget {unknown[0]}: the program plans nothing on {unknown[0][: -len(BACKENDS)]}; budget one of: "
            f"{', '.join(sorted(device + BACKENDS for device in planned_on)) or 'none (it plans no memory)'}"
        )
