"""Autoreset (SAME_STEP), final observations, episode counts (issue 4, acceptance line 4)."""

import math

import numpy as np
from env_helpers import act, make_env, place


def test_finished_actor_gets_a_fresh_episode_while_others_carry_on():
    env = make_env("box", n=3, seed=2)
    env.reset()
    # actor 1 reaches its goal on the next step; actors 0 and 2 walk on
    place(
        env,
        [[0, 1.5, 0.0], [2, 1.5, 0.0], [-2, 1.5, 0.0]],
        [0.0, 0.0, 0.0],
        goal=[[0, 1.5, 2.5], [2, 1.5, -0.6], [-2, 1.5, 2.5]],
    )
    before = env.get_state()
    obs, rew, term, trunc, info = env.step(act(3, f=1.0))
    after = env.get_state()
    assert info["done"].tolist() == [False, True, False]
    assert term.tolist() == [False, True, False] and not trunc.any()
    # the others carried on: moved 0.2 m, episode length 1
    np.testing.assert_allclose(after["pos"][[0, 2], 2], before["pos"][[0, 2], 2] - 0.2, atol=1e-6)
    assert after["ep_len"].tolist() == [1, 0, 1]
    assert after["episodes"].tolist() == [0, 1, 0]
    # the finished one was reset in the same call: a new spawn, a new goal, counters at zero
    assert not np.allclose(after["pos"][1], [2, 1.5, -0.2])
    assert not np.allclose(after["goal"][1], [2, 1.5, -0.6])
    assert after["ep_return"][1] == 0.0 and after["path_len"][1] == 0.0
    # its returned observation is the first of the new episode (prev action and velocity zero) ...
    lay = env.obs_layout
    assert not obs[1, lay["prev_action"]].any() and not obs[1, lay["velocity"]].any()
    g = obs[1, lay["goal"]]
    d_new = np.linalg.norm(after["goal"][1].astype(np.float64) - after["pos"][1])
    np.testing.assert_allclose(g[0], d_new / env.config.goal_scale, rtol=1e-5)
    # its rays are those of its new spawn (the step traced it there in the same call as the others)
    depth_new = env._tracer.trace(after["pos"][1:2].copy(), after["yaw"][1:2].copy())[0].reshape(-1)
    want = np.log1p(depth_new.astype(np.float64)) / math.log1p(env.config.max_distance)
    np.testing.assert_allclose(obs[1, lay["depth"]], want, rtol=1e-6, atol=1e-7)
    # ... and the finished episode's last observation is in final_obs
    fo = info["final_obs"][1]
    np.testing.assert_allclose(fo[lay["prev_action"]], [1, 0, 0, 0])
    np.testing.assert_allclose(fo[lay["velocity"]], [1, 0, 0], atol=1e-5)
    np.testing.assert_allclose(fo[lay["goal"]][0], 0.4 / env.config.goal_scale, atol=1e-5)
    # the pose where it ended (the reset moved the actor away from it)
    np.testing.assert_allclose(info["final_pos"][1], [2, 1.5, -0.2], atol=1e-6)
    assert info["final_yaw"][1] == 0.0
    # it is the observation of the pose where the episode ended: re-observe that pose and compare
    keep = env.get_state()
    st = env.get_state()
    st["pos"][1] = [2, 1.5, -0.2]
    st["yaw"][1] = 0.0
    st["goal"][1] = [2, 1.5, -0.6]
    st["prev_action"][1] = [1, 0, 0, 0]
    st["vel"][1] = [0, 0, -2.0]
    env.set_state(st)
    env._observe(np.array([1], np.int64))
    np.testing.assert_array_equal(env.get_state()["obs"][1], fo)
    env.set_state(keep)
    # the next step carries the reset actor on in its new episode
    info = env.step(act(3))[4]
    assert env.get_state()["ep_len"].tolist() == [2, 1, 2]
    assert not info["done"][1]


def test_episode_counts_with_truncation():
    n, k, steps = 5, 4, 21
    env = make_env("pillars", n=n, seed=1, task="explore", max_steps=k)
    env.reset()
    dones = np.zeros(n, int)
    for t in range(1, steps + 1):
        obs, rew, term, trunc, info = env.step(np.zeros((n, 4), np.float32))
        assert not term.any()  # explore never terminates
        expect = t % k == 0
        assert trunc.tolist() == [expect] * n and info["done"].tolist() == [expect] * n
        if expect:
            assert info["episode"]["length"].tolist() == [k] * n
        dones += info["done"]
    assert dones.tolist() == [steps // k] * n
    assert env.episodes_finished.tolist() == [steps // k] * n


def test_reset_with_seed_repeats_spawns():
    env = make_env("house", n=6, seed=0)
    env.reset(seed=11)
    a = env.get_state()
    env.step(np.ones((6, 4), np.float32))
    env.reset(seed=11)
    b = env.get_state()
    for key in ("pos", "yaw", "goal", "obs", "rng_spawn", "rng_goal"):
        np.testing.assert_array_equal(a[key], b[key])
    env.reset(seed=12)
    assert not np.array_equal(env.get_state()["pos"], a["pos"])


def test_spawns_and_goals_are_free_reachable_and_in_range():
    from env_helpers import scene

    sc = scene("house")
    env = make_env("house", n=64, seed=4, goal_min_distance=2.0, goal_max_distance=6.0)
    env.reset()
    st = env.get_state()
    d, _ = sc.evaluate(st["pos"].astype(np.float64))
    assert np.all(d >= env.config.radius)
    dg, _ = sc.evaluate(st["goal"].astype(np.float64))
    assert np.all(dg >= env.config.radius)
    lo, hi = np.array(sc.bounds_min), np.array(sc.bounds_max)
    assert np.all((st["pos"] > lo) & (st["pos"] < hi)) and np.all((st["goal"] > lo) & (st["goal"] < hi))
    sep = np.linalg.norm(st["goal"] - st["pos"], axis=1)
    assert np.mean((sep >= 2.0) & (sep <= 6.0)) > 0.95
    assert np.all((st["yaw"] >= -math.pi) & (st["yaw"] < math.pi))
    # spawn points mode: every spawn is one of the world's listed points
    env2 = make_env("house", n=16, seed=4, spawn="points")
    env2.reset()
    pts = env2.world.spawn_points
    dist = np.linalg.norm(env2.positions[:, None, :] - pts[None], axis=2).min(axis=1)
    assert np.all(dist < 1e-6)
