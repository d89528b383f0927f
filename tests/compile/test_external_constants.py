"""External weights (issue 26): `--external-constants FILE.ptd` / `external_constants=` writes the
weights to ExecuTorch's FlatTensor data file, each under its name, and the program's tensors
name them (location EXTERNAL), as ExecuTorch's `external_constants=True` does. Both runtimes
run the pair as the program with inline weights; inspect, check, diff and run read the .ptd
with --data, and without it say in one line that the weights are outside; methods share one
copy; ExecuTorch's own pair reads the same; XNNPACK delegates' weights go there too; refusals
are one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import devplan
from devplan.errors import DevplanError
from devplan.pte import read_pte
from devplan.pte.ptd import Entry, Layout, ptd_image, read_ptd
from devplan.pte.reader import text
from devplan.runtime import HostAllocator, registered, run
from testbed.cli import assert_one_line_error, devplan as run_devplan
from testbed.lowerings import executorch_lowered_external, executorch_xnnpack_external
from tests.inspection.runner import invoke

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "samples" / "mlp.pt2"


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.out = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.out(self.fc(x).relu())


def _block(batch: int = 2):
    torch.manual_seed(0)
    module = Block().eval()
    return torch.export.export(module, (torch.randn(batch, 8),)), module


def _executorch(pte: Path, data: Path | None, inputs: list) -> list[torch.Tensor]:
    runtime = pytest.importorskip("executorch.runtime")
    program = runtime.Runtime.get().load_program(str(pte), data_path=None if data is None else str(data))
    return [output.clone() for output in program.load_method("forward").execute(inputs)]


def _pair(tmp_path: Path, model, name: str = "p", **choices) -> tuple[Path, Path]:
    pte, ptd = tmp_path / f"{name}.pte", tmp_path / f"{name}.ptd"
    devplan.compile(model, pte, external_constants=ptd, **choices)
    return pte, ptd


def test_a_ptd_program_runs_on_both_runtimes_as_the_inline_program(tmp_path):
    pte, ptd = _pair(tmp_path, MLP)
    inline = tmp_path / "inline.pte"
    devplan.compile(MLP, inline)
    (x,) = torch.export.load(MLP).example_inputs[0]
    expected = _executorch(inline, None, [x])
    assert read_pte(pte).program.constantSegment.offsets.tolist() == [0]  # no weight in the program
    for got in (_executorch(pte, ptd, [x]), run(pte, [x], data=ptd)[0]):
        assert len(got) == len(expected) and all(
            torch.allclose(g, e, atol=1e-6) for g, e in zip(got, expected)
        )  # torch's kernels and ExecuTorch's round apart


def test_a_transformers_model_runs_with_its_ptd(tmp_path):
    """A tiny Llama (rotary tables, folded constants, names from transformers) on both runtimes."""
    from testbed.hf_models import llama

    module, args, _ = llama()
    with torch.no_grad():
        ep = torch.export.export(module, args)
        expected = module(*args).logits
    pte, ptd = _pair(tmp_path, ep)
    assert "model.embed_tokens.weight" in read_ptd(ptd).entries
    got = _executorch(pte, ptd, list(args))
    assert torch.allclose(got[0], expected, atol=1e-5)
    ours = run(read_pte(pte, data=ptd), list(args))[0]
    assert torch.allclose(ours[0], expected, atol=1e-5)


def test_the_ptd_matches_executorchs_of_the_same_export(tmp_path):
    """The same keys, layouts and tensor bytes as ExecuTorch's .ptd, in segments placed alike."""
    pytest.importorskip("executorch.exir")
    ep, _ = _block()
    _, theirs_bytes = executorch_lowered_external(ep)
    _, ptd = _pair(tmp_path, ep)
    ours, theirs = read_ptd(ptd), read_ptd(theirs_bytes)
    assert ours.entries.keys() == theirs.entries.keys() == {"fc.weight", "fc.bias", "out.weight", "out.bias"}
    for key in ours.entries:
        assert ours.entries[key].layout == theirs.entries[key].layout
        assert bytes(ours.data(key)) == bytes(theirs.data(key))
    assert ours.size == len(theirs_bytes)  # each segment at a multiple of 128, as ExecuTorch places them


