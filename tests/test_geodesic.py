"""Geodesic fields: distances to a goal through free space, the progress reward they give, and the
goal draw by geodesic band and detour ratio, checked against analytic shortest paths and against
SPL's independent shortest-path search (A* pulled taut)."""

import math
from types import SimpleNamespace

import numba
import numpy as np
import pytest
from env_helpers import make_env

from navi_nb.env.config import EnvConfigError
from navi_nb.env.geodesic import FIELD_COARSEN, GoalFields, lattice_distance
from navi_nb.env.spawn import path_lengths

CELL = 0.125  # spawn-grid cell of the synthetic floors: field cells of 0.25 m


def _floor(nx=80, nz=80):
    """A 10 x 10 m floor, one layer of spawn cells, everything free."""
    return np.ones((nx, 1, nz), bool)


def _fields(reach):
    dims = np.array(reach.shape, np.int64)
    sp = SimpleNamespace(reach=reach.ravel(), dims=dims, lo=np.zeros(3), cell=CELL)
    return GoalFields([sp], 1, True), sp


def _field_at(fields, goal, points):
    fields.compute(np.zeros(1, np.int64), np.zeros(1, np.int32), np.asarray([goal], np.float32))
    pts = np.asarray(points, np.float64)[None]
    return fields.read(np.zeros(1, np.int64), np.zeros(1, np.int32), pts)[0]


def test_in_open_space_the_field_is_the_lattice_distance_never_below_the_straight_line():
    fields, _ = _fields(_floor())
    goal = [5.03, 0.0625, 4.96]
    rng = np.random.default_rng(0)
    pts = np.column_stack([rng.uniform(0.5, 9.5, 400), np.full(400, 0.0625), rng.uniform(0.5, 9.5, 400)])
    g = _field_at(fields, goal, pts)
    straight = np.linalg.norm(pts - goal, axis=1)
    cell = FIELD_COARSEN * CELL
    assert np.all(g >= 0.99 * straight - 1e-6)
    # the lattice's directional bias (at most 1/cos 22.5 deg - 1 = 8.2 % on a floor) plus a cell of interpolation
    assert np.all(g <= lattice_distance(pts, np.asarray(goal), cell) + cell)
    assert np.max(g / straight) < 1.09 + cell / straight.min()
    # along an axis the lattice is exact: within interpolation error of the straight line
    ax = np.array([[5.03 + d, 0.0625, 4.96] for d in (1.0, 2.5, 4.0)])
    np.testing.assert_allclose(_field_at(fields, goal, ax), [1.0, 2.5, 4.0], atol=0.05)


def test_round_a_wall_the_field_follows_the_taut_string_through_the_doorway():
    """A wall at x = 5.0..5.25 m with a doorway at z = 7.5..8.75 m (the oracle of SPL's test)."""
    reach = _floor()
    reach[40:42, :, :] = False
    reach[40:42, :, 60:70] = True
    fields, sp = _fields(reach)
    start, goal = np.array([2.0, 0.0625, 2.0]), np.array([8.0, 0.0625, 2.0])
    taut = math.hypot(3.0, 5.5) + 0.25 + math.hypot(2.75, 5.5)
    g = _field_at(fields, goal, [start])[0]
    assert 0.99 * taut <= g <= 1.09 * taut, (g, taut)
    # SPL's search, an independent algorithm on the same grid, agrees within the lattice's bias
    a_star = path_lengths(sp.reach, sp.dims, sp.lo, CELL, start[None], goal[None])[0]
    assert 0.99 * a_star <= g <= 1.09 * a_star


