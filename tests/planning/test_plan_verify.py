"""The plan checker: rejects every unsound plan with a message that says what collides."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings, strategies as st

import devplan
from devplan.errors import DevplanError
from devplan.planning import Placed, PlanError, verify
from devplan.planning.verify import verify_devices
from devplan.spec import CPU, Device
from tests.planning.planning_cases import brute_force_clash


def test_two_live_tensors_sharing_bytes_are_named_with_the_instruction_where_they_meet():
    placed = [Placed("value 3", 1, 0, 64, 0, 5), Placed("value 7", 1, 32, 64, 5, 9)]
    with pytest.raises(PlanError) as caught:
        verify(placed, {1: 128}, 16)
    assert str(caught.value) == (
        "plan check failed: value 3 [0, 64) and value 7 [32, 96) in buffer 1 overlap while both alive at instruction 5"
    )
    assert isinstance(caught.value, DevplanError)


def test_tensors_may_share_bytes_when_their_lifetimes_do_not_meet_or_when_bytes_only_touch():
    verify(
        [
            Placed("a", 1, 0, 64, 0, 4),
            Placed("b", 1, 0, 64, 5, 9),  # same bytes, later
            Placed("c", 1, 64, 32, 0, 9),  # right after a and b
            Placed("d", 2, 0, 64, 0, 9),  # same bytes, other buffer
        ],
        {1: 96, 2: 64},
        16,
    )


def test_in_place_aliases_of_one_storage_may_overlap_but_other_tensors_may_not():
    aliases = [Placed("x", 1, 0, 64, 0, 3, storage=4), Placed("x_out", 1, 0, 64, 3, 6, storage=4)]
    verify(aliases, {1: 64}, 16)
    with pytest.raises(
        PlanError, match=r"x \[0, 64\) and y \[0, 64\) in buffer 1 overlap while both alive at instruction 3"
    ):
        verify([aliases[0], Placed("y", 1, 0, 64, 3, 6, storage=5)], {1: 64}, 16)
    with pytest.raises(PlanError, match="instruction 3"):
        verify([aliases[0], Placed("z", 1, 48, 16, 3, 6)], {1: 64}, 16)


def test_the_collision_is_found_after_an_alias_partner_has_died():
    placed = [
        Placed("a", 1, 0, 64, 0, 2, storage=1),
        Placed("b", 1, 32, 64, 2, 8, storage=1),
        Placed("c", 1, 96, 32, 0, 8),
        Placed("d", 1, 0, 48, 3, 4),  # a is gone by now, but b still holds [32, 96)
    ]
    with pytest.raises(
        PlanError, match=r"b \[32, 96\) and d \[0, 48\) in buffer 1 overlap while both alive at instruction 3"
    ):
        verify(placed, {1: 128}, 16)


def test_misaligned_offset_names_the_tensor_offset_and_alignment():
    with pytest.raises(
        PlanError, match="value 2 in buffer 1 starts at offset 40, which is not a multiple of the alignment 16"
    ):
        verify([Placed("value 2", 1, 40, 8, 0, 0)], {1: 64}, 16)


def test_a_buffer_may_ask_for_a_larger_alignment_than_the_programs():
    cpu, cuda = Placed("value 1", 1, 16, 8, 0, 0), Placed("value 2", 2, 528, 8, 0, 0)
    verify([cpu, cuda], {1: 64, 2: 1024}, 16)
    with pytest.raises(
        PlanError, match="value 2 in buffer 2 starts at offset 528, which is not a multiple of the alignment 512"
    ):
        verify([cpu, cuda], {1: 64, 2: 1024}, 16, {2: 512})
    with pytest.raises(DevplanError, match="alignment"):
        verify([cpu], {1: 64}, 16, {1: 0})


def test_a_slice_may_start_anywhere_in_its_storage_but_the_storage_must_be_aligned():
    whole, row = Placed("h", 1, 32, 60, 0, 4, storage=1), Placed("h[1]", 1, 52, 20, 2, 4, storage=1, within=20)
    verify([whole, row], {1: 96}, 16)
    shifted = Placed("h[1]", 1, 56, 20, 2, 4, storage=1, within=20)
    with pytest.raises(
        PlanError,
        match=r"h\[1\] in buffer 1 starts at offset 56 \(20 bytes into its storage\), "
        r"which is not a multiple of the alignment 16",
    ):
        verify([whole, shifted], {1: 96}, 16)


def test_tensor_past_the_buffer_end_names_its_end_and_the_buffer_size():
    with pytest.raises(
        PlanError, match=r"value 5 \[64, 160\) in buffer 1 ends at byte 160, past the end of the buffer \(128 bytes\)"
    ):
        verify([Placed("value 5", 1, 64, 96, 0, 0)], {1: 128}, 16)


def test_negative_offsets_unknown_buffers_and_bad_alignment_are_rejected():
    with pytest.raises(PlanError, match="negative offset -16"):
        verify([Placed("a", 1, -16, 16, 0, 0)], {1: 64}, 16)
    with pytest.raises(PlanError, match="a is placed in buffer 2, which has no size"):
        verify([Placed("a", 2, 0, 16, 0, 0)], {1: 64}, 16)
    with pytest.raises(DevplanError, match="alignment"):
        verify([], {}, 0)


def test_empty_tensors_take_no_bytes():
    verify([Placed("a", 1, 0, 64, 0, 9), Placed("empty", 1, 32, 0, 0, 9), Placed("edge", 1, 64, 0, 0, 9)], {1: 64}, 16)


def test_a_large_sound_plan_is_checked_quickly():
    # a chain of 100k activations reusing two slots, plus a tensor alive throughout
    placed = [Placed("weights", 1, 0, 1024, 0, 100_000)]
    placed += [Placed(f"value {i}", 1, 1024 + 256 * (i % 2), 256, i, i + 1) for i in range(100_000)]
    verify(placed, {1: 1536}, 16)
    placed.append(Placed("late", 1, 1024, 16, 99_999, 99_999))
    with pytest.raises(PlanError, match="instruction 99999"):
        verify(placed, {1: 1536}, 16)


@st.composite
def placements(draw):
    """Small random placements, a fair share of them sound."""
    alignment = draw(st.sampled_from([8, 16]))
    tensors = []
    for index in range(draw(st.integers(0, 10))):
        first = draw(st.integers(0, 12))
        misaligned = draw(st.integers(0, 30)) == 0
        tensors.append(
            Placed(
                f"t{index}",
                draw(st.sampled_from([1, 2])),
                alignment * draw(st.integers(0, 5)) + (alignment // 2 if misaligned else 0),
                8 * draw(st.integers(0, 4)),
                first,
                first + draw(st.integers(0, 3)),
                draw(st.sampled_from([None, None, 1, 2])),
            )
        )
    return tensors, {1: draw(st.sampled_from([96, 112])), 2: 112}, alignment


@settings(max_examples=500, deadline=None)
@given(placements())
def test_the_checker_agrees_with_checking_every_pair(case):
    placed, sizes, alignment = case
    try:
        verify(placed, sizes, alignment)
        rejected = False
    except PlanError:
        rejected = True
    assert rejected == brute_force_clash(placed, sizes, alignment)


def test_a_host_kernel_reading_device_memory_is_rejected_by_name():
    class Chain(torch.nn.Module):
        def forward(self, x):
            return torch.relu(torch.nn.functional.linear(x, torch.ones(3, 3))) * 2

    method = devplan.compile(
        torch.export.export(Chain(), (torch.randn(2, 3),)), delegates=["cuda:0=aten::linear"]
    ).planned.method
    verify_devices(method, CPU)
    ops = [k.op for k in method.kernels]
    back = ops.index("et_copy::_d2h_copy.out")
    device_value, host_value = method.kernels[back].args[:2]
    reader = next(i for i, k in enumerate(method.kernels) if i > back and host_value in k.args)
    kernels = list(method.kernels)
    kernels[reader] = replace(
        kernels[reader], args=tuple(device_value if a == host_value else a for a in kernels[reader].args)
    )
    with pytest.raises(
        PlanError,
        match=rf"instruction {reader} \(aten::relu.out, node relu\) runs on cpu but "
        rf"value {device_value} is on cuda:0",
    ):
        verify_devices(replace(method, kernels=tuple(kernels)), CPU)
    # a delegate's payload runs its kernels on the device: the same check with home cuda:0 there
    with pytest.raises(PlanError, match=r"runs on cuda:0 but value \d+ is on cpu"):
        verify_devices(method, Device("cuda", 0))
