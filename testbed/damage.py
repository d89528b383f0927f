"""Damaged copies of a program for fuzz tests (a few bytes overwritten at random places, or the
file cut short), changed copies of a .pt2 archive (its JSON fields and member names), programs
and golden files whose names are hostile (workflow commands, line breaks, quotes, 100,000
characters, bytes that are not UTF-8), and what the `devplan` command makes of one: shared by
the fuzz tests in CI (tests/pte/test_fuzz.py) and the long run in benchmarks/fuzz.py."""

from __future__ import annotations

import builtins
import contextlib
import io
import json
import math
import random
import re
import signal
import time
import zipfile
from collections.abc import Sequence
from functools import cache
from pathlib import Path

LIMIT_S = 5  # a command taking longer on a small file is a hang
COMMANDS = (["inspect"], ["inspect", "--json"], ["check"], ["run", "--max-memory", "256MiB", "--devices-on-host"])
# small_programs.multi_method's: a constant method run, and batch5 last (its exit 0: devplan ran the mutant)
MULTI_METHOD_COMMANDS = (*COMMANDS[:3], ["run", "--method", "name"], [*COMMANDS[3], "--method", "batch5"])


def flip_bytes(data: bytes, rng: random.Random, most: int, start: int = 0) -> bytes:
    """`data` with 1 to `most` bytes from byte `start` on set to random values."""
    variant = bytearray(data)
    for _ in range(rng.randint(1, most)):
        variant[rng.randrange(start, len(variant))] = rng.randrange(256)
    return bytes(variant)


def mutant(data: bytes, rng: random.Random, start: int = 0) -> bytes:
    """A few random bytes (from byte `start` on) changed, or the file cut short."""
    if rng.random() < 0.15:
        return data[: rng.randrange(len(data))]
    return flip_bytes(data, rng, most=4, start=start)


# ------------------------------------------------------------------ a program with its .ptd


def with_data(commands, data: Path) -> list[list[str]]:
    """`commands` given the .ptd `data` (--data), as a program keeping its weights there runs."""
    return [[*command, "--data", str(data)] for command in commands]


def payload_start(program: bytes) -> int:
    """Where an XNNPACK payload starts in `program` (its header's magic, XH00, 4 bytes in), or 0
    when none is there: damage aimed past it lands in the payload or the data after it."""
    at = program.find(b"XH00")
    return max(at - 4, 0)


def pair_mutant(program: bytes, data: bytes, rng: random.Random, start: int = 0) -> tuple[bytes, bytes]:
    """A program and its .ptd with one or both damaged (mutant): the .ptd two times in three,
    read against an intact program, as a stale or corrupted weights file meets its program;
    the program's damage from byte `start` on (payload_start: inside its XNNPACK payload)."""
    roll = rng.random()
    if roll < 0.67:
        return program, mutant(data, rng)
    if roll < 0.9:
        return mutant(program, rng, start), data
    return mutant(program, rng, start), mutant(data, rng)


# ------------------------------------------------------------------ .pt2 archives

Members = list[tuple[str, bytes]]


