"""Dense-layer kernels: forward, backward and weight gradients, written by hand.

Every kernel is flat (arrays in, arrays out) and deterministic whatever the
thread count: a `prange` runs over fixed pieces (sample chunks, weight tiles,
parameter blocks) and each piece writes only its own outputs; sums over
pieces happen afterwards in a fixed order. Products go through
``blas.gemm`` (single-threaded, see ``blas.py``).

Shapes: a layer's ``W`` is ``(n_in, n_out)``, ``b`` is ``(n_out,)``; a batch
``X`` is ``(B, n_in)`` row major. ``act`` codes: 0 identity, 1 tanh, 2 relu.
Derivatives of the activation are taken from its output ``H``
(tanh: ``1 - H**2``; relu: ``H > 0``).

Two ways to get a weight gradient ``dW = X.T @ dZ`` over a minibatch:

- chunk slots (``wgrad_chunk_slots`` then ``sum_slots``): each fixed chunk of
  samples writes its partial ``[dW, db]`` into its own slot, the slots are
  summed element by element in chunk order. Scratch: ``size x chunks``.
- tiles (``wgrad_tiles`` + ``bias_grad``): each fixed tile of ``dW`` is one
  product over the whole minibatch in sample order. No scratch.

Acting (``ActorCritic.forward``) uses ``forward_chunks``; PPO's learning pass
runs the same decompositions fused into two parallel kernels (``fused.py``);
the per-layer kernels here are also the reference the kernel tests check.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from navi_nb.learn.blas import NO_TRANS, TRANS, gemm

IDENTITY, TANH, RELU = 0, 1, 2
ACTIVATIONS = {"identity": IDENTITY, "tanh": TANH, "relu": RELU}


@njit(cache=True, inline="always")
def _ptr(a, offset):
    """Address of element ``offset`` (counted in elements) of contiguous ``a``."""
    return a.ctypes.data + np.uint64(offset * a.itemsize)


def tanh32(x):
    """tanh for float32, a rational approximation that vectorizes (np.tanh does
    not): Eigen's ``generic_fast_tanh_float``, within 4e-7 of the exact value
    over the whole line (tests/test_learn_kernels.py checks it)."""
    c = np.float32(7.90531110763549805)
    x = min(max(x, -c), c)
    x2 = x * x
    p = x2 * np.float32(-2.76076847742355e-16) + np.float32(2.00018790482477e-13)
    p = p * x2 + np.float32(-8.60467152213735e-11)
    p = p * x2 + np.float32(5.12229709037114e-08)
    p = p * x2 + np.float32(1.48572235717979e-05)
    p = p * x2 + np.float32(6.37261928875436e-04)
    p = p * x2 + np.float32(4.89352455891786e-03)
    p = p * x
    q = x2 * np.float32(1.19825839466702e-06) + np.float32(1.18534705686654e-04)
    q = q * x2 + np.float32(2.26843463243900e-03)
    q = q * x2 + np.float32(4.89352518554385e-03)
    return p / q


_tanh32 = njit(cache=True, inline="always", error_model="numpy")(tanh32)


def fast_tanh(x):  # pragma: no cover - typed by the overload below
    raise NotImplementedError


@overload(fast_tanh, inline="always")
def _fast_tanh_overload(x):
    if x == types.float32:
        return lambda x: _tanh32(x)
    return lambda x: np.tanh(x)    # float64 mode (gradient tests): the exact tanh


@njit(cache=True, inline="always", error_model="numpy")
def bias_act_rows(H, b, r0, r1, act):
    """H[r0:r1] = act(H[r0:r1] + b); the branch is outside the loops so they vectorize."""
    n_out = H.shape[1]
    if act == TANH:
        for i in range(r0, r1):
            for j in range(n_out):
                H[i, j] = fast_tanh(H[i, j] + b[j])
    elif act == RELU:
        zero = np.zeros(1, H.dtype)[0]
        for i in range(r0, r1):
            for j in range(n_out):
                z = H[i, j] + b[j]
                H[i, j] = max(z, zero)
    else:
        for i in range(r0, r1):
            for j in range(n_out):
                H[i, j] = H[i, j] + b[j]


@njit(cache=True, inline="always", error_model="numpy")
def times_dact_rows(dZ, H, r0, r1, act):
    """dZ[r0:r1] *= act'(H[r0:r1]), from the activation's output H."""
    n_out = H.shape[1]
    if act == TANH:
        for i in range(r0, r1):
            for j in range(n_out):
                h = H[i, j]
                dZ[i, j] = dZ[i, j] * (1 - h * h)
    elif act == RELU:
        for i in range(r0, r1):
            for j in range(n_out):
                if not H[i, j] > 0:
                    dZ[i, j] = dZ[i, j] * 0


@njit(cache=True, parallel=True, error_model="numpy")
def forward_chunks(X, W, b, H, act, chunk):
    """H = act(X @ W + b), chunk by chunk of rows. X (B, n_in), H (B, n_out)."""
    n_rows, n_in = X.shape
    n_out = W.shape[1]
    one = np.ones(1, H.dtype)[0]
    zero = one - one
    n_chunks = (n_rows + chunk - 1) // chunk
    for c in prange(n_chunks):
        r0 = c * chunk
        r1 = min(n_rows, r0 + chunk)
        gemm(NO_TRANS, NO_TRANS, r1 - r0, n_out, n_in, one,
             _ptr(X, r0 * n_in), n_in, _ptr(W, 0), n_out,
             zero, _ptr(H, r0 * n_out), n_out)
        bias_act_rows(H, b, r0, r1, act)


@njit(cache=True, parallel=True, error_model="numpy")
def backprop_chunks(dZ_next, W_next, H, dZ, act, chunk):
    """dZ = (dZ_next @ W_next.T) * act'(H): the gradient at a layer's pre-activation.

    dZ_next (B, n_next) is the next layer's pre-activation gradient, W_next
    (n_out, n_next) its weights, H (B, n_out) this layer's output.
    """
    n_rows, n_out = H.shape
    n_next = W_next.shape[1]
    one = np.ones(1, H.dtype)[0]
    zero = one - one
    n_chunks = (n_rows + chunk - 1) // chunk
    for c in prange(n_chunks):
        r0 = c * chunk
        r1 = min(n_rows, r0 + chunk)
        gemm(NO_TRANS, TRANS, r1 - r0, n_out, n_next, one,
             _ptr(dZ_next, r0 * n_next), n_next,
             _ptr(W_next, 0), n_next, zero,
             _ptr(dZ, r0 * n_out), n_out)
        times_dact_rows(dZ, H, r0, r1, act)


@njit(cache=True, parallel=True, error_model="numpy")
def wgrad_chunk_slots(X, dZ, slots, chunk):
    """slots[c] = [X_c.T @ dZ_c (flattened), column sums of dZ_c] for each chunk c."""
    n_rows, n_in = X.shape
    n_out = dZ.shape[1]
    one = np.ones(1, slots.dtype)[0]
    zero = one - one
    n_chunks = (n_rows + chunk - 1) // chunk
    nw = n_in * n_out
    for c in prange(n_chunks):
        r0 = c * chunk
        r1 = min(n_rows, r0 + chunk)
        gemm(TRANS, NO_TRANS, n_in, n_out, r1 - r0, one,
             _ptr(X, r0 * n_in), n_in,
             _ptr(dZ, r0 * n_out), n_out, zero,
             _ptr(slots, c * slots.shape[1]), n_out)
        for j in range(n_out):
            s = zero
            for i in range(r0, r1):
                s += dZ[i, j]
            slots[c, nw + j] = s


@njit(cache=True, parallel=True, error_model="numpy")
def sum_slots(slots, n_used, out, block):
    """out[e] = sum over c < n_used of slots[c, e], in chunk order, for each e."""
    n = out.shape[0]
    n_blocks = (n + block - 1) // block
    for k in prange(n_blocks):
        e0 = k * block
        e1 = min(n, e0 + block)
        for e in range(e0, e1):
            out[e] = slots[0, e]
        for c in range(1, n_used):
            for e in range(e0, e1):
                out[e] += slots[c, e]


@njit(cache=True, parallel=True, error_model="numpy")
def wgrad_tiles(X, dZ, gW, gb, tile_rows, tile_cols):
    """gW = X.T @ dZ by fixed tiles of gW (each one product over all rows, in row
    order), and gb = column sums of dZ (each column summed in row order)."""
    n_rows, n_in = X.shape
    n_out = dZ.shape[1]
    one = np.ones(1, gW.dtype)[0]
    zero = one - one
    nr = (n_in + tile_rows - 1) // tile_rows
    ncol = (n_out + tile_cols - 1) // tile_cols
    for t in prange(nr * ncol + ncol):
        if t < nr * ncol:
            i0 = (t // ncol) * tile_rows
            j0 = (t % ncol) * tile_cols
            i1 = min(n_in, i0 + tile_rows)
            j1 = min(n_out, j0 + tile_cols)
            gemm(TRANS, NO_TRANS, i1 - i0, j1 - j0, n_rows, one,
                 _ptr(X, i0), n_in,
                 _ptr(dZ, j0), n_out, zero,
                 _ptr(gW, i0 * n_out + j0), n_out)
        else:
            j0 = (t - nr * ncol) * tile_cols
            j1 = min(n_out, j0 + tile_cols)
            for j in range(j0, j1):
                gb[j] = zero
            for i in range(n_rows):
                for j in range(j0, j1):
                    gb[j] += dZ[i, j]
