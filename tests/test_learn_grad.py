"""The fused kernels against the package's reference loss (``loss_reference.py``,
plain NumPy float64): every statistic against the reference's value; every
parameter's gradient against central finite differences of the reference, and
against the reference's chain-rule gradient (itself checked against the same
finite differences)."""

import numpy as np
import pytest

import navi_nb  # noqa: F401  (BLAS pin)
from navi_nb.learn.loss_reference import ppo_loss, ppo_loss_grad
from navi_nb.learn.policy import ActorCritic
from navi_nb.learn.ppo import PPO, PPOConfig
from navi_nb.learn.rollout import RolloutSlab


def make_batch(policy, n, seed):
    """A synthetic rollout whose ratios and value moves fall both inside and
    outside the clip range, so every branch of the loss is exercised."""
    rng = np.random.default_rng(seed)
    slab = RolloutSlab(n, 1, policy.obs_dim, policy.act_dim, dtype=policy.dtype)
    slab.obs[...] = rng.standard_normal(slab.obs.shape)
    mu, v = policy.forward(slab.obs[:, 0, :])
    act = mu + rng.standard_normal(mu.shape)
    slab.actions[:, 0, :] = act
    slab.logp[:, 0] = policy.log_prob(mu, act) + rng.uniform(-0.6, 0.6, n)
    slab.value[:, 0] = v + rng.uniform(-0.5, 0.5, n)
    slab.advantages[:, 0] = rng.standard_normal(n)
    slab.returns[:, 0] = v + rng.standard_normal(n)
    return slab


def batch_dict(slab, rows):
    f = slab.flat[rows]
    c = slab.col
    return {
        "obs": f[:, : slab.obs_dim],
        "actions": f[:, c("actions") : c("actions") + slab.act_dim],
        "logp": f[:, c("logp")],
        "value": f[:, c("value")],
        "advantages": f[:, c("advantages")],
        "returns": f[:, c("returns")],
    }


def fd_gradient(fn, x, h):
    g = np.empty_like(x)

    def at(i, d):
        y = x.copy()
        y[i] += d
        return fn(y)

    for i in range(x.size):
        # fourth-order central difference: error O(h^4)
        g[i] = (8 * (at(i, h) - at(i, -h)) - (at(i, 2 * h) - at(i, -2 * h))) / (12 * h)
    return g


@pytest.mark.parametrize(
    "activation,grad_mode,clip_vloss,ent,norm_adv",
    [
        ("tanh", "chunk", True, 0.01, True),
        ("relu", "tile", True, 0.0, True),
        ("tanh", "tile", False, 0.005, True),
        ("tanh", "chunk", True, 0.0, False),
    ],
)
def test_gradient_matches_finite_differences(activation, grad_mode, clip_vloss, ent, norm_adv):
    policy = ActorCritic(6, 4, hidden=(7, 5), activation=activation, seed=3, dtype=np.float64, log_std_init=-0.3)
    # small chunks and tiles so every layer is split into several pieces
    # a generic point: non-zero biases (zero-init biases put relu exactly on its kink
    # for samples whose previous layer is all zero)
    rng = np.random.default_rng(9)
    for name in policy.layout.names():
        if name.endswith(".b"):
            policy.p[name][...] = rng.uniform(-0.2, 0.2, policy.p[name].shape)
    cfg = PPOConfig(
        grad_mode=grad_mode,
        chunk_size=8,
        tile_rows=3,
        tile_cols=2,
        clip_vloss=clip_vloss,
        ent_coef=ent,
        norm_adv=norm_adv,
    )
    ppo = PPO(policy, cfg)
    slab = make_batch(policy, 40, seed=11)
    ppo.set_source(
        slab.flat, slab.obs_dim, {k: slab.col(k) for k in ("actions", "logp", "value", "advantages", "returns")}
    )
    order = np.random.default_rng(5).permutation(40)
    start, stop = 3, 38  # an odd-sized range: a partial last chunk
    # one minibatch with a zero step: the gradient stays in ppo.grad, the weights do not move
    ((stats, _norm),) = ppo.minibatches(order[start:stop], stop - start, 1, lr=0.0)
    batch = batch_dict(slab, order[start:stop])
    x0 = policy.params.copy()
    ref = ppo_loss(policy, x0, batch, cfg)
    for name in ("loss", "policy_loss", "value_loss", "approx_kl", "old_approx_kl", "clip_frac"):
        assert stats[name] == pytest.approx(ref[name], rel=1e-12, abs=1e-12), name
    assert stats["entropy"] == ref["entropy"]
    assert 0.05 < stats["clip_frac"] < 0.95, "test data should clip some ratios, not all"
    # relu has kinks: a smaller step keeps every sample on its side of them
    h = 1e-4 if activation == "tanh" else 3e-6
    fd = fd_gradient(lambda p: ppo_loss(policy, p, batch, cfg)["loss"], x0, h)
    analytic = ppo_loss_grad(policy, x0, batch, cfg)
    for what, g in (("kernels", ppo.grad), ("reference", analytic)):
        rel = np.abs(g - fd) / np.maximum(np.maximum(np.abs(g), np.abs(fd)), 1e-6)
        worst = int(np.argmax(rel))
        assert rel.max() < 1e-5, (what, policy.layout.names(), worst, g[worst], fd[worst])
    # the kernels and the reference's gradient differ by rounding only
    np.testing.assert_allclose(ppo.grad, analytic, rtol=1e-10, atol=1e-13)
    # every tensor really has a non-trivial gradient
    for name in policy.layout.names():
        assert np.abs(ppo.g[name]).max() > 1e-6, name
