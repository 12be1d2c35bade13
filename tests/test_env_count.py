"""The count bonus (``reward_count``): ``reward_count / sqrt(n)`` from the episodic map's visit counts, against a
NumPy computation from the map; off by default with every other term and the reward as before (a digest taken
from the code before the term); the same bits at 1 and 2 threads and across a state round trip; bad settings
refused in one line before anything is built."""

import hashlib
import math

import numba
import numpy as np
import pytest
from env_helpers import act, make_env, record_kernel
from run_helpers import tiny_run_args

from navi_nb.cli import main
from navi_nb.env.config import EnvConfigError
from navi_nb.sense.sensor import Sensor

MAP = {"map_cell": 0.5, "map_crop": 4, "map_band": 0.6}  # the 8 x 4 test sensor's rows at +-0.52 rad count
TODAY = (
    ("pointgoal", "box", {"progress": "euclidean"}),
    ("pointgoal", "house", {}),
    ("explore", "house", {}),
    ("explore", "house", MAP),
)
TODAY_DIGEST = "60739344cf0c7d8b"
"""The digest of :func:`_rollouts_digest` from the code before the count term existed."""


def _rollouts_digest():
    """Rewards, every term but ``count``, and the episode returns of short rollouts of both tasks (the map on and
    off, episodes ending on the way), hashed; also whether every ``count`` term read 0."""
    h = hashlib.sha256()
    zero = True
    for task, world, kw in TODAY:
        env = make_env(world, n=6, task=task, seed=4, max_steps=9, **kw)
        env.reset()
        rng = np.random.default_rng(7)
        for _ in range(20):
            _o, r, _te, _tr, info = env.step(rng.uniform(-1, 1, (6, 4)).astype(np.float32))
            h.update(r.tobytes())
            for name in env.reward_names:
                if name != "count":
                    h.update(info["reward_terms"][name].tobytes())
            zero &= not info["reward_terms"]["count"].any()
            h.update(info["episode"]["return"].tobytes())
        h.update(env.get_state()["ep_return"].tobytes())
    return h.hexdigest()[:16], zero


def test_off_by_default_every_other_term_and_the_reward_keep_their_bits():
    env = make_env("box", n=2, task="explore")
    assert env.config.reward_count == 0.0 and env.reward_names[-1] == "count"
    assert make_env("box", n=1).reward_names == ("progress", "success", "contact", "time", "path", "count")
    digest, zero = _rollouts_digest()
    assert zero
    assert digest == TODAY_DIGEST


def _expected_visits(env, maps_before, pos, world_index):
    """NumPy: each actor's n, the map's count of the cell of ``pos`` before the step plus this visit (at most
    255)."""
    grid = env._episodic_map.grid
    lo, dims = grid.lo[world_index], grid.dims[world_index]
    p = pos.astype(np.float64)
    ix = np.clip(np.floor((p[:, 0] - lo[:, 0]) * (1.0 / grid.cell)).astype(np.int64), 0, dims[:, 0] - 1)
    iz = np.clip(np.floor((p[:, 2] - lo[:, 1]) * (1.0 / grid.cell)).astype(np.int64), 0, dims[:, 1] - 1)
    cells = ix * dims[:, 1] + iz
    before = maps_before[np.arange(pos.shape[0]), cells, 0].astype(np.int64)
    return np.minimum(before + 1, 255), cells


@pytest.mark.parametrize("task", ["explore", "pointgoal"])
def test_the_bonus_is_reward_count_over_the_root_of_the_maps_visit_count(task):
    """Against NumPy from the map before each step: the term is ``float32(0.3 / sqrt(n))``; where the episode
    goes on, the map after the step holds n in that cell; the other terms are those of the same run with the
    bonus off, the reward their sum with the bonus, and a finished episode's return adds its bonuses."""
    kw = dict(n=5, task=task, seed=2, max_steps=6, sensor=Sensor(8, 4), **MAP)
    on, off = make_env("house", reward_count=0.3, **kw), make_env("house", **kw)
    on.reset()
    off.reset()
    rng = np.random.default_rng(11)
    seen_repeat = seen_done = False
    paid = np.zeros(5)  # the count terms of each actor's episode so far
    for _ in range(14):
        maps_before = on.get_state()["map"]
        a = rng.uniform(-1, 1, (5, 4)).astype(np.float32)
        a[:2, 0] = 0.0  # two actors only turn: their cell's count grows
        _o, r, _te, _tr, info = on.step(a)
        _o2, r_off, _te2, _tr2, info_off = off.step(a)
        done = info["done"]
        pos = np.where(done[:, None], info["final_pos"], on.positions)
        wi = np.where(done, info["episode"]["world"], on.world_index)
        n, cells = _expected_visits(on, maps_before, pos, wi)
        terms = info["reward_terms"]
        assert np.array_equal(terms["count"], (0.3 / np.sqrt(n.astype(np.float64))).astype(np.float32))
        maps_after = on.get_state()["map"]
        going = np.flatnonzero(~done)
        assert np.array_equal(maps_after[going, cells[going], 0], n[going])
        for name in off.reward_names:
            if name != "count":
                assert np.array_equal(terms[name], info_off["reward_terms"][name]), name
        assert not info_off["reward_terms"]["count"].any()
        np.testing.assert_allclose(r, r_off + terms["count"], rtol=0, atol=1e-6)
        paid += terms["count"]
        want = np.where(done, info_off["episode"]["return"] + paid, 0.0)
        np.testing.assert_allclose(info["episode"]["return"], want, rtol=0, atol=1e-5)
        paid[done] = 0.0
        seen_repeat |= bool((n > 1).any())
        seen_done |= bool(done.any())
    assert seen_repeat and seen_done


