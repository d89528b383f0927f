"""Every file devplan writes goes through devplan/files.py: through links to their target,
straight into pipes and devices (standard output included), never over one of the command's
inputs, never through a link planted among its stage files; what it reads is a regular file."""

import io
import json
import os
import resource
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import torch

import devplan
from devplan.errors import DevplanError
from devplan.files import read_input, write_atomic
from testbed.cli import assert_one_line_error, devplan as cli
from tests.compile.test_cli import ROOT

MLP = ROOT / "samples" / "mlp.pt2"


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    """samples/mlp.pt2 compiled once, in this process."""
    path = tmp_path_factory.mktemp("writes") / "mlp.pte"
    devplan.compile(MLP, path)
    return path


def test_compile_output_through_a_link_updates_its_target(tmp_path):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "mlp.pte"
    target.write_bytes(b"old")
    link = tmp_path / "link.pte"
    link.symlink_to(Path("real") / "mlp.pte")
    run = cli("compile", MLP, "-o", link)
    assert run.returncode == 0, run.stderr
    assert link.is_symlink() and os.readlink(link) == os.path.join("real", "mlp.pte")
    assert target.read_bytes()[4:8] == b"ET12"
    assert sorted(os.listdir(tmp_path / "real")) == ["mlp.pte"] and sorted(os.listdir(tmp_path)) == ["link.pte", "real"]


def test_golden_update_through_a_link_updates_its_target(tmp_path, program):
    target = tmp_path / "golden.json"
    target.write_text('{"document": "devplan-golden", "schema_version": 0}')  # an old one, which --update rewrites
    link = tmp_path / "link.json"
    link.symlink_to(target)
    run = cli("check", program, "--golden", link, "--update")
    assert run.returncode == 0, run.stderr
    assert link.is_symlink() and json.loads(target.read_text())["document"] == "devplan-golden"
    assert cli("check", program, "--golden", link).returncode == 0


def test_golden_update_creates_its_folder(tmp_path, program):
    golden = tmp_path / "new" / "dir" / "g.json"
    run = cli("check", program, "--golden", golden, "--update")
    assert run.returncode == 0, run.stderr
    assert json.loads(golden.read_text())["document"] == "devplan-golden"


