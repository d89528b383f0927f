"""The constant segment holds the weights' own tensors (issue 26): equal tensors stored once,
found by size and a sampled fingerprint and then compared in full, so tensors that differ only
where the fingerprint does not look stay apart; the initial state is what it was at compile
time even when running the model changes it before the bytes are asked for; and the bytes a
compile writes are the bytes CompileResult.data gives."""

from __future__ import annotations

import torch
from torch import nn

import devplan
from devplan.pte import read_pte


class TwoWeights(nn.Module):
    def __init__(self, first: torch.Tensor, second: torch.Tensor) -> None:
        super().__init__()
        self.first, self.second = nn.Parameter(first), nn.Parameter(second)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.first + x @ self.second


def _constants(data: bytes) -> int:
    return len(read_pte(data).program.constantSegment.offsets) - 1


def test_equal_weights_are_stored_once_and_nearly_equal_ones_apart() -> None:
    weight = torch.randn(64, 64)
    nearly = weight.clone()
    nearly.view(-1)[1] += 1  # between the fingerprint's samples (every 64th element) and away from the end
    x = (torch.randn(2, 64),)
    same = devplan.compile(torch.export.export(TwoWeights(weight, weight.clone()), x))
    apart = devplan.compile(torch.export.export(TwoWeights(weight, nearly), x))
    assert _constants(same.data) == 1 and same.constant_bytes == weight.nbytes
    assert _constants(apart.data) == 2 and apart.constant_bytes == 2 * weight.nbytes


class Counter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("count", torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.count.add_(x)
        return self.count * 2


def test_initial_state_is_taken_at_compile_time(tmp_path) -> None:
    module = Counter()
    exported = torch.export.export(module, (torch.ones(4),))
    result = devplan.compile(exported, tmp_path / "counter.pte")
    exported.state_dict["count"].fill_(7)  # the state the program starts from must not follow
    state = read_pte(result.data)
    assert state.mutable_data(1)[:16] == torch.ones(4).numpy().tobytes()
    assert result.data == (tmp_path / "counter.pte").read_bytes()
