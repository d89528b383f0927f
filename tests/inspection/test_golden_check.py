"""`devplan check --golden`: record a program's plan, then fail, naming each change, when a
later program plans otherwise; `--tolerance` and `--exact` decide what may drift."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import devplan
from devplan.errors import DevplanError
from devplan.inspection.changes import Tolerance, parse_tolerance
from testbed.cli import assert_one_line_error
from tests.inspection.runner import invoke, run_devplan


class Net(nn.Module):
    """linear, relu, sub, tanh; each variant changes one thing about the plan."""

    def __init__(self, width: int = 16, subs: int = 1, tanh: bool = True) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear, self.subs, self.tanh = nn.Linear(16, width), subs, tanh

    def forward(self, x):
        y = torch.relu(self.linear(x))
        for _ in range(self.subs):
            y = y - 1.0
        return torch.tanh(y) if self.tanh else y


VARIANTS = {
    "base": (Net(), {}),
    "one_more_tensor": (Net(subs=2), {}),  # the same operators, one more sub result
    "grown": (Net(width=32), {}),  # every activation twice as wide
    "no_tanh": (Net(tanh=False), {}),  # an operator removed
    "on_cuda": (Net(), {"delegates": ["cuda:0"]}),  # the same ops, run on cuda:0
    "naive": (Net(), {"planner": "naive", "inplace": False}),  # the same graph in a larger plan
}


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("golden_check")
    paths = {}
    for name, (module, options) in VARIANTS.items():
        paths[name] = folder / f"{name}.pte"
        ep = torch.export.export(module.eval(), (torch.randn(4, 16),), strict=False)
        devplan.compile(ep, paths[name], **options)
    return paths


@pytest.fixture
def golden(programs, tmp_path):
    path = tmp_path / "net.golden.json"
    update = invoke("check", str(programs["base"]), "--golden", str(path), "--update")
    assert update.exit_code == 0, update.output
    assert _joined(update.stdout).splitlines()[-1] == f"ok    golden {path}: wrote it from base.pte"
    return path


def check(program, golden, *options):
    return invoke("check", str(program), "--golden", str(golden), *options)


def test_the_same_program_matches_its_golden(programs, golden):
    again = check(programs["base"], golden)
    assert again.exit_code == 0, again.output
    assert _joined(again.stdout).splitlines()[-1] == f"ok    golden {golden}: the programs plan the same"


@pytest.mark.parametrize(
    "variant, named",
    [
        ("one_more_tensor", ["FAIL  tensors: ", "ok    instructions: "]),
        ("grown", ["FAIL  buffer 1 (cpu) size: ", "FAIL  buffer 1 (cpu) lower bound: ", "FAIL  constant bytes: "]),
        ("no_tanh", ["FAIL  operators removed: aten::tanh.out"]),
        (
            "on_cuda",
            [
                "FAIL  buffer 2 (cuda:0) added: ",
                "FAIL  delegate 0 added: DevplanDelegate on cuda:0",
                "FAIL  operators added: et_copy::_d2h_copy.out, et_copy::_h2d_copy.out",
            ],
        ),
    ],
)
def test_each_change_is_named_and_fails(programs, golden, variant, named):
    result = check(programs[variant], golden)
    assert result.exit_code == 1, result.output
    assert f"FAIL  golden {golden}: " in _joined(result.stdout)
    for line in named:
        assert line in result.stdout, (line, result.stdout)
    body = _joined(result.stdout).split(f"golden {golden}: ", 1)[1].splitlines()[1:]
    # wrapped at the console's width (80 in a pipe), a word never cut (a path, the command to accept)
    shown = result.stdout.splitlines()
    assert body and shown[-1].startswith("  to accept this plan: devplan check ")  # a command stays whole
    assert all(len(line) <= 80 or " " not in line.strip() for line in shown[-len(body) : -1])


def test_a_grown_buffer_passes_within_the_tolerance(programs, golden):
    doc = {name: devplan.inspect(programs[name])["methods"][0]["buffers"][0]["size"] for name in ("base", "naive")}
    growth = doc["naive"] - doc["base"]
    assert growth > 0
    percent = growth * 100 / doc["base"]
    assert check(programs["naive"], golden).exit_code == 1
    assert check(programs["naive"], golden, "--tolerance", f"{growth}B").exit_code == 0
    assert check(programs["naive"], golden, "--tolerance", f"{growth - 1}").exit_code == 1
    within = check(programs["naive"], golden, "--tolerance", f"{percent + 0.1:.1f}%")
    assert within.exit_code == 0 and "ok    buffer 1 (cpu) size: " in within.stdout, within.output
    assert check(programs["naive"], golden, "--tolerance", f"{percent - 0.1:.1f}%").exit_code == 1


def test_shrinking_passes_unless_exact(programs, tmp_path):
    golden = tmp_path / "larger.json"
    assert check(programs["naive"], golden, "--update").exit_code == 0
    smaller = check(programs["base"], golden)
    assert smaller.exit_code == 0 and "ok    buffer 1 (cpu) size: " in smaller.stdout, smaller.output
    assert "ok    placements: differ (digest)" in smaller.stdout
    exact = check(programs["base"], golden, "--exact")
    assert exact.exit_code == 1 and "FAIL  buffer 1 (cpu) size: " in exact.stdout
    assert "FAIL  placements: differ (digest)" in exact.stdout


def test_golden_budget_and_ratio_share_one_exit_code_and_document(programs, golden):
    both = check(programs["base"], golden, "--budget", "cpu=1MiB", "--max-ratio", "1.0", "--json")
    report = json.loads(both.stdout)
    assert both.exit_code == 0 and report["ok"] and report["golden"]["ok"] and report["golden"]["diff"]["ok"]
    over = check(programs["base"], golden, "--budget", "1=16B", "--json")
    report = json.loads(over.stdout)
    assert over.exit_code == 1 and not report["ok"] and report["golden"]["ok"]
    changed = check(programs["grown"], golden, "--budget", "cpu=1MiB", "--json")
    report = json.loads(changed.stdout)
    assert changed.exit_code == 1 and not report["ok"] and all(row["ok"] for row in report["buffers"])
    sizes = [c for c in report["golden"]["diff"]["changes"] if (c["subject"], c["fact"]) == ("buffer 1 (cpu)", "size")]
    assert len(sizes) == 1 and sizes[0]["b"] > sizes[0]["a"] and sizes[0]["fails"]
    updated = json.loads(check(programs["base"], golden, "--update", "--json").stdout)["golden"]
    assert updated == {"file": {"name": golden.name}, "updated": True, "ok": True, "diff": None}


def test_the_update_rewrites_atomically_and_identically(programs, golden):
    before = golden.read_bytes()
    assert check(programs["grown"], golden, "--update").exit_code == 0
    assert golden.read_bytes() != before and check(programs["grown"], golden).exit_code == 0
    assert check(programs["base"], golden, "--update").exit_code == 0
    assert golden.read_bytes() == before
    assert sorted(p.name for p in golden.parent.iterdir()) == [golden.name]  # no temporary left behind


def test_bad_input_is_one_line_and_exit_2(programs, tmp_path):
    base = programs["base"]
    assert_one_line_error(
        run_devplan("check", str(base), "--golden", str(tmp_path / "none.json")),
        "none.json: no such golden file",
        "--update",
    )
    (tmp_path / "bad.json").write_text("{not json")
    assert_one_line_error(
        run_devplan("check", str(base), "--golden", str(tmp_path / "bad.json")), "bad.json: not a golden file"
    )
    (tmp_path / "inspect.json").write_text(json.dumps(devplan.inspect(base)))
    assert_one_line_error(
        run_devplan("check", str(base), "--golden", str(tmp_path / "inspect.json")), "not a devplan golden file"
    )
    assert_one_line_error(run_devplan("check", str(base), "--update"), "add --golden")
    assert_one_line_error(run_devplan("check", str(base), "--tolerance", "2%"), "add --golden")
    assert_one_line_error(
        run_devplan("check", str(base), "--golden", str(tmp_path / "g.json"), "--update", "--budget", "1=lots"),
        "TARGET=SIZE",
    )
    assert not (tmp_path / "g.json").exists()  # a bad option writes nothing


@pytest.mark.parametrize(
    "text, tolerance",
    [
        ("2%", Tolerance(percent=2)),
        ("0.5 %", Tolerance(percent=0.5)),
        ("4KiB", Tolerance(nbytes=4096)),
        ("100", Tolerance(nbytes=100)),
    ],
)
def test_tolerances_parse(text, tolerance):
    assert parse_tolerance(text) == tolerance


@pytest.mark.parametrize("text", ["-2%", "2x", "%", "1.5B", "2%%", ""])
def test_bad_tolerances_say_what_to_write(text):
    with pytest.raises(DevplanError, match="a percentage such as 2% or a whole number of bytes"):
        parse_tolerance(text)


def test_a_percentage_is_of_the_old_size():
    two = Tolerance(percent=2)
    assert two.allows(1000, 1020) and not two.allows(1000, 1021) and two.allows(1000, 10)
    assert Tolerance().allows(5, 5) and not Tolerance().allows(5, 6)


def test_the_python_api_and_the_helper(programs, tmp_path):
    from devplan.testing import assert_matches_golden

    golden = tmp_path / "api.json"
    assert devplan.check_golden(programs["base"], golden, update=True).updated
    assert devplan.check_golden(programs["base"].read_bytes(), golden).ok
    assert_matches_golden(programs["base"], golden)
    assert_matches_golden(programs["naive"], golden, tolerance="150%")
    with pytest.raises(
        AssertionError, match=r"(?s)no longer plans as recorded.*FAIL  operators removed: aten::tanh.out"
    ):
        assert_matches_golden(programs["no_tanh"], golden)
    with pytest.raises(AssertionError, match="no golden file yet"):
        assert_matches_golden(programs["base"], tmp_path / "missing.json")


def _joined(text: str) -> str:
    """check's output with each line that wrapped at the console's width joined back."""
    return text.replace("\n        ", " ")