def test_executorchs_own_program_and_ptd_are_read_and_run(tmp_path):
    pytest.importorskip("executorch.exir")
    ep, module = _block()
    pte_bytes, ptd_bytes = executorch_lowered_external(ep)
    pte, ptd = tmp_path / "et.pte", tmp_path / "et.ptd"
    pte.write_bytes(pte_bytes)
    ptd.write_bytes(ptd_bytes)
    doc = devplan.inspect(pte, data=ptd)
    assert doc["file"]["external"] == {"keys": 4, "data": "et.ptd", "bytes": read_ptd(ptd).stored_bytes}
    x = torch.randn(2, 8)
    with torch.no_grad():
        expected = module(x)
    assert torch.allclose(run(read_pte(pte, data=ptd), [x])[0][0], expected, atol=1e-6)
    shown = invoke("run", str(pte), "--data", str(ptd))
    assert shown.exit_code == 0 and "output 0: float32 (2, 4)" in shown.stdout


def test_methods_store_their_shared_weights_once(tmp_path):
    """Two methods of one module (batch 2 and 4): one key per weight, one segment each."""
    two, module = _block(2)
    four, _ = _block(4)
    pte, ptd = _pair(tmp_path, two, methods={"batch4": four})
    data = read_ptd(ptd)
    assert sorted(data.entries) == ["fc.bias", "fc.weight", "out.bias", "out.weight"]
    assert data.stored_bytes == sum(p.numel() * 4 for p in module.parameters())
    program = read_pte(pte, data=ptd)
    for method, batch in (("forward", 2), ("batch4", 4)):
        x = torch.randn(batch, 8)
        with torch.no_grad():
            assert torch.allclose(run(program, [x], method=method)[0][0], module(x), atol=1e-6)


def test_the_same_export_gives_the_same_bytes(tmp_path):
    ep, _ = _block()
    first, second = _pair(tmp_path, ep, "a"), _pair(tmp_path, ep, "b")
    assert first[0].read_bytes() == second[0].read_bytes()
    assert first[1].read_bytes() == second[1].read_bytes()


def test_the_weights_are_streamed_from_the_models_own_tensors(tmp_path):
    """The .ptd's pieces are the weights' own buffers, never copies (a compile holds them once)."""
    ep, _ = _block()
    result = devplan.compile(ep, tmp_path / "p.pte", external_constants=tmp_path / "p.ptd")
    weight = ep.state_dict["fc.weight"].detach().numpy()
    assert any(np.shares_memory(part, weight) for part in result.external.parts if isinstance(part, np.ndarray))
    assert result.summary()["file"]["external"] == {"size": (tmp_path / "p.ptd").stat().st_size, "keys": 4}


def test_inspect_check_and_diff_read_it_without_and_with_data(tmp_path):
    pte, ptd = _pair(tmp_path, MLP)
    keys = len(read_ptd(ptd).entries)
    without = invoke("inspect", str(pte))
    assert without.exit_code == 0
    (said,) = [line.strip() for line in without.stdout.splitlines() if "external data" in line]
    assert said == f"external data  {keys} keys in a .ptd data file not given (--data FILE.ptd reads it)"
    assert devplan.inspect(pte)["file"]["external"] == {"keys": keys, "data": None, "bytes": None}
    assert f"{keys} keys in p.ptd" in invoke("inspect", str(pte), "--data", str(ptd)).stdout
    for command in (["check", str(pte)], ["diff", str(pte), str(pte)]):
        said = invoke(*command)
        assert said.exit_code == 0
        assert f"weights external: {keys} keys in a .ptd data file not given" in said.stderr
        assert "weights external" not in invoke(*command, "--data", str(ptd)).stderr
    refused = invoke("run", str(pte))
    assert isinstance(refused.exception, DevplanError) and "pass it: devplan run PROGRAM.pte --data FILE.ptd" in str(
        refused.exception
    )


