"""Session-wide caches for the slow steps that test files repeat on the same programs.

ExecuTorch's lowering (0.5-15 s a program) is cached by what the program is, its fingerprint,
not by who asks: the same corpus model exported in test_models, test_runtime,
test_executorch_programs and the inspector tests, or a transformers model whose grad-mode and
no_grad exports come out identical, is lowered once per run, whichever worker asks first
(testbed/shared.py). The cache holds results (.pte bytes, sizes), never an ExportedProgram, and lowers a deep copy, so no caller sees
another's mutation. The XNNPACK quantizer's pattern graphs are exported once per process (devplan's own cache).

Import it from the repository root as `testbed.lowerings`."""

from __future__ import annotations

import copy
import functools
import hashlib
from collections import OrderedDict
from typing import Any, Callable

import torch

# devplan's --quantize exports the XNNPACK quantizer's patterns once per process; tests and
# benchmarks run ExecuTorch's own quantizing flow within the same
from devplan.passes.export.quantize_patterns import patterns_exported_once as patterns_exported_once
from testbed.executorch import executorch_pte
from testbed.shared import shared_bytes

CACHE_BYTES = 256 << 20  # a bound on the .pte bytes kept: the suite runs in one process


def fingerprint(ep: torch.export.ExportedProgram) -> str | None:
    """A digest of everything ExecuTorch's lowering reads from `ep`: the graph with every
    value's shape, dtype and stride, the signature, the input and output trees, the range
    constraints and every parameter, buffer and constant byte for byte; None when some part
    cannot be hashed (the caller then lowers without the cache)."""
    try:
        digest = hashlib.sha256()
        for part in (
            ep.graph_module.print_readable(print_output=False, include_stride=True, include_device=True),
            ep.graph_signature,
            ep.call_spec.in_spec,
            ep.call_spec.out_spec,
            ep.range_constraints,
            ep.dialect,
        ):
            digest.update(str(part).encode() + b"\0")
        for name, value in sorted({**ep.state_dict, **ep.constants}.items()):
            if not isinstance(value, torch.Tensor) or value.layout != torch.strided or value.is_complex():
                return None
            value = value.detach().cpu().contiguous()
            digest.update(f"{name} {value.dtype} {tuple(value.shape)} {value.requires_grad}\0".encode())
            if value.numel():
                digest.update(value.view(-1).view(torch.uint8).numpy().tobytes())
        return digest.hexdigest()
    except Exception:  # noqa: BLE001 - an unusual program: no caching, its own lowering
        return None


class BoundedCache:
    """Least recently used first out, keeping the sum of the values' sizes within `limit`."""

    def __init__(self, limit: int, size: Callable[[Any], int]) -> None:
        self.limit, self.size, self.entries, self.total = limit, size, OrderedDict(), 0
        self.hits = self.misses = 0

    def get(self, key: str, make: Callable[[], Any]) -> Any:
        if key in self.entries:
            self.hits += 1
            self.entries.move_to_end(key)
            return self.entries[key]
        self.misses += 1
        value = make()
        self.entries[key] = value
        self.total += self.size(value)
        while self.total > self.limit and len(self.entries) > 1:
            self.total -= self.size(self.entries.popitem(last=False)[1])
        return value


def by_program(limit: int = CACHE_BYTES, size: Callable[[Any], int] = len, shared: str | None = None):
    """Decorator: `fn(ep)` computed once per distinct program (fingerprint) and kept in a
    BoundedCache; `fn` gets a deep copy of `ep`, so what it does to it stays there. A failure
    is not cached (it raises again next time). `fn.cache` is the cache. Given `shared` (a name
    for the files), `fn` returns bytes, made once per run for all the workers (testbed/shared.py)."""

    def decorate(fn: Callable[[torch.export.ExportedProgram], Any]):
        cache = BoundedCache(limit, size)

        @functools.wraps(fn)
        def cached(ep: torch.export.ExportedProgram) -> Any:
            key = fingerprint(ep)
            if key is None:
                return fn(copy.deepcopy(ep))
            if shared is None:
                return cache.get(key, lambda: fn(copy.deepcopy(ep)))
            return cache.get(key, lambda: shared_bytes(f"{shared}-{key}", lambda: fn(copy.deepcopy(ep))))

        cached.cache = cache
        return cached

    return decorate


@by_program(shared="executorch")
def executorch_lowered(ep: torch.export.ExportedProgram) -> bytes:
    """testbed.executorch.executorch_pte(ep), lowered once per distinct program in the run, the
    workers sharing it (the benchmarks time executorch_pte itself, so it stays uncached)."""
    return executorch_pte(ep)


def released_after_module(*caches):
    """A module-scoped autouse fixture that empties these functools caches (anything with
    cache_clear) once the module's tests are done: they hold ExportedPrograms and compile
    results its tests share, which the rest of the one-process suite has no use for.
    Assign it to a module-level name in the test file."""
    import pytest

    @pytest.fixture(scope="module", autouse=True)
    def _release_caches():
        yield
        for cache in caches:
            cache.cache_clear()

    return _release_caches


@by_program(size=lambda lowered: len(lowered[0]) + len(lowered[1]))
def executorch_lowered_external(ep: torch.export.ExportedProgram) -> tuple[bytes, bytes]:
    """ExecuTorch's default lowering with its weights in a .ptd (ExecutorchBackendConfig(
    external_constants=True)): (the .pte's bytes, the .ptd's bytes)."""
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

    with torch.no_grad():
        manager = to_edge_transform_and_lower(ep).to_executorch(ExecutorchBackendConfig(external_constants=True))
    (data,) = manager._tensor_data.values()  # one file: every weight under the default tag
    return manager.buffer, bytes(data)


def executorch_xnnpack_external(module: torch.nn.Module, args: tuple) -> tuple[bytes, bytes]:
    """ExecuTorch's XNNPACK lowering with the delegate's weights tagged for a .ptd (its
    delegate_external_constants_pass_unlifted, as its LLM export does): (the .pte's bytes, the
    .ptd's bytes)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.exir.passes.external_constants_pass import delegate_external_constants_pass_unlifted

    with torch.no_grad():
        tagged = torch.export.export(module, args).module()
        delegate_external_constants_pass_unlifted(tagged, gen_tag_fn=lambda node: "model")
        manager = to_edge_transform_and_lower(
            torch.export.export(tagged, args), partitioner=[XnnpackPartitioner()]
        ).to_executorch()
    (data,) = manager._tensor_data.values()  # one file, the tag above
    return manager.buffer, bytes(data)
