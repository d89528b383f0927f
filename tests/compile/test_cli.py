"""`devplan compile` as a user runs it: files in, one summary or one error line out."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from testbed.cli import assert_one_line_error, devplan

ROOT = Path(__file__).resolve().parents[2]


def test_compile_sample_then_inspect(tmp_path):
    model = tmp_path / "mlp.pt2"
    shutil.copy(ROOT / "samples" / "mlp.pt2", model)
    run = devplan("compile", model)
    assert run.returncode == 0, run.stderr
    program = tmp_path / "mlp.pte"  # -o defaults to the input's name
    # the summary wraps at the console's width (80 in a pipe): a long temporary path goes on a line of its own
    assert program.exists() and f"wrote {program}" in " ".join(run.stdout.split())
    assert "buffer 1 (cpu)" in run.stdout and "lower bound" in run.stdout
    doc = json.loads(devplan("inspect", program, "--json").stdout)
    assert doc["methods"][0]["buffers"][0]["device"] == "cpu"


def test_json_summary(tmp_path):
    run = devplan("compile", ROOT / "samples" / "two_io.pt2", "-o", tmp_path / "p.pte", "--json")
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    (method,) = summary["methods"]
    assert (
        method["counts"]["instructions"] > 0 and method["buffers"][0]["size"] >= method["buffers"][0]["lower_bound"] > 0
    )
    assert summary["file"] == {"name": "p.pte", "size": (tmp_path / "p.pte").stat().st_size, "constant_bytes": 1088}
    assert (
        summary["schema_version"] == 1 and summary["timings"]["seconds"] > 0 and "plan" in summary["timings"]["stages"]
    )


def test_dump_dir_has_one_file_per_stage(tmp_path):
    run = devplan("compile", ROOT / "samples" / "cnn.pt2", "-o", tmp_path / "p.pte", "--dump-dir", tmp_path / "dump")
    assert run.returncode == 0, run.stderr
    names = sorted(p.name for p in (tmp_path / "dump").iterdir())
    assert [n.split("-", 1)[1] for n in names] == [
        "load.txt",
        "attention.txt",
        "split.txt",
        "decompose.txt",
        "permutes.txt",
        "broadcasts.txt",
        "fold.txt",
        "views.txt",
        "sizes.txt",
        "build.txt",
        "copies.txt",
        "alias.txt",
        "compact.txt",
        "concat.txt",
        "schedule.txt",
        "inplace.txt",
        "plan.txt",
        "emit.txt",
        "serialize.txt",
        "write.txt",
    ]
    dumped = {n.split("-", 1)[1]: (tmp_path / "dump" / n).read_text() for n in names}
    assert "convolution" in dumped["decompose.txt"] and "aten::convolution.out" in dumped["build.txt"]


@pytest.mark.sweep  # end to end through fresh processes; the full suite runs it
def test_dump_dirs_are_identical_between_runs_and_hash_seeds(tmp_path):
    """Text a person can diff: graphs, method tables, the planned layout; no addresses, paths or timings."""
    import hashlib
    import os

    folders = []
    for seed in ("1", "2"):
        folder = tmp_path / seed
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "devplan",
                "compile",
                ROOT / "samples" / "two_io.pt2",
                "-o",
                folder / "p.pte",
                "--dump-dir",
                folder / "dump",
                "--delegate",
                "cuda:0=aten::linear",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        assert run.returncode == 0, run.stderr
        folders.append({p.name: p.read_text() for p in sorted((folder / "dump").iterdir())})
    assert folders[0] == folders[1]
    dump = {name.split("-", 1)[1]: text for name, text in folders[0].items()}  # by stage, numbers aside
    text = "".join(dump.values())
    assert " at 0x" not in text and str(tmp_path) not in text and "TensorSpec(" not in text
    assert "layout\n  buffer 1 (cpu): 768 bytes, lower bound 768" in dump["plan.txt"]
    # build reads the input on the delegate's device; the copies pass makes that read a copy
    assert (
        "  v4    use of v2 on cuda:0" in dump["build.txt"]
        and "  #0    DevplanDelegate(v4, v5) delegate 0" in dump["build.txt"]
    )
    assert "  #0    et_copy::_h2d_copy.out(v2, v4, v4)" in dump["copies.txt"]
    assert "  #1    DevplanDelegate(v4, v5) delegate 0" in dump["copies.txt"]
    # the payload went through the same stages, dumped under its call's name
    assert {"delegate_0.build.txt", "delegate_0.place.txt", "delegate_0.plan.txt", "delegate_0.serialize.txt"} <= set(
        dump
    )
    digest = hashlib.sha256((tmp_path / "1" / "p.pte").read_bytes()).hexdigest()
    assert dump["write.txt"] == "wrote p.pte\n" and dump["serialize.txt"].endswith(f" bytes, sha256 {digest}\n")


class Unsupported(torch.nn.Module):
    def forward(self, x):
        return torch.linalg.cholesky(x @ x.mT + torch.eye(3))


def test_unsupported_op_names_op_and_node_and_writes_nothing(tmp_path):
    model = tmp_path / "bad.pt2"
    torch.export.save(torch.export.export(Unsupported(), (torch.randn(3, 3),)), model)
    out = tmp_path / "bad.pte"
    run = devplan("compile", model, "-o", out)
    assert_one_line_error(run, "cholesky", "node ")
    assert not out.exists()


def test_failure_keeps_an_existing_output(tmp_path):
    out = tmp_path / "keep.pte"
    out.write_bytes(b"previous program")
    run = devplan("compile", ROOT / "samples" / "mlp.pt2", "-o", out, "--budget", "1=1KiB")
    # a plan over budget fails a check, as `devplan check` does (1); it names the buffer and what
    # is held at its peak by the value numbers `devplan inspect` shows for the program
    assert run.returncode == 1 and run.stderr.count("\n") == 1, run.stderr
    # sizes as every check and diff says them
    assert (
        f"devplan: error: {ROOT / 'samples' / 'mlp.pt2'}: memory buffer 1 (cpu) needs 16.0 KiB (16,384 bytes) but its budget is 1.0 KiB "
        "(1,024 bytes); the lower bound is 16.0 KiB (16,384 bytes) (held at its peak, instruction 0: v8 (8.0 KiB "
        "(8,192 bytes)), v9 (8.0 KiB (8,192 bytes)))"
    ) in run.stderr, run.stderr
    assert out.read_bytes() == b"previous program"


def _zip_of(path, members):
    import zipfile

    with zipfile.ZipFile(path, "w") as archive:
        for name, text in members.items():
            archive.writestr(name, text)


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda p: p, "no such file"),
        (lambda p: (p.mkdir(), p)[1], "directory"),
        (lambda p: (p.write_bytes(b"not a zip"), p)[1], "not a .pt2"),
        (lambda p: (p.write_bytes(b""), p)[1], "not a .pt2"),
        (lambda p: (p.write_bytes((ROOT / "samples" / "mlp.pt2").read_bytes()[:20000]), p)[1], "not a .pt2"),
        (lambda p: (_zip_of(p, {"a.txt": "not a model"}), p)[1], "cannot load the .pt2 archive"),
    ],
)
def test_bad_model_files(tmp_path, make, needle):
    path = make(tmp_path / "model.pt2")
    assert_one_line_error(devplan("compile", path, "-o", tmp_path / "x.pte"), str(path), needle)
    assert not (tmp_path / "x.pte").exists()


def test_a_program_given_as_the_model_is_named_a_program(tmp_path):
    """The default output of X.pte is X.pte itself: the input's kind is the first thing to say."""
    program = tmp_path / "model.pte"
    assert devplan("compile", ROOT / "samples" / "two_io.pt2", "-o", program).returncode == 0
    before = program.read_bytes()
    run = devplan("compile", program)
    assert_one_line_error(run, "not a .pt2 archive (it is an ET12 .pte program; use 'devplan inspect')")
    assert "overwrite" not in run.stderr and program.read_bytes() == before


