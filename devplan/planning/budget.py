"""Memory budgets: read them from the command line and explain a plan that does not fit."""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from devplan.errors import BudgetExceeded, DevplanError
from devplan.planning.bounds import peak
from devplan.planning.model import Interval, split_groups
from devplan.spec import Device
from devplan.units import exact_size_text, size_bytes

SHOWN_AT_PEAK = 5


def parse_budget(text: str) -> tuple[str, int]:
    """TARGET=SIZE (1=512KiB, cuda:0=2GiB, 1=1048576) -> (target, bytes). Units are B, KB,
    KiB, MB, MiB, GB and GiB in any case; a number without one counts bytes."""
    match = re.fullmatch(r"\s*([^=\s]+)\s*=(.*)", text)
    nbytes = size_bytes(match.group(2)) if match else None
    if match is None or nbytes is None:
        raise DevplanError(
            f"bad memory budget {text!r}; write TARGET=SIZE such as 1=512KiB or cuda:0=2GiB "
            f"(units: B, KB, KiB, MB, MiB, GB, GiB)"
        )
    if nbytes.denominator != 1:
        raise DevplanError(f"memory budget {text!r} is not a whole number of bytes")
    return match.group(1), int(nbytes)


def checked_budgets(budgets: Mapping[Any, object]) -> dict[str, int]:
    """A budgets mapping from the Python API, held to what --budget TARGET=SIZE accepts: a
    mem_id or device (an int mem_id too) to a whole number of bytes, 0 or more. Refused with
    DevplanError, as the command line refuses it, rather than failing later as a TypeError."""
    checked = {}
    for target, nbytes in budgets.items():
        if isinstance(target, int) and not isinstance(target, bool) and target >= 0:
            target = str(target)
        if not isinstance(target, str) or isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise DevplanError(
                f"bad memory budget {target!r}: {nbytes!r}; map a mem_id such as '1' or a device "
                f"such as 'cuda:0' to a whole number of bytes, 0 or more"
            )
        checked[target] = nbytes
    return checked


BACKENDS = "+backends"  # DEVICE+backends: the device's buffers and its delegates' own working memory


def budget_key(target: str) -> str:
    """The buffer a budget's TARGET names, spelled as mem_id ("1") or canonical device
    ("cuda:0"), or a device's buffers with its backends' own memory ("cpu+backends")."""
    device, plus, rest = target.partition("+")
    if plus and (f"+{rest}" != BACKENDS or device.isdigit()):
        raise DevplanError(
            f"--budget {target}: write DEVICE{BACKENDS} (e.g. cpu{BACKENDS}=2MiB) to count the "
            f"device's buffers and its delegates' own working memory together"
        )
    if plus:
        return str(Device.parse(device)) + BACKENDS
    return target if target.isdigit() else str(Device.parse(target))


def check_budget(
    plan_sizes: Mapping[int, int],
    budgets: Mapping[int, int],
    intervals: Sequence[Interval],
    alignment: int,
    names: Mapping[int, str] | None = None,
    buffers: Mapping[int, str] | None = None,
) -> None:
    """Raise DevplanError for the first buffer (in group order) whose planned size exceeds its
    budget, saying what the plan needs, what is available, the lower bound and which tensors
    are alive at the peak (BudgetExceeded). `names`: what to call an interval other than
    "vKEY", the value's number in the written program as `devplan inspect` shows it;
    `buffers`: what to call a group other than "buffer GROUP" ("buffer 1 (cpu)")."""
    for group in sorted(budgets):
        needed, available = plan_sizes.get(group, 0), budgets[group]
        if needed <= available:
            continue
        available_text = exact_size_text(available)
        buffer = (buffers or {}).get(group, f"buffer {group}")
        problems = {problem.group: problem for problem in split_groups(intervals, alignment)}
        if group not in problems:
            raise BudgetExceeded(f"memory {buffer} needs {exact_size_text(needed)} but its budget is {available_text}")
        top = peak(problems[group])
        shown = ", ".join(
            f"{(names or {}).get(key, f'v{key}')} ({exact_size_text(size)})" for key, size in top.alive[:SHOWN_AT_PEAK]
        )
        more = len(top.alive) - SHOWN_AT_PEAK
        shown += f" and {more} more" if more > 0 else ""
        if top.nbytes > available:
            verdict = "no placement can fit, since more than that is alive at once; raise the budget or shrink the model's activations"
        else:
            verdict = "a tighter placement might fit; raise the budget or try another planning algorithm"
        raise BudgetExceeded(
            f"memory {buffer} needs {exact_size_text(needed)} but its budget is {available_text}; "
            f"the lower bound is {exact_size_text(top.nbytes)} (held at its peak, instruction {top.instruction}: {shown}); {verdict}"
        )
