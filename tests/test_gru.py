"""The GRU core (navi_nb/learn/gru.py) against independent answers: a plain NumPy float64 GRU (forward),
central differences of that reference's loss (gradients, with episode starts inside the sequence),
PyTorch's nn.GRU when it is installed, the same bits at 1 and 2 threads and for shards of chunks, and
bad input.

The gradient check runs the module's own kernels in float64 (the same source; tanh is then exact) and
differentiates the NumPy reference numerically, so neither side's derivation is trusted; the float32
kernels are held to the float64 ones."""

import numba
import numpy as np
import pytest

import navi_nb  # noqa: F401
from navi_nb.errors import NaviError
from navi_nb.learn import gru
from navi_nb.learn.blocks import tree_ops
from navi_nb.learn.params import ParamLayout

TORCH_REASON = "needs PyTorch (in the test extra): pip install -e '.[test]'"


# ---- the reference: PyTorch's equations, plainly ----------------------------------------------------------------
def sigmoid(a):
    return 1.0 / (1.0 + np.exp(-a))


def ref_weights(layout, params):
    v = layout.views(params.astype(np.float64))
    return v["W_ih"], v["W_hh"], v["b_ih"], v["b_hh"]


def ref_step(w, x, h):
    W_ih, W_hh, b_ih, b_hh = w
    H = h.shape[1]
    gi = x @ W_ih.T + b_ih
    gh = h @ W_hh.T + b_hh
    r = sigmoid(gi[:, :H] + gh[:, :H])
    z = sigmoid(gi[:, H : 2 * H] + gh[:, H : 2 * H])
    n = np.tanh(gi[:, 2 * H :] + r * gh[:, 2 * H :])
    return (1 - z) * n + z * h


def ref_forward(w, x, h0, starts):
    h = h0
    out = []
    for t in range(x.shape[0]):
        h = np.where(starts[t][:, None], 0.0, h)
        h = ref_step(w, x[t], h)
        out.append(h)
    return np.stack(out)


def make_case(T, B, I, H, dtype, seed=0, starts_at=()):
    layout = gru.gru_layout(I, H)
    params = gru.init_gru(layout, np.zeros(layout.size, dtype), np.random.default_rng(seed))
    rng = np.random.default_rng(seed + 1)
    x = rng.standard_normal((T, B, I)).astype(dtype)
    h0 = (0.5 * rng.standard_normal((B, H))).astype(dtype)
    starts = np.zeros((T, B), bool)
    for t, b in starts_at:
        starts[t, b] = True
    dhs = rng.standard_normal((T, B, H)).astype(dtype)
    return layout, params, x, h0, starts, dhs


# ---- layout and initialisation ----------------------------------------------------------------------------------
def test_layout_matches_pytorch_order_and_param_layout():
    layout = gru.gru_layout(5, 3, offset=7)
    assert (layout.w_ih, layout.w_hh, layout.b_ih, layout.b_hh, layout.end) == (7, 52, 79, 88, 97)
    assert layout.size == 3 * 3 * (5 + 3 + 2)
    pl = ParamLayout([("before", (7,))] + layout.entries("core"))
    assert pl.size == layout.end and pl.index["core.W_hh"] == ((9, 3), layout.w_hh)
    flat = np.arange(pl.size, dtype=np.float32)
    v = layout.views(flat)
    assert v["W_ih"].shape == (9, 5) and v["b_hh"].shape == (9,)
    assert v["W_ih"][0, 0] == 7 and v["b_hh"][-1] == pl.size - 1
    assert np.shares_memory(v["W_hh"], flat)


def test_init_is_seeded_and_bounded():
    layout = gru.gru_layout(6, 4, offset=2)
    a = gru.init_gru(layout, np.zeros(layout.end + 3, np.float32), np.random.default_rng(3))
    b = gru.init_gru(layout, np.zeros(layout.end + 3, np.float32), np.random.default_rng(3))
    assert a.tobytes() == b.tobytes()
    assert not a[:2].any() and not a[layout.end :].any()
    block = a[layout.offset : layout.end]
    assert np.abs(block).max() <= 0.5 and np.abs(block).min() > 0  # 1/sqrt(4)


