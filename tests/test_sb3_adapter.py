"""The Stable-Baselines3 VecEnv adapter: SB3's VecEnv contract checked step by step against NavEnv itself,
SB3's wrappers, a tiny PPO run, the missing-extra message, and the `bench sb3` tables at 80 columns."""

import configparser
import io
import sys
from argparse import Namespace
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from env_helpers import make_env
from peer_helpers import need_peer
from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
N, MAX_STEPS = 4, 6


def pair(seed=3, task="pointgoal", **kw):
    """(adapter over a NavEnv, a second NavEnv built the same way: the reference)."""
    from navi_nb.env.sb3_adapter import NaviSB3VecEnv

    kw.setdefault("max_steps", MAX_STEPS)
    return NaviSB3VecEnv(env=make_env("box", N, task=task, seed=seed, **kw), threads=1), make_env(
        "box", N, task=task, seed=seed, **kw
    )


def put_goal_at_actor_0(env):
    """Actor 0's goal where it stands: its next step reaches it (a success to see)."""
    st = env.get_state()
    st["goal"][0] = st["pos"][0]
    st["goal_dist"][0] = 0.0
    env.set_state(st)


def test_vecenv_contract_against_navenv():
    need_peer("stable_baselines3")
    from stable_baselines3.common.vec_env import VecEnv

    venv, ref = pair()
    assert isinstance(venv, VecEnv) and venv.num_envs == N
    d = ref.obs_dim
    assert venv.observation_space.shape == (d,) and venv.observation_space.dtype == np.float32
    assert venv.action_space == gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    assert venv.seed(7) == [7, 8, 9, 10]  # SB3's list; the shared generator takes 7
    obs = venv.reset()
    ref_obs, _ = ref.reset(seed=7)
    assert obs.shape == (N, d) and obs.dtype == np.float32 and np.array_equal(obs, ref_obs)
    assert not np.shares_memory(obs, venv.env.get_state()["obs"])
    put_goal_at_actor_0(venv.env)
    put_goal_at_actor_0(ref)
    rng = np.random.default_rng(0)
    hand_return, hand_length = np.zeros(N), np.zeros(N, int)
    seen = {"truncated": 0, "success": 0}
    for t in range(3 * MAX_STEPS + 1):
        actions = rng.uniform(-1, 1, (N, 4)).astype(np.float32)
        if t == 0:
            actions[0] = 0.0
        obs, rewards, dones, infos = venv.step(actions)
        r_obs, r_rew, r_term, r_trunc, r_info = ref.step(actions)
        assert obs.dtype == np.float32 and obs.shape == (N, d) and np.array_equal(obs, r_obs)
        assert rewards.dtype == np.float32 and rewards.shape == (N,) and np.array_equal(rewards, r_rew)
        assert dones.dtype == bool and np.array_equal(dones, r_term | r_trunc)
        assert isinstance(infos, list) and len(infos) == N
        hand_return += rewards.astype(np.float64)
        hand_length += 1
        for i, info in enumerate(infos):
            time_limit = bool(r_trunc[i]) and not bool(r_term[i])
            assert info["TimeLimit.truncated"] is time_limit
            assert time_limit == (bool(dones[i]) and hand_length[i] == MAX_STEPS and not r_info["success"][i])
            if not dones[i]:
                assert set(info) == {"TimeLimit.truncated"}
                continue
            # the pre-reset observation NavEnv produced, not the next episode's first
            assert np.array_equal(info["terminal_observation"], r_info["final_obs"][i])
            assert not np.array_equal(info["terminal_observation"], obs[i])
            assert info["episode"]["l"] == hand_length[i]
            assert info["episode"]["r"] == pytest.approx(hand_return[i], abs=1e-5)
            assert info["episode"]["t"] >= 0.0
            assert info["is_success"] is bool(r_info["success"][i]) is bool(r_term[i])
            assert info["navi"]["length"] == hand_length[i] and info["navi"]["success"] == info["is_success"]
            seen["truncated"] += time_limit
            seen["success"] += info["is_success"]
            hand_return[i], hand_length[i] = 0.0, 0
    assert seen["success"] >= 1 and seen["truncated"] >= N  # both ends were met (the 6-step limit ends the rest)


