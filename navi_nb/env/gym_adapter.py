"""A Gymnasium ``VectorEnv`` over :class:`~navi_nb.env.nav_env.NavEnv` (needs the ``gym`` extra).

``NaviVectorEnv(world, num_envs, **navenv_kwargs)`` (or ``NaviVectorEnv(env=NavEnv(...))``)
declares ``single_observation_space`` / ``single_action_space`` (Box) and their
batched forms, and uses Gymnasium's SAME_STEP autoreset mode
(``metadata["autoreset_mode"]``): an actor whose episode ends is reset inside
the same ``step``; the returned observation is its next episode's first, the
finished episode's last is ``info["final_obs"][i]`` where
``info["_final_obs"][i]`` is True, and its statistics are in
``info["episode"]`` (masked by ``info["_episode"]``). Arrays returned here
are copies (unlike ``NavEnv``'s reused buffers).
"""
from __future__ import annotations

import numpy as np

try:
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode, VectorEnv
    from gymnasium.vector.utils import batch_space
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("navi_nb.env.gym_adapter needs gymnasium: pip install 'navi-nb[gym]'") from exc

from navi_nb.env.nav_env import NavEnv


def observation_bounds(layout: dict, dim: int):
    """(low, high) float32 (dim,) for a NavEnv observation layout."""
    low = np.full(dim, -np.inf, np.float32)
    high = np.full(dim, np.inf, np.float32)
    for name in ("depth", "semantic"):
        if name in layout:
            low[layout[name]] = 0.0
            high[layout[name]] = 1.0
    low[layout["prev_action"]] = -1.0
    high[layout["prev_action"]] = 1.0
    if "goal" in layout:
        g = layout["goal"].start
        low[g] = 0.0                  # distance / goal_scale
        low[g + 1:g + 3] = -1.0       # sin, cos of the bearing
        high[g + 1:g + 3] = 1.0
    return low, high


class NaviVectorEnv(VectorEnv):
    """Gymnasium vector API for a NavEnv: one sub-environment per actor."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(self, world=None, num_envs=None, *, env: NavEnv | None = None, **kwargs):
        if env is None:
            if world is None or num_envs is None:
                raise TypeError("NaviVectorEnv needs either env=NavEnv(...) or world and num_envs")
            env = NavEnv(world, num_envs, **kwargs)
        self.env = env
        self.num_envs = env.n_actors
        low, high = observation_bounds(env.obs_layout, env.obs_dim)
        self.single_observation_space = gym.spaces.Box(low, high, (env.obs_dim,), np.float32)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self._np_random, self._np_random_seed = gym.utils.seeding.np_random(seed)
        obs, info = self.env.reset(seed=seed)
        return obs.copy(), {}

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        done = info["done"].copy()
        out = {"final_obs": info["final_obs"].copy(), "_final_obs": done,
               "episode": {k: v.copy() for k, v in info["episode"].items()}, "_episode": done.copy(),
               "reward_terms": {k: v.copy() for k, v in info["reward_terms"].items()},
               "contact": info["contact"].copy()}
        return obs.copy(), reward.copy(), terminated.copy(), truncated.copy(), out

    def close_extras(self, **kwargs):
        pass
