"""An archive's names never reach the Python torch generates and runs (issue 52, finding 1).
torch writes a loaded program's names unescaped into source it execs (GraphModule.recompile
as it loads, ep.module() as --quantize and ExecuTorch's lowering unlift), so a weight named
`w"+str(os.system(...))+"`, which torch.export.save keeps, ran a shell command under
--quantize. The gate holds every kind of name to the grammar torch writes safely and refuses
any other in one line naming the field; every schema field that holds text is either so held
or is text torch never writes as source."""

from __future__ import annotations

import dataclasses
import io
import json
import typing
import zipfile
from pathlib import Path

import pytest
import torch
from torch import nn

from devplan.errors import DevplanError
from devplan.gate import allowlist
from devplan.gate.archive import check_archive
from testbed.cli import assert_one_line_error, devplan as run_devplan
from tests.tiers import tiered


class _Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x)


class _Named(nn.Module):
    """A name of every kind: a parameter of a submodule, a buffer it writes, a constant, a
    positional and a keyword input, an output."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = _Inner()
        self.register_buffer("count", torch.zeros(4))
        self.scale = torch.ones(4)  # a constant: no parameter, no buffer

    def forward(self, x, *, bias):
        self.count.add_(1)
        return self.inner(x) * self.scale + bias + self.count


@pytest.fixture(scope="module")
def named() -> bytes:
    buffer = io.BytesIO()
    ep = torch.export.export(_Named(), (torch.randn(2, 4),), {"bias": torch.randn(2, 4)}, strict=False)
    torch.export.save(ep.run_decompositions({}), buffer)  # functional: the buffer's write is an output
    return buffer.getvalue()


def _specs(doc, kind):
    return [spec[kind] for spec in doc["graph_module"]["signature"]["input_specs"] if kind in spec]


def _outputs(doc, kind):
    return [spec[kind] for spec in doc["graph_module"]["signature"]["output_specs"] if kind in spec]


def _root(doc):
    return doc["graph_module"]["module_call_graph"][0]["signature"]


def _first_node(doc):
    return doc["graph_module"]["graph"]["nodes"][0]


def _set(holder, key, name):
    holder[key] = name


def _rename_key(table: dict, name):
    table[name] = table.pop(next(iter(table)))


def _keyword_input(doc, name):
    root = _root(doc)
    _, spec = json.loads(root["in_spec"])
    spec["children_spec"][1]["context"] = json.dumps([name])
    root["in_spec"] = json.dumps([1, spec])


def _module_stack(doc, name):
    node = next(n for n in doc["graph_module"]["graph"]["nodes"] if "inner.lin" in n["metadata"]["nn_module_stack"])
    node["metadata"]["nn_module_stack"] = node["metadata"]["nn_module_stack"].replace(",inner.lin,", f",{name},")


# each kind of name the archive carries: (member, edit(document, name)) putting `name` there
KINDS = {
    "parameter": ("model.json", lambda doc, name: _set(_specs(doc, "parameter")[0], "parameter_name", name)),
    "buffer": ("model.json", lambda doc, name: _set(_specs(doc, "buffer")[0], "buffer_name", name)),
    "constant": ("model.json", lambda doc, name: _set(_specs(doc, "tensor_constant")[0], "tensor_constant_name", name)),
    "mutated-buffer": ("model.json", lambda doc, name: _set(_outputs(doc, "buffer_mutation")[0], "buffer_name", name)),
    "weight-config": ("weights_config.json", lambda doc, name: _rename_key(doc["config"], name)),
    "constant-config": ("constants_config.json", lambda doc, name: _rename_key(doc["config"], name)),
    "submodule": ("model.json", lambda doc, name: _set(doc["graph_module"]["module_call_graph"][1], "fqn", name)),
    "module-stack": ("model.json", _module_stack),
    "input": ("model.json", lambda doc, name: _set(_specs(doc, "user_input")[0]["arg"]["as_tensor"], "name", name)),
    "output": ("model.json", lambda doc, name: _set(_outputs(doc, "user_output")[0]["arg"]["as_tensor"], "name", name)),
    "node-result": ("model.json", lambda doc, name: _set(_first_node(doc)["outputs"][0]["as_tensor"], "name", name)),
    "node": ("model.json", lambda doc, name: _set(_first_node(doc), "name", name)),
    "op-keyword": ("model.json", lambda doc, name: _set(_first_node(doc)["inputs"][0], "name", name)),
    "tensor-value": ("model.json", lambda doc, name: _rename_key(doc["graph_module"]["graph"]["tensor_values"], name)),
    "forward-argument": ("model.json", lambda doc, name: _set(_root(doc)["forward_arg_names"], 0, name)),
    "keyword-input": ("model.json", _keyword_input),
}
HOSTILE = {
    "quote": 'w"+str(getattr(__import__("os"),"system")("touch MARKER"))+"',
    "newline": "a\nb",
    "backslash": "a\\b",
    "namespace": "a::b",
    "dash": "a-b",
    "bracket": "self.__dict__[0]",
}


def _edited(source: bytes, member: str, edit) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(source)) as archive, zipfile.ZipFile(out, "w") as target:
        for info in archive.infolist():
            data = archive.read(info)
            if info.filename.endswith(member):
                document = json.loads(data)
                edit(document)
                data = json.dumps(document).encode()
            target.writestr(info, data)
    return out.getvalue()


def test_the_plain_archive_with_every_kind_of_name_passes(named, tmp_path):
    (tmp_path / "named.pt2").write_bytes(named)
    check_archive(tmp_path / "named.pt2")


CASES = [(kind, hostile) for kind in KINDS for hostile in HOSTILE]


# the fast tier: every kind with the quote, every hostile text as a parameter's name
@pytest.mark.parametrize(
    "kind,hostile",
    tiered(CASES, [(kind, "quote") for kind in KINDS] + [("parameter", hostile) for hostile in HOSTILE]),
    ids=[f"{kind}-{hostile}" for kind, hostile in CASES],
)
def test_a_name_torch_would_write_as_code_is_refused_naming_the_field(named, tmp_path, kind, hostile):
    member, edit = KINDS[kind]
    path = tmp_path / "named.pt2"
    path.write_bytes(_edited(named, member, lambda doc: edit(doc, HOSTILE[hostile])))
    with pytest.raises(DevplanError) as refused:
        check_archive(path)
    message = str(refused.value)
    assert "\n" not in message and "torch writes names into Python code it runs" in message, message
    assert allowlist.shown(HOSTILE[hostile])[:20] in message.replace("\\\\", "\\"), message


# text fields torch never writes into the source it generates: literals it writes with repr(),
# names it looks up in its own tables, and what devplan checks or drops on its own terms
NEVER_SOURCE = {
    ("Argument", "as_string"),  # repr()
    ("Argument", "as_strings"),  # repr()
    ("Argument", "as_string_to_argument"),  # repr()
    ("ConstantValue", "as_string"),  # a value, never written
    ("Argument", "as_operator"),  # looked up among torch's operators
    ("CustomObjArgument", "class_fqn"),  # looked up among torch.classes
    ("Device", "type"),  # parsed by torch.device
    ("ExportedProgram", "opset_version"),  # numbers by namespace
    ("ExportedProgram", "verifiers"),  # looked up among torch's verifiers
    ("ExportedProgram", "torch_version"),
    ("ExportedProgram", "guards_code"),  # dropped as devplan loads (devplan.gate.load._without_guards)
    ("GraphModule", "treespec_namedtuple_fields"),  # its NamedTupleDef's fields have a rule
    ("ModuleCallSignature", "out_spec"),  # read by pytree as the program returns, never written as source
    ("PayloadMeta", "path_name"),  # a member's name, checked against the archive's members
    ("AOTInductorModelPickleData", "library_basename"),  # not in an ExportedProgram
    ("AOTInductorModelPickleData", "input_names"),
    ("AOTInductorModelPickleData", "output_names"),
    ("ExternKernelNode", "name"),
}


def _text_fields():
    from torch._export.serde import schema

    for cls in vars(schema).values():
        if isinstance(cls, type) and dataclasses.is_dataclass(cls):
            hints = typing.get_type_hints(cls, globalns=vars(schema))
            for field, tp in hints.items():
                if "str" in repr(tp) or tp is str:
                    yield cls.__name__, field


def test_every_text_field_of_torchs_schema_is_held_to_a_grammar_or_never_source():
    """A field torch adds to its schema that holds text fails here until it is given a rule."""
    unchecked = sorted(set(_text_fields()) - set(allowlist._RULES) - NEVER_SOURCE)
    assert not unchecked, unchecked


def _saved_with(tmp_path: Path, module: nn.Module) -> Path:
    path = tmp_path / "hostile.pt2"
    torch.export.save(torch.export.export(module, (torch.randn(2, 4),), strict=False), path)
    return path


class _InjectedWeight(nn.Module):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.register_parameter(name, nn.Parameter(torch.randn(4, 4)))

    def forward(self, x):
        return nn.functional.linear(x, getattr(self, self.name))


class _NewlineSubmodule(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.add_module("a\nb", nn.Linear(4, 4))

    def forward(self, x):
        return getattr(self, "a\nb")(x)


@pytest.mark.parametrize("case", ["injected-weight", "newline-submodule"])
def test_an_archive_saved_by_torch_with_a_hostile_name_is_refused_under_quantize_without_running_it(tmp_path, case):
    """The issue's archives, saved by plain torch.export.save: --quantize ran os.system from
    the weight's name, then exited 3; the newline ended in a SyntaxError (exit 3)."""
    marker = tmp_path / "MARKER"
    name = f'w"+str(getattr(__import__("os"),"system")("touch {marker}"))+"'
    archive = _saved_with(tmp_path, _InjectedWeight(name) if case == "injected-weight" else _NewlineSubmodule())
    run = run_devplan("compile", archive, "--quantize", "dynamic-int8", "-o", tmp_path / "out.pte")
    assert not marker.exists()
    assert_one_line_error(run, str(archive), "torch writes names into Python code it runs")
    assert not (tmp_path / "out.pte").exists()