def test_seed_and_reset_rules():
    need_peer("stable_baselines3")
    from navi_nb.errors import NaviError

    venv, _ = pair(seed=0)
    venv.seed(5)
    first = venv.reset()
    assert not np.array_equal(venv.reset(), first)  # no seed pending: the shared generator goes on
    venv.seed(5)
    assert np.array_equal(venv.reset(), first)  # the seed applies at the next reset, once
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(NaviError, match="seed"):
            venv.seed(bad)
    venv.set_options({"reset_mask": [True] * N})
    with pytest.raises(NaviError, match="options"):
        venv.reset()


def test_attributes_methods_and_wrappers_queries():
    need_peer("stable_baselines3")
    from stable_baselines3.common.monitor import Monitor

    from navi_nb.errors import NaviError

    venv, _ = pair(task="explore")
    venv.reset()
    assert venv.get_attr("obs_dim") == [venv.env.obs_dim] * N
    assert venv.get_attr("render_mode") == [None] * N
    pos = venv.get_attr("positions", [1, 3])
    assert np.array_equal(np.stack(pos), venv.env.positions[[1, 3]])
    pos[0][:] = -1.0  # a copy
    assert not np.array_equal(venv.env.positions[1], pos[0])
    state = venv.env_method("get_state")
    assert len(state) == N and np.array_equal(state[0]["pos"], venv.env.positions)
    venv.set_attr("trace_seconds", 0.0)
    assert venv.env.trace_seconds == 0.0
    with pytest.raises(NaviError, match="share one NavEnv"):
        venv.set_attr("trace_seconds", 1.0, indices=[0])
    with pytest.raises(NaviError, match="share one NavEnv"):
        venv.env_method("get_state", indices=[2])
    with pytest.raises(NaviError, match="per-actor"):
        venv.set_attr("positions", np.zeros((N, 3)))
    with pytest.raises(NaviError, match="not an actor"):
        venv.get_attr("obs_dim", [N])
    assert venv.env_is_wrapped(Monitor) == [True] * N  # the adapter writes Monitor's episode record
    assert venv.env_is_wrapped(gym.wrappers.TimeLimit, [0, 1]) == [False, False]


def test_sb3_wrappers():
    need_peer("stable_baselines3")
    from stable_baselines3.common.vec_env import VecMonitor, VecNormalize

    venv, _ = pair(task="explore")
    with pytest.warns(UserWarning, match="Monitor"):  # SB3 notes it overwrites the adapter's record
        mon = VecMonitor(venv)
    mon.seed(1)
    mon.reset()
    rng = np.random.default_rng(2)
    sums = np.zeros(N)
    ends = 0
    for _ in range(2 * MAX_STEPS):
        _obs, rew, dones, infos = mon.step(rng.uniform(-1, 1, (N, 4)).astype(np.float32))
        sums += rew
        for i in np.flatnonzero(dones):
            assert infos[i]["episode"]["r"] == pytest.approx(sums[i], abs=1e-4)
            assert infos[i]["episode"]["l"] == MAX_STEPS
            sums[i] = 0.0
            ends += 1
    assert ends == 2 * N
    norm = VecNormalize(pair(task="explore")[0], gamma=0.99)
    obs = norm.reset()
    for _ in range(MAX_STEPS):
        obs, rew, dones, infos = norm.step(rng.uniform(-1, 1, (N, 4)).astype(np.float32))
        assert np.isfinite(obs).all() and np.isfinite(rew).all()
    assert dones.all() and all(np.isfinite(i["terminal_observation"]).all() for i in infos)
    assert norm.obs_rms.count > N * MAX_STEPS  # the statistics saw every step


