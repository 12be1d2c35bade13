"""One minibatch's PPO gradient in two parallel regions.

The loss is the one of ``loss_reference.py`` (plain NumPy, the
specification); here it is computed with its gradient written out by hand, in
fixed pieces so the bits do not depend on the thread count. A minibatch takes
two compiled calls, so that kernel dispatch and parallel-region start-up stay
small next to the arithmetic on a small network: ``block_moments`` (serial:
each block's advantage moments, which the caller combines along the block tree
into the whole minibatch's), then ``minibatch.gradient_passes``, which runs the
three phases below in one call (with a policy memory's GRU steps around the
second: ``memory_pass.py``). This module holds the tables and buffers, the
advantages and the chunk pass; ``minibatch.py`` the finish pass, the tree, the
norm and the step (``minibatch.gradient_passes``; ``minibatch.minibatches_update``
runs several minibatches, their moments, clipping and Adam steps included, in
one call).

1. ``normalize_advantages`` (serial): gather the minibatch's advantages and
   normalise them by the whole minibatch's moments, once, before any sharding.
2. ``chunk_pass``: a ``prange`` over the minibatch's fixed chunks of samples.
   Each chunk gathers its observation rows, runs both trunks forward, the
   per-sample PPO loss terms and their gradients, and backward through every
   layer (activation gradients), and writes the chunk's ``[dW, db]`` of every
   chunk-mode layer into its own slot. Everything a chunk computes stays in
   cache between the forward and the backward pass.
3. ``finish_pass``: a ``prange`` over fixed work items, each writing its own
   part of the flat gradient: slot-sum blocks (slots added element by element
   in chunk order), weight-gradient tiles of tile-mode layers (one product over
   the whole minibatch in sample order), the bias columns of tile-mode layers
   (summed in sample order), and one item for ``log_std``'s gradient and the
   loss statistics (sums in sample order).

Every piece of work is a fixed computation on fixed inputs whatever thread
runs it, so the result does not depend on the thread count (DETERMINISM.md).

Layers are described by rows of an int64 table ``meta`` (columns below), in
the walk order of the parameter layout: the policy trunk's layers first
(``n_pi`` of them, its output layer last), then the value trunk's. Layer
outputs live in one flat buffer ``A`` (the gathered observations first, at
offset 0, then each layer's ``(n, n_out)`` block), their pre-activation
gradients in ``D`` (one ``(n, n_out)`` block per layer).

The kernels take their arguments grouped: the rollout rows (``source``,
``rows``, ``cols`` with the column indices below), the parameters, one float64
array of hyper-parameters (:func:`hyper_params`, indices below) and one
:class:`Work` tuple of the plan's tables and scratch buffers for one minibatch
size (``Plan.work``). The parallel regions (``_chunk_pass``,
``minibatch._finish_pass``, ``minibatch._reduce_nodes``) and the helpers they
call take read-only arrays and scalars as tuples (the minibatch's inputs, the
network, sizes, loss coefficients), but every array they write as an argument of
its own: Numba's parallel lowering does not always keep writes to an array taken
from a tuple inside a ``prange`` region.
"""

from __future__ import annotations

import math
from collections import namedtuple

import numba
import numpy as np
from numba import njit, prange

from navi_nb.learn.blas import NO_TRANS, TRANS, address, gemm
from navi_nb.learn.loss_reference import ADV_EPS, LOG_2PI
from navi_nb.learn.mlp import bias_act_rows, times_dact_rows

# columns of ``meta``
NIN, NOUT, WOFF, XOFF, HOFF, DOFF, SLOT, ACT = range(8)
META_COLS = 8
# kinds of ``finish_pass`` work items (columns: kind, layer, a0, a1, b0, b1); a MEMORY item is the flat
# parameters [a0, a1) of the GRU core, whose block gradients ``memory_pass`` writes before the finish pass
SLOT_SUM, TILE, TILE_BIAS, HEADS, MEMORY = 0, 1, 2, 3, 4

