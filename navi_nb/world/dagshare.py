"""Sharing identical leaves and subtrees, and emitting the `.gmdag` words.

The compiler (navi_nb/world/compiler.py) hands over its cells level by level,
finest first. A cell's *ref* is -1 (pruned), -(leaf_uid + 2) (a leaf) or an
inner uid >= 0. Leaves are shared by their 64-bit word; an inner cell by its
8 child refs, hashed and compared exactly on a hit, so identical subtrees are
stored once. Uids are handed out in first-seen order, so the output does not
depend on threads or timing. Both tables grow with the number of *unique*
nodes, reserved before each pass so a pass never fills them.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from navi_nb.world import gmdag
from navi_nb.world.gmdag import nb_encode_inner

KIND_LEAF, KIND_INNER, KIND_PRUNED = 0, 1, 2


@njit(inline="always", cache=True)
def _mix(h, v):
    h ^= v + np.uint64(0x9E3779B97F4A7C15) + (h << np.uint64(6)) + (h >> np.uint64(2))
    return h


@njit(cache=True)
def _dedup_level(kind, word, child_ref, leaf_words, n_leaf, leaf_table, inner_kids, n_inner, inner_table, ref):
    """Canonical ids for one level's cells (bottom-up).

    ref[i]: -1 pruned, -(leaf_uid + 2) leaf, inner_uid >= 0 inner. Leaves are
    looked up by word, inner cells by their 8 child refs (exact compare).
    Returns (n_leaf, n_inner), or (-1, -1) when a table needs to grow.
    """
    lmask = leaf_table.shape[0] - 1
    imask = inner_table.shape[0] - 1
    j = 0  # rank among inner cells of this level
    for i in range(kind.shape[0]):
        k = kind[i]
        if k == 2:
            ref[i] = -1
        elif k == 0:
            w = word[i]
            h = (w * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(20)
            slot = np.int64(h & np.uint64(lmask))
            while True:
                u = leaf_table[slot]
                if u < 0:
                    if 2 * (n_leaf + 1) > leaf_table.shape[0] or n_leaf >= leaf_words.shape[0]:
                        return -1, -1
                    leaf_table[slot] = n_leaf
                    leaf_words[n_leaf] = w
                    ref[i] = -(n_leaf + 2)
                    n_leaf += 1
                    break
                if leaf_words[u] == w:
                    ref[i] = -(u + 2)
                    break
                slot = (slot + 1) & lmask
        else:
            empty = True
            for c in range(8):
                if child_ref[8 * j + c] != -1:
                    empty = False
            if empty:  # every child pruned: the cell is pruned too
                ref[i] = -1
                j += 1
                continue
            h = np.uint64(0)
            for c in range(8):
                h = _mix(h, np.uint64(child_ref[8 * j + c] + 3))
            slot = np.int64(h & np.uint64(imask))
            while True:
                u = inner_table[slot]
                if u < 0:
                    if 2 * (n_inner + 1) > inner_table.shape[0] or n_inner >= inner_kids.shape[0]:
                        return -1, -1
                    inner_table[slot] = n_inner
                    for c in range(8):
                        inner_kids[n_inner, c] = child_ref[8 * j + c]
                    ref[i] = n_inner
                    n_inner += 1
                    break
                same = True
                for c in range(8):
                    if inner_kids[u, c] != child_ref[8 * j + c]:
                        same = False
                        break
                if same:
                    ref[i] = u
                    break
                slot = (slot + 1) & imask
            j += 1
    return n_leaf, n_inner


@njit(cache=True)
def _emit(inner_kids, n_inner, leaf_words, n_leaf, root_ref):
    """Node words: inner nodes (root first), then leaves, then slot runs."""
    n_slots = 0
    for u in range(n_inner):
        for c in range(8):
            if inner_kids[u, c] != -1:
                n_slots += 1
    nodes = np.empty(n_inner + n_leaf + n_slots, dtype=np.uint64)
    for l in range(n_leaf):
        nodes[n_inner + l] = leaf_words[l]
    base = n_inner + n_leaf
    # word index of inner uid u is n_inner - 1 - u (root was created last)
    for w in range(n_inner):
        u = n_inner - 1 - w
        mask = 0
        count = 0
        for c in range(8):
            r = inner_kids[u, c]
            if r != -1:
                mask |= 1 << c
                if r >= 0:
                    idx = n_inner - 1 - r
                else:
                    idx = n_inner + (-r - 2)
                nodes[base + count] = np.uint64(idx)
                count += 1
        nodes[w] = nb_encode_inner(mask, base)
        base += count
    return nodes


class LeafTable:
    """Leaf words -> leaf uids (first-seen order), a growable open-addressing table."""

    def __init__(self, cap=1 << 12):
        self.table = np.full(cap, -1, dtype=np.int64)
        self.words = np.empty(cap // 2, dtype=np.uint64)
        self.n = 0

    def reserve(self, k):
        """Room for k more leaves, so a pass over k leaf cells never fills the table."""
        need = self.n + k + 1
        if 2 * need <= self.table.shape[0] and need <= self.words.shape[0]:
            return
        cap = self.table.shape[0]
        while 2 * need > cap:
            cap *= 2
        words = np.empty(cap // 2, dtype=np.uint64)
        words[: self.n] = self.words[: self.n]
        self.table = np.full(cap, -1, dtype=np.int64)
        self.words = words
        _rehash(self.table, self.words, self.n)

    def refs(self, kind, word, out):
        """out[i] = -(uid + 2) for leaf cells, -1 for pruned ones (no inner cells here)."""
        self.reserve(int(np.count_nonzero(kind == KIND_LEAF)))
        n_leaf, _ = _dedup_level(
            kind,
            word,
            np.empty(0, np.int32),
            self.words,
            self.n,
            self.table,
            np.empty((1, 8), dtype=np.int32),
            0,
            np.full(2, -1, dtype=np.int64),
            out,
        )
        if n_leaf < 0:
            raise RuntimeError("leaf table full after reserve (bug)")
        self.n = n_leaf


@njit(cache=True)
def _rehash(table, words, n):
    mask = table.shape[0] - 1
    for u in range(n):
        h = (words[u] * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(20)
        slot = np.int64(h & np.uint64(mask))
        while table[slot] >= 0:
            slot = (slot + 1) & mask
        table[slot] = u


class InnerTable:
    """Inner-node keys (8 child refs) -> uids (first-seen order), growable."""

    def __init__(self, cap=1 << 12):
        self.kids = np.empty((cap, 8), dtype=np.int32)
        self.table = np.full(2 * cap, -1, dtype=np.int64)
        self.n = 0

    def reserve(self, k):
        """Room for k more inner nodes, so a pass over k inner cells never fills the table."""
        need = self.n + k + 1
        if need <= self.kids.shape[0]:
            return
        cap = self.kids.shape[0]
        while need > cap:
            cap *= 2
        kids = np.empty((cap, 8), dtype=np.int32)
        kids[: self.n] = self.kids[: self.n]
        self.kids = kids
        self.table = np.full(2 * cap, -1, dtype=np.int64)
        _rehash_inner(self.table, self.kids, self.n)


@njit(cache=True)
def _rehash_inner(table, kids, n):
    mask = table.shape[0] - 1
    for u in range(n):
        h = np.uint64(0)
        for c in range(8):
            h = _mix(h, np.uint64(kids[u, c] + 3))
        slot = np.int64(h & np.uint64(mask))
        while table[slot] >= 0:
            slot = (slot + 1) & mask
        table[slot] = u


def dedup_range(kind, word, child_ref, leaves, shared, ref):
    """Share the cells of one level (or a run of it) whose children have refs."""
    leaves.reserve(int(np.count_nonzero(kind == KIND_LEAF)))
    shared.reserve(int(np.count_nonzero(kind == KIND_INNER)))
    n_leaf, n_inner = _dedup_level(
        kind, word, child_ref, leaves.words, leaves.n, leaves.table, shared.kids, shared.n, shared.table, ref
    )
    if n_leaf < 0:
        raise RuntimeError("dedup table full after reserve (bug)")
    leaves.n, shared.n = n_leaf, n_inner


def dedup(kinds, words, child_ref, leaves, shared):
    """Bottom-up sharing of identical leaves and subtrees; returns node words.

    kinds/words: levels 0..L (coarse to fine) as classified; child_ref: the
    refs of level L+1's cells (children of level L's inner cells), or None
    when level L has no inner cells.
    """
    if child_ref is None:
        child_ref = np.empty(0, dtype=np.int32)
    for depth in range(len(kinds) - 1, -1, -1):
        ref = np.empty(kinds[depth].shape[0], dtype=np.int32)
        dedup_range(kinds[depth], words[depth], child_ref, leaves, shared, ref)
        child_ref = ref
    root = int(child_ref[0])
    if root == -1:  # the whole cube is free and outside the region of interest
        return np.array([gmdag.encode_leaf(0, 0.0)], dtype=np.uint64)
    if root < -1:
        return leaves.words[-root - 2 : -root - 1].copy()
    return _emit(shared.kids, shared.n, leaves.words, leaves.n, root)
