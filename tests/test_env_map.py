"""The episodic map (``navi_nb/env/episodic_map.py``): its cells against hand-computed answers, the crop's
rotation, the same bits at 1 and 2 threads, exact state round trips, and its settings' checks."""

import math

import numba
import numpy as np
import pytest
from env_helpers import act, make_env, record_kernel, scene_world, states_equal

from navi_nb.env.config import EnvConfig, EnvConfigError, StateError
from navi_nb.env.episodic_map import EpisodicMap, map_columns, replay_map
from navi_nb.env.motion import field_cube
from navi_nb.sense.sensor import Sensor
from navi_nb.world.world_set import WorldSet

HORIZON = Sensor(8, 3)  # rows: up, the horizon, down
MAP = {"map_cell": 0.5, "map_crop": 8, "map_band": 0.1}


def _grid_origin(name):
    lo, hi = field_cube(scene_world(name))
    return lo[[0, 2]], hi[[0, 2]]


def _cell(lo, cell, nz, x, z):
    return int(math.floor((x - lo[0]) / cell)) * nz + int(math.floor((z - lo[1]) / cell))


def _placed(env, pos, yaw):
    """``env`` with its actor 0 at ``pos`` / ``yaw`` at rest and a cleared map."""
    st = env.get_state()
    st["pos"][0], st["yaw"][0] = pos, yaw
    st["vel"][...] = 0.0
    st["map"][...] = 0
    env.set_state(st)


def test_a_straight_walk_visits_exactly_its_cells():
    """An actor walking straight ahead (-z at yaw 0) at 0.2 m a step counts one visit per step in the cell of
    each analytic position, and nothing elsewhere."""
    env = make_env("box", n=1, sensor=HORIZON, **MAP)
    env.reset()
    lo, hi = _grid_origin("box")
    nx, nz = np.ceil((hi - lo) / 0.5 - 1e-9).astype(int)
    assert env.get_state()["map"].shape == (1, nx * nz, 2)
    # 0.25 m from a cell side: the 0.2 m steps stay at least 0.05 m from every side
    x0 = lo[0] + 0.5 * math.floor((0.3 - lo[0]) / 0.5) + 0.25
    z0 = lo[1] + 0.5 * math.floor((2.0 - lo[1]) / 0.5) + 0.25
    _placed(env, [x0, 1.5, z0], 0.0)
    steps = 12
    expected = np.zeros(nx * nz, np.int64)
    for k in range(1, steps + 1):
        env.step(act(1, f=1.0))
        z = z0 - 0.2 * k
        assert abs(float(env.positions[0, 2]) - z) < 1e-4 and abs(float(env.positions[0, 0]) - x0) < 1e-5
        expected[_cell(lo, 0.5, nz, x0, z)] += 1
    visits = env.get_state()["map"][0, :, 0]
    assert np.array_equal(visits, expected)
    assert expected.sum() == steps and (expected > 0).sum() == 6  # 0.05 m to 2.15 m past a side: 6 cells


def test_a_ray_toward_a_wall_marks_its_cell_occupied_and_the_way_free():
    """Facing the box's wall at z = -3: the straight-ahead ray's cells are seen free up to the wall's cell,
    which is seen occupied; the cell behind it is never seen."""
    lo, _hi = _grid_origin("box")
    # a cell size about 1 m that puts the wall plane z = -3 in the middle of a cell (the traced hit lies within
    # a voxel of it), and the ray's column x = x0 in the middle of one
    k = round((-3.0 - lo[1]) - 0.5)
    cell = (-3.0 - lo[1]) / (k + 0.5)
    x0 = lo[0] + cell * (math.floor((1.0 - lo[0]) / cell) + 0.5)
    z0 = 0.5
    env = make_env("box", n=1, sensor=HORIZON, map_cell=cell, map_crop=4, map_band=0.1)
    env.reset()
    _placed(env, [x0, 1.5, z0], 0.0)
    env.step(act(1))  # no move: one observation from the placed pose
    nz = env._episodic_map.grid.dims[0, 1]
    seen = env.get_state()["map"][0, :, 1]
    wall = _cell(lo, cell, nz, x0, -3.0)
    assert seen[wall] & 2
    here = _cell(lo, cell, nz, x0, z0)
    for c in range(wall + 1, here + 1):  # the same x column, from the wall's cell to the actor's
        assert seen[c] & 1 and not seen[c] & 2, c
    assert not seen[wall - 1]  # behind the wall: never seen


