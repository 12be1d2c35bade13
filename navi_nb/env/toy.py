"""A tiny self-contained point-goal task with NavEnv's interface (the learning tests, the trainer's warm-up).

Actors are points in the square ``[-size, size]^2``; each must reach its goal
(within ``success_radius``). Action columns 0 and 1 are the velocity along x
and z (clipped to [-1, 1], times ``speed``); columns 2 and 3 are ignored.
Observation: ``[goal - pos (2), pos / size (2), steps / max_steps, pad...]``
where ``pad`` is ``obs_pad`` fixed random features of the first four (a
bigger input without changing the task). Reward: progress towards the goal
(``goal_scale`` x metres), +``reward_success`` on arrival, -``penalty_time``
per step. Arrival terminates; ``max_steps`` truncates. Autoreset is
SAME_STEP, as NavEnv: ``info["final_obs"]``, ``info["done"]``,
``info["episode"]``.
"""

from __future__ import annotations

import numpy as np


class PointGoalToy:
    action_dim = 4

    def __init__(
        self,
        n_actors,
        seed=0,
        size=2.0,
        speed=0.25,
        success_radius=0.3,
        max_steps=40,
        obs_pad=0,
        reward_success=1.0,
        goal_scale=1.0,
        penalty_time=0.01,
    ):
        self.n_actors = int(n_actors)
        self.size, self.speed, self.success_radius = float(size), float(speed), float(success_radius)
        self.max_steps, self.reward_success = int(max_steps), float(reward_success)
        self.goal_scale, self.penalty_time = float(goal_scale), float(penalty_time)
        self.obs_pad = int(obs_pad)
        self.obs_dim = 5 + self.obs_pad
        self.proj = np.random.default_rng(12345).standard_normal((4, self.obs_pad)).astype(np.float32)
        self.rng = np.random.default_rng([int(seed), 0x70])
        A = self.n_actors
        self.pos = np.zeros((A, 2), np.float32)
        self.goal = np.zeros((A, 2), np.float32)
        self.steps = np.zeros(A, np.int64)
        self.ep_return = np.zeros(A, np.float64)
        self.start_dist = np.zeros(A, np.float64)
        self.path_len = np.zeros(A, np.float64)

    def _spawn(self, rows):
        n = rows.size
        self.pos[rows] = self.rng.uniform(-self.size, self.size, (n, 2))
        self.goal[rows] = self.rng.uniform(-self.size, self.size, (n, 2))
        self.steps[rows] = 0
        self.ep_return[rows] = 0.0
        self.path_len[rows] = 0.0
        self.start_dist[rows] = np.linalg.norm(self.goal[rows] - self.pos[rows], axis=1)

    def _obs(self):
        base = np.concatenate(
            [self.goal - self.pos, self.pos / self.size, (self.steps / self.max_steps)[:, None].astype(np.float32)],
            axis=1,
        )
        if self.obs_pad:
            base = np.concatenate([base, np.tanh(base[:, :4] @ self.proj)], axis=1)
        return base.astype(np.float32)

    def reset(self, seed=None):
        if seed is not None:
            self.rng = np.random.default_rng([int(seed), 0x70])
        self._spawn(np.arange(self.n_actors))
        return self._obs(), {}

    def step(self, actions):
        actions = np.asarray(actions, np.float32)
        d0 = np.linalg.norm(self.goal - self.pos, axis=1)
        move = np.clip(actions[:, :2], -1.0, 1.0) * self.speed
        new = np.clip(self.pos + move, -self.size, self.size)
        self.path_len += np.linalg.norm(new - self.pos, axis=1)
        self.pos[...] = new
        self.steps += 1
        d1 = np.linalg.norm(self.goal - self.pos, axis=1)
        success = d1 < self.success_radius
        reward = (self.goal_scale * (d0 - d1) + self.reward_success * success - self.penalty_time).astype(np.float32)
        self.ep_return += reward
        terminated = success
        truncated = (self.steps >= self.max_steps) & ~terminated
        done = terminated | truncated
        final_obs = self._obs()
        spl = np.where(success, self.start_dist / np.maximum(self.path_len, self.start_dist), 0.0)
        episode = {
            "return": self.ep_return.copy(),
            "length": self.steps.copy(),
            "success": success.astype(np.float64),
            "spl": spl,
            "coverage": np.zeros(self.n_actors),
            "collisions": np.zeros(self.n_actors),
        }
        rows = np.flatnonzero(done)
        if rows.size:
            self._spawn(rows)
        info = {"final_obs": final_obs, "done": done, "episode": episode}
        return self._obs(), reward, terminated, truncated, info
