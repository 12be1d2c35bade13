"""Exact resume: a run stopped after update k and resumed equals the uninterrupted run, byte for byte."""

import numpy as np
import pytest

from navi_nb.train import checkpoint as ck
from navi_nb.train.config import TrainConfig
from navi_nb.train.loop import Trainer
from navi_nb.train.metrics import read_metrics_csv
from navi_nb.train.runs import CHECKPOINT_DIR

TIMING = {"time_s", "actor_steps_per_s", "t_collect_s", "t_learn_s"}


def tiny_config(tmp_path, **kw):
    cfg = TrainConfig(
        scenes="box",
        resolution=32,
        actors=4,
        sensor_az=8,
        sensor_el=4,
        rollout_steps=16,
        hidden=[16],
        update_epochs=2,
        num_minibatches=2,
        total_steps=4 * 16 * 4,
        checkpoint_every=1,
        keep_checkpoints=0,
        eval_episodes=0,
        run_dir=str(tmp_path),
        env={"max_steps": 20},
    )
    for k, v in kw.items():
        setattr(cfg, k, v)
    return cfg.validate()


@pytest.fixture(autouse=True)
def _world_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("NAVI_NB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def _state_bytes(trainer):
    return {k: np.ascontiguousarray(v).tobytes() for k, v in trainer.state_arrays().items()}


@pytest.mark.parametrize("memory_size", [0, 8])
def test_resume_is_exact(tmp_path, memory_size):
    """With memory too: the checkpoint carries the actors' GRU states."""
    cfg = tiny_config(tmp_path, memory_size=memory_size)
    full = Trainer.create(cfg, run_path=tmp_path / "full")
    full.train(progress=False)
    assert full.update == 4

    part = Trainer.create(tiny_config(tmp_path, memory_size=memory_size), run_path=tmp_path / "part")
    part.train(progress=False, stop_after=2)
    assert part.update == 2
    assert [u for u, _ in ck.list_checkpoints(tmp_path / "part" / CHECKPOINT_DIR)] == [0, 1, 2]
    # a checkpoint is a faithful copy: reloading update 2 into a fresh trainer gives the same state
    del part
    resumed = Trainer.resume(tmp_path / "part")
    assert resumed.update == 2
    resumed.train(progress=False)
    assert resumed.update == 4

    a, b = _state_bytes(full), _state_bytes(resumed)
    assert a.keys() == b.keys()
    assert ("memory.h" in a) == bool(memory_size)
    for k in a:
        assert a[k] == b[k], k
    assert full.rng_action.bit_generator.state == resumed.rng_action.bit_generator.state
    assert full.ppo.rng.bit_generator.state == resumed.ppo.rng.bit_generator.state
    # the final policies are the same bytes, and training did change the weights
    fa = ck.load_checkpoint(
        tmp_path / "full" / "policy.npz", {"policy.params": (full.policy.params.shape, np.float32)}
    )[0]
    fb = ck.load_checkpoint(
        tmp_path / "part" / "policy.npz", {"policy.params": (full.policy.params.shape, np.float32)}
    )[0]
    assert fa["policy.params"].tobytes() == fb["policy.params"].tobytes()
    fresh = Trainer.create(tiny_config(tmp_path, memory_size=memory_size), run_path=tmp_path / "fresh")
    assert fresh.policy.params.tobytes() != full.policy.params.tobytes()
    # metrics: one row per update in both runs, equal apart from timings
    ra = read_metrics_csv(tmp_path / "full" / "metrics.csv")
    rb = read_metrics_csv(tmp_path / "part" / "metrics.csv")
    assert [r["update"] for r in ra] == [r["update"] for r in rb] == [1, 2, 3, 4]
    for x, y in zip(ra, rb):
        for k in x:
            if k not in TIMING:
                assert x[k] == y[k] or (np.isnan(x[k]) and np.isnan(y[k])), k


def test_resume_after_a_crash_past_the_checkpoint(tmp_path):
    """Rows and state written after the newest checkpoint are redone, not duplicated."""
    cfg = tiny_config(tmp_path, checkpoint_every=2)
    full = Trainer.create(cfg, run_path=tmp_path / "full")
    full.train(progress=False)
    run = Trainer.create(tiny_config(tmp_path, checkpoint_every=2), run_path=tmp_path / "crash")
    run.train(progress=False, stop_after=3)  # checkpoints at 2 and (end of this call) 3
    (tmp_path / "crash" / CHECKPOINT_DIR / ck.checkpoint_name(3)).unlink()  # as if killed before writing it
    assert len(read_metrics_csv(tmp_path / "crash" / "metrics.csv")) == 3
    resumed = Trainer.resume(tmp_path / "crash")
    assert resumed.update == 2
    resumed.train(progress=False)
    assert _state_bytes(resumed) == _state_bytes(full)
    assert [r["update"] for r in read_metrics_csv(tmp_path / "crash" / "metrics.csv")] == [1, 2, 3, 4]


def test_checkpoint_holds_the_learner_states_and_refuses_the_old_layout(tmp_path):
    """The checkpoint's ppo.* members are PPO.get_state, env.* NavEnv.get_state, rng.action the
    action generator in navi_nb.rng_state's encoding; a checkpoint of the older layout is refused."""
    import zipfile

    from navi_nb.rng_state import generator_to_array

    run = Trainer.create(tiny_config(tmp_path), run_path=tmp_path / "r")
    run.train(progress=False, stop_after=1)
    path = ck.latest_checkpoint(tmp_path / "r" / CHECKPOINT_DIR)
    arrays, meta = ck.load_checkpoint(path, run.state_spec())
    assert meta["layout"] == 2 and "rng" not in meta
    for k, v in run.ppo.get_state().items():
        assert arrays["ppo." + k].tobytes() == np.asarray(v).tobytes(), k
    for k, v in run.env.get_state().items():
        assert arrays["env." + k].tobytes() == np.asarray(v).tobytes(), k
    assert arrays["rng.action"].tobytes() == generator_to_array(run.rng_action).tobytes()
    # the same file with the older layout's meta (no "layout") is refused, naming the file
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    import json

    old_meta = json.loads(members["meta.json"])
    del old_meta["layout"]
    members["meta.json"] = json.dumps(old_meta).encode()
    for p in (tmp_path / "r" / CHECKPOINT_DIR).iterdir():
        p.unlink()
    with zipfile.ZipFile(path, "w") as z:
        for n, b in members.items():
            z.writestr(n, b)
    with pytest.raises(ck.CheckpointError, match=f"{path}.*layout 1.*layout 2 only"):
        Trainer.resume(tmp_path / "r")


def test_a_cold_learning_child_is_awaited_after_the_first_rollout_with_the_same_bits(tmp_path):
    """The first rollout runs first, and the first update waits for the learning kernels' child and picks
    its shard count after it: the run's state after every update equals a run that picked its shard count
    before its first tick."""
    ref = Trainer.create(tiny_config(tmp_path), run_path=tmp_path / "ref")
    ref.calibrate_shards()
    ref.train(progress=False)

    run = Trainer.create(tiny_config(tmp_path), run_path=tmp_path / "deferred")
    ticks = []
    step = run.env.step

    def counting_step(actions):
        ticks.append(1)
        return step(actions)

    run.env.step = counting_step
    waited = []

    class Child:
        groups = ["learn"]

        def wait(self, group=None):
            waited.append(len(ticks))
            self.groups = []
            return {}

        def cancel(self):
            pass

    run.warmup = Child()
    run.train(progress=False)
    assert waited == [run.cfg.rollout_steps]  # once, after the first rollout's ticks (no calibration tick before)
    assert run.shard_report is not None
    assert _state_bytes(run) == _state_bytes(ref)
    a = read_metrics_csv(tmp_path / "ref" / "metrics.csv")
    b = read_metrics_csv(tmp_path / "deferred" / "metrics.csv")
    assert [repr({k: v for k, v in r.items() if k not in TIMING}) for r in a] == [
        repr({k: v for k, v in r.items() if k not in TIMING}) for r in b
    ]  # repr: NaN (no episode finished yet) equals itself


def test_the_shard_count_is_picked_after_the_first_rollout_without_a_learning_child(tmp_path):
    """With every kernel cached (no warm-up child) the first tick does not wait for the calibration
    either: it runs once, after the first rollout, and the rollout before it runs at the asked-for
    thread count."""
    import numba

    run = Trainer.create(tiny_config(tmp_path, shards=1), run_path=tmp_path / "warm")
    run.warmup.wait()  # every kernel loaded: no child left for the update to wait for
    ticks, calibrated, threads = [], [], []
    step, calibrate = run.env.step, run.calibrate_shards

    def counting_step(actions):
        ticks.append(1)
        threads.append(numba.get_num_threads())
        return step(actions)

    def recording_calibrate(timer=None):
        calibrated.append(len(ticks))
        return calibrate(timer)

    run.env.step, run.calibrate_shards = counting_step, recording_calibrate
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)  # what the first rollout must not run at
    try:
        run.train(progress=False, stop_after=3)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    assert calibrated == [run.cfg.rollout_steps]
    assert run.shard_report is not None and run.update == 3
    assert set(threads) == {1}  # the asked-for count from the first tick on, not Numba's default
