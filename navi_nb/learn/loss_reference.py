"""The PPO loss, written plainly: the specification the fused kernels implement.

Plain NumPy in float64, with CleanRL's names and order of operations; no
chunks, slots, tiles or hand-derived gradients. ``fused.py`` computes the same
loss and its gradient per chunk of samples; the tests check the kernels'
statistics against :func:`ppo_loss`, and their gradient against finite
differences of it and against :func:`ppo_loss_grad` (the chain rule over
whole-batch products, itself checked against the finite differences):
``tests/test_learn_grad.py``.

The policy is a diagonal Gaussian with a state-independent ``log_std``; its
log-density and entropy are defined here once (:func:`gaussian_log_prob`,
:func:`gaussian_entropy`) and used by the policy and the kernels. The kernels
compile :func:`gaussian_entropy` itself (``njit`` in ``minibatch.py``), so
``navi_nb/jit_cache.py`` counts this file among the compiled sources.
"""

from __future__ import annotations

import math

import numpy as np

LOG_2PI = math.log(2.0 * math.pi)
ADV_EPS = 1e-8
"""added to the advantages' standard deviation before dividing by it"""


def gaussian_log_prob(mu, log_std, actions):
    """log N(actions | mu, exp(log_std)^2), summed over the action dimensions (float64)."""
    log_std = np.asarray(log_std, np.float64)
    z = (np.asarray(actions, np.float64) - mu) / np.exp(log_std)
    return np.sum(-0.5 * z * z - log_std - 0.5 * LOG_2PI, axis=-1)


def gaussian_entropy(log_std):
    """Entropy of the diagonal Gaussian, sum over j of log_std[j] + 0.5 + 0.5 log(2 pi),
    added in index order (float64). Written as a loop so the kernels compile this very
    function (``fused.py``)."""
    s = 0.0
    for j in range(log_std.shape[0]):
        s += (np.float64(log_std[j]) + 0.5) + 0.5 * LOG_2PI
    return s


def normalize_advantages(advantages):
    """(A - mean) / (std + 1e-8), the standard deviation with n - 1 (as torch.std)."""
    adv = np.asarray(advantages, np.float64)
    return (adv - adv.mean()) / (adv.std(ddof=1) + ADV_EPS)


def mlp_forward(layers, x, activation):
    """A trunk: hidden layers act(x @ W + b) ("tanh" or "relu"), a linear output layer."""
    for i, (W, b) in enumerate(layers):
        x = x @ W + b
        if i < len(layers) - 1:
            x = np.tanh(x) if activation == "tanh" else np.maximum(x, 0.0)
    return x


def actor_critic_forward(policy, flat, obs):
    """(mu (n, act_dim), value (n,), log_std) of ``policy``'s network with its parameters set
    to ``flat`` (any layout-sized vector), in float64."""
    views = policy.layout.views(np.asarray(flat, np.float64))
    obs = np.asarray(obs, np.float64)

    def trunk(layers):
        return [(views[l.name + ".W"], views[l.name + ".b"]) for l in layers]

    mu = mlp_forward(trunk(policy.pi_layers), obs, policy.activation)
    value = mlp_forward(trunk(policy.v_layers), obs, policy.activation)[:, 0]
    return mu, value, views["log_std"]


def ppo_loss(policy, flat, batch, config):
    """The PPO loss of one minibatch and its statistics, as a dict of floats.

    ``batch``: "obs", "actions", "logp" (old log-probabilities), "value" (old
    values), "advantages", "returns", one row per sample. ``config``: a
    PPOConfig (clip_coef, clip_vloss, norm_adv, ent_coef, vf_coef). Keys: loss,
    policy_loss, value_loss, entropy, approx_kl, old_approx_kl, clip_frac: the
    names of the training CSV and of the kernels' statistics, used everywhere
    (CleanRL's pg_loss, v_loss, entropy_loss, approx_kl, old_approx_kl,
    clipfrac; the local variables below keep CleanRL's names).
    """
    clip_coef = config.clip_coef
    mu, newvalue, log_std = actor_critic_forward(policy, flat, batch["obs"])
    newlogprob = gaussian_log_prob(mu, log_std, batch["actions"])
    logratio = newlogprob - np.asarray(batch["logp"], np.float64)
    ratio = np.exp(logratio)
    old_approx_kl = (-logratio).mean()
    approx_kl = ((ratio - 1.0) - logratio).mean()
    clipfrac = (np.abs(ratio - 1.0) > clip_coef).astype(np.float64).mean()

    mb_advantages = np.asarray(batch["advantages"], np.float64)
    if config.norm_adv:
        mb_advantages = normalize_advantages(mb_advantages)
    pg_loss1 = -mb_advantages * ratio
    pg_loss2 = -mb_advantages * np.clip(ratio, 1.0 - clip_coef, 1.0 + clip_coef)
    pg_loss = np.maximum(pg_loss1, pg_loss2).mean()

    b_returns = np.asarray(batch["returns"], np.float64)
    b_values = np.asarray(batch["value"], np.float64)
    if config.clip_vloss:
        v_loss_unclipped = (newvalue - b_returns) ** 2
        v_clipped = b_values + np.clip(newvalue - b_values, -clip_coef, clip_coef)
        v_loss_clipped = (v_clipped - b_returns) ** 2
        v_loss = 0.5 * np.maximum(v_loss_unclipped, v_loss_clipped).mean()
    else:
        v_loss = 0.5 * ((newvalue - b_returns) ** 2).mean()

    entropy_loss = gaussian_entropy(log_std)  # state independent: the mean over samples is itself
    loss = pg_loss - config.ent_coef * entropy_loss + v_loss * config.vf_coef
    return {
        "loss": float(loss),
        "policy_loss": float(pg_loss),
        "value_loss": float(v_loss),
        "entropy": float(entropy_loss),
        "approx_kl": float(approx_kl),
        "old_approx_kl": float(old_approx_kl),
        "clip_frac": float(clipfrac),
    }


