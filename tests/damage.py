"""Damaged copies of a program for fuzz tests: a few bytes overwritten at random places."""
import random


def flip_bytes(data: bytes, rng: random.Random, most: int) -> bytes:
    """`data` with 1 to `most` bytes set to random values."""
    variant = bytearray(data)
    for _ in range(rng.randint(1, most)):
        variant[rng.randrange(len(variant))] = rng.randrange(256)
    return bytes(variant)
