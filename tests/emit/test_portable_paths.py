"""The program's stacktraces name source files from their package or project root, so the same
model compiled on two machines (or from two checkouts) gives the same bytes."""

from __future__ import annotations

import importlib.util

import torch

import devplan

MODEL = """
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.fc(x)) + 1
"""


def _compiled_in(folder, monkeypatch, cwd=None) -> bytes:
    """The model's program, its code at folder/model.py, exported and compiled from `cwd` (there
    by default)."""
    folder.mkdir(parents=True)
    (folder / "model.py").write_text(MODEL)
    spec = importlib.util.spec_from_file_location(f"model_{abs(hash(str(folder)))}", folder / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.chdir(cwd or folder)
    torch.manual_seed(0)
    return devplan.compile(torch.export.export(module.Net().eval(), (torch.randn(2, 8),))).data


def test_one_export_from_two_locations_compiles_to_the_same_bytes(tmp_path, monkeypatch):
    alice = _compiled_in(tmp_path / "home" / "alice" / "project", monkeypatch)
    bob = _compiled_in(tmp_path / "ci" / "checkout", monkeypatch)
    assert alice == bob
    assert b"model.py" in alice and b"torch/nn/modules/linear.py" in alice
    assert str(tmp_path).encode() not in alice and b"site-packages" not in alice


def test_the_folder_devplan_runs_in_does_not_change_the_bytes(tmp_path, monkeypatch):
    inside = _compiled_in(tmp_path / "a" / "project", monkeypatch)
    above = _compiled_in(tmp_path / "b" / "project", monkeypatch, cwd=tmp_path / "b")
    assert inside == above and b"project/model.py" not in above
