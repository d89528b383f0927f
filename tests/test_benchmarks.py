"""The benchmark scripts run end to end on a tiny model and print well-formed tables and JSON.
Timings and sizes are machine- and planner-dependent, so only shapes and arithmetic are checked.
All in the full suite only (each lowers with ExecuTorch): benchmarks are not what a change to
devplan breaks first."""

from __future__ import annotations

import json
import math

import pytest

import devplan
from benchmarks import (
    backend_sweep,
    compile_speed,
    compile_vs_executorch,
    device_plan_vs_executorch,
    dynamic_vs_executorch,
    fold_sweep,
    moe_vs_executorch,
    plan_vs_executorch,
    planner_plugin,
    quantized_vs_executorch,
    sweeps,
)
from benchmarks.floor import order_free_floor
from benchmarks.harness import export

pytestmark = pytest.mark.sweep

MODEL = "linear"


def table_rows(text: str, headers: tuple[str, ...]) -> list[list[str]]:
    """Cells of the table whose header line starts `text` after any preamble lines."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split() and line.split()[0] == headers[0])
    assert all(header in lines[start] for header in headers if header)
    assert set(lines[start + 1].replace(" ", "")) == {"-"}
    rows = []
    for line in lines[start + 2 :]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


def test_compile_table_has_a_row_per_model_with_consistent_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    assert compile_vs_executorch.main(["--models", MODEL, "--repeat", "1"]) == 0
    (row,) = table_rows(capsys.readouterr().out, compile_vs_executorch.HEADERS)
    assert row[0] == MODEL and len(row) == len(compile_vs_executorch.HEADERS)
    devplan_s, process_s, executorch_s, speedup, process_speedup = map(float, row[1:6])
    devplan_bytes, executorch_bytes = map(int, row[6:8])
    assert devplan_s > 0 and executorch_s > 0 and devplan_bytes > 0 and executorch_bytes > 0
    assert process_s > devplan_s  # the process also starts Python, imports torch and loads the .pt2
    assert speedup == pytest.approx(executorch_s / devplan_s, rel=2e-3)
    assert process_speedup == pytest.approx(executorch_s / process_s, rel=2e-3)
    assert float(row[8]) == pytest.approx(devplan_bytes / executorch_bytes, rel=2e-3)


def test_compile_json_rows_match_the_columns(capsys: pytest.CaptureFixture[str]) -> None:
    compile_vs_executorch.main(["--models", MODEL, "--repeat", "1", "--json"])
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["model"] == MODEL and len(row) == len(compile_vs_executorch.HEADERS)
    assert row["speedup"] == pytest.approx(row["executorch_seconds"] / row["devplan_seconds"])
    assert row["process_speedup"] == pytest.approx(row["executorch_seconds"] / row["devplan_process_seconds"])
    assert row["bytes_ratio"] == pytest.approx(row["devplan_bytes"] / row["executorch_bytes"])


def test_plan_table_compares_with_both_executorch_configs(capsys: pytest.CaptureFixture[str]) -> None:
    assert plan_vs_executorch.main(["--models", f"{MODEL},accumulator"]) == 0
    out = capsys.readouterr().out
    rows = table_rows(out, plan_vs_executorch.HEADERS)
    assert [row[0] for row in rows] == [MODEL, "accumulator"]
    for row in rows:
        devplan, bound, floor, et_default, et_constprop = map(int, row[1:6])
        assert 0 < floor <= bound <= devplan
        assert float(row[6]) == pytest.approx(devplan / min(et_default, et_constprop), rel=2e-3)
        assert float(row[7]) == pytest.approx(devplan / bound, rel=2e-3)
        assert float(row[8]) == pytest.approx(devplan / et_default, rel=2e-3)
        assert float(row[9]) == pytest.approx(floor / et_default, rel=2e-3)
        assert (row[-1] == plan_vs_executorch.LARGER) == (devplan > min(et_default, et_constprop))
    assert "of 2 models" in out and "median devplan / lower bound" in out and "geometric mean" in out


def test_plan_json_summary_agrees_with_rows(capsys: pytest.CaptureFixture[str]) -> None:
    plan_vs_executorch.main(["--models", MODEL, "--json"])
    report = json.loads(capsys.readouterr().out)
    (row,) = report["rows"]
    summary = report["summary"]
    assert row["best_et"] == min(row["et_default"], row["et_constprop"])
    assert summary["devplan_not_larger"] == (0 if row["larger_than_et"] else 1)
    assert summary["median_devplan_over_bound"] == pytest.approx(row["devplan"] / row["lower_bound"])
    assert summary["geomean_devplan_over_et_default"] == pytest.approx(row["devplan"] / row["et_default"])
    assert summary["geomean_floor_over_et_default"] == pytest.approx(row["floor"] / row["et_default"])


def test_unknown_model_is_refused() -> None:
    with pytest.raises(SystemExit, match="unknown model"):
        plan_vs_executorch.main(["--models", "no_such_model"])


def test_floor_of_a_fan_out_holds_the_input_and_both_results() -> None:
    # softmax(x) and log_softmax(x) are both outputs: whichever runs last still reads x
    # while the other's result is kept, so every order holds three tensors of x's size.
    planned = devplan.compile(export("softmaxes")).planned
    (x,) = planned.method.inputs
    size = -(-planned.method.values[x].nbytes // 16) * 16
    assert order_free_floor(planned.method) == 3 * size == planned.buffers[0].lower_bound


@pytest.mark.parametrize("name", ["transformer", "residual_cnn", "cat_split_chunk", "rolling_cache"])
def test_floor_never_exceeds_the_bound_of_devplan_own_order(name: str) -> None:
    planned = devplan.compile(export(name)).planned
    bound = sum(buffer.lower_bound for buffer in planned.buffers)
    assert 0 < order_free_floor(planned.method) <= bound


def test_device_table_compares_each_device_with_the_same_ops_delegated(capsys: pytest.CaptureFixture[str]) -> None:
    assert device_plan_vs_executorch.main(["--models", "two_io"]) == 0
    (row,) = table_rows(capsys.readouterr().out, device_plan_vs_executorch.HEADERS)
    assert row[0] == "two_io" and row[1] == row[2] == "1"  # one add, delegated by both tools
    dp_cpu, et_cpu, dp_cuda, et_cuda = map(int, row[3:7])
    assert min(dp_cpu, et_cpu, dp_cuda, et_cuda) > 0
    assert float(row[7]) == pytest.approx(dp_cpu / et_cpu, rel=2e-3)
    assert float(row[8]) == pytest.approx(dp_cuda / et_cuda, rel=2e-3)
    assert float(row[9]) == pytest.approx((dp_cpu + dp_cuda) / (et_cpu + et_cuda), rel=2e-3)
    assert float(row[11]) == pytest.approx(dp_cuda / int(row[10]), rel=2e-3) and int(row[10]) <= dp_cuda


def test_dynamic_table_excludes_what_executorch_cannot_run_at_the_bound(capsys: pytest.CaptureFixture[str]) -> None:
    assert dynamic_vs_executorch.main(["--models", f"{MODEL},cat_split_chunk"]) == 0
    out = capsys.readouterr().out
    rows = table_rows(out, dynamic_vs_executorch.HEADERS)
    assert [row[0] for row in rows] == [MODEL, "cat_split_chunk"]
    for row in rows:
        devplan_bytes, executorch_bytes = map(int, row[1:3])
        assert float(row[3]) == pytest.approx(devplan_bytes / executorch_bytes, rel=2e-3)
        assert float(row[6]) == pytest.approx(float(row[5]) / float(row[4]), rel=2e-3)
    # ExecuTorch plans the derived dim 2 * half at the example's size, so its program refuses the bound
    assert rows[0][7] == "yes" and rows[1][7:] == ["no", dynamic_vs_executorch.EXCLUDED]
    assert "of 1 models" in out


def test_quantized_table_compares_the_same_quantized_program(capsys: pytest.CaptureFixture[str]) -> None:
    assert quantized_vs_executorch.main(["--models", MODEL, "--configs", "per_tensor,dynamic", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    rows = table_rows(out, quantized_vs_executorch.HEADERS)
    assert [row[:2] for row in rows] == [[MODEL, "per_tensor"], [MODEL, "dynamic"]]
    for row in rows:
        devplan_s, executorch_s, speedup = map(float, row[2:5])
        assert speedup == pytest.approx(executorch_s / devplan_s, rel=2e-3)
        devplan_planned, executorch_planned = map(int, row[5:7])
        assert float(row[7]) == pytest.approx(devplan_planned / executorch_planned, rel=2e-3)
        assert int(row[8]) > 0 and int(row[9]) > 0  # both store the int8 weights
    assert "of 2; geometric mean planned ratio" in out


def test_inspect_scale_compares_each_view_with_executorchs_deserializer(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import inspect_scale

    assert inspect_scale.main(["--sizes", "64", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [row["view"] for row in rows] == list(inspect_scale.VIEWS)
    for row in rows:
        assert row["tensors"] == 64 and row["devplan_seconds"] > 0 and row["executorch_seconds"] > 0
        assert row["time_ratio"] == pytest.approx(row["devplan_seconds"] / row["executorch_seconds"])
        assert row["memory_ratio"] == pytest.approx(row["devplan_mb"] / row["executorch_mb"])
    program = devplan.inspect(inspect_scale.synthetic(64))["methods"][0]
    assert sum(1 for t in program["tensors"] if t["mem_id"] is not None) == 65  # the input and 64 results
    assert all(t["source"] for t in program["tensors"])


@pytest.mark.sweep
def test_fuzz_quick_counts_add_up() -> None:
    """benchmarks/fuzz.py --quick in its own process (it builds its programs in a child and
    measures its own peak memory): every program mutant's four commands and every archive
    mutant's compile counted once."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    run = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "fuzz.py"), "--quick", "--json"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    from benchmarks.fuzz import ARCHIVES, PROGRAMS

    report = json.loads(run.stdout)
    *rows, names, total = report["rows"]
    archives = [row for row in rows if row["program"].endswith(".pt2")]  # compiled: one command each
    assert [row["program"] for row in rows] == [*PROGRAMS, *(f"{name}.pt2" for name in ARCHIVES)]
    # the names mode: each of its commands counted once, whatever became of it
    assert names["program"] == "names" and names["mutants"] == 10 and names["ok"] + names["refused"] == names["runs"]
    assert total["program"] == "all"
    for row in rows:
        unmutated = row["unmutated"].split()  # one outcome per command the program's mutants met
        assert len(unmutated) == (1 if row in archives else 4 if row["program"] != "multi_method" else 5), row
        outcomes = row["ok"] + row["refused"] + row["exit_3"] + row["tracebacks"] + row["commands"] + row["hangs"]
        assert outcomes == len(unmutated) * row["mutants"], row
        assert unmutated[:3] == ["ok"] * min(3, len(unmutated))  # the inputs themselves work
    assert total["mutants"] == sum(row["mutants"] for row in (*rows, names)) >= 600
    assert total["code_runs"] == total["exit_3"] == total["tracebacks"] == total["commands"] == total["hangs"] == 0
    assert 0 < total["compared"] <= 60
    assert report["passed"] == (run.returncode == 0) and report["peak_mb"] < 1024