# ---- forward ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-12), (np.float32, 2e-5)])
def test_forward_against_reference(dtype, tol):
    layout, params, x, h0, starts, _ = make_case(7, 19, 6, 5, dtype, starts_at=((0, 3), (3, 0), (3, 18), (6, 7)))
    hs, saved = gru.gru_forward(layout, params, x, h0, starts, chunk=8)  # chunks of 8, 8 and 3 rows
    want = ref_forward(ref_weights(layout, params), x.astype(np.float64), h0.astype(np.float64), starts)
    np.testing.assert_allclose(hs, want, rtol=0, atol=tol)
    assert hs.dtype == dtype and saved.shape == (7, 19, 4 * 5)
    r, z = saved[..., :5], saved[..., 5:10]
    assert (r > 0).all() and (r < 1).all() and (z > 0).all() and (z < 1).all()


def test_step_against_reference_and_in_place():
    layout, params, x, h0, _, _ = make_case(1, 21, 6, 5, np.float32)
    reset = np.zeros(21, bool)
    reset[[0, 4, 20]] = True
    w = ref_weights(layout, params)
    want = ref_step(w, x[0].astype(np.float64), np.where(reset[:, None], 0.0, h0.astype(np.float64)))
    h1 = gru.gru_step(layout, params, x[0], h0, reset, chunk=8)
    np.testing.assert_allclose(h1, want, rtol=0, atol=2e-5)
    h0[reset] = 1e30  # a reset row's old state is never read
    h = h0.copy()
    assert gru.gru_step(layout, params, x[0], h, reset, out=h, chunk=8) is h
    assert h.tobytes() == h1.tobytes()
    plain = gru.gru_step(layout, params, x[0], np.where(reset[:, None], 0, h0).astype(np.float32), chunk=8)
    assert plain.tobytes() == h1.tobytes()


@pytest.mark.parametrize(
    "shape",
    [(6, 20, 6, 5, 8), (16, 16, 264, 64, 4)],  # small, and the quick start's sensor with PPO's chunks
    ids=["small", "quickstart"],
)
def test_steps_give_the_sequence_forward_bits(shape):
    """Acting one step at a time gives the learning pass's states, bit for bit (same batch and chunk),
    also where a product over more rows would round otherwise."""
    n_steps, n_batch, n_in, hid, chunk = shape
    layout, params, x, h0, starts, _ = make_case(
        n_steps, n_batch, n_in, hid, np.float32, starts_at=((2, 1), (4, n_batch - 1))
    )
    hs, _ = gru.gru_forward(layout, params, x, h0, starts, chunk=chunk)
    h = h0.copy()
    for t in range(n_steps):
        gru.gru_step(layout, params, x[t], h, starts[t], out=h, chunk=chunk)
        assert h.tobytes() == hs[t].tobytes()


# ---- gradients --------------------------------------------------------------------------------------------------
def ref_loss(layout, params, x, h0, starts, dhs):
    return float((ref_forward(ref_weights(layout, params), x, h0, starts) * dhs).sum())


def central(f, a, eps=1e-5):
    """Fourth-order central differences of f() with respect to every element of a (changed in place)."""
    g = np.zeros(a.shape)
    flat, gf = a.reshape(-1), g.reshape(-1)
    for k in range(flat.size):
        v = flat[k]
        vals = []
        for s in (2, 1, -1, -2):
            flat[k] = v + s * eps
            vals.append(f())
        flat[k] = v
        gf[k] = (-vals[0] + 8 * vals[1] - 8 * vals[2] + vals[3]) / (12 * eps)
    return g


STARTS = ((0, 1), (2, 0), (2, 2), (4, 1))


