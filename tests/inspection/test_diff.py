"""`devplan diff A.pte B.pte`: what changed between two programs, devplan's or ExecuTorch's;
and every machine-readable document byte-identical across runs and hash seeds."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch

import devplan
from devplan.inspection.diff import LARGEST_SHOWN
from devplan.inspection.golden import golden_document
from devplan.units import exact_size_text
from testbed.cli import assert_one_line_error
from testbed.lowerings import executorch_lowered
from testbed.models import export, transformer
from tests.compile.test_cli import ROOT
from tests.inspection.runner import REPO, invoke, run_devplan


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> dict:
    """The same model lowered by ExecuTorch and compiled by devplan, and two_io compiled two ways."""
    folder = tmp_path_factory.mktemp("diff")
    paths = {name: folder / f"{name}.pte" for name in ("executorch", "devplan", "two_io", "two_io_cuda")}
    paths["executorch"].write_bytes(executorch_lowered(export("gated_mlp")[0]))
    devplan.compile(export("gated_mlp")[0], paths["devplan"])
    devplan.compile(ROOT / "samples" / "two_io.pt2", paths["two_io"])
    devplan.compile(ROOT / "samples" / "two_io.pt2", paths["two_io_cuda"], delegates=["cuda:0=aten::linear"])
    return paths


def test_executorch_against_devplan_names_the_size_differences_per_device(pair):
    result = invoke("diff", str(pair["executorch"]), str(pair["devplan"]))
    assert result.exit_code == 1, result.output
    theirs, mine = (devplan.inspect(pair[name])["methods"][0]["buffers"] for name in ("executorch", "devplan"))
    assert [b["device"] for b in theirs] == [b["device"] for b in mine] == ["cpu"]
    lines = result.stdout.replace("\n        ", " ").splitlines()  # a change wrapped past 80 columns, joined
    assert lines[0].startswith("executorch.pte -> devplan.pte: ") and " changes" in lines[0]  # no gate: no verdict
    size = next(line for line in lines if "buffer 1 (cpu) size: " in line)
    for side in (theirs, mine):
        assert exact_size_text(side[0]["size"]) in size
    delta = mine[0]["size"] - theirs[0]["size"]
    assert f", {'+' if delta > 0 else '-'}" in size and f"{delta * 100 / theirs[0]['size']:+.1f}%" in size, size
    assert "operators removed: aten::addmm.out" in result.stdout
    report = json.loads(invoke("diff", str(pair["executorch"]), str(pair["devplan"]), "--json").stdout)
    (change,) = [c for c in report["changes"] if (c["subject"], c["fact"]) == ("buffer 1 (cpu)", "size")]
    assert (change["a"], change["b"], change["method"]) == (theirs[0]["size"], mine[0]["size"], "forward")
    assert report["files"] == {"a": {"name": "executorch.pte"}, "b": {"name": "devplan.pte"}} and not report["ok"]


def test_a_program_against_itself_or_its_golden_is_the_same(pair, tmp_path):
    same = invoke("diff", str(pair["two_io"]), str(pair["two_io"]))
    assert same.exit_code == 0 and same.stdout == "two_io.pte -> two_io.pte: the programs plan the same\n"
    golden = tmp_path / "two_io.golden.json"
    assert invoke("check", str(pair["two_io"]), "--golden", str(golden), "--update").exit_code == 0
    assert invoke("diff", str(golden), str(pair["two_io"])).exit_code == 0
    assert invoke("diff", str(pair["two_io"]), str(golden)).exit_code == 0
    assert devplan.diff(golden_document(devplan.inspect(pair["two_io"])), pair["two_io"].read_bytes()).ok


def test_a_changed_device_is_named(pair):
    result = invoke("diff", str(pair["two_io"]), str(pair["two_io_cuda"]))
    assert result.exit_code == 1
    for line in (
        "\n  buffer 2 (cuda:0) added: 1.0 KiB",
        "\n  delegate 0 added: DevplanDelegate on cuda:0",
        "\n  operators removed: aten::linear.out",
    ):
        assert line in result.stdout, result.stdout
    # the tensors made on cuda:0 are new ones (paired by identity, not value index), named by their source
    assert "added: buffer 2 (cuda:0) @" in result.stdout and "proj (Linear)" in result.stdout


def test_placement_changes_are_summarized_largest_first_and_capped(tmp_path):
    module, args = transformer(2)
    ep = torch.export.export(module, args, strict=False)
    a, b = devplan.compile(ep).data, devplan.compile(ep, reorder=False, inplace=False).data
    result = devplan.diff(a, b)
    (placements,) = [c for c in result.changes if c.subject == "placements"]
    detail = placements.detail
    assert detail["changed"] > LARGEST_SHOWN == len(detail["largest"])
    sizes = [max(row[side]["nbytes"] for side in ("a", "b") if row[side]) for row in detail["largest"]]
    assert sizes == sorted(sizes, reverse=True)
    text = result.text()
    assert f"and {detail['changed'] - LARGEST_SHOWN} more" in text
    assert len(text.splitlines()) < 40 and all(len(line) <= 80 for line in text.splitlines()[1:])
    assert not placements.fails and devplan.diff(a, b, exact=True).changes[-1].fails


def test_bad_input_is_one_line_and_exit_2(pair, tmp_path):
    assert_one_line_error(run_devplan("diff", str(pair["two_io"]), str(tmp_path / "missing.pte")), "missing.pte")
    assert_one_line_error(run_devplan("diff", str(pair["two_io"]), str(ROOT / "samples" / "mlp.pt2")), "mlp.pt2")
    assert_one_line_error(
        run_devplan("diff", str(pair["two_io"]), str(pair["two_io"]), "--tolerance", "lots"), "--tolerance 'lots'"
    )
    assert_one_line_error(
        run_devplan("diff", str(pair["two_io"]), str(pair["two_io"]), "--method", "nope"), "no method 'nope'"
    )


def _in_fresh_process(seed: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "devplan", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env={**os.environ, "PYTHONHASHSEED": seed},
    )


@pytest.mark.sweep  # end to end through fresh processes; the full suite runs it
def test_documents_are_byte_identical_across_runs_and_hash_seeds(pair, tmp_path):
    outputs = []
    for seed in ("1", "2", "1"):
        folder = tmp_path / f"run{len(outputs)}"
        folder.mkdir()
        program, golden = folder / "two_io.pte", folder / "two_io.golden.json"
        compiled = _in_fresh_process(
            seed, "compile", str(ROOT / "samples" / "two_io.pt2"), "-o", str(program), "--json"
        )
        summary = json.loads(compiled.stdout)
        del summary["timings"]  # the one volatile key
        runs = [
            _in_fresh_process(seed, *args)
            for args in (
                ("check", str(program), "--golden", str(golden), "--update"),
                ("check", str(program), "--golden", str(golden), "--budget", "cpu=1MiB", "--json"),
                ("diff", str(pair["executorch"]), str(pair["devplan"]), "--json"),
                ("diff", str(pair["two_io"]), str(pair["two_io_cuda"])),
                ("run", str(program), "--json"),
            )
        ]
        assert all(run.returncode in (0, 1) for run in runs), [run.stderr for run in runs]
        outputs.append((json.dumps(summary), golden.read_bytes(), [run.stdout for run in runs[1:]]))
    assert outputs[0] == outputs[1] == outputs[2]


def test_diff_without_a_gate_lists_the_changes_without_pass_or_fail(pair):
    """FAIL and ok are a gate's words (issue 37, item 4): two toolchains' programs compared as
    they are read as changes, neither passing nor failing; --tolerance or --exact apply a gate."""
    plain = invoke("diff", str(pair["executorch"]), str(pair["devplan"])).stdout
    lines = plain.splitlines()
    assert re.fullmatch(r"executorch\.pte -> devplan\.pte: \d+ changes", lines[0]), lines[0]
    assert not [line for line in lines if line.split()[:1] in (["FAIL"], ["ok"])], plain
    assert "failing" not in plain and "allowed" not in plain
    for gate in (["--exact"], ["--tolerance", "1%"]):
        gated = invoke("diff", str(pair["executorch"]), str(pair["devplan"]), *gate).stdout
        assert "failing" in gated.splitlines()[0] and "\n  FAIL  " in gated, gated
    assert devplan.diff(pair["executorch"], pair["devplan"]).text().count("\n  FAIL  ") > 0  # the API's, a gate's


def _modules(path) -> set[str]:
    """The module paths a program's instructions name, and their blocks."""
    from devplan.inspection.sources import top_module

    rows = [row for m in devplan.inspect(path)["methods"] for row in m["instructions"] if row["module"]]
    return {row["module"] for row in rows} | {top_module(row["module"]) for row in rows}


