"""Forms torch.export leaves in ordinary programs, as real models produce them: regions under
`torch.no_grad()` or autocast, in-place ops on intermediates, outputs of types only their
library registers, and what devplan cannot lower yet (control flow, complex tensors), which
is refused in one line. A bug in devplan itself is one line too, with exit code 3."""

from __future__ import annotations

import subprocess
import sys
from functools import partial

import pytest
import torch
from torch import nn

import devplan
from devplan.errors import DevplanError
from testbed.models import eager_outputs, run_executorch


class GradRegion(nn.Module):
    """transformers' rotary embeddings: a `@torch.no_grad()` helper inside a grad-mode export."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    @torch.no_grad()
    def table(self, x):
        with torch.enable_grad():  # nested region
            inner = x.float().cos()
        return inner * 2

    def forward(self, x):
        return self.proj(x) + self.table(x)


class Autocast(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = self.proj(x)
        return y.float() + 1


class InPlaceBlock(nn.Module):
    """HF MobileNets and ResNets: ReLU6(inplace=True), residual add_, a chain of in-place ops,
    an in-place dropout on a view."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.act = nn.ReLU6(inplace=True)
        self.drop = nn.Dropout(0.5, inplace=True)  # in eval: writes nothing, through a view (flatten)

    def forward(self, x):
        y = self.act(self.conv(x))
        before = y * 1.5  # reads y before it is written
        y.add_(x).mul_(0.5)
        return self.drop((torch.relu_(y) + before).flatten(1))


def _check_both_runtimes(module: nn.Module, args: tuple, ep: torch.export.ExportedProgram, **tolerance) -> None:
    result = devplan.compile(ep)
    (want,) = eager_outputs(module, args)
    (got,) = devplan.run(result.data, list(args))
    (et,) = run_executorch(result.data, args)
    for a, b, c in zip(got, et, want, strict=True):
        torch.testing.assert_close(a, c, **tolerance)
        torch.testing.assert_close(b, c, **tolerance)


@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
def test_grad_regions_are_inlined(grad):
    module, args = GradRegion().eval(), (torch.randn(2, 8),)
    with torch.set_grad_enabled(grad):
        ep = torch.export.export(module, args)
    if grad:  # the form real models give: a higher-order op over a submodule
        assert any("wrap_with_set_grad_enabled" in str(n.target) for n in ep.graph.nodes)
    _check_both_runtimes(module, args, ep)


def test_autocast_region_casts_as_eager():
    module, args = Autocast().eval(), (torch.randn(2, 8),)
    ep = torch.export.export(module, args)
    assert any("wrap_with_autocast" in str(n.target) for n in ep.graph.nodes)
    with torch.no_grad():
        want = module(*args)
    (got,) = devplan.run(devplan.compile(ep).data, list(args))
    torch.testing.assert_close(got[0], want)  # bfloat16 matmul, as eager computes it
    assert not torch.equal(got[0], module.proj(args[0]).detach() + 1)  # the float32 result is not it


def test_in_place_ops_on_intermediates_compile_without_a_retrace(monkeypatch):
    module, args = InPlaceBlock().eval(), (torch.randn(1, 4, 6, 6),)
    ep = torch.export.export(module, args)
    assert {"aten::dropout_", "aten::hardtanh_", "aten::add_"} <= {
        n.target._schema.name for n in ep.graph.nodes if isinstance(n.target, torch._ops.OpOverload)
    }

    def retrace(*_, **__):
        raise AssertionError("the whole program was retraced")

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", retrace)
    _check_both_runtimes(module, args, ep)


def test_in_place_write_to_a_view_still_retraces():
    class ViewWrite(nn.Module):
        def forward(self, x):
            y = x * 2
            y[:, :2].mul_(10)  # the write lands in y through a view
            return y

    module, args = ViewWrite(), (torch.randn(3, 4),)
    _check_both_runtimes(module, args, torch.export.export(module, args))


class Cond(nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (x,))


class Rfft(nn.Module):
    def forward(self, x):
        return torch.fft.rfft(x).abs()


@pytest.mark.parametrize(
    "module, needles",
    [
        (Cond(), ["higher-order op torch.ops.higher_order.cond", "node cond", "test_exported_forms.py"]),
        (Rfft(), ["complex64", "node fft_rfft"]),
    ],
    ids=["cond", "complex"],
)
def test_unlowerable_forms_are_refused_by_name(module, needles):
    ep = torch.export.export(module, (torch.randn(8),))
    with pytest.raises(DevplanError) as refused:
        devplan.compile(ep)
    assert "\n" not in str(refused.value)
    for needle in needles:
        assert needle in str(refused.value)


