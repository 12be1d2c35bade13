"""The Gymnasium forms: spaces, autoreset infos, standard wrappers, check_env, registration, seeds, threads."""

import configparser
import os
import subprocess
import sys
import types
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from env_helpers import make_env, scene_world, small_sensor

from navi_nb.errors import NaviError

ROOT = Path(__file__).resolve().parents[1]


def box_vec(n=4, **kw):
    from navi_nb.env.gym_adapter import NaviVectorEnv

    kw.setdefault("max_steps", 6)
    return NaviVectorEnv(scene_world("box"), n, sensor=small_sensor(), task="pointgoal", seed=3, **kw)


def test_spaces_and_steps():
    from gymnasium.vector import AutoresetMode

    venv = box_vec()
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
        # Gymnasium's own vector environments return float64 rewards
        assert rew.shape == (4,) and rew.dtype == np.float64
        assert term.dtype == bool and trunc.dtype == bool
        assert info["success"].dtype == bool and info["_success"].all()
        assert np.array_equal(info["success"], term)  # pointgoal ends exactly when the goal is reached
        assert set(info["reward_terms"]) >= {"progress", "success", "contact", "time"}
        done = term | trunc
        assert ("final_obs" in info) == bool(done.any()) and "episode" not in info
        if done.any():
            for key in ("_final_obs", "_final_info", "_navi"):
                assert np.array_equal(info[key], done)
            for i in np.flatnonzero(done):
                assert venv.single_observation_space.contains(info["final_obs"][i])
                assert info["navi"]["length"][i] >= 1
                assert info["final_info"]["navi"]["length"][i] == info["navi"]["length"][i]
                assert info["final_info"]["success"][i] == term[i]
            assert np.all(info["navi"]["length"][~done] == 0)
        finished += int(done.sum())
    assert finished >= 4  # the 6-step limit ended every actor's first episode
    venv.close()


def test_record_episode_statistics_wrapper():
    from gymnasium.wrappers.vector import RecordEpisodeStatistics

    envs = RecordEpisodeStatistics(box_vec(max_steps=5))
    envs.reset(seed=2)
    rng = np.random.default_rng(1)
    totals = np.zeros(4)
    seen = 0
    for _ in range(11):
        _obs, rew, term, trunc, info = envs.step(rng.uniform(-1, 1, (4, 4)).astype(np.float32))
        totals += rew
        done = term | trunc
        if done.any():
            assert np.array_equal(info["_episode"], done) and np.array_equal(info["_navi"], done)
            for i in np.flatnonzero(done):
                # Gymnasium's own count and sum against navi_nb's episode record and our running sum
                assert info["episode"]["l"][i] == info["navi"]["length"][i]
                assert info["episode"]["r"][i] == pytest.approx(totals[i], abs=1e-9)
                assert info["episode"]["r"][i] == pytest.approx(info["navi"]["return"][i], rel=1e-5, abs=1e-5)
                seen += 1
            totals[done] = 0.0
    assert seen >= 8 and len(envs.return_queue) == seen


def test_check_env_on_the_single_actor_form():
    from gymnasium.utils.env_checker import check_env

    from navi_nb.env.gym_adapter import NaviEnv

    env = NaviEnv(scene_world("box"), sensor=small_sensor(), seed=4, max_steps=5)
    check_env(env, skip_render_check=True)
    obs, _ = env.reset(seed=9)
    assert env.observation_space.contains(obs)
    for t in range(5):
        obs, rew, term, trunc, info = env.step(env.action_space.sample())
        assert isinstance(rew, float) and isinstance(info["success"], bool) and info["success"] == term
        if term or trunc:
            assert info["navi"]["length"] == t + 1
            break
    else:
        pytest.fail("max_steps=5 did not end the episode")
    with pytest.raises(NaviError, match=r"shape \(4,\)"):
        env.step(np.zeros((1, 4), np.float32))