def test_the_count_saturates_at_255():
    env = make_env("box", n=2, task="explore", reward_count=0.3, **MAP)
    env.reset()
    st = env.get_state()
    n0, cells = _expected_visits(env, st["map"], env.positions.copy(), env.world_index.copy())
    assert (n0 == 2).all()  # the spawn's observation, then this one
    st["map"][np.arange(2), cells, 0] = [254, 255]
    env.set_state(st)
    info = env.step(act(2))[4]  # no move: both stay in their cell
    assert np.array_equal(info["reward_terms"]["count"], np.full(2, 0.3 / math.sqrt(255), np.float32))
    assert (env.get_state()["map"][np.arange(2), cells, 0] == 255).all()


def test_same_bits_at_1_and_2_threads_and_across_a_state_round_trip():
    def run(threads):
        old = numba.get_num_threads()
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        try:
            env = make_env("house", n=12, task="explore", seed=9, max_steps=10, reward_count=0.3, **MAP)
            out = [env.reset()[0].copy()]
            rng = np.random.default_rng(3)
            for _ in range(25):
                o, r, _te, _tr, info = env.step(rng.uniform(-1.2, 1.2, (12, 4)).astype(np.float32))
                out += [o.copy(), r.copy(), info["reward_terms"]["count"].copy(), info["episode"]["return"].copy()]
            return out, env
        finally:
            numba.set_num_threads(old)

    a, env_a = run(1)
    b, env_b = run(2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert a[-2].all()  # the bonus was paid
    st = env_a.get_state()
    rng = np.random.default_rng(4)
    actions = [rng.uniform(-1, 1, (12, 4)).astype(np.float32) for _ in range(12)]
    first = [env_a.step(x)[1].copy() for x in actions]
    env_b.set_state(st)
    second = [env_b.step(x)[1].copy() for x in actions]
    assert all(np.array_equal(x, y) for x, y in zip(first, second))


def test_bad_settings_are_refused_in_one_line_before_anything_is_built(monkeypatch):
    import navi_nb.env.nav_env as nav_env

    def built(*_args, **_kw):
        raise AssertionError("built before the settings were checked")

    monkeypatch.setattr(nav_env, "EpisodicMap", built)
    monkeypatch.setattr(nav_env, "world_spawner", built)
    for kw, words in (
        ({"reward_count": -0.1}, r"reward_count must be a finite number >= 0, got -0.1"),
        ({"reward_count": float("nan")}, r"reward_count must be a finite number >= 0, got nan"),
        ({"reward_count": float("inf")}, r"reward_count must be a finite number >= 0, got inf"),
        ({"reward_count": 0.3}, r"reward_count \(0.3\) .* needs the map: set map_cell > 0"),
        ({"reward_count": 1e33, **MAP}, r"reward_count of 1e\+33 would overflow"),
    ):
        with pytest.raises(EnvConfigError, match=words) as exc:
            make_env("box", n=2, task="explore", **kw)
        assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    "setting, words",
    [
        ("reward_count=0.3", "needs the map: set map_cell > 0"),
        ("reward_count=NaN", "reward_count must be a finite number >= 0, got nan"),
    ],
)
def test_train_refuses_a_bad_count_bonus_writing_nothing(tmp_path, capsys, setting, words):
    args = tiny_run_args(name="bad", run_dir=str(tmp_path), eval_episodes=0)
    assert main(["train", *args, "--env", setting]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert words in err and err.count("error:") == 1 and "Traceback" not in err, err
    assert not (tmp_path / "bad").exists()


def test_compile_kernels_compiles_the_count_kernel_a_step_runs(monkeypatch):
    """``NavEnv.compile_kernels`` (the warm-up's call) compiles ``visits_after`` for the argument types the steps
    hand it; with the bonus off no step calls it."""
    import navi_nb.env.nav_env as nav_env

    called, compiled = record_kernel(monkeypatch, nav_env, "visits_after")
    env = make_env("box", n=3, task="explore", max_steps=2, reward_count=0.3, **MAP)
    env.compile_kernels()
    env.reset(seed=1)
    for _ in range(3):  # the second step ends every episode
        env.step(act(3, f=0.5))
    assert called and called == compiled
    called.clear()
    env = make_env("box", n=3, task="explore", **MAP)
    env.reset()
    env.step(act(3, f=0.5))
    assert not called
