"""PPO minibatches with the actor blocks spread over processes: the minibatch loop's MPI exchange.

``PPO.minibatches`` hands an exchange (``ranks.RankExchange``) a ``learn.ppo.Job``: this process's
rows of each minibatch. Per minibatch, the loop runs ``learn.minibatch``'s compiled steps, the ones its
local loop runs, with the collectives between them: ``minibatch_moments``, then every process's block
moments combined along the block tree (the same two ways as the gradients), ``minibatch_gradients``
(this process's blocks' gradients, a policy memory's included, and its subtrees of the tree:
``blocks.local_plan``), the subtree sums added along the top of the tree: point to point with the root
broadcast (``mode`` ``"tree"``, ``RankExchange.tree_reduce``), or gathered in block order with every
process adding the top itself (``"allgather"``); then ``minibatch.reduce_nodes`` settles the sum into the
gradient, and every process clips and steps (``minibatch_step``): the same additions as one process
holding every block, so the same bits (docs/DETERMINISM.md).
"""

from __future__ import annotations

import numba
import numpy as np

from navi_nb.learn import blocks, fused, minibatch

_NO_OPS = np.zeros((0, 3), np.int64)  # the root broadcast holds the whole sum: nothing left to add


def exchange_plan(n_all, ranges, rank):
    """``(local_ops, node_rows, m_ops, m_root, top_ops, top_root)`` for ``n_all`` blocks spread as
    ``ranges`` (each process's ``(first, stop)``): this rank's subtrees, the whole tree over the
    gathered block moments, and the top of the tree over every rank's subtree sums in block order."""
    a, b = ranges[rank]
    local_ops, node_rows, _ = blocks.local_plan(n_all, a, b)
    m_ops, m_root = blocks.tree_ops(0, n_all, {(k, k + 1): k for k in range(n_all)})
    nodes = [node for lo, hi in ranges for node in blocks.cover(n_all, lo, hi)]
    top_ops, top_root = blocks.tree_ops(0, n_all, {node: i for i, node in enumerate(nodes)})
    return local_ops, node_rows, m_ops, m_root, top_ops, top_root


def exchanged_minibatches(ex, job, plan):
    """Run ``job``'s minibatches over the exchange ``ex`` (``allgather``, ``tree_reduce``, ``schedule``,
    ``mode``) with ``plan`` from :func:`exchange_plan`. Returns the minibatches done."""
    w, grad, hp = job.w, job.grad, job.hp
    local_ops, node_rows, m_ops, m_root, top_ops, top_root = plan
    n_params, n_stats = grad.shape[0], len(fused.STAT_NAMES)
    tree = getattr(ex, "mode", "allgather") == "tree"
    n_cover = node_rows.shape[0]
    if tree:  # the top of the tree point to point (blocks.rank_tree_schedule), the root broadcast
        n_rows = ex.schedule()[0]
        m_buf = np.empty((n_rows, 3), np.float64)
        g_buf = np.empty((n_rows, n_params), grad.dtype)
        s_buf = np.empty((n_rows, n_stats), np.float64)
        piece = max(1, -(-n_params // numba.get_num_threads()))

        def add_moments(ops):
            blocks.tree_moments(m_buf, ops)

        def add_grads(ops):
            blocks.tree_sum_rows(g_buf, ops, piece)
            blocks.tree_sum_rows(s_buf, ops, n_stats)
    else:
        send = np.empty((n_cover, n_params + n_stats * 8 // grad.itemsize), grad.dtype)
    for i in range(job.count):
        minibatch.minibatch_moments(job, i)
        if tree:
            blocks.tree_moments(w.moments, local_ops)  # this rank's cover nodes, as the tree pairs them
            m_buf[:n_cover] = w.moments[node_rows]
            moments, m_at = ex.tree_reduce([m_buf], add_moments)[0], 0
        else:
            moments, m_at = ex.allgather(w.moments), m_root
            blocks.tree_moments(moments, m_ops)
        minibatch.minibatch_gradients(job, job.memory, i, moments[m_at], local_ops, 0, np.bool_(False))
        if tree:
            g_buf[:n_cover] = w.block_grads[node_rows]
            s_buf[:n_cover] = w.block_stats[node_rows]
            nodes, stats = ex.tree_reduce([g_buf, s_buf], add_grads)
            minibatch.reduce_nodes(nodes, stats, _NO_OPS, 0, grad, w, hp)
        else:
            # one message per subtree: its gradient, then its float64 statistics' bytes
            send[:, :n_params] = w.block_grads[node_rows]
            send[:, n_params:] = np.ascontiguousarray(w.block_stats[node_rows]).view(grad.dtype)
            got = ex.allgather(send)
            nodes = np.ascontiguousarray(got[:, :n_params])
            stats = np.ascontiguousarray(got[:, n_params:]).view(np.float64)
            minibatch.reduce_nodes(nodes, stats, top_ops, top_root, grad, w, hp)
        if minibatch.minibatch_step(job, i):
            return i + 1
    return job.count
