"""Bounded fuzzing in CI: byte-flipped and truncated copies of programs (devplan's, one with a
delegate, ExecuTorch's) through inspect, inspect --json, check and run in this process, and
changed copies of .pt2 archives (JSON fields and member names) through compile, and programs
and golden files with hostile names through inspect, check and diff in every format. Each
either works or is refused as bad input (exit 2); nothing else escapes, nothing prints a
traceback or a line a CI runner would take as a workflow command, no code from an archive runs
and nothing takes more than a few seconds."""

from __future__ import annotations

import random

import pytest

from testbed.damage import COMMANDS, archive_bytes, archive_members, archive_mutant, mutant, outcome
from tests.tiers import tiered

MUTANTS = 60  # per program: 4 programs x 4 commands, well under a minute
ARCHIVE_MUTANTS = 15  # per archive: a compile each


@pytest.fixture(scope="module")
def programs(executorch_programs) -> dict[str, bytes]:
    from testbed.small_programs import compiled

    return {
        "devplan": compiled(),
        "delegated": compiled(delegates=["cuda:0"]),
        "executorch_affine": executorch_programs["affine"],
        "executorch_xnnpack": executorch_programs["xnnpack"],
    }


@pytest.mark.parametrize(
    "which", tiered(["devplan", "delegated", "executorch_affine", "executorch_xnnpack"], ["delegated"])
)
def test_mutants_work_or_are_refused(programs, which, tmp_path):
    rng = random.Random(17)
    escaped, seen = [], set()
    path = tmp_path / "fuzz.pte"
    for number in range(MUTANTS):
        path.write_bytes(mutant(programs[which], rng))
        run_commands(path, COMMANDS, number, escaped, seen)
    assert not escaped, escaped[:5]
    assert seen >= {"ok", "refused"}


def run_commands(path, commands, number: int, escaped: list, seen: set) -> None:
    """Each command on mutant `number` at `path`: what it made of it noted in `seen` (ok,
    refused or escaped), what escaped in `escaped`."""
    for command in commands:
        result = outcome(path, command)
        seen.add(result if result in ("ok", "refused") else "escaped")
        if result not in ("ok", "refused"):
            escaped.append((number, command, result))


@pytest.mark.parametrize("which", tiered(["mlp", "dynamic"], ["mlp"]))
def test_archive_mutants_compile_or_are_refused_and_never_run_code(which, tmp_path):
    from testbed.small_programs import MLP, saved

    members = archive_members(MLP.read_bytes() if which == "mlp" else saved(which))
    rng, marker = random.Random(17), tmp_path / "marker"
    path, command = tmp_path / "fuzz.pt2", ["compile", "-o", str(tmp_path / "out.pte")]
    escaped, ran = [], []
    for number in range(ARCHIVE_MUTANTS):
        path.write_bytes(archive_bytes(archive_mutant(members, rng, marker)))
        result = outcome(path, command)
        if result not in ("ok", "refused"):
            escaped.append((number, result))
        if marker.exists():
            ran.append(number)
            marker.unlink()
    assert not escaped, escaped[:5]
    assert not ran, f"code from archive mutants {ran} ran"


# issue 36's modes: the .ptd beside its program, several methods, an XNNPACK payload with its
# weights in a .ptd (a few dozen mutants each, seconds)
NEW_MODE_MUTANTS = 30


def new_mode(which: str) -> tuple[bytes, bytes | None]:
    """The program (and its .ptd) that mode `which` damages."""
    from testbed.small_programs import multi_method, with_data_file

    if which == "multi_method":
        return multi_method(), None
    if which == "xnnpack_ptd":
        pytest.importorskip("executorch.backends.xnnpack")
        return with_data_file(backends=["xnnpack"])
    return with_data_file()


@pytest.mark.parametrize("which", ["ptd", "multi_method", "xnnpack_ptd"])
def test_mutants_of_the_new_surfaces_work_or_are_refused(which, tmp_path):
    """A damaged .ptd with its program, a damaged program of several methods (`run --method`
    on a constant method and on another method), a damaged XNNPACK payload or its .ptd."""
    from testbed.damage import MULTI_METHOD_COMMANDS, pair_mutant, payload_start, with_data

    program, data = new_mode(which)
    rng, path, ptd = random.Random(17), tmp_path / "fuzz.pte", tmp_path / "fuzz.ptd"
    commands = MULTI_METHOD_COMMANDS if data is None else with_data(COMMANDS, ptd)
    escaped, seen = [], set()
    for number in range(NEW_MODE_MUTANTS):
        if data is None:
            path.write_bytes(mutant(program, rng))
        else:
            damaged, damaged_data = pair_mutant(program, data, rng, payload_start(program) if "xnnpack" in which else 0)
            path.write_bytes(damaged)
            ptd.write_bytes(damaged_data)
        run_commands(path, commands, number, escaped, seen)
    assert not escaped, escaped[:5]
    assert seen >= {"ok", "refused"}


# issue 52's names: a program's and a golden file's names, and their files' names, hostile
NAME_MUTANTS = 8  # each through 10 commands and formats: seconds