def _crops(yaws):
    """The crops of two actors with the same random map, both at a cell corner of the house's grid,
    at ``yaws``; returns (crops (2, C, S, S), the map, the corner's cell indices, the grid)."""
    cfg = EnvConfig(map_cell=0.5, map_crop=16, map_band=0.1).validate()
    ws = WorldSet.of(scene_world("house"))
    em = EpisodicMap(ws, HORIZON, cfg, 2)
    rng = np.random.default_rng(5)
    one = np.stack([rng.integers(0, 256, em.n_cells), rng.integers(0, 4, em.n_cells)], axis=1).astype(np.uint8)
    maps = np.stack([one, one])
    ix, iz = 20, 22
    corner = em.grid.lo[0] + 0.5 * np.array([ix, iz])
    origins = np.array([[corner[0], 1.5, corner[1]]] * 2, np.float32)
    R = HORIZON.n_rays
    traced = (origins, np.asarray(yaws, np.float32), np.zeros(2, np.int32), np.zeros((2, R), np.float32))
    traced += (np.zeros((2, R), bool),)  # depth 0, no hit: only the actor's own cell changes (a visit)
    obs = np.zeros((2, 3 * 16 * 16), np.float32)
    rows = np.arange(2)
    em.observe(maps, traced, (rows, rows), None, obs, 0)
    assert np.array_equal(maps[0], maps[1])
    return obs.reshape(2, 3, 16, 16), maps[0], (ix, iz), em.grid


def test_the_crop_reads_the_cells_around_the_actor_and_turns_with_it():
    crops, grid_cells, (ix, iz), grid = _crops([0.0, math.pi / 2])
    nz = grid.dims[0, 1]
    # yaw 0 (facing -z, +x right): crop cell (r, q) is map cell (ix - 8 + q, iz - 8 + r)
    for r in range(16):
        for q in range(16):
            visits, seen = grid_cells[(ix - 8 + q) * nz + (iz - 8 + r)]
            want = [math.log1p(visits) / math.log1p(255), seen & 1, (seen >> 1) & 1]
            assert np.array_equal(crops[0, :, r, q], np.array(want, np.float32)), (r, q)
    # turned a quarter to the right, the crop is the unturned one turned a quarter counterclockwise
    for c in range(3):
        assert np.array_equal(crops[1, c], np.rot90(crops[0, c]))


