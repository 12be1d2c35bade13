"""Bad actions, settings and states are rejected before anything changes (issue 4, line 5)."""

import numpy as np
import pytest
from env_helpers import make_env, scene_world, snapshot, states_equal

from navi_nb.env.config import ActionError, EnvConfigError, StateError
from navi_nb.errors import NaviError


@pytest.fixture(scope="module")
def env():
    e = make_env("box", n=3, seed=1)
    e.reset()
    e.step(np.full((3, 4), 0.3, np.float32))
    return e


def _bad(kind):
    a = np.zeros((3, 4), np.float32)
    if kind == "nan":
        a[1, 2] = np.nan
    elif kind == "inf":
        a[2, 0] = np.inf
    elif kind == "-inf64":
        a = a.astype(np.float64)
        a[0, 3] = -np.inf
    elif kind == "shape_rows":
        a = np.zeros((2, 4), np.float32)
    elif kind == "shape_cols":
        a = np.zeros((3, 3), np.float32)
    elif kind == "shape_flat":
        a = np.zeros(12, np.float32)
    elif kind == "shape_3d":
        a = np.zeros((3, 4, 1), np.float32)
    elif kind == "int":
        a = np.zeros((3, 4), np.int64)
    elif kind == "bool":
        a = np.zeros((3, 4), bool)
    elif kind == "object":
        a = np.zeros((3, 4), object)
    elif kind == "complex":
        a = np.zeros((3, 4), np.complex64)
    elif kind == "str":
        a = np.full((3, 4), "1")
    elif kind == "ragged":
        a = [[0.0] * 4, [0.0] * 3, [0.0] * 4]
    elif kind == "none":
        a = None
    return a


@pytest.mark.parametrize(
    "kind, words",
    [
        ("nan", "actor 1, component 2 is nan"),
        ("inf", "actor 2, component 0 is inf"),
        ("-inf64", "actor 0, component 3 is -inf"),
        ("shape_rows", "shape (3, 4)"),
        ("shape_cols", "shape (3, 4)"),
        ("shape_flat", "shape (3, 4)"),
        ("shape_3d", "shape (3, 4)"),
        ("int", "floating point"),
        ("bool", "floating point"),
        ("object", "floating point"),
        ("complex", "floating point"),
        ("str", "floating point"),
        ("ragged", "not an array"),
        ("none", "floating point"),
    ],
)
def test_bad_actions_rejected_state_unchanged(env, kind, words):
    before = snapshot(env)
    with pytest.raises(ActionError) as exc:
        env.step(_bad(kind))
    assert words in str(exc.value)
    assert isinstance(exc.value, NaviError)
    assert states_equal(before, snapshot(env))


def test_out_of_range_actions_are_clipped(env):
    a = np.array([[5.0, 0, 0, 0], [-3.0, 0, 0, 0], [0, 0, 0, 1e9]], np.float32)
    obs = env.step(a)[0]
    np.testing.assert_array_equal(obs[:, env.obs_layout["prev_action"]], np.clip(a, -1, 1))
    obs = env.step(a.astype(np.float64).tolist())[0]  # a nested list of floats is fine too
    np.testing.assert_array_equal(obs[:, env.obs_layout["prev_action"]], np.clip(a, -1, 1))


def test_step_before_reset():
    e = make_env("box", n=2)
    with pytest.raises(StateError, match="before reset"):
        e.step(np.zeros((2, 4), np.float32))


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"dt": 0.0}, "dt"),
        ({"radius": -1.0}, "radius"),
        ({"max_speed": float("nan")}, "max_speed"),
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": 2.5}, "max_steps"),
        ({"spawn": "anywhere"}, "spawn"),
        ({"goal_min_distance": 9.0, "goal_max_distance": 2.0}, "goal_min_distance"),
        ({"speed": 1.0}, "unknown setting"),
        ({"semantic_obs": 1}, "semantic_obs"),
        ({"visit_max_cells": 1000}, "visit_max_cells"),
    ],
)
def test_bad_settings(kw, words):
    with pytest.raises(EnvConfigError, match=words):
        make_env("box", n=2, **kw)


def test_bad_constructor_arguments():
    from navi_nb.env.nav_env import NavEnv

    w = scene_world("box")
    for args, kw, words in [
        ((w, 0), {}, "n_actors"),
        ((w, 2.0), {}, "n_actors"),
        ((w, 2), {"task": "fly"}, "task"),
        ((w, 2), {"seed": -1}, "seed"),
        ((object(), 2), {}, "World"),
        ((w, 2), {"radius": 20.0}, "radius"),
    ]:
        with pytest.raises(NaviError, match=words):
            NavEnv(*args, **kw)


def test_set_state_checks_everything_first(env):
    before = snapshot(env)
    good = env.get_state()
    for mutate, words in [
        (lambda s: s.pop("pos"), "missing pos"),
        (lambda s: s.__setitem__("yaw", np.zeros(4, np.float32)), "yaw must be"),
        (lambda s: s.__setitem__("pos", s["pos"].astype(np.float64)), "pos must be"),
        (lambda s: s["goal"].__setitem__((0, 0), np.nan), "goal holds non-finite"),
    ]:
        bad = {k: v.copy() for k, v in good.items()}
        bad["ep_len"][:] = 99  # would change state if anything were applied before the check
        mutate(bad)
        with pytest.raises(StateError, match=words):
            env.set_state(bad)
        assert states_equal(before, snapshot(env))
    with pytest.raises(StateError):
        env.set_state([1, 2])


def test_an_unknown_start_dist_round_trips_and_infinities_and_negatives_are_refused(env):
    """``start_dist`` holds NaN where a shortest path is unknown: set_state takes it and get_state gives it back
    bit for bit; an infinity, or a negative length beside a NaN (a NaN must not hide it), is refused in one line
    naming start_dist, before anything changes."""
    good = env.get_state()
    unknown = {k: v.copy() for k, v in good.items()}
    unknown["start_dist"][0] = np.nan
    unknown["start_dist"][2] = 2.5
    env.set_state(unknown)
    back = env.get_state()
    assert back["start_dist"].tobytes() == unknown["start_dist"].tobytes()  # NaN, the untouched value, 2.5
    assert np.isnan(back["start_dist"][0]) and back["start_dist"][1] == good["start_dist"][1]
    assert back.keys() == unknown.keys()
    assert all(np.asarray(back[k]).tobytes() == np.asarray(unknown[k]).tobytes() for k in back)  # NaN == NaN
    before = {k: np.asarray(v).tobytes() for k, v in back.items()}
    for value, words in [(np.inf, "start_dist holds infinite"), (-np.inf, "start_dist holds infinite")]:
        bad = {k: v.copy() for k, v in unknown.items()}
        bad["start_dist"][1] = value
        with pytest.raises(StateError, match=words) as err:
            env.set_state(bad)
        assert "\n" not in str(err.value)
        assert before == {k: np.asarray(v).tobytes() for k, v in env.get_state().items()}
    for at in (0, 1, 2):  # the negative value before, at and after the NaN
        bad = {k: v.copy() for k, v in unknown.items()}
        bad["start_dist"][1 if at == 0 else 0] = np.nan
        bad["start_dist"][at] = -0.5
        with pytest.raises(StateError, match="start_dist holds negative values") as err:
            env.set_state(bad)
        assert "\n" not in str(err.value)
        assert before == {k: np.asarray(v).tobytes() for k, v in env.get_state().items()}
    env.set_state(good)
    assert states_equal(good, snapshot(env))
