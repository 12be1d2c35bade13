"""allowed_cores on fake cgroup v1/v2 trees, and the shard report's fields."""

import io
import os

import pytest

import navi_nb  # noqa: F401
from navi_nb.cores import allowed_cores
from navi_nb.parallel.shards import ShardError, UpdateShape, choose_shards


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def v2_tree(root, cpu_max, parent_max=None):
    write(root, "proc/self/cgroup", "0::/user.slice/job\n")
    write(root, "sys/fs/cgroup/cgroup.controllers", "cpu memory\n")
    write(root, "sys/fs/cgroup/user.slice/job/cpu.max", cpu_max + "\n")
    if parent_max is not None:
        write(root, "sys/fs/cgroup/user.slice/cpu.max", parent_max + "\n")


def v1_tree(root, quota, period, in_namespace=False):
    write(root, "proc/self/cgroup", "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n")
    base = "sys/fs/cgroup/cpu,cpuacct" + ("" if in_namespace else "/docker/abc")
    write(root, base + "/cpu.cfs_quota_us", f"{quota}\n")
    write(root, base + "/cpu.cfs_period_us", f"{period}\n")


AFF4 = range(4)


@pytest.mark.parametrize(
    "cpu_max,expect,raw_cores",
    [
        ("200000 100000", 2, 2.0),  # quota below affinity
        ("400000 100000", 4, 4.0),  # equal
        ("1600000 100000", 4, 16.0),  # above: affinity binds
        ("250000 100000", 2, 2.5),  # fractional: rounded down
        ("50000 100000", 1, 0.5),  # below one core: at least 1
        ("max 100000", 4, None),  # no quota
    ],
)
def test_cgroup_v2(tmp_path, cpu_max, expect, raw_cores):
    v2_tree(str(tmp_path), cpu_max)
    rep = allowed_cores(str(tmp_path), affinity=AFF4)
    assert rep.cgroup_version == 2
    assert rep.allowed == expect
    assert rep.affinity_count == 4
    assert rep.quota_cores == raw_cores
    assert rep.quota_raw == (None if raw_cores is None else cpu_max)


def test_cgroup_v2_parent_quota_binds(tmp_path):
    v2_tree(str(tmp_path), "max 100000", parent_max="300000 100000")
    rep = allowed_cores(str(tmp_path), affinity=range(8))
    assert rep.allowed == 3 and rep.quota_cores == 3.0
    assert "quota allows 3 of" in rep.reason


@pytest.mark.parametrize(
    "quota,period,expect",
    [(200000, 100000, 2), (400000, 100000, 4), (800000, 100000, 4), (150000, 100000, 1), (-1, 100000, 4)],
)
@pytest.mark.parametrize("in_namespace", [False, True])
def test_cgroup_v1(tmp_path, quota, period, expect, in_namespace):
    v1_tree(str(tmp_path), quota, period, in_namespace)
    rep = allowed_cores(str(tmp_path), affinity=AFF4)
    assert rep.cgroup_version == 1
    assert rep.allowed == expect
    assert rep.quota_raw == (None if quota == -1 else f"{quota}/{period}")


def test_no_cgroup_affinity_only(tmp_path):
    rep = allowed_cores(str(tmp_path), affinity=[0, 2, 5])
    assert rep.cgroup_version is None and rep.quota_cores is None
    assert rep.allowed == 3


def test_real_machine_is_sane():
    rep = allowed_cores()
    assert 1 <= rep.allowed <= len(os.sched_getaffinity(0))


def render(report):
    from rich.console import Console

    buf = io.StringIO()
    report.print(Console(file=buf, width=200))
    return buf.getvalue()


def test_report_prints_every_field(tmp_path):
    import numba

    v2_tree(str(tmp_path), "200000 100000")
    cores = allowed_cores(str(tmp_path), affinity=range(80))
    assert cores.reason.startswith("quota allows 2 of")
    from navi_nb.learn.policy import ActorCritic
    from navi_nb.learn.ppo import PPO, PPOConfig
    from navi_nb.learn.rollout import RolloutSlab

    pol = ActorCritic(10, 4, hidden=(8, 8))
    slab = RolloutSlab(4, 16, 10, 4)
    before = numba.get_num_threads()
    try:
        rep = choose_shards(
            None,
            PPO(pol, PPOConfig(chunk_size=8)),
            slab,
            shape=UpdateShape(minibatch_size=32),
            budget_s=0.1,
            cores=cores,
        )
        text = render(rep)
        for field in (
            "os.cpu_count()",
            "affinity",
            "quota (raw)",
            "200000 100000",
            "quota (cores)",
            "allowed cores",
            "measured at 1",
            "PPO ",
            "ms, step",  # the collection tick's acting and stepping, each timed
            "choice",
            "reason",
            "measured fastest",
        ):
            assert field in text, field
        top = min(2, numba.config.NUMBA_NUM_THREADS)
        assert set(rep.rates) == set(range(1, top + 1))
        assert rep.choice in rep.rates and numba.get_num_threads() == rep.choice
        assert rep.learner == "PPO" and all(r["t_act_s"] > 0.0 for r in rep.rates.values())
    finally:
        numba.set_num_threads(before)