def _refusal(pte: Path, data) -> str:
    with pytest.raises(DevplanError) as caught:
        read_pte(pte, data=data)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_refusals_are_one_line(tmp_path):
    pte, ptd = _pair(tmp_path, MLP)
    assert "not an ExecuTorch FlatTensor data file (a program (.pte)" in _refusal(pte, pte)
    assert "file identifier" in _refusal(pte, b"\0" * 64)
    assert "FlatTensor data file" in _refusal(pte, MLP)
    data = read_ptd(ptd)
    entries = list(data.entries.values())
    tensors = [bytes(segment) for segment in data.segments]
    # a key the program names is missing
    missing = _refusal(pte, bytes(ptd_image(entries[1:], tensors)))
    assert f"the external weight {entries[0].key!r}, which <bytes> does not hold" in missing
    # the key holds fewer bytes than its tensor needs
    short = [tensors[entries[0].segment][:-4] if i == entries[0].segment else t for i, t in enumerate(tensors)]
    assert f"key {entries[0].key!r} holds" in _refusal(pte, bytes(ptd_image(entries, short)))
    # the key is of another shape
    first = entries[0]
    reshaped = first._replace(
        layout=Layout(
            first.layout.scalar_type,
            first.layout.sizes[::-1] + (1,),
            first.layout.dim_order + (len(first.layout.sizes),),
        )
    )
    assert "but" in _refusal(pte, bytes(ptd_image([reshaped, *entries[1:]], tensors)))
    # damage: the header cut short
    assert "truncated or corrupt" in _refusal(pte, ptd.read_bytes()[:200])


def test_the_cli_compiles_and_refuses_in_one_line(tmp_path):
    pte, ptd = tmp_path / "c.pte", tmp_path / "c.ptd"
    done = invoke("compile", str(MLP), "-o", str(pte), "--external-constants", str(ptd))
    assert done.exit_code == 0 and f"wrote {ptd}" in " ".join(done.stdout.split())  # however it wraps
    same = invoke("compile", str(MLP), "-o", str(pte), "--external-constants", str(pte))
    assert isinstance(same.exception, DevplanError) and "--external-constants would write the file" in str(
        same.exception
    )
    wrong = invoke("run", str(pte), "--data", str(MLP))
    assert isinstance(wrong.exception, DevplanError) and "not an ExecuTorch FlatTensor data file" in str(
        wrong.exception
    )


def test_entries_name_their_segments():
    """A key's layout and segment are what the writer was given (two keys may share one segment)."""
    layout = Layout(6, (2,), (0,))
    image = bytes(ptd_image([Entry("a", 0, layout), Entry("b", 0, layout)], [np.arange(2, dtype=np.float32)]))
    read = read_ptd(image)
    assert read.entries["a"].segment == read.entries["b"].segment == 0 and len(read.segments) == 1
    assert np.frombuffer(read.data("b"), dtype=np.float32).tolist() == [0.0, 1.0]


def test_a_program_with_no_weights_left_gets_a_ptd_devplan_reads_back(tmp_path):
    """With every op delegated to cuda:0 the weights go into the payloads and no constant is
    left for the .ptd: the file devplan writes holds no key and reaches its segment base, as
    ExecuTorch's serializer writes an empty one (devplan's was 88 bytes, its header placing the
    data at byte 128, and every command refused it as damaged)."""
    ep, module = _block()
    pte, ptd = _pair(tmp_path, ep, delegates=["cuda:0"])
    assert read_ptd(ptd).entries == {} and ptd.stat().st_size == 128
    (x,) = ep.example_inputs[0]
    with registered("cuda", HostAllocator()):
        (got,) = run(pte, [x], data=ptd)[0]
    assert torch.allclose(got, module(x), atol=1e-6)
    assert run_devplan("check", str(pte), "--data", str(ptd)).returncode == 0


def test_damaged_data_files_are_refused_in_one_line(tmp_path):
    """Every single-byte change to the FlatBuffer and header of a .ptd reads, or is refused as a
    DevplanError of one line: never another exception."""
    _, ptd = _pair(tmp_path, MLP)
    whole = ptd.read_bytes()
    end = int.from_bytes(whole[16:24], "little") + int.from_bytes(whole[24:32], "little")  # the FlatBuffer's end
    for at in range(end):
        for value in (0xFF, whole[at] ^ 0x01):
            damaged = whole[:at] + bytes([value]) + whole[at + 1 :]
            try:
                read_ptd(damaged)
            except DevplanError as error:
                assert "\n" not in str(error)


def test_the_documents_validate_against_their_schemas(tmp_path):
    """And a program holding its weights gets no `external` key: its documents stay as they were."""
    from tests.test_schemas import validate

    assert "external" not in devplan.inspect(devplan.compile(MLP).data)["file"]

    result = devplan.compile(MLP, tmp_path / "p.pte", external_constants=tmp_path / "p.ptd")
    validate("compile", result.summary())
    validate("inspect", devplan.inspect(tmp_path / "p.pte"))
    validate("inspect", devplan.inspect(tmp_path / "p.pte", data=tmp_path / "p.ptd"))


