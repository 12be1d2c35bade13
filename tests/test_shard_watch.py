"""The shard count re-checked while training (``navi_nb.parallel.shards.ShardWatch``).

Tiny runs (box at resolution 32, four actors, six updates, a re-check after every update) with a timer
injected through ``Trainer.train(shard_timer=...)``, the seam that replaces each count's measured seconds
per update: switching never changes a bit of the run, a count the timer makes faster is switched to and
reported in one console line and in ``run.json``, and equal timings never switch.
"""

import argparse
import io
import json
import time

import numpy as np
import pytest
from env_helpers import make_env, snapshot, states_equal
from rich.console import Console
from run_helpers import tiny_run_args

from navi_nb.commands.train import add_arguments, resolve_config
from navi_nb.cores import allowed_cores
from navi_nb.env.toy import PointGoalToy
from navi_nb.learn.collect import action_generator, one_update
from navi_nb.learn.policy import ActorCritic
from navi_nb.learn.ppo import PPO
from navi_nb.learn.rollout import RolloutSlab
from navi_nb.parallel.shards import SWITCH_MARGIN, ShardReport, ShardWatch, env_tick, measure, pick_switch
from navi_nb.train.loop import Trainer
from navi_nb.train.metrics import read_metrics_csv
from navi_nb.train.runs import RUN_FILE

