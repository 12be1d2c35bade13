"""The Gymnasium VectorEnv adapter: spaces, autoreset metadata, a few steps."""
import numpy as np
import pytest

gym = pytest.importorskip("gymnasium", reason="gymnasium (the 'gym' extra) is not installed")

from env_helpers import make_env, small_sensor, scene_world  # noqa: E402


def test_spaces_and_steps():
    from gymnasium.vector import AutoresetMode

    from navi_nb.env.gym_adapter import NaviVectorEnv

    venv = NaviVectorEnv(scene_world("box"), 4, sensor=small_sensor(), task="pointgoal", seed=3, max_steps=6)
    assert isinstance(venv, gym.vector.VectorEnv)
    assert venv.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert venv.num_envs == 4
    d = venv.env.obs_dim
    assert d == 8 * 4 + 4 + 3 + 4
    assert venv.single_observation_space.shape == (d,) and venv.single_observation_space.dtype == np.float32
    assert venv.observation_space.shape == (4, d)
    assert venv.single_action_space == gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    assert venv.action_space.shape == (4, 4)
    obs, info = venv.reset(seed=5)
    assert venv.observation_space.contains(obs)
    venv.action_space.seed(0)
    finished = 0
    for _ in range(7):
        obs, rew, term, trunc, info = venv.step(venv.action_space.sample())
        assert venv.observation_space.contains(obs)
        assert rew.shape == (4,) and rew.dtype == np.float32
        assert term.dtype == bool and trunc.dtype == bool
        assert np.array_equal(info["_final_obs"], term | trunc)
        for i in np.flatnonzero(info["_final_obs"]):
            assert venv.single_observation_space.contains(info["final_obs"][i])
            assert info["episode"]["length"][i] >= 1
        finished += int(info["_final_obs"].sum())
    assert finished >= 4  # the 6-step limit ended every actor's first episode
    venv.close()


def test_wraps_an_existing_env_and_returns_copies():
    from navi_nb.env.gym_adapter import NaviVectorEnv

    env = make_env("box", n=2, task="explore")
    venv = NaviVectorEnv(env=env)
    o1, _ = venv.reset(seed=1)
    o2 = venv.step(np.zeros((2, 4), np.float32))[0]
    assert o1 is not o2 and not np.shares_memory(o1, env.get_state()["obs"])
    low, high = venv.single_observation_space.low, venv.single_observation_space.high
    assert np.all(low[env.obs_layout["depth"]] == 0) and np.all(high[env.obs_layout["depth"]] == 1)
    with pytest.raises(TypeError):
        NaviVectorEnv()
