"""Observation layout and contents against the tracer's own output."""

import math

import numpy as np
from env_helpers import act, make_env, place


def test_layout_and_depth_semantic_blocks_match_the_tracer():
    env = make_env("pillars", n=3, seed=2, semantic_obs=True)
    env.reset()
    lay = env.obs_layout
    R = 8 * 4
    assert [(k, s.start, s.stop) for k, s in lay.items()] == [
        ("depth", 0, R),
        ("semantic", R, 2 * R),
        ("prev_action", 2 * R, 2 * R + 4),
        ("velocity", 2 * R + 4, 2 * R + 7),
        ("goal", 2 * R + 7, 2 * R + 11),
    ]
    assert env.obs_dim == 2 * R + 11
    obs = env.step(act(3, f=0.3, w=0.5))[0]
    depth, sem, hit = env._tracer.trace(env.positions.copy(), env.yaws.copy())
    want_depth = np.log1p(depth.astype(np.float64)).reshape(3, -1) / math.log1p(env.config.max_distance)
    np.testing.assert_allclose(obs[:, lay["depth"]], want_depth, rtol=1e-6, atol=1e-7)
    assert obs[:, lay["depth"]].min() >= 0.0 and obs[:, lay["depth"]].max() <= 1.0
    n_classes = len(env.world.class_names)
    np.testing.assert_allclose(obs[:, lay["semantic"]], sem.reshape(3, -1) / (n_classes - 1), rtol=1e-6)
    assert np.all(obs[:, lay["semantic"]][~hit.reshape(3, -1)] == 0.0)


def test_explore_layout_has_no_goal():
    env = make_env("box", n=2, task="explore")
    obs, _ = env.reset()
    assert list(env.obs_layout) == ["depth", "prev_action", "velocity"]
    assert obs.shape == (2, 8 * 4 + 7) and obs.dtype == np.float32
    # after a reset: previous action and velocity are zero
    assert not obs[:, 32:].any()
    place(env, [[0, 1.5, 0], [0, 1.5, 0]], [0.0, 0.0])
    obs = env.step(act(2, f=1.0))[0]
    np.testing.assert_allclose(obs[:, env.obs_layout["velocity"]], [[1, 0, 0]] * 2, atol=1e-5)
