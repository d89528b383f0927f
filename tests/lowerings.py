"""Session-wide caches for the slow steps that test files repeat.

The XNNPACK quantizer's pattern graphs are exported once per session, not once per model
quantized.

Import it from the repository root as `tests.lowerings`."""
from __future__ import annotations

import contextlib
import copy
import functools


_PATTERNS: dict = {}  # pattern key -> its exported graph, for patterns_exported_once


@contextlib.contextmanager
def patterns_exported_once():
    """The XNNPACK quantizer exports its twelve conv-bn(-relu) patterns with strict
    torch.export on every prepare_pt2e (about 2 s a model). The pattern graphs depend only on
    the pattern's code, the ops it closes over and the example shapes, so within this context
    each is exported once per session and each annotation gets its own copy."""
    import executorch.backends.xnnpack.quantizer.xnnpack_quantizer_utils as utils

    export_pattern = utils._get_aten_graph_module_for_pattern

    @functools.wraps(export_pattern)
    def cached(pattern, example_inputs, is_cuda=False, **kwargs):
        fn = getattr(pattern, "fn", pattern)
        closure = tuple(c.cell_contents for c in (getattr(fn, "__closure__", None) or ()))
        try:
            key = (getattr(fn, "__code__", fn), closure, tuple(tuple(t.shape) for t in example_inputs), is_cuda,
                   tuple(sorted(kwargs.items())))
            hash(key)
        except TypeError:  # something unhashable: no caching
            return export_pattern(pattern, example_inputs, is_cuda, **kwargs)
        if key not in _PATTERNS:
            _PATTERNS[key] = export_pattern(pattern, example_inputs, is_cuda, **kwargs)
        return copy.deepcopy(_PATTERNS[key])

    utils._get_aten_graph_module_for_pattern = cached
    try:
        yield
    finally:
        utils._get_aten_graph_module_for_pattern = export_pattern
