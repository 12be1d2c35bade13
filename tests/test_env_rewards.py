"""Reward terms, success, SPL, coverage and episode statistics (issue 4, acceptance line 3)."""

import math

import numpy as np
from env_helpers import act, make_env, place


def test_progress_and_time_terms_on_a_step_toward_the_goal():
    env = make_env("box", n=2, progress="euclidean")
    env.reset()
    # actor 0 faces the goal 3 m ahead; actor 1 backs away from its goal
    place(env, [[0, 1.5, 1.0], [0, 1.5, 1.0]], [0.0, 0.0], goal=[[0, 1.5, -2.0], [0, 1.5, -2.0]])
    obs, rew, term, trunc, info = env.step(np.array([[1, 0, 0, 0], [-1, 0, 0, 0]], np.float32))
    t = info["reward_terms"]
    cfg = env.config
    step = cfg.max_speed * cfg.dt
    np.testing.assert_allclose(t["progress"], [cfg.reward_progress * step, -cfg.reward_progress * step], atol=1e-5)
    np.testing.assert_allclose(t["time"], [-cfg.penalty_time] * 2)
    np.testing.assert_array_equal(t["success"], [0, 0])
    np.testing.assert_array_equal(t["contact"], [0, 0])
    np.testing.assert_allclose(rew, t["progress"] + t["success"] + t["contact"] + t["time"] + t["path"], atol=1e-6)
    assert not term.any() and not trunc.any()
    # the goal in the observation: distance, bearing straight ahead / behind, no height difference
    g = obs[:, env.obs_layout["goal"]]
    np.testing.assert_allclose(g[:, 0], np.array([3.0 - step, 3.0 + step]) / cfg.goal_scale, atol=1e-5)
    np.testing.assert_allclose(g[:, 1:], [[0, 1, 0], [0, 1, 0]], atol=1e-5)


def test_path_term_charges_each_metre_moved():
    env = make_env("box", n=3, progress="euclidean", penalty_path=0.5)
    env.reset()
    # actor 0 moves forward (0.2 m), actor 1 sideways (0.1 m), actor 2 only turns (0 m)
    place(env, np.tile([0, 1.5, 0.0], (3, 1)), [0.0, 0.0, 0.0], goal=np.tile([0, 1.5, -3.0], (3, 1)))
    a = np.array([[1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]], np.float32)
    _obs, rew, _term, _trunc, info = env.step(a)
    t = info["reward_terms"]
    cfg = env.config
    np.testing.assert_allclose(t["path"], [-0.5 * 0.2, -0.5 * 0.1, 0.0], atol=1e-6)
    np.testing.assert_allclose(rew, sum(t[n] for n in env.reward_names), atol=1e-6)
    np.testing.assert_allclose(rew[2], -cfg.penalty_time, atol=1e-7)
    # off by default: the term is there and zero
    env = make_env("box", n=1)
    env.reset()
    assert env.reward_names[4] == "path"
    assert env.step(act(1, f=1.0))[4]["reward_terms"]["path"][0] == 0.0


def test_goal_bearing_in_own_frame():
    env = make_env("box", n=3)
    env.reset()
    # goal to the right (+x at yaw 0), to the left and above, behind and below
    place(env, np.tile([0, 1.5, 0], (3, 1)), [0.0, 0.0, math.pi / 2], goal=[[2, 1.5, 0], [-1, 2.5, 0], [-2, 0.5, 0]])
    obs = env.step(act(3))[0]
    g = obs[:, env.obs_layout["goal"]]
    s = env.config.goal_scale
    np.testing.assert_allclose(
        g, [[2 / s, 1, 0, 0], [math.sqrt(2) / s, -1, 0, 1 / s], [math.sqrt(5) / s, 0, -1, -1 / s]], atol=1e-5
    )


