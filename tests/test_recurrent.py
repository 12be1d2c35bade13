"""The policy with memory (a GRU core before both trunks) and its PPO minibatches of whole actor
sequences, against independent answers: the minibatch gradient against central finite differences of a
plain NumPy float64 reference (the GRU of PyTorch's equations run over each actor's rollout from its
starting state with resets at episode starts, then ``loss_reference.ppo_loss`` on ``obs | state``, or on
the observation's first ``trunk_obs`` columns and the state where the trunks read only those);
acting step by step against the sequence the learner recomputes; the same bits at any thread count and
any split of the blocks; and the bad settings it refuses."""

import numba
import numpy as np
import pytest

import navi_nb  # noqa: F401  (BLAS pin)
from navi_nb.learn import blocks
from navi_nb.learn.loss_reference import actor_critic_forward, gaussian_log_prob, ppo_loss
from navi_nb.learn.policy import ActorCritic, PolicyError
from navi_nb.learn.ppo import PPO, PPOConfig, PPOConfigError
from navi_nb.learn.rollout import RolloutSlab


def sigmoid(a):
    return 1.0 / (1.0 + np.exp(-a))


def reference_states(policy, flat, obs, h0, starts):
    """The GRU's states (T, A, H) over the rollout, PyTorch's equations in float64."""
    v = policy.gru.views(np.asarray(flat, np.float64))
    W_ih, W_hh, b_ih, b_hh = v["W_ih"], v["W_hh"], v["b_ih"], v["b_hh"]
    H = policy.memory_size
    h, out = np.asarray(h0, np.float64), []
    for t in range(obs.shape[0]):
        h = np.where(starts[t][:, None], 0.0, h)
        gi = obs[t] @ W_ih.T + b_ih
        gh = h @ W_hh.T + b_hh
        r = sigmoid(gi[:, :H] + gh[:, :H])
        z = sigmoid(gi[:, H : 2 * H] + gh[:, H : 2 * H])
        n = np.tanh(gi[:, 2 * H :] + r * gh[:, 2 * H :])
        h = (1 - z) * n + z * h
        out.append(h)
    return np.stack(out)


def trunk_input(policy, obs, hs):
    """What the trunks read: the observation's first ``trunk_obs`` columns, then the GRU's state."""
    return np.concatenate([obs[..., : policy.trunk_obs], hs], axis=-1)


def make_rollout(policy, n_steps, n_actors, seed):
    """A synthetic rollout whose ratios and value moves fall inside and outside the clip range."""
    rng = np.random.default_rng(seed)
    slab = RolloutSlab(n_steps, n_actors, policy.obs_dim, policy.act_dim, policy.dtype, policy.memory_size)
    slab.obs[...] = rng.standard_normal(slab.obs.shape)
    slab.h0[...] = 0.5 * rng.standard_normal(slab.h0.shape)
    slab.starts[...] = rng.random(slab.starts.shape) < 0.2
    hs = reference_states(policy, policy.params, slab.obs, slab.h0, slab.starts)
    x = trunk_input(policy, slab.obs, hs).reshape(n_steps * n_actors, -1)
    mu, v, log_std = actor_critic_forward(policy, policy.params.astype(np.float64), x)
    act = mu + rng.standard_normal(mu.shape)
    n = n_steps * n_actors
    slab.actions[...] = act.reshape(n_steps, n_actors, -1)
    slab.logp[...] = (gaussian_log_prob(mu, log_std, act) + rng.uniform(-0.6, 0.6, n)).reshape(n_steps, n_actors)
    slab.value[...] = (v + rng.uniform(-0.5, 0.5, n)).reshape(n_steps, n_actors)
    slab.advantages[...] = rng.standard_normal((n_steps, n_actors))
    slab.returns[...] = (v + rng.standard_normal(n)).reshape(n_steps, n_actors)
    return slab


def reference_loss(policy, flat, slab, rows, cfg):
    hs = reference_states(policy, flat, slab.obs.astype(np.float64), slab.h0, slab.starts)
    x = trunk_input(policy, slab.obs, hs).reshape(slab.n_samples, -1)[rows]
    f, c = slab.flat[rows], slab.col
    batch = {
        "obs": x,
        "actions": f[:, c("actions") : c("actions") + slab.act_dim],
        "logp": f[:, c("logp")],
        "value": f[:, c("value")],
        "advantages": f[:, c("advantages")],
        "returns": f[:, c("returns")],
    }
    return ppo_loss(policy, flat, batch, cfg)


def fd_gradient(fn, x, h):
    g = np.empty_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (8 * (fn(x + e) - fn(x - e)) - (fn(x + 2 * e) - fn(x - 2 * e))) / (12 * h)
    return g


