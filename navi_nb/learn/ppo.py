"""PPO (clipped surrogate) over the flat buffers.

The loss of a minibatch, and every statistic reported with it, is defined in
``loss_reference.py`` (``ppo_loss``: plain NumPy in CleanRL's order: ratio,
clipped surrogate ``policy_loss``, clipped value loss ``value_loss``, entropy bonus,
advantages normalised over the whole minibatch). The kernels of ``fused.py``
compute that loss with its gradient written out by hand; the tests hold them to
the reference. ``minibatches`` runs minibatches: each one's gradient into
``self.grad`` (the parameters' flat layout), clipped to ``max_grad_norm``
(global norm), and one Adam step. See docs/DETERMINISM.md for why every sum here has a fixed order.
"""

from __future__ import annotations

import math
from collections import namedtuple
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from navi_nb.errors import NaviError
from navi_nb.learn import blocks, fused, minibatch
from navi_nb.learn.adam import Adam, OptimizerStateError
from navi_nb.learn.fused import ENTROPY, GRAD_NORM, STAT_NAMES
from navi_nb.learn.gae import compute_gae
from navi_nb.learn.memory_pass import MemoryPass
from navi_nb.rng_state import GeneratorStateError, check_generator_array, generator_to_array, restore_generator


class PPOConfigError(NaviError):
    """A PPO setting out of range."""


Job = namedtuple(
    "Job",
    (
        "source",  # (N, width) the rollout rows
        "order",  # (count * mb,) int64 this process's rows of the minibatches, one after the other
        "count",  # minibatches
        "cols",  # the rollout fields' columns (fused.SOURCE_FIELDS)
        "params",
        "log_std",  # the flat parameters and their log_std view
        "hp",  # fused.hyper_params
        "w",  # the fused.Work of this process's rows of a minibatch
        "grad",
        "adam_m",
        "adam_v",  # the flat gradient and Adam's moments (parameters' layout)
        "step0",  # Adam steps taken before the first minibatch
        "out",  # (count, len(fused.STEP_STAT_NAMES)) float64: each minibatch's statistics
        "memory",  # the policy memory's buffers (memory_pass.MemoryBufs), or None
    ),
)
"""What :meth:`PPO.minibatches` hands the minibatch loop (``minibatch.minibatches_update``, or an exchange's):
the minibatches to run and where their results go."""


