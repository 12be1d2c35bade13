"""Adam over flat buffers, and the global gradient norm, deterministic.

The norm is a sum over every gradient element: it is computed as fixed
blocks' partial sums (a `prange` writing one slot per block) added in block
order, so the thread count never changes its rounding.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

NORM_BLOCK = 4096


@njit(cache=True, parallel=True, error_model="numpy")
def block_sumsq(g, partial, block):
    """partial[k] = sum of g[e]**2 over block k (float64), e in order."""
    n = g.shape[0]
    for k in prange(partial.shape[0]):
        s = 0.0
        for e in range(k * block, min(n, k * block + block)):
            x = np.float64(g[e])
            s += x * x
        partial[k] = s


@njit(cache=True)
def ordered_sum(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i]
    return s


def global_norm(g, partial=None):
    n_blocks = (g.shape[0] + NORM_BLOCK - 1) // NORM_BLOCK
    if partial is None or partial.shape[0] != n_blocks:
        partial = np.empty(n_blocks, np.float64)
    block_sumsq(g, partial, NORM_BLOCK)
    return math.sqrt(ordered_sum(partial))


@njit(cache=True, parallel=True, error_model="numpy")
def adam_kernel(params, grad, m, v, lr, beta1, beta2, eps, grad_scale, step):
    """One Adam step on flat buffers (CleanRL/PyTorch form, eps outside the sqrt).

    grad is multiplied by grad_scale first (global-norm clipping)."""
    bc1 = 1.0 - beta1 ** step
    bc2 = 1.0 - beta2 ** step
    step_size = lr / bc1
    sqrt_bc2 = math.sqrt(bc2)
    n = params.shape[0]
    for i in prange(n):
        g = grad[i] * grad_scale
        m[i] = beta1 * m[i] + (1.0 - beta1) * g
        v[i] = beta2 * v[i] + (1.0 - beta2) * g * g
        params[i] -= step_size * m[i] / (math.sqrt(v[i]) / sqrt_bc2 + eps)


class Adam:
    """Adam with moments in the parameters' flat layout."""

    def __init__(self, params, lr=3e-4, betas=(0.9, 0.999), eps=1e-5):
        self.params = params
        self.m = np.zeros_like(params)
        self.v = np.zeros_like(params)
        self.lr, self.betas, self.eps = float(lr), tuple(float(b) for b in betas), float(eps)
        self.t = 0

    def step(self, grad, grad_scale=1.0, lr=None):
        self.t += 1
        adam_kernel(self.params, grad, self.m, self.v, float(self.lr if lr is None else lr),
                    self.betas[0], self.betas[1], self.eps, float(grad_scale), float(self.t))

    def state(self):
        return {"m": self.m.copy(), "v": self.v.copy(), "t": np.array(self.t, np.int64)}

    def load_state(self, state):
        self.m[...] = state["m"]
        self.v[...] = state["v"]
        self.t = int(state["t"])