def test_latency_quick_times_all_four_programs_of_each_model(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import latency_vs_executorch

    assert latency_vs_executorch.main(["--quick", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    rows, summary = report["rows"], report["summary"]
    assert report["runs"] == 5 and [row["model"] for row in rows] == list(latency_vs_executorch.QUICK)
    for row in rows:
        times = [row[key] for key in ("devplan_ms", "devplan_xnnpack_ms", "executorch_ms", "executorch_xnnpack_ms")]
        assert all(ms > 0 for ms in times), row
        assert row["ratio"] == pytest.approx(row["devplan_xnnpack_ms"] / row["executorch_xnnpack_ms"])
        assert min(row["devplan_bytes"], row["devplan_xnnpack_bytes"], row["executorch_xnnpack_bytes"]) > 0
        assert row["ok"] is True and row["errors"] == [], row
    ratios = [row["ratio"] for row in rows]
    assert summary["compared"] == summary["models"] == summary["bytes_compared"] == len(rows)
    assert summary["geomean_ratio"] == pytest.approx(math.prod(ratios) ** (1 / len(ratios)))
    assert summary["max_ratio"] == max(ratios)
    assert summary["devplan_xnnpack_larger"] == sum(
        row["devplan_xnnpack_bytes"] > row["executorch_xnnpack_bytes"] for row in rows
    )
    assert summary["all_ok"] is True


def test_moe_table_sets_devplan_against_the_form_executorch_lowers(capsys: pytest.CaptureFixture[str]) -> None:
    assert moe_vs_executorch.main(["--models", "qwen3_moe"]) == 0
    out = capsys.readouterr().out
    (row,) = table_rows(out, moe_vs_executorch.HEADERS)
    assert row[0] == "qwen3_moe" and len(row) == len(moe_vs_executorch.HEADERS)
    ours, theirs, ratio, batched = int(row[2]), int(row[3]), float(row[4]), int(row[5])
    assert ours > 0 and theirs > 0 and batched > 0 and ratio == pytest.approx(ours / theirs, rel=2e-3)
    assert "qwen3_moe: executorch on grouped_mm experts: " in out and "histc" in out


def test_quantize_quick_reports_error_bytes_and_times_against_float_and_executorch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from benchmarks import quantize

    assert quantize.main(["--quick", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (row,) = report["rows"]
    assert (report["size"], report["runs"], row["model"], row["mode"]) == ("tiny", 5, "mobilenet_v3", "dynamic-int8")
    assert row["sqnr_db"] > 20 and row["argmax_agreement"] == 1.0 and "aten::hardswish" in row["float_ops"]
    assert row["file_bytes"] < row["float_file_bytes"]
    assert row["file_ratio"] == pytest.approx(row["file_bytes"] / row["float_file_bytes"])
    assert 0 < row["planned_bytes"] <= row["executorch_planned_bytes"]
    assert min(row["float_ms"], row["ms"], row["executorch_ms"]) > 0
    assert row["speedup_ratio"] == pytest.approx(row["ms"] / row["float_ms"])
    assert row["executorch_ratio"] == pytest.approx(row["ms"] / row["executorch_ms"])
    assert row["max_diff"] <= 1e-4  # the same computation as ExecuTorch's program
    with pytest.raises(SystemExit, match="unknown model"):
        quantize.main(["--models", "alexnet"])


def test_quantize_conv_sweep_prints_a_row_a_model_and_mode_and_whether_it_holds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from benchmarks import quantize

    assert quantize.main(["--conv-sweep", "--models", "torchvision_resnet", "--modes", "int8"]) == 0
    (row,) = table_rows(capsys.readouterr().out, quantize.SWEEP_HEADERS)
    assert row[:2] == ["torchvision_resnet", "int8"] and len(row) == len(quantize.SWEEP_HEADERS)
    assert float(row[2]) > 30 and float(row[5]) == 1.0 and row[-1] == "yes"
    assert 0 < int(row[7]) <= int(row[8]) and int(row[9]) == 1
    with pytest.raises(SystemExit, match="unknown model"):
        quantize.main(["--conv-sweep", "--models", "resnet"])
    with pytest.raises(SystemExit):  # the record the suite reads is of 96x96 rows alone
        quantize.main(["--conv-sweep", "--record", "--side", "64"])


def test_llm_runner_table_sets_each_example_against_executorchs_program() -> None:
    """benchmarks/llm_runner.py's closing table: a row per example and pair of programs, each
    figure devplan's / ExecuTorch's with their ratio (the runs themselves are minutes: not here)."""
    import argparse

    from benchmarks.llm_runner import side_by_side

    def row(export: str, precision: str, program: str, planned: int, speed: float, same: bool = True) -> dict:
        return {
            "export": export,
            "precision": precision,
            "program": program,
            "planned_bytes": planned,
            "file_bytes": 1000,
            "decode_tokens_per_s": speed,
            "same_tokens": same,
        }

    rows = [
        row("export_llama", "8da4w", "ET+xnnpack", 4000, 100.0),
        row("export_llama", "8da4w", "devplan+xnnpack", 2000, 110.0),
        row("transformers_recipe", "fp32", "ET", 3000, 50.0),
        row("transformers_recipe", "fp32", "devplan", 1500, 50.0, same=False),
    ]
    table = side_by_side(rows, argparse.Namespace(dim=64, layers=2, tokens=8, repeats=1)).splitlines()
    assert table[2].startswith("| example | programs | planned bytes | file bytes | decode tokens/s |")
    assert table[4:] == [
        "| export_llama 8da4w | devplan+xnnpack / ET+xnnpack | 2,000 / 4,000 (0.50x) | 1,000 / 1,000 (1.00x) "
        "| 110.0 / 100.0 (1.10x) | yes |",
        "| transformers_recipe fp32 | devplan / ET | 1,500 / 3,000 (0.50x) | 1,000 / 1,000 (1.00x) "
        "| 50.0 / 50.0 (1.00x) | NO |",
    ]


def test_fold_sweep_sets_each_policy_against_executorchs_const_prop(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    assert fold_sweep.main(["--quick"]) == 0
    out = capsys.readouterr().out
    (row,) = table_rows(out, fold_sweep.HEADERS)
    cells = {key: cell if key in ("model", "kept") else int(cell) for key, cell in zip(fold_sweep.HEADERS, row)}
    assert (cells["model"], cells["hidden"], cells["tokens"], cells["batch"], cells["buckets"]) == (
        "deberta_v2",
        32,
        8,
        2,
        16,
    )
    # auto keeps the policy of least arena plus constants, under const-prop's arena and not folding's total
    kept = cells["kept"]
    assert kept in ("local", "all", "none") and (cells["auto"], cells["auto total"]) == (
        cells[kept],
        cells[f"{kept} total"],
    )
    assert cells["auto total"] == min(cells[f"{p} total"] for p in ("local", "all", "none"))
    assert cells["all"] <= cells["local"] < cells["none"] and cells["auto"] <= cells["ET"]
    assert all(cells[f"{p} total"] > cells[p] for p in ("ET", *fold_sweep.POLICIES))
    assert "auto <= ET: 1 of 1; auto <= none: 1 of 1" in out


def test_compile_speed_sets_devplan_with_xnnpack_against_executorchs_lowering(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("transformers")
    assert compile_speed.main(["--quick", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (row,) = doc["rows"]
    assert row["model"] == "gpt2_tiny" and row["partitions"] > 1
    assert math.isclose(row["ratio"], row["devplan_seconds"] / row["executorch_seconds"])
    assert math.isclose(row["jobs_1_ratio"], row["jobs_1_seconds"] / row["executorch_seconds"])
    assert "process_ratio" not in row and set(doc["geomean"]) == {"ratio", "jobs_1_ratio"}


def test_planner_plugin_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert planner_plugin.main(["--models", MODEL]) == 0
    out = capsys.readouterr().out
    (row,) = table_rows(out, planner_plugin.HEADERS)
    assert row[0] == MODEL and row[4:6] == ["yes", "yes"]
    theirs, ours = int(row[1]), int(row[2])
    assert 0 < ours <= theirs and float(row[3]) == pytest.approx(ours / theirs, rel=2e-3)
    assert f"geomean with devplan / et default: {row[3]} over 1 models" in out
    planner_plugin.main(["--models", MODEL, "--json"])
    document = json.loads(capsys.readouterr().out)
    assert [r["model"] for r in document["rows"]] == [MODEL]
    assert document["geomean_ratio"] == pytest.approx(ours / theirs)


def test_backend_sweep_row_says_both_compiles_and_the_difference_from_eager(capsys: pytest.CaptureFixture[str]) -> None:
    assert backend_sweep.main(["--models", "resnet"]) == 0
    (row,) = table_rows(capsys.readouterr().out, backend_sweep.HEADERS)
    assert row[:3] == ["resnet", "yes", "yes"] and int(row[3]) >= 1 and row[4] == "-"
    assert float(row[5]) < 1e-4 and float(row[6]) > 0


def test_sweeps_runs_the_release_tier_and_counts_it_by_file(capsys: pytest.CaptureFixture[str]) -> None:
    """benchmarks/sweeps.py runs what the suite leaves to releases, and only that: of one model's
    settings in the delegate sweep, those outside the suite's sample."""
    from tests.runtime.test_delegate_sweep import SETTINGS, SUITE

    model = "corpus:linear_no_bias"
    released = [setting for setting in SETTINGS if (model, setting) not in SUITE]
    assert sweeps.main(["tests/runtime/test_delegate_sweep.py", "-k", "linear_no_bias"]) == 0
    (row,) = table_rows(capsys.readouterr().out, sweeps.HEADERS)
    assert row[0] == "tests/runtime/test_delegate_sweep.py"
    assert list(map(int, row[1:5])) == [len(released), 0, 0, 0] and float(row[5]) > 0
