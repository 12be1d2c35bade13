"""What an actor senses and what it bumps into are one field.

The tracer (sense/), the point queries and the collision (world/query.py,
env/motion.py) all read the world through ``navi_nb/world/field.py``. Checked
here from outside: a refined hit point lies on the zero of the queried field,
and an actor driven straight at a wall stops where its own rays said the wall
was, less its radius and margin. Also the contract for leaves that hold no
finite distance (hand-made worlds that skip validation).
"""

import math

import numpy as np
import pytest
from env_helpers import act, make_env, place, scene_world

from navi_nb.sense.sensor import Sensor
from navi_nb.sense.tracer import trace
from navi_nb.world import gmdag
from navi_nb.world.query import distance


@pytest.mark.parametrize("name", ["house", "maze"])
def test_refined_hits_lie_on_the_queried_surface(name):
    world = scene_world(name)
    voxel = float(world.voxel_size)
    sensor = Sensor(32, 9, fov_up=0.6, fov_down=-0.6)
    rng = np.random.default_rng(2)
    sp = np.asarray(world.spawn_points, np.float64)
    origins = sp[rng.choice(len(sp), 12, replace=False)].astype(np.float32)
    yaws = rng.uniform(-math.pi, math.pi, 12).astype(np.float32)
    depth, _sem, hit = trace(world, origins, yaws, sensor, 12.0, refine=3)
    assert hit.mean() > 0.9
    wdir = sensor.world_directions(yaws).astype(np.float64).reshape(12, -1, 3)
    d = depth.reshape(12, -1).astype(np.float64)
    h = hit.reshape(12, -1)
    pts = origins.astype(np.float64)[:, None, :] + d[..., None] * wdir
    q, _ = distance(world, pts[h])
    q = np.abs(q.astype(np.float64)) / voxel
    # where the refinement converged (most hits) it stopped within 1e-3 voxel of the zero of
    # the field the query reads; the rest keep the march's depth, within the tracer's
    # accuracy (a voxel plus epsilon, docs/SENSING.md)
    info = np.quantile(q, [0.5, 0.9, 0.99, 1.0])
    assert np.median(q) < 1e-3 and np.mean(q < 0.01) > 0.9, info
    assert np.quantile(q, 0.99) < 0.5 and q.max() <= 1.5, info


@pytest.mark.parametrize("yaw", [0.0, math.pi / 2, math.pi, -math.pi / 2])
def test_an_actor_stops_where_its_rays_saw_the_wall(yaw):
    env = make_env("box", n=3)
    env.reset()
    starts = np.array([[0.0, 1.5, 0.0], [1.3, 1.0, -0.7], [-2.1, 2.0, 1.6]], np.float32)
    yaws = np.full(3, yaw, np.float32)
    place(env, starts, yaws)
    forward = np.array([[0.0, 0.0, -1.0]], np.float32)
    sensor = Sensor(1, 1, fov_up=0.0, fov_down=0.0)
    np.testing.assert_allclose(sensor.flat_directions, forward, atol=1e-7)
    depth, _sem, hit = trace(env.world, starts, yaws, sensor, 50.0)
    assert hit.all()
    for _ in range(200):
        env.step(act(3, f=1.0))
    fwd = np.array([math.sin(yaw), 0.0, -math.cos(yaw)])
    moved = (env.positions.astype(np.float64) - starts) @ fwd
    stand_off = env.config.radius + env.margin
    voxel = float(env.world.voxel_size)
    seen = depth.reshape(-1).astype(np.float64) - stand_off
    # it never walks into the wall it saw, and stops no further from it than the tracer's
    # depth error on a head-on plane (half a voxel, where the refinement keeps the march's depth)
    assert np.all(moved <= seen + 0.02 * voxel), (moved, seen)
    assert np.all(moved >= seen - 0.52 * voxel), (moved, seen)


def _box_with_leaves(value):
    """The built-in box at 64 with every negative leaf's distance replaced by ``value``
    (bits written directly, validation skipped as a hand-made file could)."""
    w = scene_world("box", 64)
    nodes = np.array(w.nodes, copy=True)
    leaf = gmdag.is_leaf(nodes)
    dist, _ = gmdag.decode_leaf(nodes)
    neg = leaf & (dist < 0)
    assert neg.any()
    bits = np.array([value], np.float16).view(np.uint16)[0]
    nodes[neg] = (nodes[neg] & ~np.uint64(0xFFFF)) | np.uint64(bits)
    bad = gmdag.World(resolution=w.resolution, bmin=w.bmin, voxel_size=w.voxel_size, nodes=nodes, source="<hand-made>")
    bad.deep_checked = True  # skip validation: the readers must cope on their own
    return bad


@pytest.mark.parametrize("value", [-np.inf, np.inf, np.nan])
@pytest.mark.parametrize("refine", [0, 1, 3])
def test_non_finite_leaves_give_finite_depths_and_queries(value, refine):
    world = _box_with_leaves(value)
    centre = ((world.bmin + world.bmax) / 2).astype(np.float32)[None]
    sensor = Sensor(16, 8)
    max_d = 30.0
    depth, _sem, hit = trace(world, centre, np.zeros(1, np.float32), sensor, max_d, refine=refine)
    assert np.all(np.isfinite(depth)) and depth.min() >= 0.0 and depth.max() <= max_d
    rng = np.random.default_rng(1)
    pts = rng.uniform(world.bmin - 1.0, world.bmax + 1.0, (3000, 3))
    d, _ = distance(world, pts)
    assert np.all(np.isfinite(d))
    if value == -np.inf:
        # solid stays solid: the infinite leaves read as the most negative half (-65504 metres-equivalent)
        assert hit.all()
        ref, _ = distance(scene_world("box", 64), pts)
        assert np.all(d[ref < -0.5] < 0.0)
        assert d.min() >= -65504.0 * 1.0001
