"""Kernel pieces against independent answers: gemm (both bindings), tanh32,
the forward layer and the activation derivative, the parameter layout, the
policy's distribution, bad input, and the one-call minibatches path."""

import os
import subprocess
import sys

import numpy as np
import pytest

import navi_nb  # noqa: F401
from navi_nb.learn import acting, blas, mlp
from navi_nb.learn.params import Dense, ParamError, ParamLayout
from navi_nb.learn.policy import ActorCritic, PolicyError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_all_transposes(dtype):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((7, 5)).astype(dtype)
    b = rng.standard_normal((5, 3)).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for ta, tb, A, B in (
        (False, False, a, b),
        (True, False, a.T.copy(), b),
        (False, True, a, b.T.copy()),
        (True, True, a.T.copy(), b.T.copy()),
    ):
        c = np.zeros((7, 3), dtype)
        blas.matmul_into(A, B, c, ta, tb)
        np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=tol, atol=tol)


def test_gemm_numba_fallback_agrees():
    """The plain-loop gemm (NAVI_NB_GEMM=numba) gives the same products to rounding."""
    code = (
        "import numpy as np, navi_nb; from navi_nb.learn import blas; "
        "rng=np.random.default_rng(1); a=rng.standard_normal((33,17)).astype(np.float32); "
        "b=rng.standard_normal((17,9)).astype(np.float32); c=np.zeros((33,9),np.float32); "
        "blas.matmul_into(a,b,c,False,False); c2=np.zeros((17,17),np.float32); "
        "blas.matmul_into(a,a,c2,True,False); "
        "print(blas.GEMM_BACKEND, float(abs(c-a.astype(np.float64)@b).max()), "
        "float(abs(c2-a.T.astype(np.float64)@a).max()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, NAVI_NB_GEMM="numba"),
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    name, e1, e2 = out.stdout.split()
    assert name == "numba" and float(e1) < 1e-4 and float(e2) < 1e-4


def test_tanh32_accuracy():
    x = np.linspace(-20, 20, 400_001).astype(np.float32)[None, :]
    h = x.copy()
    mlp.bias_act_rows(h, np.zeros(x.shape[1], np.float32), 0, 1, mlp.TANH)
    err = np.abs(h.astype(np.float64) - np.tanh(x.astype(np.float64)))
    assert err.max() < 4e-7
    assert h.max() <= 1.0 and h.min() >= -1.0


@pytest.mark.parametrize("act", ["tanh", "relu"])
def test_layer_forward_and_activation_derivative(act):
    """acting's forward of one layer (chunks of 16 rows, the last one short) and times_dact_rows (the
    fused backward pass's activation step) against NumPy; the whole backward pass and both
    weight-gradient decompositions are checked against the reference loss in test_learn_grad.py."""
    rng = np.random.default_rng(2)
    B, n_in, n_out = 70, 13, 11
    X = rng.standard_normal((B, n_in))
    W = rng.standard_normal((n_in, n_out))
    b = rng.standard_normal(n_out)
    code = mlp.ACTIVATIONS[act]
    params = np.concatenate([W.ravel(), b])
    layer = Dense("pi.0", n_in, n_out, 0)
    table, size = acting.layer_table([[layer]], code, code, B)
    acts = np.empty(size)
    acting.mlp_forward(params, table, X, acts, 16)
    H = acts.reshape(B, n_out)
    Z = X @ W + b
    ref = np.tanh(Z) if act == "tanh" else np.maximum(Z, 0)
    np.testing.assert_allclose(H, ref, rtol=1e-12, atol=1e-12)
    dH = rng.standard_normal((B, n_out))
    dZ = dH.copy()
    mlp.times_dact_rows(dZ, H, 0, B, code)
    dact = 1 - ref**2 if act == "tanh" else (Z > 0).astype(float)
    np.testing.assert_allclose(dZ, dH * dact, rtol=1e-12, atol=1e-12)


def test_layout_walk_order_and_views():
    lay = ParamLayout.actor_critic(10, 4, (8, 6), (5,))
    assert lay.names() == [
        "pi.0.W",
        "pi.0.b",
        "pi.1.W",
        "pi.1.b",
        "pi.out.W",
        "pi.out.b",
        "log_std",
        "v.0.W",
        "v.0.b",
        "v.out.W",
        "v.out.b",
    ]
    assert lay.size == 10 * 8 + 8 + 8 * 6 + 6 + 6 * 4 + 4 + 4 + 10 * 5 + 5 + 5 + 1
    flat = np.arange(lay.size, dtype=np.float32)
    v = lay.views(flat)
    assert np.shares_memory(v["v.0.W"], flat) and v["pi.1.W"].shape == (8, 6)
    assert v["pi.0.b"][0] == 80 and v["log_std"][0] == 80 + 8 + 48 + 6 + 24 + 4
    with pytest.raises(ParamError, match="layout needs"):
        lay.views(flat[:-1])


def test_init_gains_and_distribution():
    pol = ActorCritic(40, 4, hidden=(32, 16), seed=1)
    W0 = pol.p["pi.0.W"]  # (40, 32): orthonormal columns times sqrt(2)
    np.testing.assert_allclose(W0.T @ W0, 2 * np.eye(32), atol=1e-5)
    Wo = pol.p["pi.out.W"]  # (16, 4): orthonormal columns times 0.01
    np.testing.assert_allclose(Wo.T @ Wo, 1e-4 * np.eye(4), atol=1e-9)
    Wv = pol.p["v.out.W"]  # (16, 1): a unit column times 1.0
    assert abs(float(np.linalg.norm(Wv)) - 1.0) < 1e-5
    assert np.all(pol.p["pi.0.b"] == 0) and np.all(pol.p["log_std"] == 0)
    # log_prob and entropy against scipy's Gaussian
    from scipy.stats import norm

    pol.p["log_std"][...] = [-0.5, 0.0, 0.3, -1.0]
    obs = np.random.default_rng(0).standard_normal((9, 40)).astype(np.float32)
    a, lp, _ = pol.act(obs, np.random.default_rng(3))
    mu, _ = pol.forward(obs)
    ref = norm.logpdf(a, mu, np.exp(pol.p["log_std"])).sum(1)
    np.testing.assert_allclose(lp, ref, rtol=1e-5, atol=1e-5)
    assert pol.entropy() == pytest.approx(norm.entropy(0, np.exp(pol.p["log_std"].astype(float))).sum())
    # one noise draw for the whole batch: same generator state, same actions
    a2, _, _ = pol.act(obs, np.random.default_rng(3))
    assert np.array_equal(a, a2)
    with pytest.raises(PolicyError, match="expected"):
        pol.act(obs[:, :5], np.random.default_rng(0))
    with pytest.raises(PolicyError, match="activation"):
        ActorCritic(4, activation="gelu")


def test_bad_input_raises_before_any_change():
    from navi_nb.errors import NaviError
    from navi_nb.learn.ppo import PPO, PPOConfig, PPOConfigError
    from navi_nb.learn.rollout import RolloutSlab

    pol = ActorCritic(5, 4, hidden=(8,), seed=0)
    ppo = PPO(pol, PPOConfig(num_minibatches=2))
    slab = RolloutSlab(4, 3, 5, 4)
    before = (pol.params.copy(), ppo.adam.m.copy(), ppo.adam.t)
    with pytest.raises(PPOConfigError, match="set_source"):
        ppo.minibatches(np.arange(12), 4, 1)
    with pytest.raises(PPOConfigError, match="last_values"):
        ppo.update(slab, np.zeros(5))
    slab.reward[1, 2] = np.nan
    with pytest.raises(PPOConfigError, match="non-finite"):
        ppo.update(slab, np.zeros(3))
    slab.reward[1, 2] = 0
    ppo.set_source(slab.flat, 5, {k: slab.col(k) for k in ("actions", "logp", "value", "advantages", "returns")})
    with pytest.raises(PPOConfigError, match="outside"):
        ppo.minibatches(np.array([0, 1, 12]), 3, 1)
    with pytest.raises(PPOConfigError, match="outside"):
        ppo.minibatches(np.array([0, 1, 12, 3]), 2, 2)
    with pytest.raises(PPOConfigError, match="do not fit"):
        ppo.minibatches(np.arange(12), 5, 3)
    with pytest.raises(PPOConfigError, match="params"):
        ppo.set_state({"params": np.zeros(3, np.float32)})
    with pytest.raises(NaviError, match="grad_mode"):
        PPO(pol, PPOConfig(grad_mode="fast"))
    assert np.array_equal(pol.params, before[0]) and np.array_equal(ppo.adam.m, before[1])
    assert ppo.adam.t == before[2]
    # a good update after all that works and moves the weights
    slab.obs[...] = np.random.default_rng(0).standard_normal(slab.obs.shape)
    slab.reward[...] = 1.0
    stats = ppo.update(slab, np.zeros(3))
    assert stats["minibatches"] == 4 * 2 and not np.array_equal(pol.params, before[0])


def _ppo_on_synthetic(grad_mode, seed=0):
    from navi_nb.bench.ppo import synthetic
    from navi_nb.learn.ppo import PPO, PPOConfig

    pol = ActorCritic(23, 4, hidden=(16, 12), seed=seed)
    ppo = PPO(pol, PPOConfig(chunk_size=8, grad_mode=grad_mode, tile_rows=5, tile_cols=7))
    slab = synthetic(pol, 96, seed=seed)
    ppo.set_source(
        slab.flat, slab.obs_dim, {k: slab.col(k) for k in ("actions", "logp", "value", "advantages", "returns")}
    )
    return ppo


@pytest.mark.parametrize("grad_mode", ["chunk", "tile"])
def test_minibatches_in_one_call_equal_one_at_a_time(grad_mode):
    """PPO.minibatches (one compiled call per epoch, what update runs) gives the
    very bits of one call per minibatch (count 1): weights, moments, stats, norms."""
    order = np.random.default_rng(3).permutation(96)
    a, b = _ppo_on_synthetic(grad_mode), _ppo_on_synthetic(grad_mode)
    for epoch in range(2):
        lr = 3e-3 * (1 + epoch)
        steps = []
        for k in range(3):
            steps += a.minibatches(order[32 * k : 32 * (k + 1)], 32, 1, lr)
        got = b.minibatches(order, 32, 3, lr)
        assert len(got) == 3
        for (st_a, n_a), (st_b, n_b) in zip(steps, got):
            assert n_a == n_b and n_a > 0
            assert st_a == st_b
    for x, y in ((a.policy.params, b.policy.params), (a.adam.m, b.adam.m), (a.adam.v, b.adam.v)):
        assert x.tobytes() == y.tobytes()
    assert a.adam.t == b.adam.t == 6


def test_minibatches_stop_early_on_target_kl():
    ppo = _ppo_on_synthetic("chunk")
    order = np.arange(96)
    first = ppo.minibatches(order, 32, 1, 0.5)[0][0]["approx_kl"]  # a big step: the KL grows
    assert first >= 0.0
    got = ppo.minibatches(order, 32, 3, 0.5, target_kl=0.0)
    assert len(got) == 1 and got[0][0]["approx_kl"] > 0.0 and ppo.adam.t == 2


def test_ppo_state_round_trip_and_bad_state():
    from navi_nb.learn.ppo import PPOConfigError

    ppo = _ppo_on_synthetic("chunk")
    ppo.minibatches(np.arange(96), 32, 2, 1e-3)
    ppo.rng.permutation(5)
    saved = ppo.get_state()
    other = _ppo_on_synthetic("chunk", seed=1)
    other.set_state(saved)
    for key, val in other.get_state().items():
        assert np.asarray(val).tobytes() == np.asarray(saved[key]).tobytes(), key
    assert np.array_equal(other.rng.permutation(9), ppo.rng.permutation(9))
    before = other.get_state()
    for bad in (
        {**saved, "rng": saved["rng"].astype(np.int64)},
        {**saved, "rng": np.array([1, 0, 1, 0, 2, 0], np.uint64)},  # has_uint32 must be 0 or 1
        {**saved, "adam_t": np.array(-1)},
        {k: v for k, v in saved.items() if k != "updates_done"},
    ):
        with pytest.raises(PPOConfigError, match="PPO state"):
            other.set_state(bad)
        for key, val in other.get_state().items():
            assert np.asarray(val).tobytes() == np.asarray(before[key]).tobytes(), key


def test_hyper_params_and_statistics_by_name():
    """Each hyper-parameter lands at its named index; the statistics' names and
    indices agree, and the stats PPO reports carry every name."""
    from navi_nb.learn import fused

    hp = fused.hyper_params(
        clip_coef=0.1,
        clip_vloss=True,
        vf_coef=0.3,
        ent_coef=0.01,
        norm_adv=False,
        max_grad_norm=0.7,
        lr=1e-3,
        beta1=0.8,
        beta2=0.99,
        adam_eps=1e-6,
    )
    expect = {
        fused.CLIP_COEF: 0.1,
        fused.CLIP_VLOSS: 1.0,
        fused.VF_COEF: 0.3,
        fused.ENT_COEF: 0.01,
        fused.NORM_ADV: 0.0,
        fused.MAX_GRAD_NORM: 0.7,
        fused.LR: 1e-3,
        fused.BETA1: 0.8,
        fused.BETA2: 0.99,
        fused.ADAM_EPS: 1e-6,
        fused.TARGET_KL: -1.0,
    }
    assert hp.dtype == np.float64 and hp.shape == (len(fused.HYPER_NAMES),) == (len(expect),)
    assert {i: float(hp[i]) for i in expect} == expect
    assert fused.hyper_params(0.1, False, 0.3, 0.0, True, 0.5, 1e-3, 0.9, 0.999, 1e-5, 0.02)[fused.TARGET_KL] == 0.02
    names = [
        fused.STAT_NAMES[i]
        for i in (fused.POLICY_LOSS, fused.VALUE_LOSS, fused.APPROX_KL, fused.CLIP_FRAC, fused.OLD_APPROX_KL)
    ]
    assert names == ["policy_loss", "value_loss", "approx_kl", "clip_frac", "old_approx_kl"]
    assert fused.STEP_STAT_NAMES[fused.ENTROPY] == "entropy" and fused.STEP_STAT_NAMES[fused.GRAD_NORM] == "grad_norm"
    ((stats, _),) = _ppo_on_synthetic("chunk").minibatches(np.arange(96), 32, 1, 1e-3)
    assert set(stats) == set(fused.STAT_NAMES) | {"entropy", "loss"}


@pytest.mark.parametrize("threads", [2, 3, 4])
def test_finish_items_spread_over_any_equal_split(threads):
    """The finish pass's prange splits its items into equal contiguous parts, one per thread: in the order
    ``spread_order`` gives, each part costs its share of the total within one item."""
    from navi_nb.learn.fused import spread_order

    costs = [65536] * 12 + [2048] * 52 + [129, 516, 0]  # the quick start's: 12 weight tiles of 67 items
    order = spread_order(costs)
    assert sorted(order.tolist()) == list(range(len(costs)))
    bounds = np.linspace(0, len(costs), threads + 1).astype(int)
    parts = [sum(costs[t] for t in order[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    assert max(parts) - sum(costs) / threads <= max(costs)


def test_quick_start_finish_items_split_evenly_over_two_threads():
    """The quick start's policy (GRU 64 over a 32 x 8 sensor): each half of the finish pass's range holds
    half its weight tiles (the items' own order holds them all in the first half)."""
    from navi_nb.learn.fused import TILE
    from navi_nb.learn.ppo import PPO

    plan = PPO(ActorCritic(32 * 8 + 14, hidden=(128, 128), memory_size=64))._plan
    tiles = plan.items[:, 0] == TILE
    half = plan.items.shape[0] // 2
    assert tiles.sum() >= 8 and tiles[:half].sum() == tiles.sum()
    assert abs(int(tiles[plan.item_order[:half]].sum()) - int(tiles.sum()) // 2) <= 1
