"""ExecuTorch's own backends inside devplan's programs (`--backend xnnpack`, `--partitioner`):
the delegates are ExecuTorch's (its partitioner, its backend's preprocess, its named data),
everything around them devplan's; the programs run on ExecuTorch's runtime as eager does and
plan no more than ExecuTorch's XNNPACK program of the same export. A test per refusal."""

from __future__ import annotations

import copy
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import devplan
from devplan.backend import Partitioner
from devplan.errors import DevplanError
from devplan.pte import read_pte
from testbed.cli import devplan as devplan_cli
from testbed.hf_models import FAMILIES
from testbed.models import CORPUS, STATEFUL, eager_outputs, eager_runs, export, pt2e_quantize, run_executorch
from tests.tiers import tiered

ROOT = Path(__file__).resolve().parents[2]
SHARE_BY = "name"  # a model's tests share its export and ExecuTorch's program (tests/conftest.py)
FAST = ("conv_bn_relu", "accumulator")  # a convolution and a stateful model; the rest in the full suite


@functools.lru_cache(maxsize=None)
def executorch_xnnpack(name: str) -> bytes:
    """ExecuTorch's own XNNPACK program of the corpus model's export."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    with torch.no_grad():
        return to_edge_transform_and_lower(export(name)[0], partitioner=[XnnpackPartitioner()]).to_executorch().buffer


def planned_bytes(data: bytes) -> int:
    return sum(int(size) for plan in read_pte(data).program.executionPlan for size in plan.nonConstBufferSizes)


@pytest.mark.parametrize("name", tiered(CORPUS, FAST))
def test_xnnpack_program_runs_as_eager_and_plans_no_more(name):
    ep, module, args = export(name)
    result = devplan.compile(ep, backends=["xnnpack"])
    runs = 3 if name in STATEFUL else 1  # state carries over between calls, as in eager
    want = eager_outputs(module, args, runs=runs)
    for got_run, want_run in zip(run_executorch(result.data, args, runs=runs), want):
        for got, expected in zip(got_run, want_run, strict=True):
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert planned_bytes(result.data) <= planned_bytes(executorch_xnnpack(name))
    delegates = result.planned.method.delegates
    if name != "layer_norm" and name != "reductions":  # XNNPACK takes nothing of these two
        assert delegates and {d.backend for d in delegates} == {"XnnpackBackend"}


@pytest.mark.parametrize("name", tiered(CORPUS, ("linear", "transformer_encoder")))
def test_delegates_are_written_as_executorch_writes_them(name):
    """Same backend ids, payload bytes and named data (XNNPACK's weights) as ExecuTorch's
    program, with the partitions preprocessed on two processes (ExecuTorch's on one)."""
    ours = read_pte(devplan.compile(export(name)[0], backends=["xnnpack"], jobs=2).data)
    theirs = read_pte(executorch_xnnpack(name))

    def delegates(pte):
        plan = pte.program.executionPlan[0]
        return [
            (
                d.id,
                pte.segments[d.processed.index]
                if d.processed.location == 1
                else bytes(pte.program.backendDelegateData[d.processed.index].data),
            )
            for d in plan.delegates
        ]

    def named(pte):
        return {e.key: pte.segments[e.segmentIndex] for e in pte.program.namedData or ()}

    assert {d[0] for d in delegates(ours)} <= {b"XnnpackBackend"}
    assert delegates(ours) == delegates(theirs)
    assert named(ours) == named(theirs)


QUANTIZED = {
    "static_per_tensor": {},
    "static_per_channel": {"is_per_channel": True},
    "dynamic_per_tensor": {"is_dynamic": True},
    "dynamic_per_channel": {"is_per_channel": True, "is_dynamic": True},
}
QUANTIZED_MODELS = {
    "mlp": lambda: (
        torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)),
        (torch.randn(4, 16),),
    ),
    "conv": lambda: (
        torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3)),
        (torch.randn(1, 3, 12, 12),),
    ),
}
QUANTIZED_CASES = [
    (model, config)
    for model in QUANTIZED_MODELS
    for config in QUANTIZED
    if model == "mlp" or config.startswith("static")
]  # XNNPACK quantizes convs statically