def small_policy(dtype=np.float64, seed=3, memory_size=3, trunk_obs=None):
    policy = ActorCritic(
        5, 2, hidden=(6, 4), seed=seed, dtype=dtype, log_std_init=-0.3, memory_size=memory_size, trunk_obs=trunk_obs
    )
    rng = np.random.default_rng(9)
    for name in policy.layout.names():
        if name.endswith(".b"):
            policy.p[name][...] = rng.uniform(-0.2, 0.2, policy.p[name].shape)
    return policy


@pytest.mark.parametrize("grad_mode, trunk_obs", [("chunk", None), ("tile", None), ("chunk", 3), ("tile", 2)])
def test_sequence_minibatch_gradient_matches_finite_differences(grad_mode, trunk_obs):
    policy = small_policy(trunk_obs=trunk_obs)
    cfg = PPOConfig(grad_mode=grad_mode, chunk_size=5, tile_rows=3, tile_cols=2, actor_block=4, num_minibatches=2)
    ppo = PPO(policy, cfg)
    slab = make_rollout(policy, 6, 8, seed=11)  # two blocks of four actors, two of each per minibatch
    ppo._use_slab(slab)
    _block, _rows, blk, mb = ppo._minibatch_layout(slab)
    order = ppo.epoch_order(slab, 1234)
    rows = order[mb : 2 * mb]  # the second minibatch
    ((stats, _norm),) = ppo.minibatches(rows, mb, 1, lr=0.0, blk=blk)  # a zero step: the weights stay
    x0 = policy.params.copy()
    ref = reference_loss(policy, x0, slab, rows, cfg)
    for name in ("loss", "policy_loss", "value_loss", "approx_kl", "clip_frac"):
        assert stats[name] == pytest.approx(ref[name], rel=1e-10, abs=1e-12), name
    assert 0.05 < stats["clip_frac"] < 0.95, "the data should clip some ratios, not all"
    fd = fd_gradient(lambda p: reference_loss(policy, p, slab, rows, cfg)["loss"], x0, 1e-4)
    rel = np.abs(ppo.grad - fd) / np.maximum(np.maximum(np.abs(ppo.grad), np.abs(fd)), 1e-6)
    worst = int(np.argmax(rel))
    assert rel.max() < 1e-5, (worst, ppo.grad[worst], fd[worst])
    g = policy.layout.views(ppo.grad)
    for name in ("gru.W_ih", "gru.W_hh", "gru.b_ih", "gru.b_hh"):
        assert np.abs(g[name]).max() > 1e-5, name


def test_sequence_order_takes_whole_actors():
    perms = blocks.epoch_permutations(7, 4, 0, 2)
    order = blocks.sequence_order(perms, 3, 4, 8, 2).reshape(2, 2, 3, 2)  # minibatch, block, step, actor
    for b in range(2):
        for k in range(2):
            actors = k * 4 + perms[k][b * 2 : (b + 1) * 2]
            for t in range(3):
                np.testing.assert_array_equal(order[b, k, t], t * 8 + actors)
    assert sorted(order.ravel().tolist()) == list(range(24))  # every row once per epoch


def test_acting_states_are_the_learners_sequence():
    """Stepping the policy with its memory (acting, resets at episode starts) gives the states the
    minibatch pass recomputes from the rollout's first state (float64: the same sums up to rounding)."""
    policy = small_policy()
    rng = np.random.default_rng(4)
    T, A = 7, 4
    obs = rng.standard_normal((T, A, policy.obs_dim))
    starts = rng.random((T, A)) < 0.3
    memory = policy.new_memory(A)
    memory.h[...] = 0.3 * rng.standard_normal(memory.h.shape)
    memory.start[...] = starts[0]
    h0 = memory.h.copy()
    acted = []
    for t in range(T):
        memory.start[...] = starts[t]
        policy.forward(obs[t], memory)
        acted.append(memory.h.copy())
    ref = reference_states(policy, policy.params, obs, h0, starts)
    np.testing.assert_allclose(np.stack(acted), ref, rtol=0, atol=1e-12)
    v = policy.value(obs[0], memory)  # a value reads the memory and leaves it
    np.testing.assert_array_equal(memory.h, acted[-1])
    assert v.shape == (A,) and np.isfinite(v).all()


