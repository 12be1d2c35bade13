"""Dense-layer pieces, written by hand: the chunked forward pass, bias plus
activation, and the activation's derivative.

Kernels are flat (arrays in, arrays out) and deterministic whatever the
thread count: a `prange` runs over fixed chunks of samples and each chunk
writes only its own rows. Products go through ``blas.gemm``
(single-threaded, see ``blas.py``).

Shapes: a layer's ``W`` is ``(n_in, n_out)``, ``b`` is ``(n_out,)``; a batch
``X`` is ``(B, n_in)`` row major. ``act`` codes: 0 identity, 1 tanh, 2 relu.
Derivatives of the activation are taken from its output ``H``
(tanh: ``1 - H**2``; relu: ``H > 0``).

Acting (``ActorCritic.forward``) runs ``forward_chunks``; PPO's learning pass
(``fused.py``) runs the row helpers ``bias_act_rows`` and ``times_dact_rows``
inside its fused kernels, with the backward pass and both weight-gradient
decompositions (chunk slots, tiles) written there.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from navi_nb.learn.blas import NO_TRANS, gemm

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
    return lambda x: np.tanh(x)  # float64 mode (gradient tests): the exact tanh


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
        gemm(
            NO_TRANS,
            NO_TRANS,
            (r1 - r0, n_out, n_in),
            one,
            (_ptr(X, r0 * n_in), n_in),
            (_ptr(W, 0), n_out),
            zero,
            (_ptr(H, r0 * n_out), n_out),
        )
        bias_act_rows(H, b, r0, r1, act)
