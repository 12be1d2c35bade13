"""The training loop's body, the one the trainer, the tests and the benchmarks run.

``collect``: one row per step: the batched policy forward over all actors
(one range kernel over fixed chunks of actors, ``acting.py``: each chunk
writes only its own actors' rows), one noise draw for the whole batch from
the action generator, then one batched ``env.step``. Nothing is merged: every
field of row ``t`` is written in place into the slab's views.

``one_update``: ``collect``, the bootstrap value of the observation after the
last step, then ``PPO.update`` (GAE and the epochs of minibatches). The
trainer (``navi_nb.train.loop.Trainer``) calls it once per update; ``train``
is the same loop without the trainer's files, for tests and benches.

Both work against the environment interface (NavEnv or the toy). ``times``
(a ``PhaseTimes``) is the timing hook: it adds up the seconds spent in the
policy, the environment and PPO, for the trainer's metrics and ``bench train``.
"""

from __future__ import annotations

import time

import numpy as np

from navi_nb.env.config import EPISODE_KEYS

ACTION_STREAM = 0xAC7
"""The action-noise generator is ``default_rng([seed, ACTION_STREAM])``."""


def action_generator(seed) -> np.random.Generator:
    """The generator of the action noise for a run seeded ``seed``."""
    return np.random.default_rng([int(seed), ACTION_STREAM])


class RowSlice:
    """The action-noise generator of a process that holds actors ``start .. start + n - 1`` of
    ``total``: each draw is the whole batch's (so the generator advances exactly as in one process
    holding every actor) and hands back this process's rows."""

    def __init__(self, rng, start, total):
        self.rng, self.start, self.total = rng, int(start), int(total)

    def standard_normal(self, shape, dtype=np.float64):
        full = self.rng.standard_normal((self.total,) + tuple(shape[1:]), dtype=dtype)
        return full[self.start : self.start + shape[0]]


class PhaseTimes:
    """Seconds spent per phase, added up over calls: ``policy`` (acting and the critic's values of final
    observations), ``env`` (``env.step``), ``ppo`` (GAE and the epochs), ``before_learn`` (``one_update``'s
    hook: no part of collecting or learning); ``first_step_time`` is the ``time.time()`` at which the first
    environment step returned (None before it)."""

    PHASES = ("policy", "env", "ppo", "before_learn")

    def __init__(self):
        self.seconds = dict.fromkeys(self.PHASES, 0.0)
        self.first_step_time = None

    def copy(self) -> dict:
        return dict(self.seconds)


def collect(env, policy, slab, obs, rng, times=None, memory=None):
    """Fill ``slab`` with ``slab.n_steps`` steps of every actor, starting at ``obs``.

    ``memory``: a policy with memory's :class:`~navi_nb.learn.policy.PolicyMemory` of the actors, advanced
    step by step (its state before the first step into ``slab.h0``, each step's episode starts into
    ``slab.starts`` and its state into ``slab.memory``; an actor whose episode ended starts the next from
    zero).

    Returns ``(obs, episodes)``: the observation after the last step (a copy)
    and the finished episodes' statistics (dict of 1-D float64 arrays, plus
    ``reward_mean``). Keys in ``EPISODE_KEYS`` the environment does not
    report are empty arrays.
    """
    clock = time.perf_counter
    spent = times.seconds if times is not None else dict.fromkeys(PhaseTimes.PHASES, 0.0)
    stats = {k: [] for k in EPISODE_KEYS}
    reward_sum = 0.0
    if memory is not None:
        slab.h0[...] = memory.h
    for t in range(slab.n_steps):
        slab.obs[t] = obs
        t0 = clock()
        if memory is not None:
            slab.starts[t] = memory.start
        actions, logp, value = policy.act(obs, rng, memory=memory)
        if memory is not None:
            slab.memory[t] = memory.h
        t1 = clock()
        slab.actions[t] = actions
        slab.logp[t] = logp
        slab.value[t] = value
        obs, reward, terminated, truncated, info = env.step(actions)
        t2 = clock()
        if times is not None and times.first_step_time is None:
            times.first_step_time = time.time()
        slab.reward[t] = reward
        slab.terminated[t] = terminated
        slab.truncated[t] = truncated
        slab.final_value[t] = 0.0
        rows = np.flatnonzero(np.asarray(truncated) & ~np.asarray(terminated))
        t3 = clock()
        if rows.size:
            # every row's value, not the finished rows' alone: a row's bits then come from the same
            # block-aligned chunk whichever other actors finished with it (see PPO.__init__)
            # (with memory: the final observation seen from the state of the episode's last step)
            slab.final_value[t, rows] = policy.value(info["final_obs"], memory)[rows]
        done = np.asarray(info["done"])
        if memory is not None:
            memory.start[...] = done
        spent["policy"] += (t1 - t0) + (clock() - t3)
        spent["env"] += t2 - t1
        if done.any():
            for k in EPISODE_KEYS:
                if k in info["episode"]:
                    stats[k].append(np.asarray(info["episode"][k])[done].astype(np.float64))
        reward_sum += float(np.asarray(reward).sum(dtype=np.float64))
    out = {k: (np.concatenate(v) if v else np.zeros(0)) for k, v in stats.items()}
    out["reward_mean"] = reward_sum / slab.n_samples
    return np.array(obs, copy=True), out


def one_update(env, ppo, slab, obs, rng, num_updates=None, times=None, before_learn=None, memory=None):
    """Collect a rollout from ``obs``, bootstrap, and make one PPO update.

    Returns ``(obs, episodes, stats)``: the observation to continue from,
    ``collect``'s episode statistics and ``PPO.update``'s statistics.
    GAE: termination has no bootstrap; truncation bootstraps from the
    final observation's value (``slab.final_value``); the rollout's last
    step bootstraps from the value of the observation after it.
    ``before_learn()``: called between the collection and the update (the
    trainer's first update waits there for its learning kernels and picks
    its shard count); it must leave the environment, the slab and the
    learner as they were. Its time is ``times``' ``before_learn`` phase.
    """
    obs, episodes = collect(env, ppo.policy, slab, obs, rng, times, memory)
    t0 = time.perf_counter()
    last_values = ppo.policy.value(obs, memory)
    t1 = time.perf_counter()
    if before_learn is not None:
        before_learn()
    t2 = time.perf_counter()
    stats = ppo.update(slab, last_values, num_updates=num_updates)
    if times is not None:
        times.seconds["policy"] += t1 - t0
        times.seconds["before_learn"] += t2 - t1
        times.seconds["ppo"] += time.perf_counter() - t2
    return obs, episodes, stats


def train(env, ppo, slab, n_updates, seed=0, obs=None, on_update=None):
    """``one_update`` ``n_updates`` times, as the trainer does, without its files.

    Returns a list of per-update dicts (PPO stats plus ``success_rate``,
    ``return_mean`` and ``episodes``). ``on_update(i, row)`` is called after
    each update.
    """
    rng = action_generator(seed)
    memory = ppo.policy.new_memory(slab.n_actors)
    if obs is None:
        obs, _ = env.reset(seed=seed)
        obs = np.array(obs, copy=True)
    rows = []
    for i in range(n_updates):
        obs, ep, row = one_update(env, ppo, slab, obs, rng, num_updates=n_updates, memory=memory)
        row["episodes"] = int(ep["success"].size)
        row["success_rate"] = float(ep["success"].mean()) if ep["success"].size else float("nan")
        row["return_mean"] = float(ep["return"].mean()) if ep["return"].size else float("nan")
        rows.append(row)
        if on_update is not None:
            on_update(i, row)
    return rows