def test_tiny_ppo_learns_without_error():
    torch = need_peer("torch")
    need_peer("stable_baselines3")
    from stable_baselines3 import PPO

    torch.set_num_threads(1)
    venv, _ = pair()
    model = PPO(
        "MlpPolicy",
        venv,
        n_steps=8,
        batch_size=16,
        n_epochs=1,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [16]},
    )
    model.learn(total_timesteps=2 * 8 * N)
    assert model.num_timesteps == 2 * 8 * N
    # 16 steps of 4 actors with a 6-step limit: every actor finished at least two episodes
    assert len(model.ep_info_buffer) >= 2 * N and len(model.ep_success_buffer) == len(model.ep_info_buffer)
    actions, _ = model.predict(venv.reset(), deterministic=True)
    assert actions.shape == (N, 4) and np.all(np.abs(actions) <= 1.0)


def test_evaluate_policy_takes_any_acting_function():
    from env_helpers import scene_world

    from navi_nb.train.config import TrainConfig
    from navi_nb.train.evaluate import evaluate_policy, wilson_interval
    from navi_nb.world.world_set import WorldSet

    cfg = TrainConfig(scenes="box", sensor_az=8, sensor_el=4, env={"max_steps": 5}).validate()
    # standing still never reaches a goal (goals are >= 1 m away): every episode runs to the limit
    res = evaluate_policy(lambda obs: np.zeros((obs.shape[0], 4), np.float32), WorldSet.of(scene_world("box")), cfg, 6)
    assert res["episodes"] == 6 and res["success_rate"] == 0.0 and res["spl_mean"] == 0.0
    assert res["success_rate_ci95"] == wilson_interval(0, 6)
    assert np.all(res["per_episode"]["length"] == 5)


def test_missing_sb3_is_one_line(monkeypatch):
    monkeypatch.delitem(sys.modules, "navi_nb.env.sb3_adapter", raising=False)
    monkeypatch.setitem(sys.modules, "stable_baselines3", None)
    monkeypatch.setitem(sys.modules, "stable_baselines3.common.monitor", None)
    with pytest.raises(ImportError, match=r"needs stable-baselines3.*pip install -e \"\.\[sb3\]\""):
        import navi_nb.env.sb3_adapter  # noqa: F401


def test_extras():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    extras = cfg["options.extras_require"]
    names = {k: [r.split(">")[0].split("=")[0] for r in v.split()] for k, v in extras.items()}
    assert "stable-baselines3" in names["sb3"]
    # the package's own tests install light; the peer tests' libraries are their own extra, which CI requires
    assert not {"torch", "stable-baselines3"} & set(names["test"])
    assert {"torch", "stable-baselines3"} <= set(names["peers"]) <= set(names["bench"])
    ci = (ROOT / ".ci" / "run").read_text()
    assert "NAVI_NB_REQUIRE_PEERS=1" in ci and '".[peers]"' in ci


def test_need_peer_skips_or_fails(monkeypatch):
    monkeypatch.delenv("NAVI_NB_REQUIRE_PEERS", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"needs no_such_peer \(a peer\): pip install -e '\.\[peers\]'"):
        need_peer("no_such_peer")
    monkeypatch.setenv("NAVI_NB_REQUIRE_PEERS", "1")
    with pytest.raises(pytest.fail.Exception, match="NAVI_NB_REQUIRE_PEERS=1 makes a missing peer an error"):
        need_peer("no_such_peer")
    assert need_peer("numpy") is np


# --------------------------------------------------------------------------
# navi-nb bench sb3
# --------------------------------------------------------------------------


def render(tables, width=80):
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    for t in tables:
        console.print(t)
    return console.export_text()