@dataclass
class PPOConfig:
    """PPO's settings. ``TrainConfig`` inherits these fields, so each is written (and documented) once."""

    learning_rate: float = 3e-4
    """Adam step size at the first update."""
    anneal_lr: bool = True
    """Anneal the learning rate linearly to 0 over the planned updates."""
    adam_eps: float = 1e-5
    """Adam epsilon (the references' 1e-5, not PyTorch's 1e-8)."""
    update_epochs: int = 4
    """Passes over the rollout per update."""
    num_minibatches: int = 4
    """Minibatches per epoch (the rollout's samples split evenly)."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    clip_coef: float = 0.2
    """PPO ratio clip (also the value clipping range)."""
    clip_vloss: bool = True
    """Clip the value loss around the old values, as the references do."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient (references use 0.0 to 0.01)."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip over the whole flat gradient."""
    norm_adv: bool = True
    """Normalise advantages over each whole minibatch."""
    target_kl: float | None = None
    """Stop an update's epochs early once a minibatch's approx KL exceeds this (none: never)."""
    chunk_size: int = 64
    """Samples per chunk, the unit of parallel work; fixed whatever the shards (changing it moves last bits)."""
    grad_mode: str = field(default="auto", metadata={"choices": ("auto", "chunk", "tile")})
    """Weight gradients by chunk slots, by tiles, or ``auto`` (tiles for layers of >= tile_min_weights weights)."""
    tile_min_weights: int = 32768
    """The ``auto`` threshold, from ``bench ppo`` (docs/PERFORMANCE.md)."""
    tile_rows: int = 64
    """Weight-gradient tile height (rows of W)."""
    tile_cols: int = 128
    """Weight-gradient tile width (columns of W)."""
    actor_block: int = 16
    """Actors per block, the unit of work whose sums do not depend on threads or processes (0: one block)."""

    @classmethod
    def of(cls, settings) -> PPOConfig:
        """The PPOConfig of any object with these fields' names (a ``TrainConfig``, say)."""
        return cls(**{f.name: getattr(settings, f.name) for f in fields(cls)})

    def validate(self):
        checks = [
            (0.0 <= self.gamma <= 1.0, "gamma in [0, 1]"),
            (0.0 <= self.gae_lambda <= 1.0, "gae_lambda in [0, 1]"),
            (self.clip_coef > 0, "clip_coef > 0"),
            (self.max_grad_norm > 0, "max_grad_norm > 0"),
            (self.learning_rate > 0, "learning_rate > 0"),
            (self.update_epochs >= 1, "update_epochs >= 1"),
            (self.num_minibatches >= 1, "num_minibatches >= 1"),
            (self.chunk_size >= 1, "chunk_size >= 1"),
            (self.actor_block >= 0, "actor_block >= 0"),
            (self.grad_mode in ("auto", "chunk", "tile"), "grad_mode in auto/chunk/tile"),
            (self.tile_rows >= 1 and self.tile_cols >= 1, "tile sizes >= 1"),
            (self.target_kl is None or self.target_kl > 0, "target_kl > 0 or none"),
        ]
        for ok, what in checks:
            if not ok:
                raise PPOConfigError(f"PPO config: expected {what} ({asdict(self)})")
        return self


