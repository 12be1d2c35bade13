"""The step limit per metre: each point-goal episode truncated at its own limit, bad rules refused."""

from __future__ import annotations

import math

import numpy as np
import pytest
from env_helpers import act, make_env, snapshot, states_equal

from navi_nb.env.config import EnvConfig, EnvConfigError


def test_each_episode_is_truncated_at_its_own_limit():
    """Standing still, actor i's first episode ends truncated exactly at min(cap, ceil(base + rate * l_i)),
    l_i its shortest path (read back from the environment, the rule computed here)."""
    n, cap, base, rate = 16, 400, 4, 3.0
    env = make_env(
        "house", n=n, seed=3, max_steps=cap, max_steps_base=base, max_steps_per_metre=rate, goal_min_distance=2.0
    )
    env.reset()
    lengths = np.array(env.shortest_paths, dtype=np.float64)
    want = np.array([min(cap, math.ceil(base + rate * v)) for v in lengths])
    assert len(set(want.tolist())) >= 4 and want.max() < cap  # limits differ per actor, below the cap
    first = np.zeros(n, np.int64)
    reported = np.zeros(n, np.int64)
    still = act(n)
    for t in range(1, int(want.max()) + 1):
        _, _, terminated, truncated, info = env.step(still)
        assert not terminated.any()
        new = truncated & (first == 0)
        first[new] = t
        reported[new] = info["episode"]["length"][new]
    assert np.array_equal(first, want), (first, want)
    assert np.array_equal(reported, want)


def test_the_cap_bounds_far_goals():
    env = make_env("house", n=8, seed=4, max_steps=12, max_steps_base=5, max_steps_per_metre=6.0, goal_min_distance=2.0)
    env.reset()
    assert np.all(5 + 6.0 * np.asarray(env.shortest_paths) > 12)  # every rule value above the cap
    for t in range(1, 13):
        _, _, _, truncated, _ = env.step(act(8))
        assert truncated.all() == (t == 12) and truncated.any() == (t == 12)


def test_limits_above_the_run_change_nothing():
    """A rule whose limits all lie beyond the steps run gives the fixed limit's bits (states and rewards)."""
    runs = []
    for rule in ({}, {"max_steps_per_metre": 50.0, "max_steps_base": 100}):
        env = make_env("house", n=6, seed=9, max_steps=1000, **rule)
        env.reset()
        rng = np.random.default_rng(0)
        rewards = []
        for _ in range(30):
            _, r, _, _, _ = env.step(rng.uniform(-1, 1, (6, 4)).astype(np.float32))
            rewards.append(r.copy())
        runs.append((snapshot(env), np.array(rewards)))
    assert states_equal(runs[0][0], runs[1][0]) and np.array_equal(runs[0][1], runs[1][1])


def test_explore_keeps_max_steps():
    env = make_env("box", n=4, task="explore", seed=1, max_steps=7, max_steps_base=1, max_steps_per_metre=0.5)
    env.reset()
    for t in range(1, 8):
        _, _, _, truncated, _ = env.step(act(4))
        assert truncated.all() == (t == 7) and truncated.any() == (t == 7)


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"max_steps": 2**31}, "max_steps must be <= 2147483647"),
        ({"max_steps_per_metre": -1.0}, "max_steps_per_metre must be a finite number >= 0"),
        ({"max_steps_per_metre": float("nan")}, "max_steps_per_metre must be a finite number >= 0"),
        ({"max_steps_per_metre": float("inf")}, "max_steps_per_metre must be a finite number >= 0"),
        ({"max_steps_per_metre": "5"}, "max_steps_per_metre must be a finite number >= 0"),
        ({"max_steps_base": 2.5}, "max_steps_base must be an integer >= 0"),
        ({"max_steps_base": -1}, "max_steps_base must be an integer >= 0"),
        ({"max_steps_per_metre": 5.0, "max_steps_base": 0}, "max_steps_base must be >= 1 with max_steps_per_metre"),
        ({"max_steps_per_metre": 5.0, "max_steps_base": 500}, "gives max_steps to every goal 1 m away"),
        ({"max_steps_per_metre": 1e300, "max_steps_base": 1}, "gives max_steps to every goal 1 m away"),
        ({"max_steps_per_metre": 30.0, "max_steps_base": 100, "max_steps": 130}, "capped at max_steps \\(130\\)"),
    ],
)
def test_bad_rules_are_refused_in_one_line(kw, match):
    with pytest.raises(EnvConfigError, match=match) as exc:
        EnvConfig.from_kwargs(**kw)
    assert "\n" not in str(exc.value)


def test_good_rules_pass():
    cfg = EnvConfig.from_kwargs(max_steps=5000, max_steps_per_metre=40.0, max_steps_base=100)
    assert (cfg.max_steps, cfg.max_steps_per_metre, cfg.max_steps_base) == (5000, 40.0, 100)
    assert EnvConfig.from_kwargs(max_steps_base=0).max_steps_per_metre == 0  # off: the base is not used


def test_cli_refuses_a_bad_rule_and_a_bad_rooms_spec(tmp_path, capsys, monkeypatch):
    """One line, exit status 2, no run folder (nor cache) written."""
    from navi_nb.cli import main

    monkeypatch.setenv("NAVI_NB_CACHE", str(tmp_path / "cache"))
    runs = tmp_path / "runs"
    cases = [
        (["--scenes", "box", "--env", "max_steps_per_metre=5", "--env", "max_steps_base=0"], "max_steps_base"),
        (["--scenes", "box", "--env", "max_steps=3000000000"], "max_steps must be <= 2147483647"),
        (["--scenes", "rooms:1000000"], "held out"),
        (["--scenes", "rooms:5-2"], "empty range"),
        (["--scenes", "rooms:x"], "seeds must be N or A-B"),
        (["--scenes", "house:1,rooms:3", "--resolution", "4096"], "resolution 4096 gives 16384, above 8192"),
    ]
    for argv, match in cases:
        code = main(["train", *argv, "--run-dir", str(runs), "--name", "r"])
        err = " ".join(capsys.readouterr().err.split())
        assert code == 2, (argv, err)
        assert err.startswith("error:") and err.count("error:") == 1 and match in err, err
        assert "Traceback" not in err
        assert not runs.exists() and not (tmp_path / "cache").exists(), argv
