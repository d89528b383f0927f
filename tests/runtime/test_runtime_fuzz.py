"""Damaged programs in the reference runtime: every run either works or stops with one
DevplanError naming the file; nothing else escapes and nothing hangs."""
import random
import time

import torch

import devplan
from devplan.errors import DevplanError
from devplan.pte import read_pte
from devplan.runtime import LoadedMethod
from tests.damage import flip_bytes
from tests.models import CORPUS

VARIANTS = 300
LIMIT_S = 5.0


def test_flipped_bytes_never_crash_or_hang_the_runtime():
    module, args = CORPUS["cat_split_chunk"]()
    data = devplan.compile(torch.export.export(module, args, strict=False)).data
    rng = random.Random(7)
    outcomes = {"ran": 0, "refused": 0}
    for _ in range(VARIANTS):
        variant = flip_bytes(data, rng, most=4)
        start = time.perf_counter()
        try:
            loaded = LoadedMethod(read_pte(variant, "fuzz.pte"))
            loaded.execute(loaded.sample_inputs())
            outcomes["ran"] += 1
        except DevplanError as error:
            assert str(error).startswith("fuzz.pte"), error
            outcomes["refused"] += 1
        assert time.perf_counter() - start < LIMIT_S
    assert outcomes["ran"] and outcomes["refused"]
