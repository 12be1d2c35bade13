"""One minibatch's PPO gradient in two parallel regions.

The loss is the one of ``loss_reference.py`` (plain NumPy, the
specification); here it is computed with its gradient written out by hand, in
fixed pieces so the bits do not depend on the thread count. A minibatch takes
two compiled calls, so that kernel dispatch and parallel-region start-up stay
small next to the arithmetic on a small network: ``block_moments`` (serial:
each block's advantage moments, which the caller combines along the block tree
into the whole minibatch's), then ``local_gradients``, which runs the three
phases below in one call. (``minibatches_update`` runs several minibatches,
their moments, clipping and Adam steps included, in one call.)

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
size (``Plan.work``).
"""

from __future__ import annotations

import math
from collections import namedtuple

import numba
import numpy as np
from numba import njit, prange

from navi_nb.learn.adam import adam_kernel
from navi_nb.learn.blas import NO_TRANS, TRANS, gemm
from navi_nb.learn.blocks import tree_add_run, tree_moments
from navi_nb.learn.loss_reference import ADV_EPS, LOG_2PI, gaussian_entropy
from navi_nb.learn.mlp import bias_act_rows, times_dact_rows

# columns of ``meta``
NIN, NOUT, WOFF, XOFF, HOFF, DOFF, SLOT, ACT = range(8)
META_COLS = 8
# kinds of ``finish_pass`` work items (columns: kind, layer, a0, a1, b0, b1)
SLOT_SUM, TILE, TILE_BIAS, HEADS = 0, 1, 2, 3

# ``cols``: where each rollout field starts in a row of ``source``
SOURCE_FIELDS = ("actions", "logp", "value", "returns", "advantages")
ACTIONS, LOGP, VALUE, RETURNS, ADVANTAGES = range(len(SOURCE_FIELDS))

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
        "items",  # (items, 6) int64: finish_pass's work items
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

_entropy = njit(cache=True)(gaussian_entropy)


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


@njit(cache=True, inline="always")
def _at(a, offset):
    """Address of element ``offset`` of contiguous ``a``."""
    return a.ctypes.data + np.uint64(offset * a.itemsize)


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
def _block(a, offset, rows, cols):
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
        r1 - r0,
        nout,
        nin,
        one,
        _at(A, m[XOFF] + r0 * nin),
        nin,
        _at(params, woff),
        nout,
        zero,
        _at(A, h0),
        nout,
    )
    H = _block(A, h0, r1 - r0, nout)
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
            nin,
            nout,
            r1 - r0,
            one,
            _at(A, m[XOFF] + r0 * nin),
            nin,
            _at(D, d0),
            nout,
            zero,
            _at(slots, base),
            nout,
        )
        gb = slots[base + nin * nout : base + nin * nout + nout]
        dZ = _block(D, d0, r1 - r0, nout)
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
            r1 - r0,
            nin,
            nout,
            one,
            _at(D, d0),
            nout,
            _at(params, m[WOFF]),
            nout,
            zero,
            _at(D, p0),
            nin,
        )
        times_dact_rows(_block(D, p0, r1 - r0, nin), _block(A, mp[HOFF] + r0 * nin, r1 - r0, nin), 0, r1 - r0, mp[ACT])


@njit(cache=True, error_model="numpy")
def _pi_head(A, D, mo, source, rows, cols, adv, log_std, clip_coef, inv_n, dlogstd, stats, r0, r1):
    """Clipped surrogate of rows r0:r1 (``policy_loss`` of ``loss_reference.ppo_loss``):
    d loss / d mu into D, the per-sample part of d loss / d log_std, and the
    statistics (float64 inside)."""
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
def _v_head(A, D, mo, source, rows, cols, clip_coef, clip_vloss, vf_coef, inv_n, stats, r0, r1):
    """Value loss of rows r0:r1 (``value_loss`` of ``loss_reference.ppo_loss``, clipped
    around the old values when ``clip_vloss``): d loss / d V into D, the loss into
    the VALUE_LOSS statistic."""
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
    """:func:`_chunk_pass`'s arguments (also run as plain Python by :func:`compile_passes`, for their types)."""
    return (
        source,
        rows,
        cols,
        w.adv,
        params,
        log_std,
        w.meta,
        w.n_pi,
        w.A,
        w.D,
        w.slots,
        w.slot_width,
        w.dlogstd,
        w.stats,
        w.chunk,
        w.blk,
        hp[CLIP_COEF],
        hp[CLIP_VLOSS] != 0.0,
        hp[VF_COEF],
        1.0 / w.n_total,
    )


