"""A GRU core written by hand: one step for acting, a sequence forward and its
backward through time for learning.

The equations are PyTorch's ``nn.GRU`` (gate order r, z, n)::

    r  = sigmoid(W_ir x + b_ir + W_hr h + b_hr)
    z  = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
    n  = tanh(W_in x + b_in + r * (W_hn h + b_hn))
    h' = (1 - z) * n + z * h

Parameters (:class:`GruLayout`) are four views into one flat buffer, in
PyTorch's parameter order, each shaped as PyTorch shapes it::

    W_ih (3H, I), W_hh (3H, H), b_ih (3H,), b_hh (3H,)

(rows of each in gate order r, z, n), so ``torch.cat([p.flatten() for p in
gru.parameters()])`` of a one-layer ``nn.GRU`` is this buffer. The block may
sit anywhere in a larger flat buffer (``GruLayout.offset``); gradients use the
same layout.

Kernels are flat and deterministic whatever the thread count: a ``prange``
runs over fixed chunks of ``chunk`` consecutive batch rows (actors), each chunk
reads and writes only its own rows, through the whole sequence. Products go
through ``blas.gemm`` (single-threaded). ``tanh`` is ``mlp.fast_tanh`` (float32:
the rational approximation; float64: the exact one), ``sigmoid(a) = 0.5 + 0.5 *
tanh(a / 2)``, and derivatives are taken from the outputs (``1 - n**2``,
``s * (1 - s)``), as in ``mlp.py``. float32 throughout; float64 runs the same
kernels (the finite-difference tests).

The gradient's order of sums (docs/LEARNING.md, "The GRU core"): chunk ``c``
(rows ``c * chunk`` .. ) computes its own whole gradient, the weight gradients
as one product over its ``T * rows`` samples taken in (t, row) order and the
bias gradients as sums in that order; the call's gradient is the chunks'
gradients added along the fixed binary tree of ``blocks.tree_ops`` over chunk
indices, element by element. A chunk's gradient depends on its own rows only,
so with ``chunk`` equal to the actor block, chunk ``k`` is block ``k`` and any
split of the batch into runs of whole chunks (shards) gives the same chunk
gradients (:func:`gru_backward_chunks`), which the same tree adds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from navi_nb.errors import NaviError
from navi_nb.learn.blas import NO_TRANS, TRANS, address, gemm
from navi_nb.learn.blocks import tree_add_run, tree_ops
from navi_nb.learn.mlp import fast_tanh

DEFAULT_CHUNK = 16
"""Batch rows per chunk (the unit of parallel work; the default actor block). Part of the configuration:
the gradient's bits depend on it."""
SUM_BLOCK = 4096
"""Elements per work item of the chunk tree's sum (any size gives the same bits)."""
N_GATES = 4
"""Columns per hidden unit saved by the forward pass: r, z, n and ``W_hn h + b_hn``."""


class GruError(NaviError):
    """A GRU layout, buffer or input that does not fit (sizes, shapes, dtypes)."""


@dataclass(frozen=True)
class GruLayout:
    """One GRU's place in a flat buffer: ``W_ih, W_hh, b_ih, b_hh`` from ``offset`` on."""

    n_in: int  # I
    hidden: int  # H
    offset: int = 0  # index of W_ih[0, 0]

    @property
    def w_ih(self) -> int:
        return self.offset

    @property
    def w_hh(self) -> int:
        return self.offset + 3 * self.hidden * self.n_in

    @property
    def b_ih(self) -> int:
        return self.w_hh + 3 * self.hidden * self.hidden

    @property
    def b_hh(self) -> int:
        return self.b_ih + 3 * self.hidden

    @property
    def size(self) -> int:
        return 3 * self.hidden * (self.n_in + self.hidden + 2)

    @property
    def end(self) -> int:
        return self.offset + self.size

    def entries(self, prefix="gru"):
        """``(name, shape)`` pairs in walk order, for ``params.ParamLayout`` (names ``prefix.W_ih`` ...)."""
        three_h = 3 * self.hidden
        return [
            (f"{prefix}.W_ih", (three_h, self.n_in)),
            (f"{prefix}.W_hh", (three_h, self.hidden)),
            (f"{prefix}.b_ih", (three_h,)),
            (f"{prefix}.b_hh", (three_h,)),
        ]

    def views(self, flat):
        """Dict ``W_ih, W_hh, b_ih, b_hh`` -> views into ``flat`` (no copies)."""
        _check_flat("flat", flat, self, None)
        out = {}
        for (name, shape), start in zip(self.entries(""), (self.w_ih, self.w_hh, self.b_ih, self.b_hh)):
            out[name[1:]] = flat[start : start + int(np.prod(shape))].reshape(shape)
        return out


