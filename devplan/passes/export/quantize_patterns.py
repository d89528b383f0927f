"""The XNNPACK quantizer's conv-bn(-relu) patterns exported once per process. ExecuTorch's
quantizer exports each of its twelve patterns with a strict torch.export on every prepare_pt2e,
whatever the model holds: 60% of a small model's `--quantize int8` compile (3 s of 5), and what
made torch keep the most of each compile (devplan/caches.py). A pattern's graph depends only on
the pattern's code, what it closes over (the conv op, whether a ReLU follows and is in place)
and the example inputs' shapes and dtypes, so each is exported once and every match is given
its own copy."""

from __future__ import annotations

import contextlib
import copy
import functools
import threading
from typing import Any, Hashable, Iterator, Sequence

from devplan.extras import import_module

_UTILS = "executorch.backends.xnnpack.quantizer.xnnpack_quantizer_utils"  # the devplan[executorch] extra's
_PATTERNS: dict[Hashable, Any] = {}  # key -> the pattern's graph module; twelve in ExecuTorch 1.5.1 (more on CUDA)
_lock = threading.Lock()


def _key(pattern: Any, example_inputs: Sequence[Any], is_cuda: bool, kwargs: dict[str, Any]) -> Hashable | None:
    """What the pattern's graph depends on, hashable; None when something in it is not."""
    fn = getattr(pattern, "fn", pattern)  # ExecuTorch wraps each pattern function in a module
    closure = tuple(cell.cell_contents for cell in (getattr(fn, "__closure__", None) or ()))
    inputs = tuple((tuple(x.shape), x.dtype) if hasattr(x, "shape") else x for x in example_inputs)
    key = (getattr(fn, "__code__", fn), closure, inputs, is_cuda, tuple(sorted(kwargs.items())))
    try:
        hash(key)
    except TypeError:
        return None
    return key


@contextlib.contextmanager
def patterns_exported_once() -> Iterator[None]:
    """Within it, ExecuTorch's quantizer exports each pattern once per process. A call nested in
    another (or in another thread's) leaves the outer one's in place."""
    utils = import_module(_UTILS, "--quantize")
    export_pattern: Any = utils._get_aten_graph_module_for_pattern
    if getattr(export_pattern, "exported_once", False):
        yield
        return

    @functools.wraps(export_pattern)
    def exported_once(pattern: Any, example_inputs: Sequence[Any], is_cuda: bool = False, **kwargs: Any) -> Any:
        key = _key(pattern, example_inputs, is_cuda, kwargs)
        if key is None:
            return export_pattern(pattern, example_inputs, is_cuda, **kwargs)
        with _lock:
            if key not in _PATTERNS:
                _PATTERNS[key] = export_pattern(pattern, example_inputs, is_cuda, **kwargs)
            return copy.deepcopy(_PATTERNS[key])  # the matcher's own: it recompiles what it is given

    exported_once.exported_once = True  # type: ignore[attr-defined]
    utils._get_aten_graph_module_for_pattern = exported_once  # type: ignore[attr-defined]
    try:
        yield
    finally:
        utils._get_aten_graph_module_for_pattern = export_pattern  # type: ignore[attr-defined]