UPDATES = 6


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("NAVI_NB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
    monkeypatch.delenv("NAVI_NB_SHARDS", raising=False)


def tiny_config(tmp_path, name, **flags):
    """The tiny run's config, parsed from the CLI's own flags (``run_helpers.tiny_run_args``)."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    # a share so large that every update is followed by a re-check
    flags = dict(total_steps=4 * 16 * UPDATES, shard_recheck=1000, run_dir=str(tmp_path), name=name, **flags)
    return resolve_config(parser.parse_args(tiny_run_args(**flags)))


class Rounds:
    """A timer that reads the measured seconds of each count as ``fast`` or ``slow`` by round: round r (the
    start calibration is round 0, then one per re-check) makes ``favour(r)`` the fast count. Every round
    times the counts in ascending order, so a round begins at count 1."""

    def __init__(self, favour, fast=1.0, slow=3.0):
        self.favour, self.fast, self.slow = favour, fast, slow
        self.round = -1

    def __call__(self, k, seconds):
        assert seconds > 0
        if k == 1:
            self.round += 1
        if self.favour(self.round) is None:
            return self.fast
        return self.fast if k == self.favour(self.round) else self.slow


def state_bytes(trainer):
    return {k: np.ascontiguousarray(v).tobytes() for k, v in trainer.state_arrays().items()}


def test_switching_changes_no_bit(tmp_path):
    fixed = Trainer.create(tiny_config(tmp_path, "fixed", shards=1))
    fixed.train(progress=False)
    assert fixed.shard_watch is None  # an explicit count is kept

    flip = Trainer.create(tiny_config(tmp_path, "flip"))
    flip.train(progress=False, shard_timer=Rounds(lambda r: 1 if r % 2 == 0 else 2))
    w = flip.shard_watch
    assert w.rechecks == UPDATES - 1  # after every update but the last
    assert [(s.before, s.after) for s in w.switches] == [(1, 2), (2, 1), (1, 2), (2, 1), (1, 2)]
    assert fixed.update == flip.update == UPDATES
    a, b = state_bytes(fixed), state_bytes(flip)
    assert a.keys() == b.keys() and any(k.startswith("ppo.adam_") for k in a)
    for k in a:  # weights, Adam's moments and step, the environment and every generator
        assert a[k] == b[k], k
    assert fixed.policy.params.tobytes() == flip.policy.params.tobytes()
    # the logged episodes and losses too, all but the timing columns
    timing = {"time_s", "actor_steps_per_s", "t_collect_s", "t_learn_s"}
    ra, rb = (read_metrics_csv(tmp_path / n / "metrics.csv") for n in ("fixed", "flip"))
    assert len(ra) == len(rb) == UPDATES
    for x, y in zip(ra, rb):
        assert all(x[k] == y[k] or (np.isnan(x[k]) and np.isnan(y[k])) for k in x if k not in timing), (x, y)
    assert fixed.policy.params.tobytes() != Trainer.create(tiny_config(tmp_path, "fresh")).policy.params.tobytes()


def test_a_faster_count_is_switched_to_and_reported(tmp_path):
    console = Console(width=80, record=True, file=io.StringIO(), color_system=None)
    tr = Trainer.create(tiny_config(tmp_path, "busy"), console=console)
    # busy at start (1 shard looks 3x faster), then 2 shards are 3x faster
    summary = tr.train(progress=False, shard_timer=Rounds(lambda r: 1 if r == 0 else 2))
    assert tr.shard_report.choice == 1
    assert [(s.update, s.before, s.after) for s in tr.shard_watch.switches] == [(1, 1, 2)]
    assert summary["shards"] == 2 and summary["shard_switches"] == 1
    batch = tr.cfg.batch_size
    line = f"update 1: shards 1 -> 2 (est. {batch / 3.0:,.0f} -> {batch / 1.0:,.0f} actor-steps/s, +200%)"
    text = console.export_text()
    assert line in text.splitlines(), text
    assert text.count("shards 1 -> 2") == 1
    record = json.loads((tmp_path / "busy" / RUN_FILE).read_text())
    (segment,) = record["segments"]
    watch = segment["shards"]["watch"]
    assert watch["rechecks"] == UPDATES - 1 and watch["final"] == 2 and watch["recheck_s"] > 0
    assert watch["switches"] == [
        {
            "update": 1,
            "from": 1,
            "to": 2,
            "est_actor_steps_per_s": {"1": batch / 3.0, "2": batch / 1.0},
            "recheck_s": tr.shard_watch.switches[0].recheck_s,
        }
    ]
    assert segment["shards"]["start"]["choice"] == 1 and segment["summary"]["updates"] == UPDATES


def test_the_start_probe_names_a_recurrent_learner_and_splits_the_tick(tmp_path):
    """With a GRU the probe times minibatches of whole actor sequences and says so ("PPO with GRU"), in its
    table and in run.json; each count's collection tick is split into the acting forward and the step."""
    console = Console(width=120, record=True, file=io.StringIO(), color_system=None)
    tr = Trainer.create(tiny_config(tmp_path, "gru", memory_size=4), console=console)
    tr.train(progress=False, stop_after=1, shard_timer=Rounds(lambda r: 1))
    assert tr.shard_report.learner == "PPO with GRU"
    text = console.export_text()
    assert "PPO with GRU" in text and "acting" in text, text
    start = json.loads((tmp_path / "gru" / RUN_FILE).read_text())["segments"][0]["shards"]["start"]
    assert start["learner"] == "PPO with GRU"
    for rate in start["rates"].values():
        assert rate["t_act_s"] > 0.0 and rate["t_tick_s"] > 0.0  # the run's env stepped in every tick timed
        assert rate["t_act_s"] + rate["t_tick_s"] == pytest.approx(rate["t_collect_s"], rel=0.5)


def test_equal_timings_never_switch(tmp_path):
    tr = Trainer.create(tiny_config(tmp_path, "equal"))
    tr.train(progress=False, shard_timer=Rounds(lambda r: None))
    assert tr.shard_report.choice == 1  # a larger count must win by 3 % at start
    assert tr.shard_watch.rechecks == UPDATES - 1 and tr.shard_watch.switches == []


def test_hysteresis_margin():
    """A count is switched to only when faster by more than the margin; the smaller count wins a tie."""
    m = SWITCH_MARGIN
    assert pick_switch(1, {1: 1.0, 2: 1.0}) is None
    assert pick_switch(2, {1: 1.0, 2: 1.0}) is None
    assert pick_switch(1, {1: 1.0, 2: 1.0 - 0.9 * m}) is None
    assert pick_switch(1, {1: 1.0, 2: 1.0 - 1.1 * m}) == 2
    assert pick_switch(2, {1: 1.0 - 1.1 * m, 2: 1.0}) == 1
    assert pick_switch(1, {1: 1.0, 2: 0.5, 3: 0.5, 4: 0.6}) == 2
    assert pick_switch(3, {1: 2.0, 2: 1.0, 3: 1.05}) is None


def test_rechecks_keep_to_their_share():
    """A re-check is due once the share of the training seconds since the last one covers its cost."""
    report = ShardReport(allowed_cores(), 1, "test", "measured", 2, {1: {}, 2: {}})
    w = ShardWatch(report, 0.03, 4096, first_cost_s=0.9)
    assert w.active and not w.due()
    w.add(10.0)
    assert not w.due()  # 0.3 s of 0.9
    w.add(19.0)
    assert not w.due()  # 0.87 s of 0.9
    w.add(2.0)
    assert w.due()  # 0.93 s of 0.9
    assert not ShardWatch(report, 0.0, 4096).due()  # off
    one = ShardReport(allowed_cores(), 1, "test", "measured", 1, {1: {}})
    lone = ShardWatch(one, 0.03, 4096)
    lone.add(100.0)
    assert not lone.active and not lone.due()  # nothing to switch to


def test_rechecks_that_keep_the_count_space_out_the_next_and_a_switch_restores_the_share(monkeypatch):
    """Each re-check that keeps the count halves the share the next one waits for, down to an eighth of the
    run's; a switch restores it (timings injected: no measurement's result decides here)."""
    from navi_nb.parallel import shards

    report = ShardReport(allowed_cores(), 1, "test", "measured", 2, {1: {}, 2: {}})
    favour = {"count": 1}
    w = ShardWatch(report, 0.08, 4096, timer=lambda k, s: 1.0 if k == favour["count"] else 2.0)
    monkeypatch.setattr(shards, "measure", lambda *a, **k: {1: {}, 2: {}})
    monkeypatch.setattr(shards, "update_seconds", lambda rates, shape: 1.0)
    monkeypatch.setattr(shards, "_set_threads", lambda n: None)
    monkeypatch.setattr(shards, "env_tick", lambda env: None)
    seen = []
    for _ in range(5):
        assert w.recheck(1, None, None, None) is None
        seen.append(w.share_now)
    assert seen == [0.04, 0.02, 0.01, 0.01, 0.01]
    w.last_cost_s = 0.3
    w.add(29.0)
    assert not w.due()  # 0.29 s of 0.3: the settled share
    w.add(1.0)
    assert w.due()
    favour["count"] = 2
    switch = w.recheck(7, None, None, None)
    assert switch is not None and (switch.before, switch.after) == (1, 2)
    assert w.share_now == 0.08 and w.as_dict()["share_now"] == 0.08


def test_a_tick_that_reports_its_seconds_is_timed_by_them():
    """``measure`` counts what a collection tick reports as its own seconds (``env_tick``: the step alone,
    not the serial restoring of the state around it), and a tick's whole call when it reports none."""
    env = PointGoalToy(4, seed=3, max_steps=5)
    ppo = PPO(ActorCritic(env.obs_dim, hidden=(8, 8)), seed=1)
    slab = RolloutSlab(8, 4, env.obs_dim, 4)
    obs, _ = env.reset(seed=3)
    one_update(env, ppo, slab, obs, action_generator(3))

    def slow_restore():
        time.sleep(0.05)  # a restore as slow as 50 ms, around a step that reports 1 ms
        return 0.001

    def slow_call():
        time.sleep(0.05)

    reported = measure(ppo, slab, 8, [1], budget_s=0.0, tick=slow_restore)[1]
    whole = measure(ppo, slab, 8, [1], budget_s=0.0, tick=slow_call)[1]
    assert reported["t_collect_s"] < 0.04 < 0.05 <= whole["t_collect_s"]
    # the tick's two parts: the step is what the tick reported (else its whole call), the acting forward the rest
    assert reported["t_tick_s"] == 0.001 and whole["t_tick_s"] >= 0.05 > whole["t_act_s"] > 0.0
    assert reported["t_collect_s"] == pytest.approx(reported["t_act_s"] + 0.001)
    nav = make_env()
    nav.reset(seed=0)
    before = snapshot(nav)
    seconds = env_tick(nav)()
    assert isinstance(seconds, float) and seconds > 0.0
    assert states_equal(before, snapshot(nav))
