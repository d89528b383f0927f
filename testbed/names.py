"""The names mode of the fuzzing (issue 52): a small real .pt2 archive, saved by
torch.export.save, with one of the names it carries made hostile where torch's JSON holds it
(a parameter's, a buffer's, a constant's, a submodule's path and its module stack entries, a
graph value's, an input's or output's name in the signature, an op's namespace or name, an
argument's keyword, a weight's file, the archive's folder, a node's source line), then compiled
with and without each --quantize mode, and every program that compiles inspected, checked,
diffed and run in every output format. Shared by the bounded fuzz test in CI
(tests/pte/test_fuzz.py) and the long run (benchmarks/fuzz.py --names)."""

from __future__ import annotations

import functools
import io
import json
import random
import re
import time
from pathlib import Path

import torch

from testbed.damage import NAME_PIECES, archive_bytes, archive_members, column, outcome

# a name torch would write into generated Python unescaped, as a variable, an attribute or a
# dict key: code that touches `marker` when that Python runs (issue 52's finding 1 and kin)
CODE = (
    'w"+str(getattr(__import__("os"),"system")("touch {marker}"))+"',
    "w'+str(getattr(__import__('os'),'system')('touch {marker}'))+'",
    'w\n__import__("os").system("touch {marker}")\n',
    "w), __import__('os').system('touch {marker}'), (",
    "w = __import__('os').system('touch {marker}')",
    "w: __import__('os').system('touch {marker}')",
)
# pieces a name may hold besides NAME_PIECES: what splits a line or a URL-encoded command, what
# is not UTF-8 (a lone surrogate: written raw, its bytes are invalid; escaped, valid JSON that
# no encoder can print), separators torch reads names by
PIECES = (*NAME_PIECES, "::", "%0A", "##[", "\udcff", "\x00", "\t", ".", ",", ";", "@1", "/", "\\", "{}", "%s")
# Python identifiers, so past a check for the grammar: ones the generated code itself uses
SHADOWS = ("torch", "getattr", "fx_pytree", "pytree", "self_1", "_guards_fn", "inf", "nan", "device", "builtins")
SHADOWS += ("__builtins__", "__class__", "forward", "print", "_tensor_constant0", "L__self__", "_0", "a" * 100_000)
# the keys whose strings are names, and the kind of name each is
KINDS = {
    "parameter_name": "parameter",
    "buffer_name": "buffer",
    "tensor_constant_name": "constant",
    "fqn": "module",
    "name": "value",
    "forward_arg_names": "input",
    "target": "op",
    "nn_module_stack": "module stack",
    "torch_fn": "torch_fn",
    "path_name": "weight file",
    "in_spec": "input",
    "out_spec": "output",
    "stack_trace": "source line",
}
_SEPARATORS = re.compile(r"([;,.])")  # between a module stack's entries and fields, a path's parts


class Inner(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.proj(x))


class Named(torch.nn.Module):
    """Every kind of name: a submodule's parameters, a buffer, a tensor constant, a keyword
    input, a named output."""

    def __init__(self) -> None:
        super().__init__()
        self.block = Inner()
        self.register_buffer("scale", torch.ones(4))
        self.const = torch.full((4,), 0.5)

    def forward(self, x, *, y):
        return {"out": self.block(x) * self.scale + self.const + y}


@functools.cache
def named_archive() -> bytes:
    """Named exported and saved with torch.export.save, once per process."""
    torch.manual_seed(0)
    ep = torch.export.export(Named(), (torch.randn(3, 4),), {"y": torch.randn(3, 4)})
    buffer = io.BytesIO()
    torch.export.save(ep, buffer)
    return buffer.getvalue()


def calibration(path: Path) -> Path:
    """Two samples for --quantize int8 (x and y, as the program takes them)."""
    torch.save([(torch.randn(3, 4), torch.randn(3, 4)) for _ in range(2)], path)
    return path


def _strings(value, key: str, found: set) -> None:
    """(kind, name) of every name in a JSON value under `key`, into `found`: a path's parts, a
    module stack's fields, the keys of a spec's dicts."""
    if isinstance(value, dict):
        for k, item in value.items():
            if key in ("config", "tensor_values"):  # keyed by a weight's path or a value's name
                found.add(("parameter" if key == "config" else "value", k))
            _strings(item, k, found)
    elif isinstance(value, list):
        for item in value:
            _strings(item, key, found)
    elif isinstance(value, str) and key in ("in_spec", "out_spec", "context") and value[:1] in ("[", "{"):
        _strings(json.loads(value), "context", found)  # a spec, or its dict's keys, as JSON text
    elif isinstance(value, str) and key == "context" and value != "null":
        found.add(("output" if value == "out" else "input", value))
    elif isinstance(value, str) and key in KINDS:
        parts = [value] if key == "stack_trace" else [p for p in _SEPARATORS.split(value) if p not in ";,."]
        found.update((KINDS[key], part) for part in parts if part)