class Payload:
    """Unpickling this writes a marker file: any code a crafted archive gets run shows as it."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return builtins.exec, (f"open({self.marker!r}, 'w').write('ran')",)


def archive_members(data: bytes) -> Members:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return [(info.filename, archive.read(info)) for info in archive.infolist()]


def archive_bytes(members: Members) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members:
            archive.writestr(name, data)
    return buffer.getvalue()


def _texts(marker: Path) -> list[str]:
    """Strings a hostile archive would put where torch reads text: code that writes `marker`
    when evaluated (as an expression, a guard, a target), and odd but harmless text."""
    code = f"__import__('builtins').open({str(marker)!r}, 'w').write('ran')"
    return [
        code,
        f"({code}) or s0",
        f"Max(s0, {code})",
        f"s0 + {code}",
        f"exec({code!r})",
        "__import__('os')",
        "torch.ops.aten.relu.default",
        "torch.ops.aten.nonexistent.default",
        "aten.relu",
        "_operator.getitem",
        "s0",
        "s0 + 1",
        "2*s0",
        "s99",
        "u0",
        "Max(1, s0) // 2",
        "Pow(Integer(10), Integer(100000))",
        "%s %s %d",
        "%(x)s",
        "{0}",
        "\x1b[31m",
        "ev\nil",
        "../../evil",
        "",
        " ",
        "model",
        "weight_0",
        "tensor_0",
        "Float",
        "cpu",
        "cuda:9",
        "meta",
    ]


def _values(rng: random.Random, marker: Path):
    """A JSON value of a random type and size."""
    choice = rng.randrange(9)
    if choice < 3:
        return rng.choice(_texts(marker))
    if choice == 3:
        return rng.choice([0, -1, 1, 2, 7, 2**31, 2**63, -(2**63), 10**30, 2**64 + 1])
    if choice == 4:
        return rng.choice([0.5, -1.5, math.inf, -math.inf, math.nan, 1e308])
    if choice == 5:
        return rng.choice([None, True, False])
    if choice == 6:
        return rng.choice([[], [0], ["s0"], [None], list(range(8))])
    if choice == 7:
        return rng.choice([{}, {"as_int": 3}, {"as_expr": {"expr_str": rng.choice(_texts(marker)), "hint": 2}}])
    return "x" * rng.choice([1, 100, 10_000])


def _places(document) -> list[tuple[object, object]]:
    """(container, key or index) of every value in a JSON document."""
    places, stack = [], [document]
    while stack:
        value = stack.pop()
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, item in items:
            places.append((value, key))
            stack.append(item)
    return places


def _change_json(document, rng: random.Random, marker: Path) -> None:
    """One change: a value replaced, a key renamed, added or removed, a list item dropped or doubled."""
    places = _places(document)
    if not places:
        return
    container, key = rng.choice(places)
    kind = rng.randrange(6)
    if kind < 3:  # replace a value, keeping its type a third of the time
        old = container[key]
        if isinstance(old, str) and rng.random() < 0.3:
            container[key] = rng.choice(_texts(marker))
        elif isinstance(old, int) and not isinstance(old, bool) and rng.random() < 0.3:
            container[key] = old + rng.choice([-1, 1, -old - 1, 2**31, 10**20])
        else:
            container[key] = _values(rng, marker)
    elif kind == 3 and isinstance(container, dict):  # rename a key
        container[rng.choice([*_texts(marker), str(key).upper(), f"{key}_"])] = container.pop(key)
    elif kind == 4:  # remove it
        container.pop(key)
    elif isinstance(container, dict):  # add a key
        container[rng.choice(["custom", "guards_code", "expr_str", "target", "extra", *_texts(marker)])] = _values(
            rng, marker
        )
    else:  # a list item doubled
        container.insert(key, container[key])


def _change_name(name: str, rng: random.Random) -> str:
    folder, _, leaf = name.rpartition("/")
    return rng.choice(
        [
            name.replace("model", rng.choice(["evil", "sub/model", "model2", "Model", "ev\nil", ""])),
            f"{folder}/{leaf}\n",
            f"{folder}/../{leaf}",
            f"{folder}/sub/{leaf}",
            f"{folder}/{leaf}.pt",
            f"{folder}/{leaf.upper()}",
            f"/{name}",
            name.replace("/", "//", 1),
            f"{folder}/{leaf}".replace("_0", "_00"),
            name.replace("weight_", "weight_9"),
            name.replace("data/", "extra/", 1),
            f"{folder}/ {leaf}",
        ]
    )


def archive_mutant(members: Members, rng: random.Random, marker: Path) -> Members:
    """1 to 3 changes to a .pt2 archive's members: a change to a JSON member's document (a value,
    a key), a member renamed, dropped or doubled under another name, or one added (a pickle whose
    loading writes `marker`, code text, an empty file)."""
    members = list(members)
    for _ in range(rng.randint(1, 3)):
        kind = rng.random()
        index = rng.randrange(len(members)) if members else 0
        if kind < 0.55:
            documents = [i for i, (name, _) in enumerate(members) if name.endswith(".json")]
            if not documents:
                continue
            index = rng.choice(documents)
            name, data = members[index]
            try:
                document = json.loads(data)
            except ValueError:
                continue
            _change_json(document, rng, marker)
            members[index] = (name, json.dumps(document).encode())
        elif kind < 0.75 and members:
            name, data = members[index]
            members[index] = (_change_name(name, rng), data)
        elif kind < 0.82 and members:
            members.pop(index)
        elif kind < 0.9 and members:
            name, data = members[index]
            members.append((_change_name(name, rng), data))
        else:
            prefix = members[0][0].split("/")[0] if members else "model"
            folder = rng.choice(
                ["", "data/", "data/weights/", "data/constants/", "data/sample_inputs/", "models/", "extra/", ".data/"]
            )
            leaf = rng.choice(["model.pt", "evil.pt", "model.json", "weight_0", "tensor_0", "x", "ev\nil.pt"])
            buffer = io.BytesIO()
            import torch

            torch.save((Payload(marker),), buffer)
            members.append(
                (f"{prefix}/{folder}{leaf}", rng.choice([buffer.getvalue(), b"", b"{}", _texts(marker)[0].encode()]))
            )
    return members


# ------------------------------------------------------------------ hostile names

# what a name from a file may hold against the lines devplan prints: GitHub's workflow commands
# (`::` after a line's whitespace, the legacy `##[` anywhere) and their %-escapes, the line
# breaks the runner and Python's splitlines honour, quotes, a terminal escape
NAME_PIECES = (
    "::add-mask::x",
    "::set-output name=a::b",
    "::stop-commands::t",
    "##[group]",
    "%0A::warning::w",
    "%25",
    " ",
    "\n",
    "\r",
    "\u2028",
    "\x85",
    "'",
    '"',
    "\x1b[31m",
    "aten::relu",
)
# devplan's own annotations (--format github): the one output that may be a workflow command
# devplan's own: a file and its line where known (a budget with neither is the run's)
_OWN_ANNOTATION = re.compile(r"::(error|notice) (?:file=[^:,]*,)?(?:line=\d+,)?title=[^:,]*::")


def workflow_commands(output: str) -> list[str]:
    """The lines of `output` (ending at CR, LF or both, as GitHub's runner reads them) that the
    runner would take as workflow commands, devplan's own annotations left out."""
    return [
        line
        for line in re.split(r"\r\n|\r|\n", output)
        if (line.lstrip().startswith("::") and not _OWN_ANNOTATION.match(line)) or "##[" in line
    ]


def hostile_name(rng: random.Random) -> str:
    """1 to 6 pieces of NAME_PIECES; one time in ten repeated past 100,000 characters."""
    name = "".join(rng.choice(NAME_PIECES) for _ in range(rng.randint(1, 6)))
    return name * (100_000 // len(name) + 1) if rng.random() < 0.1 else name


def renamed_program(program: bytes, names: Sequence[bytes], rng: random.Random) -> bytes:
    """`program` with one of `names` it holds (an operator's, a module's) hostile: as many bytes,
    so that the FlatBuffer's layout holds, cut where it may leave bytes that are not UTF-8."""
    old = rng.choice([name for name in names if name in program])
    new = (hostile_name(rng).encode() * len(old))[: len(old)]
    return program.replace(old, b"\xff" + new[1:] if rng.random() < 0.2 else new)


def renamed_golden(document: dict, rng: random.Random) -> bytes:
    """A golden document's JSON with 1 to 3 of its names hostile (a method's, an operator's, a
    buffer's device, its peak's op, source and blocks); one time in ten, a name's bytes are not UTF-8."""
    document = json.loads(json.dumps(document))
    places = _name_places(document)
    for _ in range(rng.randint(1, 3)):
        container, key = rng.choice(places)
        if isinstance(container, dict) and key not in ("name", "device", "op", "source"):  # a block: its key
            container[hostile_name(rng)] = container.pop(key, 0)
        else:
            container[key] = hostile_name(rng)
    text = json.dumps(document, indent=2).encode()
    return text.replace(b"aten::", b"\xff::", 1) if rng.random() < 0.1 else text


def _name_places(document: dict) -> list[tuple[object, object]]:
    """(container, key) of every name in a golden document."""
    places: list[tuple[object, object]] = []
    for method in document["methods"]:
        places += [(method, "name"), *((method["operators"], i) for i in range(len(method["operators"])))]
        for buffer in method["buffers"]:
            places.append((buffer, "device"))
            if buffer.get("peak"):
                peak = buffer["peak"]
                places += [(peak, "op"), (peak, "source"), *((peak["modules"], name) for name in list(peak["modules"]))]
    return places


def name_commands(program: Path, golden: Path) -> list[tuple[Path, list[str]]]:
    """What reads names, in every format: (the path outcome puts first, the command)."""
    formats = [[], ["--json"], ["--format", "markdown"], ["--format", "github"]]
    return [
        (program, ["inspect"]),
        (program, ["inspect", "--json"]),
        *((program, ["check", "--golden", str(golden), *shown]) for shown in formats),
        *((golden, ["diff", str(program), *shown]) for shown in formats),
    ]


def name_file(folder: Path, rng: random.Random, suffix: str) -> Path:
    """A file in `folder` whose name is hostile (as a file name can be: no / and within 255 bytes)."""
    name = hostile_name(rng).replace("/", "_").encode()[:200].decode(errors="ignore")
    return folder / f"{name}{suffix}"


class Hang(BaseException):
    """A command stopped at its time limit. Not an Exception, as KeyboardInterrupt is not: the
    code it stops in would take it for its own failure (a compile's stage reports any Exception
    as devplan's internal error, exit 3; --quantize's export reports one as a refusal), and issue
    52's names run counted 10 compiles that a loaded machine slowed past 60 s as exit 3s."""


def _alarm(signum, frame):
    raise Hang


@cache
def _streams() -> tuple[io.StringIO, io.StringIO]:
    """The stdout and stderr every command writes to, emptied before each. click keeps the text
    stream it found for each sys.stdout it met, in a WeakKeyDictionary whose value is that stream
    itself, so a fresh StringIO per command was never freed: the names fuzz grew with its length."""
    return io.StringIO(), io.StringIO()


@cache
def _command():
    """The click command behind `devplan`, made once: typer builds it from the app's
    signatures on every call (20 ms, more than most commands take on a small file)."""
    import typer

    from devplan.cli import app

    return typer.main.get_command(app)


def outcome(path, command: list[str], limit_s: float = LIMIT_S, wall_s: float | None = None) -> str:
    """'ok', 'refused', or what escaped. The command runs as `devplan.cli.main` runs it (click
    outside standalone mode, so its exit code comes back), its output kept to be read: exit 0
    is ok, exit 1 (check's failed buffer) or a DevplanError (exit 2) refused, anything else
    escaped: an exception (exit 3 from the CLI), a command over `limit_s` seconds of this
    process's CPU time or `wall_s` seconds on the clock (10 times `limit_s` unless given) ("Hang"), a
    traceback that something printed on the way ("Traceback: ", its last line), or a line a CI
    runner would take as a workflow command ("workflow command: ", the line), the refusal's
    own line (as the CLI prints it) among them."""
    from devplan.errors import DevplanError
    from devplan.units import inert, printable

    # CPU time, as a run at nice 19 on shared cores waits for minutes without hanging; the clock
    # for what waits without computing (a read that never ends)
    wall_s = 10 * limit_s if wall_s is None else wall_s
    previous = signal.signal(signal.SIGALRM, _alarm), signal.signal(signal.SIGPROF, _alarm)
    signal.setitimer(signal.ITIMER_PROF, limit_s)
    signal.setitimer(signal.ITIMER_REAL, wall_s)
    stdout, stderr = _streams()
    for stream in (stdout, stderr):
        stream.seek(0)
        stream.truncate()
    start, cpu = time.perf_counter(), time.process_time()
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = _command().main([command[0], str(path), *command[1:]], prog_name="devplan", standalone_mode=False)
        result = "ok" if not code else "refused"  # check exits 1 when a buffer fails
    except DevplanError as error:
        result = "refused"
        print(f"devplan: error: {inert(printable(str(error)))}", file=stderr)
    except Hang:
        return "Hang"
    except Exception as error:  # noqa: BLE001 - what escapes is the finding
        cause = error.__cause__  # an internal error's: what devplan's stage caught
        return f"{type(error).__name__}: {error}" + (f" from {type(cause).__name__}: {cause}"[:200] if cause else "")
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous[0])
        signal.signal(signal.SIGPROF, previous[1])
    # an alarm that fell where nothing could raise it (a finalizer)
    if time.process_time() - cpu >= limit_s or time.perf_counter() - start >= wall_s:
        return "Hang"
    printed = stderr.getvalue()
    if "Traceback" in printed or "Logging error" in printed:
        return f"Traceback: {printed.strip().splitlines()[-1]}"
    if commanding := workflow_commands(stdout.getvalue() + printed):
        return f"workflow command: {commanding[0][:200]!r}"
    return result


def column(result: str) -> str:
    """The column of benchmarks/fuzz.py's table an outcome counts in."""
    if result in ("ok", "refused"):
        return result
    if result.startswith("Hang"):
        return "hangs"
    if result.startswith("workflow command: "):
        return "commands"
    return "tracebacks" if result.startswith("Traceback: ") else "exit_3"
