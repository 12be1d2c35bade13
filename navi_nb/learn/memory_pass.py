"""The GRU core's part of a PPO minibatch: its states forward before the trunks' pass, its gradient
through time after it.

A recurrent minibatch is whole actor sequences (``blocks.sequence_order``): each actor block gives ``q``
of its actors, every step of the rollout, its ``blk = steps * q`` rows ordered step by step, so the
block's rows at step 0 name its actors. Around ``fused.chunk_pass`` (which reads each row's trunk input
``obs | memory`` from the rollout rows and keeps every layer's pre-activation gradient in ``Work.D``):

1. :func:`memory_forward`: the minibatch's observations, the states before the rollout (``slab.h0``)
   and the episode starts gathered into sequences (steps, actors, .), the GRU forward over them with the
   current weights (``gru.forward_kernel``), its states written into the rows' ``memory`` columns;
2. :func:`memory_backward`: dL/dh_t of every row from both trunks' first layers (``D`` times the
   state's rows of their weights, pi then v, one product per block), backward through time
   (``gru.backward_kernel``) with one chunk per block, and each block's GRU gradient into that block's
   row of ``Work.block_grads``, where the finish pass's memory items add it along the block tree with the
   trunks' gradient (``fused.MEMORY``).

Both are compiled steps of ``minibatch.minibatch_gradients``, so a recurrent minibatch runs inside the
compiled minibatch loop as the MLP's does; :class:`MemoryPass` keeps the rollout's ``h0`` and ``starts``
and the buffers, handed to the steps as one :data:`MemoryBufs`.

A block's GRU gradient depends on its own rows only, so the sums, and the bits, are the same whatever the
threads, shards or processes (docs/DETERMINISM.md). No gradient flows into ``h0``: backpropagation through
time runs over the rollout (as CleanRL's recurrent PPO does).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit, prange

from navi_nb.learn import gru
from navi_nb.learn.blas import NO_TRANS, TRANS, address, gemm
from navi_nb.learn.fused import DOFF, NOUT, WOFF, block_view

_NO_OPS = np.zeros((0, 3), np.int64)  # the backward's chunk tree, unused: the finish pass adds the blocks


@njit(cache=True)
def _gather(source, rows, h0_all, starts_all, obs_dim, q, blk, X, H0, S):
    """The minibatch's sequences: column ``j = k * q + i`` is block k's i-th actor (its step-0 row)."""
    n_blocks = rows.shape[0] // blk
    n_steps = blk // q
    n_actors = h0_all.shape[0]
    for k in range(n_blocks):
        for i in range(q):
            j = k * q + i
            a = rows[k * blk + i] % n_actors
            for e in range(h0_all.shape[1]):
                H0[j, e] = h0_all[a, e]
            for t in range(n_steps):
                r = rows[k * blk + t * q + i]
                S[t, j] = starts_all[t, a]
                for e in range(obs_dim):
                    X[t, j, e] = source[r, e]


@njit(cache=True)
def _scatter(source, rows, HS, obs_dim, q, blk):
    """Each row's state into its ``memory`` columns (the inverse of :func:`_gather`'s indexing)."""
    n_blocks = rows.shape[0] // blk
    n_steps = blk // q
    hid = HS.shape[2]
    for k in range(n_blocks):
        for i in range(q):
            for t in range(n_steps):
                r = rows[k * blk + t * q + i]
                for e in range(hid):
                    source[r, obs_dim + e] = HS[t, k * q + i, e]


@njit(cache=True, parallel=True, error_model="numpy")
def _state_grads(D, params, meta, n_pi, trunk_obs, q, blk, n_blocks, DH, DHS):
    """dL/dh of every row: ``D_l @ W_l[trunk_obs:, :]^T`` of the two first layers (l = 0, then ``n_pi``),
    one product per block (a block's rows are its own call whatever else runs), into ``DHS`` (T, B, H)."""
    hid = DHS.shape[2]
    n_steps = blk // q
    for kk in prange(n_blocks):
        k = np.int64(kk)
        one = np.ones(1, D.dtype)[0]
        for side in range(2):
            m = meta[0] if side == 0 else meta[n_pi]
            beta = one - one if side == 0 else one
            nout = m[NOUT]
            gemm(
                NO_TRANS,
                TRANS,
                (blk, hid, nout),
                one,
                (address(D, m[DOFF] + k * blk * nout), nout),
                (address(params, m[WOFF] + trunk_obs * nout), nout),
                beta,
                (address(DH, k * blk * hid), hid),
            )
        G = block_view(DH, k * blk * hid, blk, hid)
        for t in range(n_steps):
            for i in range(q):
                for e in range(hid):
                    DHS[t, k * q + i, e] = G[t * q + i, e]


MemoryBufs = namedtuple(
    "MemoryBufs",
    (
        "weights",  # gru.weight_bundle: the flat parameters and the GRU's offsets in them
        "h0",  # (actors, H) the states before the rollout
        "starts",  # (steps, actors) bool, the episode starts
        "obs_dim",  # the rows' observation columns (the state's columns follow them), all of which the GRU reads
        "trunk_obs",  # the first of them that the trunks read (the state's rows of their weights follow them)
        "n_pi",  # the policy trunk's layers (the value trunk's first layer is layer n_pi)
        "q",  # actors each block gives a minibatch
        "g0",  # the GRU's first parameter (its gradient's place in a block's row)
        # the forward's sequences (steps, q * blocks, .): inputs, initial states, starts, states, gates; scratch
        "X",
        "H0",
        "S",
        "HS",
        "saved",
        "Gi",
        "Gh",
        # the backward's: dL/dh of the rows (flat and per step), dL/dh0, the gate gradients, the inputs and
        # previous states chunk-major, each block's gradient (blocks, GRU size); DX empty: no dL/dx
        "DH",
        "DHS",
        "DX",
        "DH0",
        "DGi",
        "DGh",
        "XC",
        "HPC",
        "slots",
    ),
)
"""What :func:`memory_forward` and :func:`memory_backward` read and write for one minibatch shape."""


class MemoryPass:
    """The GRU's stages of the minibatches of one learner (``PPO``): its layout, the rollout's ``h0`` and
    ``starts``, and buffers per minibatch shape."""

    def __init__(self, layout, obs_dim, n_pi, trunk_obs=None):
        self.layout = layout
        self.obs_dim = int(obs_dim)
        self.trunk_obs = self.obs_dim if trunk_obs is None else int(trunk_obs)
        self.n_pi = int(n_pi)
        self.h0 = self.starts = None
        self._bufs = {}

    def use(self, h0, starts):
        """The rollout's states before its first step (actors, H) and its episode starts (steps, actors)."""
        self.h0, self.starts = h0, starts

    def buffers(self, w, params):
        """The :data:`MemoryBufs` of a minibatch of ``w``'s shape (a ``fused.Work``) over ``params``, for the
        rollout given to :meth:`use`; the arrays are kept for the next call of the same shape."""
        n_steps, dtype, lay = self.starts.shape[0], params.dtype, self.layout
        q = w.blk // n_steps
        n_batch = w.n_blocks * q
        key = (n_steps, n_batch, np.dtype(dtype))
        b = self._bufs.get(key)
        if b is None:
            hid, g3, rows = lay.hidden, 3 * lay.hidden, n_steps * n_batch
            b = (
                np.empty((n_steps, n_batch, lay.n_in), dtype),
                np.empty((n_batch, hid), dtype),
                np.empty((n_steps, n_batch), np.bool_),
                np.empty((n_steps, n_batch, hid), dtype),
                np.empty((n_steps, n_batch, gru.N_GATES * hid), dtype),
                np.empty((n_batch, g3), dtype),
                np.empty((n_batch, g3), dtype),
                np.empty(rows * hid, dtype),
                np.empty((n_steps, n_batch, hid), dtype),
                np.empty((0, n_batch, lay.n_in), dtype),
                np.empty((n_batch, hid), dtype),
                np.empty((rows, g3), dtype),
                np.empty((rows, g3), dtype),
                np.empty((rows, lay.n_in), dtype),
                np.empty((rows, hid), dtype),
                np.empty((w.n_blocks, lay.size), dtype),
            )
            self._bufs = {key: b}  # one shape per run
        weights = gru.weight_bundle(lay, params)
        return MemoryBufs(weights, self.h0, self.starts, self.obs_dim, self.trunk_obs, self.n_pi, q, lay.offset, *b)


@njit(cache=True)
def memory_forward(source, rows, w, m):
    """The GRU's states of the minibatch ``rows`` (``w``'s shape) into their ``memory`` columns of
    ``source``; ``m`` a :data:`MemoryBufs`."""
    _gather(source, rows, m.h0, m.starts, m.obs_dim, m.q, w.blk, m.X, m.H0, m.S)
    gru.forward_kernel(m.weights, m.X, m.H0, m.S, m.HS, m.saved, m.Gi, m.Gh, m.q)
    _scatter(source, rows, m.HS, m.obs_dim, m.q, w.blk)


@njit(cache=True)
def memory_backward(params, w, m):
    """After the chunk pass: each block's GRU gradient into its row of ``w.block_grads``."""
    _state_grads(w.D, params, w.meta, m.n_pi, m.trunk_obs, m.q, w.blk, w.n_blocks, m.DH, m.DHS)
    seq = (m.X, m.H0, m.S, m.HS, m.saved, m.DHS)
    no_tree = (_NO_OPS, 0, 0, 0)  # mode 0: each chunk's (block's) gradient stays in its slot
    gru.backward_kernel(m.weights, seq, m.DX, m.DH0, m.DGi, m.DGh, m.XC, m.HPC, m.slots, m.q, no_tree, m.slots[0])
    size = m.slots.shape[1]
    for k in range(w.n_blocks):
        for e in range(size):
            w.block_grads[k, m.g0 + e] = m.slots[k, e]