# ``cols``: where each rollout field starts in a row of ``source``, then where the policy memory's state
# starts (the observation's width) and the observation's columns the trunks read (``policy.trunk_obs``): the
# trunks' input is a row's first TRUNK_OBS columns and, after them, its STATE_COL columns on
SOURCE_FIELDS = ("actions", "logp", "value", "returns", "advantages")
ACTIONS, LOGP, VALUE, RETURNS, ADVANTAGES = range(len(SOURCE_FIELDS))
STATE_COL, TRUNK_OBS = len(SOURCE_FIELDS), len(SOURCE_FIELDS) + 1

# the hyper-parameter array (:func:`hyper_params`); flags are 1.0 / 0.0, target_kl < 0 is none
HYPER_NAMES = (
    "clip_coef",
    "clip_vloss",
    "vf_coef",
    "ent_coef",
    "norm_adv",
    "max_grad_norm",
    "lr",
    "beta1",
    "beta2",
    "adam_eps",
    "target_kl",
)
(CLIP_COEF, CLIP_VLOSS, VF_COEF, ENT_COEF, NORM_ADV, MAX_GRAD_NORM, LR, BETA1, BETA2, ADAM_EPS, TARGET_KL) = range(
    len(HYPER_NAMES)
)

# the loss statistics: columns of ``Work.stats`` (per sample), entries of ``Work.stat_sums``
# (the training CSV's column names, used from the kernel to the CSV)
STAT_NAMES = ("policy_loss", "value_loss", "approx_kl", "clip_frac", "old_approx_kl")
POLICY_LOSS, VALUE_LOSS, APPROX_KL, CLIP_FRAC, OLD_APPROX_KL = range(len(STAT_NAMES))
# a row of ``minibatches_update``'s output: the statistics' means, then these two
STEP_STAT_NAMES = STAT_NAMES + ("entropy", "grad_norm")
ENTROPY, GRAD_NORM = len(STAT_NAMES), len(STAT_NAMES) + 1

Work = namedtuple(
    "Work",
    (
        "meta",  # (layers, META_COLS) int64, offsets resolved for this minibatch size
        "n_pi",  # layers of the policy trunk (the first rows of meta)
        "items",  # (items, 6) int64: finish_pass's work items (their order is the gradient norm's sum order)
        "item_order",  # (items,) int64: the order a prange hands the items out (Plan.item_order)
        "chunk",  # samples per chunk
        "n_chunks",  # chunks of a minibatch
        "slot_width",  # elements of one chunk's slot
        "log_std_off",  # log_std's offset in the flat parameters
        "A",
        "D",  # layer outputs and pre-activation gradients (see above)
        "slots",  # (n_chunks * slot_width,) chunk slots
        "adv",  # (n,) the minibatch's (normalised) advantages
        "dlogstd",  # (n, act_dim) per-sample d loss / d log_std
        "stats",  # (n, len(STAT_NAMES)) float64 per-sample statistics
        "stat_sums",  # (len(STAT_NAMES),) float64 their sums over the minibatch
        "sumsq",  # (items,) float64 each item's sum of squares (the gradient norm)
        "blk",  # rows of each actor block in a minibatch (the minibatch is n_blocks runs of blk rows)
        "n_blocks",  # blocks in this minibatch's rows
        "n_total",  # rows of the whole minibatch (all blocks, wherever they are computed)
        "block_grads",  # (n_blocks, params) each block's gradient (then the tree's partial sums, in place)
        "block_stats",  # (n_blocks, len(STAT_NAMES)) float64 each block's statistics' sums (likewise)
        "moments",  # (n_blocks, 3) float64 each block's advantages' (count, mean, M2) (likewise)
    ),
)


