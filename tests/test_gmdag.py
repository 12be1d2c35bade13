"""The .gmdag v1 format: round trips, validation rules, the other writers' dialect."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import compiled_scene
from numba import njit

from navi_nb.world import gmdag
from navi_nb.world.gmdag import (
    GmdagError,
    World,
    encode_inner,
    encode_leaf,
    from_bytes,
    load_world,
    save_world,
    validate_world,
)
from navi_nb.world.query import distance


def _world(nodes, res=2, bmin=(0.0, 0.0, 0.0), voxel=1.0):
    return World(
        resolution=res, bmin=np.array(bmin, np.float32), voxel_size=voxel, nodes=np.asarray(nodes, dtype=np.uint64)
    )


def test_round_trip_identical_bytes(tmp_path):
    world = compiled_scene("house", 64)
    path = save_world(world, tmp_path / "house.gmdag")
    raw = path.read_bytes()
    assert raw == world.to_bytes()
    assert len(raw) == 32 + 8 * world.node_count
    back = load_world(path)  # deep validation runs by default
    assert back.deep_checked
    assert back.to_bytes() == raw
    assert back.resolution == world.resolution and back.voxel_size == world.voxel_size
    np.testing.assert_array_equal(back.bmin, world.bmin)
    assert back.sidecar["scene"] == "house"
    assert back.class_names == world.sidecar["class_names"]
    np.testing.assert_allclose(back.spawn_points, world.spawn_points, atol=1e-4)
    # write it again: the same bytes
    again = save_world(back, tmp_path / "again.gmdag")
    assert again.read_bytes() == raw
    mm = load_world(path, mmap=True)
    np.testing.assert_array_equal(mm.nodes, world.nodes)


@pytest.mark.parametrize("name", ["box", "pillars", "house", "maze", "clutter"])
def test_compiled_worlds_pass_deep_validation(name):
    world = compiled_scene(name, 64)
    w2 = from_bytes(world.to_bytes(), validate=False)
    validate_world(w2)
    assert w2.deep_checked


def test_deep_validation_has_one_signature_for_compiled_and_loaded_worlds(tmp_path):
    """The compiler validates a world whose nodes are a writable array, a loaded file's are read-only: the walk
    sees a read-only array either way, so the trainer loads the walk its world-compile processes compiled."""
    world = _world([encode_leaf(0, 0.5)])  # writable nodes, as the compiler's
    assert world.nodes.flags.writeable
    validate_world(world)
    assert world.nodes.flags.writeable  # the caller's array is left as it was
    validate_world(load_world(save_world(world, tmp_path / "w.gmdag"), mmap=True, validate=False))
    validate_world(from_bytes(world.to_bytes(), validate=False))
    assert [sig[0].mutable for sig in gmdag._deep_walk.signatures] == [False]


def _header(magic=b"GDAG", version=1, res=2, bmin=(0.0, 0.0, 0.0), voxel=1.0, count=1):
    return gmdag.HEADER.pack(magic, version, res, *bmin, voxel, count)


LEAF = int(encode_leaf(0, 1.0))


@pytest.mark.parametrize(
    "data, rule",
    [
        (b"GDA", "shorter than the 32-byte header"),
        (_header(magic=b"GDAX") + LEAF.to_bytes(8, "little"), "wrong magic"),
        (_header(version=2) + LEAF.to_bytes(8, "little"), "version 2"),
        (_header(res=0) + LEAF.to_bytes(8, "little"), "resolution is 0"),
        (_header(bmin=(float("nan"), 0.0, 0.0)) + LEAF.to_bytes(8, "little"), "non-finite bounds"),
        (_header(voxel=0.0) + LEAF.to_bytes(8, "little"), "voxel_size"),
        (_header(voxel=float("inf")) + LEAF.to_bytes(8, "little"), "voxel_size"),
        (_header(count=0), "node_count is 0"),
        (_header(count=2) + LEAF.to_bytes(8, "little"), "payload holds 1 words"),
        (_header() + LEAF.to_bytes(8, "little") + b"\0", "1 trailing bytes"),
    ],
)
def test_header_rules(data, rule):
    with pytest.raises(GmdagError, match=rule) as err:
        from_bytes(data, source="bad.gmdag")
    assert str(err.value).startswith("bad.gmdag: ")


def test_unreadable_file_names_path(tmp_path):
    with pytest.raises(GmdagError, match="cannot read file"):
        load_world(tmp_path / "missing.gmdag")
    (tmp_path / "empty.gmdag").write_bytes(b"")
    with pytest.raises(GmdagError, match="empty"):
        load_world(tmp_path / "empty.gmdag", mmap=True)


def _inner(mask, base):
    return int(encode_inner(mask, base))


@pytest.mark.parametrize(
    "nodes, rule",
    [
        ([_inner(1, 1), 0], "cycle"),  # slot points back at the root
        ([_inner(1, 1), 7], "child index 7 out of range"),
        ([_inner(3, 1), 2], "child slots run past the end"),
        ([(1 << 55) | (1 << 40) | 1, LEAF], "reserved bits 54..32"),
        ([_inner(1, 1), 2, LEAF | (1 << 40)], "reserved bits 62..32"),
        ([_inner(1, 1), 2, (1 << 63) | 0x7E00], "NaN"),
        ([1, 2, LEAF], "empty child mask"),
    ],
)
def test_deep_rules(nodes, rule):
    with pytest.raises(GmdagError, match=rule):
        validate_world(_world(nodes))


def test_deep_rule_depth_limit():
    # a chain of inner nodes deeper than MAX_DEPTH (no cycle: each points further on)
    n = gmdag.MAX_DEPTH + 3
    nodes = []
    for i in range(n):
        nodes += [_inner(1, 2 * i + 1), 2 * i + 2]
    nodes.append(LEAF)
    with pytest.raises(GmdagError, match="deeper than"):
        validate_world(_world(nodes, res=1 << 20))


def test_shared_subtrees_are_not_cycles():
    leaf = LEAF
    nodes = [_inner(0xFF, 2), leaf] + [1] * 8  # all eight slots share one leaf
    validate_world(_world(nodes))


def _post_order_unsigned_world():
    """Another writer's dialect, built by hand: res 2, post-order pool (children
    first, slots last, root copied to word 0), unsigned distances, semantic flag
    leaves, +inf meaning 0 on a flagged leaf. Voxel (i, j, k) holds value[i, j, k]."""
    values = np.array([[[0.25, 0.5], [0.75, 1.0]], [[1.25, 1.5], [np.inf, 2.0]]])
    flags = np.array([[[1, 1], [0, 0]], [[0, 0], [1, 0]]])
    leaves = []
    for k in range(8):  # octant order: x | y << 1 | z << 2
        i, j, kz = k & 1, (k >> 1) & 1, (k >> 2) & 1
        if np.isinf(values[i, j, kz]):  # that writer's float-to-half turned 0 into +inf
            leaves.append((1 << 63) | (int(flags[i, j, kz]) << 16) | 0x7C00)
        else:
            leaves.append(int(encode_leaf(flags[i, j, kz], values[i, j, kz])))
    # post-order: leaves (children) at 1..8, then the root's slots at 9..16; root at 0
    nodes = [_inner(0xFF, 9)] + leaves + list(range(1, 9))
    expect = np.where(np.isinf(values) & (flags != 0), 0.0, values)
    return _world(nodes, res=2, bmin=(-1.0, 0.0, 2.0), voxel=0.5), expect, flags


def test_other_dialect_loads_and_answers(tmp_path):
    world, expect, flags = _post_order_unsigned_world()
    path = save_world(world, tmp_path / "other.gmdag")
    back = load_world(path)
    assert back.to_bytes() == path.read_bytes()
    centres = np.array(
        [
            [-1.0 + 0.5 * (i + 0.5), 0.5 * (j + 0.5), 2.0 + 0.5 * (k + 0.5)]
            for i in range(2)
            for j in range(2)
            for k in range(2)
        ]
    )
    d, s = distance(back, centres)
    np.testing.assert_array_equal(d, expect.reshape(-1).astype(np.float32))
    np.testing.assert_array_equal(s, flags.reshape(-1))
    # between the centres: trilinear interpolation, computed here independently
    rng = np.random.default_rng(3)
    t = rng.uniform(0, 1, size=(200, 3))
    pts = centres[0] + 0.5 * t
    d, _ = distance(back, pts)
    w = np.stack([1 - t, t], axis=2)  # (N, 3 axes, 2)
    ref = np.einsum("ni,nj,nk,ijk->n", w[:, 0], w[:, 1], w[:, 2], expect)
    np.testing.assert_allclose(d, ref, rtol=1e-6, atol=1e-6)


def test_inf_quirk_and_decoders():
    w = np.array([(1 << 63) | (3 << 16) | 0x7C00, (1 << 63) | 0x7C00, int(encode_leaf(7, -0.5))], dtype=np.uint64)
    d, s = gmdag.decode_leaf(w)
    assert d[0] == 0.0 and s[0] == 3  # flagged +inf reads as 0
    assert d[1] == np.inf and s[1] == 0  # unflagged +inf stays (far)
    assert d[2] == -0.5 and s[2] == 7


@njit(cache=True)
def _encode_halves(x, mode):
    out = np.empty(x.shape[0], np.int64)
    for i in range(x.shape[0]):
        out[i] = gmdag.nb_half_bits(x[i], mode)
    return out


def test_half_encoder_matches_numpy():
    enc = _encode_halves
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, 50000) * 10.0 ** rng.integers(-7, 5, 50000)
    x = x[np.abs(x) < 65000]
    # every finite half, the exact midpoints between neighbours (ties) and their neighbours
    h = gmdag.HALF_TO_FLOAT[: 0x7BFF + 1].astype(np.float64)
    mid = (h[:-1] + h[1:]) / 2
    x = np.concatenate([x, h, -h, mid, -mid, np.nextafter(mid, 0), np.nextafter(mid, np.inf)])
    near = enc(x, gmdag.ROUND_NEAREST).astype(np.uint16)
    ref = x.astype(np.float16).view(np.uint16)
    ref = np.where(ref == 0x8000, 0, ref)  # -0 is written as +0
    np.testing.assert_array_equal(near, ref)
    tz = enc(x, gmdag.ROUND_TOWARD_ZERO).astype(np.uint16)
    back = gmdag.HALF_TO_FLOAT[tz].astype(np.float64)
    assert np.all(np.abs(back) <= np.abs(x))
    assert np.all(np.abs(back - x) <= np.abs(x) * 2.0**-10 + 2.0**-24)


def test_an_interrupted_save_leaves_the_old_world_and_sidecar_whole(tmp_path, monkeypatch):
    """save_world replaces the world file and its sidecar each in one rename: a save that fails at the
    renames leaves the files that were there, byte for byte, and no temporary file."""
    import os

    import navi_nb.files

    path = tmp_path / "w.gmdag"
    old = compiled_scene("box", 16)
    gmdag.save_world(old, path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert set(before) == {"w.gmdag", "w.gmdag.json"}

    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(navi_nb.files.os, "replace", refuse)
    with pytest.raises(OSError):
        gmdag.save_world(compiled_scene("pillars", 16), path)
    monkeypatch.setattr(navi_nb.files.os, "replace", os.replace)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