def test_single_form_matches_the_vector_form_with_one_actor():
    from navi_nb.env.gym_adapter import NaviEnv, NaviVectorEnv

    kw = {"sensor": small_sensor(), "task": "pointgoal", "max_steps": 4}
    one = NaviEnv(scene_world("box"), **kw)
    vec = NaviVectorEnv(scene_world("box"), 1, **kw)
    o1, _ = one.reset(seed=11)
    ov, _ = vec.reset(seed=11)
    assert np.array_equal(o1, ov[0])
    rng = np.random.default_rng(3)
    for _ in range(4):
        a = rng.uniform(-1, 1, 4).astype(np.float32)
        o1, r1, te1, tr1, i1 = one.step(a)
        ov, rv, tev, trv, iv = vec.step(a[None])
        assert r1 == rv[0] and te1 == tev[0] and tr1 == trv[0]
        if te1 or tr1:
            assert np.array_equal(o1, iv["final_obs"][0])
            assert i1["navi"] == {k: v[0].item() for k, v in iv["navi"].items() if not k.startswith("_")}
            break
        assert np.array_equal(o1, ov[0])
    else:
        pytest.fail("max_steps=4 did not end the episode")


def test_registered_ids_and_make_vec():
    import navi_nb.env.gym_adapter as ga

    assert "navi_nb/PointNav-v0" in gym.registry and "navi_nb/Explore-v0" in gym.registry
    kw = {"world": scene_world("box"), "sensor": small_sensor(), "max_steps": 3}
    env = gym.make("navi_nb/Explore-v0", **kw)
    assert isinstance(env.unwrapped, ga.NaviEnv) and env.unwrapped.env.task == "explore"
    env.reset(seed=0)
    env.step(env.action_space.sample())
    venv = gym.make_vec("navi_nb/PointNav-v0", num_envs=3, **kw)
    assert isinstance(venv.unwrapped, ga.NaviVectorEnv) and venv.num_envs == 3
    # Gymnasium's SyncVectorEnv over the single form (same-step autoreset): the same info layout and reward dtype
    sync = gym.make_vec(
        "navi_nb/PointNav-v0",
        num_envs=2,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
        **kw,
    )
    sync.reset(seed=0)
    venv.reset(seed=0)
    final_s = final_v = None
    for _ in range(3):  # max_steps=3: every actor finishes by the third step
        _, rs, _, _, infos = sync.step(sync.action_space.sample())
        _, rv, _, _, infov = venv.step(venv.action_space.sample())
        assert rs.dtype == rv.dtype == np.float64
        final_s = infos if "final_info" in infos else final_s
        final_v = infov if "final_info" in infov else final_v
    for key in ("final_obs", "_final_obs", "final_info", "_final_info"):
        assert key in final_s and key in final_v
    assert set(final_s["final_info"]) >= {"navi", "_navi", "success", "_success", "reward_terms", "contact"}
    assert set(final_s["final_info"]["navi"]) == set(final_v["final_info"]["navi"])
    with pytest.raises(NaviError, match="neither a .gmdag file nor a built-in scene"):
        gym.make("navi_nb/PointNav-v0", world="no_such_scene")


def test_seed_lists():
    venv = box_vec()
    a, _ = venv.reset(seed=[1, 2, 3, 4])
    b, _ = venv.reset(seed=[1, 2, 3, 4])
    c, _ = venv.reset(seed=[1, 2, 3, 5])
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    d, _ = venv.reset(seed=7)
    e, _ = venv.reset(seed=np.int64(7))
    assert np.array_equal(d, e)
    for bad in ([1, 2, 3], [1, 2, -3, 4], 1.5, -2, [1, 2, 3, "x"]):
        with pytest.raises(NaviError, match="seed"):
            venv.reset(seed=bad)
    with pytest.raises(NaviError, match="options"):
        venv.reset(options={"reset_mask": np.ones(4, bool)})


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


