"""The passes that finish a built method: copies (each Use its source or a copy on the reading
device), alias (views take their input's bytes) and compact (the value table as written).
Each is tried on Methods built here by hand, then all three on transformers models."""

from __future__ import annotations

import math

import pytest
import torch

import devplan
from devplan.ir.method import IntList, Source, TensorList, Use, ViewOf
from devplan.ops import ET_VIEW, TO_DEVICE, TO_HOST
from devplan.passes.method.alias import alias_views
from devplan.passes.method.compact import compact
from devplan.passes.method.copies import insert_copies
from devplan.spec import CPU, Device, TensorSpec
from testbed.hf_models import gpt2, llama
from tests.passes.methods import call, method, tensor

CUDA0, CUDA1 = Device("cuda", 0), Device("cuda", 1)


# copies


def test_a_use_where_its_source_lives_is_the_source_itself():
    built = method([tensor(), Use(0, CPU), tensor()], [call("aten::relu.out", 1, 2, 2)], outputs=(2,))
    done = insert_copies(built)
    assert done.values == (tensor(), tensor()) and done.kernels == (call("aten::relu.out", 0, 1, 1),)


def test_a_use_on_another_device_is_a_copy_in_its_place_just_ahead_of_its_reader():
    where = Source(module="layers.0", op="aten.relu.default")
    built = method(
        [tensor(), tensor(CUDA0), Use(1, CPU), tensor()],
        [call("aten::mm.out", 0, 0, 1), call("aten::relu.out", 2, 3, 3, source=where)],
        outputs=(3,),
    )
    done = insert_copies(built)
    assert done.values[2] == tensor() and [k.op for k in done.kernels] == ["aten::mm.out", TO_HOST, "aten::relu.out"]
    assert done.kernels[1].args == (1, 2, 2) and done.kernels[1].source == where  # named after its reader
    assert done.kernels[2].args == (2, 3, 3)


def test_one_copy_per_tensor_and_device_and_between_devices_through_the_host():
    # v1 on cuda:0 is read on cuda:1 (through a host copy made there, in the Use's place) and
    # later on the host, which reads that same host copy
    built = method(
        [tensor(), tensor(CUDA0), Use(1, CUDA1), tensor(CUDA1), Use(1, CPU), tensor()],
        [call("backend", 0, 1), call("backend", 2, 3), call("aten::add.out", 4, 4, 5, 5)],
        outputs=(5,),
    )
    done = insert_copies(built)
    ops = [(k.op, k.args) for k in done.kernels]
    assert done.values[2:4] == (tensor(), tensor(CUDA1))  # host hop, then the copy on cuda:1
    assert ops == [
        ("backend", (0, 1)),
        (TO_HOST, (1, 2, 2)),
        (TO_DEVICE, (2, 3, 3)),
        ("backend", (3, 4)),
        ("aten::add.out", (2, 2, 5, 5)),
    ]


def test_a_copy_only_the_caller_reads_goes_last_and_list_items_are_read_too():
    built = method(
        [tensor(CUDA0), Use(0, CPU), TensorList((1,)), tensor(), Use(3, CPU)],
        [call("aten::cat.out", 2, 3, 3)],
        outputs=(1,),
    )
    done = insert_copies(built)
    assert [k.op for k in done.kernels] == [TO_HOST, "aten::cat.out"] and done.values[2] == TensorList((1,))
    twice = method([tensor(CUDA0), Use(0, CPU)], [], outputs=(1, 1))  # one result returned twice
    assert [(k.op, k.args) for k in insert_copies(twice).kernels] == [(TO_HOST, (0, 1, 1))]


# alias


def test_a_contiguous_view_is_dropped_and_takes_its_input_bytes_views_of_views_at_their_offsets():
    built = method(
        [tensor(), tensor(), tensor(), tensor()],
        [
            call("aten::relu.out", 0, 1, 1),
            call("aten::slice_copy.Tensor_out", 1, 2, 2, view=ViewOf((16,))),
            call("aten::view_copy.out", 2, 3, 3, view=ViewOf((0,), reshape=True)),
        ],
        outputs=(3,),
    )
    done = alias_views(built)
    assert [k.op for k in done.kernels] == ["aten::relu.out"]
    assert (done.values[2].alias_of, done.values[2].alias_offset) == (1, 16)
    assert (done.values[3].alias_of, done.values[3].alias_offset) == (1, 16)  # the root, not the view


