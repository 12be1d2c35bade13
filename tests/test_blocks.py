"""Actor blocks: the minibatch gradient is the blocks' gradients added along a fixed tree, so the split of
blocks over processes (and the thread count) does not change a bit; the environment's blocks draw from
their own generators, so a block steps the same wherever it lives."""

import numpy as np
import pytest
from test_learn_grad import batch_dict, make_batch

import navi_nb  # noqa: F401  (BLAS pin)
from navi_nb.learn import blocks, fused, minibatch
from navi_nb.learn.loss_reference import ppo_loss_grad
from navi_nb.learn.policy import ActorCritic
from navi_nb.learn.ppo import PPO, PPOConfig
from navi_nb.learn.rollout import RolloutSlab


def _tree_sum_python(rows, lo, hi):
    """The tree of ``blocks``' docstring written out independently: left child = largest power of two."""
    if hi - lo == 1:
        return rows[lo]
    size = hi - lo
    left = 1
    while left * 2 < size:
        left *= 2
    return _tree_sum_python(rows, lo, lo + left) + _tree_sum_python(rows, lo + left, hi)


@pytest.mark.parametrize("n_blocks", [1, 2, 3, 5, 8, 13])
def test_tree_is_the_same_sum_for_every_split(n_blocks):
    rng = np.random.default_rng(n_blocks)
    rows = (rng.standard_normal((n_blocks, 1000)) * 10.0 ** rng.integers(-6, 6, (n_blocks, 1))).astype(np.float32)
    want = _tree_sum_python(rows, 0, n_blocks)
    assert want.dtype == np.float32
    splits = [[0, n_blocks]] + [[0, c, n_blocks] for c in range(1, n_blocks)]
    if n_blocks > 3:
        splits.append([0, 1, n_blocks - 1, n_blocks])
        splits.append(list(range(n_blocks + 1)))  # one block per process
    for cuts in splits:
        nodes, gathered = [], []
        for a, b in zip(cuts[:-1], cuts[1:]):
            buf = rows[a:b].copy()
            ops, node_rows, part_nodes = blocks.local_plan(n_blocks, a, b)
            blocks.tree_sum_rows(buf, ops, 64)
            nodes += part_nodes
            gathered += [buf[r] for r in node_rows]
        assert nodes == sorted(nodes) and nodes[0][0] == 0 and nodes[-1][1] == n_blocks
        buf = np.array(gathered)
        ops, root = blocks.tree_ops(0, n_blocks, {node: i for i, node in enumerate(nodes)})
        blocks.tree_sum_rows(buf, ops, 7)
        assert buf[root].tobytes() == want.tobytes(), cuts
    if n_blocks >= 4:  # the grouping matters at all: a left fold rounds differently
        fold = rows[0].copy()
        for k in range(1, n_blocks):
            fold += rows[k]
        assert fold.tobytes() != want.tobytes()


def _synthetic(dtype, n_steps=24, n_actors=8, seed=4):
    policy = ActorCritic(6, 4, hidden=(7, 5), seed=3, dtype=dtype, log_std_init=-0.3)
    one = make_batch(policy, n_steps * n_actors, seed)
    slab = RolloutSlab(n_steps, n_actors, policy.obs_dim, policy.act_dim, dtype=dtype)
    slab.flat[...] = one.flat
    return policy, slab


def _ppo(policy, slab, **kw):
    cfg = PPOConfig(chunk_size=4, tile_rows=3, tile_cols=2, tile_min_weights=30, ent_coef=0.01, **kw)
    ppo = PPO(policy, cfg)
    ppo.set_source(
        slab.flat, slab.obs_dim, {k: slab.col(k) for k in ("actions", "logp", "value", "advantages", "returns")}
    )
    return ppo