def hyper_params(
    clip_coef, clip_vloss, vf_coef, ent_coef, norm_adv, max_grad_norm, lr, beta1, beta2, adam_eps, target_kl=None
):
    """The kernels' float64 hyper-parameter array (indices ``CLIP_COEF`` ... ``TARGET_KL``)."""
    values = {
        "clip_coef": clip_coef,
        "clip_vloss": 1.0 if clip_vloss else 0.0,
        "vf_coef": vf_coef,
        "ent_coef": ent_coef,
        "norm_adv": 1.0 if norm_adv else 0.0,
        "max_grad_norm": max_grad_norm,
        "lr": lr,
        "beta1": beta1,
        "beta2": beta2,
        "adam_eps": adam_eps,
        "target_kl": -1.0 if target_kl is None else target_kl,
    }
    return np.array([float(values[name]) for name in HYPER_NAMES], np.float64)


@njit(cache=True)
def block_moments(source, rows, col, blk, out):
    """out[k] = (count, mean, M2) of the advantages ``source[rows[i], col]`` of block k's rows
    ``k * blk .. (k + 1) * blk - 1``: float64, two passes in row order (M2: the sum of squared
    deviations from the block's mean)."""
    for k in range(rows.shape[0] // blk):
        s = 0.0
        for i in range(k * blk, (k + 1) * blk):
            s += np.float64(source[rows[i], col])
        mean = s / blk
        q = 0.0
        for i in range(k * blk, (k + 1) * blk):
            d = np.float64(source[rows[i], col]) - mean
            q += d * d
        out[k, 0] = blk
        out[k, 1] = mean
        out[k, 2] = q


@njit(cache=True)
def normalize_advantages(source, rows, col, moments, out, enabled):
    """out[i] = source[rows[i], col], normalised when ``enabled`` by the whole minibatch's
    ``moments`` = (count, mean, M2) (the blocks' moments combined along the block tree):
    (adv - mean) / (std + 1e-8), std with n - 1 (``loss_reference.normalize_advantages``)."""
    n = rows.shape[0]
    if not enabled:
        for i in range(n):
            out[i] = source[rows[i], col]
        return
    mean = moments[1]
    std = math.sqrt(moments[2] / max(moments[0] - 1.0, 1.0))
    for i in range(n):
        out[i] = (np.float64(source[rows[i], col]) - mean) / (std + ADV_EPS)


@njit(cache=True, inline="always")
def block_view(a, offset, rows, cols):
    """a[offset : offset + rows * cols] as a (rows, cols) array: indexing it with
    range() counters keeps the loops free of negative-index checks, so they
    vectorize (flat indices computed from offsets do not)."""
    return a[offset : offset + rows * cols].reshape((rows, cols))


# The per-chunk and per-item helpers below are separate compiled functions, not inlined into the
# parallel kernels: each call does a GEMM's worth of work, so the call costs nothing measurable, and the
# learning group's cold compile is about 3 s shorter (20 s instead of 23 s on the quiet 2-core machine).
# A prange index is passed on as np.int64(...): Numba types it uint64 in the parallel region and int64 when it
# first types the loop, and each type would compile the helper once more.
@njit(cache=True, error_model="numpy")
def _forward_rows(A, params, m, r0, r1):
    """Rows r0:r1 of one layer: A[out] = act(A[in] @ W + b)."""
    nin, nout, woff = m[NIN], m[NOUT], m[WOFF]
    one = np.ones(1, A.dtype)[0]
    zero = one - one
    h0 = m[HOFF] + r0 * nout
    gemm(
        NO_TRANS,
        NO_TRANS,
        (r1 - r0, nout, nin),
        one,
        (address(A, m[XOFF] + r0 * nin), nin),
        (address(params, woff), nout),
        zero,
        (address(A, h0), nout),
    )
    H = block_view(A, h0, r1 - r0, nout)
    bias_act_rows(H, params[woff + nin * nout : woff + nin * nout + nout], 0, r1 - r0, m[ACT])


@njit(cache=True, error_model="numpy")
def _backward_rows(A, D, params, slots, slot_width, c, m, mp, r0, r1, has_prev):
    """Rows r0:r1 of one layer's backward: its chunk slot (chunk-mode layers),
    and the previous layer's pre-activation gradient (when ``has_prev``)."""
    nin, nout = m[NIN], m[NOUT]
    one = np.ones(1, A.dtype)[0]
    zero = one - one
    d0 = m[DOFF] + r0 * nout
    if m[SLOT] >= 0:
        base = c * slot_width + m[SLOT]
        gemm(
            TRANS,
            NO_TRANS,
            (nin, nout, r1 - r0),
            one,
            (address(A, m[XOFF] + r0 * nin), nin),
            (address(D, d0), nout),
            zero,
            (address(slots, base), nout),
        )
        gb = slots[base + nin * nout : base + nin * nout + nout]
        dZ = block_view(D, d0, r1 - r0, nout)
        for j in range(nout):
            gb[j] = zero
        for i in range(r1 - r0):
            for j in range(nout):
                gb[j] += dZ[i, j]
    if has_prev:
        p0 = mp[DOFF] + r0 * nin
        gemm(
            NO_TRANS,
            TRANS,
            (r1 - r0, nin, nout),
            one,
            (address(D, d0), nout),
            (address(params, m[WOFF]), nout),
            zero,
            (address(D, p0), nin),
        )
        times_dact_rows(
            block_view(D, p0, r1 - r0, nin), block_view(A, mp[HOFF] + r0 * nin, r1 - r0, nin), 0, r1 - r0, mp[ACT]
        )


@njit(cache=True, error_model="numpy")
def _pi_head(A, D, dlogstd, stats, mo, batch, log_std, coefs, r0, r1):
    """Clipped surrogate of rows r0:r1 (``policy_loss`` of ``loss_reference.ppo_loss``):
    d loss / d mu into D, the per-sample part of d loss / d log_std, and the
    statistics (float64 inside). ``mo`` the policy output layer's row of ``meta``."""
    source, rows, cols, adv = batch
    clip_coef, inv_n = coefs[0], coefs[3]
    k = mo[NOUT]
    a0, c_logp = cols[ACTIONS], cols[LOGP]
    ls = np.empty(k)
    std = np.empty(k)
    for j in range(k):  # once per chunk, not per sample: exp is the costly part
        ls[j] = np.float64(log_std[j])
        std[j] = math.exp(ls[j])
    for i in range(r0, r1):
        r = rows[i]
        lp = 0.0
        for j in range(k):
            z = (np.float64(source[r, a0 + j]) - np.float64(A[mo[HOFF] + i * k + j])) / std[j]
            lp += -0.5 * z * z - ls[j] - 0.5 * LOG_2PI
        logratio = lp - np.float64(source[r, c_logp])
        ratio = math.exp(logratio)
        a = np.float64(adv[i])
        clipped_ratio = min(max(ratio, 1.0 - clip_coef), 1.0 + clip_coef)
        pg1 = -a * ratio
        pg2 = -a * clipped_ratio
        if pg1 >= pg2:
            pg = pg1
            dlogp = -a * ratio * inv_n
        else:
            pg = pg2
            dlogp = 0.0
        for j in range(k):
            z = (np.float64(source[r, a0 + j]) - np.float64(A[mo[HOFF] + i * k + j])) / std[j]
            D[mo[DOFF] + i * k + j] = dlogp * z / std[j]
            dlogstd[i, j] = dlogp * (z * z - 1.0)
        stats[i, POLICY_LOSS] = pg
        stats[i, APPROX_KL] = (ratio - 1.0) - logratio
        stats[i, CLIP_FRAC] = 1.0 if abs(ratio - 1.0) > clip_coef else 0.0
        stats[i, OLD_APPROX_KL] = -logratio


@njit(cache=True, error_model="numpy")
def _v_head(A, D, stats, mo, batch, coefs, r0, r1):
    """Value loss of rows r0:r1 (``value_loss`` of ``loss_reference.ppo_loss``, clipped
    around the old values when ``clip_vloss``): d loss / d V into D, the loss into
    the VALUE_LOSS statistic. ``mo`` the value output layer's row of ``meta``."""
    source, rows, cols = batch[0], batch[1], batch[2]
    clip_coef, clip_vloss, vf_coef, inv_n = coefs
    c_value, c_ret = cols[VALUE], cols[RETURNS]
    for i in range(r0, r1):
        r = rows[i]
        vi = np.float64(A[mo[HOFF] + i])
        ret = np.float64(source[r, c_ret])
        if clip_vloss:
            vo = np.float64(source[r, c_value])
            d = vi - vo
            vc = vo + min(max(d, -clip_coef), clip_coef)
            lu = (vi - ret) * (vi - ret)
            lc = (vc - ret) * (vc - ret)
            if lu >= lc:
                vl = 0.5 * lu
                g = vi - ret
            else:
                vl = 0.5 * lc
                g = (vc - ret) if abs(d) < clip_coef else 0.0
        else:
            vl = 0.5 * (vi - ret) * (vi - ret)
            g = vi - ret
        D[mo[DOFF] + i] = vf_coef * inv_n * g
        stats[i, VALUE_LOSS] = vl


@njit(cache=True, inline="always")
def chunk_pass(source, rows, cols, params, log_std, hp, w):
    """Phase 1: per fixed chunk of samples, gather, both trunks forward, the loss
    heads, both trunks backward, and the chunk's slots (see the module doc).

    source (N, width) rollout rows; rows (n,) the minibatch's row indices, block
    after block (``w.blk`` each); cols the fields' columns (``ACTIONS`` ...
    ``ADVANTAGES``); hp the hyper-parameters; w the :class:`Work` of size n
    (``w.adv`` already prepared). Chunks never cross a block's edge: each block's
    rows are cut into chunks from its own first row.
    """
    _chunk_pass(*chunk_args(source, rows, cols, params, log_std, hp, w))


@njit(cache=True, inline="always")
def chunk_args(source, rows, cols, params, log_std, hp, w):
    """:func:`_chunk_pass`'s arguments (also run as plain Python by ``minibatch.compile_passes``, for their types)."""
    return (
        (source, rows, cols, w.adv),
        (params, log_std, w.meta, w.n_pi),
        (w.chunk, w.blk, w.slot_width),
        (hp[CLIP_COEF], hp[CLIP_VLOSS] != 0.0, hp[VF_COEF], 1.0 / w.n_total),
        w.A,
        w.D,
        w.slots,
        w.dlogstd,
        w.stats,
    )


def compile_chunk_pass(source, rows, cols, params, log_std, hp, w):
    """Compile (or load from Numba's cache) :func:`_chunk_pass` for the types :func:`chunk_args` gives these
    arguments, without running it (``minibatch.compile_passes``)."""
    args = chunk_args.py_func(source, rows, cols, params, log_std, hp, w)
    _chunk_pass.compile(tuple(numba.typeof(a) for a in args))


@njit(cache=True, parallel=True, error_model="numpy")
def _chunk_pass(batch, net, sizes, coefs, A, D, slots, dlogstd, stats):
    """:func:`chunk_pass`'s region: ``batch`` = (source, rows, cols, adv), ``net`` = (params, log_std,
    meta, n_pi), ``sizes`` = (chunk, blk, slot_width), ``coefs`` = (clip_coef, clip_vloss, vf_coef,
    1 / n_total); the arrays it writes come separately (see the module doc)."""
    source, rows, cols = batch[0], batch[1], batch[2]
    params, meta, n_pi = net[0], net[2], net[3]
    chunk, blk, slot_width = sizes
    n = rows.shape[0]
    obs_dim = meta[0, NIN]  # the trunks' input: the observation's first trunk_obs columns, then the state's
    trunk_obs, state_col = cols[TRUNK_OBS], cols[STATE_COL]
    n_layers = meta.shape[0]
    per_block = (blk + chunk - 1) // chunk
    n_chunks = (n // blk) * per_block
    for c in prange(n_chunks):
        b0 = (c // per_block) * blk
        r0 = b0 + (c % per_block) * chunk
        r1 = min(b0 + blk, r0 + chunk)
        O = block_view(A, 0, n, obs_dim)
        for i in range(r0, r1):
            r = rows[i]
            for j in range(trunk_obs):
                O[i, j] = source[r, j]
            for j in range(trunk_obs, obs_dim):
                O[i, j] = source[r, state_col + j - trunk_obs]
        for l in range(n_layers):
            _forward_rows(A, params, meta[l], r0, r1)
        _pi_head(A, D, dlogstd, stats, meta[n_pi - 1], batch, net[1], coefs, r0, r1)
        _v_head(A, D, stats, meta[n_layers - 1], batch, coefs, r0, r1)
        for l in range(n_layers - 1, -1, -1):
            first = l == 0 or l == n_pi
            _backward_rows(
                A, D, params, slots, slot_width, np.int64(c), meta[l], meta[max(l - 1, 0)], r0, r1, not first
            )


def spread_order(costs):
    """An order of items of these ``costs`` in which every stretch of consecutive items costs about its
    share of the total: a ``prange`` splits its range into equal contiguous parts, one per thread, whatever
    the thread count. Greedy: each next item is the most or the least costly one left, whichever brings
    the running cost nearer to its share."""
    total = float(sum(costs))
    by_cost = sorted(range(len(costs)), key=lambda t: (-costs[t], t))
    order, spent = [], 0.0
    lo, hi = 0, len(by_cost) - 1
    for p in range(len(costs)):
        target = total * (p + 1) / len(costs)
        big, small = by_cost[lo], by_cost[hi]
        if abs(spent + costs[big] - target) <= abs(spent + costs[small] - target):
            order.append(big)
            lo += 1
        else:
            order.append(small)
            hi -= 1
        spent += costs[order[-1]]
    return np.array(order, np.int64)


class Plan:
    """The layer table and the finish items of one policy and configuration
    (independent of the minibatch size), and per-size scratch buffers."""

    def __init__(self, policy, modes, tile_rows, tile_cols, sum_block=2048):
        layers = policy.pi_layers + policy.v_layers
        self.n_pi = len(policy.pi_layers)
        self.obs_dim = policy.trunk_in  # the trunks' input: the observation (and the GRU's state)
        self.dtype = policy.dtype
        self.log_std_off = policy.layout.index["log_std"][1]
        self.n_params = policy.params.shape[0]
        meta = np.zeros((len(layers), META_COLS), np.int64)
        slot_width = 0
        out_cols = 0  # per-sample offsets: outputs after the observation block
        items, costs = [], []
        for l, layer in enumerate(layers):
            first = l == 0 or l == self.n_pi
            last = l == self.n_pi - 1 or l == len(layers) - 1
            meta[l, NIN], meta[l, NOUT], meta[l, WOFF] = layer.n_in, layer.n_out, layer.offset
            meta[l, ACT] = 0 if last else policy.act_code
            meta[l, XOFF] = -1 if first else meta[l - 1, HOFF]  # resolved per size
            meta[l, HOFF] = out_cols
            meta[l, DOFF] = out_cols
            out_cols += layer.n_out
            if modes[layer.name] == "chunk":
                meta[l, SLOT] = slot_width
                slot_width += layer.size
                for e0 in range(0, layer.size, sum_block):
                    items.append((SLOT_SUM, l, e0, min(layer.size, e0 + sum_block), 0, 0))
                    costs.append(min(layer.size - e0, sum_block))
            else:
                meta[l, SLOT] = -1
                for i0 in range(0, layer.n_in, tile_rows):
                    for j0 in range(0, layer.n_out, tile_cols):
                        i1, j1 = min(layer.n_in, i0 + tile_rows), min(layer.n_out, j0 + tile_cols)
                        items.append((TILE, l, i0, i1, j0, j1))
                        costs.append(8 * (i1 - i0) * (j1 - j0))
                for j0 in range(0, layer.n_out, tile_cols):
                    items.append((TILE_BIAS, l, 0, 0, j0, min(layer.n_out, j0 + tile_cols)))
                    costs.append(min(layer.n_out - j0, tile_cols))
        items.append((HEADS, 0, 0, 0, 0, 0))
        costs.append(0)
        if policy.gru is not None:
            for e0 in range(policy.gru.offset, policy.gru.end, sum_block):
                items.append((MEMORY, 0, e0, min(policy.gru.end, e0 + sum_block), 0, 0))
                costs.append(min(policy.gru.end - e0, sum_block))
        # The items' order fixes the gradient norm's sum order (the bits): big and small interleaved.
        by_cost = sorted(range(len(items)), key=lambda t: (-costs[t], t))
        order = []
        lo, hi = 0, len(by_cost) - 1
        while lo <= hi:
            order.append(by_cost[lo])
            if lo != hi:
                order.append(by_cost[hi])
            lo, hi = lo + 1, hi - 1
        self.items = np.array([items[t] for t in order], np.int64).reshape(-1, 6)
        self.item_order = spread_order([costs[t] for t in order])
        self._meta = meta
        self.slot_width = slot_width
        self.out_cols = out_cols
        self._sizes = {}

    @property
    def layer_meta(self):
        """The layer table's size-independent columns (NIN, NOUT, WOFF, SLOT, ACT)."""
        return self._meta

    def work(self, n, chunk, act_dim, blk=None, n_total=None):
        """The :class:`Work` for minibatches of n samples (``n / blk`` blocks of
        ``blk`` rows; default one block) in chunks of ``chunk``, part of a
        minibatch of ``n_total`` rows (default n) (made once per shape, then reused)."""
        blk = n if blk is None else int(blk)
        n_total = n if n_total is None else int(n_total)
        key = (n, chunk, act_dim, blk, n_total)
        w = self._sizes.get(key)
        if w is None:
            if blk < 1 or n % blk:
                raise ValueError(f"Plan.work: {n} rows are not whole blocks of {blk}")
            meta = self._meta.copy()
            base = n * self.obs_dim
            for l in range(meta.shape[0]):
                meta[l, HOFF] = base + n * self._meta[l, HOFF]
                meta[l, DOFF] = n * self._meta[l, DOFF]
                meta[l, XOFF] = 0 if self._meta[l, XOFF] < 0 else meta[l - 1, HOFF]
            # the blocks above hold n rows each: an (n, n_out) block starts at
            # n times the per-sample offset; rows of a block are contiguous
            n_blocks = n // blk
            n_chunks = n_blocks * ((blk + chunk - 1) // chunk)
            dt = self.dtype
            w = Work(
                meta=meta,
                n_pi=self.n_pi,
                items=self.items,
                item_order=self.item_order,
                chunk=chunk,
                n_chunks=n_chunks,
                slot_width=self.slot_width,
                log_std_off=self.log_std_off,
                A=np.empty(base + n * self.out_cols, dt),
                D=np.empty(n * self.out_cols, dt),
                slots=np.empty(n_chunks * max(self.slot_width, 1), dt),
                adv=np.empty(n, dt),
                dlogstd=np.empty((n, act_dim), dt),
                stats=np.empty((n, len(STAT_NAMES)), np.float64),
                stat_sums=np.empty(len(STAT_NAMES), np.float64),
                sumsq=np.empty(self.items.shape[0], np.float64),
                blk=blk,
                n_blocks=n_blocks,
                n_total=n_total,
                block_grads=np.empty((n_blocks, self.n_params), dt),
                block_stats=np.empty((n_blocks, len(STAT_NAMES)), np.float64),
                moments=np.empty((n_blocks, 3), np.float64),
            )
            self._sizes[key] = w
        return w
