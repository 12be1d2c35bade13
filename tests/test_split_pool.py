"""A world whose free space is split (two closed rooms; a house at resolution 32, whose grid closes its
doorways): the spawn pool is one component, spawn points in the others are dropped and said so in one line,
every drawn goal is reachable from its spawn, and a pair no path joins is unknown (NaN), never the straight
line, in the path search, SPL, the step limit and evaluation's difficulty bins."""

import functools

import numpy as np
import pytest
from scipy import ndimage

from navi_nb.env import pool_file, spawn
from navi_nb.env.nav_env import NavEnv
from navi_nb.sense.sensor import Sensor

WALL_X = (0.7, 1.3)  # the sealed wall between the rooms: the left room is x < 0.7, the right x > 1.3


@functools.cache
def two_rooms():
    """(World, Scene): a room 8 x 4 m cut by a floor-to-ceiling wall without a door into a left room of
    4.7 m and a right room of 2.7 m, both with spawn points; compiled at 64."""
    from navi_nb.world import sdf
    from navi_nb.world.compiler import compile_scene
    from navi_nb.world.scenes import EMBED, HEIGHT, WALL, make_scene

    wall = sdf.box_min_max([WALL_X[0], -EMBED, -2.0 - EMBED], [WALL_X[1], HEIGHT + EMBED, 2.0 + EMBED], WALL)
    scene = make_scene("two-rooms", [-4.0, 0.0, -2.0], [4.0, HEIGHT, 2.0], [wall])
    return compile_scene(scene, 64), scene


def make(world, n=64, **cfg):
    return NavEnv(world, n, Sensor(8, 2), seed=5, **cfg)


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NAVI_NB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "spawn"


def free_cells(sp):
    """(X*Y*Z,) bool: the cells whose centre has the pool's clearance, by the sampler's own query."""
    centres = spawn.grid_centres(sp.lo, sp.dims, sp.cell)
    return np.asarray(sp.distance_fn(centres)) >= sp.radius + sp.margin + 0.5 * sp.cell, centres


def test_two_closed_rooms_pool_only_the_larger_room():
    world, scene = two_rooms()
    env = make(world)
    sp = env._spawner
    free, centres = free_cells(sp)
    left, right = free & (centres[:, 0] < WALL_X[0]), free & (centres[:, 0] > WALL_X[1])
    assert left.sum() > right.sum() > 0  # both rooms have free cells: the old flood took both
    assert np.array_equal(sp.reach, left)  # the pool: the whole left room and nothing else
    listed = np.asarray(scene.spawn_points, np.float64)
    n_right = int((listed[:, 0] > WALL_X[1]).sum())
    assert n_right > 0 and np.array_equal(sp.spawn_points, listed[listed[:, 0] < WALL_X[0]].astype(np.float32))
    (note,) = env.pool_notes
    assert note.startswith("world ") and "2 parts" in note and f"drops the {n_right} spawn point(s)" in note
    assert f"{int(left.sum())} of their {int(left.sum() + right.sum())} cells" in note


@pytest.mark.parametrize("draw", [{}, {"spawn": "points"}, {"goal_distance": "geodesic", "goal_max_distance": 4.0}])
def test_two_closed_rooms_every_goal_is_reachable(draw):
    """Spawns and goals (spawn first, from the listed points, or goal first) all in the larger room, with a
    finite shortest path no shorter than the straight line; before, about half the goals lay in the other
    room and SPL divided by the straight line through the wall."""
    world, _scene = two_rooms()
    env = make(world, **draw)
    for seed in range(3):
        env.reset(seed=seed)
        pos, goal = env.positions.astype(np.float64), env.goals.astype(np.float64)
        assert np.all(pos[:, 0] < WALL_X[0]) and np.all(goal[:, 0] < WALL_X[0])
        paths = np.asarray(env.shortest_paths)
        assert np.all(np.isfinite(paths))
        assert np.all(paths >= np.linalg.norm(goal - pos, axis=1) - 1e-9)


def test_a_pair_no_path_joins_is_unknown_not_the_straight_line():
    """Across the sealed wall, on a grid that pools both rooms: NaN. In one room: the straight line (in sight)."""
    world, _scene = two_rooms()
    sp = make(world, n=1)._spawner
    free, centres = free_cells(sp)
    s, g, h = [-2.0, 1.0, 0.0], [2.7, 1.0, 0.0], [-3.0, 1.0, 1.0]
    length = spawn.path_lengths(free, sp.dims, sp.lo, sp.cell, np.array([s, s]), np.array([g, h]))
    assert np.isnan(length[0])
    np.testing.assert_allclose(length[1], np.linalg.norm(np.subtract(h, s)), rtol=1e-12)
    assert np.isnan(sp.path_lengths(np.array([s]), np.array([g]))[0])  # its pool: the goal is in no pool cell