def test_round_a_square_pillar_the_field_bends_round_its_corners():
    """A 2 x 2 m solid block in the middle of the floor; start and goal on either side, level with its
    centre: the taut string runs to a corner, along the face, and on (4 m + 2 m + 1 m tangents)."""
    reach = _floor()
    reach[32:48, :, 32:48] = False  # x, z in [4, 6)
    fields, _ = _fields(reach)
    start, goal = [2.0, 0.0625, 5.0], [8.0, 0.0625, 5.0]
    taut = 2 * math.hypot(2.0, 1.0) + 2.0
    g = _field_at(fields, goal, [start])[0]
    assert 0.99 * taut <= g <= 1.09 * taut, (g, taut)


def test_an_edge_joins_two_field_cells_only_where_the_spawn_grid_joins_them():
    """A wall one spawn cell thick at an odd index: the coarse cells on its two sides touch, but the field
    must go round through the gap at the far end, not leak through."""
    reach = _floor()
    reach[41, :, :] = False  # fine x = 41: coarse cell 20 holds x 40, 41, coarse 21 holds 42, 43
    reach[41, :, 76:] = True  # a gap at z > 9.5 m
    fields, _ = _fields(reach)
    g = _field_at(fields, [5.4, 0.0625, 1.0], [[5.0, 0.0625, 1.0]])[0]
    assert g > 2 * 8.0, g  # up to the gap and back, not 0.4 m through the wall


def test_unreached_pool_cells_read_no_value():
    reach = _floor()
    reach[40:42, :, :] = False  # two halves, no doorway
    fields, _ = _fields(reach)
    g = _field_at(fields, [8.0, 0.0625, 5.0], [[2.0, 0.0625, 5.0], [7.0, 0.0625, 5.0]])
    assert g[0] == -1.0 and g[1] > 0


@pytest.mark.parametrize("name", ["house", "maze", "pillars"])
def test_in_the_built_in_scenes_the_field_agrees_with_spls_shortest_paths(name):
    env = make_env(name, n=32, seed=4)
    env.reset()
    st = env.get_state()
    g0 = st["goal_dist"]  # the potential at the spawn: the field read there
    l = st["start_dist"]  # SPL's A*, pulled taut
    ok = l > 1.0
    ratio = g0[ok] / l[ok]
    # the lattice's bias, and field cells of two spawn cells near walls (ENVIRONMENT states the measured spread)
    assert ratio.min() > 0.95 and ratio.max() < 1.2, (ratio.min(), ratio.max())
    assert 1.0 < np.median(ratio) < 1.1


def test_fields_have_the_same_bits_at_one_and_two_threads_and_alone_or_together():
    env = make_env("house", n=8, seed=2)
    env.reset()
    rows = np.arange(8, dtype=np.int64)
    out = {}
    before = numba.get_num_threads()
    try:
        for t in (1, 2):
            numba.set_num_threads(t)
            env._fields.compute(rows, env._world_index, env._goal)
            out[t] = env._fields.field.copy()
    finally:
        numba.set_num_threads(before)
    assert np.array_equal(out[1], out[2])
    env._fields.field[:] = 0
    env._fields.compute(rows[3:4], env._world_index, env._goal)
    assert np.array_equal(env._fields.field[3], out[1][3])


def test_fields_started_on_a_worker_are_those_computed_in_place_and_count_the_callers_time():
    """``GoalFields.start`` (a worker while the step traces) writes the fields and start potentials that
    ``compute`` and ``potential`` write; ``seconds`` counts the work when the caller did it (one thread) and
    only the caller's wait when a worker did."""
    env = make_env("house", n=6, seed=4)
    env.reset()
    f = env._fields
    rows = np.array([1, 4, 5], np.int64)
    f.compute(rows, env._world_index, env._goal)
    want_field = f.field[rows].copy()
    want_dist = env._goal_dist.copy()
    f.potential(True, rows, env._pos, env._goal, env._world_index, want_dist, want_dist)
    before = numba.get_num_threads()
    try:
        for t in (1, min(2, numba.config.NUMBA_NUM_THREADS)):
            numba.set_num_threads(t)
            f.field[rows] = 0
            dist = env._goal_dist.copy()
            s0 = f.seconds
            job = f.start(True, rows, env._world_index, env._goal, env._pos, dist)
            assert job.here == (t == 1)
            took = job.result()
            f.settle(job)
            assert np.array_equal(f.field[rows], want_field) and np.array_equal(dist, want_dist)
            if t == 1:
                assert f.seconds - s0 == took > 0
            else:
                assert 0 <= f.seconds - s0 < took  # the result was in hand: the settle waited for nothing
    finally:
        numba.set_num_threads(before)


