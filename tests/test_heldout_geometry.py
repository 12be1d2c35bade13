"""Held out by geometry (``navi_nb.world.fingerprint``): a world is the same world at another resolution,
sample convention or header, with a leaf changed, or exported as a mesh and compiled again.

The fingerprint is checked against the analytic scene's sign at the lattice points.
"""

import numpy as np
import pytest

from navi_nb.world.compiler import compile_scene
from navi_nb.world.fingerprint import (
    CELL,
    SAMPLE_AT,
    TOLERANCE,
    Fingerprint,
    difference,
    fingerprint,
    from_record,
    matches,
)
from navi_nb.world.gmdag import World, decode_leaf, encode_leaf, is_leaf, world_digest
from navi_nb.world.scenes import get_scene


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("NAVI_NB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def unnamed(world) -> World:
    """`world` with a sidecar that names no scene or seed (its sample convention kept)."""
    side = {k: v for k, v in world.sidecar.items() if k not in ("scene", "seed", "entry_digest")}
    return World(world.resolution, world.bmin.copy(), world.voxel_size, world.nodes.copy(), sidecar=side)


def one_leaf_changed(world) -> World:
    """`world` (unnamed) with the distance of its first leaf word holding a nonzero distance scaled by 0.9."""
    out = unnamed(world)
    leaves = np.nonzero(is_leaf(out.nodes))[0]
    dist, sem = decode_leaf(out.nodes[leaves])
    k = leaves[np.nonzero(dist != 0)[0][0]]
    d, s = decode_leaf(out.nodes[k : k + 1])
    out.nodes[k] = encode_leaf(int(s[0]), float(d[0]) * 0.9)
    assert out.nodes[k] != world.nodes[k]
    return out


# ------------------------------------------------------------ the fingerprint
def test_fingerprint_is_the_scene_sign_at_the_lattice():
    """At resolution 64 the fingerprint is the analytic field's sign at the points (i + 0.375) * 0.5 m of the
    16 m cube (all but a few samples by convex edges), and two different houses are far apart."""
    world = compile_scene("house", 64, 3)
    fp = fingerprint(world)
    # the cube is [-8, 8] x [-6.5, 9.5] x [-8, 8]: lattice points -16..15, -13..18, -16..15
    assert fp.lo == (-16, -13, -16) and fp.shape == (32, 32, 32)
    axes = [(np.arange(32) + lo + SAMPLE_AT) * CELL for lo in fp.lo]
    pts = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
    d, _ = get_scene("house", 3).evaluate(pts)
    exact = (d < 0).reshape(32, 32, 32)
    assert np.count_nonzero(fp.solid != exact) <= 0.002 * exact.size
    assert difference(fp, Fingerprint(fp.lo, exact)) <= TOLERANCE
    other = fingerprint(compile_scene("house", 64, 4))
    assert difference(fp, other) > 4 * TOLERANCE and not matches(fp, other)
    # the differing samples over the smaller phase (here the free space: samples free in either house)
    differ = np.count_nonzero(fp.solid != other.solid)
    assert differ / np.count_nonzero(~fp.solid | ~other.solid) == pytest.approx(difference(fp, other), rel=1e-12)
    # the record round-trips, and a damaged one is refused by name
    back = from_record(fp.to_record())
    assert back.lo == fp.lo and np.array_equal(back.solid, fp.solid)
    from navi_nb.world.fingerprint import FingerprintError

    rec = fp.to_record()
    for bad in ({**rec, "solid": rec["solid"][:-8]}, {**rec, "shape": [32, 32]}, {**rec, "version": 0}):
        with pytest.raises(FingerprintError, match="worlds.json world 3"):
            from_record(bad, "worlds.json world 3")


def test_same_world_matches_at_other_resolutions_conventions_and_leaves():
    a = compile_scene("house", 64, 3)
    fa = fingerprint(a)
    for b in (compile_scene("house", 32, 3), compile_scene("house", 128, 3)):
        assert matches(fa, fingerprint(b)), difference(fa, fingerprint(b))
    # navi-nb compile's corner-sampled form: the same samples, bit for bit
    from navi_nb.world.gmdag import with_sample_convention

    corner = with_sample_convention(a, "corner")
    assert corner.bmin[0] != a.bmin[0] and np.array_equal(fingerprint(corner).solid, fa.solid)
    changed = one_leaf_changed(a)
    assert world_digest(changed) != world_digest(unnamed(a)) and matches(fa, fingerprint(changed))


def test_mesh_of_a_world_compiled_again_matches(tmp_path):
    """The box scene written as a mesh (the cube's solid: the cube's faces and the room's, facing in) and
    compiled again at another resolution, with a mesh's margin of empty space around the cube."""
    from navi_nb.world.compiler import compile_mesh
    from navi_nb.world.mesh_io import Mesh, write_obj
    from navi_nb.world.mesh_scene import box_mesh, merge_meshes

    scene = compile_scene("box", 32)
    lo, side = np.asarray(scene.bmin, np.float64), 32 * float(scene.voxel_size)
    room = box_mesh((-4.0, 0.0, -3.0), (4.0, 3.0, 3.0))
    mesh = merge_meshes([box_mesh(lo, lo + side), Mesh(room.vertices, room.faces[:, ::-1].copy())])
    write_obj(tmp_path / "box.obj", mesh.vertices, mesh.faces)
    world = compile_mesh(tmp_path / "box.obj", 64)
    fs, fm = fingerprint(scene), fingerprint(world)
    assert fm.shape != fs.shape and matches(fs, fm), difference(fs, fm)
    assert not matches(fingerprint(compile_scene("house", 32, 1)), fm)