@pytest.mark.parametrize("model, config", tiered(QUANTIZED_CASES, [("mlp", "static_per_channel")]))
def test_quantized_programs_go_to_xnnpack_quantized_kernels(model, config):
    """PT2E programs quantized with the XNNPACK quantizer: the quantize and dequantize
    patterns fuse into XNNPACK's delegates, as in ExecuTorch's program, which devplan's plans
    no more than; outputs as the quantized module's."""
    import executorch.kernels.quantized  # noqa: F401 - the out variants ExecuTorch's own lowering needs
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    torch.manual_seed(0)
    module, args = QUANTIZED_MODELS[model]()
    ep, converted = pt2e_quantize(module, args, **QUANTIZED[config])
    result = devplan.compile(ep, backends=["xnnpack"])
    left = {k.op for k in result.planned.method.kernels if k.delegate is None}
    with torch.no_grad():
        theirs = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    # nothing quantized left outside the delegates that ExecuTorch's program does not leave too
    ours = {op.split(".")[0] for op in left if op.startswith("quantized_decomposed")}
    assert ours <= {op.name.decode() for op in read_pte(theirs).program.executionPlan[0].operators or ()}, ours
    if config.startswith("static"):
        assert not ours
    (got,) = run_executorch(result.data, args)[0]
    torch.testing.assert_close(got, converted(*args), rtol=0.05, atol=0.05)
    assert planned_bytes(result.data) <= planned_bytes(theirs)


def test_backend_and_delegate_combine_in_order():
    """--delegate cuda:0=aten::linear first keeps the linears from XNNPACK; after it, it gets
    only what XNNPACK left."""
    ep = export("gated_mlp")[0]
    first = devplan.compile(ep, delegates=["cuda:0=aten::linear", Partitioner.parse("xnnpack")])
    devices = {(d.backend, str(d.device)) for d in first.planned.method.delegates}
    assert ("DevplanDelegate", "cuda:0") in devices and ("XnnpackBackend", "cpu") in devices
    after = devplan.compile(ep, delegates=[Partitioner.parse("xnnpack"), "cuda:0=aten::linear"])
    assert {d.backend for d in after.planned.method.delegates} == {"XnnpackBackend"}


def test_target_device_compile_spec_places_the_delegate():
    """A partitioner that names a device in its compile spec gets that device's buffer,
    copies in and out, as --delegate does."""
    ep = export("linear")[0]
    result = devplan.compile(
        ep, delegates=[Partitioner.parse_class('tests.partitioners:AddsTo:{"target_device": "cuda:0"}')]
    )
    (delegate,) = result.planned.method.delegates
    assert delegate.backend == "ConcatBytes" and str(delegate.device) == "cuda:0"
    assert "cuda:0" in {str(b.device) for b in result.planned.buffers}
    ops = {k.op for k in result.planned.method.kernels}
    assert "et_copy::_h2d_copy.out" in ops and "et_copy::_d2h_copy.out" in ops


def one_line_error(run, *needles):
    assert run.returncode == 2, run.stderr
    lines = [line for line in run.stderr.strip().splitlines() if line.startswith("devplan:")]
    assert len(lines) == 1 and lines[0].startswith("devplan: error:"), run.stderr
    assert "Traceback" not in run.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.mark.sweep  # end to end through fresh processes; test_xnnpack_program_runs_as_eager_and_plans_no_more is the fast tier's
def test_cli_compile_inspect_and_run(tmp_path):
    program = tmp_path / "cnn.pte"
    run = devplan_cli("compile", ROOT / "samples" / "cnn.pt2", "-o", program, "--backend", "xnnpack")
    assert run.returncode == 0, run.stderr
    assert "XnnpackBackend" in run.stdout
    doc = json.loads(devplan_cli("inspect", program, "--json").stdout)
    assert [d["id"] for d in doc["methods"][0]["delegates"]] == ["XnnpackBackend"]
    assert doc["file"]["named_data"], "XNNPACK's weights are named data"
    one_line_error(devplan_cli("run", program), "XnnpackBackend", "--executorch")
    ran = devplan_cli("run", program, "--executorch", "--json")
    assert ran.returncode == 0, ran.stderr
    plain = tmp_path / "plain.pte"
    assert devplan_cli("compile", ROOT / "samples" / "cnn.pt2", "-o", plain).returncode == 0
    theirs = json.loads(devplan_cli("run", plain, "--json").stdout)
    assert json.loads(ran.stdout)["runs"][0][0]["shape"] == theirs["runs"][0][0]["shape"]
    assert abs(json.loads(ran.stdout)["runs"][0][0]["mean"] - theirs["runs"][0][0]["mean"]) < 1e-4