@pytest.mark.parametrize("family", ["block", "llama"])
def test_xnnpack_delegates_keep_their_weights_in_the_ptd(tmp_path, family):
    """XNNPACK's weights (its named data, keyed by hash) go to the .ptd beside the program's
    own, and ExecuTorch's runtime runs the pair as the program holding them."""
    pytest.importorskip("executorch.backends.xnnpack")
    if family == "llama":
        from testbed.hf_models import llama

        module, args, _ = llama()
        with torch.no_grad():
            ep, expected = torch.export.export(module, args), module(*args).logits
    else:
        ep, module = _block()
        args = (torch.randn(2, 8),)
        with torch.no_grad():
            expected = module(*args)
    inline = tmp_path / "inline.pte"
    devplan.compile(ep, inline, backends=["xnnpack"])
    pte, ptd = _pair(tmp_path, ep, backends=["xnnpack"])
    held = {text(entry.key): bytes(segment) for entry, segment in _named(read_pte(inline))}
    program, data = read_pte(pte), read_ptd(ptd)
    assert held and program.program.namedData is None
    assert all(bytes(data.data(key)) == value and data.entries[key].layout is None for key, value in held.items())
    assert devplan.inspect(pte, data=ptd)["file"]["external"]["keys"] == len(data.entries)
    got = _executorch(pte, ptd, list(args))[0]
    assert torch.allclose(got, _executorch(inline, None, list(args))[0])
    assert torch.allclose(got, expected, atol=1e-4)


def _named(pte):
    return [(entry, pte.segments[entry.segmentIndex]) for entry in pte.program.namedData or ()]


def test_a_delegate_whose_named_data_is_missing_is_refused_in_one_line(tmp_path):
    """ExecuTorch's XNNPACK backend crashes (SIGSEGV) on a key it cannot find: devplan names
    the key first, whichever command reads the program without its .ptd or with another."""
    pytest.importorskip("executorch.backends.xnnpack")
    ep, _ = _block()
    pte, ptd = _pair(tmp_path, ep, backends=["xnnpack"])
    _, other = _pair(tmp_path, MLP, name="other")
    keys = len(read_ptd(ptd).entries)
    without = run_devplan("run", str(pte), "--executorch")
    assert_one_line_error(
        without,
        f"{pte}: method forward: delegate 0 (XnnpackBackend) reads named data",
        f"kept outside the program ({keys} keys)",
        "--data FILE.ptd",
    )
    wrong = run_devplan("inspect", str(pte), "--data", str(other))
    assert_one_line_error(wrong, "which neither the program nor", str(other))
    noted = run_devplan("check", str(pte))
    assert noted.returncode == 0 and f"weights external: {keys} keys in a .ptd data file not given" in noted.stderr


def test_executorchs_xnnpack_pair_is_read_and_matches_devplans(tmp_path):
    """ExecuTorch's own XNNPACK lowering with external weights: the same keys and bytes as
    devplan's .ptd, counted by inspect, refused without its .ptd, run with it."""
    pytest.importorskip("executorch.backends.xnnpack")
    ep, module = _block()
    x = ep.example_inputs[0][0]
    pte_bytes, ptd_bytes = executorch_xnnpack_external(module, (x,))
    pte, ptd = tmp_path / "et.pte", tmp_path / "et.ptd"
    pte.write_bytes(pte_bytes)
    ptd.write_bytes(ptd_bytes)
    theirs = read_ptd(ptd)
    ours = read_ptd(_pair(tmp_path, ep, backends=["xnnpack"])[1])
    assert theirs.entries.keys() == ours.entries.keys() and len(theirs.entries) == 4
    assert all(bytes(theirs.data(key)) == bytes(ours.data(key)) for key in ours.entries)
    assert devplan.inspect(pte)["file"]["external"] == {"keys": 4, "data": None, "bytes": None}
    assert_one_line_error(run_devplan("run", str(pte), "--executorch"), "reads named data", "--data FILE.ptd")
    with torch.no_grad():
        assert torch.allclose(_executorch(pte, ptd, [x])[0], module(x), atol=1e-5)
