"""GAE against a plain reference loop, with terminations and truncations mixed."""

import numpy as np

import navi_nb  # noqa: F401
from navi_nb.learn.gae import compute_gae


def reference_gae(r, v, term, trunc, final_v, last_v, gamma, lam):
    """Per actor, per step: sum of (gamma*lam)^l * delta_{t+l} until the episode ends,
    delta written from its definition (no recursion)."""
    T, A = r.shape
    adv = np.zeros((T, A))
    for a in range(A):
        delta = np.zeros(T)
        for t in range(T):
            if term[t, a]:
                nxt = 0.0
            elif trunc[t, a]:
                nxt = final_v[t, a]
            elif t + 1 < T:
                nxt = v[t + 1, a]
            else:
                nxt = last_v[a]
            delta[t] = r[t, a] + gamma * nxt - v[t, a]
        for t in range(T):
            total, weight = 0.0, 1.0
            for u in range(t, T):
                total += weight * delta[u]
                if term[u, a] or trunc[u, a]:
                    break
                weight *= gamma * lam
            adv[t, a] = total
    return adv, adv + v


def test_gae_matches_reference():
    rng = np.random.default_rng(0)
    T, A = 37, 9
    r = rng.standard_normal((T, A)).astype(np.float32)
    v = rng.standard_normal((T, A)).astype(np.float32)
    term = rng.random((T, A)) < 0.08
    trunc = (rng.random((T, A)) < 0.08) & ~term
    final_v = np.where(trunc, rng.standard_normal((T, A)), 0).astype(np.float32)
    last_v = rng.standard_normal(A).astype(np.float32)
    assert term.sum() > 5 and trunc.sum() > 5
    for gamma, lam in ((0.99, 0.95), (0.9, 1.0), (1.0, 0.0)):
        adv, ret = compute_gae(r, v, term.astype(np.float32), trunc.astype(np.float32), final_v, last_v, gamma, lam)
        ref_adv, ref_ret = reference_gae(
            r.astype(np.float64),
            v.astype(np.float64),
            term,
            trunc,
            final_v.astype(np.float64),
            last_v.astype(np.float64),
            gamma,
            lam,
        )
        np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(ret, ref_ret, rtol=1e-5, atol=1e-5)


def test_truncation_bootstraps_termination_does_not():
    # one actor, two steps, each ends an episode
    r = np.array([[1.0], [1.0]], np.float32)
    v = np.array([[0.5], [0.5]], np.float32)
    zeros = np.zeros((2, 1), np.float32)
    final_v = np.array([[10.0], [0.0]], np.float32)
    adv, _ = compute_gae(
        r,
        v,
        np.array([[0.0], [1.0]], np.float32),
        np.array([[1.0], [0.0]], np.float32),
        final_v,
        np.array([100.0], np.float32),
        0.5,
        0.5,
    )
    assert adv[0, 0] == 1.0 + 0.5 * 10.0 - 0.5  # truncated: bootstrap from the final obs
    assert adv[1, 0] == 1.0 - 0.5  # terminated: no bootstrap, last_v unused
    adv, _ = compute_gae(r, v, zeros, zeros, final_v, np.array([100.0], np.float32), 0.5, 0.5)
    assert adv[1, 0] == 1.0 + 0.5 * 100.0 - 0.5  # neither: bootstrap from last_values