@pytest.mark.parametrize("memory_size, trunk_obs", [(0, None), (3, None), (3, 2)])
def test_acting_forward_against_the_reference_at_any_thread_count(memory_size, trunk_obs):
    """Acting's one-call forward (the GRU step, then both trunks, chunk by chunk: ``learn/acting.py``) against
    the float64 reference over [obs, state], with a last chunk shorter than the others; in float32 the
    same bits at one and two threads."""
    rng = np.random.default_rng(6)
    A = 11
    obs = rng.standard_normal((A, 5))
    starts = rng.random(A) < 0.4
    policy = small_policy(memory_size=memory_size, trunk_obs=trunk_obs)
    policy.chunk = 4
    h0 = 0.3 * rng.standard_normal((A, memory_size))
    x = obs
    memory = policy.new_memory(A)
    if memory_size:
        memory.h[...], memory.start[...] = h0, starts
        x = trunk_input(policy, obs, reference_states(policy, policy.params, obs[None], h0, starts[None])[0])
    mu, v = policy.forward(obs, memory)
    ref_mu, ref_v, _ = actor_critic_forward(policy, policy.params, x)
    np.testing.assert_allclose(mu, ref_mu, rtol=0, atol=1e-12)
    np.testing.assert_allclose(v, ref_v, rtol=0, atol=1e-12)
    if memory_size:
        np.testing.assert_allclose(memory.h, x[:, policy.trunk_obs :], rtol=0, atol=1e-12)
        assert not memory.start.any()
    base = numba.get_num_threads()
    bits = []
    try:
        for threads in (1, min(2, numba.config.NUMBA_NUM_THREADS)):
            numba.set_num_threads(threads)
            p32 = small_policy(np.float32, memory_size=memory_size, trunk_obs=trunk_obs)
            p32.chunk = 4
            m32 = p32.new_memory(A)
            if memory_size:
                m32.h[...], m32.start[...] = h0, starts
            out = p32.forward(obs.astype(np.float32), m32)
            bits.append(b"".join(a.tobytes() for a in out + ((m32.h,) if memory_size else ())))
    finally:
        numba.set_num_threads(base)
    assert bits[0] == bits[1]


def run_update(threads, first_blocks=None, trunk_obs=None):
    numba.set_num_threads(threads)
    policy = small_policy(np.float32, memory_size=4, trunk_obs=trunk_obs)
    ppo = PPO(policy, PPOConfig(actor_block=4, num_minibatches=2, chunk_size=4, update_epochs=2))
    slab = make_rollout(policy, 6, 8, seed=5)
    ppo.update(slab, np.zeros(8, np.float32))
    return policy.params.copy()


@pytest.mark.parametrize("trunk_obs", [None, 3])
def test_same_bits_at_one_and_two_threads(trunk_obs):
    base = numba.get_num_threads()
    try:
        a = run_update(1, trunk_obs=trunk_obs)
        b = run_update(min(2, numba.config.NUMBA_NUM_THREADS), trunk_obs=trunk_obs)
    finally:
        numba.set_num_threads(base)
    assert a.tobytes() == b.tobytes()
    assert not np.array_equal(a, small_policy(np.float32, memory_size=4, trunk_obs=trunk_obs).params)


def test_bad_memory_settings_are_refused():
    for bad in (-1, 5000, 2.5, True):
        with pytest.raises(PolicyError, match="memory_size"):
            ActorCritic(5, 2, hidden=(4,), memory_size=bad)
    policy = small_policy()
    with pytest.raises(PolicyError, match="PolicyMemory"):
        policy.forward(np.zeros((2, 5)))
    with pytest.raises(PolicyError, match="no memory"):
        small_policy(memory_size=0).forward(np.zeros((2, 5)), policy.new_memory(2))
    for memory_size, bad in ((3, 0), (3, 6), (3, 2.0), (0, 4)):  # the trunks read 1..5 columns; all without memory
        with pytest.raises(PolicyError, match="trunk_obs"):
            ActorCritic(5, 2, hidden=(4,), memory_size=memory_size, trunk_obs=bad)
    ppo = PPO(policy, PPOConfig(actor_block=4, num_minibatches=3))
    with pytest.raises(PPOConfigError, match="whole actor sequences"):
        ppo.block_layout(6, 8)


def test_minibatches_that_are_not_whole_sequences_are_refused():
    policy = small_policy()
    ppo = PPO(policy, PPOConfig(actor_block=4, num_minibatches=2))
    slab = make_rollout(policy, 6, 8, seed=1)
    ppo._use_slab(slab)
    _block, _rows, blk, mb = ppo._minibatch_layout(slab)
    before = policy.params.copy()
    with pytest.raises(PPOConfigError, match="whole actor sequences"):
        ppo.minibatches(np.arange(mb, dtype=np.int64), mb, 1, blk=blk)  # rows in slab order: steps 0-2 only
    assert policy.params.tobytes() == before.tobytes()
