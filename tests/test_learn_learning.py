"""PPO learns: success rate from near 0 to >= 80% with a fixed seed.

- the toy point-goal task (self-contained, a few seconds);
- NavEnv's `box` scene, point-goal, a small sensor and a few actors.
"""

import time

import numpy as np
import pytest

import navi_nb  # noqa: F401
from navi_nb.learn.collect import train
from navi_nb.learn.policy import ActorCritic
from navi_nb.learn.ppo import PPO, PPOConfig
from navi_nb.learn.rollout import RolloutSlab


def evaluate(env, policy, steps, seed, deterministic=False):
    """Success rate of finished episodes over ``steps`` steps of every actor."""
    rng = np.random.default_rng([seed, 99])
    obs, _ = env.reset(seed=seed)
    succ = []
    for _ in range(steps):
        a, _, _ = policy.act(obs, rng, deterministic=deterministic)
        obs, _, _, _, info = env.step(a)
        done = np.asarray(info["done"])
        succ.extend(np.asarray(info["episode"]["success"])[done].tolist())
    return float(np.mean(succ)), len(succ)


@pytest.fixture
def one_thread():
    """Results do not depend on the thread count (test_learn_same_sum); one thread
    is the fastest for 16 actors on a shared 2-core machine."""
    import numba

    before = numba.get_num_threads()
    numba.set_num_threads(1)
    yield
    numba.set_num_threads(before)


def test_box_point_goal_learns(one_thread):
    from navi_nb.env.nav_env import NavEnv
    from navi_nb.sense.sensor import Sensor
    from navi_nb.world.compiler import compile_scene

    world = compile_scene("box", resolution=32, seed=0)

    def make():
        return NavEnv(world, 16, sensor=Sensor(8, 3), task="pointgoal", seed=0, max_steps=60, goal_max_distance=3.0)

    env = make()
    pol = ActorCritic(env.obs_dim, 4, hidden=(64, 64), seed=0)
    before, n0 = evaluate(make(), pol, 240, seed=1)
    assert n0 >= 40 and before < 0.15, (before, n0)
    ppo = PPO(pol, PPOConfig(learning_rate=1e-3, anneal_lr=False), seed=0)
    slab = RolloutSlab(64, env.n_actors, env.obs_dim, 4)
    t0 = time.perf_counter()
    rows = train(env, ppo, slab, 30, seed=0)
    t_train = time.perf_counter() - t0
    after, n1 = evaluate(make(), pol, 240, seed=1)
    det, _ = evaluate(make(), pol, 240, seed=1, deterministic=True)
    print(
        f"box: success {before:.2f} ({n0} episodes) -> {after:.2f} ({n1}; deterministic {det:.2f}) "
        f"after 30 updates x 1024 samples in {t_train:.1f} s"
    )
    assert after >= 0.8, (after, [round(r["success_rate"], 2) for r in rows])


def test_toy_point_goal_learns(one_thread):
    from navi_nb.env.toy import PointGoalToy

    def make():
        return PointGoalToy(32, seed=0, size=3.0, success_radius=0.25, max_steps=40, speed=0.3)

    env = make()
    pol = ActorCritic(env.obs_dim, 4, hidden=(64, 64), seed=0)
    before, n0 = evaluate(make(), pol, 200, seed=1)
    assert n0 >= 100 and before < 0.1, (before, n0)
    ppo = PPO(pol, PPOConfig(learning_rate=1e-3, anneal_lr=False), seed=0)
    slab = RolloutSlab(64, env.n_actors, env.obs_dim, 4)
    t0 = time.perf_counter()
    rows = train(env, ppo, slab, 15, seed=0)
    t_train = time.perf_counter() - t0
    after, n1 = evaluate(make(), pol, 200, seed=1)
    print(
        f"toy: success {before:.2f} ({n0} episodes) -> {after:.2f} ({n1}) "
        f"after 15 updates x 2048 samples in {t_train:.1f} s"
    )
    assert after >= 0.8, (after, [round(r["success_rate"], 2) for r in rows])
