"""Point queries: what each region answers, bad input, the inlinable scalar query.

The rule (``navi_nb/world/field.py``) is checked against ``reference_field``, a
plain-Python reading of the node words (tests/sense_helpers.py)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import compiled_scene, scene
from numba import njit
from sense_helpers import reference_field, sphere_world

from navi_nb.errors import NaviError
from navi_nb.world import gmdag
from navi_nb.world.compiler import compile_field
from navi_nb.world.query import QueryError, distance, query_point, world_arrays


class SlabField:
    """A tilted plane: solid below, free above. Exact and linear, so the
    trilinear interpolation in voxel leaves must reproduce it exactly."""

    n = np.array([0.3, 0.8, -0.2]) / np.linalg.norm([0.3, 0.8, -0.2])
    bounds_min = np.array([-1.0, -1.0, -1.0])
    bounds_max = np.array([1.0, 1.0, 1.0])

    def evaluate(self, p):
        return p @ self.n - 0.05, np.full(len(p), 2, np.int32)


def test_planes_are_exact_near_the_surface():
    f = SlabField()
    world = compile_field(f, f.bounds_min, f.bounds_max, 64)
    h = world.voxel_size
    rng = np.random.default_rng(0)
    p = rng.uniform(-0.9, 0.9, size=(20000, 3))
    t = f.evaluate(p)[0]
    p = p[np.abs(t) < 2 * h]
    t = t[np.abs(t) < 2 * h]
    d, s = distance(world, p)
    # only the float16 storage rounds (relative 2**-11 of values below 3 voxels)
    np.testing.assert_allclose(d, t, atol=3 * h * 2.0**-10)
    assert np.all(s[np.abs(t) < h] == 2)


def _pruned_world():
    """res 4, 1 m voxels: octant 0 pruned, octant 1 a coarse free leaf (1.5 m),
    the rest solid leaves (-0.5 m)."""
    free = int(gmdag.encode_leaf(0, 1.5))
    solid = int(gmdag.encode_leaf(0, -0.5))
    nodes = [int(gmdag.encode_inner(0xFE, 3)), free, solid] + [1] + [2] * 6
    return gmdag.World(
        resolution=4, bmin=np.array([10.0, 0.0, 0.0], np.float32), voxel_size=1.0, nodes=np.array(nodes, np.uint64)
    )


def test_pruned_octant_coarse_leaf_and_outside():
    """Every point interpolates the values at the 8 voxel centres around it (worked by hand:
    centres at 0.5 and 1.5 m of a [0,2] m octant read 0.5 m: their distance to its faces)."""
    w = _pruned_world()
    # all 8 corners in the pruned octant [10,12]x[0,2]x[0,2]: 0.5 each
    p = np.array([[10.5, 1.0, 1.2], [11.0, 1.0, 1.0], [11.9, 0.3, 1.0]])
    d, s = distance(w, p)
    # the third point: x between the centres 1.5 (pruned, 0.5) and 2.5 (the free leaf, 1.5), weight 0.4
    np.testing.assert_allclose(d, [0.5, 0.5, 0.6 * 0.5 + 0.4 * 1.5], atol=1e-6)
    assert s.tolist() == [0, 0, 0]
    d, _ = distance(w, np.array([[13.0, 1.0, 1.0], [13.0, 3.0, 3.0]]))
    np.testing.assert_allclose(d, [1.5, -0.5])  # all corners in one coarse leaf: its value
    # outside the cube: free face -> distance to the cube plus the value there;
    # solid face -> the (negative) value there
    d, s = distance(w, np.array([[13.0, -2.0, 1.0], [13.0, 6.0, 3.0], [8.0, 1.0, 1.0]]))
    np.testing.assert_allclose(d, [2.0 + 1.5, -0.5, 2.0 + 0.5], atol=1e-5)
    assert s.tolist() == [0, 0, 0]


@pytest.mark.parametrize("name", ["pruned", "one_voxel", "sphere", "house64"])
def test_queries_follow_the_rule_written_out_over_the_words(name):
    if name == "pruned":
        w = _pruned_world()
    elif name == "one_voxel":  # the root is a leaf: no neighbour to interpolate with
        w = gmdag.World(
            resolution=1,
            bmin=np.array([1.0, 2.0, 3.0], np.float32),
            voxel_size=0.5,
            nodes=np.array([int(gmdag.encode_leaf(4, 0.75))], np.uint64),
        )
    elif name == "sphere":
        w = sphere_world(32, radius=9.0, voxel_size=0.5, bmin=(-3.0, 1.0, 2.0))[0]
    else:
        w = compiled_scene("house", 64)
    rng = np.random.default_rng(11)
    lo, hi = np.asarray(w.bmin, np.float64), np.asarray(w.bmax, np.float64)
    p = rng.uniform(lo - 0.1 * (hi - lo), hi + 0.1 * (hi - lo), (400, 3))
    d, s = distance(w, p)
    want = [reference_field(w, q) for q in p]
    np.testing.assert_allclose(d, [v for v, _ in want], rtol=1e-6, atol=1e-6 * float(w.voxel_size))
    assert s.tolist() == [k for _, k in want]


def test_semantic_ids_are_surface_classes():
    world = compiled_scene("box", 128)
    s = scene("box")
    mid = (s.bounds_min + s.bounds_max) / 2
    p = np.array(
        [[mid[0], 0.05, mid[2]], [mid[0], 2.95, mid[2]], [s.bounds_min[0] + 0.05, 1.5, mid[2]], [mid[0], 1.5, mid[2]]]
    )
    _, sem = distance(world, p)
    assert [s.class_names[k] for k in sem] == ["floor", "ceiling", "wall", "none"]


def test_dtypes_and_empty():
    world = compiled_scene("house", 64)
    p = scene("house").spawn_points
    d32, s32 = distance(world, p.astype(np.float32))
    d64, s64 = distance(world, p.astype(np.float64))
    assert d32.dtype == np.float32 and s32.dtype == np.uint16
    np.testing.assert_allclose(d32, d64, atol=1e-6)
    d, s = distance(world, np.zeros((0, 3)))
    assert d.shape == (0,) and s.shape == (0,)
    d, _ = distance(world, p[:5].astype(np.int64) * 0 + np.array([0, 1, 0]))  # integers are accepted
    assert d.shape == (5,)


@pytest.mark.parametrize(
    "points, match",
    [
        (np.zeros((4, 2)), "shaped"),
        (np.zeros(3), "shaped"),
        (np.array([[0.0, np.nan, 0.0]]), "point 0 is not finite"),
        (np.array([[0.0, 0.0, 0.0], [np.inf, 0, 0]]), "point 1 is not finite"),
        (np.array([["a", "b", "c"]]), "real numbers"),
    ],
)
def test_bad_points(points, match):
    world = compiled_scene("house", 64)
    with pytest.raises(QueryError, match=match):
        distance(world, points)
    assert issubclass(QueryError, NaviError)


def test_bad_world_is_rejected_before_querying():
    w = gmdag.World(
        resolution=2,
        bmin=np.zeros(3, np.float32),
        voxel_size=1.0,
        nodes=np.array([int(gmdag.encode_inner(1, 1)), 9], np.uint64),
    )
    with pytest.raises(gmdag.GmdagError, match="out of range"):
        distance(w, np.zeros((1, 3)))
    with pytest.raises(QueryError, match="World"):
        distance("house.gmdag", np.zeros((1, 3)))


@njit(cache=True)
def _user_kernel(field, pts, out):
    # what the environment's collision kernel does: inline the scalar query
    for i in range(pts.shape[0]):
        d, s = query_point(field, pts[i, 0], pts[i, 1], pts[i, 2])
        out[i] = d


def test_query_point_inlines_into_other_kernels():
    world = compiled_scene("house", 64)
    rng = np.random.default_rng(5)
    pts = rng.uniform(world.bmin, world.bmax, size=(2000, 3))
    out = np.empty(len(pts), np.float32)
    _user_kernel(world_arrays(world), pts, out)
    np.testing.assert_array_equal(out, distance(world, pts)[0])
    # large batches take the parallel kernel: same answers
    big = rng.uniform(world.bmin, world.bmax, size=(5000, 3))
    d_big, _ = distance(world, big)
    d_small = np.concatenate([distance(world, big[i : i + 100])[0] for i in range(0, 5000, 100)])
    np.testing.assert_array_equal(d_big, d_small)
