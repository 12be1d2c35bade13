"""The GRU core's part of a PPO minibatch: its states forward before the trunks' pass, its gradient
through time after it.

A recurrent minibatch is whole actor sequences (``blocks.sequence_order``): each actor block gives ``q``
of its actors, every step of the rollout, its ``blk = steps * q`` rows ordered step by step, so the
block's rows at step 0 name its actors. Around ``fused.chunk_pass`` (which reads each row's trunk input
``obs | memory`` from the rollout rows and keeps every layer's pre-activation gradient in ``Work.D``):

1. :meth:`MemoryPass.forward`: the minibatch's observations, the states before the rollout (``slab.h0``)
   and the episode starts gathered into sequences (steps, actors, .), the GRU forward over them with the
   current weights (``gru._forward_kernel``), its states written into the rows' ``memory`` columns;
2. :meth:`MemoryPass.backward`: dL/dh_t of every row from both trunks' first layers (``D`` times the
   state's rows of their weights, pi then v, one product per block), backward through time
   (``gru._backward_kernel``) with one chunk per block, and each block's GRU gradient into that block's
   row of ``Work.block_grads``, where the finish pass's memory items add it along the block tree with the
   trunks' gradient (``fused.MEMORY``).

A block's GRU gradient depends on its own rows only, so the sums, and the bits, are the same whatever the
threads, shards or processes (docs/DETERMINISM.md). No gradient flows into ``h0``: backpropagation through
time runs over the rollout (as CleanRL's recurrent PPO does).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from navi_nb.learn import gru
from navi_nb.learn.blas import NO_TRANS, TRANS, address, gemm
from navi_nb.learn.fused import DOFF, NOUT, WOFF, block_view


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
def _state_grads(D, params, meta, n_pi, obs_dim, q, blk, n_blocks, DH, DHS):
    """dL/dh of every row: ``D_l @ W_l[obs_dim:, :]^T`` of the two first layers (l = 0, then ``n_pi``),
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
                (address(params, m[WOFF] + obs_dim * nout), nout),
                beta,
                (address(DH, k * blk * hid), hid),
            )
        G = block_view(DH, k * blk * hid, blk, hid)
        for t in range(n_steps):
            for i in range(q):
                for e in range(hid):
                    DHS[t, k * q + i, e] = G[t * q + i, e]


class MemoryPass:
    """The GRU's stages of the minibatches of one learner (``PPO``): its layout, the rollout's ``h0`` and
    ``starts``, and scratch buffers per minibatch shape."""

    def __init__(self, layout, obs_dim, n_pi):
        self.layout = layout
        self.obs_dim = int(obs_dim)
        self.n_pi = int(n_pi)
        self.h0 = self.starts = None
        self._bufs = {}

    def use(self, h0, starts):
        """The rollout's states before its first step (actors, H) and its episode starts (steps, actors)."""
        self.h0, self.starts = h0, starts

    def _buffers(self, n_steps, n_batch, dtype):
        key = (n_steps, n_batch, np.dtype(dtype))
        b = self._bufs.get(key)
        if b is None:
            lay = self.layout
            hid, g3, rows = lay.hidden, 3 * lay.hidden, n_steps * n_batch
            b = {
                "X": np.empty((n_steps, n_batch, lay.n_in), dtype),
                "H0": np.empty((n_batch, hid), dtype),
                "S": np.empty((n_steps, n_batch), np.bool_),
                "HS": np.empty((n_steps, n_batch, hid), dtype),
                "saved": np.empty((n_steps, n_batch, gru.N_GATES * hid), dtype),
                "Gi": np.empty((n_batch, g3), dtype),
                "Gh": np.empty((n_batch, g3), dtype),
                "DH": np.empty(rows * hid, dtype),
                "DHS": np.empty((n_steps, n_batch, hid), dtype),
                "DX": np.empty((0, n_batch, lay.n_in), dtype),  # empty: no dL/dx is computed
                "DH0": np.empty((n_batch, hid), dtype),
                "DGi": np.empty((rows, g3), dtype),
                "DGh": np.empty((rows, g3), dtype),
                "XC": np.empty((rows, lay.n_in), dtype),
                "HPC": np.empty((rows, hid), dtype),
            }
            self._bufs = {key: b}  # one shape per run
        return b

    def _shape(self, w, dtype):
        """``(q, buffers)``: the actors each block gives a minibatch of ``w``'s shape, and the buffers."""
        n_steps = self.starts.shape[0]
        q = w.blk // n_steps
        return q, self._buffers(n_steps, w.n_blocks * q, dtype)

    def forward(self, source, params, rows, w):
        """The GRU's states of the minibatch ``rows`` (``w``'s shape) into their ``memory`` columns."""
        q, b = self._shape(w, params.dtype)
        lay = self.layout
        _gather(source, rows, self.h0, self.starts, self.obs_dim, q, w.blk, b["X"], b["H0"], b["S"])
        gru._forward_kernel(
            gru._weights(lay, params), b["X"], b["H0"], b["S"], b["HS"], b["saved"], b["Gi"], b["Gh"], q
        )
        _scatter(source, rows, b["HS"], self.obs_dim, q, w.blk)

    def backward(self, params, w):
        """After the chunk pass: each block's GRU gradient into its row of ``w.block_grads``."""
        q, b = self._shape(w, params.dtype)
        lay = self.layout
        _state_grads(w.D, params, w.meta, self.n_pi, self.obs_dim, q, w.blk, w.n_blocks, b["DH"], b["DHS"])
        slots = np.empty((w.n_blocks, lay.size), params.dtype)
        gru._backward_kernel(
            gru._weights(lay, params), (b["X"], b["H0"], b["S"], b["HS"], b["saved"], b["DHS"]), b["DX"], b["DH0"],
            b["DGi"], b["DGh"], b["XC"], b["HPC"], slots, q, (_NO_OPS, 0, 0, 0), slots[0],
        )  # fmt: skip
        w.block_grads[:, lay.offset : lay.end] = slots


_NO_OPS = np.zeros((0, 3), np.int64)
