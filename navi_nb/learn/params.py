"""One flat parameter buffer, and each tensor a view into it, in a fixed walk order.

The actor-critic's layout (``ParamLayout.actor_critic``) walks::

    pi.0.W, pi.0.b, pi.1.W, pi.1.b, ..., pi.out.W, pi.out.b, log_std,
    v.0.W,  v.0.b,  v.1.W,  v.1.b,  ..., v.out.W,  v.out.b
    [gru.W_ih, gru.W_hh, gru.b_ih, gru.b_hh]

With a memory (a GRU core of ``memory`` units, ``learn/gru.py``) the GRU reads the whole observation, the
trunks its first ``trunk_obs`` columns (all of them unless told) and the GRU's state side by side
(``in = trunk_obs + memory``), and the GRU's block ends the buffer.
A weight ``W`` is shaped ``(in, out)`` (row major, so ``y = x @ W + b``) and
its bias ``b`` follows it directly, so one layer's ``[W, b]`` is one
contiguous segment. Gradients and Adam's moments are flat buffers of the same
layout, so the same ``views`` call gives their per-tensor views.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from navi_nb.errors import NaviError
from navi_nb.learn.gru import GruLayout


class ParamError(NaviError):
    """A parameter buffer or layout that does not fit (size, dtype, names)."""


@dataclass(frozen=True)
class Dense:
    """One dense layer's place in the flat buffer."""

    name: str  # "pi.0", "pi.out", "v.1", ...
    n_in: int
    n_out: int
    offset: int  # index of W[0, 0]; b starts at offset + n_in * n_out

    @property
    def size(self) -> int:
        return self.n_in * self.n_out + self.n_out

    @property
    def b_offset(self) -> int:
        return self.offset + self.n_in * self.n_out


class ParamLayout:
    """Names, shapes and offsets of every tensor, in walk order."""

    def __init__(self, entries):
        self.entries = []  # (name, shape, offset)
        off = 0
        for name, shape in entries:
            shape = tuple(int(s) for s in shape)
            self.entries.append((name, shape, off))
            off += int(np.prod(shape))
        self.size = off
        self.index = {name: (shape, o) for name, shape, o in self.entries}

    @classmethod
    def actor_critic(cls, obs_dim, act_dim, hidden_pi, hidden_v, memory=0, trunk_obs=None):
        trunk_obs = obs_dim if trunk_obs is None else trunk_obs
        entries = []
        for trunk, hidden, n_head in (("pi", hidden_pi, act_dim), ("v", hidden_v, 1)):
            sizes = [trunk_obs + memory] + list(hidden) + [n_head]
            for i in range(len(sizes) - 1):
                tag = f"{trunk}.{i}" if i < len(sizes) - 2 else f"{trunk}.out"
                entries.append((f"{tag}.W", (sizes[i], sizes[i + 1])))
                entries.append((f"{tag}.b", (sizes[i + 1],)))
            if trunk == "pi":
                entries.append(("log_std", (act_dim,)))
        if memory:
            entries.extend(GruLayout(obs_dim, memory).entries("gru"))
        return cls(entries)

    def dense_layers(self, trunk):
        """Dense layers of one trunk ("pi" or "v"), input to output."""
        out = []
        for name, shape, off in self.entries:
            if name.startswith(trunk + ".") and name.endswith(".W"):
                out.append(Dense(name[:-2], shape[0], shape[1], off))
        return out

    def views(self, flat):
        """Dict name -> view into ``flat`` (no copies)."""
        if flat.ndim != 1 or flat.shape[0] != self.size:
            raise ParamError(f"parameter buffer has shape {flat.shape}, layout needs ({self.size},)")
        return {name: flat[o : o + int(np.prod(shape))].reshape(shape) for name, shape, o in self.entries}

    def names(self):
        return [name for name, _, _ in self.entries]