def test_success_bonus_terminates_and_reports_spl():
    env = make_env("box", n=2, progress="euclidean")
    env.reset()
    cfg = env.config
    # actor 0: 0.6 m from the goal, one forward step (0.2 m) brings it inside the 0.5 m radius
    place(env, [[0, 1.5, 0.0], [2, 1.5, 0.0]], [0.0, 0.0], goal=[[0, 1.5, -0.6], [2, 1.5, -2.5]])
    obs, rew, term, trunc, info = env.step(act(2, f=1.0))
    t = info["reward_terms"]
    np.testing.assert_array_equal(term, [True, False])
    np.testing.assert_array_equal(t["success"], [cfg.reward_success, 0.0])
    np.testing.assert_allclose(rew[0], cfg.reward_success + 0.2 * cfg.reward_progress - cfg.penalty_time, atol=1e-5)
    ep = info["episode"]
    assert info["done"].tolist() == [True, False]
    assert ep["success"][0] and ep["length"][0] == 1
    # SPL = l / max(p, l): path 0.2 m, straight line 0.6 m -> 1.0
    assert ep["spl"][0] == 1.0
    np.testing.assert_allclose(ep["return"][0], rew[0], atol=1e-6)


def test_spl_of_a_detour():
    env = make_env("box", n=1)
    env.reset()
    # goal 1.0 m ahead; first walk 0.5 m sideways and back (1.0 m), then 0.6 m forward
    place(env, [[0, 1.5, 0.0]], [0.0], goal=[[0, 1.5, -1.0]])
    for a in [act(1, l=1.0)] * 5 + [act(1, l=-1.0)] * 5 + [act(1, f=1.0)] * 3:
        info = env.step(a)[4]
    assert info["done"][0] and info["episode"]["success"][0]
    path = 1.0 + 0.6
    np.testing.assert_allclose(info["episode"]["spl"][0], 1.0 / path, atol=1e-5)
    assert info["episode"]["length"][0] == 13


def test_contact_penalty():
    env = make_env("box", n=2)
    env.reset()
    cfg = env.config
    place(env, [[0, 1.5, -3 + cfg.radius + 0.05], [0, 1.5, 0]], [0.0, 0.0])
    info = env.step(act(2, f=1.0))[4]
    np.testing.assert_array_equal(info["contact"], [True, False])
    np.testing.assert_allclose(info["reward_terms"]["contact"], [-cfg.penalty_contact, 0.0])


def test_explore_new_cell_reward_and_coverage():
    env = make_env("box", n=2, task="explore", visit_cell=1.0)
    env.reset()
    cfg = env.config
    g = env._grid
    # a point 0.1 m before a cell boundary along -z: one forward step (0.2 m) enters a new cell
    z_edge = g.lo[2] + g.cell * 9  # a cell boundary inside the room
    x_mid = g.lo[0] + g.cell * 8.5
    y_mid = g.lo[1] + g.cell * 7.5
    place(env, [[x_mid, y_mid, z_edge + 0.1], [x_mid, y_mid, z_edge + 0.5]], [0.0, math.pi / 2])
    assert set(env.reward_names) == {"new_cell", "contact", "time", "count"}
    rews = []
    for _ in range(2):
        obs, rew, term, trunc, info = env.step(act(2, f=1.0))
        rews.append(info["reward_terms"]["new_cell"].copy())
    # actor 0 crossed into a new cell on step 1 (rewarded), then stayed in it (not rewarded again);
    # actor 1 walked 0.4 m along x from a cell centre: no boundary crossed, nothing new
    assert rews[0][0] == cfg.reward_new_cell and rews[1][0] == 0.0
    assert rews[0][1] == 0.0 and rews[1][1] == 0.0
    assert "goal" not in env.obs_layout
    assert env.get_state()["cells"].tolist() == [2, 1]