def test_the_coarse_channel_reads_coarse_cells_k_times_as_far_and_turns_with_the_crop():
    """With ``map_coarse`` = 4 the crop's fourth channel at yaw 0, from the centre of map cell (ix, iz), reads the
    coarse cell of map cell (ix - 30 + 4q, iz - 30 + 4r) (the point 4 map cells per crop cell away, here always
    a cell's centre), 0 off the grid; a quarter turn turns it."""
    cell, k, S = 0.5, 4, 16
    cfg = EnvConfig(map_cell=cell, map_crop=S, map_band=0.1, map_coarse=k).validate()
    ws = WorldSet.of(scene_world("house"))
    em = EpisodicMap(ws, HORIZON, cfg, 2)
    grid = em.grid
    nx, nz = (int(v) for v in grid.dims[0])
    cnz = int(grid.coarse_dims[0, 1])
    assert grid.fine_cells == nx * nz and em.n_cells == nx * nz + int(np.prod(grid.coarse_dims[0]))
    rng = np.random.default_rng(6)
    one = np.stack([rng.integers(0, 256, em.n_cells), rng.integers(0, 4, em.n_cells)], axis=1).astype(np.uint8)
    one[nx * nz :, 1] = 0
    maps = np.stack([one, one])
    ix, iz = 21, 17
    centre = grid.lo[0] + cell * (np.array([ix, iz]) + 0.5)
    origins = np.array([[centre[0], 1.5, centre[1]]] * 2, np.float32)
    R = HORIZON.n_rays
    traced = (origins, np.array([0.0, math.pi / 2], np.float32), np.zeros(2, np.int32), np.zeros((2, R), np.float32))
    traced += (np.zeros((2, R), bool),)
    obs = np.zeros((2, 4 * S * S), np.float32)
    rows = np.arange(2)
    em.observe(maps, traced, (rows, rows), None, obs, 0)
    after = maps[0]  # the visit of (ix, iz) counted in its map cell and its coarse cell
    assert int(after[ix * nz + iz, 0]) == min(int(one[ix * nz + iz, 0]) + 1, 255)
    c = nx * nz + (ix // k) * cnz + iz // k
    assert int(after[c, 0]) == min(int(one[c, 0]) + 1, 255)
    crops = obs.reshape(2, 4, S, S)
    off = 0
    for r in range(S):
        for q in range(S):
            fx, fz = ix - 30 + 4 * q, iz - 30 + 4 * r
            visits = after[nx * nz + (fx // k) * cnz + fz // k, 0] if 0 <= fx < nx and 0 <= fz < nz else 0
            off += not (0 <= fx < nx and 0 <= fz < nz)
            assert crops[0, 3, r, q] == np.float32(math.log1p(visits) / math.log1p(255)), (r, q)
    assert off > 0  # the crop reaches past the house's grid
    assert np.array_equal(crops[1, 3], np.rot90(crops[0, 3]))  # from a cell's centre its points are centres too


def test_a_coarse_cell_counts_the_visits_of_its_map_cells():
    """After a random walk (no count saturates), each coarse cell holds the sum of its k x k map cells' visits."""
    env = make_env("house", n=3, seed=4, max_steps=400, sensor=Sensor(16, 8), map_cell=0.5, map_crop=8, map_coarse=3)
    env.reset()
    rng = np.random.default_rng(2)
    for _ in range(60):
        env.step(rng.uniform(-1, 1, (3, 4)).astype(np.float32))
    grid = env._episodic_map.grid
    nx, nz = (int(v) for v in grid.dims[0])
    cx, cz = (int(v) for v in grid.coarse_dims[0])
    visits = env.get_state()["map"][:, :, 0].astype(np.int64)
    fine = np.zeros((3, cx * 3, cz * 3), np.int64)
    fine[:, :nx, :nz] = visits[:, : nx * nz].reshape(3, nx, nz)
    sums = fine.reshape(3, cx, 3, cz, 3).sum(axis=(2, 4)).reshape(3, -1)
    assert sums.max() < 255 and sums.sum() == 3 * 61
    assert np.array_equal(visits[:, grid.fine_cells : grid.fine_cells + cx * cz], sums)
    assert env.obs_layout["map"].stop - env.obs_layout["map"].start == 4 * 8 * 8


@pytest.mark.parametrize("coarse", [0, 4])
def test_same_bits_at_1_and_2_threads_and_exact_state_round_trip(coarse):
    def run(threads):
        old = numba.get_num_threads()
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        try:
            env = make_env(
                "house", n=12, seed=9, max_steps=10, sensor=Sensor(16, 8), map_cell=0.5, map_crop=8, map_coarse=coarse
            )
            out = [env.reset()[0].copy()]
            rng = np.random.default_rng(3)
            for _ in range(25):
                o, r, te, tr, info = env.step(rng.uniform(-1.2, 1.2, (12, 4)).astype(np.float32))
                out += [o.copy(), r.copy(), info["final_obs"][info["done"]].copy()]
            return out, env
        finally:
            numba.set_num_threads(old)

    a, env_a = run(1)
    b, env_b = run(2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert states_equal(env_a.get_state(), env_b.get_state())
    assert env_a.get_state()["map"].any() and a[-3][:, env_a.obs_layout["map"]].any()
    # a saved state restored elsewhere steps on with the same bits
    st = env_a.get_state()
    rng = np.random.default_rng(4)
    actions = [rng.uniform(-1, 1, (12, 4)).astype(np.float32) for _ in range(12)]
    first = [env_a.step(x)[0].copy() for x in actions]
    env_b.set_state(st)
    second = [env_b.step(x)[0].copy() for x in actions]
    assert all(np.array_equal(x, y) for x, y in zip(first, second))


def test_the_map_is_cleared_at_each_episode_start_and_the_final_observation_keeps_the_last():
    env = make_env("house", n=4, seed=2, max_steps=6, sensor=Sensor(16, 8), map_cell=0.5, map_crop=8)
    env.reset()
    cols = env.obs_layout["map"]
    zero = np.zeros(4, np.float32)
    for _ in range(6):
        obs, _r, _te, tr, info = env.step(act(4, f=0.3, w=0.5))
    assert tr.all()  # every episode ended at max_steps on this step
    visits = env.get_state()["map"][:, :, 0]
    assert (visits.sum(1) == 1).all()  # the new episodes' first observation only
    final = info["final_obs"][:, cols].reshape(4, 3, 8, 8)
    first = obs[:, cols].reshape(4, 3, 8, 8)
    # the last observation of the finished episodes saw 7 observations' worth of visits, the first of the new 1
    assert (final[:, 0].max(axis=(1, 2)) > first[:, 0].max(axis=(1, 2))).all()
    assert np.array_equal(first[:, 0].max(axis=(1, 2)), zero + np.float32(math.log1p(1) / math.log1p(255)))


def test_replay_rebuilds_an_episode_map_from_its_poses():
    """``replay_map`` (what ``navi-nb render`` draws) from the logged poses of an episode equals the grid the
    environment held at its end."""
    from navi_nb.sense.tracer import trace

    sensor = Sensor(16, 8)
    env = make_env("house", n=1, seed=3, max_steps=50, sensor=sensor, map_cell=0.5, map_crop=8)
    env.reset()
    poses = [(env.positions[0].copy(), float(env.yaws[0]))]
    rng = np.random.default_rng(1)
    for _ in range(20):
        env.step(rng.uniform(-1, 1, (1, 4)).astype(np.float32))
        poses.append((env.positions[0].copy(), float(env.yaws[0])))
    pos = np.array([p for p, _ in poses], np.float32)
    yaw = np.array([y for _, y in poses], np.float32)
    depth, _sem, hit = trace(scene_world("house"), pos, yaw, sensor, env.config.max_distance)
    ws = WorldSet.of(scene_world("house"))
    grid = replay_map(ws, 0, sensor, env.config, pos, yaw, np.asarray(depth), np.asarray(hit))
    assert np.array_equal(grid, env.get_state()["map"][0])


def test_off_by_default_and_bad_settings_are_refused_in_one_line():
    env = make_env("box", n=2)
    assert "map" not in env.obs_layout and "map" not in env.get_state() and env.map_seconds == 0.0
    assert env.ram_report()["map_bytes_per_actor"] == 0
    assert map_columns({"map_cell": 0.5}) == 16 * 16 * 3 and map_columns({}) == 0
    assert map_columns({"map_cell": 1.0, "map_crop": 8, "map_coarse": 4}) == 8 * 8 * 4
    for kw, words in (
        ({"map_cell": 0.01}, r"map_cell must be 0 \(off\) or metres in 0.05..10, got 0.01"),
        ({"map_cell": -1.0}, r"map_cell must be 0 \(off\)"),
        ({"map_cell": 0.5, "map_crop": 1}, "map_crop must be an integer in 2..64"),
        ({"map_cell": 0.5, "map_crop": 65}, "map_crop must be an integer in 2..64"),
        ({"map_cell": 0.5, "map_channels": 4}, "map_channels must be 2 or 3"),
        ({"map_cell": 0.5, "map_coarse": 1}, r"map_coarse must be 0 \(off\) or an integer in 2..16"),
        ({"map_cell": 0.5, "map_coarse": 17}, r"map_coarse must be 0 \(off\) or an integer in 2..16"),
        ({"map_cell": 0.5, "map_coarse": 2.5}, r"map_coarse must be 0 \(off\)"),
        ({"map_coarse": 4}, r"map_coarse \(4\) needs the map: set map_cell > 0"),
        ({"map_cell": 0.5, "map_band": 2.0}, "map_band must be a number of radians in 0..pi/2"),
        ({"map_cell": 0.5, "map_band": 0.1}, "map_band 0.1 holds none of the sensor's 4 elevation rows"),
    ):
        with pytest.raises(EnvConfigError, match=words) as exc:
            make_env("box", n=2, **kw)
        assert "\n" not in str(exc.value)


def test_a_map_too_large_for_the_memory_is_refused_with_its_size():
    cfg = EnvConfig(map_cell=0.05).validate()
    ws = WorldSet.of(scene_world("house"))
    with pytest.raises(
        EnvConfigError,
        match=r"the map \(map_cell=0.05: 102,400 cells a grid, 1,000 actors\) would "
        r"need about 195.3 MiB of RAM, more than the 1.0 MiB available",
    ):
        EpisodicMap(ws, Sensor(16, 8), cfg, 1000, available=2**20)


def test_set_state_refuses_a_map_of_other_flags():
    env = make_env("box", n=2, sensor=HORIZON, **MAP)
    env.reset()
    st = env.get_state()
    before = env.get_state()
    st["map"][0, 0, 1] = 9
    with pytest.raises(StateError, match="map holds seen flags"):
        env.set_state(st)
    assert states_equal(before, env.get_state())


def test_compile_kernels_compiles_the_map_kernel_a_step_runs(monkeypatch):
    """``NavEnv.compile_kernels`` (the warm-up's call) compiles the map's kernel for the argument types the
    reset's and the steps' calls (with and without episodes ending) hand it."""
    import navi_nb.env.episodic_map as episodic_map

    called, compiled = record_kernel(monkeypatch, episodic_map, "update_maps")
    env = make_env("box", n=3, sensor=HORIZON, max_steps=2, **MAP)
    env.compile_kernels()
    env.reset(seed=1)
    for _ in range(3):  # the second step ends every episode
        env.step(act(3, f=0.5))
    assert called and called == compiled