def gru_layout(n_in, hidden, offset=0):
    """The layout of a GRU with input size ``n_in`` and hidden size ``hidden`` starting at ``offset``."""
    for name, value, low in (("n_in", n_in, 1), ("hidden", hidden, 1), ("offset", offset, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise GruError(f"{name} must be an integer >= {low}, got {value!r}")
    return GruLayout(int(n_in), int(hidden), int(offset))


def init_gru(layout, params, rng):
    """Fill the GRU's part of ``params`` as PyTorch does: every weight and bias uniform in
    ``[-1/sqrt(H), 1/sqrt(H)]``, drawn from ``rng`` in one float64 call over the whole block in walk
    order, then rounded to the buffer's dtype. Returns ``params``."""
    _check_flat("params", params, layout, None)
    if not isinstance(rng, np.random.Generator):
        raise GruError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    k = 1.0 / math.sqrt(layout.hidden)
    params[layout.offset : layout.end] = rng.uniform(-k, k, layout.size)
    return params


# ---- checks -----------------------------------------------------------------------------------------------------
def _check_flat(name, flat, layout, dtype):
    if not isinstance(flat, np.ndarray) or flat.ndim != 1:
        raise GruError(f"{name} must be a 1-D numpy array, got {_describe(flat)}")
    if flat.dtype not in (np.float32, np.float64) or (dtype is not None and flat.dtype != dtype):
        want = "float32 or float64" if dtype is None else np.dtype(dtype).name
        raise GruError(f"{name} has dtype {flat.dtype}, expected {want}")
    if flat.shape[0] < layout.end:
        raise GruError(f"{name} has {flat.shape[0]} elements; the GRU needs {layout.end} (offset + size)")
    if not flat.flags.c_contiguous or not flat.flags.writeable:
        raise GruError(f"{name} must be contiguous and writeable")


def _describe(a):
    if isinstance(a, np.ndarray):
        return f"an array of shape {a.shape} and dtype {a.dtype}"
    return type(a).__name__


def _array(name, a, shape, dtype, finite=True):
    """``a`` as a C-contiguous array of ``shape`` (None: any size there) and ``dtype``, or GruError."""
    if not isinstance(a, np.ndarray):
        raise GruError(f"{name} must be a numpy array, got {type(a).__name__}")
    if a.ndim != len(shape) or any(s is not None and s != n for s, n in zip(shape, a.shape)):
        want = "(" + ", ".join("?" if s is None else str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
        raise GruError(f"{name} has shape {a.shape}, expected {want}")
    if a.dtype != dtype:
        raise GruError(f"{name} has dtype {a.dtype}, expected {np.dtype(dtype).name}")
    if finite and a.dtype.kind == "f" and not np.isfinite(a).all():
        raise GruError(f"{name} has non-finite values")
    return np.ascontiguousarray(a)


def _chunk(chunk):
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise GruError(f"chunk must be an integer >= 1, got {chunk!r}")
    return int(chunk)


def _sequence_inputs(layout, params, x, h0, starts):
    _check_flat("params", params, layout, None)
    dt = params.dtype
    if not isinstance(x, np.ndarray) or x.ndim != 3:
        raise GruError(f"x must be a (T, B, {layout.n_in}) array, got {_describe(x)}")
    n_steps, n_batch = x.shape[0], x.shape[1]
    if n_steps < 1 or n_batch < 1:
        raise GruError(f"x has shape {x.shape}: T and B must be at least 1")
    x = _array("x", x, (n_steps, n_batch, layout.n_in), dt)
    h0 = _array("h0", h0, (n_batch, layout.hidden), dt)
    starts = _array("starts", starts, (n_steps, n_batch), np.bool_)
    return x, h0, starts


# ---- kernels ----------------------------------------------------------------------------------------------------
# The kernels take the weights as one read-only bundle ``w = (params, o_wih, o_whh, o_bih, o_bhh)`` (the flat
# buffer and the offsets of W_ih, W_hh, b_ih, b_hh: :func:`weight_bundle`), the backward its read-only sequence
# arrays as another (``seq = (X, h0, starts, HS, G, DHS)``) and its chunk tree as a third. Arrays written
# inside a ``prange`` are separate arguments: Numba's parallel lowering does not always keep writes to an
# array taken from a tuple there. :func:`forward_kernel`, :func:`backward_kernel` and :func:`weight_bundle` are
# public: PPO's compiled minibatch loop calls the kernels on buffers it keeps (``memory_pass.py``).


def weight_bundle(layout, params):
    """The kernels' weight bundle: ``params`` and the offsets of W_ih, W_hh, b_ih, b_hh in it."""
    return (params, layout.w_ih, layout.w_hh, layout.b_ih, layout.b_hh)


@njit(cache=True, error_model="numpy")
def _recur_rows(w, Gi, gi0, Hp, reset, has_reset, Hout, G, Gh, r0, r1):
    """The recurrent half of one step for batch rows r0:r1, given their input products ``W_ih x`` at rows
    ``gi0 ..`` of ``Gi`` (B, 3H): ``Hout = GRU(x, Hp)`` (``Hp`` taken as zero on rows where ``has_reset and
    reset``), the gates r, z, n and ``W_hn h + b_hn`` into ``G`` (B, 4H). ``Gh`` (B, 3H) is scratch.
    ``Hout`` may be ``Hp``: each element of ``Hp`` is read before it is written."""
    params, _, o_whh, o_bih, o_bhh = w
    hid = Hp.shape[1]
    g3 = 3 * hid
    one = np.ones(1, G.dtype)[0]
    zero = one - one
    half = one / (one + one)
    gemm(
        NO_TRANS,
        TRANS,
        (r1 - r0, g3, hid),
        one,
        (address(Hp, r0 * hid), hid),
        (address(params, o_whh), hid),
        zero,
        (address(Gh, r0 * g3), g3),
    )
    bih = params[o_bih : o_bih + g3]
    bhh = params[o_bhh : o_bhh + g3]
    for i in range(r0, r1):
        gi = gi0 + i - r0
        keep = not (has_reset and reset[i])
        if not keep:
            for j in range(g3):
                Gh[i, j] = zero
        for j in range(hid):
            a_r = (Gi[gi, j] + bih[j]) + (Gh[i, j] + bhh[j])
            a_z = (Gi[gi, hid + j] + bih[hid + j]) + (Gh[i, hid + j] + bhh[hid + j])
            r = half + half * fast_tanh(half * a_r)
            z = half + half * fast_tanh(half * a_z)
            ghn = Gh[i, 2 * hid + j] + bhh[2 * hid + j]
            n = fast_tanh((Gi[gi, 2 * hid + j] + bih[2 * hid + j]) + r * ghn)
            hp = Hp[i, j] if keep else zero
            Hout[i, j] = (one - z) * n + z * hp
            G[i, j] = r
            G[i, hid + j] = z
            G[i, 2 * hid + j] = n
            G[i, 3 * hid + j] = ghn


@njit(cache=True, error_model="numpy")
def step_rows(w, X, Hp, reset, has_reset, Hout, G, Gi, Gh, r0, r1):
    """One GRU step for batch rows r0:r1: their input products ``W_ih x`` into ``Gi`` (B, 3H), then
    :func:`_recur_rows`. Acting and learning both step through here, one product of the chunk's rows per
    step, so stepping one tick at a time gives the sequence forward's bits (a product's bits can depend on
    its shape: one product over the whole sequence would not)."""
    params, o_wih = w[0], w[1]
    n_in = X.shape[1]
    g3 = Gi.shape[1]
    one = np.ones(1, G.dtype)[0]
    gemm(
        NO_TRANS,
        TRANS,
        (r1 - r0, g3, n_in),
        one,
        (address(X, r0 * n_in), n_in),
        (address(params, o_wih), n_in),
        one - one,
        (address(Gi, r0 * g3), g3),
    )
    _recur_rows(w, Gi, r0, Hp, reset, has_reset, Hout, G, Gh, r0, r1)


@njit(cache=True, parallel=True, error_model="numpy")
def _step_kernel(w, X, Hp, reset, has_reset, Hout, G, Gi, Gh, chunk):
    """One step for every row (acting), a ``prange`` over chunks of rows."""
    n_batch = X.shape[0]
    n_chunks = (n_batch + chunk - 1) // chunk
    for c in prange(n_chunks):
        r0 = np.int64(c) * chunk
        r1 = min(n_batch, r0 + chunk)
        step_rows(w, X, Hp, reset, has_reset, Hout, G, Gi, Gh, r0, r1)


@njit(cache=True, parallel=True, error_model="numpy")
def forward_kernel(w, X, h0, starts, HS, G, Gi, Gh, chunk):
    """Each chunk of rows runs the whole sequence: step t from HS[t - 1] (h0 at t = 0) into HS[t]."""
    n_steps, n_batch = X.shape[0], X.shape[1]
    n_chunks = (n_batch + chunk - 1) // chunk
    for c in prange(n_chunks):
        r0 = np.int64(c) * chunk
        r1 = min(n_batch, r0 + chunk)
        for t in range(n_steps):
            Hp = h0 if t == 0 else HS[t - 1]
            step_rows(w, X[t], Hp, starts[t], True, HS[t], G[t], Gi, Gh, r0, r1)


@njit(cache=True, error_model="numpy", inline="always")
def _gate_grads_rows(seq, t, r0, r1, q0, DH0, DGi, DGh, XC, HPC):
    """Step t of chunk rows r0:r1 (sample rows ``q0 ..`` of the chunk-major scratch): the step's inputs
    into ``XC``, its previous state as the step saw it (zero after a reset) into ``HPC``, the gradients of
    the input and hidden pre-activations into ``DGi``, ``DGh`` and ``dh * z`` into ``DH0`` (dh = dL/dh_t:
    ``DHS[t]`` plus what ``DH0`` carries from step t + 1)."""
    X, h0, starts, HS, G, DHS = seq
    n_in = X.shape[2]
    hid = h0.shape[1]
    one = np.ones(1, DGi.dtype)[0]
    zero = one - one
    for i in range(r0, r1):
        q = q0 + i - r0
        for j in range(n_in):
            XC[q, j] = X[t, i, j]
        if starts[t, i]:
            for j in range(hid):
                HPC[q, j] = zero
        elif t == 0:
            for j in range(hid):
                HPC[q, j] = h0[i, j]
        else:
            for j in range(hid):
                HPC[q, j] = HS[t - 1, i, j]
        for j in range(hid):
            dh = DHS[t, i, j] + DH0[i, j]
            r = G[t, i, j]
            z = G[t, i, hid + j]
            n = G[t, i, 2 * hid + j]
            ghn = G[t, i, 3 * hid + j]
            da_n = dh * (one - z) * (one - n * n)
            da_r = da_n * ghn * (r * (one - r))
            da_z = dh * (HPC[q, j] - n) * (z * (one - z))
            DGi[q, j] = da_r
            DGi[q, hid + j] = da_z
            DGi[q, 2 * hid + j] = da_n
            DGh[q, j] = da_r
            DGh[q, hid + j] = da_z
            DGh[q, 2 * hid + j] = da_n * r
            DH0[i, j] = dh * z


@njit(cache=True, error_model="numpy")
def _chunk_grad(base, k, DGi, DGh, XC, HPC, s):
    """A chunk's gradient into ``s``, in the GRU's own layout (W_ih, W_hh, b_ih, b_hh), from its ``k``
    samples at rows ``base ..`` of the scratch: the weight gradients as one product each, the bias
    gradients as sums in sample order."""
    n_in = XC.shape[1]
    hid = HPC.shape[1]
    g3 = 3 * hid
    one = np.ones(1, s.dtype)[0]
    zero = one - one
    gemm(
        TRANS,
        NO_TRANS,
        (g3, n_in, k),
        one,
        (address(DGi, base * g3), g3),
        (address(XC, base * n_in), n_in),
        zero,
        (address(s, 0), n_in),
    )
    o_hh = g3 * n_in
    gemm(
        TRANS,
        NO_TRANS,
        (g3, hid, k),
        one,
        (address(DGh, base * g3), g3),
        (address(HPC, base * hid), hid),
        zero,
        (address(s, o_hh), hid),
    )
    o_bi = o_hh + g3 * hid
    o_bh = o_bi + g3
    for j in range(g3):
        s[o_bi + j] = zero
        s[o_bh + j] = zero
    for q in range(base, base + k):
        for j in range(g3):
            s[o_bi + j] += DGi[q, j]
        for j in range(g3):
            s[o_bh + j] += DGh[q, j]


@njit(cache=True, error_model="numpy")
def _backward_chunk(w, seq, DX, DH0, DGi, DGh, XC, HPC, slots, c, chunk):
    """Chunk c's backward through time, t = T-1 down to 0, then its whole gradient into ``slots[c]``.

    Chunk-major scratch: the chunk's sample (t, row i) is row ``T * r0 + t * m + (i - r0)`` of ``DGi``,
    ``DGh`` (gradients of the input and hidden pre-activations, (T*B, 3H)), ``XC`` (the inputs, (T*B, I))
    and ``HPC`` (the previous states as the step saw them, zero after a reset, (T*B, H)), so the chunk's
    samples are one block of rows in (t, row) order. ``DH0`` carries dL/dh_{t-1} between steps and ends
    as dL/dh0. ``DX`` (T, B, I) receives dL/dx; with no rows (T = 0) that product is skipped."""
    params, o_wih, o_whh = w[0], w[1], w[2]
    starts = seq[2]
    n_steps, n_batch = starts.shape
    n_in = XC.shape[1]
    hid = HPC.shape[1]
    g3 = 3 * hid
    r0 = c * chunk
    r1 = min(n_batch, r0 + chunk)
    m = r1 - r0
    base = n_steps * r0
    one = np.ones(1, DGi.dtype)[0]
    zero = one - one
    for i in range(r0, r1):
        for j in range(hid):
            DH0[i, j] = zero
    for tt in range(n_steps):
        t = n_steps - 1 - tt
        q0 = base + t * m
        _gate_grads_rows(seq, t, r0, r1, q0, DH0, DGi, DGh, XC, HPC)
        # dL/dh_{t-1} = dh * z + dGh @ W_hh; nothing flows back past an episode start
        gemm(
            NO_TRANS,
            NO_TRANS,
            (m, hid, g3),
            one,
            (address(DGh, q0 * g3), g3),
            (address(params, o_whh), hid),
            one,
            (address(DH0, r0 * hid), hid),
        )
        for i in range(r0, r1):
            if starts[t, i]:
                for j in range(hid):
                    DH0[i, j] = zero
        # dL/dx_t = dGi @ W_ih, unless the caller passed an empty ``DX`` (PPO's memory pass: its input is
        # the observation, which needs no gradient)
        if DX.shape[0] != 0:
            gemm(
                NO_TRANS,
                NO_TRANS,
                (m, n_in, g3),
                one,
                (address(DGi, q0 * g3), g3),
                (address(params, o_wih), n_in),
                zero,
                (address(DX, (t * n_batch + r0) * n_in), n_in),
            )
    _chunk_grad(base, n_steps * m, DGi, DGh, XC, HPC, slots[c])


@njit(cache=True, parallel=True, error_model="numpy")
def backward_kernel(w, seq, DX, DH0, DGi, DGh, XC, HPC, slots, chunk, tree, grad):
    """All chunks' backward (a ``prange`` over chunks); then, unless the tree's ``mode`` is 0, a ``prange``
    over fixed element blocks, each adding its columns of the chunk slots along the tree ``ops`` (in place)
    and writing ``grad[g0 + e]`` = the root's value (``mode`` 1) or ``grad[g0 + e] + `` that value (``mode``
    2). ``tree = (ops, root, g0, mode)``."""
    ops, root, g0, mode = tree
    n_batch = seq[2].shape[1]
    n_chunks = (n_batch + chunk - 1) // chunk
    for c in prange(n_chunks):
        _backward_chunk(w, seq, DX, DH0, DGi, DGh, XC, HPC, slots, np.int64(c), chunk)
    if mode != 0:
        size = slots.shape[1]
        n_items = (size + SUM_BLOCK - 1) // SUM_BLOCK
        for it in prange(n_items):
            e0 = np.int64(it) * SUM_BLOCK
            e1 = min(size, e0 + SUM_BLOCK)
            tree_add_run(slots, ops, e0, e1)
            if mode == 1:
                for e in range(e0, e1):
                    grad[g0 + e] = slots[root, e]
            else:
                for e in range(e0, e1):
                    grad[g0 + e] = grad[g0 + e] + slots[root, e]


# ---- the public functions ---------------------------------------------------------------------------------------
def gru_step(layout, params, x, h, reset=None, out=None, chunk=DEFAULT_CHUNK):
    """One step for a batch (acting: every actor at once). ``x`` (B, I), ``h`` (B, H), ``reset`` (B,) bool
    or None (rows where True start from a zero state: episode start), all in ``params``' dtype. Writes
    and returns ``out`` (B, H), a new array when None; ``out`` may be ``h`` (updated in place)."""
    _check_flat("params", params, layout, None)
    dt = params.dtype
    if not isinstance(x, np.ndarray) or x.ndim != 2:
        raise GruError(f"x must be a (B, {layout.n_in}) array, got {_describe(x)}")
    n_batch = x.shape[0]
    if n_batch < 1:
        raise GruError("x has no rows: B must be at least 1")
    x = _array("x", x, (n_batch, layout.n_in), dt)
    h_in = _array("h", h, (n_batch, layout.hidden), dt)
    if reset is None:
        mask, has_reset = np.zeros(1, np.bool_), False
    else:
        mask, has_reset = _array("reset", reset, (n_batch,), np.bool_), True
    if out is None:
        out = np.empty((n_batch, layout.hidden), dt)
    elif out is not h:
        _array("out", out, (n_batch, layout.hidden), dt, finite=False)
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise GruError("out must be contiguous and writeable")
    chunk = _chunk(chunk)
    three_h = 3 * layout.hidden
    G = np.empty((n_batch, N_GATES * layout.hidden), dt)
    Gi = np.empty((n_batch, three_h), dt)
    Gh = np.empty((n_batch, three_h), dt)
    _step_kernel(weight_bundle(layout, params), x, h_in, mask, has_reset, out, G, Gi, Gh, chunk)
    return out


def gru_forward(layout, params, x, h0, starts, chunk=DEFAULT_CHUNK):
    """The forward pass over whole sequences: ``x`` (T, B, I), ``h0`` (B, H) in ``params``' dtype, ``starts``
    (T, B) bool (the state is reset to zero before step t where ``starts[t, b]``). Returns ``(hs, saved)``:
    every state ``hs`` (T, B, H) (``hs[t]`` after step t) and the gates ``saved`` (T, B, 4H): r, z, n and
    ``W_hn h + b_hn``, which :func:`gru_backward` needs."""
    x, h0, starts = _sequence_inputs(layout, params, x, h0, starts)
    chunk = _chunk(chunk)
    n_steps, n_batch = starts.shape
    dt = params.dtype
    hs = np.empty((n_steps, n_batch, layout.hidden), dt)
    saved = np.empty((n_steps, n_batch, N_GATES * layout.hidden), dt)
    gi = np.empty((n_batch, 3 * layout.hidden), dt)
    gh = np.empty((n_batch, 3 * layout.hidden), dt)
    forward_kernel(weight_bundle(layout, params), x, h0, starts, hs, saved, gi, gh, chunk)
    return hs, saved


def _backward(layout, params, x, h0, starts, hs, saved, dhs, chunk, grad, mode):
    x, h0, starts = _sequence_inputs(layout, params, x, h0, starts)
    chunk = _chunk(chunk)
    n_steps, n_batch = starts.shape
    dt = params.dtype
    hid = layout.hidden
    hs = _array("hs", hs, (n_steps, n_batch, hid), dt)
    saved = _array("saved", saved, (n_steps, n_batch, N_GATES * hid), dt)
    dhs = _array("dhs", dhs, (n_steps, n_batch, hid), dt)
    n_chunks = (n_batch + chunk - 1) // chunk
    ops, root = tree_ops(0, n_chunks, {(k, k + 1): k for k in range(n_chunks)})
    if grad is None:
        grad, g0 = np.zeros(1, dt), 0
    else:
        _check_flat("grad", grad, layout, dt)
        g0 = layout.offset
    rows = n_steps * n_batch
    dx = np.empty((n_steps, n_batch, layout.n_in), dt)
    dh0 = np.empty((n_batch, hid), dt)
    slots = np.empty((n_chunks, layout.size), dt)
    backward_kernel(
        weight_bundle(layout, params),
        (x, h0, starts, hs, saved, dhs),
        dx,
        dh0,
        np.empty((rows, 3 * hid), dt),
        np.empty((rows, 3 * hid), dt),
        np.empty((rows, layout.n_in), dt),
        np.empty((rows, hid), dt),
        slots,
        chunk,
        (ops, root, g0, mode),
        grad,
    )
    return dx, dh0, slots


def gru_backward(layout, params, x, h0, starts, hs, saved, dhs, grad, chunk=DEFAULT_CHUNK, accumulate=False):
    """Backward through time of :func:`gru_forward` (same ``x``, ``h0``, ``starts``, ``chunk``; its ``hs``
    and ``saved``) for ``dhs`` (T, B, H) = dL/dh_t from above, every t. Writes the parameter gradient into
    ``grad``'s GRU part (``grad`` flat, the layout's size and dtype; ``accumulate``: added to what is there,
    once, after the chunks' sum) and returns ``(dx, dh0)``: dL/dx (T, B, I) and dL/dh0 (B, H). No gradient
    flows back past an episode start. Order of sums: see the module doc."""
    if grad is None:
        raise GruError("grad must be a flat array (gru_backward_chunks gives the per-chunk gradients)")
    dx, dh0, _ = _backward(layout, params, x, h0, starts, hs, saved, dhs, chunk, grad, 2 if accumulate else 1)
    return dx, dh0


def gru_backward_chunks(layout, params, x, h0, starts, hs, saved, dhs, chunk=DEFAULT_CHUNK):
    """As :func:`gru_backward`, but returns ``(dx, dh0, chunk_grads)`` with each chunk's own gradient
    (n_chunks, size) in the GRU's layout (offset 0), unsummed: the pieces that ``blocks.tree_ops`` over
    chunk indices adds into :func:`gru_backward`'s gradient, for callers that hold a shard of the chunks."""
    return _backward(layout, params, x, h0, starts, hs, saved, dhs, chunk, None, 0)