def test_episode_statistics_add_up():
    env = make_env("house", n=16, task="pointgoal", seed=5, max_steps=25)
    env.reset()
    rng = np.random.default_rng(1)
    ret = np.zeros(16)
    length = np.zeros(16, int)
    contacts = np.zeros(16, int)
    finished = 0
    for _ in range(60):
        obs, rew, term, trunc, info = env.step(rng.uniform(-1, 1, (16, 4)).astype(np.float32))
        terms = info["reward_terms"]
        np.testing.assert_allclose(rew, sum(terms[n] for n in env.reward_names), atol=1e-6)
        ret += rew
        length += 1
        contacts += info["contact"]
        done = info["done"]
        assert np.array_equal(done, term | trunc)
        ep = info["episode"]
        np.testing.assert_allclose(ep["return"][done], ret[done], rtol=1e-5, atol=1e-4)
        np.testing.assert_array_equal(ep["length"][done], length[done])
        np.testing.assert_array_equal(ep["collisions"][done], contacts[done])
        np.testing.assert_array_equal(ep["success"][done], term[done])
        assert np.all(ep["spl"][done] <= 1.0) and np.all(ep["spl"][done][~term[done]] == 0.0)
        assert np.all((ep["coverage"][done] > 0) & (ep["coverage"][done] <= 1))
        # masked: rows of actors that did not finish hold zeros
        assert not ep["return"][~done].any() and not ep["length"][~done].any()
        finished += int(done.sum())
        ret[done], length[done], contacts[done] = 0.0, 0, 0
    assert finished >= 16 * 2


def _doorway_grid():
    """A 10 x 10 m floor of 0.25 m cells, one layer high, split at x = 5.0..5.25 m by a wall whose
    doorway spans z = 7.5..8.75 m."""
    dims = np.array([40, 1, 40], np.int64)
    reach = np.ones((40, 1, 40), bool)
    reach[20, :, :] = False
    reach[20, :, 30:35] = True
    return reach.ravel(), dims, np.zeros(3), 0.25


def test_shortest_path_through_a_doorway_against_the_taut_string():
    from navi_nb.env.spawn import path_lengths

    reach, dims, lo, cell = _doorway_grid()
    s = np.array([[2.0, 0.125, 2.0], [2.0, 0.125, 2.0], [1.0, 0.125, 9.0], [2.0, 0.125, 2.0]])
    g = np.array([[8.0, 0.125, 2.0], [4.0, 0.125, 6.0], [9.0, 0.125, 8.0], [8.0, 0.125, 20.0]])
    length = path_lengths(reach, dims, lo, cell, s, g)
    # round the wall: the taut string bends at the doorway's two near corners (5.0, 7.5) and (5.25, 7.5);
    # the found path runs between cell centres, so it is a little longer (segments are checked every
    # quarter cell, so one may clip a wall corner by less than that: not shorter than 99 %)
    taut = math.hypot(3.0, 5.5) + 0.25 + math.hypot(2.75, 5.5)
    assert 0.99 * taut <= length[0] <= 1.03 * taut, (length[0], taut)
    straight = np.linalg.norm(g - s, axis=1)
    # in sight: the straight line itself
    np.testing.assert_allclose(length[1], straight[1], rtol=1e-12)
    # through the doorway in a straight line (z 9 -> 8 crosses x = 5 at z 8.5, inside the opening)
    np.testing.assert_allclose(length[2], straight[2], rtol=1e-12)
    # a goal outside the grid: unknown (the straight line may cross walls)
    assert np.isnan(length[3])


def test_spl_divides_by_the_shortest_path_in_a_world_with_walls():
    """In the house, every episode's SPL distance is at least the straight line, equal to it when
    the goal is in sight of the spawn, and longer for some goals behind walls."""
    env = make_env("house", n=32)
    env.reset(seed=3)
    straight = np.linalg.norm(env._goal.astype(np.float64) - env._pos.astype(np.float64), axis=1)
    l = env.get_state()["start_dist"]
    assert np.all(l >= straight - 1e-9)
    assert np.any(l > straight + 0.5)  # some goal lies behind a wall
    assert np.any(np.abs(l - straight) < 1e-9)  # and some in sight
    sp = env._spawner
    again = sp.path_lengths(env._pos, env._goal)
    assert np.array_equal(again, l)  # a pure function of the spawn and the goal


def test_grid_centres_are_the_cell_centres_in_flat_index_order():
    """The spawn grid's centres, worked out per cell as ``lo + (index + 0.5) * cell`` with the flat index
    ``(ix * Y + iy) * Z + iz``, bit for bit."""
    from navi_nb.env.spawn import grid_centres

    lo, dims, cell = np.array([-1.5, 0.25, 3.0]), np.array([3, 1, 4]), 0.3
    got = grid_centres(lo, dims, cell)
    assert got.shape == (12, 3)
    for ix in range(3):
        for iz in range(4):
            want = [lo[0] + (ix + 0.5) * cell, lo[1] + 0.5 * cell, lo[2] + (iz + 0.5) * cell]
            assert got[ix * 4 + iz].tolist() == want


