"""Where a file's samples are: centre-sampled (navi_nb) or corner-sampled (other writers).

A corner-sampled file is written here from an analytic sphere in the unsigned,
"+inf for zero" style of the reference writer (distances sampled at each
voxel's minimum corner ``bmin + i * voxel``, no navi_nb sidecar key), then
traced and queried against the exact answers.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from sense_helpers import dag_from_grid, ray_sphere

from navi_nb.env.motion import clearance_distances
from navi_nb.sense.sensor import Sensor
from navi_nb.sense.tracer import trace
from navi_nb.world import gmdag
from navi_nb.world.layout import field_origin, sample_offset
from navi_nb.world.query import distance
from navi_nb.world.sidecar import sidecar_path

RES = 64
VOXEL = 0.125
BMIN = np.array([-1.0, 0.5, 2.0])
CENTRE = BMIN + np.array([4.03, 3.97, 4.11])
RADIUS = 2.2
INF_HALF = np.uint64(0x7C00)


def _corner_sampled_world(signed=False):
    """The reference writer's dialect: |distance| at the voxel corners, 0 written as +inf in
    near-surface leaves, free blocks far from the surface pruned (``signed``: the same with
    signed distances)."""
    i = np.arange(RES) * VOXEL
    grid = np.stack(np.meshgrid(i, i, i, indexing="ij"), axis=-1) + BMIN  # corners, not centres
    d = np.linalg.norm(grid - CENTRE, axis=-1) - RADIUS
    if not signed:
        d = np.abs(d)
    d[np.abs(d) < 0.25 * VOXEL] = 0.0  # exact zeros, which this writer stores as +inf
    sem = (np.abs(d) < 2 * VOXEL).astype(np.int64)
    world = dag_from_grid(d, sem, voxel_size=VOXEL, bmin=BMIN)
    nodes = world.nodes.copy()
    leaf = gmdag.is_leaf(nodes)
    zero = leaf & ((nodes & np.uint64(0xFFFF)) == 0) & (((nodes >> np.uint64(16)) & np.uint64(0xFFFF)) != 0)
    assert zero.sum() > 100
    nodes[zero] |= INF_HALF
    return gmdag.World(resolution=RES, bmin=world.bmin, voxel_size=VOXEL, nodes=nodes, source="<corner>")


@pytest.fixture(scope="module")
def corner_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("corner") / "sphere.gmdag"
    gmdag.save_world(_corner_sampled_world(), path, sidecar=False)  # no sidecar: another writer's file
    return path


@pytest.fixture(scope="module")
def signed_corner_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("corner") / "sphere_signed.gmdag"
    gmdag.save_world(_corner_sampled_world(signed=True), path, sidecar=False)
    return path


def _rays():
    rng = np.random.default_rng(4)
    pts = []
    while len(pts) < 40:
        p = BMIN + rng.uniform(0.6, RES * VOXEL - 0.6, 3)
        if np.linalg.norm(p - CENTRE) > RADIUS + 0.4:
            pts.append(p)
    origins = np.array(pts, np.float32)
    yaws = rng.uniform(-np.pi, np.pi, len(pts)).astype(np.float32)
    return origins, yaws, Sensor(48, 12)


def _world_dirs(sensor, yaws):
    """(A, R, 3) world-frame unit directions (yaw turns right: forward (0,0,-1) -> (sin, 0, -cos))."""
    d = np.asarray(sensor.flat_directions, np.float64)
    c, s = np.cos(yaws.astype(np.float64)), np.sin(yaws.astype(np.float64))
    x = d[None, :, 0] * c[:, None] - d[None, :, 2] * s[:, None]
    z = d[None, :, 0] * s[:, None] + d[None, :, 2] * c[:, None]
    return np.stack([x, np.broadcast_to(d[None, :, 1], x.shape), z], axis=-1)


def _errors(world):
    origins, yaws, sensor = _rays()
    depth, _sem, hit = trace(world, origins, yaws, sensor, 10.0)
    dirs = _world_dirs(sensor, yaws)
    exact = ray_sphere(origins.astype(np.float64)[:, None, :], dirs, CENTRE, RADIUS)
    depth = depth.reshape(len(origins), -1).astype(np.float64)
    hit = hit.reshape(len(origins), -1)
    seen = exact < 9.0
    assert seen.sum() > 2000
    err = np.where(hit[seen], depth[seen] - exact[seen], np.inf) / VOXEL
    return err


def test_file_without_navi_nb_key_reads_corner_sampled(corner_file):
    world = gmdag.load_world(corner_file)
    assert world.sidecar["sample"] == "corner" and sample_offset(world) == 0.5
    assert np.array_equal(field_origin(world), world.bmin.astype(np.float64) - 0.5 * VOXEL)
    err = _errors(world)
    # read at its samples the depth is unbiased; the spread left is the unsigned field's: its
    # trough near a surface is refined from points about a voxel out, so rays that meet the
    # sphere at shallow angles (cosine below 0.2) are the ones more than a voxel off
    assert abs(np.median(err)) <= 0.1, np.median(err)
    assert np.mean(np.abs(err) <= 1.0) >= 0.97, np.mean(np.abs(err) <= 1.0)
    assert np.mean(np.abs(err) <= 2.0) >= 0.99, np.mean(np.abs(err) <= 2.0)


def test_unsigned_refinement_backs_off_from_the_trough(corner_file):
    """The unsigned field's refinement (a bent extrapolation from points outside its trough)
    against the plain hit rule without it (``refine=0``): closer to the exact cast."""
    world = gmdag.load_world(corner_file)
    origins, yaws, sensor = _rays()
    exact = ray_sphere(origins.astype(np.float64)[:, None, :], _world_dirs(sensor, yaws), CENTRE, RADIUS)
    seen = exact < 9.0
    within = []
    for refine in (0, 1):
        depth, _sem, hit = trace(world, origins, yaws, sensor, 10.0, refine=refine)
        depth = depth.reshape(len(origins), -1).astype(np.float64)
        assert hit.reshape(len(origins), -1)[seen].all()
        within.append(np.mean(np.abs(depth[seen] - exact[seen]) <= VOXEL))
    assert within[1] >= within[0] + 0.1, within


def test_signed_corner_file_is_exact_to_a_voxel(signed_corner_file):
    world = gmdag.load_world(signed_corner_file)
    err = _errors(world)
    assert abs(np.median(err)) <= 0.1, np.median(err)
    assert np.mean(np.abs(err) <= 1.0) >= 0.97, np.mean(np.abs(err) <= 1.0)


def test_reading_corner_files_at_centres_is_half_a_voxel_off(corner_file, signed_corner_file):
    """The same files read as centre-sampled (what reading other writers' files at centres did):
    the sphere moves by half a voxel along the diagonal, depths are off by about half a voxel."""
    for path, right_within_1 in ((corner_file, 0.97), (signed_corner_file, 0.97)):
        world = gmdag.load_world(path)
        world.sidecar["sample"] = "centre"
        err = _errors(world)
        assert np.median(np.abs(err)) >= 0.45, np.median(np.abs(err))
        assert np.mean(np.abs(err) <= 1.0) <= right_within_1 - 0.1
        world.sidecar["sample"] = "corner"
        assert np.median(np.abs(_errors(world))) <= 0.3


def test_point_query_and_collision_read_at_the_samples(corner_file):
    world = gmdag.load_world(corner_file)
    rng = np.random.default_rng(9)
    # points within 3 voxels of the surface, outside the sphere
    u = rng.normal(size=(500, 3))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    p = CENTRE + u * (RADIUS + rng.uniform(0.5, 3.0, (500, 1)) * VOXEL)
    d, _ = distance(world, p)
    exact = np.linalg.norm(p - CENTRE, axis=1) - RADIUS
    assert np.median(np.abs(d - exact)) <= 0.15 * VOXEL
    # the samples themselves: at a sample point the query returns the sample (no interpolation error)
    i = np.arange(RES)
    k = np.stack(np.meshgrid(i, i, i, indexing="ij"), axis=-1).reshape(-1, 3)
    corner_d = np.abs(np.linalg.norm(BMIN + k * VOXEL - CENTRE, axis=1) - RADIUS)
    near = k[(corner_d > 0.3 * VOXEL) & (corner_d < 1.5 * VOXEL)]  # stored leaves (not pruned, not zero)
    pts = BMIN + near[rng.choice(len(near), 50, replace=False)] * VOXEL
    d2, _ = distance(world, pts)
    assert np.allclose(d2, np.abs(np.linalg.norm(pts - CENTRE, axis=1) - RADIUS), atol=2e-3)
    # the collision's clearance reads the same field (float64; the query rounds to float32)
    assert np.array_equal(np.float32(clearance_distances(world, p)), d)


def test_navi_nb_files_record_their_convention(tmp_path):
    from navi_nb.world.compiler import compile_scene

    world = compile_scene("box", 16)
    assert world.sidecar["sample"] == "centre"
    path = gmdag.save_world(world, tmp_path / "box.gmdag")
    assert json.loads(sidecar_path(path).read_text())["sample"] == "centre"
    assert gmdag.load_world(path).sidecar["sample"] == "centre"
    # a navi_nb file written before the key existed (it has the compiler's key): centre
    side = dict(world.sidecar)
    del side["sample"]
    sidecar_path(path).write_text(json.dumps(side))
    old = gmdag.load_world(path)
    assert old.sidecar["sample"] == "centre" and sample_offset(old) == 0.0
    # an in-memory world saved by navi_nb: centre, and it reads back the same
    bare = gmdag.World(resolution=world.resolution, bmin=world.bmin, voxel_size=world.voxel_size, nodes=world.nodes)
    p2 = gmdag.save_world(bare, tmp_path / "bare.gmdag")
    assert gmdag.load_world(p2).sidecar["sample"] == "centre"
    # no sidecar at all: another writer's file, corner-sampled
    sidecar_path(p2).unlink()
    assert gmdag.load_world(p2).sidecar["sample"] == "corner"
    # a bad value is refused, naming the sidecar
    sidecar_path(p2).write_text(json.dumps({"sample": "middle"}))
    with pytest.raises(gmdag.GmdagError, match="sample"):
        gmdag.load_world(p2)


def test_written_corner_sampled_the_field_is_the_same(tmp_path):
    """navi_nb's compiled world written corner-sampled: the same node words (same size), bmin half a
    voxel up, and every reader of navi_nb finds the same field: depths and point distances
    identical to the centre-sampled file's; the samples sit where a corner-reading writer puts them."""
    from navi_nb.world.compiler import compile_scene

    world = compile_scene("house", 64)
    centre = gmdag.load_world(gmdag.save_world(world, tmp_path / "centre.gmdag"))
    corner = gmdag.load_world(gmdag.save_world(world, tmp_path / "corner.gmdag", sample="corner"))
    assert centre.sidecar["sample"] == "centre" and corner.sidecar["sample"] == "corner"
    assert np.array_equal(corner.nodes, centre.nodes)
    assert (tmp_path / "corner.gmdag").stat().st_size == (tmp_path / "centre.gmdag").stat().st_size
    v = float(np.float32(world.voxel_size))
    assert np.array_equal(corner.bmin.astype(np.float64), world.bmin.astype(np.float64) + 0.5 * v)
    assert np.array_equal(field_origin(corner), field_origin(centre))
    # a corner reader's sample point of voxel i is bmin + i * voxel: the compiler's voxel centre
    i = np.array([3, 17, 40])
    assert np.allclose(corner.bmin + i * v, world.bmin + (i + 0.5) * v, atol=0)
    origins = world.spawn_points[:6].astype(np.float32)
    yaws = np.linspace(-3, 3, len(origins)).astype(np.float32)
    a = trace(centre, origins, yaws, Sensor(32, 8), 12.0)
    b = trace(corner, origins, yaws, Sensor(32, 8), 12.0)
    for x, y in zip(a, b):
        assert np.array_equal(x, y)
    rng = np.random.default_rng(3)
    pts = rng.uniform(world.bmin + 1.0, world.bmax - 1.0, (200, 3))
    assert np.array_equal(distance(centre, pts)[0], distance(corner, pts)[0])
    # and back: written centre-sampled again, the original header
    again = gmdag.with_sample_convention(corner, "centre")
    assert np.array_equal(again.bmin, world.bmin) and again.sidecar["sample"] == "centre"
    with pytest.raises(gmdag.GmdagError, match="sample convention"):
        gmdag.with_sample_convention(world, "middle")
