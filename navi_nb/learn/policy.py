"""The actor-critic: a Gaussian policy over the actions and a value head.

Two separate MLP trunks (as in the common PPO references): ``pi`` maps the
observation to the action mean, ``v`` to the state value. The standard
deviation is state independent: ``std = exp(log_std)``, one learnable number
per action dimension. All tensors are views into one flat buffer
(``params.py``); initialisation is orthogonal with gain sqrt(2) on hidden
layers, 0.01 on the policy output and 1.0 on the value output, zero biases,
``log_std`` = ``log_std_init`` (0.0).

With a memory (``memory_size`` > 0) a GRU core (``gru.py``) reads the observation first and both trunks
read the observation and the GRU's new state side by side: ``h_t = GRU(obs_t, h_{t-1})`` (``h_{t-1}``
taken as zero at an episode's first step), ``mu, V = trunks([obs_t, h_t])``. ``trunk_obs`` < ``obs_dim``
(a policy with memory only) gives the trunks the observation's first ``trunk_obs`` columns: the rest (the
episodic map's crop, the observation's last entry) reaches them through the GRU's state alone, so the
learner makes only the GRU's products on those columns. The state per actor lives in a
:class:`PolicyMemory` that acting advances; the GRU's weights start as PyTorch starts them (``gru.init_gru``),
drawn after the trunks'.

The distribution is the plain (unsquashed) diagonal Gaussian; the
environment clips actions to its range, and PPO uses the log-probability of
the sampled, unclipped action, which is exact for this distribution.
"""

from __future__ import annotations

import math

import numpy as np

from navi_nb.errors import NaviError
from navi_nb.learn import acting, mlp
from navi_nb.learn.gru import gru_layout, init_gru
from navi_nb.learn.loss_reference import gaussian_entropy, gaussian_log_prob
from navi_nb.learn.params import ParamError, ParamLayout

DEFAULT_HIDDEN = (256, 256)
MAX_MEMORY = 4096
"""The largest GRU state (units) a policy may have."""


class PolicyError(NaviError):
    """Bad policy configuration or input (shapes, activation names)."""


def orthogonal(rng, n_in, n_out, gain, dtype):
    """An (n_in, n_out) matrix with orthonormal rows or columns, times gain
    (the construction of torch.nn.init.orthogonal_, on the transposed shape)."""
    rows, cols = n_out, n_in
    a = rng.standard_normal((rows, cols))
    if rows < cols:
        a = a.T
    q, r = np.linalg.qr(a)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return (gain * q).T.astype(dtype)


# A GRU's state is (1 - z) * n + z * h with n = tanh(.) and z = sigmoid(.): within [-1, 1], give or take the
# rounding of those two products and their sum (a few ulps at 1).
STATE_BOUND = {t: 1.0 + 8 * float(np.finfo(t).eps) for t in (np.float32, np.float64)}


class PolicyMemory:
    """The recurrent state of ``n`` actors: ``h`` (n, H), the GRU's state after each actor's last step, and
    ``start`` (n,) bool, True where the actor's next observation is the first of an episode (its state is
    then taken as zero). A new memory starts every actor at an episode start."""

    def __init__(self, n, hidden, dtype=np.float32):
        self.h = np.zeros((int(n), int(hidden)), dtype)
        self.start = np.ones(int(n), np.bool_)

    def get_state(self) -> dict:
        return {"h": self.h.copy(), "start": self.start.copy()}

    def set_state(self, state):
        """Restore :meth:`get_state`'s dict, every array checked before anything changes."""
        h, start = np.asarray(state.get("h")), np.asarray(state.get("start"))
        if h.shape != self.h.shape or h.dtype != self.h.dtype or not np.isfinite(h).all():
            raise PolicyError(f"memory state h: {h.dtype} {h.shape}, expected finite {self.h.dtype} {self.h.shape}")
        if h.size and np.abs(h).max() > STATE_BOUND[h.dtype.type]:
            raise PolicyError(
                f"memory state h: a value of {float(np.abs(h).max()):.6g} where a GRU's state stays within [-1, 1]"
            )
        if start.shape != self.start.shape or start.dtype != np.bool_:
            raise PolicyError(f"memory state start: {start.dtype} {start.shape}, expected bool {self.start.shape}")
        self.h[...] = h
        self.start[...] = start