def test_calibration_times_the_fused_minibatches_and_restores_the_learner(tmp_path):
    """Calibration times PPO.minibatches (what training runs), then puts weights, Adam and the
    shuffle generator back: a learner that was calibrated trains to the same bits as one that was not."""
    import numba
    import numpy as np

    from navi_nb.learn.policy import ActorCritic
    from navi_nb.learn.ppo import PPO, PPOConfig
    from navi_nb.learn.rollout import RolloutSlab

    v2_tree(str(tmp_path), "200000 100000")
    cores = allowed_cores(str(tmp_path), affinity=range(2))

    def learner():
        slab = RolloutSlab(4, 16, 10, 4)
        slab.buffer[...] = np.random.default_rng(3).normal(size=slab.buffer.shape).astype(np.float32) * 0.1
        slab.terminated[...] = 0.0
        slab.truncated[...] = 0.0
        return PPO(ActorCritic(10, 4, hidden=(8, 8), seed=1), PPOConfig(chunk_size=8), seed=2), slab

    ppo, slab = learner()
    calls = []
    fused = ppo.minibatches

    def counted(order, mb, count, lr=None, target_kl=None, blk=None):
        out = fused(order, mb, count, lr, target_kl, blk)
        calls.append((mb, count, ppo.adam.t))
        return out

    ppo.minibatches = counted
    before = ppo.get_state()
    threads = numba.get_num_threads()
    try:
        rep = choose_shards(
            None,
            ppo,
            slab,
            shape=UpdateShape(minibatches=8, per_epoch=4, minibatch_size=16),
            budget_s=0.1,
            cores=cores,
        )
    finally:
        numba.set_num_threads(threads)
    assert calls and all(c[:2] == (16, 4) for c in calls) and max(c[2] for c in calls) > 0
    assert set(rep.rates) == set(range(1, min(2, numba.config.NUMBA_NUM_THREADS) + 1))
    after = ppo.get_state()
    assert all(after[k].tobytes() == before[k].tobytes() for k in before)
    del ppo.minibatches
    fresh, fresh_slab = learner()
    for p, sl in ((ppo, slab), (fresh, fresh_slab)):
        p.update(sl, np.zeros(16, np.float32), num_updates=2)
    assert ppo.policy.params.tobytes() == fresh.policy.params.tobytes()


def test_override_and_warning(monkeypatch, tmp_path):
    import numba

    v2_tree(str(tmp_path), "100000 100000")
    cores = allowed_cores(str(tmp_path), affinity=range(4))
    before = numba.get_num_threads()
    try:
        cap = numba.config.NUMBA_NUM_THREADS
        rep = choose_shards(cap, cores=cores)
        assert rep.choice == cap and rep.source == "argument" and not rep.rates
        if cap > 1:
            assert any("only 1 cores are allowed" in w and "slower" in w for w in rep.warnings)
        rep = choose_shards(cap + 3, cores=cores)
        assert rep.choice == cap and any("NUMBA_NUM_THREADS" in w for w in rep.warnings)
        monkeypatch.setenv("NAVI_NB_SHARDS", "1")
        rep = choose_shards(None, cores=cores)
        assert rep.choice == 1 and rep.source == "NAVI_NB_SHARDS" and "skipped" in render(rep)
        monkeypatch.setenv("NAVI_NB_SHARDS", "two")
        with pytest.raises(ShardError, match="NAVI_NB_SHARDS"):
            choose_shards(None, cores=cores)
    finally:
        numba.set_num_threads(before)


def test_env_tick_leaves_the_environment_unchanged():
    import numpy as np

    from navi_nb.env.toy import PointGoalToy
    from navi_nb.parallel.shards import env_tick

    class Stateful(PointGoalToy):
        def get_state(self):
            return {k: getattr(self, k).copy() for k in ("pos", "goal", "steps", "ep_return")} | {
                "rng": self.rng.bit_generator.state
            }

        def set_state(self, st):
            for k in ("pos", "goal", "steps", "ep_return"):
                getattr(self, k)[...] = st[k]
            self.rng.bit_generator.state = st["rng"]

    env = Stateful(8, seed=0)
    env.reset(seed=0)
    before = env.get_state()
    tick = env_tick(env, np.ones((8, 4), np.float32))
    for _ in range(50):  # enough steps that some episodes would have ended
        tick()
    after = env.get_state()
    for k in ("pos", "goal", "steps", "ep_return"):
        assert np.array_equal(before[k], after[k]), k
    assert before["rng"] == after["rng"]
