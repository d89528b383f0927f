"""Damaged programs in the reference runtime: every run either works or stops with one
DevplanError naming the file; nothing else escapes and nothing hangs."""

import random
import time

import pytest
import torch

import devplan
from devplan.errors import DevplanError
from devplan.pte import read_pte
from devplan.runtime import HostAllocator, LoadedMethod, registered
from testbed.damage import flip_bytes
from testbed.models import CORPUS

VARIANTS = 300
LIMIT_S = 5.0


def payloads_flipped(data: bytes, rng: random.Random) -> bytes:
    """`data` with 1 to 4 bytes changed inside its delegates' payloads (ET12 programs)."""
    pte = read_pte(data)
    base = pte.header.segment_base_offset
    segments = [(base + int(s.offset), int(s.size)) for s in pte.program.segments[1:]]  # 0 holds the constants
    variant = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        start, size = rng.choice(segments)
        variant[start + rng.randrange(size)] = rng.randrange(256)
    return bytes(variant)


@pytest.mark.parametrize("delegates", [(), ("cuda:0=aten::mul,aten::cat",)], ids=("portable", "payloads"))
def test_flipped_bytes_never_crash_or_hang_the_runtime(delegates):
    module, args = CORPUS["cat_split_chunk"]()
    data = devplan.compile(torch.export.export(module, args, strict=False), delegates=delegates).data
    rng = random.Random(7)
    outcomes = {"ran": 0, "refused": 0}
    for _ in range(VARIANTS):
        variant = payloads_flipped(data, rng) if delegates else flip_bytes(data, rng, most=4)
        start = time.perf_counter()
        try:
            with registered("cuda", HostAllocator()):
                loaded = LoadedMethod(read_pte(variant, "fuzz.pte"))
                try:
                    loaded.execute(loaded.sample_inputs())
                finally:
                    loaded.release()
            outcomes["ran"] += 1
        except DevplanError as error:
            assert str(error).startswith("fuzz.pte"), error
            outcomes["refused"] += 1
        assert time.perf_counter() - start < LIMIT_S
    assert outcomes["ran"] and outcomes["refused"]