class ActorCritic:
    """Gaussian actor-critic with parameters in one flat buffer.

    obs_dim: observation length; act_dim: action length (4 for NavEnv);
    hidden: hidden sizes of both trunks (``hidden_v`` overrides the critic's);
    activation: "tanh" or "relu"; dtype: float32 (float64 for gradient tests); memory_size: the GRU
    core's units (0: none, the plain MLP); trunk_obs: the observation's leading columns the trunks read
    (None: all; fewer only with a memory, which reads them all).
    """

    def __init__(
        self,
        obs_dim,
        act_dim=4,
        hidden=DEFAULT_HIDDEN,
        activation="tanh",
        seed=0,
        dtype=np.float32,
        hidden_v=None,
        log_std_init=0.0,
        chunk=64,
        memory_size=0,
        trunk_obs=None,
    ):
        if activation not in ("tanh", "relu"):
            raise PolicyError(f"activation {activation!r}: expected 'tanh' or 'relu'")
        hidden = tuple(int(h) for h in hidden)
        hidden_v = hidden if hidden_v is None else tuple(int(h) for h in hidden_v)
        if int(obs_dim) < 1 or int(act_dim) < 1 or min(hidden + hidden_v + (1,)) < 1:
            raise PolicyError(
                f"sizes must be positive: obs_dim={obs_dim}, act_dim={act_dim}, hidden={hidden}, hidden_v={hidden_v}"
            )
        if isinstance(memory_size, bool) or not isinstance(memory_size, (int, np.integer)):
            raise PolicyError(f"memory_size must be an integer, got {memory_size!r}")
        if not 0 <= memory_size <= MAX_MEMORY:
            raise PolicyError(f"memory_size must be in 0..{MAX_MEMORY} (0: no memory), got {memory_size}")
        self.obs_dim, self.act_dim = int(obs_dim), int(act_dim)
        self.memory_size = int(memory_size)
        trunk_obs = self.obs_dim if trunk_obs is None else trunk_obs
        if isinstance(trunk_obs, bool) or not isinstance(trunk_obs, (int, np.integer)):
            raise PolicyError(f"trunk_obs must be an integer, got {trunk_obs!r}")
        low = 1 if self.memory_size else self.obs_dim  # without a memory the trunks are all that reads
        if not low <= trunk_obs <= self.obs_dim:
            raise PolicyError(
                f"trunk_obs {trunk_obs}: the trunks read {low}..{self.obs_dim} of the {self.obs_dim} observation "
                f"columns{'' if self.memory_size else ' (fewer than all only with a memory, which reads the rest)'}"
            )
        self.trunk_obs = int(trunk_obs)
        self.trunk_in = self.trunk_obs + self.memory_size  # what both trunks read: the observation, then the state
        self.hidden, self.hidden_v = hidden, hidden_v
        self.activation = activation
        self.act_code = mlp.ACTIVATIONS[activation]
        self.dtype = np.dtype(dtype)
        self.chunk = int(chunk)
        self.layout = ParamLayout.actor_critic(
            self.obs_dim, self.act_dim, hidden, hidden_v, self.memory_size, self.trunk_obs
        )
        self.gru = None
        if self.memory_size:
            self.gru = gru_layout(self.obs_dim, self.memory_size, self.layout.index["gru.W_ih"][1])
        self.params = np.zeros(self.layout.size, self.dtype)
        self.p = self.layout.views(self.params)
        self.pi_layers = self.layout.dense_layers("pi")
        self.v_layers = self.layout.dense_layers("v")
        self._scratch = {}
        self.initialize(seed, log_std_init)

    @property
    def n_params(self):
        return self.layout.size

    def config(self):
        return {
            "obs_dim": self.obs_dim,
            "act_dim": self.act_dim,
            "hidden": list(self.hidden),
            "hidden_v": list(self.hidden_v),
            "activation": self.activation,
            "memory_size": self.memory_size,
            "trunk_obs": self.trunk_obs,
        }

    def initialize(self, seed, log_std_init=0.0):
        rng = np.random.default_rng(seed)
        for layers, out_gain in ((self.pi_layers, 0.01), (self.v_layers, 1.0)):
            for i, layer in enumerate(layers):
                gain = out_gain if i == len(layers) - 1 else math.sqrt(2.0)
                self.p[layer.name + ".W"][...] = orthogonal(rng, layer.n_in, layer.n_out, gain, self.dtype)
                self.p[layer.name + ".b"][...] = 0
        self.p["log_std"][...] = log_std_init
        if self.gru is not None:
            init_gru(self.gru, self.params, rng)

    def new_memory(self, n):
        """A :class:`PolicyMemory` for ``n`` actors (None for a policy without memory)."""
        return None if self.gru is None else PolicyMemory(n, self.memory_size, self.dtype)

    def set_params(self, flat):
        flat = np.asarray(flat)
        if flat.shape != self.params.shape:
            raise ParamError(f"parameters of shape {flat.shape}; this policy has {self.params.shape}")
        self.params[...] = flat

    # ---- forward (acting, and a value of an observation not acted on) ----
    def _buffers(self, n):
        """The outputs for ``n`` rows: each layer's (n, n_out) in one flat buffer, the layer table of both
        trunks (``acting.layer_table``), and with a memory the trunk input [obs, h] and the GRU's scratch."""
        buf = self._scratch.get(n)
        if buf is None:
            table, size = acting.layer_table((self.pi_layers, self.v_layers), self.act_code, mlp.IDENTITY, n)
            acts = np.empty(size, self.dtype)
            outs = [acts[o : o + n * int(c)].reshape(n, int(c)) for o, c in zip(table[:, 5], table[:, 3])]
            gru = None
            if self.gru is not None:
                H = self.memory_size
                gru = tuple(
                    np.empty(shape, self.dtype)
                    for shape in ((n, self.trunk_in), (n, H), (n, 4 * H), (n, 3 * H), (n, 3 * H))
                )
            buf = (table, acts, outs, gru)
            self._scratch = {n: buf}  # keep one size: acting uses one batch size
        return buf

    def _check_obs(self, obs):
        obs = np.ascontiguousarray(obs, dtype=self.dtype)
        if obs.ndim != 2 or obs.shape[1] != self.obs_dim:
            raise PolicyError(f"observations shaped {obs.shape}; expected (N, {self.obs_dim})")
        return obs

    def _run(self, obs, memory, advance, trunks):
        """Both trunks (``trunks`` "both") or the critic's alone ("v") over ``obs``, with a memory after the
        GRU's step (:mod:`navi_nb.learn.acting`, one parallel call). ``advance``: the new state is kept in
        ``memory`` (acting); else ``memory`` is only read. Returns the layers' outputs (views, valid until
        the next call)."""
        obs = self._check_obs(obs)
        table, acts, outs, gru = self._buffers(obs.shape[0])
        if trunks == "v":
            table = table[len(self.pi_layers) :]
        if self.gru is None:
            if memory is not None:
                raise PolicyError("this policy has no memory (memory_size 0); call it without one")
            acting.mlp_forward(self.params, table, obs, acts, self.chunk)
            return outs
        if not isinstance(memory, PolicyMemory) or memory.h.shape != (obs.shape[0], self.memory_size):
            raise PolicyError(
                f"this policy has a memory of {self.memory_size} units: pass its PolicyMemory for {obs.shape[0]} "
                "actors (policy.new_memory)"
            )
        x, h_new, G, Gi, Gh = gru
        w = (self.params, self.gru.w_ih, self.gru.w_hh, self.gru.b_ih, self.gru.b_hh)
        acting.gru_forward_step(
            self.params, table, x, acts, self.chunk, w, obs, (memory.h, memory.start, h_new), (G, Gi, Gh)
        )
        if advance:
            memory.h[...] = h_new
            memory.start[...] = False
        return outs

    def forward(self, obs, memory=None, advance=True):
        """(mean (N, act_dim), value (N,)) for observations (N, obs_dim); views of
        reused buffers, valid until the next call. ``memory``: the actors' :class:`PolicyMemory` (a policy
        with memory only), advanced by this step unless ``advance`` is False."""
        outs = self._run(obs, memory, advance, "both")
        return outs[len(self.pi_layers) - 1], outs[-1][:, 0]

    def value(self, obs, memory=None):
        """The critic's values (N,) of ``obs``, a new array; a memory is read, not advanced."""
        return self._run(obs, memory, False, "v")[-1][:, 0].copy()

    def act(self, obs, rng, deterministic=False, memory=None):
        """Sample actions for all rows at once (advancing ``memory``, a policy with memory's state).

        Returns (actions (N, act_dim), logp (N,), value (N,)), new arrays. The
        noise is drawn for the whole batch from ``rng`` in one call.
        """
        mu, v = self.forward(obs, memory)
        log_std = self.p["log_std"]
        if deterministic:
            actions = mu.copy()
        else:
            noise = rng.standard_normal(mu.shape, dtype=np.float32).astype(self.dtype, copy=False)
            actions = mu + np.exp(log_std) * noise
        return actions, self.log_prob(mu, actions), v.copy()

    def log_prob(self, mu, actions):
        """Exact log-density of the diagonal Gaussian, summed over action dims
        (``loss_reference.gaussian_log_prob``), in the policy's dtype."""
        return gaussian_log_prob(mu, self.p["log_std"], actions).astype(self.dtype)

    def entropy(self):
        """Entropy of the (state-independent) Gaussian, summed over action dims
        (``loss_reference.gaussian_entropy``)."""
        return float(gaussian_entropy(self.p["log_std"]))
