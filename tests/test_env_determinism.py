"""Same seed and actions -> identical runs, at 1 and 2 threads; exact resume (issue 4, line 6)."""

import numba
import numpy as np
from env_helpers import make_env, states_equal


def _run(threads, task, steps=30, n=12, seed=9):
    old = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        env = make_env("house", n=n, task=task, seed=seed, max_steps=10)
        obs, _ = env.reset()
        rng = np.random.default_rng(3)
        out = [obs.copy()]
        for _ in range(steps):
            o, r, te, tr, info = env.step(rng.uniform(-1.2, 1.2, (n, 4)).astype(np.float32))
            out += [o.copy(), r.copy(), te.copy(), tr.copy(), info["final_obs"][info["done"]].copy()]
            out += [v.copy() for v in info["episode"].values()]  # SPL from the deferred shortest paths too
        return out, env.get_state()
    finally:
        numba.set_num_threads(old)


def test_same_seed_same_run_at_1_and_2_threads():
    for task in ("pointgoal", "explore"):
        a, sa = _run(1, task)
        b, sb = _run(2, task)
        c, sc = _run(2, task)
        assert len(a) == len(b)
        for x, y, z in zip(a, b, c):
            assert x.dtype == y.dtype and np.array_equal(x, y) and np.array_equal(y, z)
        assert states_equal(sa, sb)
    d, _ = _run(1, "pointgoal", seed=10)
    assert not np.array_equal(d[0], a[0])  # a different seed is a different run


def test_deferred_shortest_paths_are_spawns_direct_ones_and_never_land_late():
    """SPL's shortest paths run on a worker thread (``NavEnv._start_shortest_paths``): what the env
    reports equals a direct ``SpawnSampler.path_lengths`` of its spawns and goals, and a restored
    state keeps its own even when a path of the episode it replaced was still being computed."""
    old = numba.get_num_threads()
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    try:
        env = make_env("house", n=6, seed=4, max_steps=10)
        env.reset()
        st = env.get_state()
        direct = env._spawner.path_lengths(st["pos"], st["goal"])
        assert np.array_equal(env.shortest_paths, direct)
        assert (direct >= np.linalg.norm(st["goal"] - st["pos"], axis=1) - 1e-6).all()
        st["start_dist"][...] = 1234.5
        env.reset()  # new paths deferred, then at once a state holding other ones
        env.set_state(st)
        assert (env.shortest_paths == 1234.5).all() and (env.get_state()["start_dist"] == 1234.5).all()
    finally:
        numba.set_num_threads(old)


def test_get_set_state_resumes_exactly():
    n = 8
    rng = np.random.default_rng(0)
    acts = rng.uniform(-1, 1, (40, n, 4)).astype(np.float32)
    env = make_env("maze", n=n, seed=2, max_steps=7)
    env.reset()
    for a in acts[:15]:
        env.step(a)
    saved = env.get_state()
    tail_a = []
    for a in acts[15:]:
        o, r = env.step(a)[:2]
        tail_a.append((o.copy(), r.copy()))  # step returns reused buffers: copy what is kept
    final_a = env.get_state()
    other = make_env("maze", n=n, seed=99, max_steps=7)  # a different env, restored from the state
    other.reset()
    other.set_state(saved)
    for (o, r), a in zip(tail_a, acts[15:]):
        o2, r2 = other.step(a)[:2]
        np.testing.assert_array_equal(o, o2)
        np.testing.assert_array_equal(r, r2)
    assert states_equal(final_a, other.get_state())