@pytest.mark.sweep  # end to end through fresh processes; the full suite runs it
def test_a_model_output_type_loads_without_its_library(tmp_path):
    """transformers' ModelOutput classes are pytree nodes only once transformers is imported;
    a fresh `devplan compile` has not imported it, and returns the fields as a dict."""
    script = f"""
import torch
from transformers.modeling_outputs import BaseModelOutput

class M(torch.nn.Module):
    def forward(self, x):
        return BaseModelOutput(last_hidden_state=x.relu(), hidden_states=(x * 2,))

torch.export.save(torch.export.export(M(), (torch.randn(2, 3),)), {str(tmp_path / "m.pt2")!r})
torch.export.save(torch.export.export(M(), (torch.randn(4, 3),)), {str(tmp_path / "n.pt2")!r})
"""
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)
    run = subprocess.run(
        [sys.executable, "-m", "devplan", "compile", tmp_path / "m.pt2"], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    # one process loading several such archives, as a script or server would (torch caches parsed specs)
    twice = f"import devplan; [devplan.compile(p) for p in ({str(tmp_path / 'm.pt2')!r}, {str(tmp_path / 'n.pt2')!r})]"
    run = subprocess.run([sys.executable, "-c", twice], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    x = torch.randn(2, 3)
    got = devplan.run(tmp_path / "m.pte", [x])[0]
    torch.testing.assert_close(got, [x.relu(), x * 2])
    doc = devplan.inspect(tmp_path / "m.pte")
    assert "transformers" not in str(doc)


def test_a_bug_in_a_stage_is_one_internal_error_line(tmp_path, monkeypatch, capsys):
    import devplan.cli
    import devplan.compiler
    from devplan.compiler import compile
    from devplan.passes import Pipeline

    def broken(low, **how):
        node = next(iter(low.gm.graph.nodes))  # noqa: F841 - the node the error line names
        raise ValueError("deliberately broken")

    # the command's compile, handed the broken table
    monkeypatch.setattr(devplan.compiler, "compile", partial(compile, pipeline=Pipeline(fold=broken)))
    monkeypatch.setattr(sys, "argv", ["devplan", "compile", "samples/mlp.pt2", "-o", str(tmp_path / "m.pte")])
    with pytest.raises(SystemExit) as exit:
        devplan.cli.main()
    err = capsys.readouterr().err
    assert exit.value.code == 3
    (line,) = err.strip().splitlines()
    assert line.startswith("devplan: internal error in stage fold at node ")
    assert f"devplan {devplan.__version__}" in line and "ValueError: deliberately broken" in line
    log = line.split("traceback in ")[1].split(";")[0]
    assert "Traceback (most recent call last)" in open(log).read()
    assert not (tmp_path / "m.pte").exists()

    monkeypatch.setattr(
        sys, "argv", ["devplan", "compile", "samples/mlp.pt2", "-o", str(tmp_path / "m.pte"), "--debug"]
    )
    with pytest.raises(SystemExit) as exit:
        devplan.cli.main()
    assert exit.value.code == 3
    assert "Traceback (most recent call last)" in capsys.readouterr().err


class SparseOut(nn.Module):
    def forward(self, x):
        return (x.relu() * 2).to_sparse()


class QuantizedTensor(nn.Module):
    def forward(self, x):
        return torch.quantize_per_tensor(x, 0.1, 0, torch.quint8).dequantize()


class WhileLoop(nn.Module):
    def forward(self, x):
        return torch._higher_order_ops.while_loop(
            lambda i, t: i < 3, lambda i, t: (i + 1, t * 2), (torch.tensor(0), x)
        )[1]


ODD = {
    "cond": Cond(),
    "rfft": Rfft(),
    "sparse": SparseOut(),
    "quantized_tensor": QuantizedTensor(),
    "while_loop": WhileLoop(),
    "grad_region": GradRegion(),
    "autocast": Autocast(),
    "in_place": InPlaceBlock().eval(),
    "in_place_training": InPlaceBlock(),
}
ODD_ARGS = {
    "grad_region": (torch.randn(2, 8),),
    "autocast": (torch.randn(2, 8),),
    "in_place": (torch.randn(1, 4, 6, 6),),
    "in_place_training": (torch.randn(1, 4, 6, 6),),
}


@pytest.mark.sweep  # end to end through fresh processes; the full suite runs it
def test_odd_exports_through_the_cli_never_print_a_traceback(tmp_path):
    """Each odd export saved as users save it and compiled by `devplan compile` in a fresh
    process: it compiles, or it is one error line with exit 2; never a traceback."""
    saved = []
    for name, module in ODD.items():
        try:
            ep = torch.export.export(module, ODD_ARGS.get(name, (torch.randn(8),)))
            torch.export.save(ep, tmp_path / f"{name}.pt2")
        except Exception:  # torch.export or its archive cannot take it: nothing for devplan to read
            continue
        saved.append(name)
    assert {"cond", "rfft", "grad_region", "autocast", "in_place"} <= set(saved)
    for name in saved:
        run = subprocess.run(
            [sys.executable, "-m", "devplan", "compile", tmp_path / f"{name}.pt2"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert "Traceback" not in run.stdout + run.stderr, (name, run.stderr)
        assert run.returncode in (0, 2), (name, run.returncode, run.stderr)
        if run.returncode == 2:
            (line,) = run.stderr.strip().splitlines()
            # devplan's refusals name the node; torch's own load failures (a nested grad region
            # does not survive torch.export.save and load) name the file
            assert line.startswith("devplan: error: ") and ("node " in line or f"{name}.pt2" in line), (name, line)
