"""devplan's modules import each other in one order, from the IR and options at the bottom to
the CLI at the top: no module imports, however late (inside a function, under TYPE_CHECKING),
one that imports it back. A lazy import is there to keep a heavy module (torch, executorch)
off a path that does not need it, never to dodge a cycle."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import devplan

PACKAGE = Path(devplan.__file__).parent


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ("devplan", *path.relative_to(PACKAGE).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imports(modules: dict[str, Path], parents: bool = False) -> dict[str, set[str]]:
    """Each module's devplan imports, wherever in the file they stand. `from a import b` is an
    import of module a.b when there is one, of a otherwise. With `parents`, an import of a.b.c
    imports the packages a.b and a too, whose __init__s Python runs first: a loop through a
    package's __init__ (options -> passes/__init__ -> options) is a cycle then too."""
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names if alias.name in modules}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: up from this module's package
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                for alias in node.names:
                    if f"{base}.{alias.name}" in modules:
                        found.add(f"{base}.{alias.name}")
                    elif base in modules:
                        found.add(base)
        if parents:  # the packages above what it imports, but its own (already running when it runs)
            own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
            found |= {".".join(m.split(".")[:i]) for m in found for i in range(2, m.count(".") + 1)} & set(
                modules
            ) - own
        graph[name] = found - {name}
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules in import order, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 finished
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for imported in sorted(graph[module]):
            if state.get(imported) == 1:
                return path[path.index(imported) :] + [imported]
            if imported not in state and (found := visit(imported)):
                return found
        state[module] = 2
        path.pop()
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return None


def test_no_import_cycle_among_devplan_modules():
    found = cycle(imports(_modules()))
    assert found is None, "import cycle: " + " -> ".join(found)


def test_no_import_cycle_through_a_packages_init():
    found = cycle(imports(_modules(), parents=True))
    assert found is None, "import cycle through a package's __init__: " + " -> ".join(found)