def test_an_unknown_shortest_path_gets_the_full_step_limit_and_an_unknown_spl():
    from navi_nb.env.tasks import step_limit

    rule = (500, 100, 20.0)
    assert step_limit(rule, np.nan) == 500  # not ceil(NaN) cast to an integer
    assert step_limit(rule, 3.0) == 160
    world, _scene = two_rooms()
    env = make(world, n=2, max_steps=3)
    env.reset(seed=0)
    assert np.isfinite(env.shortest_paths).all()  # settled: the environment's own pairs always have one
    env._start_dist[0] = np.nan  # as if an episode's shortest path were unknown
    for _ in range(3):
        _obs, _r, _te, _tr, info = env.step(np.zeros((2, 4), np.float32))
    assert info["done"].all()
    spl = np.asarray(info["episode"]["spl"])
    assert np.isnan(spl[0]) and spl[1] == 0.0  # unknown, not 0 (a failure) nor a ratio to the straight line


def test_evaluation_bins_and_spl_leave_an_unknown_shortest_path_out():
    from navi_nb.train.evaluate import difficulty, summarize

    ep = {
        "success": np.array([1.0, 1.0, 0.0, 1.0]),
        "spl": np.array([0.5, np.nan, 0.0, 1.0]),
        "final_distance": np.array([0.1, 0.2, 3.0, 0.3]),
        "return": np.zeros(4),
        "length": np.ones(4),
        "collisions": np.zeros(4),
        "geodesic": np.array([3.0, np.nan, 5.0, 1.0]),
        "ratio": np.array([1.2, np.nan, 1.05, 1.0]),
    }
    assert summarize(ep)["spl_mean"] == pytest.approx(0.5)  # (0.5 + 0.0 + 1.0) / 3: the unknown one left out
    assert summarize(ep)["success_rate"] == 0.75  # success counts every episode
    d = difficulty(ep)
    assert d["unknown_shortest_path"] == 1
    assert sum(g["episodes"] for g in d["geodesic_m"].values()) == 3
    assert sum(g["episodes"] for g in d["ratio"].values()) == 3
    assert d["ratio"]["1-1.1"]["episodes"] == 2  # not the unknown one "in sight"


def test_a_pool_file_of_the_old_rule_is_never_read(own_cache):
    """A cache file holding both rooms (the flood from every spawn point), in the earlier file form with a
    digest of its own arrays, under this world's key: not trusted, the one-component pool computed again."""
    import hashlib
    import json

    world, _scene = two_rooms()
    good = make(world, n=1)._spawner
    path = good.cache_path
    free, _centres = free_cells(good)
    both = free.copy()
    keep = np.ones(world.spawn_points.shape[0], bool)
    h = hashlib.sha256(b"navi-nb spawn pool\0" + path.stem.encode() + b"\0")  # the earlier digest
    h.update(json.dumps([both.shape, keep.shape]).encode())
    h.update(both.view(np.uint8))
    h.update(keep.view(np.uint8))
    np.savez_compressed(path, reach=both, keep=keep, digest=np.frombuffer(h.digest(), np.uint8))
    assert pool_file.read_pool(path, both.size, keep.size) is None
    again = make(world, n=1)._spawner
    assert np.array_equal(again.reach, good.reach) and not np.array_equal(again.reach, both)
    # the file now holds the new rule's pool, read back as it is
    reach, kept, split = pool_file.read_pool(path, both.size, keep.size)
    assert np.array_equal(reach, good.reach) and split[0] == 2


@functools.cache
def house_at_32():
    from navi_nb.world.compiler import compile_scene

    return compile_scene("house", 32, 0)


def test_house_at_resolution_32_keeps_one_part_and_says_so():
    """house:0 at 32: the grid's clearance closes doorways, so its spawn points fall in several parts; the pool
    is one 6-connected part (counted here by scipy), and every episode's shortest path is known."""
    env = make(house_at_32(), n=128)
    sp = env._spawner
    free, _centres = free_cells(sp)
    parts, n = ndimage.label(free.reshape(tuple(sp.dims)))  # 6-connected by default
    in_pool = np.unique(parts.ravel()[sp.reach])
    assert n > 1 and in_pool.shape == (1,) and in_pool[0] > 0
    assert np.array_equal(sp.reach, parts.ravel() == in_pool[0])
    (note,) = env.pool_notes
    assert "parts" in note and int(sp.split[0]) > 1
    for seed in range(2):
        env.reset(seed=seed)
        assert np.all(np.isfinite(np.asarray(env.shortest_paths)))
        cells = np.floor((env.goals - sp.lo) / sp.cell).astype(np.int64)
        flat = (cells[:, 0] * sp.dims[1] + cells[:, 1]) * sp.dims[2] + cells[:, 2]
        assert sp.reach[flat].all()
