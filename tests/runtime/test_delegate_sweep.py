"""Delegation sweep: every testbed.models CORPUS model and every test_module_sweep case that
devplan compiles without delegates, compiled with several `--delegate` settings (everything
on cuda:0; only the heavy ops; only elementwise ops, which makes many small groups and many
host<->device copies; two backends on two devices; everything on cuda:0 with device_io),
run by devplan's reference runtime with host memory standing in for CUDA, and compared
with eager PyTorch (two runs on one loaded method, so stateful models carry their state).
The inspection document must list the delegates the compiler made, each on its backend's
device and running only the ops its backend names; with everything delegated the host
only copies (and writes mutated buffers back), and with device_io not even that.

A compile-time DevplanError is an acceptable refusal only when it is one line naming the
node or op; anything else is a bug. Known failures are strict xfails whose reason is the
first line of the error they end in, checked here word for word, so a fix or a changed
failure shows up."""

from __future__ import annotations

import functools
import re

import pytest
import torch
from torch.utils import _pytree as pytree

import devplan
from devplan.errors import DevplanError, first_line
from devplan.pte import read_pte
from devplan.runtime import HostAllocator, LoadedMethod, registered
from testbed.models import CORPUS, eager_outputs
from tests.compile.test_module_sweep import CASES, XFAIL
from tests.tiers import rotating

pytestmark = pytest.mark.sweep  # the slow tier: deselect with -m 'not sweep'
SHARE_BY = "model"  # a model's settings share its export (tests/conftest.py)

HEAVY = "aten::linear,aten::convolution,aten::addmm,aten::mm,aten::bmm"
ELEMENTWISE = "aten::relu,aten::add,aten::mul"
# id -> (delegates, other devplan.compile options)
SETTINGS = {
    "all": (["cuda:0"], {}),
    "heavy": ([f"cuda:0={HEAVY}"], {}),
    "elementwise": ([f"cuda:0={ELEMENTWISE}"], {}),
    "two-backends": (["cuda:0=aten::linear", "cuda:1"], {}),
    "all-device-io": (["cuda:0"], {"device_io": True}),
}
MODELS = [f"corpus:{name}" for name in CORPUS] + [f"sweep:{name}" for name in CASES if name not in XFAIL]
RUNS = 2
COPIES = ("et_copy::_h2d_copy", "et_copy::_d2h_copy")


def build(model: str):
    """A fresh eval-mode module without gradients and its example args."""
    kind, name = model.split(":", 1)
    if kind == "corpus":
        module, args = CORPUS[name]()
    else:
        torch.manual_seed(0)
        module, args = CASES[name]()
    return module.eval().requires_grad_(False), args


def _close(got, want, where: str) -> None:
    assert isinstance(got, torch.Tensor), f"{where}: {type(got).__name__} instead of a tensor"
    assert (got.dtype, tuple(got.shape)) == (want.dtype, tuple(want.shape)), (
        f"{where}: {got.dtype}{tuple(got.shape)} instead of {want.dtype}{tuple(want.shape)}"
    )
    tolerance = dict(rtol=1e-4, atol=1e-5) if want.dtype == torch.float32 else {}
    torch.testing.assert_close(got, want, **tolerance, msg=lambda m: f"{where}: {m}")


def _ops(program: dict) -> set[str]:
    return {op["name"] for op in program["methods"][0]["operators"]}


def _named(kernel: str, ops: set[str]) -> bool:
    """Whether a payload's kernel runs one of the graph ops a backend names: a view op runs
    as its *_copy kernel inside a payload, and split as split_with_sizes_copy."""
    return (
        kernel in ops
        or kernel.removesuffix("_copy") in ops
        or (kernel == "aten::split_with_sizes_copy" and "aten::split" in ops)
    )


