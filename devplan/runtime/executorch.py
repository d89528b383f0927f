"""`devplan run --executorch`: the same program on ExecuTorch's own runtime (the
`devplan[executorch]` extra), so that one tool checks the outputs of any program, those
with ExecuTorch's backends' delegates (XNNPACK) included, which devplan's runtime cannot run."""
from __future__ import annotations

from typing import Any

import torch

from devplan.errors import DevplanError, first_line
from devplan.extras import import_module
from devplan.pte.reader import PteFile
from devplan.runtime.executor import method_view



def run_on_executorch(pte: PteFile, name: str, inputs: list[Any], runs: int = 1) -> list[list[Any]]:
    """The outputs of `runs` calls of method `name`, one loaded method, state carried over."""
    method_view(pte, name)
    if pte.external is not None and pte.external.path is None:
        raise DevplanError(f"{pte.external.name}: ExecuTorch's runtime loads a .ptd by its path; pass it as a file")
    runtime = import_module("executorch.runtime", "--executorch")
    import_module("executorch.kernels.quantized", "--executorch")  # PT2E programs' kernels register on import
    try:
        # a mapped file by its path (ExecuTorch's loader maps it too), bytes as they are
        # with its .ptd by path, which ExecuTorch's loader maps
        data_path = pte.external.path if pte.external is not None else None
        program = runtime.Runtime.get().load_program(pte.path if pte.path is not None else bytes(pte.data),
                                                     data_path=data_path)
        method = program.load_method(name)
        results = []
        for _ in range(runs):
            results.append([o.clone() if isinstance(o, torch.Tensor) else o for o in method.execute(list(inputs))])
    except Exception as error:  # ExecuTorch's runtime refused the program or its inputs
        raise DevplanError(f"{pte.name}: ExecuTorch's runtime failed on method {name}: {first_line(error)}") from None
    return results