def _scipy_grid_costs(reach, dims, cell, s_cell):
    """Shortest chain costs from ``s_cell`` over the reachable cells' 26 neighbours (edge lengths 1,
    sqrt 2, sqrt 3 cells) by SciPy's Dijkstra, written independently of the search."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import dijkstra

    nx, ny, nz = (int(d) for d in dims)
    src, dst, wt = [], [], []
    for c in np.flatnonzero(reach):
        ix, iy, iz = c // (ny * nz), (c // nz) % ny, c % nz
        for ox in (-1, 0, 1):
            for oy in (-1, 0, 1):
                for oz in (-1, 0, 1):
                    jx, jy, jz = ix + ox, iy + oy, iz + oz
                    if (ox, oy, oz) == (0, 0, 0) or not (0 <= jx < nx and 0 <= jy < ny and 0 <= jz < nz):
                        continue
                    n = (jx * ny + jy) * nz + jz
                    if reach[n]:
                        src.append(c)
                        dst.append(n)
                        wt.append(cell * math.sqrt(ox * ox + oy * oy + oz * oz))
    graph = coo_matrix((wt, (src, dst)), shape=(reach.size, reach.size)).tocsr()
    return dijkstra(graph, indices=s_cell)


def test_spl_search_finds_dijkstras_costs_and_searches_again_when_its_heap_is_full():
    """SPL's A* (``spawn._a_star``) on the house's spawn grid: the goal's cost is SciPy's Dijkstra's
    over the same graph, a goal in another component is not reached, every cell's search state is
    cleared again, and a heap too small for the search says so (``_search``, which ``path_lengths``
    calls, then searches again with a larger one and finds the same cost)."""
    from navi_nb.env import spawn

    env = make_env("house", n=4)
    sp = env._spawner
    reach, dims, cell = sp.reach, sp.dims, float(sp.cell)
    cells = np.flatnonzero(reach)
    rng = np.random.default_rng(7)
    n = reach.size
    state = np.where(reach, spawn.REACHABLE, 0).astype(np.uint8)
    search = (np.empty(n), np.empty(n, np.int64), state, np.empty(n, np.int64))
    heap = np.empty(8 * n)
    for s_cell, g_cell in rng.choice(cells, size=(6, 2)):
        expect = _scipy_grid_costs(reach, dims, cell, s_cell)[g_cell]
        outcome = spawn._a_star(dims, cell, s_cell, g_cell, search, heap)
        assert outcome == spawn.PATH and np.isfinite(expect)
        assert abs(search[0][g_cell] - expect) <= 1e-9 * expect, (search[0][g_cell], expect)
        assert np.array_equal(state, np.where(reach, spawn.REACHABLE, 0))  # cleared for the next search
        cost = search[0][g_cell]
        tiny = np.empty(2 * 4)  # room for four entries
        assert spawn._a_star(dims, cell, s_cell, g_cell, search, tiny) == spawn.HEAP_FULL
        assert np.array_equal(state, np.where(reach, spawn.REACHABLE, 0))
        outcome, grown = spawn._search(dims, cell, s_cell, g_cell, search, tiny)  # doubles it until it fits
        assert outcome == spawn.PATH and grown.shape[0] > tiny.shape[0] and search[0][g_cell] == cost
    # a goal cut off from the start: no path
    walled = reach.copy().reshape(tuple(dims))
    walled[dims[0] // 2, :, :] = False
    walled = walled.ravel()
    left = cells[cells < (dims[0] // 2) * dims[1] * dims[2]][0]
    right = cells[cells > (dims[0] // 2 + 1) * dims[1] * dims[2]][-1]
    state[:] = np.where(walled, spawn.REACHABLE, 0)
    assert spawn._a_star(dims, cell, left, right, search, heap) == spawn.NO_PATH