@pytest.mark.parametrize("output", ["-", pytest.param("/dev/stdout", marks=pytest.mark.sweep)])
def test_compile_to_standard_output_pipes_into_inspect(output, tmp_path):
    """The program alone on stdout (the summary on stderr), read back from stdin."""
    python = shlex.quote(sys.executable)
    pipeline = (
        f"{python} -m devplan compile {shlex.quote(str(MLP))} -o {output} 2>{shlex.quote(str(tmp_path / 'err'))}"
        f" | {python} -m devplan inspect -"
    )
    run = subprocess.run(pipeline, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, (run.stderr, (tmp_path / "err").read_text())
    assert run.stdout.startswith("<stdin>") and "ET12" in run.stdout and "forward" in run.stdout
    assert "wrote standard output" in (tmp_path / "err").read_text()
    assert not (ROOT / "-").exists()


def test_standard_input_is_read_once_by_check_and_diff(program, tmp_path):
    data = program.read_bytes()
    golden = tmp_path / "g.json"
    assert cli("check", program, "--golden", golden, "--update").returncode == 0
    code = "import sys; from devplan.cli import main; sys.argv[0] = 'devplan'; main()"
    for args in (["check", "-", "--golden", golden], ["diff", "-", program]):
        run = subprocess.run(
            [sys.executable, "-c", code, *map(str, args)], input=data, capture_output=True, cwd=ROOT, timeout=120
        )
        assert run.returncode == 0, run.stderr
    assert b"plan the same" in run.stdout


def test_writing_a_fifo_writes_into_it(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    write_atomic(fifo, b"through the pipe")
    reader.join(timeout=30)
    assert received == [b"through the pipe"] and fifo.is_fifo() and os.listdir(tmp_path) == ["fifo"]


def test_a_socket_or_directory_is_refused(tmp_path):
    with tempfile.TemporaryDirectory(dir="/tmp") as short:  # a socket's path must be short
        path = os.path.join(short, "s")
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(path)
            with pytest.raises(DevplanError, match=r"/s: is a socket; .*pass a file path"):
                write_atomic(path, b"data")
            assert Path(path).is_socket()
    (tmp_path / "taken").mkdir()
    with pytest.raises(DevplanError, match="taken: is a directory"):
        write_atomic(tmp_path / "taken", b"data")
    assert os.listdir(tmp_path) == ["taken"]


def test_a_long_legal_name_is_written(tmp_path, program):
    name = "m" * 240 + ".pte"  # 244 characters: the temporary beside it must not be longer than 255
    out = tmp_path / name
    devplan.compile(MLP, out)
    assert out.read_bytes() == program.read_bytes() and os.listdir(tmp_path) == [name]


@pytest.mark.parametrize(
    "args, option",
    [
        (["inspect", "{program}", "--svg", "{output}"], "--svg"),
        (["inspect", "{program}", "--trace", "{output}"], "--trace"),
        (["run", "{program}", "--save", "{output}"], "--save"),
        (["check", "{program}", "--golden", "{output}", "--update"], "--golden"),
    ],
)
@pytest.mark.parametrize("through_link", [False, True])
def test_an_output_that_is_the_input_is_refused(tmp_path, program, args, option, through_link):
    copy = tmp_path / "mlp.pte"
    copy.write_bytes(program.read_bytes())
    output = copy
    if through_link:
        output = tmp_path / "other.name"
        output.symlink_to(copy)
    run = cli(*[arg.format(program=copy, output=output) for arg in args])
    assert_one_line_error(run, f"{option} would overwrite the input", str(output))
    assert copy.read_bytes() == program.read_bytes()


def test_a_link_planted_in_the_dump_folder_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "01-load.txt").symlink_to(victim)
    devplan.compile(MLP, dump_dir=dump)
    assert victim.read_text() == "keep me"
    assert not (dump / "01-load.txt").is_symlink() and (dump / "01-load.txt").read_text() != "keep me"


@pytest.mark.parametrize("role", ["model", "output"])
def test_a_dump_never_replaces_the_compiles_own_files(tmp_path, role):
    """A model named 01-load.txt in the dump folder was replaced by the dump of the stage that
    loaded it (the compile went on and exited 0), and so was an output of that name."""
    dump = tmp_path / "dump"
    dump.mkdir()
    model = dump / "01-load.txt" if role == "model" else tmp_path / "mlp.pt2"
    output = dump / "01-load.txt" if role == "output" else tmp_path / "out.pte"
    shutil.copy(MLP, model)
    before = model.read_bytes()
    run = cli("compile", model, "-o", output, "--dump-dir", dump)
    assert_one_line_error(run, "--dump-dir would overwrite", "01-load.txt")
    assert model.read_bytes() == before and not (role == "model" and output.exists())


def test_a_fifo_or_device_to_read_is_refused_without_hanging(tmp_path, program):
    fifo = tmp_path / "golden.json"
    os.mkfifo(fifo)  # no writer: opening it to read would block forever
    assert_one_line_error(cli("check", program, "--golden", fifo), "golden.json: is a pipe (FIFO), not a regular file")
    assert_one_line_error(cli("diff", fifo, program), "is a pipe (FIFO), not a regular file")
    assert_one_line_error(cli("run", program, "--inputs", fifo), "is a pipe (FIFO), not a regular file")
    assert_one_line_error(
        cli("run", program, "--inputs", "/dev/zero"),  # would read forever
        "/dev/zero: is a character device, not a regular file",
    )
    assert_one_line_error(cli("compile", fifo, "-o", tmp_path / "x.pte"), "is a pipe (FIFO), not a regular file")


@pytest.fixture(scope="module")
def external(tmp_path_factory) -> tuple[Path, Path]:
    """samples/mlp.pt2 compiled with its weights in a .ptd beside it: the program, its data."""
    folder = tmp_path_factory.mktemp("external")
    devplan.compile(MLP, folder / "mlp.pte", external_constants=folder / "mlp.ptd")
    return folder / "mlp.pte", folder / "mlp.ptd"


def _copies(tmp_path: Path, *paths: Path) -> list[Path]:
    """Each file copied into tmp_path, so that a write that gets through harms only the test's copy."""
    copies = [tmp_path / path.name for path in paths]
    for source, copy in zip(paths, copies):
        copy.write_bytes(source.read_bytes())
    return copies


@pytest.mark.parametrize(
    "args, option",
    [
        (["inspect", "{program}", "--data", "{data}", "--svg", "{output}"], "--svg"),
        (["inspect", "{program}", "--data", "{data}", "--trace", "{output}"], "--trace"),
        (["run", "{program}", "--data", "{data}", "--save", "{output}"], "--save"),
        (["run", "{program}", "--data", "{data}", "--save", "{output}", "--executorch"], "--save"),
        (["check", "{program}", "--data", "{data}", "--golden", "{output}", "--update"], "--golden"),
    ],
)
@pytest.mark.parametrize("how", ["same path", "symbolic link", "hard link"])
def test_an_output_that_is_the_data_file_is_refused(tmp_path, external, args, option, how):
    """The .ptd holds the program's weights: only a recompile would bring them back."""
    program, data = _copies(tmp_path, *external)
    output = {"same path": data, "symbolic link": tmp_path / "link.out", "hard link": tmp_path / "hard.out"}[how]
    if how == "symbolic link":
        output.symlink_to(data)
    elif how == "hard link":
        os.link(data, output)
    run = cli(*[arg.format(program=program, data=data, output=output) for arg in args])
    assert_one_line_error(run, f"{option} would overwrite the input", str(output), str(data))
    assert data.read_bytes() == external[1].read_bytes()


@pytest.mark.parametrize("option", ["-o", "--external-constants"])
@pytest.mark.parametrize("how", ["same path", "symbolic link", "hard link"])
def test_a_compile_output_that_is_the_metadata_is_refused(tmp_path, option, how):
    metadata = tmp_path / "meta.json"
    metadata.write_text('{"get_max_seq_len": 128}')
    output = {"same path": metadata, "symbolic link": tmp_path / "link.pte", "hard link": tmp_path / "hard.pte"}[how]
    if how == "symbolic link":
        output.symlink_to(metadata)
    elif how == "hard link":
        os.link(metadata, output)
    others = ["-o", tmp_path / "mlp.pte"] if option == "--external-constants" else []
    run = cli("compile", MLP, "--metadata", metadata, option, output, *others)
    assert_one_line_error(run, f"{option} would overwrite the input", str(output), str(metadata))
    assert metadata.read_text() == '{"get_max_seq_len": 128}'
    assert not (tmp_path / "mlp.pte").exists()


@pytest.mark.parametrize("victim", ["a program", "a .ptd", "JSON of another kind", "text"])
def test_golden_update_replaces_only_a_golden_file(tmp_path, program, external, victim):
    """check --golden victim.pte --update once replaced a program with golden JSON."""
    path = tmp_path / "victim"
    path.write_bytes(
        {
            "a program": external[0].read_bytes(),
            "a .ptd": external[1].read_bytes(),
            "JSON of another kind": b'{"format": "ET12"}',
            "text": b"notes\n",
        }[victim]
    )
    before = path.read_bytes()
    run = cli("check", program, "--golden", path, "--update")
    assert_one_line_error(run, "--golden --update would replace a file that is not a devplan golden file", str(path))
    assert path.read_bytes() == before


@pytest.mark.parametrize("found", ["missing", "empty", "a golden file"])
def test_golden_update_writes_a_new_empty_or_golden_file(tmp_path, program, found):
    golden = tmp_path / "g.json"
    if found != "missing":
        golden.write_text("" if found == "empty" else '{"document": "devplan-golden", "schema_version": 0}')
    assert devplan.check_golden(program, golden, update=True).updated
    assert json.loads(golden.read_text())["schema_version"] == 1


class _Stdin(io.RawIOBase):
    """Standard input that holds `size` bytes, recording what each read asks for."""

    def __init__(self, size: int) -> None:
        self.left, self.asked = size, []

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        self.asked.append(n)
        given = self.left if n < 0 else min(n, self.left)
        self.left -= given
        return bytes(given)


@pytest.mark.parametrize("size, limit", [(4096, 2**34), (10 << 20, 3 << 20)])
def test_standard_input_is_read_in_steps_up_to_the_limit(monkeypatch, size, limit):
    """read(2**34 + 1) allocated 16 GiB at once, whatever standard input held."""
    stdin = _Stdin(size)
    monkeypatch.setattr(sys, "stdin", type("Stdin", (), {"buffer": stdin})())
    if size <= limit:
        assert read_input("-", limit=limit, hint="pipe in a .pte program") == bytes(size)
    else:
        with pytest.raises(DevplanError, match=f"-: larger than the {limit} bytes devplan reads for it; pipe in"):
            read_input("-", limit=limit, hint="pipe in a .pte program")
        assert size - stdin.left == limit + 1  # read no further than the byte that makes it too large
    assert max(stdin.asked) <= 1 << 20


def _address_space(limit: int):
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


@pytest.mark.parametrize("command", [["inspect", "-"], ["check", "-"], ["diff", "-", "{program}"]])
def test_standard_input_is_read_under_an_address_space_limit(program, command):
    """Under `ulimit -v` (2 GiB here; these commands need a few hundred MB) a small program piped in is read."""
    with program.open("rb") as stdin:
        run = subprocess.run(
            [sys.executable, "-m", "devplan", *[arg.format(program=program) for arg in command]],
            stdin=stdin,
            capture_output=True,
            cwd=ROOT,
            timeout=120,
            preexec_fn=_address_space(2 << 30),
        )
    assert run.returncode == 0, run.stderr
    assert b"forward" in run.stdout or b"plan the same" in run.stdout


def test_a_file_is_read_in_steps_under_an_address_space_limit(program):
    """read(limit + 1) on a file allocated the limit too: `run --inputs` (8 GiB) failed under `ulimit -v`."""
    code = (
        "import sys; from devplan.files import read_input; "
        "sys.stdout.write(str(len(read_input(sys.argv[1], limit=2**34, hint='pass a file'))))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, str(program)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        preexec_fn=_address_space(1 << 30),
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == str(program.stat().st_size)


@pytest.mark.parametrize(
    "args, option",
    [
        (["compile", str(MLP), "-o", "-", "--external-constants", "-"], "--external-constants"),
        (["compile", str(MLP), "-o", "/dev/stdout", "--external-constants", "-"], "--external-constants"),
        (["inspect", "{program}", "--svg", "-", "--trace", "-"], "--trace"),
    ],
)
def test_two_outputs_on_standard_output_are_refused(program, args, option):
    """A program followed by its .ptd on one stream: no reader can split them."""
    run = cli(*[arg.format(program=program) for arg in args])
    assert_one_line_error(run, f"{option} would write standard output", f"pass {option} another file")
    assert run.stdout == ""


@pytest.mark.parametrize(
    "args, option, first",
    [
        (["compile", str(MLP), "-o", "{out}", "--external-constants", "{out}"], "--external-constants", "-o"),
        (["inspect", "{program}", "--svg", "{out}", "--trace", "{out}"], "--trace", "--svg"),
    ],
)
def test_two_outputs_on_one_file_are_refused(program, tmp_path, args, option, first):
    """`inspect --svg F --trace F` exited 0 with F holding only the trace (the drawing replaced
    without a word), and `compile -o F --external-constants F` called F an input."""
    out = tmp_path / "same.out"
    run = cli(*[arg.format(program=program, out=out) for arg in args])
    assert_one_line_error(run, f"{option} would write the file {out}, which {first} writes")
    assert not out.exists()


def test_what_a_kernels_module_prints_goes_to_standard_error(tmp_path):
    """compile -o - --kernels MODULE: the program's bytes began with the module's greeting."""
    (tmp_path / "chatty_kernels.py").write_text(
        "import ctypes, os\nprint('hello from python')\nos.write(1, b'hello from C\\n')\n"
        "ctypes.CDLL(None).printf(b'hello from printf\\n')\n"
    )  # C's stdio, as an extension prints
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    run = subprocess.run(
        [sys.executable, "-m", "devplan", "compile", str(MLP), "-o", "-", "--kernels", "chatty_kernels"],
        capture_output=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout[4:8] == b"ET12" and b"hello" not in run.stdout
    assert all(f"hello from {who}".encode() in run.stderr for who in ("python", "C", "printf"))


@pytest.mark.parametrize(
    "args, report",
    [
        (["run", "{program}", "--save", "-", "--json"], "json"),
        (["run", "{program}", "--save", "-"], "text"),
        (["inspect", "{program}", "--svg", "-", "-s", "summary"], "text"),
        (["inspect", "{program}", "--svg", "-", "--json"], "json"),
        (["inspect", "{program}", "--trace", "-", "--json"], "json"),
    ],
)
def test_a_file_on_standard_output_sends_the_report_to_standard_error(program, args, report):
    """An output on standard output (-) had the report printed after it on the same stream: a
    saved archive or a drawing followed by JSON or text that no reader of either could split.
    The report goes to standard error, as compile -o - sends its summary."""
    done = subprocess.run(
        [sys.executable, "-m", "devplan", *[arg.format(program=program) for arg in args]],
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    if "--save" in args:
        (saved,) = torch.load(io.BytesIO(done.stdout))
        assert saved.shape[0] > 0
    elif "--svg" in args:
        assert done.stdout.decode().rstrip().endswith("</svg>")
    else:
        assert isinstance(json.loads(done.stdout), (dict, list))
    said = done.stderr.decode()
    if report == "json":
        assert json.loads(said)["file"]["name"] == program.name, said
    else:
        assert ("output 0: float32" if args[0] == "run" else program.name) in said, said


def test_a_legal_244_character_output_name_is_written(tmp_path):
    """The temporary file beside it keeps only part of the name, so it stays within 255 bytes."""
    from devplan.files import write_atomic

    for length in (244, 255):
        target = tmp_path / ("p" * (length - 4) + ".pte")
        write_atomic(target, b"program")
        assert target.read_bytes() == b"program" and [p.name for p in tmp_path.iterdir()] == [target.name]
        target.unlink()
