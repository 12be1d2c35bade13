"""Acting's forward pass: the GRU step (with a memory) and every layer of both trunks in one parallel call.

Each tick the policy reads all actors' observations. Done layer by layer, that is one parallel region per
layer (six for two trunks of three layers, one more for the GRU), each a few microseconds of products per
chunk, and each region wakes the learning pool's threads anew after the tick's other kernels ran on
navi_nb's own (``navi_nb/threads.py``): the waking cost more than the products. Here one range kernel runs
chunk by chunk of ``chunk`` consecutive actors, each chunk all of its work (the GRU step of its rows, then
each trunk layer by layer), on the same threads as the tracer (:func:`navi_nb.threads.run_ranges`).

A chunk makes exactly the products the layer-by-layer pass made (the same shapes, operands and leading
dimensions: ``mlp.forward_chunks`` and ``gru.step_rows``), so the bits are the same whatever the thread
count, and the same as the learning pass's own forward of those rows.

``layers`` is the trunks' table, one row a dense layer in order (pi's, then v's): ``(W offset, b offset,
n_in, n_out, activation code, offset of its output in acts, 1 when it reads the trunk input)``. ``acts`` is
one flat buffer holding every layer's (B, n_out) output.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from navi_nb.learn.blas import NO_TRANS, address, gemm
from navi_nb.learn.gru import step_rows
from navi_nb.learn.mlp import bias_act_rows
from navi_nb.threads import RangeKernel

LAYER_COLUMNS = 7


@njit(cache=True, nogil=True, error_model="numpy")
def _trunk_rows(params, layers, x, acts, r0, r1):
    """Every layer of ``layers`` for batch rows r0:r1: H = act(input @ W + b)."""
    n_rows = x.shape[0]
    one = np.ones(1, acts.dtype)[0]
    zero = one - one
    prev_off, prev_n = np.int64(0), np.int64(0)
    for l in range(layers.shape[0]):
        w_off, b_off, n_in, n_out, act, out_off, from_x = layers[l]
        if from_x:
            src = address(x, r0 * n_in)
        else:
            src = address(acts, prev_off + r0 * prev_n)
        gemm(
            NO_TRANS,
            NO_TRANS,
            (r1 - r0, n_out, n_in),
            one,
            (src, n_in),
            (address(params, w_off), n_out),
            zero,
            (address(acts, out_off + r0 * n_out), n_out),
        )
        H = acts[out_off : out_off + n_rows * n_out].reshape((n_rows, n_out))
        bias_act_rows(H, params[b_off : b_off + n_out], r0, r1, act)
        prev_off, prev_n = out_off, n_out


@njit(cache=True, nogil=True, error_model="numpy")
def _mlp_span(lo, hi, params, layers, x, acts, chunk):
    """Chunks lo:hi of the trunks over the trunk input ``x`` (B, n_in)."""
    n_rows = x.shape[0]
    for c in range(lo, hi):
        r0 = c * chunk
        _trunk_rows(params, layers, x, acts, r0, min(n_rows, r0 + chunk))


@njit(cache=True, nogil=True, error_model="numpy")
def _gru_span(lo, hi, params, layers, x, acts, chunk, w, obs, state, scratch):
    """Chunks lo:hi of the GRU step (``state`` = (h_prev, reset, h_new): ``h_new`` from ``obs`` and
    ``h_prev``, zero where ``reset``; ``scratch`` = (G, Gi, Gh), ``gru.step_rows``' buffers), then the trunks
    over ``x`` = [obs[:, :trunk_obs], h_new] (B, trunk_obs + H)."""
    h_prev, reset, h_new = state
    G, Gi, Gh = scratch
    n_rows = obs.shape[0]
    hid = h_new.shape[1]
    n_obs = x.shape[1] - hid  # the observation's columns the trunks read (its first)
    for c in range(lo, hi):
        r0 = c * chunk
        r1 = min(n_rows, r0 + chunk)
        step_rows(w, obs, h_prev, reset, True, h_new, G, Gi, Gh, r0, r1)
        for i in range(r0, r1):
            for j in range(n_obs):
                x[i, j] = obs[i, j]
            for j in range(hid):
                x[i, n_obs + j] = h_new[i, j]
        _trunk_rows(params, layers, x, acts, r0, r1)


def _mlp_chunks(params, layers, x, acts, chunk):
    return -(-x.shape[0] // chunk)


def _gru_chunks(params, layers, x, acts, chunk, *rest):
    return -(-x.shape[0] // chunk)


mlp_forward = RangeKernel(_mlp_span, _mlp_chunks, 1)
gru_forward_step = RangeKernel(_gru_span, _gru_chunks, 1)


def layer_table(layers_by_trunk, act_code, identity, n_rows):
    """The ``layers`` table (int64 (L, 7)) of the trunks, in order, and the length of ``acts`` for ``n_rows``
    rows; each trunk's hidden layers apply ``act_code``, its output layer ``identity``."""
    rows, off = [], 0
    for layers in layers_by_trunk:
        for i, layer in enumerate(layers):
            act = act_code if i < len(layers) - 1 else identity
            rows.append((layer.offset, layer.b_offset, layer.n_in, layer.n_out, act, off, int(i == 0)))
            off += n_rows * layer.n_out
    return np.asarray(rows, np.int64).reshape(-1, LAYER_COLUMNS), off
