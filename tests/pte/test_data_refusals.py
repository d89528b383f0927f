"""The weights a program reads from its .ptd: a key the program reads as a tensor says it is
one, and keys are the file's bytes, not text decoded with replacement (two keys of other
invalid UTF-8 bytes do not match, as in ExecuTorch's runtime)."""

from __future__ import annotations

from pathlib import Path

import pytest

from devplan.errors import DevplanError
from tests.inspection.runner import invoke, one_line

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "samples" / "mlp.pt2"


def _ptd_pair(tmp_path: Path) -> tuple[Path, Path]:
    import devplan

    pte, ptd = tmp_path / "p.pte", tmp_path / "p.ptd"
    devplan.compile(MLP, pte, external_constants=ptd)
    return pte, ptd


def test_a_ptd_entry_without_a_tensor_layout_under_a_tensors_key_is_refused(tmp_path):
    """ExecuTorch's runtime crashed (SIGSEGV) on such a key where devplan ran it."""
    from devplan.pte import read_pte
    from devplan.pte.ptd import ptd_image, read_ptd

    pte, ptd = _ptd_pair(tmp_path)
    data = read_ptd(ptd)
    first, *rest = data.entries.values()
    bare = tmp_path / "bare.ptd"
    bare.write_bytes(bytes(ptd_image([first._replace(layout=None), *rest], [bytes(s) for s in data.segments])))
    with pytest.raises(DevplanError, match=rf"^{bare}: key {first.key!r} holds bytes with no tensor layout"):
        read_pte(pte, data=bare)
    for command in ("run", "inspect", "check"):
        one_line(invoke(command, str(pte), "--data", str(bare)), str(bare), first.key, "no tensor layout")
    assert invoke("run", str(pte), "--data", str(ptd)).exit_code == 0


def _external_pair_with_key_tail(tmp_path: Path, program_tail: bytes, data_tail: bytes) -> tuple[Path, Path]:
    """The MLP's program and .ptd with the first weight's key ending in other bytes in each."""
    from devplan.pte import read_pte
    from devplan.pte.ptd import ptd_image, read_ptd
    from devplan.pte.writer import dumps_pte

    pte_path, ptd_path = _ptd_pair(tmp_path)
    pte, ptd = read_pte(pte_path), read_ptd(ptd_path)
    first, *rest = ptd.entries.values()
    for plan in pte.program.executionPlan:
        for value in plan.values:
            info = getattr(value.val, "extraTensorInfo", None)
            if info is not None and info.fullyQualifiedName == first.key.encode():
                info.fullyQualifiedName = first.key.encode() + program_tail
    program, data = tmp_path / "keyed.pte", tmp_path / "keyed.ptd"
    program.write_bytes(dumps_pte(pte.program, [bytes(segment) for segment in pte.segments]))
    renamed = first._replace(key=first.key.encode() + data_tail)
    data.write_bytes(bytes(ptd_image([renamed, *rest], [bytes(segment) for segment in ptd.segments])))
    return program, data


def test_keys_of_other_invalid_utf8_bytes_do_not_match(tmp_path):
    """'layers.0.weight\\xff' in the program and '...\\xfe' in the .ptd decoded alike (U+FFFD)
    and devplan ran the pair; ExecuTorch's runtime compares bytes and refuses it."""
    import torch

    from devplan.pte import read_pte
    from devplan.runtime import run

    program, data = _external_pair_with_key_tail(tmp_path, b"\xff", b"\xfe")
    with pytest.raises(DevplanError, match=r"the external weight 'layers\.0\.weight\\udcff', which .* does not hold"):
        read_pte(program, data=data)
    one_line(invoke("run", str(program), "--data", str(data)), str(data), "does not hold")
    runtime = pytest.importorskip("executorch.runtime")
    with pytest.raises(RuntimeError, match="Failed to load method forward"):
        runtime.Runtime.get().load_program(str(program), data_path=str(data)).load_method("forward")
    # the same bytes on both sides are the same key, in both runtimes
    program, data = _external_pair_with_key_tail(tmp_path, b"\xff", b"\xff")
    (x,) = torch.export.load(MLP).example_inputs[0]
    got = run(program, [x], data=data)[0]
    want = runtime.Runtime.get().load_program(str(program), data_path=str(data)).load_method("forward").execute([x])
    assert torch.allclose(got[0], want[0], atol=1e-5)