def test_gradients_against_finite_differences():
    """The loss sum(dhs * hs) of the reference; its gradient with respect to every parameter, every input
    and h0 against the float64 kernels, with episode starts inside the sequence and a partial chunk."""
    layout, params, x, h0, starts, dhs = make_case(6, 3, 4, 3, np.float64, seed=5, starts_at=STARTS)
    hs, saved = gru.gru_forward(layout, params, x, h0, starts, chunk=2)
    grad = np.full(layout.size, np.nan)
    dx, dh0 = gru.gru_backward(layout, params, x, h0, starts, hs, saved, dhs, grad, chunk=2)
    for name, got, wrt in (("params", grad, params), ("x", dx, x), ("h0", dh0, h0)):
        want = central(lambda: ref_loss(layout, params, x, h0, starts, dhs), wrt)
        err = np.abs(got - want) / np.maximum(np.abs(want), 1e-3)
        assert err.max() < 1e-7, f"{name}: worst relative error {err.max():.2e}"
    assert not dh0[1].any()  # actor 1 starts an episode at t = 0: h0 does not matter to it


def test_gradient_stops_at_episode_starts():
    """dL/dh_t after an episode start reaches nothing before it (exact zeros)."""
    layout, params, x, h0, starts, dhs = make_case(6, 3, 4, 3, np.float64, seed=5, starts_at=STARTS)
    dhs[:2] = 0  # only states from t = 2 on are scored; actors 0 and 2 start again at t = 2
    hs, saved = gru.gru_forward(layout, params, x, h0, starts, chunk=2)
    dx, dh0 = gru.gru_backward(layout, params, x, h0, starts, hs, saved, dhs, np.zeros(layout.size), chunk=2)
    assert not dx[:2, [0, 2]].any() and not dh0[[0, 2]].any()
    assert dx[:2, 1].any()  # actor 1 runs on from t = 0 to t = 3


def test_float32_gradients_near_float64():
    cases = [make_case(9, 11, 6, 5, dt, seed=2, starts_at=((3, 4), (5, 10))) for dt in (np.float32, np.float64)]
    out = []
    for layout, params, x, h0, starts, dhs in cases:
        hs, saved = gru.gru_forward(layout, params, x, h0, starts, chunk=4)
        grad = np.zeros(layout.size, params.dtype)
        out.append((grad,) + gru.gru_backward(layout, params, x, h0, starts, hs, saved, dhs, grad, chunk=4))
    for a, b in zip(*out):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-4 * np.abs(b).max())


def test_accumulate_adds_once_into_the_gru_part():
    layout = gru.gru_layout(4, 3, offset=5)
    params = gru.init_gru(layout, np.zeros(layout.end + 2, np.float32), np.random.default_rng(0))
    _, _, x, h0, starts, dhs = make_case(4, 5, 4, 3, np.float32, starts_at=((1, 2),))
    hs, saved = gru.gru_forward(layout, params, x, h0, starts, chunk=2)
    g1 = np.full(params.size, 7.0, np.float32)
    gru.gru_backward(layout, params, x, h0, starts, hs, saved, dhs, g1, chunk=2)
    assert (g1[:5] == 7).all() and (g1[layout.end :] == 7).all()
    g2 = np.full(params.size, 0.25, np.float32)
    gru.gru_backward(layout, params, x, h0, starts, hs, saved, dhs, g2, chunk=2, accumulate=True)
    part = slice(layout.offset, layout.end)
    assert g2[part].tobytes() == (np.float32(0.25) + g1[part]).tobytes()


# ---- the order of sums: threads, shards ------------------------------------------------------------------------
def run_all(layout, params, x, h0, starts, dhs, chunk):
    hs, saved = gru.gru_forward(layout, params, x, h0, starts, chunk=chunk)
    grad = np.zeros(layout.size, params.dtype)
    dx, dh0 = gru.gru_backward(layout, params, x, h0, starts, hs, saved, dhs, grad, chunk=chunk)
    step = gru.gru_step(layout, params, x[0], h0, starts[1], chunk=chunk)
    return [a.tobytes() for a in (hs, saved, grad, dx, dh0, step)]


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="Numba started with one thread")
def test_same_bits_at_one_and_two_threads():
    case = make_case(12, 40, 16, 8, np.float32, seed=4, starts_at=((5, 3), (9, 39), (0, 20)))
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = run_all(*case, chunk=8)
        numba.set_num_threads(2)
        two = run_all(*case, chunk=8)
    finally:
        numba.set_num_threads(before)
    assert one == two
    assert run_all(*case, chunk=16)[2] != one[2]  # the chunk is part of the configuration: the test can fail


