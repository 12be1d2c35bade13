"""Dense-layer pieces, written by hand: bias plus activation, and the
activation's derivative, row by row.

Kernels are flat (arrays in, arrays out) and deterministic whatever the
thread count: the callers run them over fixed chunks of samples and each
chunk writes only its own rows. Products go through ``blas.gemm``
(single-threaded, see ``blas.py``).

Shapes: a layer's ``W`` is ``(n_in, n_out)``, ``b`` is ``(n_out,)``; a batch
``X`` is ``(B, n_in)`` row major. ``act`` codes: 0 identity, 1 tanh, 2 relu.
Derivatives of the activation are taken from its output ``H``
(tanh: ``1 - H**2``; relu: ``H > 0``).

Acting (``ActorCritic.forward``, ``acting.py``) runs ``bias_act_rows`` after each chunk's product; PPO's learning pass
(``fused.py``) runs the row helpers ``bias_act_rows`` and ``times_dact_rows``
inside its fused kernels, with the backward pass and both weight-gradient
decompositions (chunk slots, tiles) written there.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import overload

IDENTITY, TANH, RELU = 0, 1, 2
ACTIVATIONS = {"identity": IDENTITY, "tanh": TANH, "relu": RELU}


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