def _scipy_field(tables, goal):
    """World 0's field from ``goal`` by SciPy's Dijkstra over the same graph, written independently of the
    kernel: the field's cells and their joined 26-neighbours (``edges``), edge lengths of 1, sqrt 2 and
    sqrt 3 cells, and a source joined to the goal's cell and its joined neighbours at their straight
    distance from the goal. (n_slots,) float32, -1 where unreached."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import dijkstra

    slot_of_cell, _, cell_of_slot, _, edges, dims, lo, cell = tables
    nx, ny, nz = (int(d) for d in dims[0])
    cell, lo = float(cell[0]), lo[0]
    n = cell_of_slot.shape[0]
    lengths = (0.0, cell, cell * math.sqrt(2.0), cell * math.sqrt(3.0))
    src, dst, wt = [], [], []
    for s in range(n):
        c = int(cell_of_slot[s])
        ix, iy, iz = c // (ny * nz), (c // nz) % ny, c % nz
        for e in range(27):
            if int(edges[s]) >> e & 1:
                ox, oy, oz = e // 9 - 1, (e // 3) % 3 - 1, e % 3 - 1
                src.append(s)
                dst.append(int(slot_of_cell[((ix + ox) * ny + iy + oy) * nz + iz + oz]))
                wt.append(lengths[ox * ox + oy * oy + oz * oz])
    g = np.asarray(goal, np.float64)
    ix, iy, iz = (int(math.floor((g[a] - lo[a]) / cell)) for a in range(3))
    gs = int(slot_of_cell[(ix * ny + iy) * nz + iz])
    seeds = [gs] + [t for s, t in zip(src, dst) if s == gs]
    for t in seeds:
        c = int(cell_of_slot[t])
        centre = lo + (np.array([c // (ny * nz), (c // nz) % ny, c % nz]) + 0.5) * cell
        src.append(n)
        dst.append(t)
        wt.append(math.sqrt(((centre - g) ** 2).sum()))
    graph = coo_matrix((wt, (src, dst)), shape=(n + 1, n + 1)).tocsr()
    d = dijkstra(graph, indices=n)[:n]
    return np.where(np.isfinite(d), d, -1.0).astype(np.float32)


@pytest.mark.parametrize("name", ["house", "maze"])
def test_fields_equal_scipys_dijkstra_over_the_same_graph(name):
    """The bucket queue's fields, bit for bit, against SciPy's Dijkstra on the graph rebuilt from the tables."""
    env = make_env(name, n=4, seed=5)
    env.reset()
    fields = env._fields
    for i in range(4):
        goal = env._goal[i].astype(np.float64)
        fields.compute(np.array([i], np.int64), np.zeros(4, np.int32), env._goal)
        n = int(fields.grids.n_slots[0])
        expect = _scipy_field(fields.tables, goal)
        np.testing.assert_array_equal(fields.field[i, :n], expect)


def test_geodesic_progress_telescopes_to_the_fields_difference():
    """The progress terms of an episode sum to the field at the spawn minus the field where it ended."""
    env = make_env("house", n=16, seed=3, max_steps=40)
    env.reset()
    start = env.get_state()["goal_dist"].copy()
    total = np.zeros(16)
    rng = np.random.default_rng(0)
    for _ in range(39):
        _, _, term, trunc, info = env.step(rng.uniform(-1, 1, (16, 4)).astype(np.float32))
        total += info["reward_terms"]["progress"].astype(np.float64)
        live = ~(term | trunc)
    end = env.get_state()["goal_dist"]
    np.testing.assert_allclose(total[live], (start - end)[live] * env.config.reward_progress, atol=1e-4)


def test_geodesic_progress_rewards_the_way_round_a_wall():
    """In the maze, for actors whose goal lies behind a wall, moving along the shortest path earns
    progress although the straight distance may grow; euclidean progress pays the straight change."""
    env = make_env("maze", n=32, seed=1)
    env.reset()
    st = env.get_state()
    straight = np.linalg.norm(st["goal"].astype(np.float64) - st["pos"], axis=1)
    assert np.any(st["goal_dist"] > 1.2 * straight)  # some goals need a detour, and the potential knows it


def test_goal_first_draws_prefer_detours_and_respect_the_geodesic_band():
    plain = make_env("house", n=64, seed=5)
    plain.reset()
    detour = make_env("house", n=64, seed=5, goal_distance="geodesic", goal_min_ratio=1.2)
    detour.reset()

    def ratios(env):
        st = env.get_state()
        return st["start_dist"] / np.linalg.norm(st["goal"].astype(np.float64) - st["pos"], axis=1)

    assert np.mean(ratios(detour) >= 1.1) > np.mean(ratios(plain) >= 1.1) + 0.3
    st = detour.get_state()
    # the band is on the geodesic distance (SPL's path, measured independently): 1..8 m with the field's slack
    assert np.all(st["start_dist"] >= 0.9) and np.all(st["start_dist"] <= 8.0 * 1.1)


def test_a_goal_band_no_world_can_hold_is_refused_naming_the_world():
    with pytest.raises(EnvConfigError, match=r"world world0 has no two points 60.0 m apart.*goal band 60.0\.\.80.0 m"):
        make_env("box", n=2, goal_distance="geodesic", goal_min_distance=60.0, goal_max_distance=80.0)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"progress": "manhattan"}, "progress must be one of geodesic, euclidean"),
        ({"goal_distance": "walk"}, "goal_distance must be one of"),
        ({"goal_min_ratio": 0.5}, "goal_min_ratio must be a finite number >= 1"),
        ({"goal_min_ratio": 1.5, "goal_max_ratio": 1.2}, "goal_max_ratio must be 0"),
        ({"goal_max_ratio": float("inf")}, "goal_max_ratio must be 0"),
    ],
)
def test_bad_distance_settings_are_one_line_errors(kw, match):
    with pytest.raises(EnvConfigError, match=match):
        make_env("box", n=1, **kw)


def test_ram_report_counts_the_fields():
    env = make_env("house", n=4)
    rep = env.ram_report()
    assert rep["geodesic_field_bytes_per_actor"] == 4 * env._fields.grids.n_max > 0
    assert rep["shared_field_grid_bytes"] > 0
    assert make_env("house", n=4, progress="euclidean").ram_report()["geodesic_field_bytes_per_actor"] == 0


def test_set_state_computes_again_only_the_fields_whose_goal_or_world_changed():
    """A restored state's fields equal fields computed afresh for its goals; restoring the state an
    environment already holds computes none (a field is a pure function of its world and goal)."""
    env = make_env("house", n=6, seed=4)
    env.reset()
    saved = env.get_state()
    other = make_env("house", n=6, seed=9)
    other.reset()
    assert not np.array_equal(other.goals, saved["goal"])
    other.set_state(saved)
    np.testing.assert_array_equal(other._fields.field, env._fields.field)
    fresh = GoalFields([env._spawner], 6, True)
    fresh.compute(np.arange(6, dtype=np.int64), saved["world_index"], saved["goal"])
    np.testing.assert_array_equal(other._fields.field, fresh.field)
    before = other._fields.seconds
    other.set_state(saved)
    assert other._fields.seconds == before