def test_chunk_gradients_are_the_shards_and_add_along_the_tree():
    """A chunk's gradient depends on its rows only: a shard holding a run of chunks computes the same chunk
    gradients, and the blocks' tree over them gives gru_backward's gradient."""
    chunk = 4
    layout, params, x, h0, starts, dhs = make_case(7, 20, 6, 5, np.float32, seed=9, starts_at=((2, 5), (4, 13)))
    hs, saved = gru.gru_forward(layout, params, x, h0, starts, chunk=chunk)
    dx, dh0, slots = gru.gru_backward_chunks(layout, params, x, h0, starts, hs, saved, dhs, chunk=chunk)
    assert slots.shape == (5, layout.size)
    for a, b in ((0, 2), (2, 5)):  # two shards: chunks 0-1 and 2-4
        rows = slice(a * chunk, b * chunk)
        part = [np.ascontiguousarray(v[:, rows]) for v in (x, hs, saved, dhs)]
        s_x, s_hs, s_saved, s_dhs = part
        s_starts = np.ascontiguousarray(starts[:, rows])
        sdx, sdh0, sslots = gru.gru_backward_chunks(
            layout, params, s_x, h0[rows], s_starts, s_hs, s_saved, s_dhs, chunk=chunk
        )
        assert sslots.tobytes() == slots[a:b].tobytes()
        assert sdx.tobytes() == np.ascontiguousarray(dx[:, rows]).tobytes() and sdh0.tobytes() == dh0[rows].tobytes()
    ops, root = tree_ops(0, 5, {(k, k + 1): k for k in range(5)})
    buf = slots.copy()
    for d, l, r in ops:
        buf[d] = buf[l] + buf[r]
    grad = np.zeros(layout.size, np.float32)
    gru.gru_backward(layout, params, x, h0, starts, hs, saved, dhs, grad, chunk=chunk)
    assert grad.tobytes() == buf[root].tobytes()


# ---- PyTorch ----------------------------------------------------------------------------------------------------
def torch_gru(layout, params, cell):
    """A torch nn.GRU (or nn.GRUCell) in float64 holding our parameters."""
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    I, H = layout.n_in, layout.hidden
    mod = torch.nn.GRUCell(I, H, dtype=torch.float64) if cell else torch.nn.GRU(I, H, dtype=torch.float64)
    suffix = "" if cell else "_l0"
    v = layout.views(params)
    with torch.no_grad():
        for ours, theirs in (("W_ih", "weight_ih"), ("W_hh", "weight_hh"), ("b_ih", "bias_ih"), ("b_hh", "bias_hh")):
            getattr(mod, theirs + suffix).copy_(torch.from_numpy(v[ours].astype(np.float64)))
    flat = torch.cat([p.detach().reshape(-1) for p in mod.parameters()]).numpy()
    assert flat.tobytes() == params[layout.offset : layout.end].astype(np.float64).tobytes()
    return torch, mod


@pytest.mark.parametrize("with_starts", [False, True])
def test_against_pytorch(with_starts):
    """Forward and every gradient against torch.nn.GRU (no starts) and an nn.GRUCell loop that zeroes the
    state at episode starts (with starts), all in float64; the float32 forward too."""
    layout, params, x, h0, starts, dhs = make_case(
        8, 5, 6, 4, np.float64, seed=11, starts_at=((0, 2), (3, 0), (5, 4)) if with_starts else ()
    )
    torch, mod = torch_gru(layout, params, cell=with_starts)
    tx = torch.from_numpy(x.copy()).requires_grad_(True)
    th0 = torch.from_numpy(h0.copy()).requires_grad_(True)
    if with_starts:
        keep = torch.from_numpy((~starts).astype(np.float64))
        h, outs = th0, []
        for t in range(x.shape[0]):
            h = mod(tx[t], h * keep[t][:, None])
            outs.append(h)
        out = torch.stack(outs)
    else:
        out, _ = mod(tx, th0[None])
    (out * torch.from_numpy(dhs)).sum().backward()
    theirs_grad = torch.cat([p.grad.reshape(-1) for p in mod.parameters()]).numpy()

    hs, saved = gru.gru_forward(layout, params, x, h0, starts, chunk=2)
    grad = np.zeros(layout.size)
    dx, dh0 = gru.gru_backward(layout, params, x, h0, starts, hs, saved, dhs, grad, chunk=2)
    np.testing.assert_allclose(hs, out.detach().numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(grad, theirs_grad, rtol=0, atol=1e-11)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=0, atol=1e-11)
    np.testing.assert_allclose(dh0, th0.grad.numpy(), rtol=0, atol=1e-11)

    hs32, _ = gru.gru_forward(
        layout, params.astype(np.float32), x.astype(np.float32), h0.astype(np.float32), starts, chunk=2
    )
    np.testing.assert_allclose(hs32, out.detach().numpy(), rtol=0, atol=2e-5)