_SWEEP = pytest.mark.sweep  # one refusal of each kind stays fast: a bad name, a bad argument, a failing backend


@pytest.mark.parametrize(
    "option, needle",
    [
        (["--backend", "nosuch"], "unknown backend"),
        pytest.param(["--partitioner", "no_module_here:Cls"], "cannot import no_module_here", marks=_SWEEP),
        pytest.param(["--partitioner", "json:NoClass"], "no partitioner class NoClass", marks=_SWEEP),
        (["--partitioner", "tests.partitioners:AddsTo:[1]"], "JSON object"),
        pytest.param(
            ["--partitioner", "tests.partitioners:Raises", "--strict-backend"],
            "the partitioner failed: this partitioner always fails",
            marks=_SWEEP,
        ),
        pytest.param(["--partitioner", "tests.partitioners:NotAResult"], "not a PartitionResult", marks=_SWEEP),
        pytest.param(
            ["--partitioner", "tests.partitioners:EmptyPayload", "--strict-backend"],
            "ExecuTorch's lowering failed: its preprocess made no payload",
            marks=_SWEEP,
        ),
        (
            ["--partitioner", "tests.partitioners:RaisingBackend", "--strict-backend"],
            "backend FailsToCompile, partition add0 from node",
        ),
    ],
    ids=["unknown", "import", "class", "kwargs", "raises", "not-a-result", "empty-payload", "preprocess-raises"],
)
def test_refusals(tmp_path, option, needle):
    one_line_error(devplan_cli("compile", ROOT / "samples" / "mlp.pt2", "-o", tmp_path / "p.pte", *option), needle)
    assert not (tmp_path / "p.pte").exists()


def test_jobs_share_the_partitions_among_processes():
    """--jobs 2: some partitions' preprocess ran in this process, the others in a worker (each
    payload names the process that made it); --jobs 1 makes them all here."""
    ep = export("gated_mlp")[0]
    payloads = {}
    for jobs in (1, 2):
        result = devplan.compile(ep, delegates=[Partitioner.parse_class("tests.partitioners:InProcesses")], jobs=jobs)
        pte = read_pte(result.data)
        delegates = range(len(pte.program.executionPlan[0].delegates))
        payloads[jobs] = {int(bytes(pte.delegate_payload(0, index))) for index in delegates}
    assert payloads[1] == {os.getpid()}
    assert os.getpid() in payloads[2] and len(payloads[2]) == 2


def test_a_worker_that_dies_is_one_line(tmp_path):
    ran = devplan_cli(
        "compile", ROOT / "samples" / "mlp.pt2", "-o", tmp_path / "p.pte", "--jobs", "2",
        "--partitioner", "tests.partitioners:DiesInAWorker",
    )  # fmt: skip
    one_line_error(ran, "backend DiesOutsideTheTest", "died without an answer (signal SIGKILL)")
    assert not (tmp_path / "p.pte").exists()


def test_the_program_is_the_same_bytes_whatever_the_jobs():
    """The whole program; test_delegates_are_written_as_executorch_writes_them holds every
    corpus model's delegates to ExecuTorch's with two jobs."""
    ep = export("transformer_encoder")[0]
    one, two = (devplan.compile(copy.deepcopy(ep), backends=["xnnpack"], jobs=jobs).data for jobs in (1, 2))
    assert one == two


def test_the_lowering_leaves_torch_and_executorch_as_it_found_them():
    """What devplan changes for the length of ExecuTorch's lowering (graph code on demand, the
    last decomposition skipped where nothing is left) is put back, after a lowering and after a
    failed one: later GraphModules write their code, and ExecuTorch's own lowering is its own."""
    import executorch.exir.program._program as program

    before = (torch.fx.GraphModule.__new__, program._replace_aten_ops_with_transformed_ops)
    devplan.compile(export("transformer_encoder")[0], backends=["xnnpack"])
    with pytest.raises(DevplanError):
        devplan.compile(export("accumulator")[0], delegates=[Partitioner.parse_class("tests.partitioners:TakesState")])
    assert (torch.fx.GraphModule.__new__, program._replace_aten_ops_with_transformed_ops) == before
    made = torch.fx.symbolic_trace(torch.nn.Linear(2, 2))
    assert type(made).__mro__[1] is torch.fx.GraphModule and "linear" in made.code


