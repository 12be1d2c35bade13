"""Rollout collection against the environment interface (NavEnv or the toy).

One row per step: the batched policy forward over all actors (the MLP
kernels run a `prange` over fixed chunks of actors: each chunk writes only
its own actors' rows), one noise draw for the whole batch from the action
generator, then one batched ``env.step``. Nothing is merged: every field of
row ``t`` is written in place into the slab's views.
"""
from __future__ import annotations

import numpy as np

EPISODE_KEYS = ("return", "length", "success", "spl", "coverage", "collisions")


def collect(env, policy, slab, obs, rng):
    """Fill ``slab`` with ``slab.n_steps`` steps of every actor, starting at ``obs``.

    Returns ``(obs, episodes)``: the observation after the last step (a copy)
    and the finished episodes' statistics (dict of 1-D float64 arrays, plus
    ``reward_mean``).
    """
    stats = {k: [] for k in EPISODE_KEYS}
    reward_sum = 0.0
    for t in range(slab.n_steps):
        slab.obs[t] = obs
        actions, logp, value = policy.act(obs, rng)
        slab.actions[t] = actions
        slab.logp[t] = logp
        slab.value[t] = value
        obs, reward, terminated, truncated, info = env.step(actions)
        slab.reward[t] = reward
        slab.terminated[t] = terminated
        slab.truncated[t] = truncated
        slab.final_value[t] = 0.0
        rows = np.flatnonzero(np.asarray(truncated) & ~np.asarray(terminated))
        if rows.size:
            slab.final_value[t, rows] = policy.value(info["final_obs"][rows])
        done = np.asarray(info["done"])
        if done.any():
            for k in EPISODE_KEYS:
                if k in info["episode"]:
                    stats[k].append(np.asarray(info["episode"][k])[done].astype(np.float64))
        reward_sum += float(np.asarray(reward).sum(dtype=np.float64))
    out = {k: (np.concatenate(v) if v else np.zeros(0)) for k, v in stats.items()}
    out["reward_mean"] = reward_sum / slab.n_samples
    return np.array(obs, copy=True), out


def train(env, ppo, slab, n_updates, seed=0, obs=None, on_update=None):
    """A minimal trainer for tests and benches: collect, PPO update, repeat.

    Returns a list of per-update dicts (PPO stats plus ``success_rate`` and
    ``episodes``). ``on_update(i, row)`` is called after each update.
    """
    rng = np.random.default_rng([int(seed), 0xAC7])
    if obs is None:
        obs, _ = env.reset(seed=seed)
        obs = np.array(obs, copy=True)
    rows = []
    for i in range(n_updates):
        obs, ep = collect(env, ppo.policy, slab, obs, rng)
        last_values = ppo.policy.value(obs)
        row = ppo.update(slab, last_values, num_updates=n_updates)
        row["episodes"] = int(ep["success"].size)
        row["success_rate"] = float(ep["success"].mean()) if ep["success"].size else float("nan")
        row["return_mean"] = float(ep["return"].mean()) if ep["return"].size else float("nan")
        rows.append(row)
        if on_update is not None:
            on_update(i, row)
    return rows