def test_hostile_names_print_no_workflow_command(tmp_path):
    """inspect, check --golden and diff in every format over programs and golden files whose
    names (and file names) hold workflow commands, line breaks, quotes, 100,000 characters or
    bytes that are not UTF-8: each works or is refused, and no line printed is a command."""
    import json

    from devplan.inspection.check import check_golden
    from testbed.damage import name_commands, name_file, renamed_golden, renamed_program
    from testbed.small_programs import compiled

    program = compiled()
    check_golden(program, tmp_path / "plain.golden.json", update=True)
    golden = json.loads((tmp_path / "plain.golden.json").read_text())
    rng, escaped, seen = random.Random(17), [], set()
    for number in range(NAME_MUTANTS):
        folder = tmp_path / str(number)
        folder.mkdir()
        program_path, golden_path = name_file(folder, rng, ".pte"), name_file(folder, rng, ".golden.json")
        program_path.write_bytes(renamed_program(program, [b"aten::linear", b"aten::relu", b"proj"], rng))
        golden_path.write_bytes(renamed_golden(golden, rng))
        for path, command in name_commands(program_path, golden_path):
            result = outcome(path, command)
            seen.add(result if result in ("ok", "refused") else "escaped")
            if result not in ("ok", "refused"):
                escaped.append((number, command, result))
    assert not escaped, escaped[:5]
    assert seen >= {"ok", "refused"}


# issue 52's archive names: each name a saved .pt2 carries, of every kind, made hostile in its JSON
NAMED_CODE_KINDS = {"parameter", "buffer", "constant", "module", "value", "input", "op", "weight file"}


def test_no_archive_name_made_code_runs(tmp_path):
    """Every name the archive carries, written everywhere it occurs (as torch.export.save writes
    a module given it) as code that touches a marker file when torch's generated Python runs it:
    compile works or refuses it, and the code never runs; a name torch writes as code (a
    weight's, a module's, a value's, an input's, an op's) is refused before --quantize turns the
    program into Python."""
    from testbed.damage import archive_members
    from testbed.names import CODE, named_archive, names, rename

    members, marker = archive_members(named_archive()), tmp_path / "marker"
    path, out = tmp_path / "named.pt2", str(tmp_path / "out.pte")
    escaped, taken = [], []
    for kind, old in names(members):
        path.write_bytes(rename(members, kind, old, CODE[0].format(marker=marker)))
        result = outcome(path, ["compile", "-o", out])
        if kind in NAMED_CODE_KINDS:
            quantized = outcome(path, ["compile", "-o", out, "--quantize", "dynamic-int8"], 30)
            taken += [(kind, old)] if quantized != "refused" else []
        if result not in ("ok", "refused") or marker.exists():
            escaped.append((kind, old, result, marker.exists()))
            marker.unlink(missing_ok=True)
    assert not escaped, escaped[:5]
    assert not taken, f"names that become code compiled under --quantize: {taken[:5]}"


def test_hostile_archive_names_through_every_command(tmp_path):
    """A few archives with one name each hostile (code, workflow commands, line breaks, quotes,
    100,000 characters, bytes that are not UTF-8), compiled (text and --json), and each program
    that compiles inspected, checked, diffed and run in every format: nothing escapes."""
    from testbed.names import fuzz_names

    row = fuzz_names(8, 17, tmp_path, modes=([],))
    assert row["found"] == [], row["found"][:5]
    assert row["code_runs"] == row["exit_3"] == row["tracebacks"] == row["commands"] == row["hangs"] == 0
    assert row["compiled"] and row["refused"]  # some names got past the gate to the readers, some did not


def test_a_command_stopped_at_its_limit_is_a_hang(tmp_path, monkeypatch):
    """A compile the fuzzing stops at its time limit counts as a hang wherever the limit falls:
    in a stage, the harness's exception was reported as devplan's internal error, so issue 52's
    names run counted 10 `--quantize int8` compiles that the loaded machine slowed past 60 s as
    exit 3s (each compiles in a fresh process)."""
    import time

    from testbed.damage import column
    from testbed.names import named_archive

    pt2e = pytest.importorskip("torchao.quantization.pt2e.quantize_pt2e")
    pytest.importorskip("executorch.backends.xnnpack.quantizer.xnnpack_quantizer")  # imported before the limit
    path = tmp_path / "named.pt2"
    path.write_bytes(named_archive())
    # waiting (stopped by the clock), computing (by the CPU time, before the clock's minute)
    for stuck, wall_s in ((lambda *args: time.sleep(60), 4), (lambda *args: all(True for _ in iter(int, 1)), 60)):
        monkeypatch.setattr(pt2e, "prepare_pt2e", stuck)  # inside the quantize stage
        started = time.perf_counter()
        result = outcome(path, ["compile", "-o", str(tmp_path / "q.pte"), "--quantize", "dynamic-int8"], 2, wall_s)
        assert column(result) == "hangs" and time.perf_counter() - started < 30, result


def test_a_command_leaves_nothing_of_its_output_behind(tmp_path):
    """The fuzzing runs each command in this process, its output caught in memory: that memory is
    reused by the next command, where click's cache of the text stream it made for each
    sys.stdout it met (a weak key holding a strong value, the key itself) kept every command's
    output alive and the names run grew 16 MB a thousand mutants."""
    import gc
    import io

    from testbed.small_programs import compiled

    path = tmp_path / "program.pte"
    path.write_bytes(compiled())

    def streams() -> int:
        gc.collect()
        return sum(isinstance(held, io.StringIO) for held in gc.get_objects())

    commands = [["inspect"], ["inspect", "--json"], ["check", "--budget", "cpu=1B"]]
    assert outcome(path, commands[0]) == "ok"
    before = streams()
    assert [outcome(path, command) for command in commands * 2] == ["ok", "ok", "refused"] * 2
    assert streams() == before
