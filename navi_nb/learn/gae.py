"""Generalised advantage estimation with termination and truncation kept apart.

At step ``t`` an actor that

- *terminated* reached a true end (goal, crash): no bootstrap,
  ``delta = r - V(s_t)``;
- was *truncated* (time limit) stopped in a state that still has a future:
  bootstrap from the value of that episode's final observation,
  ``delta = r + gamma * V(final_obs_t) - V(s_t)``;
- otherwise continues: ``delta = r + gamma * V(s_{t+1}) - V(s_t)``, where
  ``V(s_T)`` after the last row is ``last_values``.

Either end cuts the advantage recursion (the next row belongs to a new
episode): ``A_t = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}``.
Returns are ``A_t + V(s_t)``.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(cache=True, parallel=True, error_model="numpy")
def gae_kernel(rewards, values, terminated, truncated, final_values, last_values, gamma, lam, adv, ret):
    """All arrays (T, A) except last_values (A,); writes adv and ret (T, A)."""
    n_steps, n_actors = rewards.shape
    for a in prange(n_actors):
        next_adv = 0.0
        next_value = np.float64(last_values[a])
        for t in range(n_steps - 1, -1, -1):
            v = np.float64(values[t, a])
            if terminated[t, a] != 0:
                delta = rewards[t, a] - v
                next_adv = delta
            elif truncated[t, a] != 0:
                delta = rewards[t, a] + gamma * np.float64(final_values[t, a]) - v
                next_adv = delta
            else:
                delta = rewards[t, a] + gamma * next_value - v
                next_adv = delta + gamma * lam * next_adv
            adv[t, a] = next_adv
            ret[t, a] = next_adv + v
            next_value = v


def compute_gae(
    rewards, values, terminated, truncated, final_values, last_values, gamma=0.99, lam=0.95, adv=None, ret=None
):
    """Advantages and returns (T, A); writes into ``adv``/``ret`` when given."""
    shape = rewards.shape
    adv = np.empty(shape, np.float32) if adv is None else adv
    ret = np.empty(shape, np.float32) if ret is None else ret
    gae_kernel(
        rewards,
        values,
        terminated,
        truncated,
        final_values,
        np.asarray(last_values),
        float(gamma),
        float(lam),
        adv,
        ret,
    )
    return adv, ret