def test_bench_sb3_tables_at_80_columns():
    from navi_nb.bench import sb3 as bench_sb3

    args = Namespace(scenes="house", actors=64, sensor_az=64, sensor_el=16, resolution=128, rollout_steps=64)
    result = {
        "threads": 2,
        "torch_threads": 2,
        "throughput": {
            "navi_nb": {"actor_steps_per_s": 12_345.6, "actor_steps_per_cpu_s": 6_172.8, "wall_s": 3.2},
            "sb3": {"actor_steps_per_s": 1_234.5, "actor_steps_per_cpu_s": 2_057.5, "wall_s": 33.1},
            "ratio": 10.0,
            "ratio_per_cpu_s": 3.0,
        },
        "learning": {
            "steps": 1_048_576,
            "seeds": [0, 1, 2],
            "episodes": 100,
            "navi_nb": {
                "success_rate": 0.4567,
                "success_rate_ci95": [0.41, 0.50],
                "spl_mean": 0.321,
                "spl_mean_ci95": [0.29, 0.35],
                "per_seed": [0.4, 0.5, 0.47],
                "wall_s": 123.4,
            },
            "sb3": {
                "success_rate": 0.1234,
                "success_rate_ci95": [0.09, 0.16],
                "spl_mean": 0.0987,
                "spl_mean_ci95": [0.07, 0.12],
                "per_seed": [0.1, 0.15, 0.12],
                "wall_s": 1234.5,
            },
        },
    }
    text = render(bench_sb3.tables(result, args))
    lines = text.split("\n")
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert "…" not in text, text
    for figure in (
        "house at 128",
        "2 torch threads",
        "12,346",
        "1,234",
        "10.00x",
        "6,173",
        "3.00x",
        "45.7%",
        "(41%-50%)",
        "0.32 (0.29-0.35)",
        "12.3%",
        "1,048,576",
    ):
        assert figure in text, (figure, text)


def test_bench_sb3_without_sb3_is_one_line(monkeypatch, capsys):
    from navi_nb.bench import peers
    from navi_nb.bench import sb3 as bench_sb3

    monkeypatch.setattr(peers, "peer_available", lambda module: module != "stable_baselines3")
    p = __import__("argparse").ArgumentParser()
    bench_sb3.add_arguments(p)
    assert bench_sb3.run(p.parse_args([])) == {"error": bench_sb3.MISSING}
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [bench_sb3.MISSING] and 'pip install -e ".[sb3]"' in out[0]


def test_threads_default_and_restored():
    need_peer("stable_baselines3")
    import numba

    import navi_nb
    from navi_nb.env.sb3_adapter import NaviSB3VecEnv
    from navi_nb.threads import ThreadsError, thread_limit

    before = numba.get_num_threads()
    venv = NaviSB3VecEnv(env=make_env("box", N))
    assert venv.threads == max(1, thread_limit() // 2)  # half the allowed cores: the rest for torch
    venv.reset()
    venv.step(np.zeros((N, 4), np.float32))
    assert numba.get_num_threads() == before  # applied only while stepping
    assert navi_nb.set_threads(1) == 1
    try:
        assert NaviSB3VecEnv(env=make_env("box", N)).threads == 1  # the knob is the default
    finally:
        navi_nb.set_threads(None)
        numba.set_num_threads(before)
    with pytest.raises(ThreadsError, match="threads"):
        NaviSB3VecEnv(env=make_env("box", N), threads=thread_limit() + 1)
    with pytest.raises(TypeError, match="num_envs"):
        NaviSB3VecEnv("box")


def test_the_map_reaches_sb3():
    """With the episodic map on, the adapter's observations hold its crop (bounded 0..1) as NavEnv's do."""
    need_peer("stable_baselines3")
    venv, ref = pair(map_cell=0.5, map_crop=4, map_band=0.6)
    cols = ref.obs_layout["map"]
    assert cols.stop - cols.start == 4 * 4 * 3 and venv.observation_space.shape == (ref.obs_dim,)
    assert (venv.observation_space.low[cols] == 0).all() and (venv.observation_space.high[cols] == 1).all()
    venv.seed(2)
    assert np.array_equal(venv.reset(), ref.reset(seed=2)[0])
    actions = np.full((N, 4), 0.5, np.float32)
    obs = venv.step(actions)[0]
    assert np.array_equal(obs, ref.step(actions)[0]) and obs[:, cols].any()
    assert venv.observation_space.contains(obs[0])