class PPO:
    """The learner: an ActorCritic, its flat gradient, Adam, and the update loop.

    ``source`` is the rollout's flat rows (``RolloutSlab.flat``); set it with
    ``set_source`` (``update`` does) before calling ``minibatches``.
    """

    def __init__(self, policy, config=None, seed=0):
        self.policy = policy
        self.config = (config or PPOConfig()).validate()
        if self.config.actor_block > 0:
            # Acting's forward runs in chunks of rows, one BLAS call each, and OpenBLAS may round a row
            # differently with the call's row count: chunks that divide the block hold the same actors
            # however the blocks are spread over processes, so acting gives the same bits everywhere.
            policy.chunk = math.gcd(policy.chunk, self.config.actor_block)
        self.grad = np.zeros_like(policy.params)
        self.g = policy.layout.views(self.grad)
        self.adam = Adam(policy.params, lr=self.config.learning_rate, eps=self.config.adam_eps)
        self.rng = np.random.default_rng([int(seed), 0x5050])  # minibatch shuffling only
        self.modes = {l.name: self._mode(l) for l in policy.pi_layers + policy.v_layers}
        self._plan = fused.Plan(policy, self.modes, self.config.tile_rows, self.config.tile_cols)
        self.memory = None
        if policy.gru is not None:
            self.memory = MemoryPass(policy.gru, policy.obs_dim, len(policy.pi_layers), policy.trunk_obs)
        self.source = None
        self.updates_done = 0
        self._trees = {}
        self.exchange = None
        """None: every block is here. Otherwise the blocks are spread over processes: an object with
        ``first_block``, ``n_blocks`` (all processes'), ``ranges`` (each process's ``(first, stop)``, in
        order) and ``allgather(rows)`` (every process's rows, concatenated in process order), e.g.
        ``navi_nb.parallel.ranks.RankExchange``, and ``minibatches(job)`` (runs a :class:`Job`, returns the
        minibatches done). The slab then holds this process's blocks' actors."""

    def _mode(self, layer):
        mode = self.config.grad_mode
        if mode == "auto":
            return "tile" if layer.n_in * layer.n_out >= self.config.tile_min_weights else "chunk"
        return mode

    # ---- the rollout rows --------------------------------------------------
    def set_source(self, flat_rows, input_dim, columns):
        """flat_rows (N, width): the observation, then a memory's state, in [0, input_dim); ``columns`` maps
        actions, logp, value, advantages, returns to their first column."""
        pol = self.policy
        act_dim = pol.act_dim
        if input_dim != pol.obs_dim + pol.memory_size or columns["actions"] + act_dim > flat_rows.shape[1]:
            raise PPOConfigError(
                f"rollout rows of width {flat_rows.shape[1]} (input {input_dim}) do not fit a policy "
                f"with obs_dim {pol.obs_dim}, memory_size {pol.memory_size}, act_dim {act_dim}"
            )
        self.source = flat_rows
        fields = [columns[name] for name in fused.SOURCE_FIELDS]
        self._cols = np.array(fields + [pol.obs_dim, pol.trunk_obs], np.int64)  # fused.STATE_COL, TRUNK_OBS

    # ---- the minibatches ---------------------------------------------------
    def _hyper_params(self, lr=None, target_kl=None):
        """The kernels' hyper-parameter array (``fused.hyper_params``) for this
        configuration, step size ``lr`` (Adam's own when None) and ``target_kl``."""
        cfg, adam = self.config, self.adam
        return fused.hyper_params(
            clip_coef=cfg.clip_coef,
            clip_vloss=cfg.clip_vloss,
            vf_coef=cfg.vf_coef,
            ent_coef=cfg.ent_coef,
            norm_adv=cfg.norm_adv,
            max_grad_norm=cfg.max_grad_norm,
            lr=adam.lr if lr is None else lr,
            beta1=adam.betas[0],
            beta2=adam.betas[1],
            adam_eps=adam.eps,
            target_kl=target_kl,
        )

    def _stats(self, means, entropy):
        """A minibatch's statistics: the loss terms' means (in STAT_NAMES order),
        the entropy, and the total loss."""
        cfg = self.config
        out = dict(zip(STAT_NAMES, (float(m) for m in means)))
        out["entropy"] = float(entropy)
        out["loss"] = out["policy_loss"] - cfg.ent_coef * out["entropy"] + cfg.vf_coef * out["value_loss"]
        return out

    def minibatches(self, order, mb, count, lr=None, target_kl=None, blk=None, exchange=None):
        """``count`` minibatches of ``mb`` samples, minibatch b being
        ``order[b * mb:(b + 1) * mb]`` (``mb / blk`` actor blocks' runs of ``blk``
        rows, one after the other; default one block), each the blocks' gradients
        added along the block tree (``navi_nb.learn.blocks``), clipped to
        ``max_grad_norm`` (global norm, the finish items' sums of squares added
        in item order) and one Adam step of size ``lr``: the one minibatch loop of
        ``minibatch.py``, for a policy with or without memory. ``exchange`` None:
        every block is here, and the minibatches run in one compiled call
        (``minibatch.minibatches_update``: no Python between the parallel regions).
        Otherwise the blocks are spread over processes (see ``self.exchange``):
        ``order`` holds this process's rows, and ``exchange.minibatches(job)``
        (``navi_nb.parallel.exchange_update``) runs the same compiled steps with the
        sums combined over the processes between them, the same bits. Stops after a
        minibatch whose approximate KL exceeds ``target_kl``. Returns a list of
        (stats, gradient norm), one per minibatch done. After a call, ``grad``
        holds the last minibatch's gradient before clipping."""
        if self.source is None:
            raise PPOConfigError("minibatches: no rollout rows; call set_source (or update) first")
        order = np.ascontiguousarray(order, dtype=np.int64)
        mb, count = int(mb), int(count)
        blk = mb if blk is None else int(blk)
        if mb < 1 or count < 1 or mb * count > order.shape[0]:
            raise PPOConfigError(f"minibatches: {count} x {mb} samples do not fit an order of {order.shape[0]}")
        if blk < 1 or mb % blk:
            raise PPOConfigError(f"minibatches: a minibatch of {mb} rows is not whole blocks of {blk}")
        used = order[: mb * count]
        if used.min() < 0 or used.max() >= self.source.shape[0]:
            raise PPOConfigError(f"minibatches: the order holds rows outside [0, {self.source.shape[0]})")
        if self.memory is not None:
            self._check_sequences(used, blk)
        pol, adam = self.policy, self.adam
        n_total = mb if exchange is None else exchange.n_blocks * blk
        w = self._plan.work(mb, self.config.chunk_size, pol.act_dim, blk, n_total=n_total)
        out = np.empty((count, len(fused.STEP_STAT_NAMES)), np.float64)
        job = Job(
            self.source,
            used,
            count,
            self._cols,
            pol.params,
            pol.p["log_std"],
            self._hyper_params(lr, target_kl),
            w,
            self.grad,
            adam.m,
            adam.v,
            float(adam.t),
            out,
            None if self.memory is None else self.memory.buffers(w, pol.params),
        )
        if exchange is None:
            done = minibatch.minibatches_update(job, *self._tree(w.n_blocks))
        else:
            done = exchange.minibatches(job)
        adam.t += done
        return [
            (self._stats(out[b, : len(STAT_NAMES)], out[b, ENTROPY]), float(out[b, GRAD_NORM])) for b in range(done)
        ]

    def _check_sequences(self, used, blk):
        """A policy with memory learns from whole actor sequences (:meth:`epoch_order`): each run of ``blk``
        rows must be some actors' rows at every step, step by step (``blocks.sequence_order``)."""
        n_steps = self.memory.starts.shape[0]
        n_actors = self.source.shape[0] // n_steps
        if blk % n_steps:
            raise PPOConfigError(f"minibatches: runs of {blk} rows are not whole sequences of {n_steps} steps")
        runs = used.reshape(-1, n_steps, blk // n_steps)
        want = runs[:, :1, :] + n_actors * np.arange(n_steps, dtype=np.int64)[None, :, None]
        if (runs[:, 0, :] >= n_actors).any() or not np.array_equal(runs, want):
            raise PPOConfigError(
                "minibatches: a policy with memory needs whole actor sequences in each run of rows "
                "(PPO.epoch_order gives them)"
            )

    def _tree(self, n_blocks):
        """The block tree's additions over ``n_blocks`` rows (block k in row k) and the root's row."""
        tree = self._trees.get(n_blocks)
        if tree is None:
            tree = self._trees[n_blocks] = blocks.tree_ops(0, n_blocks, {(k, k + 1): k for k in range(n_blocks)})
        return tree

    def block_layout(self, n_steps, n_actors):
        """``(block, rows_per_block, blk)``: actors per block, a block's rollout rows, and its rows in
        each minibatch (``rows_per_block // num_minibatches``)."""
        try:
            block = blocks.block_size(self.config.actor_block, n_actors)
        except blocks.BlockError as exc:
            raise PPOConfigError(str(exc)) from None
        rows_per_block = n_steps * block
        blk = rows_per_block // self.config.num_minibatches
        if self.memory is not None and block % self.config.num_minibatches:
            raise PPOConfigError(
                f"a policy with memory learns from whole actor sequences: a block's {block} actors must split "
                f"evenly into {self.config.num_minibatches} minibatches (set actor_block or num_minibatches)"
            )
        if blk < 1:
            raise PPOConfigError(
                f"a block's {rows_per_block} samples ({n_steps} steps x {block} actors) "
                f"cannot make {self.config.num_minibatches} minibatches"
            )
        return block, rows_per_block, blk

    def epoch_order(self, slab, epoch_key, first=0):
        """One epoch's minibatch rows over ``slab`` (this process's blocks, the first being block ``first``):
        each block's permutation comes from ``epoch_key`` and the block's index, so a block's minibatches do
        not depend on which process holds it; a policy with memory takes whole actor sequences
        (``blocks.sequence_order``)."""
        block, rows_per_block, blk = self.block_layout(slab.n_steps, slab.n_actors)
        n_local, count = slab.n_actors // block, self.config.num_minibatches
        if self.memory is not None:
            perms = blocks.epoch_permutations(epoch_key, block, first, n_local)
            return blocks.sequence_order(perms, slab.n_steps, block, slab.n_actors, count)
        perms = blocks.epoch_permutations(epoch_key, rows_per_block, first, n_local)
        return blocks.epoch_order(perms, slab.n_steps, block, slab.n_actors, count, blk)

    def learning_rate(self, update, num_updates):
        """Step size for update ``update`` (0-based) of ``num_updates``; 0 past the last (an update timed
        beyond a finished run's end, ``bench train --from-run``, does not climb the loss)."""
        if not self.config.anneal_lr or not num_updates:
            return self.config.learning_rate
        return self.config.learning_rate * max(0.0, 1.0 - update / float(num_updates))

    # ---- one PPO update over a filled rollout --------------------------------
    def _minibatch_layout(self, slab):
        """``block_layout``'s ``(block, rows_per_block, blk)`` for ``slab``, and this process's minibatch size
        (its blocks' ``blk`` rows each)."""
        block, rows_per_block, blk = self.block_layout(slab.n_steps, slab.n_actors)
        return block, rows_per_block, blk, slab.n_actors // block * blk

    def _use_slab(self, slab):
        """The slab's rows as the minibatches' source (``set_source``)."""
        self.set_source(slab.flat, slab.input_dim, {k: slab.col(k) for k in fused.SOURCE_FIELDS})
        if self.memory is not None:
            self.memory.use(slab.h0, slab.starts)

    def compile_passes(self, slab, names=("chunk", "finish")):
        """Compile (or load from Numba's cache) the fused minibatch passes in ``names`` for this learner's
        and ``slab``'s types (``minibatch.compile_passes``), without running them: a warm-up process's call.
        The arguments are the ones :meth:`update` builds, at its sizes (the same per-size buffers)."""
        self._use_slab(slab)
        _block, _rows_per_block, blk, mb = self._minibatch_layout(slab)
        pol = self.policy
        w = self._plan.work(mb, self.config.chunk_size, pol.act_dim, blk)
        ops, root = self._tree(w.n_blocks)
        rows = np.zeros(mb, np.int64)
        minibatch.compile_passes(
            names,
            self.source,
            rows,
            self._cols,
            pol.params,
            pol.p["log_std"],
            self._hyper_params(),
            w,
            ops,
            root,
            self.grad,
        )

    def update(self, slab, last_values, num_updates=None):
        """GAE, then epochs of shuffled minibatches. Returns the update's stats."""
        cfg = self.config
        last_values = np.asarray(last_values)
        if last_values.shape != (slab.n_actors,):
            raise PPOConfigError(f"last_values shaped {last_values.shape}; expected ({slab.n_actors},)")
        if not np.isfinite(slab.buffer).all():
            raise PPOConfigError("the rollout holds non-finite values (NaN or inf); no update was made")
        compute_gae(
            slab.reward,
            slab.value,
            slab.terminated,
            slab.truncated,
            slab.final_value,
            last_values,
            cfg.gamma,
            cfg.gae_lambda,
            slab.advantages,
            slab.returns,
        )
        self._use_slab(slab)
        block, _rows_per_block, blk, mb = self._minibatch_layout(slab)
        n_local = slab.n_actors // block
        ex = self.exchange
        first = 0 if ex is None else ex.first_block
        if ex is not None and ex.ranges[ex.rank] != (first, first + n_local):
            raise PPOConfigError(
                f"the slab holds {n_local} blocks; this process should hold blocks {ex.ranges[ex.rank]}"
            )
        lr = self.learning_rate(self.updates_done, num_updates)
        totals, count, norms, stopped = {}, 0, [], False
        for _epoch in range(cfg.update_epochs):
            # one draw of the shared generator per epoch; each block's permutation comes from it and the
            # block's index, so a block's minibatches do not depend on which process holds it
            order = self.epoch_order(slab, int(self.rng.integers(0, 2**63)), first)
            for st, norm in self.minibatches(order, mb, cfg.num_minibatches, lr, cfg.target_kl, blk, ex):
                norms.append(norm)
                for key, val in st.items():
                    totals[key] = totals.get(key, 0.0) + val
                count += 1
                if cfg.target_kl is not None and st["approx_kl"] > cfg.target_kl:
                    stopped = True
            if stopped:
                break
        self.updates_done += 1
        stats = {key: val / count for key, val in totals.items()}
        y_pred, y_true = slab.value, slab.returns
        if ex is not None:  # the whole rollout's, actors in run order, as one process would see them
            y_pred = ex.allgather(np.ascontiguousarray(y_pred.T)).T
            y_true = ex.allgather(np.ascontiguousarray(y_true.T)).T
        y_pred = y_pred.astype(np.float64).ravel()
        y_true = y_true.astype(np.float64).ravel()
        var_y = float(np.var(y_true))
        stats["explained_var"] = float("nan") if var_y == 0 else 1.0 - float(np.var(y_true - y_pred)) / var_y
        stats["grad_norm"] = float(np.mean(norms))
        stats["learning_rate"] = lr
        stats["minibatches"] = count
        stats["early_stop"] = stopped
        return stats

    # ---- state, for checkpoints and the same-sum tests ------------------------
    def get_state(self):
        """Weights, Adam's moments and step, updates done and the shuffle generator
        (``navi_nb.rng_state``'s array): plain arrays, as a checkpoint stores them."""
        return {
            "params": self.policy.params.copy(),
            **{"adam_" + k: v for k, v in self.adam.state().items()},
            "updates_done": np.array(self.updates_done, np.int64),
            "rng": generator_to_array(self.rng),
        }

    def state_spec(self):
        """name -> (shape, dtype) of every :meth:`get_state` array."""
        return {k: (np.shape(v), np.asarray(v).dtype) for k, v in self.get_state().items()}

    def set_state(self, state):
        """Restore :meth:`get_state`'s dict; everything is checked before anything changes."""
        if not isinstance(state, dict):
            raise PPOConfigError(f"PPO state: expected a dict, got {type(state).__name__}")
        state = {k: np.asarray(v) for k, v in state.items()}  # plain arrays: a mask would hide NaN from the checks
        for key, (shape, dtype) in self.state_spec().items():
            arr = np.asarray(state.get(key))
            if arr.shape != shape or arr.dtype != dtype:
                raise PPOConfigError(f"PPO state {key!r}: {arr.dtype} {arr.shape}, expected {dtype} {shape}")
        for key in ("params", "adam_m", "adam_v"):
            if not np.isfinite(state[key]).all():
                raise PPOConfigError(f"PPO state {key!r} holds non-finite values")
        adam_t, updates = int(state["adam_t"]), int(state["updates_done"])
        if adam_t < 0 or updates < 0:
            raise PPOConfigError(f"PPO state: negative adam_t ({adam_t}) or updates_done ({updates})")
        try:
            check_generator_array(state["rng"])
        except GeneratorStateError as exc:
            raise PPOConfigError(f"PPO state 'rng': {exc}") from None
        adam_state = {"m": state["adam_m"], "v": state["adam_v"], "t": np.asarray(state["adam_t"])}
        try:
            self.adam.check_state(adam_state)
        except OptimizerStateError as exc:
            raise PPOConfigError(f"PPO state: {exc}") from None
        self.policy.set_params(state["params"])
        self.adam.load_state(adam_state)
        self.updates_done = updates
        restore_generator(self.rng, state["rng"])
