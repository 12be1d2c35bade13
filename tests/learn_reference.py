"""An independent NumPy (float64) reference of the actor-critic and PPO loss,
written from the formulas, for the learning tests."""
import math

import numpy as np


def forward(params, layers, obs, activation):
    x = obs
    for i, (W, b) in enumerate(layers(params)):
        x = x @ W + b
        if i < len(layers(params)) - 1:
            x = np.tanh(x) if activation == "tanh" else np.maximum(x, 0.0)
    return x


def ppo_loss(policy, flat, batch, cfg):
    """Full PPO loss (float64) of the policy's parameters set to ``flat``."""
    views = policy.layout.views(np.asarray(flat, np.float64))

    def trunk(name):
        return lambda _p: [(views[l.name + ".W"], views[l.name + ".b"])
                           for l in (policy.pi_layers if name == "pi" else policy.v_layers)]

    obs = batch["obs"].astype(np.float64)
    mu = forward(flat, trunk("pi"), obs, policy.activation)
    v = forward(flat, trunk("v"), obs, policy.activation)[:, 0]
    log_std = views["log_std"]
    std = np.exp(log_std)
    a = batch["actions"].astype(np.float64)
    logp = np.sum(-0.5 * ((a - mu) / std) ** 2 - log_std - 0.5 * math.log(2 * math.pi), axis=1)
    adv = batch["advantages"].astype(np.float64)
    if cfg.norm_adv:
        adv = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
    ratio = np.exp(logp - batch["logp"])
    pg = np.maximum(-adv * ratio, -adv * np.clip(ratio, 1 - cfg.clip_coef, 1 + cfg.clip_coef)).mean()
    ret = batch["returns"].astype(np.float64)
    v_old = batch["value"].astype(np.float64)
    if cfg.clip_vloss:
        vc = v_old + np.clip(v - v_old, -cfg.clip_coef, cfg.clip_coef)
        vl = 0.5 * np.maximum((v - ret) ** 2, (vc - ret) ** 2).mean()
    else:
        vl = 0.5 * ((v - ret) ** 2).mean()
    ent = np.sum(log_std + 0.5 + 0.5 * math.log(2 * math.pi))
    return pg - cfg.ent_coef * ent + cfg.vf_coef * vl