def test_the_walk_sees_late_imports_and_names_a_cycle(tmp_path):
    (tmp_path / "a.py").write_text("def f():\n    from devplan.b import g\n")
    (tmp_path / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from devplan import a\n")
    graph = imports({"devplan.a": tmp_path / "a.py", "devplan.b": tmp_path / "b.py"})
    assert graph == {"devplan.a": {"devplan.b"}, "devplan.b": {"devplan.a"}}
    assert cycle(graph) == ["devplan.a", "devplan.b", "devplan.a"]


REPO = PACKAGE.parent


def _top_imports(path: Path) -> set[str]:
    """The top-level packages a file imports, wherever in the file the import stands."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_tests_and_benchmarks_share_testbed_and_import_nothing_of_each_other():
    crossing = []
    for folder, other in (
        ("tests", "benchmarks"),
        ("benchmarks", "tests"),
        ("testbed", "tests"),
        ("testbed", "benchmarks"),
    ):
        for path in sorted((REPO / folder).rglob("*.py")):
            name = path.relative_to(REPO).as_posix()
            # the benchmarks' own tests import the scripts they test
            if name == "tests/test_benchmarks.py":
                continue
            if other in _top_imports(path):
                crossing.append(f"{name} imports {other}")
    assert not crossing, "; ".join(crossing)


def test_the_compilers_checks_and_the_runtime_name_the_same_ops_apart():
    """wellformed.py reads op names and schemas from ops.py, the runtime from its own kernel
    table (the independent oracle): the two agree on every name both know."""
    from devplan.ops import DIM_ORDER_OPS, NUMBER_NAMES, REGISTERED, op_schema
    from devplan.runtime.kernels import DIM_ORDER, NUMBERS, schema_op

    assert set(DIM_ORDER) == DIM_ORDER_OPS and set(NUMBERS) == NUMBER_NAMES
    for name in sorted(REGISTERED):
        runtime = schema_op(name)
        assert (op_schema(name) is None) == (runtime is None), name
        if runtime is not None:
            assert op_schema(name) == runtime._schema, name
    compiler_side = imports(_modules())["devplan.wellformed"]
    assert not [m for m in compiler_side if m.startswith("devplan.runtime")], compiler_side


def test_contributings_map_names_every_room():
    """CONTRIBUTING's layout names each of devplan's folders and top-level modules, and each
    test folder; every test folder is a package, as the map says (pytest then imports a test
    as tests.SUBJECT.MODULE, whatever other folder holds a module of the same name)."""
    text = (PACKAGE.parent / "CONTRIBUTING.md").read_text()
    layout = text[text.index("## Layout") : text.index("## How data flows")]
    rooms = [
        p.name + "/"
        for p in PACKAGE.iterdir()
        if p.is_dir() and p.name not in ("__pycache__", "fb", "ptd_fb", "xnn_fb", "etdump_fb")
    ]
    rooms += [p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    tests = PACKAGE.parent / "tests"
    folders = [p for p in tests.iterdir() if p.is_dir() and p.name != "__pycache__"]
    rooms += [p.name + "/" for p in folders]
    assert [room for room in rooms if room not in layout] == []
    packages = [tests, *(p for p in folders if any(p.glob("*.py")))]
    assert [p.name for p in packages if not (p / "__init__.py").exists()] == []


def test_options_import_no_torch_nor_numpy():
    """Issue 38's leaf: parsing a command's options (backends, budgets, delegates, the planner's
    name) loads no torch, which alone takes seconds to import, nor numpy (the planners' code);
    devplan.backend imports torch where a node is read."""
    import subprocess
    import sys

    probe = (
        "import sys, devplan.options; print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy')))"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]", run.stdout[:300]


def test_no_branch_on_a_backend_id_outside_the_payload_registry():
    """Issue 56.4: what devplan knows of a backend's payloads is pte/payloads.py's registry; no
    other module compares a delegate's backend id (a second backend is a module, not branches)."""
    compared = re.compile(
        r"(==|!=)\s*[\w.]*(BACKEND_ID|DEVPLAN\w*)\b|\b(BACKEND_ID|DEVPLAN\w*)\s*(==|!=)|\.id\s*(==|!=)"
    )
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{number}"
        for name, path in _modules().items()
        if name != "devplan.pte.payloads" and not any(part.endswith("_fb") or part == "fb" for part in path.parts)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if compared.search(line.split("#")[0])
    ]
    assert found == []


def test_the_registry_routes_each_backends_payloads():
    from devplan.pte.payloads import DEVPLAN, payload_format, runs_here
    from devplan.pte.xnnpack import BACKEND_ID as XNNPACK

    assert runs_here(DEVPLAN) and not runs_here(XNNPACK) and not runs_here("VulkanBackend")
    assert payload_format(XNNPACK).document is not None and payload_format("VulkanBackend").named_data(b"x") == ()


def test_the_compile_is_a_package_of_small_modules():
    rooms = sorted(p.name for p in (PACKAGE / "compiler").glob("*.py"))
    assert rooms == ["__init__.py", "budgets.py", "driver.py", "fold_choice.py", "lower.py", "result.py", "stages.py"]
    assert not (PACKAGE / "compiler.py").exists()


def test_no_hand_written_module_is_over_450_lines():
    """Issue 56.5: small modules with one responsibility; flatc's bindings (*_fb/, fb/) are generated."""
    long = [
        f"{path.relative_to(PACKAGE.parent)} ({count})"
        for path in PACKAGE.rglob("*.py")
        if not any(part == "fb" or part.endswith("_fb") for part in path.parts)
        and (count := len(path.read_text().splitlines())) > 450
    ]
    assert long == []


LEVELS = ("export", "graph", "method")  # devplan/passes/ by what a pass takes, in the order they run


def _torch_names(path: Path) -> set[str]:
    """The torch modules a file imports, and `torch.export`/`ExportedProgram` wherever it names them."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "torch"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            found |= {node.module or ""} | {alias.name for alias in node.names if alias.name == "ExportedProgram"}
        elif isinstance(node, ast.Attribute) and node.attr == "export" and ast.unparse(node.value) == "torch":
            found.add("torch.export")
        elif (node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)) == "ExportedProgram":
            found.add("ExportedProgram")
    return found


def test_each_pass_works_at_its_level_and_imports_no_earlier_one():
    """Issue 56.5: passes/export/ works on torch's ExportedProgram, passes/graph/ on a Lowered's
    fx graph (never an ExportedProgram), passes/method/ on devplan's Method (no torch at all,
    no Lowered); a pass may use one of its own level or a later one, never an earlier one."""
    modules, graph = _modules(), imports(_modules())
    rooms = sorted(p.name for p in (PACKAGE / "passes").iterdir() if p.is_dir() and p.name != "__pycache__")
    loose = sorted(p.name for p in (PACKAGE / "passes").glob("*.py") if p.name != "__init__.py")
    assert (rooms, loose) == (sorted(LEVELS), [])  # every pass in the room of its level
    wrong = []
    for name, path in sorted(modules.items()):
        level = name.split(".")[2] if name.startswith("devplan.passes.") else None
        if level not in LEVELS:
            continue
        earlier = LEVELS[: LEVELS.index(level)]
        wrong += [f"{name} imports {m}" for m in sorted(graph[name]) if m.split(".")[2:3] in [[e] for e in earlier]]
        torch = _torch_names(path)
        if level == "graph":
            wrong += [f"{name} names {t}" for t in sorted(torch & {"torch.export", "ExportedProgram"})]
        if level == "method":
            wrong += [f"{name} imports {t}" for t in sorted(torch)]
            wrong += [f"{name} imports {m}" for m in sorted(graph[name]) if m == "devplan.ir.lowered"]
    assert wrong == []


def test_the_level_rule_sees_a_method_pass_reading_a_graph(tmp_path):
    (tmp_path / "bad.py").write_text("import torch.fx\ndef f(ep: torch.export.ExportedProgram) -> None: ...\n")
    assert _torch_names(tmp_path / "bad.py") == {"torch.fx", "torch.export", "ExportedProgram"}


NUMBER_WORDS = {"size_text", "exact_size_text", "counted"}  # devplan.units: a number as a line shows it


def test_inspection_makes_every_line_and_cli_only_writes_it():
    """Issue 56.5, one home for text views: inspection/ makes each line a command prints from its
    document or result (render.py, difftext.py, reports.py, reports_ci.py), below the commands;
    cli/ parses, calls, chooses the format and writes, so it never puts a number into words.
    progress.py's live bar is the compile's progress, not a document's line."""
    graph, wrong = imports(_modules()), []
    for name, path in sorted(_modules().items()):
        if name.startswith("devplan.inspection"):
            wrong += [f"{name} imports {m}" for m in sorted(graph[name]) if m.startswith("devplan.cli")]
        if name.startswith("devplan.cli.") and name != "devplan.cli.progress":
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.module == "devplan.units":
                    named = {alias.name for alias in node.names} & NUMBER_WORDS
                    wrong += [f"{name} imports devplan.units.{n}" for n in sorted(named)]
                elif isinstance(node, ast.ImportFrom) and node.module == "rich.table":
                    wrong.append(f"{name} imports rich.table")
    assert wrong == []