def test_a_partition_that_takes_state_is_refused():
    with pytest.raises(DevplanError, match="crosses a mutation: node .* takes state the program updates"):
        devplan.compile(export("accumulator")[0], delegates=[Partitioner.parse_class("tests.partitioners:TakesState")])


def test_without_executorch_the_option_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "executorch.exir", None)  # as if the extra were not installed
    with pytest.raises(DevplanError, match=r'pip install "devplan\[executorch\]"'):
        devplan.compile(export("linear")[0], backends=["xnnpack"])


def test_the_core_never_imports_executorch(tmp_path):
    """compile, inspect and run without --backend work where importing ExecuTorch fails."""
    script = f"""
import sys
sys.modules["executorch"] = None
import devplan
from devplan.runtime import run
from devplan.pte import read_pte
result = devplan.compile({str(ROOT / "samples" / "mlp.pt2")!r}, {str(tmp_path / "m.pte")!r})
devplan.inspect({str(tmp_path / "m.pte")!r})
assert not any(name.startswith("executorch") and sys.modules[name] is not None for name in sys.modules)
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr


# a decoder LLM and a conv net; benchmarks/latency_vs_executorch.py holds every family of the corpus to the same
# (outputs as eager's on ExecuTorch's runtime, planned bytes against ExecuTorch's XNNPACK program)
XNNPACK_FAMILIES = ("llama", "resnet")


@pytest.mark.sweep
@pytest.mark.parametrize("family", XNNPACK_FAMILIES)
def test_transformers_family_with_xnnpack(family):
    """A family of the transformers corpus, exported under no_grad as ExecuTorch's flows do:
    devplan's XNNPACK program runs on ExecuTorch's runtime as eager does and plans no more
    than ExecuTorch's XNNPACK program of the same export."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from torch.utils import _pytree as pytree

    module, args, kwargs = FAMILIES[family]()
    with torch.no_grad():
        ep = torch.export.export(module, args, kwargs, strict=False)
    result = devplan.compile(ep, backends=["xnnpack"])
    assert any(d.backend == "XnnpackBackend" for d in result.planned.method.delegates)
    (want,) = eager_runs(module, [(args, kwargs)])
    (got,) = run_executorch(result.data, tuple(pytree.tree_leaves((args, kwargs))))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        theirs = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    assert planned_bytes(result.data) <= planned_bytes(theirs)


def test_dynamic_shapes_run_at_every_size_within_the_bound():
    """XNNPACK's delegates take a dynamic batch; devplan plans the tensors around them at the
    bound and the program runs any batch up to it."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8)).eval()
    batch = torch.export.Dim("batch", max=64)
    ep = torch.export.export(module, (torch.randn(4, 16),), dynamic_shapes=({0: batch},), strict=False)
    result = devplan.compile(ep, backends=["xnnpack"])
    for size in (1, 4, 33, 64):
        x = torch.randn(size, 16)
        (got,) = run_executorch(result.data, (x,))[0]
        torch.testing.assert_close(got, module(x), rtol=1e-4, atol=1e-4)


def test_a_table_over_a_program_decomposed_in_the_lowering_runs_only_where_the_graph_calls_its_ops():
    """ExecuTorch's table passes on a program its functionalizing decomposition just made are
    skipped where the graph calls none of the table's ops (passes/export/backends.py); a program
    from outside the lowering, or one that calls a table op, is decomposed as before."""
    from devplan.passes.export.backends import _decompositions_where_needed

    class Model(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.hardswish(x) + 1

    ep = torch.export.export(Model(), (torch.randn(2, 3),))
    calls = torch.ops.aten.hardswish.default
    table = {op: fn for op, fn in torch.export.default_decompositions().items() if op is not calls}
    with _decompositions_where_needed("--backend"):
        assert ep.run_decompositions(table) is not ep  # not made here: decomposed
        made = ep.run_decompositions({})
        assert made.run_decompositions(table) is made  # calls none of the table's ops
        decomposed = made.run_decompositions({calls: table.get(calls) or torch._decomp.decomposition_table[calls]})
        assert decomposed is not made
        assert calls not in {node.target for node in decomposed.graph.nodes}
    assert torch.export.ExportedProgram.run_decompositions.__name__ != "where_needed"  # restored
