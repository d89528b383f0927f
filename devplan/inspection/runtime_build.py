"""`devplan check --runtime BUILD.yaml`: a program against the runtime build it will ship on,
given as ExecuTorch's selective-build operator list (selected_operators.yaml, as its gen_oplist
writes it, or one merged from several models): every operator, kernel variant and backend the
program needs that the build lacks."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Literal

from devplan.documents import CheckedRuntime, MissingKernel
from devplan.errors import DevplanError
from devplan.inspection.kernels import backends, how_to_get, kernel_keys, library_of, operator_names
from devplan.pte.decode import MethodView

if TYPE_CHECKING:
    from devplan.pte import PteFile

BUILD_LIST_LIMIT = 64 << 20  # bytes of a build list devplan reads (ExecuTorch's full list is about 1 MiB)
ALL_VARIANTS = "default"  # a kernel key that stands for every dtype and dim order


@dataclass(frozen=True)
class BuildList:
    """What a runtime build has: its operators (`all_operators`: every one, a build that is not
    selective), the names whose every overload is in, each operator's kernel variants (absent,
    or holding ALL_VARIANTS: every one) and the backends it links (`build_features`, where a
    build list names them)."""

    name: str
    all_operators: bool
    operators: frozenset[str]
    all_overloads: frozenset[str]
    variants: dict[str, frozenset[str]]
    backends: frozenset[str]

    def has_operator(self, name: str) -> bool:
        return self.all_operators or name in self.operators or name.split(".", 1)[0] in self.all_overloads

    def has_variant(self, name: str, key: str) -> bool:
        variants = self.variants.get(name)
        return self.all_operators or variants is None or ALL_VARIANTS in variants or key in variants


@dataclass(frozen=True)
class Missing:
    """One thing a method needs that the build lacks."""

    method: str
    kind: Literal["operator", "kernel", "backend"]
    name: str  # the operator, or the backend id
    detail: str  # what a person does about it

    def document(self) -> MissingKernel:
        return {"method": self.method, "kind": self.kind, "name": self.name, "detail": self.detail}

    def text(self) -> str:
        return f"{self.method} needs {self.kind} {self.name}: {self.detail}"


def read_build_list(path: str | os.PathLike[str]) -> BuildList:
    """A selected_operators.yaml, read within bounds and without running anything in it."""
    import yaml

    from devplan.files import read_input

    name = os.fspath(path)
    hint = "pass a selected_operators.yaml as ExecuTorch's gen_oplist writes it (devplan inspect --oplist)"
    text = read_input(path, limit=BUILD_LIST_LIMIT, hint=hint, name=f"--runtime {name}")
    try:
        read = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise DevplanError(f"--runtime {name}: not YAML ({str(error).splitlines()[0]}); {hint}") from None
    if not isinstance(read, dict) or not isinstance(read.get("operators", {}), dict):
        raise DevplanError(f"--runtime {name}: no `operators` table; {hint}")
    operators = read.get("operators") or {}
    variants = read.get("et_kernel_metadata") or {}
    features = read.get("build_features") or []
    # names and kernel keys are strings; anything else (a nested list an alias repeats, which
    # would render exponentially) is no build list
    if not isinstance(variants, dict) or not all(
        isinstance(op, str) and isinstance(keys, list) and all(isinstance(key, str) for key in keys)
        for op, keys in variants.items()
    ):
        raise DevplanError(f"--runtime {name}: `et_kernel_metadata` is not a table of lists of strings; {hint}")
    if not all(isinstance(op, str) for op in operators):
        raise DevplanError(f"--runtime {name}: an operator's name is not a string; {hint}")
    if not isinstance(features, list) or not all(isinstance(feature, str) for feature in features):
        raise DevplanError(f"--runtime {name}: `build_features` is not a list of names; {hint}")
    return BuildList(
        name=name,
        all_operators=read.get("include_all_operators") is True,
        operators=frozenset(operators),
        all_overloads=frozenset(
            op.split(".", 1)[0]
            for op, facts in operators.items()
            if isinstance(facts, dict) and facts.get("include_all_overloads") is True
        ),
        variants={op: frozenset(keys) for op, keys in variants.items()},
        backends=frozenset(features),
    )


def missing(views: Iterable[MethodView], build: BuildList) -> list[Missing]:
    """Every operator, kernel variant and backend the methods need that `build` lacks, by method;
    prim ops (the runtime's own) need nothing, and backends are checked where the build list
    names the ones it links (`build_features`)."""
    found: list[Missing] = []
    for view in views:
        variants = kernel_keys(view)
        for name in dict.fromkeys(operator_names(view)):  # the table's order, each once
            if library_of(name) == "prim":
                continue
            if not build.has_operator(name):
                library = library_of(name)
                found.append(
                    Missing(
                        view.name,
                        "operator",
                        name,
                        f"the build selects no kernel for it: add it to the build's list (devplan inspect --oplist) "
                        f"and rebuild, with the {library} kernels ({how_to_get(library)})",
                    )
                )
                continue
            for key in sorted(variants.get(name, ())):
                if not build.has_variant(name, key):
                    have = ", ".join(sorted(build.variants[name])) or "none"
                    found.append(
                        Missing(
                            view.name,
                            "kernel",
                            name,
                            f"variant {key} (dtype;dim order per tensor), the build has {have}",
                        )
                    )
        if build.backends:  # a list that names no backends (gen_oplist's) cannot say which are linked
            found += [
                Missing(view.name, "backend", backend, "not among the build list's build_features; link the backend")
                for backend in backends(view)
                if backend not in build.backends
            ]
    return found


def runtime_document(build: BuildList, found: list[Missing]) -> CheckedRuntime:
    """check --json's `runtime` (docs/check-json.md)."""
    return {
        "file": {"name": os.path.basename(build.name)},
        "ok": not found,
        "backends_checked": bool(build.backends),
        "missing": [m.document() for m in found],
    }


def check_runtime(
    pte: PteFile | str | os.PathLike[str] | bytes, build: str | os.PathLike[str], method: str | None = None
) -> CheckedRuntime:
    """What the runtime build whose list is `build` lacks of a program's methods (or of
    `method`): a read PteFile, a path or bytes."""
    from devplan.pte import PteFile, read_pte
    from devplan.pte.decode import methods

    read = pte if isinstance(pte, PteFile) else read_pte(pte)
    views = [view for view in methods(read) if method is None or view.name == method]
    listed = read_build_list(build)
    return runtime_document(listed, missing(views, listed))
