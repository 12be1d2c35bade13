"""Adam over flat buffers, deterministic (an element-wise update: no sums).

The global gradient norm that scales the step lives with the learning pass
(``minibatch.norm_from_items``: the finish items' sums of squares, added in item
order).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from navi_nb.errors import NaviError


class OptimizerStateError(NaviError, ValueError):
    """A saved optimizer state that this optimizer cannot hold or could not have reached."""


@njit(cache=True, parallel=True, error_model="numpy")
def adam_kernel(params, grad, m, v, lr, beta1, beta2, eps, grad_scale, step):
    """One Adam step on flat buffers (CleanRL/PyTorch form, eps outside the sqrt).

    grad is multiplied by grad_scale first (global-norm clipping)."""
    bc1 = 1.0 - beta1**step
    bc2 = 1.0 - beta2**step
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
        adam_kernel(
            self.params,
            grad,
            self.m,
            self.v,
            float(self.lr if lr is None else lr),
            self.betas[0],
            self.betas[1],
            self.eps,
            float(grad_scale),
            float(self.t),
        )

    def state(self):
        return {"m": self.m.copy(), "v": self.v.copy(), "t": np.array(self.t, np.int64)}

    def check_state(self, state) -> None:
        """Raise OptimizerStateError unless ``state`` (as :meth:`state` returns) can be loaded; changes nothing."""
        if not isinstance(state, dict):
            raise OptimizerStateError(f"Adam state: expected a dict, got {type(state).__name__}")
        moments = {}
        for key in ("m", "v"):
            arr = np.asarray(state.get(key))  # a plain array: a mask would hide NaN from the check
            if arr.shape != self.m.shape or arr.dtype != self.m.dtype:
                raise OptimizerStateError(
                    f"Adam state {key!r}: expected {self.m.dtype} {self.m.shape}, got {arr.dtype} {arr.shape}"
                )
            if not np.isfinite(arr).all():
                raise OptimizerStateError(f"Adam state {key!r} holds non-finite values")
            moments[key] = arr
        if np.min(moments["v"], initial=0.0) < 0:  # a mean of squares: negative makes the step's sqrt NaN
            raise OptimizerStateError("Adam state 'v' (the second moment) holds negative values")
        t = np.asarray(state.get("t"))
        if t.ndim != 0 or t.dtype.kind not in "iu" or int(t) < 0:
            raise OptimizerStateError(f"Adam state 't' must be a non-negative integer, got {state.get('t')!r}")

    def load_state(self, state):
        """Restore :meth:`state`'s dict (checked first; nothing changes on a bad state)."""
        self.check_state(state)
        self.m[...] = np.asarray(state["m"])
        self.v[...] = np.asarray(state["v"])
        self.t = int(state["t"])