# The parallel regions take their arrays as arguments, not from the Work tuple:
# Numba's parallel lowering does not always keep writes to an array taken from a
# tuple inside the region.
@njit(cache=True, parallel=True, error_model="numpy")
def _chunk_pass(
    source,
    rows,
    cols,
    adv,
    params,
    log_std,
    meta,
    n_pi,
    A,
    D,
    slots,
    slot_width,
    dlogstd,
    stats,
    chunk,
    blk,
    clip_coef,
    clip_vloss,
    vf_coef,
    inv_n,
):
    n = rows.shape[0]
    obs_dim = meta[0, NIN]
    n_layers = meta.shape[0]
    per_block = (blk + chunk - 1) // chunk
    n_chunks = (n // blk) * per_block
    for c in prange(n_chunks):
        b0 = (c // per_block) * blk
        r0 = b0 + (c % per_block) * chunk
        r1 = min(b0 + blk, r0 + chunk)
        O = _block(A, 0, n, obs_dim)
        for i in range(r0, r1):
            r = rows[i]
            for j in range(obs_dim):
                O[i, j] = source[r, j]
        for l in range(n_layers):
            _forward_rows(A, params, meta[l], r0, r1)
        _pi_head(A, D, meta[n_pi - 1], source, rows, cols, adv, log_std, clip_coef, inv_n, dlogstd, stats, r0, r1)
        _v_head(A, D, meta[n_layers - 1], source, rows, cols, clip_coef, clip_vloss, vf_coef, inv_n, stats, r0, r1)
        for l in range(n_layers - 1, -1, -1):
            first = l == 0 or l == n_pi
            _backward_rows(
                A, D, params, slots, slot_width, np.int64(c), meta[l], meta[max(l - 1, 0)], r0, r1, not first
            )


@njit(cache=True, inline="always")
def finish_pass(w, ops, root, grad, hp, final):
    """Phase 2, a ``prange`` over the fixed work items of ``w.items``. Item t,
    for each block k in turn, writes its own part of block k's gradient
    ``w.block_grads[k]`` (see the module doc) from that block's chunks and rows
    only (the HEADS item: the block's statistics' sums into ``w.block_stats[k]``);
    then adds its part of the blocks' rows along the block tree ``ops``
    (:func:`navi_nb.learn.blocks.tree_ops`). When ``final`` (this process holds
    every block: row ``root`` is the whole sum), it also does
    :func:`reduce_nodes`'s last steps: its part of ``grad``, ``w.stat_sums`` and
    its sum of squares. Otherwise the rows of ``local_plan``'s subtrees are
    this process's share of the tree, for :func:`reduce_nodes`."""
    _finish_pass(*finish_args(w, ops, root, grad, hp, final))


@njit(cache=True, inline="always")
def finish_args(w, ops, root, grad, hp, final):
    """:func:`_finish_pass`'s arguments (also run as plain Python by :func:`compile_passes`, for their types)."""
    return (
        w.items,
        w.meta,
        w.blk,
        w.n_blocks,
        w.A,
        w.D,
        w.slots,
        w.slot_width,
        w.n_chunks // w.n_blocks,
        w.dlogstd,
        w.stats,
        w.block_grads,
        w.log_std_off,
        w.block_stats,
        ops,
        root,
        grad,
        hp[ENT_COEF],
        final,
        w.stat_sums,
        w.sumsq,
    )


def compile_passes(names, source, rows, cols, params, log_std, hp, w, ops, root, grad):
    """Compile (or load from Numba's cache) the parallel passes in ``names`` (``"chunk"``, ``"finish"``) for
    the types of these arguments, which :func:`minibatches_update` and :func:`local_gradients` give them,
    without running them. A warm-up process compiles one while another compiles the other
    (``navi_nb/train/warmup.py``); the chain that calls them then loads them."""
    if "chunk" in names:
        args = chunk_args.py_func(source, rows, cols, params, log_std, hp, w)
        _chunk_pass.compile(tuple(numba.typeof(a) for a in args))
    if "finish" in names:
        args = finish_args.py_func(w, ops, root, grad, hp, True)
        _finish_pass.compile(tuple(numba.typeof(a) for a in args))


@njit(cache=True, error_model="numpy")
def _block_item(
    item, meta, blk, k, A, D, slots, slot_width, per_block, dlogstd, stats, block_grads, log_std_off, block_stats
):
    """Block k's part of one finish item (see the module doc)."""
    one = np.ones(1, block_grads.dtype)[0]
    zero = one - one
    grad = block_grads[k]
    k0 = k * blk  # the block's first row
    c0 = k * per_block  # the block's first chunk
    kind, l = item[0], item[1]
    m = meta[l]
    nin, nout, woff = m[NIN], m[NOUT], m[WOFF]
    if kind == SLOT_SUM:
        e0, e1 = item[2], item[3]
        s0 = m[SLOT] + e0
        g = grad[woff + e0 : woff + e1]
        S = _block(slots, c0 * slot_width + s0, 1, e1 - e0)
        for e in range(e1 - e0):
            g[e] = S[0, e]
        for c in range(c0 + 1, c0 + per_block):
            S = _block(slots, c * slot_width + s0, 1, e1 - e0)
            for e in range(e1 - e0):
                g[e] += S[0, e]
    elif kind == TILE:
        i0, i1, j0, j1 = item[2], item[3], item[4], item[5]
        gemm(
            TRANS,
            NO_TRANS,
            i1 - i0,
            j1 - j0,
            blk,
            one,
            _at(A, m[XOFF] + k0 * nin + i0),
            nin,
            _at(D, m[DOFF] + k0 * nout + j0),
            nout,
            zero,
            _at(block_grads, k * grad.shape[0] + woff + i0 * nout + j0),
            nout,
        )
    elif kind == TILE_BIAS:
        j0, j1 = item[4], item[5]
        gb = grad[woff + nin * nout + j0 : woff + nin * nout + j1]
        dZ = _block(D, m[DOFF] + k0 * nout, blk, nout)
        for j in range(j1 - j0):
            gb[j] = zero
        for i in range(blk):
            for j in range(j1 - j0):
                gb[j] += dZ[i, j0 + j]
    else:  # HEADS: log_std's gradient (the entropy term is added once, after the tree) and the
        # loss statistics, sums in row order
        for j in range(dlogstd.shape[1]):
            s = 0.0
            for i in range(k0, k0 + blk):
                s += np.float64(dlogstd[i, j])
            grad[log_std_off + j] = s
        for j in range(stats.shape[1]):
            s = 0.0
            for i in range(k0, k0 + blk):
                s += stats[i, j]
            block_stats[k, j] = s


@njit(cache=True, error_model="numpy")
def _tree_item(item, meta, buf, stats_buf, ops, log_std_off, k_act):
    """Item ``item``'s part of the rows of ``buf`` (and, for HEADS, of ``stats_buf``) added along ``ops``,
    run by contiguous run (a weight tile row by row)."""
    kind, l = item[0], item[1]
    m = meta[l]
    nin, nout, woff = m[NIN], m[NOUT], m[WOFF]
    if kind == SLOT_SUM:
        tree_add_run(buf, ops, woff + item[2], woff + item[3])
    elif kind == TILE:
        for i in range(item[2], item[3]):
            tree_add_run(buf, ops, woff + i * nout + item[4], woff + i * nout + item[5])
    elif kind == TILE_BIAS:
        tree_add_run(buf, ops, woff + nin * nout + item[4], woff + nin * nout + item[5])
    else:
        tree_add_run(buf, ops, log_std_off, log_std_off + k_act)
        tree_add_run(stats_buf, ops, 0, stats_buf.shape[1])


@njit(cache=True, error_model="numpy")
def _settle_item(item, meta, buf, stats_buf, root, grad, log_std_off, k_act, ent_coef, stat_sums, sumsq, t):
    """Item ``item``'s part of the tree's sum (row ``root`` of ``buf``) into ``grad``, with the entropy
    bonus's ``log_std`` term (HEADS, which also copies the statistics' sums); then its sum of squares."""
    kind, l = item[0], item[1]
    m = meta[l]
    nin, nout, woff = m[NIN], m[NOUT], m[WOFF]
    if kind == SLOT_SUM:
        for e in range(woff + item[2], woff + item[3]):
            grad[e] = buf[root, e]
    elif kind == TILE:
        for i in range(item[2], item[3]):
            for e in range(woff + i * nout + item[4], woff + i * nout + item[5]):
                grad[e] = buf[root, e]
    elif kind == TILE_BIAS:
        for e in range(woff + nin * nout + item[4], woff + nin * nout + item[5]):
            grad[e] = buf[root, e]
    else:
        for e in range(log_std_off, log_std_off + k_act):
            grad[e] = buf[root, e] - ent_coef
        for j in range(stat_sums.shape[0]):
            stat_sums[j] = stats_buf[root, j]
    sumsq[t] = _item_sumsq(item, meta, grad, log_std_off, k_act)


# The parallel regions take their arrays as arguments, not from the Work tuple (see _chunk_pass).
@njit(cache=True, parallel=True, error_model="numpy")
def _finish_pass(
    items,
    meta,
    blk,
    n_blocks,
    A,
    D,
    slots,
    slot_width,
    per_block,
    dlogstd,
    stats,
    block_grads,
    log_std_off,
    block_stats,
    ops,
    root,
    grad,
    ent_coef,
    final,
    stat_sums,
    sumsq,
):
    k_act = dlogstd.shape[1]
    for t in prange(items.shape[0]):
        for k in range(n_blocks):
            _block_item(
                items[t],
                meta,
                blk,
                k,
                A,
                D,
                slots,
                slot_width,
                per_block,
                dlogstd,
                stats,
                block_grads,
                log_std_off,
                block_stats,
            )
        _tree_item(items[t], meta, block_grads, block_stats, ops, log_std_off, k_act)
        if final:
            _settle_item(
                items[t],
                meta,
                block_grads,
                block_stats,
                root,
                grad,
                log_std_off,
                k_act,
                ent_coef,
                stat_sums,
                sumsq,
                np.int64(t),
            )


@njit(cache=True)
def reduce_nodes(buf, stats_buf, ops, root, grad, w, hp):
    """The top of the block tree over subtree sums gathered from every process
    (rows of ``buf`` / ``stats_buf`` in block order; ``ops`` from
    ``blocks.tree_ops`` with those rows as leaves, ``root`` its result row):
    a ``prange`` over the finish items, each adding its part, writing it into
    ``grad`` (with the entropy term), ``w.stat_sums`` and its sum of squares
    into ``w.sumsq``: the same additions, per element, as ``finish_pass`` with
    ``final`` over all blocks."""
    _reduce_nodes(
        w.items,
        w.meta,
        buf,
        stats_buf,
        ops,
        root,
        grad,
        w.log_std_off,
        w.dlogstd.shape[1],
        hp[ENT_COEF],
        w.stat_sums,
        w.sumsq,
    )


@njit(cache=True, parallel=True, error_model="numpy")
def _reduce_nodes(items, meta, buf, stats_buf, ops, root, grad, log_std_off, k_act, ent_coef, stat_sums, sumsq):
    for t in prange(items.shape[0]):
        _tree_item(items[t], meta, buf, stats_buf, ops, log_std_off, k_act)
        _settle_item(
            items[t], meta, buf, stats_buf, root, grad, log_std_off, k_act, ent_coef, stat_sums, sumsq, np.int64(t)
        )


class Plan:
    """The layer table and the finish items of one policy and configuration
    (independent of the minibatch size), and per-size scratch buffers."""

    def __init__(self, policy, modes, tile_rows, tile_cols, sum_block=2048):
        layers = policy.pi_layers + policy.v_layers
        self.n_pi = len(policy.pi_layers)
        self.obs_dim = policy.obs_dim
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
        # A prange splits its range into equal contiguous parts, one per thread:
        # interleave big and small items so every part gets a similar share.
        by_cost = sorted(range(len(items)), key=lambda t: (-costs[t], t))
        order = []
        lo, hi = 0, len(by_cost) - 1
        while lo <= hi:
            order.append(by_cost[lo])
            if lo != hi:
                order.append(by_cost[hi])
            lo, hi = lo + 1, hi - 1
        self.items = np.array([items[t] for t in order], np.int64).reshape(-1, 6)
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


@njit(cache=True, inline="always")
def _sumsq_run(x):
    """Sum of x[e]**2 over a contiguous 1-D run, float64. Element e goes to
    lane e % 8 (eight independent sums, so the loop vectorizes instead of
    waiting on one add chain); lanes and tail are added in a fixed order."""
    m = x.shape[0] // 8 * 8
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = 0.0
    for e in range(0, m, 8):
        v0, v1 = np.float64(x[e]), np.float64(x[e + 1])
        v2, v3 = np.float64(x[e + 2]), np.float64(x[e + 3])
        v4, v5 = np.float64(x[e + 4]), np.float64(x[e + 5])
        v6, v7 = np.float64(x[e + 6]), np.float64(x[e + 7])
        a0 += v0 * v0
        a1 += v1 * v1
        a2 += v2 * v2
        a3 += v3 * v3
        a4 += v4 * v4
        a5 += v5 * v5
        a6 += v6 * v6
        a7 += v7 * v7
    t = 0.0
    for e in range(m, x.shape[0]):
        v = np.float64(x[e])
        t += v * v
    return (((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))) + t


@njit(cache=True, inline="always")
def _item_sumsq(item, meta, grad, log_std_off, k_act):
    """Sum of squares of the part of ``grad`` that finish item ``item`` writes
    (row by row for a weight tile), in a fixed order."""
    kind, l = item[0], item[1]
    m = meta[l]
    nin, nout, woff = m[NIN], m[NOUT], m[WOFF]
    if kind == SLOT_SUM:
        return _sumsq_run(grad[woff + item[2] : woff + item[3]])
    if kind == TILE:
        s = 0.0
        for i in range(item[2], item[3]):
            s += _sumsq_run(grad[woff + i * nout + item[4] : woff + i * nout + item[5]])
        return s
    if kind == TILE_BIAS:
        b0 = woff + nin * nout
        return _sumsq_run(grad[b0 + item[4] : b0 + item[5]])
    return _sumsq_run(grad[log_std_off : log_std_off + k_act])


@njit(cache=True)
def norm_from_items(sumsq):
    """The global L2 norm: the items' sums of squares added in item order (the
    items are fixed by the Plan, so the bits do not depend on the threads)."""
    s = 0.0
    for t in range(sumsq.shape[0]):
        s += sumsq[t]
    return math.sqrt(s)


@njit(cache=True)
def local_gradients(source, rows, cols, params, log_std, hp, w, moments, ops, root, grad, final):
    """This process's part of one minibatch (rows ``rows``, block after block):
    the advantages normalised by the whole minibatch's ``moments`` (count, mean,
    M2), ``chunk_pass``, ``finish_pass`` (``ops``, ``root``, ``grad``,
    ``final``: see there)."""
    normalize_advantages(source, rows, cols[ADVANTAGES], moments, w.adv, hp[NORM_ADV] != 0.0)
    chunk_pass(source, rows, cols, params, log_std, hp, w)
    finish_pass(w, ops, root, grad, hp, final)


@njit(cache=True)
def clip_and_step(w, log_std, hp, params, grad, adam_m, adam_v, step, out_row):
    """After the tree's sum is in ``grad``: the statistics' means and the entropy into
    ``out_row`` (columns ``STEP_STAT_NAMES``), the global norm, the clip and Adam
    step ``step``. Returns True when the approximate KL exceeds ``hp[TARGET_KL]``
    (when >= 0)."""
    for j in range(w.stat_sums.shape[0]):
        out_row[j] = w.stat_sums[j] / w.n_total
    out_row[ENTROPY] = _entropy(log_std)
    norm = norm_from_items(w.sumsq)
    out_row[GRAD_NORM] = norm
    scale = min(1.0, hp[MAX_GRAD_NORM] / (norm + 1e-6))
    adam_kernel(params, grad, adam_m, adam_v, hp[LR], hp[BETA1], hp[BETA2], hp[ADAM_EPS], scale, step)
    return hp[TARGET_KL] >= 0.0 and out_row[APPROX_KL] > hp[TARGET_KL]


@njit(cache=True)
def minibatches_update(source, order, count, cols, params, log_std, hp, w, ops, root, grad, adam_m, adam_v, step0, out):
    """``count`` minibatches in one call, all blocks in this process: with mb =
    ``w.adv.shape[0]``, minibatch b is rows ``order[b * mb:(b + 1) * mb]``
    (``w.n_blocks`` runs of ``w.blk`` rows, one per block); each is the blocks'
    advantage moments combined along the block tree (``ops``, ``root``),
    :func:`local_gradients` (the tree included), :func:`clip_and_step` with
    Adam step ``step0 + b + 1``, with no Python between the parallel regions
    (each gap would let idle threads fall asleep). The same kernels and sums whatever
    ``count``, so the same bits as one call per minibatch. ``out[b]`` (columns
    ``STEP_STAT_NAMES``): the statistics' means, the entropy before the step, the
    gradient norm before clipping. Stops after a minibatch whose approximate KL
    exceeds ``hp[TARGET_KL]`` (when >= 0). Returns the minibatches done."""
    mb = w.adv.shape[0]
    for b in range(count):
        rows = order[b * mb : (b + 1) * mb]
        block_moments(source, rows, cols[ADVANTAGES], w.blk, w.moments)
        tree_moments(w.moments, ops)
        # np.bool_: a bool, not the literal True, so the passes are typed as every other caller and
        # compile_passes types them (a literal would compile a variant of their own)
        local_gradients(source, rows, cols, params, log_std, hp, w, w.moments[root], ops, root, grad, np.bool_(True))
        if clip_and_step(w, log_std, hp, params, grad, adam_m, adam_v, step0 + b + 1.0, out[b]):
            return b + 1
    return count