def _check_document(result, delegates: list[str], device_io: bool) -> None:
    """inspect reads the program and lists every delegate the compiler made, where it made it."""
    doc = devplan.inspect(result.data)
    method = doc["methods"][0]
    shown, made = method["delegates"], result.planned.method.delegates
    assert len(shown) == len(made) == method["counts"]["delegates"]
    devices = [text.partition("=")[0] for text in delegates]
    # ops each device runs when one backend there names them
    restricted = {
        text.partition("=")[0]: set(text.partition("=")[2].split(","))
        for text in delegates
        if "=" in text and devices.count(text.partition("=")[0]) == 1
    }
    called = {row["delegate"] for row in method["instructions"] if row["delegate"] is not None}
    assert called == set(range(len(made))), f"delegates called: {sorted(called)} of {len(made)}"
    for row, delegate in zip(shown, made):
        target = dict(delegate.compile_specs)["target_device"].decode()
        assert (row["id"], row["target_device"], row["payload_size"]) == (
            "DevplanDelegate",
            target,
            len(delegate.payload),
        )
        assert target in devices
        assert row["payload_buffers"] is not None and {b["device"] for b in row["payload_buffers"]} <= {target}
        if target in restricted:  # a backend that names its ops runs those and no others
            names = _ops(devplan.inspect(delegate.payload))
            others = {n for n in names if not _named(n, restricted[target])}
            assert not others, f"delegate {row['index']} on {target} runs {sorted(others)}"
    if delegates == ["cuda:0"]:  # every op went to the device: the host only copies, and writes
        # mutated buffers back (state stays on the host: aten::copy_, one per buffer)
        host = [row["op"] for row in method["instructions"] if row["kind"] == "kernel"]
        left = [op for op in host if not op.startswith(COPIES)]
        assert left == ["aten::copy_"] * len(result.planned.method.state), f"left on the host: {left}"
        if device_io and not result.planned.method.state:  # the caller's copies replace et_copy
            assert not [op for op in host if op.startswith(COPIES)], f"copies with device_io: {host}"


@functools.lru_cache(maxsize=1)
def exported(model: str):
    """The model's args, its eager outputs over RUNS calls, and its export (compile leaves
    the ExportedProgram as it was, so a model's settings share one)."""
    module, args = build(model)
    return args, eager_outputs(module, args, runs=RUNS), torch.export.export(module, args, strict=False)


def check(model: str, setting: str) -> None:
    args, want, ep = exported(model)
    delegates, options = SETTINGS[setting]
    try:
        result = devplan.compile(ep, delegates=delegates, **options)
    except DevplanError as error:
        text = str(error)
        assert "\n" not in text.strip() and re.search(r"\b(node|output|input) \S+|\baten[.:]", text), (
            f"a refusal that is not one line naming the node or op: {text!r}"
        )
        raise
    _check_document(result, delegates, options.get("device_io", False))
    inputs = pytree.tree_leaves(args)
    before = [t.clone() for t in inputs]
    with registered("cuda", HostAllocator()):
        loaded = LoadedMethod(read_pte(result.data))
        try:
            got = [loaded.execute(inputs) for _ in range(RUNS)]
        finally:
            loaded.release()
    for index, (now, then) in enumerate(zip(inputs, before)):
        torch.testing.assert_close(now, then, rtol=0, atol=0, msg=lambda m: f"input {index} changed: {m}")
    for run, (got_run, want_run) in enumerate(zip(got, want)):
        assert len(got_run) == len(want_run), f"run {run}: {len(got_run)} outputs, eager has {len(want_run)}"
        for index, (g, w) in enumerate(zip(got_run, want_run)):
            _close(g, w, f"run {run} output {index}")


# (model, setting) -> (exception type, first line of its message)
KNOWN: dict[tuple[str, str], tuple[type[BaseException], str]] = {}


# the suite holds every model to "all" and one other setting in turn; the whole cross, to release
SUITE = rotating(MODELS, list(SETTINGS))


def _param(model: str, setting: str):
    marks = [] if (model, setting) in SUITE else [pytest.mark.release]
    known = KNOWN.get((model, setting))
    if known is not None:
        marks.append(pytest.mark.xfail(strict=True, raises=known[0], reason=known[1]))
    return pytest.param(model, setting, marks=marks)


@pytest.mark.parametrize("model,setting", [_param(m, s) for m in MODELS for s in SETTINGS])
def test_delegated_program_matches_eager(model, setting):
    try:
        check(model, setting)
    except Exception as error:
        known = KNOWN.get((model, setting))
        if known is not None and (type(error), first_line(error)) != known:
            raise AssertionError(
                f"expected {known[0].__name__}: {known[1]}; got {type(error).__name__}: {first_line(error)}"
            ) from error
        raise
