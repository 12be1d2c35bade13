"""Actor blocks: the unit of work whose sums do not depend on where they run.

The actors are cut into fixed blocks of ``block`` actors (the last blocks all
the same size). A block owns its actors' rollout rows (``rollout_steps *
block`` of them) and shuffles them with its own permutation each epoch;
minibatch ``b`` takes the same slice ``b`` of every block's permutation. The
gradient of a minibatch is the sum of the blocks' gradients added along one
fixed binary tree over block indices (:func:`tree_ops`), and the
whole-minibatch advantage mean and variance are the blocks' ``(count, mean,
M2)`` combined along the same tree. A process that holds blocks ``[a, b)``
computes the subtrees that lie inside ``[a, b)`` (:func:`cover`); the
remaining top of the tree is the same arithmetic wherever those subtrees were
computed, so neither the thread count nor the split of blocks over processes
changes a bit.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from navi_nb.errors import NaviError

BLOCK_STREAM = 0xB10C
"""A block's minibatch permutation of one epoch: ``default_rng([epoch_key, BLOCK_STREAM, block])``."""


class BlockError(NaviError):
    """Actors that do not split into whole blocks."""


def block_size(actor_block, n_actors):
    """Actors per block: ``actor_block``, or all actors when there are fewer (or ``actor_block`` is 0)."""
    n_actors = int(n_actors)
    b = n_actors if actor_block <= 0 else min(int(actor_block), n_actors)
    if n_actors % b:
        raise BlockError(f"actors ({n_actors}) must be a multiple of actor_block ({actor_block})")
    return b


def _split(lo, hi):
    """The tree's split of node [lo, hi): the left child holds the largest power of two below its size."""
    size = hi - lo
    left = 1 << ((size - 1).bit_length() - 1)
    return lo + left


def cover(n_blocks, a, b):
    """The tree's largest subtrees inside blocks [a, b), in block order: a list of (lo, hi)."""
    out = []

    def walk(lo, hi):
        if hi <= a or lo >= b:
            return
        if a <= lo and hi <= b:
            out.append((lo, hi))
            return
        mid = _split(lo, hi)
        walk(lo, mid)
        walk(mid, hi)

    walk(0, int(n_blocks))
    return out


def tree_ops(lo, hi, leaves):
    """The additions that sum node [lo, hi) of the tree, as an int64 array of rows ``(dst, left, right)``
    meaning ``row[dst] = row[left] + row[right]`` (in place: ``dst`` is ``left``'s row).

    ``leaves`` maps a node ``(lo, hi)`` already summed to the buffer row that holds it (single blocks
    ``(k, k + 1)``, or a process's subtrees). Returns ``(ops, row)``: the additions in order and the row
    that holds the node's sum after them."""
    ops = []

    def walk(l, h):
        if (l, h) in leaves:
            return leaves[(l, h)]
        if h - l == 1:
            raise BlockError(f"block {l} is in no leaf of the tree")
        mid = _split(l, h)
        left, right = walk(l, mid), walk(mid, h)
        ops.append((left, left, right))
        return left

    row = walk(int(lo), int(hi))
    return np.array(ops, np.int64).reshape(-1, 3), row


def local_plan(n_blocks, a, b):
    """For a process holding blocks [a, b) (rows 0 .. b-a-1 of its buffers, block a in row 0): the
    additions that turn its block rows into its :func:`cover` subtrees, and each subtree's row."""
    nodes = cover(n_blocks, a, b)
    leaves = {(k, k + 1): k - a for k in range(a, b)}
    all_ops, rows = [], []
    for lo, hi in nodes:
        ops, row = tree_ops(lo, hi, leaves)
        all_ops.append(ops)
        rows.append(row)
    return np.concatenate(all_ops) if all_ops else np.zeros((0, 3), np.int64), np.array(rows, np.int64), nodes


ADD, SEND, RECV = 0, 1, 2
"""The steps of :func:`rank_tree_schedule`."""


