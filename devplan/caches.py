"""What torch, torchao and ExecuTorch keep process-wide of each graph a compile builds, released
when the compile ends. A compile builds hundreds of graph modules (--quantize's PT2E flow above
all: a strict export per quantizer pattern, a module per pass), and each of these keeps them, or
their source, for the life of the process:

- torch.fx's loader keeps every generated forward's source, and linecache a copy of its globals;
- a strict export (torchao's pattern matching) installs dynamo's compiled function and the
  scopes it read, the traced module among them, as globals of torch._dynamo.functional_export;
- a strict export's guards are kept by the finalizers dynamo puts on each object they check
  (types, code, modules: ones that live as long as the process), though an export's guards
  guard no cache entry and their finalizers do nothing;
- unbounded functools caches keyed by graph modules or nodes hold them (torchao's and torch.ao's
  device of a module, ExecuTorch's is_same_node) and dynamo's keyed by sources.

About 4 MB per `--quantize int8` compile of a small model, so a process that compiles many
(the Python API, the names fuzz) grew past a GiB in a few hundred (issue 52). Only what appeared
while compiles were running is released, once none is left running: a user's own graph modules
and torch.compile state are untouched, and a compile in another thread keeps what it is using.
Released source only takes the text from a traceback through a graph module that is gone."""

from __future__ import annotations

import functools
import linecache
import sys
import threading
import weakref
from typing import Any, Callable, TypeVar

# (module, function) of the unbounded caches: each only computes again once cleared
_CACHES = (
    ("torchao.utils", "_assert_and_get_unique_device"),
    ("torch.ao.quantization.fx.utils", "assert_and_get_unique_device"),
    ("executorch.exir.backend.utils", "is_same_node"),
    ("torch._dynamo.source", "get_local_source_name"),
    ("torch._dynamo.source", "is_from_local_source"),
)
_DYNAMO_GLOBALS = "torch._dynamo.functional_export"  # where strict export's traced frame lives
_FX_LOADER = "torch.fx.graph_module"

_lock = threading.Lock()
_running = 0
_before: tuple[set[str], set[str], set[int]] = (set(), set(), set())

F = TypeVar("F", bound=Callable[..., Any])


def _modules() -> tuple[Any, Any]:
    """The module of strict export's globals and torch.fx's, where imported (a compile without
    --quantize or a backend never imports the first)."""
    return sys.modules.get(_DYNAMO_GLOBALS), sys.modules.get(_FX_LOADER)


def _state() -> tuple[set[str], set[str], set[int]]:
    """The names dynamo's globals hold, the sources torch.fx's loader holds and the finalizers
    registered, now."""
    dynamo, fx = _modules()
    held = set(vars(dynamo)) if dynamo else set(), set(fx._loader.eval_cache) if fx else set()
    return (*held, set(map(id, weakref.finalize._registry)))  # type: ignore[attr-defined]


def _idle_guards(finalizer: weakref.finalize[Any, Any]) -> bool:
    """Whether `finalizer` is dynamo's invalidation of guards that guard no cache entry (a
    strict export's): it would do nothing but keeps the guards alive."""
    info = weakref.finalize._registry.get(finalizer)  # type: ignore[attr-defined]
    guards = getattr(getattr(info, "func", None), "func", None)  # partial(manager.invalidate, ...)
    manager = getattr(guards, "__self__", None)
    return (
        getattr(guards, "__name__", None) == "invalidate"
        and type(manager).__name__ == "CheckFunctionManager"
        and getattr(getattr(manager, "guard_manager", None), "cache_entry", True) is None
    )


def _release(before: tuple[set[str], set[str], set[int]]) -> None:
    """What appeared since `before`, dropped; the unbounded caches cleared."""
    dynamo, fx = _modules()
    if dynamo is not None:
        # dynamo's install_global names start with "__" (an attribute a late import sets does not)
        # and are no module dunder: the module may have been imported during the compile, when
        # `before` holds none of its names, and deleting its __name__ broke every later export
        for name in set(vars(dynamo)) - before[0]:
            if name.startswith("__") and not name.endswith("__"):
                delattr(dynamo, name)
    if fx is not None:
        for key in set(fx._loader.eval_cache) - before[1]:
            del fx._loader.eval_cache[key]
            linecache.cache.pop(key, None)
    for finalizer in list(weakref.finalize._registry):  # type: ignore[attr-defined]
        if id(finalizer) not in before[2] and _idle_guards(finalizer):
            finalizer.detach()
    for module_name, function in _CACHES:
        cached = getattr(sys.modules.get(module_name), function, None)
        if isinstance(cached, functools._lru_cache_wrapper):
            cached.cache_clear()


def releasing(fn: F) -> F:
    """`fn` (a compile) that releases what torch kept of its graphs when it returns or raises,
    once no other such call is running."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        global _running, _before
        with _lock:
            if _running == 0:
                _before = _state()
            _running += 1
        try:
            return fn(*args, **kwargs)
        finally:
            with _lock:
                _running -= 1
                if _running == 0:
                    _release(_before)

    return wrapper  # type: ignore[return-value]
