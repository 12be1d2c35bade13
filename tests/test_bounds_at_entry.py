"""Values checked where they enter: counters that must fit 64 bits, evaluation seeds, a GRU state no GRU can
hold, and SB3 keywords that cannot match the config they are asked for. Each is refused in one line naming
the setting, before anything is written or allocated."""

import numpy as np
import pytest
from peer_helpers import need_peer
from run_helpers import tiny_run_args

from navi_nb.cli import main
from navi_nb.learn.policy import ActorCritic, PolicyError, PolicyMemory
from navi_nb.train.config import ConfigError, TrainConfig
from navi_nb.train.evaluate import check_eval_seed, evaluate_policy
from navi_nb.train.runs import RunError


@pytest.mark.parametrize("name", ["total_steps", "rollout_steps", "checkpoint_every", "actors"])
def test_integer_settings_past_64_bits_are_refused_by_name(name):
    with pytest.raises(ConfigError, match=rf"{name} must be below 2\*\*63"):
        TrainConfig(**{name: 10**400}).validate()
    TrainConfig(total_steps=2**62).validate()  # large but countable: accepted


def test_total_steps_1e400_on_the_command_line_is_one_line_and_writes_nothing(tmp_path, capsys):
    code = main(["train", *tiny_run_args(), "--total-steps", "1e400", "--run-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "total_steps" in err.replace("-", "_"), err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("seed", [2**64, -1, 1.5, True, "7"])
def test_evaluation_seeds_outside_64_bits_are_refused(seed):
    with pytest.raises(RunError, match=r"--seed must be an integer in 0\.\.2\*\*64-1"):
        check_eval_seed(seed)
    with pytest.raises(RunError, match="--seed"):  # before any world or environment is touched
        evaluate_policy(None, None, TrainConfig(), episodes=2, seed=seed)


def test_evaluation_seeds_at_the_ends_are_kept():
    assert check_eval_seed(0) == 0
    assert check_eval_seed(np.uint64(2**64 - 1)) == 2**64 - 1


@pytest.mark.parametrize("value", [1.5, -1.01, 1e30, 3e38])
def test_a_gru_state_no_gru_can_hold_is_refused_and_nothing_changes(value):
    mem = PolicyMemory(4, 8)
    before = mem.get_state()
    bad = before["h"].copy()
    bad[2, 3] = value
    with pytest.raises(PolicyError, match="where a GRU's state stays within \\[-1, 1\\]"):
        mem.set_state({"h": bad, "start": before["start"]})
    assert np.array_equal(mem.h, before["h"]) and np.array_equal(mem.start, before["start"])


def test_states_a_gru_writes_are_accepted_even_saturated():
    policy = ActorCritic(6, 4, hidden=[8], memory_size=8)
    policy.initialize(3)
    mem = policy.new_memory(5)
    obs = np.full((5, 6), 40.0, np.float32)  # drives the gates to saturation
    for _ in range(20):
        policy.forward(obs, mem)
    assert np.abs(mem.h).max() > 0.5  # the state moved
    state = mem.get_state()
    PolicyMemory(5, 8).set_state(state)  # what the GRU wrote is accepted
    state["h"][...] = np.float32(1.0) + np.finfo(np.float32).eps  # one ulp over 1: rounding, not a bad file
    PolicyMemory(5, 8).set_state(state)


def ppo_kwargs(cfg):
    """``sb3_adapter.ppo_kwargs``: the module needs Stable-Baselines3 (a peer), so it is imported only here,
    and the README's test command, which installs no peers, still collects this file."""
    need_peer("stable_baselines3")
    from navi_nb.env.sb3_adapter import ppo_kwargs as kwargs_of

    return kwargs_of(cfg)


def test_ppo_kwargs_refuses_a_config_with_memory():
    with pytest.raises(ValueError, match="memory_size is 64.*no recurrent memory"):
        ppo_kwargs(TrainConfig(memory_size=64))


def test_ppo_kwargs_carries_log_std_init():
    need_peer("torch")
    kw = ppo_kwargs(TrainConfig(log_std_init=-0.5))
    assert kw["policy_kwargs"]["log_std_init"] == -0.5


def test_one_acting_function_evaluates_the_same_episodes_the_same_way_twice():
    """mean_action's GRU states start from zero in each evaluation: they used to carry over into the next."""
    from env_helpers import scene_world

    from navi_nb.train.evaluate import mean_action
    from navi_nb.train.runs import make_env, make_policy
    from navi_nb.world.world_set import WorldSet

    cfg = TrainConfig(scenes="box", sensor_az=8, sensor_el=4, memory_size=8, env={"max_steps": 12}).validate()
    worlds = WorldSet.of(scene_world("box"))
    obs_dim = make_env(worlds, cfg, n_actors=1).obs_dim
    policy = make_policy(cfg, obs_dim)
    policy.set_params(np.random.default_rng(5).normal(0.0, 0.5, policy.n_params).astype(np.float32))
    act = mean_action(policy)
    first = evaluate_policy(act, worlds, cfg, episodes=4)
    again = evaluate_policy(act, worlds, cfg, episodes=4)
    fresh = evaluate_policy(mean_action(policy), worlds, cfg, episodes=4)
    for k in ("return", "length", "spl"):
        assert np.array_equal(first["per_episode"][k], again["per_episode"][k]), k
        assert np.array_equal(first["per_episode"][k], fresh["per_episode"][k]), k


def test_evaluations_own_max_steps_is_in_its_memory_estimate():
    from navi_nb.train.evaluate import episodes_ram_estimate

    cfg = TrainConfig()
    base = episodes_ram_estimate(cfg, 10)
    long = episodes_ram_estimate(cfg, 10, {"max_steps": 10**9})
    assert long - base == 10 * 3 * 16 * (10**9 - 500)  # the logged poses of the longer episodes
    from navi_nb.train.evaluate import episodes_ram_label
    from navi_nb.train.runs import check_ram

    label = episodes_ram_label(cfg, 10, {"max_steps": 10**9})
    assert label == "evaluating 10 episodes of up to 1,000,000,000 steps (--env max_steps=1000000000)"
    with pytest.raises(RunError, match=r"evaluating 10 episodes of up to .* \(--env max_steps=1000000000\) would"):
        check_ram(label, long)
    assert episodes_ram_label(cfg, 1) == "evaluating 1 episode of up to 500 steps (the run's max_steps=500)"


@pytest.mark.parametrize(
    "setting, match",
    [
        ({"goal_scale": 1e-300}, r"goal_scale must be >= 0\.001 m"),
        ({"max_distance": 1e-9}, r"max_distance must be >= 0\.001 m"),
        ({"reward_success": 1e39}, r"reward_success of 1e\+39 would overflow float32 returns over 500 steps"),
        ({"penalty_path": 1e33}, r"penalty_path of 1e\+33 would overflow"),
        ({"max_steps": 2**31}, r"max_steps must be <= 2147483647"),
    ],
)
def test_settings_that_make_observations_or_rewards_non_finite_are_refused_by_name(setting, match):
    from navi_nb.env.config import EnvConfig, EnvConfigError

    with pytest.raises(EnvConfigError, match=match):
        EnvConfig.from_kwargs(**setting)


def test_the_cli_refuses_those_settings_before_a_run_folder_exists(tmp_path, capsys):
    code = main(["train", *tiny_run_args(), "--env", "reward_success=1e39", "--run-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 2 and "reward_success" in err and "Traceback" not in err, err
    assert not (tmp_path / "runs").exists()


def test_an_end_of_run_evaluation_too_large_is_refused_before_training(tmp_path, capsys, monkeypatch):
    import navi_nb.ram

    monkeypatch.setattr(navi_nb.ram, "available_ram", lambda: 64 * 2**20)
    argv = [*tiny_run_args(eval_episodes=100000), "--run-dir", str(tmp_path / "runs")]
    code = main(["train", *argv])
    err = capsys.readouterr().err
    assert code == 2 and "end-of-run evaluation of 100000 episodes" in err and "Traceback" not in err, err
    assert not (tmp_path / "runs").exists()


def test_a_dead_compile_process_is_explained_by_ram_a_kill_or_an_unguarded_script(monkeypatch):
    import sys
    import types

    from navi_nb.world.world_cache import _died_words

    script = types.ModuleType("__main__")
    script.__file__, script.__spec__ = "/home/me/train_all.py", None  # `python train_all.py`
    monkeypatch.setitem(sys.modules, "__main__", script)
    words = _died_words()
    assert "out of RAM or killed" in words and "/home/me/train_all.py starts it unguarded" in words
    assert 'if __name__ == "__main__":' in words
    cli = types.ModuleType("__main__")
    cli.__file__, cli.__spec__ = "/venv/bin/navi-nb", types.SimpleNamespace(name="navi_nb.__main__")  # `-m`
    monkeypatch.setitem(sys.modules, "__main__", cli)
    assert "unguarded" not in _died_words()
    from navi_nb.cli import main as cli_main

    console_script = types.ModuleType("__main__")  # the `navi-nb` command pip writes
    console_script.__file__, console_script.__spec__, console_script.main = "/venv/bin/navi-nb", None, cli_main
    monkeypatch.setitem(sys.modules, "__main__", console_script)
    assert "unguarded" not in _died_words()


def test_a_straight_line_goal_band_no_world_can_hold_is_refused_like_the_geodesic_one():
    from env_helpers import make_env

    from navi_nb.env.config import EnvConfigError

    with pytest.raises(
        EnvConfigError,
        match=r"world world0 has no two points 100\.0 m apart \(its free space spans at most \d+\.\d\d m\).*euclidean",
    ):
        make_env("box", goal_min_distance=100.0, goal_max_distance=200.0)
    env = make_env("box", goal_min_distance=2.0, goal_max_distance=4.0)  # a band the box holds
    obs, _ = env.reset()
    d = np.linalg.norm(env.goals - env.positions, axis=1)
    assert np.all(d >= 2.0 - 0.3) and np.all(d <= 4.0 + 0.3)  # spawn jitter aside, in the band