def names(members) -> list[tuple[str, str]]:
    """Every (kind, name) the archive carries, the folder its members are in among them."""
    found: set = {("archive", members[0][0].split("/")[0])}
    for member, data in members:
        if member.endswith(".json"):
            _strings(json.loads(data), "", found)
    return sorted(found)


def hostile(old: str, rng: random.Random, marker: Path) -> str:
    """A name to stand for `old`: code, pieces around it, an identifier torch's code uses, or
    one of those past 100,000 characters."""
    roll = rng.random()
    if roll < 0.25:
        return rng.choice(CODE).format(marker=marker)
    if roll < 0.4:
        return rng.choice(SHADOWS)
    pieces = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 4)))
    name = rng.choice([old + pieces, pieces + old, pieces, old[:1] + pieces + old[1:]])
    return name * (100_000 // max(len(name), 1) + 1) if rng.random() < 0.08 else name


def _renamed(value, swap):
    """A JSON value with `swap` applied to each string and key; a string that is JSON itself
    (a spec, its context) renamed inside and written back."""
    if isinstance(value, dict):
        return {swap(k): _renamed(v, swap) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v, swap) for v in value]
    if isinstance(value, str) and value[:1] in ("[", "{"):
        try:
            return json.dumps(_renamed(json.loads(value), swap))
        except ValueError:
            pass
    return swap(value) if isinstance(value, str) else value


def _holds(text: str, old: str) -> bool:
    """Whether a string is the name `old` or holds it as a path's part or a module stack's field."""
    return text == old or old in _SEPARATORS.split(text)


def occurrences(members, old: str) -> int:
    """How many strings of the archive's JSON hold the name `old`."""
    found = [0]

    def count(text: str) -> str:
        found[0] += _holds(text, old)
        return text

    for member, data in members:
        if member.endswith(".json"):
            _renamed(json.loads(data), count)
    return found[0]


def rename(members, kind: str, old: str, new: str, only: int | None = None, raw: bool = False) -> bytes:
    """The archive with the name `old` (of `kind`) written `new`: everywhere it occurs (in each
    path, module stack entry and spec, as torch.export.save writes a module given that name), or
    in its `only`th place alone (a document disagreeing with itself), and in the members' names.
    A lone surrogate in `new` is written `raw` (bytes that are not UTF-8) or as JSON's escape."""
    seen = [0]

    def swap(text: str) -> str:
        if _holds(text, old):
            seen[0] += 1
            if only is None or seen[0] == only + 1:
                return new if text == old else "".join(new if p == old else p for p in _SEPARATORS.split(text))
        return text

    changed = []
    for member, data in members:
        folder, _, leaf = member.rpartition("/")
        if kind == "archive" and member.startswith(old + "/"):
            member = _member(new.replace("/", "_") + member[len(old) :])
        elif leaf == old:
            member = _member(f"{folder}/{new}")
        if member.endswith(".json"):
            document = _renamed(json.loads(data), swap)
            data = json.dumps(document, ensure_ascii=not raw).encode("utf-8", "surrogateescape")
        changed.append((member, data))
    return archive_bytes(changed)


def _member(name: str) -> str:
    """A member's name as a zip file can hold it: UTF-8, within 65,535 bytes, no NUL (zipfile
    cuts the name there)."""
    return name.replace("\udcff", "\ufffd").replace("\x00", "_").encode()[:65_000].decode(errors="ignore")


def renamed_archive(members, rng: random.Random, marker: Path) -> tuple[bytes, str, str]:
    """The archive with one of its names (of any kind) hostile, everywhere two times in three,
    else in one place; the kind of name, and which ("name -> new"). A name not UTF-8 is written
    raw half the time."""
    kind, old = rng.choice(names(members))
    new = hostile(old, rng, marker)
    only = rng.randrange(max(occurrences(members, old), 1)) if rng.random() < 0.33 else None
    raw = "\udcff" in new and rng.random() < 0.5
    return rename(members, kind, old, new, only, raw), kind, f"{old[:40]!r} -> {new[:60]!r}{' (raw)' if raw else ''}"


FORMATS = ([], ["--json"], ["--format", "markdown"], ["--format", "github"])
QUANTIZE = ([], ["--quantize", "dynamic-int8"], ["--quantize", "dynamic-int4"], ["--quantize", "int8"])


def compile_commands(folder: Path, modes=QUANTIZE) -> list[list[str]]:
    """compile, without --quantize and with each of its `modes`, as text and as --json: the
    plain compile's program is folder/out.pte, a quantized one's folder/q.pte."""
    made = []
    for quantize in modes:
        out = folder / ("q.pte" if quantize else "out.pte")
        if quantize[-1:] == ["int8"]:
            quantize = [*quantize, "--calibration", str(folder / "calibration.pt")]
        made += [["compile", "-o", str(out), *quantize], ["compile", "-o", str(out), "--json", *quantize]]
    return made


RUN = ["run", "--max-memory", "256MiB"]


