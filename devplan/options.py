"""CompileOptions: every choice a compile makes, made once (from the CLI's flags or
devplan.compile's keywords), checked once, and handed whole to the stages that read it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from devplan.backend import Backend, Partitioner
from devplan.errors import DevplanError
from devplan.files import present
from devplan.planning.budget import checked_budgets
from devplan.planning.model import MAX_ALIGNMENT, PLANNERS
from devplan.quantization import checked_group_size, quantized_delegates

# --fold: local folds a constant subgraph where its own bytes say so, all every one (as
# ExecuTorch's const-prop does), none nothing; auto plans each of them and keeps the one whose
# arena plus constants is least (compiler/fold_choice.py)
FOLDING = ("auto", "local", "all", "none")
# --attention: auto computes each attention whose scores would outgrow one block of keys a block
# at a time (passes/export/attention.py); materialized leaves every attention as the export has it
ATTENTION = ("auto", "materialized")
ATTENTION_BLOCK = 8 * 2**20  # --attention-block's default: the bytes of scores one block may hold


@dataclass(frozen=True)
class CompileOptions:
    # of every planned tensor's offset; None: each buffer its device's (16 on the host, 512 on CUDA)
    alignment: int | None = None
    planner: str = "best"  # planning.model.PLANNERS
    budgets: tuple[tuple[str, int], ...] = ()  # (buffer mem_id or device, bytes)
    inplace: bool = True  # results over inputs that die with them; cat pieces in place
    reorder: bool = True  # instructions in the order that holds the fewest bytes at once
    fold: str = "auto"  # constant folding, one of FOLDING (passes/graph/fold.py)
    attention: str = "auto"  # one of ATTENTION
    attention_block: int = ATTENTION_BLOCK  # with auto: the bytes of scores one block of keys may hold
    # backends taking ops, in turn: devplan's own, to run on their device, and ExecuTorch's
    # partitioners (--backend, --partitioner), whose backends compile their groups
    delegates: tuple["Backend | Partitioner", ...] = ()
    # a partition ExecuTorch's backend refuses fails the compile, instead of its ops staying portable
    strict_backend: bool = False
    device_io: bool = False  # inputs only delegates read, and their results, stay on the device
    source: bool = True  # each instruction's module, op and line in ET12's stacktrace
    dump_dir: Path | None = None  # a readable file per stage
    # where the weights go instead of the program: ExecuTorch's .ptd data file (FlatTensor),
    # each under its name, which the program's tensors name (ExecutorchBackendConfig(external_constants=True))
    external_constants: Path | None = None
    # ExecuTorch's ETRecord of the program written (the executorch extra; devplan/etrecord.py)
    etrecord: Path | None = None
    # Python modules imported before loading, for the op libraries their import registers
    # (custom ops a graph calls exist in torch only once their library's module has run)
    kernels: tuple[str, ...] = ()
    # the constant methods ExecuTorch's LLM runner reads, read from the export (devplan/llm.py)
    llm: bool = False
    # --quantize MODE (quantization.py MODES): the export quantized by ExecuTorch's XNNPACK
    # quantizer first, XNNPACK's backend implied; `calibration`, a file of input tuples or the
    # tuples, gives the inputs it calibrates on and measures the error on
    quantize: str | None = None
    calibration: Path | tuple[Any, ...] | None = None
    # --group-size N: 8da4w's weights in groups of N inputs (None: quantization.GROUP_SIZE)
    group_size: int | None = None
    # processes compiling the backends' partitions at once (None: one per core this process may use)
    jobs: int | None = None
    # each stage's result checked (devplan/wellformed.py): with --debug, and in the tests, whose
    # conftest sets DEVPLAN_CHECK_STAGES for every compile they make, in-process or not
    checks: bool = field(default_factory=lambda: os.environ.get("DEVPLAN_CHECK_STAGES") == "1")

    def __post_init__(self) -> None:
        a = self.alignment
        if a is not None and (
            isinstance(a, bool) or not isinstance(a, int) or a < 1 or a & (a - 1) or a > MAX_ALIGNMENT
        ):
            raise DevplanError(f"--alignment {a}: must be a power of two from 1 to {MAX_ALIGNMENT}, e.g. 16")
        if self.planner not in PLANNERS:
            raise DevplanError(f"unknown memory planning algorithm {self.planner!r}; use one of: {', '.join(PLANNERS)}")
        if self.fold not in FOLDING:
            raise DevplanError(f"--fold {self.fold}: use one of: {', '.join(FOLDING)}")
        if self.attention not in ATTENTION:
            raise DevplanError(f"--attention {self.attention}: use one of: {', '.join(ATTENTION)}")
        b = self.attention_block
        if isinstance(b, bool) or not isinstance(b, int) or b < 1:
            raise DevplanError(f"--attention-block {b}: give the bytes one block of scores may hold, e.g. 8MiB")
        if self.jobs is not None and (isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs < 1):
            raise DevplanError(f"--jobs {self.jobs}: give a number of processes from 1 up, e.g. 2")
        if self.dump_dir is not None and present(self.dump_dir) and not self.dump_dir.is_dir():
            raise DevplanError(f"--dump-dir {self.dump_dir}: is a file; name a folder (it is made if missing)")
        for name in self.kernels:
            if not isinstance(name, str) or not all(part.isidentifier() for part in name.split(".")):
                raise DevplanError(
                    f"--kernels {name}: not a Python module name; name a module as import does, e.g. transformers"
                )
        if self.etrecord is not None and self.quantize is not None:
            raise DevplanError(
                "--etrecord with --quantize: the ETRecord's graph would be the float export, which the "
                "quantized program's instructions do not come from; compile without --quantize for it"
            )
        if self.group_size is not None:
            checked_group_size(self.quantize, self.group_size)
        if self.quantize is not None or self.calibration is not None:
            # frozen: the backend --quantize implies is set once, here, so every way of making
            # the options (flags, keywords, replace) gets it
            object.__setattr__(self, "delegates", quantized_delegates(self.quantize, self.calibration, self.delegates))

    @classmethod
    def of(cls, base: CompileOptions | None = None, **choices: Any) -> CompileOptions:
        """`base` (or the defaults) with `choices` as devplan.compile takes them: budgets as a
        mapping, delegates as 'cuda:0=aten::linear' texts, Backends or Partitioners,
        `backends` as ExecuTorch backend names ('xnnpack') or 'MODULE:CLASS[:JSON]' partitioners
        that choose before the delegates, dump_dir, external_constants, etrecord and a calibration file as any path, kernels as
        module names."""
        if "backends" in choices:
            foreign = tuple(Partitioner.parse(b) if isinstance(b, str) else b for b in choices.pop("backends") or ())
            choices["delegates"] = foreign + tuple(choices.get("delegates") or ())
        unknown = sorted(set(choices) - {f.name for f in fields(cls)})
        if unknown:
            raise TypeError(f"compile() got an unexpected keyword argument {unknown[0]!r}")
        if "budgets" in choices:
            choices["budgets"] = tuple(checked_budgets(choices["budgets"] or {}).items())
        if "delegates" in choices:
            choices["delegates"] = tuple(
                Backend.parse(d) if isinstance(d, str) else d for d in choices["delegates"] or ()
            )
        if "kernels" in choices:
            kernels = choices["kernels"] or ()
            choices["kernels"] = (kernels,) if isinstance(kernels, str) else tuple(kernels)
        if isinstance(choices.get("calibration"), (str, os.PathLike)):
            choices["calibration"] = Path(choices["calibration"])
        elif choices.get("calibration") is not None:
            choices["calibration"] = tuple(choices["calibration"])
        for name in ("dump_dir", "external_constants", "etrecord"):
            if choices.get(name) is not None:
                choices[name] = Path(choices[name])
        return replace(base or cls(), **choices)