# ---- bad input --------------------------------------------------------------------------------------------------
def bad_calls():
    layout, params, x, h0, starts, dhs = make_case(3, 4, 5, 2, np.float32)
    hs, saved = np.zeros((3, 4, 2), np.float32), np.zeros((3, 4, 8), np.float32)  # shapes only: nothing runs
    grad = np.zeros(layout.size, np.float32)
    nan_x = x.copy()
    nan_x[1, 2, 3] = np.nan

    def fwd(**kw):
        p, xx, hh, ss = (kw.get(k, d) for k, d in (("params", params), ("x", x), ("h0", h0), ("starts", starts)))
        return lambda: gru.gru_forward(layout, p, xx, hh, ss)

    def bwd(**kw):
        hh, dd, gg = (kw.get(k, d) for k, d in (("hs", hs), ("dhs", dhs), ("grad", grad)))
        return lambda: gru.gru_backward(layout, params, x, h0, starts, hh, saved, dd, gg)

    def step(**kw):
        xx, hh = kw.get("x", x[0]), kw.get("h", h0)
        return lambda: gru.gru_step(layout, params, xx, hh, kw.get("reset"), kw.get("out"), kw.get("chunk", 16))

    return [
        ("hidden", lambda: gru.gru_layout(5, -1)),
        ("n_in", lambda: gru.gru_layout(0, 4)),
        ("hidden", lambda: gru.gru_layout(5, 2.5)),
        ("offset", lambda: gru.gru_layout(5, 2, offset=-3)),
        ("params", lambda: gru.init_gru(layout, np.zeros(layout.size - 1, np.float32), np.random.default_rng())),
        ("rng", lambda: gru.init_gru(layout, params.copy(), 0)),
        ("params", fwd(params=params.astype(np.float16))),
        ("params", fwd(params=params.reshape(1, -1))),
        ("x", fwd(x=x.astype(np.float64))),
        ("x", fwd(x=x[..., :4])),
        ("x", fwd(x=x[0])),
        ("x", fwd(x=nan_x)),
        ("h0", fwd(h0=h0[:3])),
        ("h0", fwd(h0=h0.astype(np.float64))),
        ("starts", fwd(starts=starts.astype(np.int8))),
        ("starts", fwd(starts=starts[:2])),
        ("hs", bwd(hs=hs[:, :3])),
        ("dhs", bwd(dhs=dhs.astype(np.float64))),
        ("grad", bwd(grad=np.zeros(layout.size, np.float64))),
        ("grad", bwd(grad=np.zeros(layout.size - 1, np.float32))),
        ("grad", bwd(grad=None)),
        ("x", step(x=x[0, :, :3])),
        ("h", step(h=h0.T.copy())),
        ("reset", step(reset=np.zeros(3, bool))),
        ("reset", step(reset=np.zeros(4, np.int64))),
        ("out", step(out=np.zeros((4, 2), np.float64))),
        ("chunk", step(chunk=0)),
    ]


@pytest.mark.parametrize("index", range(len(bad_calls())))
def test_bad_input_raises_one_line(index):
    argument, call = bad_calls()[index]
    with pytest.raises(gru.GruError) as info:
        call()
    message = str(info.value)
    assert isinstance(info.value, NaviError) and "\n" not in message and argument in message, message