@pytest.mark.parametrize(
    "args, needle",
    [  # one of each kind in the fast tier: a bad value, a bad budget, a bad flag
        (["--alignment", "12"], "power of two"),
        pytest.param(["--alignment", str(2**40)], "from 1 to 4096", marks=pytest.mark.sweep),
        pytest.param(["--dump-dir", str(ROOT / "README.md")], "is a file", marks=pytest.mark.sweep),
        pytest.param(["--planner", "magic"], "magic", marks=pytest.mark.sweep),
        (["--budget", "1=lots"], "lots"),
        pytest.param(["--budget", "7=1MiB"], "7", marks=pytest.mark.sweep),
        (["--no-such-option"], "--no-such-option"),
    ],
)
def test_bad_options(tmp_path, args, needle):
    run = devplan("compile", ROOT / "samples" / "two_io.pt2", "-o", tmp_path / "x.pte", *args)
    assert_one_line_error(run, needle)
    assert not (tmp_path / "x.pte").exists()


@pytest.mark.sweep  # end to end through fresh processes; the full suite runs it
def test_byte_identical_across_processes(tmp_path):
    """Same input, separate processes, different hash seeds: the same bytes and JSON."""
    import os

    outputs = []
    for seed in ("1", "2"):
        (tmp_path / seed).mkdir()
        out = tmp_path / seed / "program.pte"  # same name: the JSON names the file
        run = subprocess.run(
            [sys.executable, "-m", "devplan", "compile", ROOT / "samples" / "transformer.pt2", "-o", out],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        assert run.returncode == 0, run.stderr
        outputs.append((out.read_bytes(), devplan("inspect", out, "--json", "-s", "all").stdout))
    assert outputs[0] == outputs[1]


def test_unwritable_output_is_one_line(tmp_path):
    run = devplan("compile", ROOT / "samples" / "two_io.pt2", "-o", tmp_path / "missing" / "x.pte")
    assert_one_line_error(run, "missing", "cannot write")


@pytest.mark.sweep  # end to end through fresh processes; the full suite runs it
def test_a_dynamic_size_without_a_bound_or_computed_without_a_kernel_is_refused_by_name(tmp_path):
    class Relu(torch.nn.Module):
        def forward(self, x):
            return x.relu()

    class Power(torch.nn.Module):
        def forward(self, x):
            return x * x.shape[0] ** 2  # ExecuTorch's runtime has no pow of sizes

    for module, dims, message in (
        (Relu(), {"x": {0: torch.export.Dim("batch")}}, "has no upper bound to plan for"),
        (Power(), {"x": {0: torch.export.Dim("batch", max=16)}}, "node pow_1: pow of dynamic sizes has no kernel"),
    ):
        model = tmp_path / "dynamic.pt2"
        torch.export.save(torch.export.export(module, (torch.randn(4, 3, 2),), dynamic_shapes=dims), model)
        run = devplan("compile", model, "-o", tmp_path / "dynamic.pte")
        assert_one_line_error(run, message)
        assert not (tmp_path / "dynamic.pte").exists()


def test_version_and_help():
    top = devplan("--help")
    assert top.returncode == 0 and "--install-completion" in top.stdout and "compile" in top.stdout, top.stdout
    version = devplan("--version")
    assert version.returncode == 0 and version.stdout.startswith("devplan ")
    for command in ("compile", "inspect"):
        run = devplan(command, "--help")
        assert run.returncode == 0 and "--json" in run.stdout


def test_output_cut_short_by_the_reader_is_quiet(tmp_path):
    """`devplan inspect x.pte | head`: no traceback when the reader goes away."""
    from testbed.models import transformer

    module, args = transformer(16)  # its full listing (~130 KB) is far larger than a pipe's buffer
    program = tmp_path / "p.pte"
    import devplan as api

    api.compile(torch.export.export(module, args, strict=False), program)
    pipeline = subprocess.run(
        f"{sys.executable} -m devplan inspect {program} -s all | head -2",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in pipeline.stderr and len(pipeline.stdout.splitlines()) == 2


@pytest.mark.parametrize(
    "args, needle",
    [
        (["run", "{pte}", "--seed", str(2**64)], "--seed"),
        (["run", "{pte}", "--runs", str(10**9)], "--runs"),
        (["check", "{pte}", "--max-ratio", "nan"], "finite ratio of 1 or more"),
        (["check", "{pte}", "--max-ratio", "inf"], "finite ratio of 1 or more"),
    ],
    ids=["seed", "runs", "nan", "inf"],
)
def test_out_of_range_options_are_refused_before_any_work(tmp_path, args, needle):
    pte = tmp_path / "mlp.pte"
    assert devplan("compile", ROOT / "samples" / "mlp.pt2", "-o", pte).returncode == 0
    assert_one_line_error(devplan(*(a.format(pte=pte) for a in args)), needle)


_LOGGING_ERROR = """
import datetime, io, sys, zipfile
import torch
import devplan.gate.archive
from devplan.cli import main
source, archive = sys.argv[1], sys.argv[2]
inputs = io.BytesIO()
torch.save((datetime.date(2020, 1, 1),), inputs)  # a harmless pickle that a weights-only load refuses
with zipfile.ZipFile(source) as old, zipfile.ZipFile(archive, "w") as new:
    for info in old.infolist():
        new.writestr(info, inputs.getvalue() if info.filename.endswith("sample_inputs/model.pt") else old.read(info))
devplan.gate.archive._check_sample_inputs = lambda *args: None  # the route devplan's archive checks close, open again
sys.argv = ["devplan", "compile", archive, "-o", archive + ".pte"]
main()
"""


def test_a_logging_call_that_fails_inside_torch_prints_no_traceback(tmp_path):
    """Issue 29, finding 7: torch's fallback to a full unpickle of sample inputs logs a message
    with two %s and one argument; Python's logging then printed '--- Logging error ---' and a
    69-line traceback before devplan's own output. devplan's checks keep such archives from
    torch (test_archive_allowlist.py), so the route is opened again here in a child process:
    whatever makes a logging call fail, the CLI prints no traceback for it."""
    run = subprocess.run(
        [sys.executable, "-c", _LOGGING_ERROR, str(ROOT / "samples" / "mlp.pt2"), str(tmp_path / "inputs.pt2")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert "Logging error" not in run.stderr and "Traceback" not in run.stderr, run.stderr[:2000]
    assert run.returncode == 0 and (tmp_path / "inputs.pt2.pte").exists(), run.stderr[-2000:]
