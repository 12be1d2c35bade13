"""Choosing the shard count (the Numba thread count) and reporting why.

Results never depend on the shard count (docs/DETERMINISM.md), only speed
does. ``choose_shards``:

1. reads the cores the process may use (``cores.allowed_cores``);
2. takes an explicit count (``shards`` argument, else ``NAVI_NB_SHARDS``) if
   given, skipping the measurement; more than allowed is honoured with a
   warning (threads then share cores: slower, same results);
3. otherwise measures, for 1 .. allowed shards, PPO minibatches as training
   runs them (``PPO.minibatches``: gradient, clip and Adam step, fused) and a
   collection tick (the batched policy forward over all actors, plus an
   optional ``tick`` callable, which may return the seconds of its own timed part), about
   ``budget_s`` seconds in all, and keeps
   the fastest (a count within 3% of a smaller one loses to it: noise);
4. sets Numba's thread count to the choice.

A measured choice is then watched (``ShardWatch``): within a share of the
training time the trainer re-times every count with the same ``measure`` on
the live update's data and switches when another count is clearly faster
(``SWITCH_MARGIN``).

What cannot change after import: Numba sizes its thread pool from
``NUMBA_NUM_THREADS`` (default: ``os.cpu_count()``) when it first loads, and
``numba.set_num_threads(k)`` only accepts ``k <= NUMBA_NUM_THREADS``. A
request above that cap is clamped to it with a warning that says to set
``NUMBA_NUM_THREADS`` before starting. BLAS threads are pinned to 1 by
``navi_nb/__init__.py`` before NumPy loads (and again by ``learn/blas.py``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import numpy as np

from navi_nb.cores import CoreReport, allowed_cores
from navi_nb.errors import NaviError

ENV_VAR = "NAVI_NB_SHARDS"


class ShardError(NaviError):
    """A bad shard request (not a positive integer)."""


@dataclass(frozen=True)
class UpdateShape:
    """What one update does, as the shard count is timed against it: ``ticks`` collection ticks and
    ``minibatches`` minibatches of ``minibatch_size`` samples (None: the whole slab), made ``per_epoch``
    at a time (``PPO.minibatches`` calls of that many)."""

    ticks: int = 1
    minibatches: int = 1
    per_epoch: int = 1
    minibatch_size: int | None = None

    @classmethod
    def of(cls, cfg):
        """The shape of an update of a training config (``rollout_steps``, ``update_epochs``,
        ``num_minibatches``, ``minibatch_size``)."""
        n = cfg.num_minibatches
        return cls(cfg.rollout_steps, cfg.update_epochs * n, n, cfg.minibatch_size)


@dataclass
class ShardReport:
    cores: CoreReport
    choice: int
    reason: str
    source: str  # "measured", "argument", "NAVI_NB_SHARDS"
    numba_max: int
    rates: dict = field(default_factory=dict)  # shards -> {"minibatch": samples/s, "collect": actors/s}
    warnings: list = field(default_factory=list)
    learner: str = "PPO"  # what the minibatch rate timed: "PPO" (the MLP's), "PPO with GRU" (whole sequences)

    def as_dict(self):
        return {
            "cores": self.cores.as_dict(),
            "choice": self.choice,
            "reason": self.reason,
            "source": self.source,
            "numba_max_threads": self.numba_max,
            "rates": {int(k): v for k, v in self.rates.items()},
            "learner": self.learner,
            "warnings": list(self.warnings),
        }

    def table(self):
        from rich.table import Table

        c = self.cores
        t = Table(title="shards (learner and collection threads)", show_header=True)
        t.add_column("what")
        t.add_column("value")
        t.add_row("os.cpu_count()", str(c.cpu_count))
        t.add_row("affinity", f"{c.affinity_count} cpus")
        t.add_row("cgroup", "none found" if c.cgroup_version is None else f"v{c.cgroup_version}")
        t.add_row("quota (raw)", c.quota_raw if c.quota_raw is not None else "none (max / -1)")
        t.add_row("quota (cores)", f"{c.quota_cores:g}" if c.quota_cores is not None else "unlimited")
        t.add_row("allowed cores", str(c.allowed))
        t.add_row("numba max threads", str(self.numba_max))
        if self.rates:
            for k in sorted(self.rates):
                r = self.rates[k]
                mark = "  <- chosen" if k == self.choice else ""
                split = ""
                if "t_act_s" in r:  # what a collection tick spends acting and stepping the worlds
                    split = f" (acting {1e3 * r['t_act_s']:.2f} ms, step {1e3 * r['t_tick_s']:.2f} ms)"
                t.add_row(
                    f"measured at {k}",
                    f"{self.learner} {r['minibatch']:,.0f} samples/s, "
                    f"collect {r['collect']:,.0f} actor-steps/s{split}{mark}",
                )
        else:
            t.add_row("measured", f"skipped ({self.source})")
        t.add_row("choice", f"[bold]{self.choice}[/]")
        t.add_row("reason", self.reason)
        return t

    def print(self, console=None):
        from rich.console import Console

        console = console or Console()
        console.print(self.table())
        for w in self.warnings:
            console.print(f"[yellow]warning:[/] {w}")


def _parse(value, where):
    try:
        n = int(str(value).strip())
    except ValueError:
        n = 0
    if n < 1:
        raise ShardError(f"{where}: shard count must be a positive integer, got {value!r}")
    return n


def _set_threads(k):
    import numba

    numba.set_num_threads(int(k))


def _time_call(fn, budget_s, min_reps=2, reports_seconds=False):
    """Median seconds of fn() over repeats that fit budget_s (after one warm call). ``reports_seconds``:
    fn returns the seconds of its own timed part, which count instead of the call's."""
    fn()
    times = []
    t_end = time.perf_counter() + budget_s
    while len(times) < min_reps or (time.perf_counter() < t_end and len(times) < 50):
        t0 = time.perf_counter()
        spent = fn()
        times.append(spent if reports_seconds else time.perf_counter() - t0)
    return float(np.median(times))