def program_commands(folder: Path, golden: Path) -> list[list[str]]:
    """What reads a compiled program, in every output format and with --junit: inspect, check
    against the unrenamed program's golden file, diff it with that golden file, run, and run
    against the renamed archive itself (--reference: torch unlifts it, as --quantize does)."""
    junit = ["--junit", str(folder / "report.xml")]
    made: list[list[str]] = [["inspect"], ["inspect", "--json"]]
    made += [["check", "--golden", str(golden), *shown] for shown in (*FORMATS, junit)]
    made += [["diff", str(golden), *shown] for shown in (*FORMATS, junit)]
    return made + [[*RUN, *shown] for shown in (*FORMATS, junit)] + [[*RUN, "--reference", str(folder / "mutant.pt2")]]


def prepare(folder: Path) -> tuple[list, Path]:
    """The archive's members, and the golden file of its program as compiled (written to `folder`
    with the calibration samples)."""
    import devplan
    from devplan.inspection.check import check_golden

    archive = folder / "named.pt2"
    archive.write_bytes(named_archive())
    calibration(folder / "calibration.pt")
    golden = folder / "named.golden.json"
    check_golden(devplan.compile(archive).data, golden, update=True)
    return archive_members(archive.read_bytes()), golden


def fuzz_names(
    count: int, seed: int, folder: Path, checkpoint=None, keep: Path | None = None, limit_s: float = 60, modes=QUANTIZE
) -> dict:
    """`count` renamed archives through compile_commands (each compiled as text and --json,
    then with one --quantize mode in one format, in turn: a quantizing compile takes seconds),
    and each program that compiled through program_commands: the row of counts (fuzz.py's
    columns, the kinds of name renamed), what escaped (20 at most; each mutant it escaped from written to `keep`), the slowest compile and read.
    `checkpoint(row)` is called every 20 mutants. `modes`: compile's --quantize modes ([] none).
    A compile (--quantize's above all) takes seconds, tens on a busy machine: `limit_s` is its hang,
    a read's damage.LIMIT_S."""
    from testbed.damage import LIMIT_S

    rng, marker = random.Random(f"{seed}:names"), folder / "marker"
    members, golden = prepare(folder)
    path, compiles, reads = folder / "mutant.pt2", compile_commands(folder, modes), program_commands(folder, golden)
    plain = [command for command in compiles if "--quantize" not in command]
    quantized = [command for command in compiles if "--quantize" in command]
    row = {"program": "names", "bytes": len(named_archive()), "mutants": 0, "ok": 0, "refused": 0}
    row |= {"code_runs": 0, "exit_3": 0, "tracebacks": 0, "commands": 0, "hangs": 0, "run_ok": 0, "compiled": 0}
    row |= {"slowest_seconds": 0.0, "slowest_mutant": None, "slowest_command": ["", 0.0], "found": [], "runs": 0}
    row["slowest_read"] = ["", 0.0]  # of the commands reading a compiled program, under damage.LIMIT_S
    row["kinds"] = {}
    for number in range(count):
        data, kind, what = renamed_archive(members, rng, marker)
        path.write_bytes(data)
        row["kinds"][kind] = row["kinds"].get(kind, 0) + 1
        what = f"{kind} {what}"
        escaped = len(row["found"])
        for stale in ("out.pte", "q.pte"):  # read only what this mutant's compiles wrote
            (folder / stale).unlink(missing_ok=True)
        began = time.perf_counter()
        for command in plain + ([quantized[number % len(quantized)]] if quantized else []):
            _counted(row, path, command, limit_s, number, what)
        row["compiled"] += (folder / "out.pte").exists()
        for program in [folder / made for made in ("out.pte", "q.pte") if (folder / made).exists()]:
            ran = [_counted(row, program, command, LIMIT_S, number, what) for command in reads]
            row["run_ok"] += program.name == "out.pte" and ran[reads.index(RUN)] == "ok"
        if marker.exists():
            marker.unlink()
            row["code_runs"] += 1
            if len(row["found"]) < 20:
                row["found"].append({"mutant": number, "name": what, "command": "any", "result": "code ran"})
        if keep is not None and len(row["found"]) > escaped:
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f"names-{number}.pt2").write_bytes(data)
        row["mutants"] += 1
        took = time.perf_counter() - began
        if took > row["slowest_seconds"]:
            row["slowest_seconds"], row["slowest_mutant"] = round(took, 2), number
        if checkpoint is not None and (number % 20 == 19 or number == count - 1):
            checkpoint(row)
    return row


def _counted(row: dict, path: Path, command: list[str], limit_s: float, number: int, what: str) -> str:
    """One command's outcome, counted in `row` (what escaped kept) with its time."""
    start = time.perf_counter()
    result = outcome(path, command, limit_s)
    took = time.perf_counter() - start
    row["runs"] += 1
    slowest = "slowest_command" if command[0] == "compile" else "slowest_read"
    if took > row[slowest][1]:
        row[slowest] = [
            " ".join([command[0], *command[3:]] if command[0] == "compile" else command)[:80],
            round(took, 2),
        ]
    row[column(result)] += 1
    if column(result) not in ("ok", "refused") and len(row["found"]) < 20:
        row["found"].append({"mutant": number, "name": what, "command": " ".join(command), "result": result[:300]})
    return result