def rank_tree_schedule(n_blocks, ranges, rank):
    """One process's part of the block tree when processes hold contiguous ``ranges`` of blocks and
    combine their sums point to point (``navi_nb.parallel.ranks.RankExchange.tree_reduce``).

    A node of the tree belongs to the process that holds its first block. Its left child starts at the
    same block, so belongs to the same process; its right child may belong to a later one, which then
    sends the right child's sum to the node's owner. The leaves are every process's :func:`cover`
    subtrees, which are computed where the blocks are (``local_plan``); a process whose blocks do not
    fill a subtree of the tree holds several cover nodes and sends each where the tree needs it. The
    steps follow the tree's post-order on every process, so each message is sent and received at the
    same place of one global order (no deadlock with blocking sends and receives), and the additions
    are the tree's own (node = left + right), not the order in which messages arrive.

    Returns ``(n_rows, steps, root)``. Rows ``0 .. len(cover) - 1`` hold this process's cover nodes in
    block order; further rows hold received sums. ``steps`` is a list of ``(ADD, ops)`` (``ops`` as
    :func:`tree_ops`: rows ``(dst, left, right)``, ``dst`` = ``left``), ``(SEND, peer, row)`` and
    ``(RECV, peer, row)``. ``root`` is the row that holds the whole tree's sum on the process holding
    block 0, -1 on the others."""
    n_blocks, rank = int(n_blocks), int(rank)
    ranges = [(int(a), int(b)) for a, b in ranges]
    starts = [a for a, _ in ranges]
    if starts[0] != 0 or ranges[-1][1] != n_blocks or any(b != c for (_, b), c in zip(ranges, starts[1:])):
        raise BlockError(f"block ranges {ranges} do not tile blocks 0..{n_blocks - 1} in order")
    leaves = {node for a, b in ranges for node in cover(n_blocks, a, b)}

    def owner(lo):
        r = 0
        while r + 1 < len(starts) and starts[r + 1] <= lo:
            r += 1
        return r

    rows = {node: i for i, node in enumerate(cover(n_blocks, *ranges[rank]))}
    n_rows = len(rows)
    steps, adds = [], []

    def flush():
        if adds:
            steps.append((ADD, np.array(adds, np.int64).reshape(-1, 3)))
            adds.clear()

    def walk(lo, hi, parent_owner):
        nonlocal n_rows
        me = owner(lo)
        if (lo, hi) not in leaves:
            mid = _split(lo, hi)
            walk(lo, mid, me)
            walk(mid, hi, me)
            if me == rank:
                left, right = rows[(lo, mid)], rows[(mid, hi)]
                adds.append((left, left, right))
                rows[(lo, hi)] = left
        if parent_owner is not None and parent_owner != me:
            if me == rank:
                flush()
                steps.append((SEND, parent_owner, rows[(lo, hi)]))
            elif parent_owner == rank:
                flush()
                rows[(lo, hi)] = n_rows
                steps.append((RECV, me, n_rows))
                n_rows += 1

    walk(0, n_blocks, None)
    flush()
    return n_rows, steps, rows[(0, n_blocks)] if rank == 0 else -1


def epoch_permutations(epoch_key, n_rows, first, count):
    """Blocks ``first .. first+count-1``'s permutations of their ``n_rows`` rows for one epoch."""
    return [
        np.random.default_rng([int(epoch_key), BLOCK_STREAM, int(k)]).permutation(n_rows)
        for k in range(first, first + count)
    ]


def epoch_order(perms, n_steps, block, n_local_actors, count, blk):
    """The rows of ``count`` minibatches, concatenated: minibatch ``b`` is ``order[b * mb:(b + 1) * mb]``
    (``mb = len(perms) * blk``), block by block, each block's part the slice ``b`` of its permutation.
    A block's row ``r`` (of its ``n_steps * block``) is step ``r // block``, actor ``r % block`` of the
    block; in the slab's flat rows that is ``step * n_local_actors + block_offset + actor``."""
    nbl = len(perms)
    order = np.empty((count, nbl, blk), np.int64)
    for kl, perm in enumerate(perms):
        p = perm[: count * blk]
        order[:, kl, :] = ((p // block) * n_local_actors + kl * block + p % block).reshape(count, blk)
    return order.reshape(-1)


def sequence_order(perms, n_steps, block, n_local_actors, count):
    """As :func:`epoch_order` for a policy with memory: minibatches of whole actor sequences. ``perms`` are
    the blocks' permutations of their ``block`` actors; minibatch ``b`` takes actors ``perm[b * q:(b + 1) *
    q]`` of every block (``q = block // count``), every step of each, the block's ``n_steps * q`` rows step
    by step (step 0's rows first, so they name the block's actors: ``memory_pass`` reads them so)."""
    q = block // count
    nbl = len(perms)
    order = np.empty((count, nbl, n_steps, q), np.int64)
    steps = np.arange(n_steps, dtype=np.int64)[:, None] * n_local_actors
    for kl, perm in enumerate(perms):
        for b in range(count):
            order[b, kl] = steps + (kl * block + perm[b * q : (b + 1) * q])[None, :]
    return order.reshape(-1)


@njit(cache=True, inline="always")
def tree_add_run(buf, ops, e0, e1):
    """``buf[d, e] = buf[l, e] + buf[r, e]`` for each row ``(d, l, r)`` of ``ops`` in order, for
    columns ``e0 .. e1 - 1``: every element sees the same additions in the same order."""
    for o in range(ops.shape[0]):
        d, l, r = ops[o, 0], ops[o, 1], ops[o, 2]
        for e in range(e0, e1):
            buf[d, e] = buf[l, e] + buf[r, e]


@njit(cache=True, parallel=True)
def tree_sum_rows(buf, ops, piece):
    """:func:`tree_add_run` over all columns, a ``prange`` over fixed pieces of ``piece`` columns."""
    n = buf.shape[1]
    for p in prange((n + piece - 1) // piece):
        tree_add_run(buf, ops, p * piece, min(n, (p + 1) * piece))


@njit(cache=True)
def tree_moments(buf, ops):
    """Rows ``(count, mean, M2)`` combined along ``ops`` (Chan et al.'s pairwise update), in place."""
    for o in range(ops.shape[0]):
        d, l, r = ops[o, 0], ops[o, 1], ops[o, 2]
        na, ma, qa = buf[l, 0], buf[l, 1], buf[l, 2]
        nb, mb, qb = buf[r, 0], buf[r, 1], buf[r, 2]
        n = na + nb
        delta = mb - ma
        buf[d, 0] = n
        buf[d, 1] = ma + delta * (nb / n)
        buf[d, 2] = qa + qb + delta * delta * (na * nb / n)