def measure(ppo, slab, minibatch_size, counts, budget_s=1.0, tick=None, minibatches=1):
    """{k: {"minibatch": samples/s, "collect": actor-steps/s, ...}} for each count k.

    The PPO timing runs what training runs: ``PPO.minibatches`` (the fused
    gradient, clip and Adam step), ``minibatches`` minibatches of
    ``minibatch_size`` samples per call. Those steps change the weights and
    Adam's moments, so the learner's state (``PPO.get_state``) is saved
    before and restored after: the run continues with the same bits.
    """
    n = slab.n_samples
    mb = max(1, min(int(minibatch_size or n), n))
    ppo._use_slab(slab)
    order, blk = np.arange(n, dtype=np.int64), mb
    if ppo.memory is not None:  # minibatches of whole actor sequences, as training cuts them
        _block, _rows, blk, mb = ppo._minibatch_layout(slab)
        order = ppo.epoch_order(slab, 0)
    count = max(1, min(int(minibatches), n // mb))
    obs0 = np.ascontiguousarray(slab.obs[0])
    policy = ppo.policy
    memory = policy.new_memory(obs0.shape[0])  # a scratch state: the run's own is not advanced
    saved = ppo.get_state()
    per = budget_s / max(1, 2 * len(counts))
    rates = {}
    try:
        for k in counts:
            _set_threads(k)
            t_mbs = _time_call(lambda: ppo.minibatches(order, mb, count, 0.0, blk=blk), per) / count

            parts = {"act": [], "tick": []}

            def collect(parts=parts):
                t0 = time.perf_counter()
                policy.forward(obs0, memory)
                spent = time.perf_counter() - t0
                parts["act"].append(spent)
                if tick is not None:
                    t1 = time.perf_counter()
                    tick_spent = tick()
                    tick_spent = time.perf_counter() - t1 if tick_spent is None else tick_spent
                    parts["tick"].append(tick_spent)
                    spent += tick_spent
                return spent

            t_col = _time_call(collect, per, reports_seconds=True)
            act, step = parts["act"][1:], parts["tick"][1:]  # as _time_call, without its warm call
            rates[k] = {
                "minibatch": mb / t_mbs,
                "collect": obs0.shape[0] / t_col,
                "t_minibatch_s": t_mbs,
                "t_collect_s": t_col,
                # the collection tick's two parts (medians of the same calls): the policy's acting forward and
                # the environment's step
                "t_act_s": float(np.median(act)),
                "t_tick_s": float(np.median(step)) if step else 0.0,
            }
    finally:
        ppo.set_state(saved)
    return rates


def update_seconds(rate, shape):
    """Seconds one update of ``shape`` (``UpdateShape``) takes at the rates ``measure`` found for one count:
    its collection ticks and its minibatches (the figure candidates are ranked by, at start and in every
    re-check)."""
    return shape.minibatches * rate["t_minibatch_s"] + shape.ticks * rate["t_collect_s"]


def env_tick(env, actions=None):
    """A collection tick for the calibration that leaves ``env`` exactly as it was:
    ``get_state``, one ``step`` of every actor, ``set_state``. Returns the step's seconds alone: restoring
    the state is no part of a training tick, and it is serial (checks and copies, 15 ms against a
    3 to 8 ms step at the quick start's setting), so timed with the step it made one thread look
    nearly as fast as two."""
    acts = np.zeros((env.n_actors, env.action_dim), np.float32) if actions is None else np.asarray(actions, np.float32)

    def tick():
        state = env.get_state()
        try:
            t0 = time.perf_counter()
            env.step(acts)
            return time.perf_counter() - t0
        finally:
            env.set_state(state)

    return tick


def choose_shards(
    shards=None, ppo=None, slab=None, tick=None, env=None, shape=UpdateShape(), budget_s=1.0, cores=None, timer=None
):
    """Pick and set the shard count; returns a ShardReport (``.print(console)``).

    ``env``: when given (and no ``tick``), the collection tick also steps it
    once (state-neutral, see ``env_tick``). The candidates are ranked by the
    time of one update of ``shape`` (``UpdateShape``): its collection ticks plus
    its minibatches (timed as ``PPO.minibatches`` calls of ``shape.per_epoch``
    minibatches, as an epoch makes them). ``cores``: the ``CoreReport`` to
    use (default: this process's, ``allowed_cores``). ``timer(k, seconds) ->
    seconds``: a seam for tests, as in ``ShardWatch``.
    """
    import numba

    if tick is None and env is not None:
        tick = env_tick(env)

    cores = cores or allowed_cores()
    cap = int(numba.config.NUMBA_NUM_THREADS)
    warnings = []
    source = None
    if shards is not None and int(shards) > 0:
        want, source = _parse(shards, "--shards"), "argument"
    elif os.environ.get(ENV_VAR, "").strip():
        want, source = _parse(os.environ[ENV_VAR], ENV_VAR), ENV_VAR
    if source is not None:
        choice = want
        reason = f"{want} shards asked for ({source}); measurement skipped"
        if want > cores.allowed:
            warnings.append(
                f"{want} shards asked for but only {cores.allowed} cores are allowed "
                f"({cores.reason}): threads will share cores and run slower "
                "(the results are the same)"
            )
        if want > cap:
            choice = cap
            warnings.append(
                f"{want} shards asked for but Numba's pool has {cap} threads "
                f"(NUMBA_NUM_THREADS, fixed at import): using {cap}; set "
                f"NUMBA_NUM_THREADS={want} before starting to allow more"
            )
            reason += f"; clamped to Numba's {cap} threads"
        _set_threads(choice)
        return ShardReport(cores, choice, reason, source, cap, {}, warnings)

    top = max(1, min(cores.allowed, cap))
    counts = list(range(1, top + 1))
    if ppo is None or slab is None or len(counts) == 1:
        choice = top
        reason = f"{cores.reason}; " + (
            "one candidate, nothing to measure"
            if len(counts) == 1
            else "no learner given to measure: using all allowed"
        )
        _set_threads(choice)
        return ShardReport(cores, choice, reason, "allowed", cap, {}, warnings)
    rates = measure(ppo, slab, shape.minibatch_size, counts, budget_s, tick, minibatches=shape.per_epoch)

    secs = {k: update_seconds(rates[k], shape) for k in counts}
    if timer is not None:
        secs = {k: float(timer(k, v)) for k, v in secs.items()}
    choice = counts[0]
    for k in counts[1:]:
        if secs[k] < 0.97 * secs[choice]:
            choice = k
    reason = f"{cores.reason}; {choice} shard{'s' if choice > 1 else ''} measured fastest"
    _set_threads(choice)
    learner = "PPO" if ppo.memory is None else "PPO with GRU"
    return ShardReport(cores, choice, reason, "measured", cap, rates, warnings, learner)


SWITCH_MARGIN = 0.10
"""A re-check switches only to a count whose update is this much faster than the current one's (hysteresis:
timing noise smaller than this never flips the count back and forth)."""
RECHECK_BUDGET_S = 0.25
"""The budget ``measure`` gets in a re-check, in seconds (each count is timed at least three times whatever
the budget, so a slow count can take longer: what a re-check cost spaces out the next one)."""


RECHECK_SETTLE = 8
"""Each re-check that keeps the count halves the share the next one waits for, down to ``1 / RECHECK_SETTLE``
of the run's ``shard_recheck``; a switch restores the whole share. A run whose count holds (the common case)
then re-checks rarely, and one on a machine whose load moves keeps checking at its full share."""


def pick_switch(current, seconds, margin=SWITCH_MARGIN):
    """The count to switch to from ``current`` given each count's seconds per update, or None: the fastest
    count (the smaller on a tie), when it is faster than ``current`` by more than ``margin``."""
    best = min(seconds, key=lambda k: (seconds[k], k))
    if best == current or not seconds[best] < (1.0 - margin) * seconds[current]:
        return None
    return best


@dataclass
class ShardSwitch:
    """One change of the shard count during a run, with the estimates that decided it."""

    update: int
    before: int
    after: int
    steps_per_s: dict  # count -> estimated actor-steps/s of a whole update
    recheck_s: float  # seconds the re-check that decided it took

    def as_dict(self):
        return {
            "update": self.update,
            "from": self.before,
            "to": self.after,
            "est_actor_steps_per_s": {int(k): float(v) for k, v in self.steps_per_s.items()},
            "recheck_s": self.recheck_s,
        }

    def line(self):
        """The console line that reports it."""
        a, b = self.steps_per_s[self.before], self.steps_per_s[self.after]
        return (
            f"update {self.update}: shards {self.before} -> {self.after} "
            f"(est. {a:,.0f} -> {b:,.0f} actor-steps/s, {b / a - 1:+.0%})"
        )


class ShardWatch:
    """Keeps measuring the shard count while a run trains, and switches when another count is faster.

    The start calibration sees one moment: a core that is busy then makes it pick too few shards for the
    whole run. ``recheck`` times every candidate count again with ``measure``, the start calibration's own
    timing, on the live learner, rollout slab and environment (each left exactly as it was, a minibatch per
    timed call as the cheap slice of an update), and switches when a count's update is ``margin`` faster
    than the current count's (``SWITCH_MARGIN``), else keeps it. The shard count never changes a result bit
    (docs/DETERMINISM.md), so neither does a switch.

    The cost is bounded by ``share``: the trainer reports each update's seconds (``add``) and a re-check is
    ``due`` once ``share`` of the training seconds since the last one covers what the last one cost (the
    first: ``first_cost_s``; the trainer gives the start calibration's, capped at one re-check's budget),
    so re-checking takes about ``share`` of the training time, however slow a count turns out. While the
    count holds, each re-check that keeps it halves the share the next one waits for, down to ``share /
    RECHECK_SETTLE`` (``share_now``); a switch restores the whole share.
    ``timer(k, seconds) -> seconds`` (a seam for tests; default none) replaces each count's measured seconds
    per update before they are compared.
    """

    def __init__(
        self,
        report,
        share,
        steps_per_update,
        shape=UpdateShape(),
        first_cost_s=0.0,
        margin=SWITCH_MARGIN,
        timer=None,
    ):
        self.current = int(report.choice)
        self.counts = sorted(int(k) for k in report.rates)
        self.share = float(share)
        self.share_now = self.share  # the share the next re-check waits for (halved while the count holds)
        self.steps_per_update = steps_per_update
        self.shape = shape
        self.margin = margin
        self.timer = timer
        self.last_cost_s = float(first_cost_s)
        self.since_s = 0.0  # training seconds since the last check
        self.switches = []
        self.rechecks = 0
        self.recheck_s = 0.0  # seconds spent re-checking, in all

    @property
    def active(self):
        return self.share > 0 and len(self.counts) > 1

    def add(self, seconds):
        """Count an update's training seconds."""
        self.since_s += float(seconds)

    def due(self):
        """Whether a re-check fits the share now."""
        return self.active and self.share_now * self.since_s >= self.last_cost_s

    def recheck(self, update, ppo, slab, env):
        """Time every count now (after update ``update``); switch and return a ShardSwitch when another
        count is clearly faster, else None."""
        t0 = time.perf_counter()
        try:
            # one minibatch per timed call (the start times whole epochs): the slice that keeps a re-check cheap
            mb = self.shape.minibatch_size
            rates = measure(ppo, slab, mb, self.counts, RECHECK_BUDGET_S, env_tick(env), minibatches=1)
        finally:
            _set_threads(self.current)  # measuring leaves the last count set
        secs = {}
        for k in self.counts:
            s = update_seconds(rates[k], self.shape)
            secs[k] = float(self.timer(k, s)) if self.timer is not None else s
        best = pick_switch(self.current, secs, self.margin)
        spent = time.perf_counter() - t0
        self.rechecks += 1
        self.recheck_s += spent
        self.last_cost_s, self.since_s = spent, 0.0
        if best is None:
            self.share_now = max(self.share / RECHECK_SETTLE, 0.5 * self.share_now)
            return None
        self.share_now = self.share
        switch = ShardSwitch(
            update, self.current, best, {k: self.steps_per_update / secs[k] for k in self.counts}, spent
        )
        self.current = best
        _set_threads(best)
        self.switches.append(switch)
        return switch

    def as_dict(self):
        return {
            "share": self.share,
            "share_now": self.share_now,
            "margin": self.margin,
            "rechecks": self.rechecks,
            "recheck_s": self.recheck_s,
            "final": self.current,
            "switches": [s.as_dict() for s in self.switches],
        }
