"""The rollout slab: every per-step quantity as a view into one buffer.

``RolloutSlab(n_steps, n_actors, obs_dim, act_dim)`` holds one float32 array
shaped ``(steps, actors, width)``; the fields are column ranges of it::

    obs (obs_dim) | memory (memory_size) | actions (act_dim) | logp | value |
    reward | terminated | truncated | final_value | advantages | returns

``terminated``/``truncated`` are stored as 0.0/1.0. ``final_value`` is the
critic's value of the final observation of an episode that was truncated at
that step (the bootstrap GAE needs), else 0. Collection writes row ``t`` of
every field for its actors; PPO reads rows of ``slab.flat`` (``steps*actors``
rows) in a shuffled order. Nothing is copied between the two.

With a policy memory (``memory_size`` > 0) the ``memory`` columns hold the GRU state each step's
action came from (PPO's minibatches write the state recomputed with the current weights there, so the
trunks read ``obs | memory`` as one row), ``h0`` (actors, memory_size) the state before the rollout's
first step and ``starts`` (steps, actors) bool the steps that begin an episode (the state is taken as
zero there).
"""

from __future__ import annotations

import numpy as np

SCALAR_FIELDS = ("logp", "value", "reward", "terminated", "truncated", "final_value", "advantages", "returns")


class RolloutSlab:
    def __init__(self, n_steps, n_actors, obs_dim, act_dim=4, dtype=np.float32, memory_size=0):
        self.n_steps, self.n_actors = int(n_steps), int(n_actors)
        self.obs_dim, self.act_dim = int(obs_dim), int(act_dim)
        self.memory_size = int(memory_size)
        self.input_dim = self.obs_dim + self.memory_size  # the policy's trunks read columns [0, input_dim)
        self.width = self.input_dim + self.act_dim + len(SCALAR_FIELDS)
        self.buffer = np.zeros((self.n_steps, self.n_actors, self.width), dtype)
        self.flat = self.buffer.reshape(self.n_steps * self.n_actors, self.width)
        o, a = self.input_dim, self.act_dim
        self.columns = {"obs": (0, self.obs_dim), "memory": (self.obs_dim, o), "actions": (o, o + a)}
        for i, name in enumerate(SCALAR_FIELDS):
            self.columns[name] = (o + a + i, o + a + i + 1)
        self.obs = self.buffer[:, :, 0 : self.obs_dim]
        self.memory = self.buffer[:, :, self.obs_dim : o]
        self.h0 = np.zeros((self.n_actors, self.memory_size), dtype)
        self.starts = np.zeros((self.n_steps, self.n_actors), np.bool_)
        self.actions = self.buffer[:, :, o : o + a]
        for name in SCALAR_FIELDS:
            setattr(self, name, self.buffer[:, :, self.columns[name][0]])

    @property
    def n_samples(self):
        return self.n_steps * self.n_actors

    def col(self, name):
        """First column of a field in ``flat``."""
        return self.columns[name][0]