def ppo_loss_grad(policy, flat, batch, config):
    """The gradient of :func:`ppo_loss`'s ``loss`` with respect to ``flat`` (in the
    policy's parameter layout), by the chain rule written with whole-batch NumPy
    products. Where a ``max`` or ``clip`` is at a tie, it takes the branch the
    kernels take (the unclipped one)."""
    clip_coef = config.clip_coef
    flat = np.asarray(flat, np.float64)
    views = policy.layout.views(flat)
    grad = np.zeros_like(flat)
    grads = policy.layout.views(grad)
    obs = np.asarray(batch["obs"], np.float64)
    n = obs.shape[0]

    def trunk_outputs(layers):  # [input, each layer's output]
        xs = [obs]
        for i, l in enumerate(layers):
            x = xs[-1] @ views[l.name + ".W"] + views[l.name + ".b"]
            if i < len(layers) - 1:
                x = np.tanh(x) if policy.activation == "tanh" else np.maximum(x, 0.0)
            xs.append(x)
        return xs

    def trunk_backward(layers, xs, dz):  # dz: d loss / d the trunk's (linear) output
        for i in range(len(layers) - 1, -1, -1):
            l = layers[i]
            grads[l.name + ".W"][...] = xs[i].T @ dz
            grads[l.name + ".b"][...] = dz.sum(axis=0)
            if i > 0:
                h = xs[i]
                dact = 1.0 - h * h if policy.activation == "tanh" else (h > 0.0).astype(np.float64)
                dz = (dz @ views[l.name + ".W"].T) * dact

    pi_xs, v_xs = trunk_outputs(policy.pi_layers), trunk_outputs(policy.v_layers)
    mu, newvalue, log_std = pi_xs[-1], v_xs[-1][:, 0], views["log_std"]
    std = np.exp(log_std)
    z = (np.asarray(batch["actions"], np.float64) - mu) / std
    ratio = np.exp(gaussian_log_prob(mu, log_std, batch["actions"]) - np.asarray(batch["logp"], np.float64))
    mb_advantages = np.asarray(batch["advantages"], np.float64)
    if config.norm_adv:
        mb_advantages = normalize_advantages(mb_advantages)
    # pg_loss: only the unclipped branch depends on the parameters
    unclipped = -mb_advantages * ratio >= -mb_advantages * np.clip(ratio, 1.0 - clip_coef, 1.0 + clip_coef)
    d_logprob = np.where(unclipped, -mb_advantages * ratio, 0.0) / n
    trunk_backward(policy.pi_layers, pi_xs, d_logprob[:, None] * z / std)
    # d logprob / d log_std = z^2 - 1; d entropy / d log_std = 1
    grads["log_std"][...] = (d_logprob[:, None] * (z * z - 1.0)).sum(axis=0) - config.ent_coef

    b_returns = np.asarray(batch["returns"], np.float64)
    b_values = np.asarray(batch["value"], np.float64)
    d_value = newvalue - b_returns
    if config.clip_vloss:
        moved = newvalue - b_values
        v_clipped = b_values + np.clip(moved, -clip_coef, clip_coef)
        use_clipped = (newvalue - b_returns) ** 2 < (v_clipped - b_returns) ** 2
        d_clipped = np.where(np.abs(moved) < clip_coef, v_clipped - b_returns, 0.0)
        d_value = np.where(use_clipped, d_clipped, d_value)
    trunk_backward(policy.v_layers, v_xs, (config.vf_coef / n * d_value)[:, None])
    return grad