def _minibatch(slab, block, blk, seed=2):
    perms = blocks.epoch_permutations(seed, slab.n_steps * block, 0, slab.n_actors // block)
    return blocks.epoch_order(perms, slab.n_steps, block, slab.n_actors, 1, blk)


def _gradient_split(ppo, rows, blk, cuts):
    """One minibatch's gradient with blocks [cuts[i], cuts[i+1]) computed apart, as processes do: each
    part's block moments and tree nodes, gathered in block order, the top of the tree over them."""
    pol, hp = ppo.policy, ppo._hyper_params()
    n_blocks, n = rows.shape[0] // blk, rows.shape[0]
    col = ppo._cols[fused.ADVANTAGES]
    works, moments = [], []
    for a, b in zip(cuts[:-1], cuts[1:]):
        w = ppo._plan.work((b - a) * blk, ppo.config.chunk_size, pol.act_dim, blk, n_total=n)
        fused.block_moments(ppo.source, rows[a * blk : b * blk], col, blk, w.moments)
        works.append(w)
        moments.append(w.moments.copy())
    moments = np.concatenate(moments)
    m_ops, m_root = blocks.tree_ops(0, n_blocks, {(k, k + 1): k for k in range(n_blocks)})
    blocks.tree_moments(moments, m_ops)
    nodes, node_grads, node_stats = [], [], []
    grad = np.empty_like(ppo.grad)
    for (a, b), w in zip(zip(cuts[:-1], cuts[1:]), works):
        ops, node_rows, part_nodes = blocks.local_plan(n_blocks, a, b)
        minibatch.local_gradients(
            ppo.source,
            rows[a * blk : b * blk],
            ppo._cols,
            pol.params,
            pol.p["log_std"],
            hp,
            w,
            moments[m_root],
            ops,
            0,
            grad,
            False,
        )
        nodes += part_nodes
        node_grads += [w.block_grads[r].copy() for r in node_rows]
        node_stats += [w.block_stats[r].copy() for r in node_rows]
    g_rows, s_rows = np.array(node_grads), np.array(node_stats)
    ops, root = blocks.tree_ops(0, n_blocks, {node: i for i, node in enumerate(nodes)})
    w = works[0]
    minibatch.reduce_nodes(g_rows, s_rows, ops, root, grad, w, hp)
    return grad, w.stat_sums.copy(), w.sumsq.copy()


def test_block_gradient_is_the_loss_gradient_and_placement_free():
    """float64: the blocks' tree sum is the reference gradient of the whole minibatch (advantages
    normalised over all of it); float32: every split of the blocks gives the same bytes."""
    policy, slab = _synthetic(np.float64)
    ppo = _ppo(policy, slab)
    block, blk = 2, 12  # 4 blocks of 2 actors, 12 of each block's 48 rows
    rows = _minibatch(slab, block, blk)
    grad, sums, _ = _gradient_split(ppo, rows, blk, [0, 4])
    ref = ppo_loss_grad(policy, policy.params.copy(), batch_dict(slab, rows), ppo.config)
    np.testing.assert_allclose(grad, ref, rtol=1e-9, atol=1e-12)
    assert np.abs(grad).max() > 1e-3

    policy, slab = _synthetic(np.float32)
    ppo = _ppo(policy, slab)
    block, blk = 1, 6  # 8 blocks of one actor
    rows = _minibatch(slab, block, blk)
    want = _gradient_split(ppo, rows, blk, [0, 8])
    for cuts in ([0, 1, 8], [0, 4, 8], [0, 3, 8], [0, 2, 5, 8], list(range(9))):
        got = _gradient_split(ppo, rows, blk, cuts)
        for x, y in zip(got, want):
            assert x.tobytes() == y.tobytes(), cuts
    # and the one-call path the trainer runs gives the same gradient
    before = policy.params.copy()
    ppo.minibatches(rows, rows.shape[0], 1, lr=0.0, blk=blk)
    assert ppo.grad.tobytes() == want[0].tobytes()
    assert policy.params.tobytes() == before.tobytes()  # lr 0: nothing moved


def test_update_needs_whole_blocks():
    policy, slab = _synthetic(np.float32, n_steps=3, n_actors=8)
    ppo = PPO(policy, PPOConfig(actor_block=3))
    with pytest.raises(navi_nb.errors.NaviError, match="multiple of actor_block"):
        ppo.update(slab, np.zeros(8, np.float32))
    ppo = PPO(policy, PPOConfig(actor_block=1, num_minibatches=4))
    with pytest.raises(navi_nb.errors.NaviError, match="cannot make 4 minibatches"):
        ppo.update(slab, np.zeros(8, np.float32))


def test_env_block_steps_the_same_alone():
    """Actors 4..7 of an 8-actor environment (blocks of 4) and a 4-actor environment holding block 1
    alone: the same observations, rewards, resets and state, step after step."""
    from navi_nb.env.nav_env import NavEnv
    from navi_nb.sense.sensor import Sensor
    from navi_nb.world.compiler import compile_scene

    world = compile_scene("box", resolution=32, seed=0)
    kw = dict(sensor=Sensor(8, 3), task="pointgoal", seed=5, max_steps=7, actor_block=4)
    whole = NavEnv(world, 8, **kw)
    part = NavEnv(world, 4, first_block=1, **kw)
    o1, _ = whole.reset()
    o2, _ = part.reset()
    assert np.array_equal(o1[4:], o2)
    rng = np.random.default_rng(0)
    resets = 0
    for _ in range(20):
        a = rng.uniform(-1, 1, (8, 4)).astype(np.float32)
        r1 = whole.step(a)
        r2 = part.step(a[4:].copy())
        for x, y in zip(r1[:4], r2[:4]):
            assert np.array_equal(x[4:], y)
        resets += int(r2[4]["done"].sum())
    assert resets >= 4
    s1, s2 = whole.get_state(), part.get_state()
    assert s1["rng_spawn"].shape == (2, 6) and s2["rng_spawn"].shape == (1, 6)
    for name, v in s2.items():
        if name.startswith("rng_"):
            assert np.array_equal(s1[name][1:], v)
        elif v.ndim:
            assert np.array_equal(s1[name][4:], v), name
    # block 0 does not follow block 1: their episodes start differently
    assert not np.array_equal(s1["pos"][:4], s1["pos"][4:])
    # the state round-trips through set_state
    again = NavEnv(world, 4, first_block=1, **kw)
    again.set_state(s2)
    assert np.array_equal(again.get_state()["rng_goal"], s2["rng_goal"])


def test_rank_split_and_launcher_detection():
    from navi_nb.parallel import ranks

    assert ranks.split_blocks(4, 1) == [(0, 4)]
    assert ranks.split_blocks(7, 3) == [(0, 3), (3, 5), (5, 7)]
    with pytest.raises(ranks.RankError, match="3 ranks for 2 actor blocks"):
        ranks.split_blocks(2, 3)
    assert not ranks.launched_by_mpi({})
    assert not ranks.launched_by_mpi({"PMI_SIZE": "1", "SLURM_NTASKS": "8"})  # a batch script, not a step
    assert ranks.launched_by_mpi({"PMI_SIZE": "2"})
    assert ranks.launched_by_mpi({"OMPI_COMM_WORLD_SIZE": "4"})
    assert ranks.launched_by_mpi({"SLURM_STEP_NUM_TASKS": "16"})
    # a state split by rank and put back together is the whole state
    full = {
        "pos": np.arange(24.0).reshape(8, 3),
        "rng_spawn": np.arange(12, dtype=np.uint64).reshape(2, 6),
        "has_reset": np.array(True),
    }
    parts = [ranks.env_state_part(full, 4, k, 1) for k in (0, 1)]
    assert np.array_equal(np.concatenate([p["pos"] for p in parts]), full["pos"])
    assert np.array_equal(parts[1]["rng_spawn"], full["rng_spawn"][1:])
