"""What a program needs of the runtime that loads it: the kernel libraries its operators come
from, the backends its delegates call, and ExecuTorch's selective-build operator list
(`selected_operators.yaml`, as ExecuTorch's gen_oplist writes it for the same file), so that a
program needing a kernel a runtime build lacks is found in CI, not on the device."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

from devplan.documents import KernelLibrary
from devplan.dtypes import code_of
from devplan.pte.decode import MethodView

# an operator's namespace -> the library that registers its kernels with ExecuTorch's runtime,
# and how a runtime gets it (C++ link target; the Python module whose import registers it)
LIBRARIES: dict[str, tuple[str, str]] = {
    "aten": ("portable", "portable_ops_lib (or optimized_ops_lib, which falls back to it)"),
    "dim_order_ops": ("portable", "portable_ops_lib"),
    "et_copy": ("portable", "portable_ops_lib"),
    "executorch_prim": ("prim", "the runtime itself (its prim ops need no kernel library)"),
    "quantized_decomposed": ("quantized", "quantized_ops_lib; in Python, import executorch.kernels.quantized"),
    "llama": ("llm", "custom_ops (ExecuTorch's LLM custom ops); in Python, import executorch.extension.llm.custom_ops"),
}
# the library order a listing follows: the usual first, custom ones by name after
_ORDER = ("prim", "portable", "quantized", "llm")


def library_of(operator: str) -> str:
    """The kernel library an operator's kernels come from: one of LIBRARIES' names, or for
    any other namespace `custom:NAMESPACE` (a library the user links themselves)."""
    namespace = operator.split("::", 1)[0]
    return LIBRARIES[namespace][0] if namespace in LIBRARIES else f"custom:{namespace}"


def how_to_get(library: str) -> str:
    """How a runtime build gets `library`."""
    for name, how in LIBRARIES.values():
        if name == library:
            return how
    return f"the library that registers {library.removeprefix('custom:')}:: kernels, linked into the runtime"


def kernel_libraries(view: MethodView) -> list[KernelLibrary]:
    """The libraries the method's kernel calls need, each with its operators (sorted)."""
    return libraries(view.operator(row.op) for row in view.instructions if row.kind == "kernel" and row.op is not None)


def libraries(operators: Iterable[str]) -> list[KernelLibrary]:
    """The libraries that register these operators' kernels, each with the operators it serves."""
    needed: dict[str, set[str]] = defaultdict(set)
    for name in operators:
        needed[library_of(name)].add(name)
    order = sorted(needed, key=lambda name: (_ORDER.index(name) if name in _ORDER else len(_ORDER), name))
    return [{"library": name, "operators": sorted(needed[name])} for name in order]


def needs_text(kernels: list[KernelLibrary], backends: list[str], how: bool = False) -> str:
    """What a runtime must have to load a method: its kernel libraries (the portable one
    counted; every other one's operators named, as those are what a build may lack; with `how`,
    how a runtime gets each) and its backends."""
    parts = []
    for row in kernels:
        if row["library"] in ("portable", "prim"):
            parts.append(
                f"{row['library']} kernels ({len(row['operators'])} operator{'s' * (len(row['operators']) != 1)})"
            )
        else:
            got = f" ({how_to_get(row['library'])})" if how else ""
            parts.append(f"{row['library']} kernels{got}: {', '.join(row['operators'])}")
    return "; ".join(parts + [f"backend {backend}" for backend in backends])


def backends(view: MethodView) -> list[str]:
    """The backends the method's delegates call, by id, sorted."""
    return sorted({delegate.id for delegate in view.delegates})


def operator_names(view: MethodView) -> list[str]:
    """Every operator the method's table names, `name.overload` (as ExecuTorch's tools name them)."""
    return [view.operator(index) for index in range(len(view.operators))]


def kernel_keys(view: MethodView) -> dict[str, set[str]]:
    """Per operator, the kernel variants its calls need, in ExecuTorch's selective-build key
    (`v1/` then each tensor argument's `dtype;dim order`, joined by `|`): a tensor list counts as
    its first tensor, an optional tensor list as its first present one, and other arguments
    not at all."""
    keys: dict[str, set[str]] = defaultdict(set)
    for row in view.instructions:
        if row.kind != "kernel" or row.op is None:
            continue
        tensors = [tensor for arg in row.args if (tensor := _key_tensor(view, arg)) is not None]
        keys[view.operator(row.op)].add("v1/" + "|".join(tensors) if tensors else "v1")
    return keys


def _key_tensor(view: MethodView, arg: int) -> str | None:
    kind = view.kind(arg)
    if kind == "tensor":
        tensor = view.tensors[arg]
    elif kind in ("tensor_list", "optional_tensor_list"):
        present = [item for item in view.items(arg) if view.kind(item) == "tensor"]
        if not present:
            return None
        tensor = view.tensors[present[0]]
    else:
        return None
    order = tensor.dim_order if tensor.dim_order is not None else tuple(range(len(tensor.shape)))
    return f"{code_of(tensor.dtype)};{','.join(map(str, order))}"


def selected_operators(views: Iterable[MethodView], source: str) -> dict[str, Any]:
    """ExecuTorch's selective-build operator list for a program's methods, as its gen_oplist
    writes it for the file `source` (named in each operator's debug_info)."""
    names: set[str] = set()
    keys: dict[str, set[str]] = defaultdict(set)
    for view in views:
        names.update(operator_names(view))
        for name, variants in kernel_keys(view).items():
            keys[name] |= variants
    return {
        "operators": {
            name: {
                "debug_info": [source],
                "include_all_overloads": False,
                "is_root_operator": True,
                "is_used_for_training": True,
            }
            for name in sorted(names)
        },
        "custom_classes": [],
        "build_features": [],
        "include_all_non_op_selectives": False,
        "include_all_operators": False,
        "kernel_metadata": {},
        "et_kernel_metadata": {name: sorted(variants) for name, variants in sorted(keys.items())},
    }


def oplist_yaml(views: Iterable[MethodView], source: str) -> str:
    """selected_operators() as the YAML ExecuTorch's build reads."""
    import yaml

    text: str = yaml.safe_dump(selected_operators(views, source), default_flow_style=False)
    return text