class _GraphSubmodule(nn.Module):
    """A submodule named as an attribute every GraphModule has: torch.export saves it as it is."""

    def __init__(self) -> None:
        super().__init__()
        self.graph = nn.Linear(4, 4)

    def forward(self, x):
        return self.graph(x)


class _PytreeInput(nn.Module):
    """An input named as a global torch's generated code reads (it flattens the inputs with it)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, pytree):
        return self.lin(x) + pytree


def _crafted_forward_buffer(tmp_path: Path) -> Path:
    """testbed.names' archive with its buffer renamed `forward` everywhere (torch's register_buffer
    refuses the name, so only a crafted archive holds it)."""
    from testbed.damage import archive_members
    from testbed.names import named_archive, rename

    path = tmp_path / "model.pt2"
    path.write_bytes(rename(archive_members(named_archive()), "buffer", "scale", "forward"))
    return path


@pytest.mark.parametrize("case", ["graph-submodule", "pytree-input", "forward-buffer"])
def test_a_name_unlifting_cannot_build_is_refused_where_devplan_unlifts(tmp_path, case):
    """Names the gate lets pass, as compiling never unlifts, that torch's ep.module() cannot build
    a module of (the attribute is taken) or run (the input shadows `pytree` in the generated
    forward): --quantize and run --reference both unlift, and exited 3; now each refuses in one
    line naming the name, and the plain compile still works."""
    import devplan

    if case == "forward-buffer":
        archive, name = _crafted_forward_buffer(tmp_path), "'forward'"
    else:
        module = _GraphSubmodule() if case == "graph-submodule" else _PytreeInput()
        archive, name = tmp_path / "model.pt2", "'graph.weight'" if case == "graph-submodule" else "'pytree'"
        args = (torch.randn(2, 4),) * (1 if case == "graph-submodule" else 2)
        torch.export.save(torch.export.export(module, args, strict=False), archive)
    quantized = run_devplan("compile", archive, "--quantize", "dynamic-int8", "-o", tmp_path / "out.pte")
    assert_one_line_error(quantized, str(archive), "--quantize dynamic-int8: torch cannot", name)
    program = tmp_path / "model.pte"
    program.write_bytes(devplan.compile(archive).data)
    referenced = run_devplan("run", program, "--reference", archive)
    assert_one_line_error(referenced, f"--reference {archive}: torch cannot", name)


@pytest.mark.parametrize("parts", [256, 16_668])
def test_a_path_deeper_than_torch_can_nest_is_refused_where_devplan_unlifts(tmp_path, parts):
    """Found by the names fuzz (seed 67): a weight renamed to a 100,000-character path of 16,668
    parts. ep.module() nests a module a part and compiles `self.c.c...`, and --quantize and run
    --reference exited 3 (RecursionError); past 256 parts both refuse in one line, and the plain
    compile, which never unlifts, still works. 256 parts still quantize."""
    import devplan
    from testbed.damage import archive_members
    from testbed.names import named_archive, rename

    archive = tmp_path / "model.pt2"
    archive.write_bytes(rename(archive_members(named_archive()), "parameter", "const", ".".join(["c"] * parts)))
    program = tmp_path / "model.pte"
    program.write_bytes(devplan.compile(archive).data)
    quantized = run_devplan("compile", archive, "--quantize", "dynamic-int8", "-o", tmp_path / "out.pte")
    referenced = run_devplan("run", program, "--reference", archive)
    if parts <= 256:
        assert quantized.returncode == referenced.returncode == 0, quantized.stderr + referenced.stderr
        return
    assert_one_line_error(quantized, str(archive), "--quantize dynamic-int8: torch cannot", "16,668 modules deep")
    assert_one_line_error(referenced, f"--reference {archive}: torch cannot", "16,668 modules deep")


@pytest.mark.parametrize(
    "kind,old,new,says",
    [
        ("source line", None, "\udcff", "is not a string of Unicode text"),  # serialize's UnicodeEncodeError
        ("torch_fn", "mul_1", "m;ul_1", "joined by one ';'"),  # the quantizer's unpacking ValueError
    ],
)
def test_names_the_names_fuzz_found_are_refused_in_one_line(tmp_path, kind, old, new, says):
    """Archives from benchmarks/fuzz.py --only names that exited 3: a source line holding a lone
    surrogate (the plain compile, writing it into the program), a torch_fn with a second ';'
    (--quantize int8, the quantizer unpacking it); each is now refused in one line."""
    from testbed.damage import archive_members, outcome
    from testbed.names import named_archive, names, rename

    members = archive_members(named_archive())
    old = old or next(name for k, name in names(members) if k == kind)
    path = tmp_path / "model.pt2"
    path.write_bytes(rename(members, kind, old, old + new if kind == "source line" else new, raw=False))
    compile_ = ["compile", "-o", str(tmp_path / "out.pte")]
    if kind == "torch_fn":
        compile_ += ["--quantize", "int8", "--calibration", str(_calibration(tmp_path))]
    assert outcome(path, compile_, 60) == "refused"
    assert_one_line_error(run_devplan(compile_[0], path, *compile_[1:]), str(path), says)


def _calibration(tmp_path: Path) -> Path:
    from testbed.names import calibration

    return calibration(tmp_path / "calibration.pt")


@pytest.mark.parametrize(
    "names, says",
    [
        (["x", "device"], "argument 'device' shadows the global"),  # and not the keyword y either
        (["x"], "argument names"),
        (["y", "x"], "argument names"),
        (["fx_pytree", "y"], "argument 'fx_pytree' shadows the global"),  # the names fuzz, seed 61
    ],
)
def test_forward_argument_names_that_are_not_the_inputs_are_refused_where_devplan_unlifts(tmp_path, names, says):
    """An archive whose forward's argument names (module_call_graph's forward_arg_names, what
    ep.module()'s forward takes) disagree with its input spec (the names fuzz renamed the keyword
    input `y` there alone): --quantize int8 and run --reference exited 3 (forward() got an
    unexpected keyword argument 'y'), and on one renamed to a global the generated forward reads
    ('Tensor' object has no attribute 'tree_flatten_spec'); each is now one line, and the plain
    compile still works."""
    import devplan
    from testbed.names import named_archive

    def edit(document):
        document["graph_module"]["module_call_graph"][0]["signature"]["forward_arg_names"] = names

    archive = tmp_path / "model.pt2"
    archive.write_bytes(_edited(named_archive(), "models/model.json", edit))
    quantized = run_devplan(
        "compile", archive, "--quantize", "int8", "--calibration", _calibration(tmp_path), "-o", tmp_path / "q.pte"
    )
    assert_one_line_error(quantized, str(archive), "--quantize int8: torch cannot run", says)
    program = tmp_path / "model.pte"
    program.write_bytes(devplan.compile(archive).data)
    referenced = run_devplan("run", program, "--reference", archive)
    assert_one_line_error(referenced, f"--reference {archive}: torch cannot run", says)
