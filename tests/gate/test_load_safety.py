"""A .pt2 can carry pickled objects that run code when torch.export.load unpickles them;
devplan refuses such archives before torch reads them, and loads plain ones as before."""

import io
import json
import subprocess
import sys
import zipfile

import pytest
import torch

from devplan.errors import DevplanError
from devplan.gate.load import load
from testbed.cli import assert_one_line_error, devplan
from testbed.damage import Payload
from tests.compile.test_cli import ROOT


def rewrite(source, target, change):
    """Copy archive `source` to `target`, letting change(name, data) replace members' bytes."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for item in old.infolist():
            new.writestr(item, change(item.filename, old.read(item.filename)))


def pickled_weight(tmp_path, marker):
    """mlp.pt2 with its first weight replaced by a pickle that runs code when loaded."""
    crafted = tmp_path / "crafted.pt2"
    buffer = io.BytesIO()
    torch.save(Payload(marker), buffer)

    def change(name, data):
        if name.endswith("model_weights_config.json"):
            config = json.loads(data)
            config["config"]["layers.0.weight"]["use_pickle"] = True
            return json.dumps(config).encode()
        return buffer.getvalue() if name.endswith("weights/weight_0") else data

    rewrite(ROOT / "samples" / "mlp.pt2", crafted, change)
    return crafted


def test_a_pickled_weight_is_refused_before_it_can_run(tmp_path):
    marker = tmp_path / "marker"
    crafted = pickled_weight(tmp_path, marker)
    # the payload is live: torch.export.load itself runs it
    subprocess.run(
        [sys.executable, "-c", f"import torch; torch.export.load({str(crafted)!r})"], capture_output=True, timeout=300
    )
    assert marker.read_text() == "ran"
    marker.unlink()
    assert_one_line_error(
        devplan("compile", crafted, "-o", tmp_path / "out.pte"),
        "crafted.pt2",
        "model_weights_config.json",
        "'layers.0.weight', a pickled object",
        "unpickling can run code",
    )
    assert not marker.exists() and not (tmp_path / "out.pte").exists()


def test_pickled_sample_inputs_and_old_formats_are_refused(tmp_path):
    marker = tmp_path / "marker"
    buffer = io.BytesIO()
    torch.save((Payload(marker),), buffer)
    inputs = tmp_path / "inputs.pt2"
    rewrite(
        ROOT / "samples" / "mlp.pt2", inputs, lambda name, data: buffer.getvalue() if "sample_inputs" in name else data
    )
    with pytest.raises(DevplanError, match=r"sample_inputs/model.pt is sample inputs that are not plain tensors"):
        load(inputs)
    legacy = tmp_path / "legacy.pt2"
    with zipfile.ZipFile(legacy, "w") as archive:
        archive.writestr("version", "8.0")
        archive.writestr("serialized_state_dict.json", buffer.getvalue())
    with pytest.raises(DevplanError, match=r"legacy.pt2: an old-format .pt2 archive"):
        load(legacy)
    assert not marker.exists()


def test_plain_archives_still_load():
    ep = load(ROOT / "samples" / "mlp.pt2")
    assert any(node.op == "call_function" for node in ep.graph.nodes)


def _with_members(tmp_path, extra: dict[str, bytes], name="crafted.pt2"):
    """mlp.pt2 member by member, then the `extra` members (names may repeat existing ones)."""
    crafted = tmp_path / name
    with zipfile.ZipFile(ROOT / "samples" / "mlp.pt2") as old, zipfile.ZipFile(crafted, "w") as new:
        for item in old.infolist():
            new.writestr(item, old.read(item.filename))
        for member, data in extra.items():
            new.writestr(member, data)
    return crafted


def _payload_bytes(marker) -> bytes:
    buffer = io.BytesIO()
    torch.save(Payload(marker), buffer)
    return buffer.getvalue()


@pytest.mark.sweep  # a canary of torch itself; the refusal it guards stays in the fast tier
def test_the_legacy_weights_route_is_live_in_torch(tmp_path):
    """The refusal above guards a real route: torch.export.load unpickles such a member."""
    marker = tmp_path / "marker"
    with zipfile.ZipFile(ROOT / "samples" / "mlp.pt2") as archive:
        prefix = next(n for n in archive.namelist() if n.endswith("models/model.json")).split("models/")[0]
    crafted = _with_members(tmp_path, {f"{prefix}data/weights/model.pt": _payload_bytes(marker)})
    subprocess.run(
        [sys.executable, "-c", f"import torch; torch.export.load({str(crafted)!r})"], capture_output=True, timeout=300
    )
    assert marker.exists()
