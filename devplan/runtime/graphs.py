"""A device payload's steps as one CUDA graph: its arenas are fixed for the method's life and its
tensors are views of them, so the kernel launches of one call, captured once, replay as one
launch. Each step's Python dispatch is what made a device run slower than eager PyTorch.

A payload is captured on its second call (the first warms up, on the capture's own stream, what
kernels set up once: cuBLAS handles and workspaces, cuDNN's algorithm choice) and replayed while every tensor it is handed
lies at the same address with the same shape. What a graph cannot hold runs step by step, and
says why once on the `devplan` logger (shown with --debug): a host-backed arena, a dynamic shape,
a jump, a copy to or from the host, a nested delegate, or a kernel that syncs with the host
(capture fails)."""

from __future__ import annotations

import logging
from typing import Any

import torch

from devplan.errors import first_line
from devplan.ops import TO_DEVICE, TO_HOST
from devplan.runtime.interpreter import Bounds, Refs, Step, interpret

log = logging.getLogger("devplan.runtime")


class GraphSteps:
    """Runs a payload's steps: step by step on the first call, then as a CUDA graph captured on
    the second and replayed after, re-captured when its inputs move."""

    def __init__(self, steps: list[Step], arenas: list[torch.Tensor], bounds: Bounds, where: str) -> None:
        self.steps, self.where = steps, where
        self.off = _why_not(steps, arenas, bounds)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.key: tuple[Any, ...] = ()
        self.work = 0  # tensor elements one call reads and writes, counted when it ran step by step
        self.calls = 0
        # warm-up and capture on one stream of their own: cuBLAS keeps a workspace per stream,
        # and a capture on a stream its warm-up did not use would take a second one
        self.stream = torch.cuda.Stream() if not self.off else None  # type: ignore[no-untyped-call]  # torch declares it untyped
        if self.off and any(a.is_cuda for a in arenas) and any(s.kind == "kernel" for s in steps):
            log.debug("%s: no CUDA graph (%s); it runs step by step", where, self.off)

    def __call__(self, values: list[Any], bounds: Bounds) -> int:
        self.calls += 1
        if self.off or self.stream is None:  # no stream of its own exactly when off
            self.work = interpret(self.steps, values, bounds, self.where)
            return self.work
        if self.calls == 1:
            current = torch.cuda.current_stream()
            self.stream.wait_stream(current)
            with torch.cuda.stream(self.stream):
                self.work = interpret(self.steps, values, bounds, self.where)
            current.wait_stream(self.stream)
            return self.work
        key = _addresses(values)
        if self.graph is None or key != self.key:
            self.graph = self._capture(values, bounds)
            self.key = key
            if self.graph is None:
                return self.work
        self.graph.replay()
        return self.work

    def _capture(self, values: list[Any], bounds: Bounds) -> torch.cuda.CUDAGraph | None:
        """The steps captured as a graph (not yet run), or None when a kernel cannot be captured:
        then they have run step by step, and always will."""
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, stream=self.stream):
                interpret(self.steps, values, bounds, self.where)
        except Exception as error:  # noqa: BLE001 - any kernel torch cannot capture: run without a graph
            self.off = f"capture failed: {first_line(error)}"
            log.debug("%s: no CUDA graph (%s); it runs step by step", self.where, self.off)
            torch.cuda.synchronize()
            self.work = interpret(self.steps, values, bounds, self.where)
            return None
        return graph

    def release(self) -> None:
        self.graph = None  # its memory pool goes back with it


def _why_not(steps: list[Step], arenas: list[torch.Tensor], bounds: Bounds) -> str:
    """Why these steps cannot be one graph, or "" when they can."""
    if not arenas or not all(a.is_cuda for a in arenas):
        return "its buffers are not in CUDA memory"
    if not torch.cuda.is_available():
        return "no CUDA device"
    if bounds:
        return "it has tensors of dynamic shape"
    for step in steps:
        if step.kind == "jump_false":
            return "it jumps"
        if step.kind == "delegate":
            return "it calls a nested delegate"
        if step.name in (TO_DEVICE, TO_HOST):
            return "it copies to or from the host"
    return ""


def _addresses(values: list[Any]) -> tuple[Any, ...]:
    """What a captured graph has baked in: each tensor's address and shape, each number."""
    return tuple(
        (v.data_ptr(), tuple(v.shape))
        if isinstance(v, torch.Tensor)
        else v.items
        if isinstance(v, Refs)
        else v
        if isinstance(v, (int, float, bool, type(None)))
        else id(v)
        for v in values
    )


def captured(method: Any) -> bool:
    """Whether a loaded method (or a delegate it calls) replays a CUDA graph."""
    return any(
        getattr(m, "graph_steps", None) is not None and m.graph_steps.graph is not None
        for m in (method, *getattr(method, "delegates", ()))
    )
