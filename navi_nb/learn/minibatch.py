"""The minibatch update after ``fused.chunk_pass``: the finish pass, the block tree, the norm, the clip
and Adam.

``gradient_passes`` is the one gradient path of a minibatch (``fused.normalize_advantages``, a policy
memory's states forward (``memory_pass.py``), ``fused.chunk_pass``, the memory's gradient through time,
then :func:`finish_pass`: a ``prange`` over the plan's fixed work items, each writing its own part of
every block's gradient, adding it along the block tree and, when every block is here, settling it into
the flat gradient with its sum of squares). ``reduce_nodes`` settles a tree whose top was added over
processes; ``clip_and_step`` takes the global norm (the items' sums of squares in item order), the clip
and one Adam step.

The minibatch loop is one sequence of compiled steps per minibatch: :func:`minibatch_moments` (the
blocks' advantage moments), the moments' exchange, :func:`minibatch_gradients`, the gradients' exchange,
:func:`minibatch_step` (the clip and Adam). :func:`minibatches_update` runs it with the local exchange
(every block here: both exchanges are the block tree's sums inside the kernels), every minibatch of an
epoch in one compiled call, with or without a memory; ``navi_nb.parallel.exchange_update`` runs the same
steps with the MPI ranks' collectives between them. The layer table, the work items and the ``Work``
buffers are ``fused.py``'s.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import njit, prange

from navi_nb.learn.adam import adam_kernel
from navi_nb.learn.blas import NO_TRANS, TRANS, address, gemm
from navi_nb.learn.blocks import tree_add_run, tree_moments
from navi_nb.learn.fused import (
    ADAM_EPS,
    ADVANTAGES,
    APPROX_KL,
    BETA1,
    BETA2,
    DOFF,
    ENT_COEF,
    ENTROPY,
    GRAD_NORM,
    LR,
    MAX_GRAD_NORM,
    MEMORY,
    NIN,
    NORM_ADV,
    NOUT,
    SLOT,
    SLOT_SUM,
    TARGET_KL,
    TILE,
    TILE_BIAS,
    WOFF,
    XOFF,
    block_moments,
    block_view,
    chunk_pass,
    compile_chunk_pass,
    normalize_advantages,
)
from navi_nb.learn.loss_reference import gaussian_entropy
from navi_nb.learn.memory_pass import memory_backward, memory_forward

_entropy = njit(cache=True)(gaussian_entropy)


@njit(cache=True, inline="always")
def finish_pass(w, ops, root, grad, hp, final):
    """Phase 2, a ``prange`` over the fixed work items of ``w.items`` (in the order ``w.item_order``, which
    spreads their cost over the threads' equal parts). Item t,
    for each block k in turn, writes its own part of block k's gradient
    ``w.block_grads[k]`` (see ``fused.py``'s module doc) from that block's chunks and rows
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
        (w.items, w.meta, w.item_order),
        (w.blk, w.n_blocks, w.slot_width, w.n_chunks // w.n_blocks, w.log_std_off, hp[ENT_COEF], final),
        (w.A, w.D, w.slots, w.dlogstd, w.stats),
        (ops, root),
        w.block_grads,
        w.block_stats,
        grad,
        w.stat_sums,
        w.sumsq,
    )


def compile_passes(names, source, rows, cols, params, log_std, hp, w, ops, root, grad):
    """Compile (or load from Numba's cache) the parallel passes in ``names`` (``"chunk"``, ``"finish"``) for
    the types of these arguments, which :func:`minibatches_update` and :func:`gradient_passes` give them,
    without running them. A warm-up process compiles one while another compiles the other
    (``navi_nb/train/warmup.py``); the chain that calls them then loads them."""
    if "chunk" in names:
        compile_chunk_pass(source, rows, cols, params, log_std, hp, w)
    if "finish" in names:
        args = finish_args.py_func(w, ops, root, grad, hp, True)
        _finish_pass.compile(tuple(numba.typeof(a) for a in args))


@njit(cache=True, error_model="numpy")
def _block_item(item, meta, sizes, chunk, k, block_grads, block_stats):
    """Block k's part of one finish item (see ``fused.py``'s module doc); ``sizes`` and ``chunk`` as in
    :func:`_finish_pass`."""
    blk, slot_width, per_block, log_std_off = sizes[0], sizes[2], sizes[3], sizes[4]
    A, D, slots, dlogstd, stats = chunk
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
        S = block_view(slots, c0 * slot_width + s0, 1, e1 - e0)
        for e in range(e1 - e0):
            g[e] = S[0, e]
        for c in range(c0 + 1, c0 + per_block):
            S = block_view(slots, c * slot_width + s0, 1, e1 - e0)
            for e in range(e1 - e0):
                g[e] += S[0, e]
    elif kind == TILE:
        i0, i1, j0, j1 = item[2], item[3], item[4], item[5]
        gemm(
            TRANS,
            NO_TRANS,
            (i1 - i0, j1 - j0, blk),
            one,
            (address(A, m[XOFF] + k0 * nin + i0), nin),
            (address(D, m[DOFF] + k0 * nout + j0), nout),
            zero,
            (address(block_grads, k * grad.shape[0] + woff + i0 * nout + j0), nout),
        )
    elif kind == TILE_BIAS:
        j0, j1 = item[4], item[5]
        gb = grad[woff + nin * nout + j0 : woff + nin * nout + j1]
        dZ = block_view(D, m[DOFF] + k0 * nout, blk, nout)
        for j in range(j1 - j0):
            gb[j] = zero
        for i in range(blk):
            for j in range(j1 - j0):
                gb[j] += dZ[i, j0 + j]
    elif kind == MEMORY:  # the block's GRU gradient is already in its row (memory_pass)
        pass
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
    elif kind == MEMORY:
        tree_add_run(buf, ops, item[2], item[3])
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
    elif kind == MEMORY:
        for e in range(item[2], item[3]):
            grad[e] = buf[root, e]
    else:
        for e in range(log_std_off, log_std_off + k_act):
            grad[e] = buf[root, e] - ent_coef
        for j in range(stat_sums.shape[0]):
            stat_sums[j] = stats_buf[root, j]
    sumsq[t] = _item_sumsq(item, meta, grad, log_std_off, k_act)


@njit(cache=True, parallel=True, error_model="numpy")
def _finish_pass(table, sizes, chunk, tree, block_grads, block_stats, grad, stat_sums, sumsq):
    """:func:`finish_pass`'s region: ``table`` = (items, meta, item_order), ``sizes`` = (blk, n_blocks, slot_width,
    per_block, log_std_off, ent_coef, final), ``chunk`` = the chunk pass's arrays (A, D, slots, dlogstd,
    stats), ``tree`` = (ops, root); the arrays it writes come separately (see ``fused.py``'s module doc)."""
    items, meta, item_order = table
    n_blocks, log_std_off, ent_coef, final = sizes[1], sizes[4], sizes[5], sizes[6]
    ops, root = tree
    k_act = chunk[3].shape[1]
    for s in prange(items.shape[0]):
        t = item_order[s]
        for k in range(n_blocks):
            _block_item(items[t], meta, sizes, chunk, k, block_grads, block_stats)
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
                t,
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
    table = (w.items, w.meta, w.item_order)
    sizes = (w.log_std_off, w.dlogstd.shape[1], hp[ENT_COEF])
    _reduce_nodes(table, buf, stats_buf, (ops, root), grad, sizes, w.stat_sums, w.sumsq)


@njit(cache=True, parallel=True, error_model="numpy")
def _reduce_nodes(table, buf, stats_buf, tree, grad, sizes, stat_sums, sumsq):
    """:func:`reduce_nodes`' region: ``table`` = (items, meta, item_order), ``tree`` = (ops, root), ``sizes`` =
    (log_std_off, k_act, ent_coef); the arrays it writes come separately (as :func:`_finish_pass`'s)."""
    items, meta, item_order = table
    ops, root = tree
    log_std_off, k_act, ent_coef = sizes
    for s in prange(items.shape[0]):
        t = item_order[s]
        _tree_item(items[t], meta, buf, stats_buf, ops, log_std_off, k_act)
        _settle_item(items[t], meta, buf, stats_buf, root, grad, log_std_off, k_act, ent_coef, stat_sums, sumsq, t)


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
    if kind == MEMORY:
        return _sumsq_run(grad[item[2] : item[3]])
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
    """This process's part of one minibatch (rows ``rows``, block after block) of a policy without memory:
    :func:`gradient_passes` with none."""
    gradient_passes(None, source, rows, cols, params, log_std, hp, w, moments, (ops, root), grad, final)


@njit(cache=True)
def gradient_passes(memory, source, rows, cols, params, log_std, hp, w, moments, tree, grad, final):
    """The one gradient path of a minibatch: the advantages normalised by the whole minibatch's ``moments``
    (count, mean, M2), a policy memory's states forward (``memory``, a ``memory_pass.MemoryBufs``, or None),
    ``chunk_pass``, the memory's gradient through time into the blocks' rows, ``finish_pass`` (``tree`` =
    (ops, root), ``grad``, ``final``: see there). With ``memory`` None, Numba compiles no memory step."""
    if memory is not None:
        memory_forward(source, rows, w, memory)
    normalize_advantages(source, rows, cols[ADVANTAGES], moments, w.adv, hp[NORM_ADV] != 0.0)
    chunk_pass(source, rows, cols, params, log_std, hp, w)
    if memory is not None:
        memory_backward(params, w, memory)
    finish_pass(w, tree[0], tree[1], grad, hp, final)


# ---- the minibatch loop: its steps, one definition, run by the local loop below and the exchange's -------------
@njit(cache=True)
def minibatch_rows(job, b):
    """Minibatch ``b``'s rows of ``job`` (a ``ppo.Job``): ``order[b * mb:(b + 1) * mb]``."""
    mb = job.w.adv.shape[0]
    return job.order[b * mb : (b + 1) * mb]


@njit(cache=True)
def minibatch_moments(job, b):
    """Step 1, before the moments' exchange: each block's advantage moments of minibatch ``b`` into
    ``job.w.moments`` (block k in row k)."""
    block_moments(job.source, minibatch_rows(job, b), job.cols[ADVANTAGES], job.w.blk, job.w.moments)


@njit(cache=True)
def minibatch_gradients(job, memory, b, moments, ops, root, final):
    """Step 2, between the exchanges: :func:`gradient_passes` over minibatch ``b`` with the whole
    minibatch's ``moments``, the blocks' gradients added along ``ops`` (``final``: every block is here and
    row ``root`` is the whole sum, settled into ``job.grad``). ``memory`` is ``job.memory`` (an argument of
    its own, so that Numba drops the memory's steps where it is None)."""
    rows = minibatch_rows(job, b)
    tree = (ops, root)
    gradient_passes(memory, job.source, rows, job.cols, job.params, job.log_std, job.hp, job.w, moments, tree,
                    job.grad, final)  # fmt: skip


@njit(cache=True)
def minibatch_step(job, b):
    """Step 3, after the gradients' exchange (the whole sum in ``job.grad``): :func:`clip_and_step` with
    Adam step ``step0 + b + 1``, the statistics into ``job.out[b]``. True when the approximate KL stops
    the update."""
    return clip_and_step(
        job.w, job.log_std, job.hp, job.params, job.grad, job.adam_m, job.adam_v, job.step0 + b + 1.0, job.out[b]
    )


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
def minibatches_update(job, ops, root):
    """``job``'s (a ``ppo.Job``) ``count`` minibatches in one compiled call, all blocks in this process (the
    local exchange: the moments and the gradients added along the block tree ``ops``, ``root``, inside the
    kernels), for a policy with or without memory: with mb = ``w.adv.shape[0]``, minibatch b is rows
    ``order[b * mb:(b + 1) * mb]`` (``w.n_blocks`` runs of ``w.blk`` rows, one per block), run as
    :func:`minibatch_moments`, the tree's moments, :func:`minibatch_gradients` and :func:`minibatch_step`,
    with no Python between the parallel regions (each gap would let idle threads fall asleep). The same
    kernels and sums whatever ``count``, so the same bits as one call per minibatch. ``out[b]`` (columns
    ``STEP_STAT_NAMES``): the statistics' means, the entropy before the step, the gradient norm before
    clipping. Stops after a minibatch whose approximate KL exceeds ``hp[TARGET_KL]`` (when >= 0). Returns
    the minibatches done."""
    return _local_minibatches(job, job.memory, ops, root)


@njit(cache=True)
def _local_minibatches(job, memory, ops, root):
    for b in range(job.count):
        minibatch_moments(job, b)
        tree_moments(job.w.moments, ops)
        # np.bool_: a bool, not the literal True, so the passes are typed as every other caller and
        # compile_passes types them (a literal would compile a variant of their own)
        minibatch_gradients(job, memory, b, job.w.moments[root], ops, root, np.bool_(True))
        if minibatch_step(job, b):
            return b + 1
    return job.count
