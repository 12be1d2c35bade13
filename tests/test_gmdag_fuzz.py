"""Fuzz: mutated .gmdag files end in GmdagError or a valid load, and queries on
every valid one run without crashing (acceptance 5)."""

from __future__ import annotations

import time

import numpy as np
from conftest import compiled_scene

from navi_nb.world import gmdag
from navi_nb.world.gmdag import GmdagError, from_bytes
from navi_nb.world.query import distance

N_CASES = 6000


def _bases():
    small = compiled_scene("box", 16)
    hand = gmdag.World(
        resolution=4,
        bmin=np.zeros(3, np.float32),
        voxel_size=0.5,
        nodes=np.array(
            [
                int(gmdag.encode_inner(0b10110101, 3)),
                int(gmdag.encode_leaf(0, 1.0)),
                int(gmdag.encode_leaf(2, 0.25)),
                1,
                2,
                1,
                2,
                8,
                int(gmdag.encode_inner(0xFF, 9)),
            ]
            + [2] * 8,
            dtype=np.uint64,
        ),
    )
    return [small.to_bytes(), hand.to_bytes()]


def _mutate(data: bytes, rng) -> bytes:
    b = bytearray(data)
    words = (len(b) - 32) // 8
    kind = rng.integers(8)
    if kind == 0:  # truncation
        return bytes(b[: rng.integers(0, len(b))])
    if kind == 1:  # trailing bytes
        return bytes(b) + bytes(rng.integers(0, 256, rng.integers(1, 17), dtype=np.uint8))
    if kind == 2:  # byte flips anywhere
        for _ in range(rng.integers(1, 5)):
            i = rng.integers(len(b))
            b[i] ^= int(rng.integers(1, 256))
        return bytes(b)
    if kind == 3:  # byte flips in the header
        i = rng.integers(32)
        b[i] ^= int(rng.integers(1, 256))
        return bytes(b)
    w = np.frombuffer(bytes(b[32:]), dtype="<u8").copy()
    leaf = (w >> np.uint64(63)) != 0
    slots = np.nonzero(~leaf)[0]
    i = int(rng.integers(words))
    if kind == 4:  # out-of-range child / child_base
        w[i] = (w[i] & np.uint64(0xFFFFFFFF00000000)) | np.uint64(int(rng.integers(words, 2**32)))
    elif kind == 5 and slots.size:  # cycles: a slot or base pointing back up
        j = int(slots[rng.integers(slots.size)])
        w[j] = (w[j] & np.uint64(0xFFFFFFFF00000000)) | np.uint64(int(rng.integers(0, max(1, j + 1))))
    elif kind == 6:  # mask / kind bits
        w[i] ^= np.uint64(1) << np.uint64(int(rng.integers(32, 64)))
    else:  # node_count field
        b[28:32] = int(rng.integers(0, words + 3)).to_bytes(4, "little")
        return bytes(b)
    return bytes(b[:32]) + w.astype("<u8").tobytes()


def test_fuzz_mutated_files():
    rng = np.random.default_rng(12345)
    bases = _bases()
    pts_rng = np.random.default_rng(7)
    counts = {"error": 0, "valid": 0}
    t0 = time.perf_counter()
    for case in range(N_CASES):
        data = _mutate(bases[case % len(bases)], rng)
        try:
            world = from_bytes(data, source=f"case{case}", validate=True)
        except GmdagError as exc:
            assert str(exc).startswith(f"case{case}: ")
            counts["error"] += 1
            continue
        counts["valid"] += 1
        span = float(world.extent) if np.isfinite(world.extent) else 1.0
        pts = world.bmin.astype(np.float64) + pts_rng.uniform(-0.2, 1.2, size=(16, 3)) * span
        d, s = distance(world, pts)
        assert d.shape == (16,) and s.shape == (16,)
        assert not np.any(np.isnan(d))
    elapsed = time.perf_counter() - t0
    print(f"fuzz: {N_CASES} cases, {counts} in {elapsed:.2f} s")
    assert counts["error"] > 1000 and counts["valid"] > 100  # both outcomes well exercised
    assert elapsed < 60