def test_threads_knob():
    import numba

    import navi_nb
    from navi_nb.env.gym_adapter import NaviEnv
    from navi_nb.threads import ThreadsError, thread_limit

    before = numba.get_num_threads()
    venv = box_vec(threads=1)
    assert venv.threads == 1
    venv.reset(seed=0)
    venv.step(np.zeros((4, 4), np.float32))
    assert numba.get_num_threads() == before  # applied only while stepping
    assert NaviEnv(scene_world("box"), sensor=small_sensor()).threads == 1
    assert box_vec().threads == max(1, thread_limit() // 2)
    too_many = thread_limit() + 1
    for bad in (0, -1, True, 1.0, too_many):
        with pytest.raises(ThreadsError, match="threads"):
            box_vec(threads=bad)
    with pytest.raises(ThreadsError):
        navi_nb.set_threads(too_many)
    assert numba.get_num_threads() == before
    assert navi_nb.set_threads(1) == 1 and numba.get_num_threads() == 1
    assert box_vec().threads == 1  # the chosen count is the adapters' default
    assert navi_nb.set_threads(None) is None
    numba.set_num_threads(before)


def test_threads_environment_variable():
    code = "from navi_nb.threads import chosen_threads; print(chosen_threads())"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env=dict(env, NAVI_NB_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0 and out.stdout.strip() == "1", out.stderr
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env=dict(env, NAVI_NB_THREADS="lots"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode != 0 and "NAVI_NB_THREADS must be a positive integer" in out.stderr


def test_gymnasium_floor(monkeypatch):
    from navi_nb.env.gym_adapter import GYMNASIUM_MIN

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    for extra in ("gym", "test"):
        reqs = [r.strip() for r in cfg["options.extras_require"][extra].split("\n") if "gymnasium" in r]
        assert reqs == [f"gymnasium>={GYMNASIUM_MIN}"]
    # an installed gymnasium without AutoresetMode (0.29, 1.0): the message says to upgrade, not to install
    monkeypatch.delitem(sys.modules, "navi_nb.env.gym_adapter")
    monkeypatch.setitem(sys.modules, "gymnasium.vector", types.ModuleType("gymnasium.vector"))
    with pytest.raises(ImportError, match=r"gymnasium >= 1\.1 \(for AutoresetMode\).*is installed.*pip install -U"):
        import navi_nb.env.gym_adapter  # noqa: F401


def test_adapters_check_num_envs_against_a_given_env():
    """Every adapter takes a NavEnv or builds one: both missing is a TypeError, a num_envs that is not the
    given env's actor count a one-line EnvConfigError (not silently ignored)."""
    from navi_nb.env.config import EnvConfigError
    from navi_nb.env.gym_adapter import NaviVectorEnv

    with pytest.raises(TypeError, match="NaviVectorEnv needs num_envs"):
        NaviVectorEnv(scene_world("box"))
    with pytest.raises(EnvConfigError, match="num_envs=3 but the NavEnv has 4 actors"):
        NaviVectorEnv(env=make_env(n=4), num_envs=3)
    assert NaviVectorEnv(env=make_env(n=4), num_envs=4).num_envs == 4


def test_the_map_reaches_the_gymnasium_forms():
    """With the episodic map on, both forms' spaces hold its crop (bounded 0..1) and their observations fit."""
    from navi_nb.env.gym_adapter import NaviEnv

    venv = box_vec(map_cell=0.5, map_crop=4, map_band=0.6)
    cols = venv.env.obs_layout["map"]
    assert cols.stop - cols.start == 4 * 4 * 3 and venv.single_observation_space.shape == (venv.env.obs_dim,)
    low, high = venv.single_observation_space.low, venv.single_observation_space.high
    assert (low[cols] == 0).all() and (high[cols] == 1).all()
    venv.reset(seed=1)
    obs = venv.step(np.full((4, 4), 0.5, np.float32))[0]
    assert obs[:, cols].any() and venv.observation_space.contains(obs)
    one = NaviEnv(scene_world("box"), sensor=small_sensor(), map_cell=0.5, map_crop=4, map_band=0.6)
    o, _ = one.reset(seed=0)
    assert one.observation_space.contains(o) and o[cols].any()