def test_a_side_naming_no_modules_is_compared_by_operator_never_by_module(pair):
    """ExecuTorch's programs name no modules (issue 55.2): the peak's change is told by the
    operators whose tensors it holds on each side, never by module ('(no module) -5.1 KiB'),
    and the tensors' placements, numbered by each compiler its own way, are listed only on request."""
    modules = _modules(pair["devplan"])
    assert modules and not _modules(pair["executorch"])
    shown = invoke("diff", str(pair["executorch"]), str(pair["devplan"])).stdout
    blocks = [line for line in shown.splitlines() if "cause:" in line or re.match(r"\s{8}\S+ [+-]\d", line)]
    assert blocks and "(no module)" not in shown, shown
    for line in blocks:
        assert not {word.strip(",:()") for word in line.split()} & modules, line
    assert re.search(r"cause: .*aten::\w+\.out [+-]\d", " ".join(shown.split())), shown
    report = json.loads(invoke("diff", str(pair["executorch"]), str(pair["devplan"]), "--json").stdout)
    (peak,) = [c for c in report["changes"] if c["fact"] == "peak"]
    assert peak["detail"]["by"] == "operator" and peak["detail"]["modules"] == [] and peak["detail"]["operators"]
    assert {o["operator"] for o in peak["detail"]["operators"]} & {"aten::addmm.out", "aten::linear.out"}
    # the placements: counted, their value ids listed only with --placements
    assert re.search(r"placements: \d+ -> \d+ tensors: ", shown) and not re.search(r"\bv\d+ -> v\d+ \(", shown)
    assert "--placements" in shown
    listed = invoke("diff", str(pair["executorch"]), str(pair["devplan"]), "--placements").stdout
    assert re.search(r"\bv\d+ -> v\d+ \(", listed), listed
    assert devplan.diff(pair["executorch"], pair["devplan"]).text(labels=False, placements=True) == listed


def test_two_programs_naming_modules_are_compared_by_module(pair, tmp_path):
    naive = tmp_path / "naive.pte"
    devplan.compile(export("gated_mlp")[0], naive, planner="naive")
    shown = invoke("diff", str(pair["devplan"]), str(naive)).stdout
    assert re.search(r"\bv\d+ \(", shown) and "--placements" not in shown, shown  # one compiler: its value ids
    report = devplan.diff(pair["executorch"], pair["executorch"])
    assert report.ok and not report.changes