def test_split_pieces_each_take_their_run():
    built = method(
        [tensor(), tensor(), tensor(), TensorList((1, 2))],
        [call("aten::split_copy.Tensor_out", 0, 3, 3, view=ViewOf((0, 16)))],
        outputs=(1, 2),
    )
    done = alias_views(built)
    assert done.kernels == () and [(v.alias_of, v.alias_offset) for v in done.values[1:3]] == [(0, 0), (0, 16)]


def test_of_a_dynamic_input_only_a_reshape_is_a_view_made_at_run_time():
    reshape = call("aten::view_copy.out", 0, 1, 2, 2, view=ViewOf((0,), reshape=True))
    narrow = call("aten::slice_copy.Tensor_out", 0, 3, 3, view=ViewOf((0,)))
    built = method(
        [tensor(dynamic=True), IntList(()), tensor(dynamic=True), tensor(dynamic=True)],
        [reshape, narrow],
        outputs=(2, 3),
    )
    done = alias_views(built)
    assert [(k.op, k.args, k.view) for k in done.kernels] == [
        (ET_VIEW, (0, 1, 2), None),
        ("aten::slice_copy.Tensor_out", (0, 3, 3), None),
    ]
    assert done.values[2].alias_of == 0 and done.values[3].alias_of is None


@pytest.mark.parametrize("case", ["constant", "state", "mutated", "not one run", "number"])
def test_views_that_stay_copies(case):
    values = [tensor(constant=case == "constant"), tensor()] if case != "number" else [3, tensor()]
    view = ViewOf(None if case == "not one run" else (0,))
    built = method(
        values,
        [call("aten::view_copy.out", 0, 1, 1, view=view)],
        outputs=(1,),
        state={0: torch.zeros(2, 4)} if case == "state" else None,
        mutated=(0,) if case == "mutated" else (),
    )
    done = alias_views(built)
    assert [(k.op, k.view) for k in done.kernels] == [("aten::view_copy.out", None)] and done.values[1].alias_of is None


# compact


def test_compact_drops_what_nothing_reads_and_shares_equal_numbers_from_the_first_kept():
    # v1 and v2 were a dropped view's size, v3 a Use's slot
    values = [tensor(), 7, IntList((1,)), tensor(), 1, 7, -0.0, 0.0, math.nan, math.nan, None, None, tensor()]
    kept = call("aten::op.out", 0, 4, 5, 6, 7, 8, 9, 10, 11, 12, 12)
    done = compact(method(values, [kept], outputs=(12,)))
    assert done.values[:5] == (tensor(), 1, 7, -0.0, 0.0) and math.isnan(done.values[5])
    assert done.values[6:] == (None, tensor())
    assert done.kernels[0].args == (0, 1, 2, 3, 4, 5, 5, 6, 6, 7, 7) and done.outputs == (7,)


def test_numbers_the_runtime_writes_are_never_shared():
    values = [tensor(), 0, 0, 0]  # v1 a number input, v2 a size op's result, v3 a plain 0
    size = call("aten::sym_size.int", 0, 3, 2)
    done = compact(method(values, [size], inputs=(0, 1), outputs=(2,)))
    assert done.values == (tensor(), 0, 0, 0) and done.kernels[0].args == (0, 3, 2)


# all three, on transformers models: the compiled method reads every tensor where it lives


@pytest.mark.parametrize("make", [llama, gpt2], ids=["llama", "gpt2"])
def test_transformers_models_read_each_tensor_on_its_own_device(make):
    module, args, kwargs = make()
    ep = torch.export.export(module, args, kwargs, strict=False)
    m = devplan.compile(ep, delegates=("cuda:0=aten::linear,aten::addmm,aten::mm",)).planned.method
    assert not any(isinstance(v, Use) for v in m.values)
    copies = [k for k in m.kernels if k.op in (TO_HOST, TO_DEVICE)]
    assert copies and all(m.values[k.args[0]].device != m.values[k.args[1]].device for k in copies)
    for k in m.kernels:
        where = m.delegates[k.delegate].device if k.delegate is not None else CPU
        if k not in copies:
            assert all(m.values[i].device == where for i in m.operands(k) if isinstance(m.values[i], TensorSpec)), k
    aliases = [v for v in m.values if isinstance(v, TensorSpec) and v.alias_of is not None]
    assert aliases and all(not m.values[v.alias_of].constant and v.alias_of not in m.state for v in aliases)
