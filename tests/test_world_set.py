"""World sets: one packed structure, one batched trace over every actor's own world,
per-world collision, spawns, visit grids and a seeded world schedule."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from env_helpers import act, scene_world, small_sensor
from sense_helpers import slab_world, sphere_world

from navi_nb.env.config import StateError
from navi_nb.env.nav_env import NavEnv
from navi_nb.env.worlds import scheduled_worlds
from navi_nb.sense.sensor import SenseError, Sensor
from navi_nb.sense.tracer import Tracer, trace
from navi_nb.world.query import distance
from navi_nb.world.world_set import WorldSet, WorldSetError

ROOT = Path(__file__).resolve().parents[1]


def _worlds():
    """Three small worlds of different resolution, voxel size and bounds."""
    a = sphere_world(16, radius=1.1, voxel_size=0.25)[0]
    b = slab_world(32, lo=2.1, hi=2.8, axis=2, voxel_size=0.2)
    c = sphere_world(8, radius=1.5, voxel_size=0.5, bmin=(-2.0, 1.0, 0.5))[0]
    return [a, b, c]


def _poses(worlds, world_index, rng):
    origins = np.empty((len(world_index), 3), np.float32)
    for k, w in enumerate(world_index):
        wd = worlds[w]
        origins[k] = wd.bmin + rng.uniform(0.05, 0.95, 3) * wd.extent
    return origins, rng.uniform(-np.pi, np.pi, len(world_index)).astype(np.float32)


def test_one_batched_trace_equals_each_world_traced_alone():
    worlds = _worlds()
    ws = WorldSet(worlds)
    rng = np.random.default_rng(3)
    wi = np.array([2, 0, 0, 1, 2, 1, 0, 2, 1, 1, 0], np.int32)
    origins, yaws = _poses(worlds, wi, rng)
    sensor = Sensor(24, 6)  # 144 rays: tasks of 64 rays straddle actors of different worlds
    depth, sem, hit = trace(ws, origins, yaws, sensor, 6.0, world_index=wi)
    tracer = Tracer(ws, sensor, 6.0, max_actors=len(wi))
    d2, s2, h2 = tracer.trace(origins, yaws, world_index=wi)
    assert np.array_equal(d2, depth) and np.array_equal(s2, sem) and np.array_equal(h2, hit)
    for w, world in enumerate(worlds):
        rows = np.flatnonzero(wi == w)
        alone = trace(world, origins[rows], yaws[rows], sensor, 6.0)
        assert np.array_equal(alone[0], depth[rows]) and np.array_equal(alone[1], sem[rows])
        assert np.array_equal(alone[2], hit[rows])
        assert hit[rows].any()


def test_set_of_one_is_the_single_world():
    world = _worlds()[1]
    rng = np.random.default_rng(5)
    origins, yaws = _poses([world], np.zeros(6, np.int64), rng)
    single = trace(world, origins, yaws, Sensor(16, 4), 5.0)
    as_set = trace(WorldSet([world]), origins, yaws, Sensor(16, 4), 5.0, world_index=np.zeros(6, np.int64))
    assert all(np.array_equal(x, y) for x, y in zip(single, as_set))
    assert WorldSet.of(world) is WorldSet.of(world)  # one packed copy per world


def test_packed_once_identical_worlds_shared_and_sizes():
    worlds = _worlds()
    ws = WorldSet([worlds[0], worlds[1], worlds[0]], names=["a", "b", "a again"])
    per = ws.nbytes_per_world()
    assert per[2] == 0 and per[0] > 0 and per[1] > 0
    p = ws.packed
    assert p.nbytes == int(per.sum()) + ws.constant_nbytes()
    assert np.array_equal(p.iparams[2], p.iparams[0])
    # the worlds' own layouts now read the packed arrays (no second copy)
    for w in (0, 1):
        lay = worlds[w]._navi_layout[2]
        assert np.shares_memory(lay.child, p.child) and np.shares_memory(lay.top_code, p.top_code)
    assert ws.names == ["a", "b", "a again"] and ws.families == ["file"] * 3 and len(ws) == 3
    # queries through the packed views answer what a fresh decode answers
    pts = np.random.default_rng(0).uniform(0, 4, (200, 3))
    fresh = sphere_world(16, radius=1.1, voxel_size=0.25)[0]
    assert all(np.array_equal(x, y) for x, y in zip(distance(worlds[0], pts), distance(fresh, pts)))


def test_equal_subtrees_of_different_worlds_are_stored_once():
    from navi_nb.world.compiler import compile_scene
    from navi_nb.world.layout import decode_layout

    worlds = [compile_scene("house", 32, seed) for seed in (0, 1, 2)]
    ws = WorldSet(worlds)
    p = ws.packed
    alone = [decode_layout(w, 1.0 / float(np.float32(w.voxel_size)), top_depth=5) for w in worlds]
    rows = p.child.reshape(-1, 8)
    # one pool: every row and every leaf distinct, fewer than the worlds hold between them
    assert np.unique(rows, axis=0).shape[0] == rows.shape[0]
    leaves = np.stack([p.leaf_dist.view(np.int64), p.leaf_sem.astype(np.int64)], axis=1)
    assert np.unique(leaves, axis=0).shape[0] == leaves.shape[0]
    assert rows.shape[0] < sum(lay.child.shape[0] // 8 for lay in alone)
    assert p.leaf_dist.shape[0] < sum(lay.leaf_dist.shape[0] for lay in alone)
    assert p.nbytes == int(ws.nbytes_per_world().sum()) + ws.constant_nbytes()
    assert p.nbytes < sum(lay.nbytes for lay in alone)
    # each world finds its own cells and values in the pool: the same traces and distances as alone
    rng = np.random.default_rng(7)
    wi = np.array([0, 1, 2, 2, 1, 0], np.int32)
    origins = np.concatenate([worlds[w].spawn_points[:1] for w in wi]).astype(np.float32)
    yaws = rng.uniform(-np.pi, np.pi, len(wi)).astype(np.float32)
    batch = trace(ws, origins, yaws, Sensor(24, 6), 12.0, world_index=wi)
    pts = rng.uniform(worlds[0].bmin, worlds[0].bmax, (300, 3))
    for w, world in enumerate(worlds):
        rows_w = np.flatnonzero(wi == w)
        fresh = compile_scene("house", 32, (0, 1, 2)[w])
        single = trace(fresh, origins[rows_w], yaws[rows_w], Sensor(24, 6), 12.0)
        assert all(np.array_equal(x, y[rows_w]) for x, y in zip(single, batch))
        assert all(np.array_equal(x, y) for x, y in zip(distance(world, pts), distance(fresh, pts)))


def test_equal_rows_groups_rows_as_np_unique_does_and_survives_hash_collisions(monkeypatch):
    from navi_nb.world import world_set

    rng = np.random.default_rng(3)
    base = rng.integers(-5, 40, (60, 8))
    rows = base[rng.integers(0, 60, 2000)]  # many repeats
    rows[::7, 3] = -1
    expected, expected_inverse = np.unique(rows, axis=0, return_inverse=True)
    expected_inverse = expected_inverse.reshape(-1)
    for mix in (world_set._ROW_MIX, np.zeros(8, np.uint64)):  # zeros: every row's hash collides
        monkeypatch.setattr(world_set, "_ROW_MIX", mix)
        distinct, inverse = world_set.equal_rows(rows)
        assert np.array_equal(distinct[inverse], rows)  # each row's class holds that row
        assert distinct.shape[0] == expected.shape[0]  # as many classes as np.unique finds
        # the same partition: rows in one class of np.unique are in one class here, and back
        assert len(set(zip(inverse.tolist(), expected_inverse.tolist()))) == expected.shape[0]
    distinct, inverse = world_set.equal_rows(np.zeros((0, 8), np.int64))
    assert distinct.shape == (0, 8) and inverse.shape == (0,)


def test_bad_input_is_refused():
    worlds = _worlds()
    with pytest.raises(WorldSetError):
        WorldSet([])
    with pytest.raises(WorldSetError):
        WorldSet([worlds[0], "x"])
    with pytest.raises(WorldSetError):
        WorldSet(worlds, names=["a"])
    ws = WorldSet(worlds)
    o = np.zeros((2, 3), np.float32)
    y = np.zeros(2, np.float32)
    for bad in (np.array([0, 3]), np.array([-1, 0]), np.array([0.0, 1.0]), np.array([0, 1, 2])):
        with pytest.raises(SenseError):
            trace(ws, o, y, Sensor(4, 2), 3.0, world_index=bad)


def test_schedule_is_a_pure_function_and_visits_every_world():
    a = np.arange(64)
    for schedule in ("random", "round_robin"):
        w0 = scheduled_worlds(schedule, 64, 7, a, np.zeros(64, np.int64))
        w_again = scheduled_worlds(schedule, 64, 7, a[::-1], np.zeros(64, np.int64))[::-1]
        assert np.array_equal(w0, w_again)  # no dependence on which other actors draw
        seen = set()
        for k in range(12):
            seen |= set(scheduled_worlds(schedule, 64, 7, a, np.full(64, k)).tolist())
        assert seen == set(range(64))
    assert np.array_equal(scheduled_worlds("round_robin", 5, 0, [0, 1, 4], [0, 2, 3]), [0, 3, 2])
    r = scheduled_worlds("random", 4, 1, np.repeat(np.arange(100), 10), np.tile(np.arange(10), 100))
    counts = np.bincount(r, minlength=4)
    assert counts.min() > 200  # 1000 draws over 4 worlds: roughly uniform


def _env_set():
    box = scene_world("box")
    house = scene_world("house")
    return WorldSet([box, house], names=["box:0", "house:0"])


def test_env_per_world_collision_matches_single_world_envs():
    ws = _env_set()
    n = 6
    env = NavEnv(ws, n, sensor=small_sensor(), seed=3, world_schedule="round_robin", max_steps=1000)
    env.reset()
    assert np.array_equal(env.world_index, np.arange(n) % 2)
    with pytest.raises(ValueError):
        env.world_index[0] = 1  # read-only view
    singles = [NavEnv(ws.worlds[w], n, sensor=small_sensor(), seed=3, max_steps=1000) for w in range(2)]
    for s in singles:
        s.reset()
    rng = np.random.default_rng(2)
    contacts = 0
    for _t in range(25):
        st = env.get_state()
        a = rng.uniform(-1, 1, (n, 4)).astype(np.float32)
        a[:, 0] = 1.0  # forward, full speed: walls get hit
        for _w, s in enumerate(singles):
            ss = s.get_state()
            for k in ("pos", "yaw", "goal", "goal_dist"):
                ss[k][...] = st[k]
            s.set_state(ss)
        env.step(a)
        for w, s in enumerate(singles):
            rows = np.flatnonzero(st["world_index"] == w)
            s.step(a)
            # where an actor of world w ends its move is where an env of world w alone moves it
            moved = np.isin(np.arange(n), rows) & ~env._done & ~s._done
            assert np.array_equal(s.positions[moved], env.positions[moved])
            assert np.array_equal(s._contact[moved], env._contact[moved])
        contacts += int(env._contact.sum())
    assert contacts > 0
    # every position lies in free space of its own world
    for w in range(2):
        rows = np.flatnonzero(env.world_index == w)
        d, _ = distance(ws.worlds[w], env.positions[rows])
        assert np.all(d > 0)


def test_env_worlds_state_and_episode_records():
    ws = _env_set()
    env = NavEnv(ws, 4, sensor=small_sensor(), seed=11, max_steps=5)
    env.reset()
    st = env.get_state()
    assert st["world_index"].dtype == np.int32 and st["world_index"].shape == (4,)
    worlds_seen = set()
    for _t in range(40):
        before = env.world_index.copy()
        _o, _r, _te, _tr, info = env.step(act(4, f=0.3))
        done = info["done"]
        assert np.array_equal(info["episode"]["world"][done], before[done])
        worlds_seen |= set(env.world_index.tolist())
        # spawns and goals lie in each actor's world's reachable pool
        for w in range(2):
            rows = np.flatnonzero(env.world_index == w)
            if rows.size:
                d, _ = distance(ws.worlds[w], env.goals[rows])
                assert np.all(d > 0)
    assert worlds_seen == {0, 1}
    # state round trip, and a second env restored from it continues identically
    st = env.get_state()
    other = NavEnv(ws, 4, sensor=small_sensor(), seed=99, max_steps=5)
    other.set_state(st)
    for _t in range(12):
        o1 = env.step(act(4, f=0.5, w=0.2))[0].copy()
        o2 = other.step(act(4, f=0.5, w=0.2))[0]
        assert np.array_equal(o1, o2) and np.array_equal(env.world_index, other.world_index)
    bad = env.get_state()
    bad["world_index"][0] = 2
    with pytest.raises(StateError):
        env.set_state(bad)


CUDA_SCRIPT = r"""
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from numba import config
assert config.ENABLE_CUDASIM
from sense_helpers import slab_world, sphere_world
from navi_nb.sense.sensor import Sensor
from navi_nb.sense.tracer import Tracer, trace
from navi_nb.world.world_set import WorldSet
worlds = [sphere_world(16, radius=1.1, voxel_size=0.25)[0], slab_world(16, lo=1.1, hi=1.5, axis=2, voxel_size=0.2),
          sphere_world(8, radius=1.5, voxel_size=0.5, bmin=(-2.0, 1.0, 0.5))[0]]
ws = WorldSet(worlds)
rng = np.random.default_rng(1)
wi = np.array([2, 0, 1, 1, 2], np.int32)
o = np.stack([worlds[w].bmin + rng.uniform(0.1, 0.9, 3) * worlds[w].extent for w in wi]).astype(np.float32)
y = rng.uniform(-3, 3, 5).astype(np.float32)
s = Sensor(6, 3)
cpu = trace(ws, o, y, s, 5.0, world_index=wi)
gpu = Tracer(ws, s, 5.0, backend="cuda").trace(o, y, to_host=True, world_index=wi)
# the simulator runs the functions as Python (float64 throughout), the CPU build rounds
# some float32 steps as float32: depths agree to 1e-6 m, as in test_tracer_cuda_sim
print(json.dumps({"depth": float(np.max(np.abs(cpu[0] - gpu[0]))), "equal": [bool(np.array_equal(a, b))
                  for a, b in zip(cpu[1:], gpu[1:])], "hits": int(cpu[2].sum())}))
"""


def test_cuda_kernel_traces_each_actor_in_its_world_under_the_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", CUDA_SCRIPT, str(ROOT / "tests")], env=env, capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["depth"] <= 1e-6 and res["equal"] == [True, True] and res["hits"] > 0
