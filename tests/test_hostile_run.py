"""Hostile inputs to the trainer's files and state: checkpoints, policy.npz, eval_episodes.npz, env and
optimizer state, the file system and sizes.

Every bad input ends in one line naming the file or argument, exit status 2
from the CLI, and the run folder exactly as it was (names and bytes of every
file); never a traceback, a half-applied state or a silent wrong answer.
"""

import errno
import io
import json
import os
import shutil
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
from run_helpers import tiny_run_args

from navi_nb.cli import main
from navi_nb.errors import NaviError
from navi_nb.train import checkpoint as ck

TINY = tiny_run_args()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny finished run (2 updates, checkpoints 0..2, evaluated on 4 episodes); tests copy it."""
    root = tmp_path_factory.mktemp("runs")
    mp = pytest.MonkeyPatch()
    mp.setenv("NAVI_NB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
    assert main(["train", *TINY, "--run-dir", str(root), "--name", "r"]) == 0
    mp.undo()
    return root / "r"


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("NAVI_NB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
    monkeypatch.setenv("COLUMNS", "2000")  # rich folds a long path at the terminal width otherwise


def snapshot(folder: Path):
    return {
        str(p.relative_to(folder)) + ("/" if p.is_dir() else ""): (p.read_bytes() if p.is_file() else b"")
        for p in sorted(folder.rglob("*"))
        if p.name != "tb" and "tb" not in p.relative_to(folder).parts
    }


def copy_run(trained, tmp_path, name="run"):
    dst = tmp_path / name
    shutil.copytree(trained, dst)
    return dst


def fails_cleanly(argv, capsys, match, folder=None):
    """``main(argv)`` exits 2 with one line containing ``match``, and leaves ``folder`` as it was."""
    before = snapshot(folder) if folder is not None and folder.exists() else None
    code = main(argv)
    raw = capsys.readouterr().err
    err = " ".join(raw.split())  # rich wraps long lines at the terminal width
    assert code == 2, (code, raw[-3000:])
    assert err.startswith("error:") and err.count("error:") == 1 and match in err, err
    assert "Traceback" not in raw
    if before is not None:
        assert snapshot(folder) == before, "run folder changed"
    return err


# ---------------------------------------------------------------- rewriting members of a real file


def members_of(path):
    with zipfile.ZipFile(path) as zf:
        return [(i.filename, zf.read(i)) for i in zf.infolist()]


def rewrite(path, change, deflate=()):
    """Rewrite the .npz at ``path`` with ``change(name, bytes) -> bytes`` applied to every member."""
    members = [(n, change(n, b)) for n, b in members_of(path)]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for n, b in members:
            zf.writestr(
                zipfile.ZipInfo(n), b, compress_type=zipfile.ZIP_DEFLATED if n in deflate else zipfile.ZIP_STORED
            )
    path.write_bytes(buf.getvalue())


def npy_member(header_text, data=b""):
    text = header_text.encode("latin1")
    text += b" " * ((-(10 + len(text) + 1)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + data


def npy_values(body, edit):
    """A .npy member's bytes with its array replaced by ``edit(array)`` (same header)."""
    arr = np.load(io.BytesIO(body), allow_pickle=False)
    arr = np.array(edit(arr.copy()), dtype=arr.dtype).reshape(arr.shape)
    out = io.BytesIO()
    np.lib.format.write_array(out, arr, version=(1, 0), allow_pickle=False)
    return out.getvalue()


def latest_ckpt(run):
    return ck.latest_checkpoint(run / "checkpoints")


UNBALANCED = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,\n"
DEEP_META = b"[" * 100_000 + b"]" * 100_000


# ---------------------------------------------------------------- 3, 4: parser errors in headers and meta.json


@pytest.mark.parametrize("damage", ["npy header", "meta.json"])
def test_unparsable_header_or_meta_is_one_line(trained, tmp_path, capsys, damage):
    run = copy_run(trained, tmp_path)

    def change(name, body):
        if damage == "npy header" and name.endswith(".npy"):
            return npy_member(UNBALANCED, b"\0" * 4)
        if damage == "meta.json" and name == "meta.json":
            return DEEP_META
        return body

    for p in ck.list_checkpoints(run / "checkpoints"):
        rewrite(p[1], change)
    rewrite(run / "policy.npz", change)
    fails_cleanly(["eval", str(run), "--episodes", "2"], capsys, "policy.npz", run)
    fails_cleanly(["eval", str(run), "--episodes", "2", "--policy", "latest"], capsys, "ckpt_00000002.npz", run)
    # resume reads the newest checkpoint: make the run unfinished so it has work to do
    fails_cleanly(["train", "--resume", str(run), "--no-progress"], capsys, "ckpt_00000002.npz", run)


# ---------------------------------------------------------------- 5: non-finite weights in policy.npz


@pytest.mark.parametrize("bad", [np.inf, np.nan, -np.inf])
def test_non_finite_policy_weights_refused(trained, tmp_path, capsys, bad):
    run = copy_run(trained, tmp_path)
    (run / "eval.json").unlink()

    def change(name, body):
        if name == "policy.params.npy":
            return npy_values(body, lambda a: np.where(np.arange(a.size) == 3, bad, a))
        return body

    rewrite(run / "policy.npz", change)
    err = fails_cleanly(["eval", str(run), "--episodes", "2"], capsys, "policy.npz", run)
    assert "non-finite" in err and "NavEnv" not in err
    assert not (run / "eval.json").exists()


# ---------------------------------------------------------------- 6: eval_episodes.npz that inflates past its size


def _deflated_zeros_member(zf, name, header, nbytes, chunk=8 << 20):
    with zf.open(name, "w", force_zip64=True) as f:  # deflated at the ZipFile's level
        f.write(npy_member(header))
        left = nbytes
        zeros = bytes(chunk)
        while left:
            n = min(left, chunk)
            f.write(zeros[:n])
            left -= n


def test_episode_file_sized_by_its_meta_is_refused_unread(trained, tmp_path, capsys):
    """1,000 episodes x 89,478 steps declared, members deflated zeros: the file is about a megabyte."""
    run = copy_run(trained, tmp_path)
    n, steps = 1000, 89_478
    path = run / "eval_episodes.npz"
    meta = json.loads(dict(members_of(path))["meta.json"])
    meta.update(episodes=n, steps=steps)
    spec = {
        "positions": ((steps, n, 3), "<f4"),
        "yaws": ((steps, n), "<f4"),
        "goals": ((n, 3), "<f4"),
        "length": ((n,), "<i4"),
        "success": ((n,), "|b1"),
        "return": ((n,), "<f4"),
        "spl": ((n,), "<f4"),
        "collisions": ((n,), "<i4"),
    }
    zf = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1)
    with zf:
        zf.writestr("meta.json", json.dumps(meta))
        for name, (shape, descr) in spec.items():
            header = f"{{'descr': {descr!r}, 'fortran_order': False, 'shape': {shape!r}, }}"
            _deflated_zeros_member(zf, name + ".npy", header, int(np.prod(shape)) * np.dtype(descr).itemsize)
    assert path.stat().st_size < 8 << 20
    tracemalloc.start()
    try:
        err = fails_cleanly(
            ["render", str(run), "--episode", "0", "-o", str(tmp_path / "ep.png")], capsys, "eval_episodes.npz", run
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "refused unread" in err
    assert peak < 200 << 20, f"peak traced memory {peak / 2**20:.0f} MiB"


def test_deflated_real_files_still_read(trained, tmp_path):
    """Deflating a real file's members (ratio near 1) stays within the bound: it reads as before."""
    from navi_nb.train.evaluate import load_episodes

    run = copy_run(trained, tmp_path)
    before, _ = load_episodes(run)
    rewrite(run / "eval_episodes.npz", lambda n, b: b, deflate={n for n, _ in members_of(run / "eval_episodes.npz")})
    after, _ = load_episodes(run)
    assert before.keys() == after.keys()
    for k in before:
        assert before[k].tobytes() == after[k].tobytes(), k


# ---------------------------------------------------------------- 7: impossible values in eval_episodes.npz


@pytest.mark.parametrize(
    "member,value,match",
    [
        ("positions", np.nan, "non-finite"),
        ("positions", 1e30, "outside the world"),
        ("goals", np.inf, "non-finite"),
        ("yaws", np.nan, "non-finite"),
        ("length", -5, "'length'"),
        ("length", 10_000, "'length'"),
        ("spl", 3.0, "'spl'"),
        ("collisions", -1, "'collisions'"),
    ],
)
def test_impossible_episode_values_refused(trained, tmp_path, capsys, member, value, match):
    run = copy_run(trained, tmp_path)

    def change(name, body):
        if name == member + ".npy":
            return npy_values(body, lambda a: np.where(np.arange(a.size).reshape(a.shape) == 0, value, a))
        return body

    rewrite(run / "eval_episodes.npz", change)
    err = fails_cleanly(
        ["render", str(run), "--episode", "0", "-o", str(tmp_path / "ep.png")], capsys, "eval_episodes.npz", run
    )
    assert match in err


# ---------------------------------------------------------------- 10, 11, 13: environment and optimizer state


@pytest.fixture(scope="module")
def env():
    from conftest import compiled_scene

    from navi_nb.env.nav_env import NavEnv
    from navi_nb.sense.sensor import Sensor

    e = NavEnv(compiled_scene("box", 32), 3, sensor=Sensor(8, 4), seed=5, max_steps=20)
    e.reset()
    return e


def _state_bytes(env):
    return {k: np.asarray(v).tobytes() for k, v in env.get_state().items()}


def test_masked_array_cannot_hide_nan_from_step(env):
    from navi_nb.env.config import ActionError

    before = _state_bytes(env)
    a = np.zeros((3, 4), np.float32)
    a[1, 2] = np.nan
    with pytest.raises(ActionError, match="masked"):
        env.step(np.ma.masked_invalid(a))
    assert _state_bytes(env) == before
    # a masked array with nothing masked is refused the same way (its mask decides nothing here)
    with pytest.raises(ActionError):
        env.step(np.ma.array(np.zeros((3, 4), np.float32)))
    assert _state_bytes(env) == before
    env.step(np.zeros((3, 4), np.float32))  # the env still works
    assert np.isfinite(env.positions).all()


def test_set_state_all_or_nothing_for_generator_words_and_flags(env):
    from navi_nb.env.config import StateError

    good = env.get_state()
    for word in range(6):
        state = {k: np.copy(v) for k, v in good.items()}
        state["rng_spawn"][word] = np.uint64(2**64 - 1)
        before = _state_bytes(env)
        try:
            env.set_state(state)
        except StateError:
            assert _state_bytes(env) == before, word  # refused: nothing changed
        else:
            assert _state_bytes(env)["rng_spawn"] == state["rng_spawn"].tobytes(), word  # restored exactly
            env.set_state(good)
    env.step(np.full((3, 4), 0.5, np.float32))  # the env now differs from ``good``, which stays valid
    for has_reset in (np.array([True, False]), "yes", np.array(2)):
        state = {k: np.copy(v) for k, v in good.items()}
        state["has_reset"] = has_reset
        before = _state_bytes(env)
        with pytest.raises(StateError, match="has_reset"):
            env.set_state(state)
        assert _state_bytes(env) == before


@pytest.mark.parametrize(
    "name,value,match",
    [
        ("pos", 1e30, "outside"),
        ("pos", -1e30, "outside"),
        ("goal", 1e30, "outside"),
        ("yaw", 1e30, "yaw"),
        ("yaw", 4.0, "yaw"),
        ("ep_len", -1, "negative"),
        ("ep_len", 10**6, "max_steps"),
        ("goal_dist", -1.0, "negative"),
        ("start_dist", -1.0, "negative"),
        ("path_len", -2.0, "negative"),
        ("collisions", -1, "negative"),
        ("episodes", -1, "negative"),
        ("cells", -1, "negative"),
        ("cells", 2**30, "cells"),
        ("vel", 1e30, "vel"),
        ("prev_action", 5.0, "prev_action"),
        ("ep_return", np.inf, "non-finite"),
        ("obs", np.nan, "non-finite"),
    ],
)
def test_set_state_refuses_finite_impossible_values(env, name, value, match):
    from navi_nb.env.config import StateError

    state = {k: np.copy(v) for k, v in env.get_state().items()}
    flat = state[name].reshape(-1)
    flat[0] = value
    before = _state_bytes(env)
    with pytest.raises(StateError, match=match):
        env.set_state(state)
    assert _state_bytes(env) == before


def test_set_state_accepts_its_own_states(env):
    """The range checks accept every state stepping produces (many steps, autoresets included)."""
    rng = np.random.default_rng(3)
    for _ in range(60):
        env.step(rng.uniform(-1.5, 1.5, (3, 4)).astype(np.float32))
        state = env.get_state()
        env.set_state(state)
    assert _state_bytes(env) == {k: np.asarray(v).tobytes() for k, v in state.items()}


def test_ppo_and_adam_refuse_impossible_optimizer_state():
    from navi_nb.learn.adam import Adam, OptimizerStateError
    from navi_nb.learn.policy import ActorCritic
    from navi_nb.learn.ppo import PPO, PPOConfig, PPOConfigError

    ppo = PPO(ActorCritic(10, 4, hidden=(8,), seed=0), PPOConfig(), seed=0)
    good = ppo.get_state()
    for key, value, match in (
        ("adam_v", -1e-3, "negative"),
        ("adam_v", np.inf, "non-finite"),
        ("adam_m", np.nan, "non-finite"),
        ("adam_t", -1, "negative"),
    ):
        state = {k: np.copy(v) for k, v in good.items()}
        state[key].reshape(-1)[0] = value
        before = {k: np.asarray(v).tobytes() for k, v in ppo.get_state().items()}
        with pytest.raises(PPOConfigError, match=match):
            ppo.set_state(state)
        assert {k: np.asarray(v).tobytes() for k, v in ppo.get_state().items()} == before, key
    masked = {k: np.copy(v) for k, v in good.items()}
    for key in ("params", "adam_m"):
        masked = {k: np.copy(v) for k, v in good.items()}
        masked[key].reshape(-1)[0] = np.nan
        masked[key] = np.ma.masked_invalid(masked[key])  # the mask must not hide the NaN
        with pytest.raises(PPOConfigError, match="non-finite"):
            ppo.set_state(masked)
        assert ppo.policy.params.tobytes() == good["params"].tobytes()
    adam = Adam(np.zeros(5, np.float32))
    m0 = adam.m.copy()
    with pytest.raises(OptimizerStateError, match="second moment"):
        adam.load_state({"m": np.ones(5, np.float32), "v": -np.ones(5, np.float32), "t": np.array(3)})
    assert adam.m.tobytes() == m0.tobytes() and adam.t == 0
    with pytest.raises(OptimizerStateError, match="'m'"):
        adam.load_state({"m": np.ones(4, np.float32), "v": np.ones(5, np.float32), "t": np.array(3)})


@pytest.mark.parametrize(
    "member,word,value,match",
    [
        ("env.rng_spawn", 4, 2**64 - 1, "rng_spawn"),
        ("env.pos", 0, 1e30, "pos"),
        ("env.yaw", 0, 1e30, "yaw"),
        ("env.ep_len", 0, -1, "ep_len"),
        ("env.goal_dist", 0, -1.0, "goal_dist"),
        ("ppo.adam_v", 0, -1.0, "second moment"),
    ],
)
def test_resume_refuses_impossible_checkpoint_state(trained, tmp_path, capsys, member, word, value, match):
    run = copy_run(trained, tmp_path)

    def change(name, body):
        if name == member + ".npy":
            return npy_values(
                body, lambda a: np.where(np.arange(a.size).reshape(a.shape) == word, np.array(value).astype(a.dtype), a)
            )
        return body

    rewrite(latest_ckpt(run), change)
    err = fails_cleanly(["train", "--resume", str(run), "--no-progress"], capsys, "ckpt_00000002.npz", run)
    assert match in err


# ---------------------------------------------------------------- 14: file system and sizes


def _raise(err, path=None):
    def fail(*args, **kwargs):
        raise OSError(err, os.strerror(err), str(path if path is not None else (args[0] if args else "?")))

    return fail


def test_read_only_run_dir_new_run(tmp_path, capsys, monkeypatch):
    """A read-only file system (EROFS, simulated: chmod does not stop root) under the run folder."""
    real_mkdir = os.mkdir

    def mkdir(path, *a, **kw):
        if str(path).startswith(str(tmp_path / "ro")):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_mkdir(path, *a, **kw)

    monkeypatch.setattr(os, "mkdir", mkdir)
    err = fails_cleanly(
        ["train", *TINY, "--run-dir", str(tmp_path / "ro"), "--name", "r"], capsys, "Read-only file system"
    )
    assert str(tmp_path / "ro") in err
    assert not (tmp_path / "ro").exists()


def test_read_only_run_folder_eval(trained, tmp_path, capsys, monkeypatch):
    import navi_nb.train.evaluate as evaluate

    run = copy_run(trained, tmp_path)
    monkeypatch.setattr(evaluate, "write_json_atomic", _raise(errno.EROFS))
    err = fails_cleanly(["eval", str(run), "--episodes", "2"], capsys, "Read-only file system", run)
    assert "eval.json" in err


def test_read_only_run_folder_resume(trained, tmp_path, capsys, monkeypatch):
    """Resume's first write (trimming the metrics to the checkpoint) on a read-only folder: one line."""
    import navi_nb.train.metrics as metrics

    run = copy_run(trained, tmp_path)
    monkeypatch.setattr(metrics, "truncate_metrics", _raise(errno.EROFS, run / "metrics.csv"))
    err = fails_cleanly(["train", "--resume", str(run), "--no-progress"], capsys, "Read-only file system", run)
    assert "metrics.csv" in err


def test_disk_full_while_a_world_compiles_names_the_cache_entry(tmp_path, capsys, monkeypatch):
    """ENOSPC while a new world's cache entry is written: one line naming the entry (not the temporary folder
    it was staged in), no run folder left, no entry; with space again the same command trains."""
    import navi_nb.files

    monkeypatch.setenv("NAVI_NB_CACHE", str(tmp_path / "cache"))

    def disk_full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    argv = ["train", *TINY, "--run-dir", str(tmp_path / "runs"), "--name", "r"]
    with monkeypatch.context() as m:
        m.setattr(navi_nb.files.os, "fsync", disk_full)
        code = main(argv)
    raw = capsys.readouterr().err
    err = " ".join(raw[raw.index("error:") :].split())  # after the compile's progress line
    assert code == 2 and err.count("error:") == 1 and "Traceback" not in raw, raw[-3000:]
    assert "No space left on device" in err and "world cache entry " in err, err
    assert "/r32/0.gmdag: cannot be written" in err and ".tmp-" not in err, err
    assert not (tmp_path / "runs" / "r").exists()
    assert not list((tmp_path / "cache").rglob("*.gmdag*")), list((tmp_path / "cache").rglob("*"))
    assert main(argv) == 0


def test_disk_full_during_checkpoint(trained, tmp_path, capsys, monkeypatch):
    """ENOSPC while a checkpoint is written: one line, older checkpoints kept, no temporary file left."""
    run = copy_run(trained, tmp_path)
    path = latest_ckpt(run)
    path.unlink()  # update 2 is redone on resume and its checkpoint written again
    (run / "policy.npz").unlink()
    before = {p.name: p.read_bytes() for p in (run / "checkpoints").iterdir()}
    real_save = ck.save_checkpoint

    def disk_full(target, arrays, meta, _hook=None):
        def hook(step):
            if step == "fsync":  # the data no longer fits: what the kernel reports on flush or fsync
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))

        return real_save(target, arrays, meta, _hook=hook)

    monkeypatch.setattr(ck, "save_checkpoint", disk_full)
    err = fails_cleanly(
        ["train", "--resume", str(run), "--no-progress", "--eval-episodes", "0"], capsys, "No space left on device"
    )
    assert "ckpt_00000002.npz" in err and "older checkpoints are kept" in err
    assert {p.name: p.read_bytes() for p in (run / "checkpoints").iterdir()} == before
    monkeypatch.undo()
    assert main(["train", "--resume", str(run), "--no-progress", "--eval-episodes", "0"]) == 0
    assert latest_ckpt(run) == path


def test_name_too_long(tmp_path, capsys):
    name = "n" * 300
    err = fails_cleanly(["train", *TINY, "--run-dir", str(tmp_path), "--name", name], capsys, "--name")
    assert "300 bytes" in err
    assert list(tmp_path.iterdir()) == []


def test_run_dir_is_a_file(tmp_path, capsys):
    f = tmp_path / "afile"
    f.write_text("x")
    fails_cleanly(["train", *TINY, "--run-dir", str(f), "--name", "r"], capsys, "is not a folder")
    assert f.read_text() == "x"


def test_resume_when_newest_checkpoint_is_a_directory(trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path)
    newest = latest_ckpt(run)
    newest.unlink()
    newest.mkdir()
    err = fails_cleanly(["train", "--resume", str(run), "--no-progress"], capsys, "not a regular file", run)
    assert newest.name in err


def test_eval_too_many_episodes_refused_before_allocating(trained, tmp_path, capsys, monkeypatch):
    import navi_nb.ram

    run = copy_run(trained, tmp_path)
    monkeypatch.setattr(navi_nb.ram, "available_ram", lambda: 8 << 30)
    err = fails_cleanly(["eval", str(run), "--episodes", "10000000"], capsys, "10000000 episodes", run)
    assert "GiB" in err


def test_too_many_actors_refused_before_allocating(tmp_path, capsys, monkeypatch):
    import navi_nb.ram

    monkeypatch.setattr(navi_nb.ram, "available_ram", lambda: 2 << 30)
    cfg = tmp_path / "big.json"
    cfg.write_text(json.dumps({"actors": 2_000_000}))
    err = fails_cleanly(
        [
            "train",
            *TINY,
            "--config",
            str(cfg),
            "--actors",
            "2000000",
            "--run-dir",
            str(tmp_path / "runs"),
            "--name",
            "big",
        ],
        capsys,
        "actors=2000000",
    )
    assert "GiB" in err
    assert not (tmp_path / "runs").exists()


def test_ram_estimate_is_a_lower_bound():
    """The estimate counts only buffers a run certainly holds (checked against NavEnv's own report)."""
    from conftest import compiled_scene

    from navi_nb.train.config import TrainConfig
    from navi_nb.train.loop import Trainer

    for task in ("pointgoal", "explore"):
        cfg = TrainConfig(
            scenes="box",
            resolution=32,
            actors=6,
            sensor_az=8,
            sensor_el=4,
            rollout_steps=16,
            hidden=[16],
            num_minibatches=2,
            task=task,
        ).validate()
        trainer = Trainer(cfg, Path("unused"), compiled_scene("box", 32))
        assert cfg.obs_dim() == trainer.env.obs_dim
        held = trainer.env.ram_report()["bytes_per_actor"] * cfg.actors + trainer.slab.buffer.nbytes
        assert 0.5 * held < cfg.ram_estimate() <= held, (cfg.ram_estimate(), held)


def test_deeply_nested_config_file_refused(tmp_path, capsys):
    cfg = tmp_path / "deep.json"
    cfg.write_text("[" * 100_000 + "]" * 100_000)
    fails_cleanly(["train", *TINY, "--config", str(cfg), "--run-dir", str(tmp_path)], capsys, str(cfg))


# ---------------------------------------------------------------- 15: a kill during the first checkpoint


def test_kill_during_first_checkpoint_leaves_a_run_that_can_be_started_over(tmp_path, capsys, monkeypatch):
    real_save = ck.save_checkpoint

    def killed(path, arrays, meta, _hook=None):
        def hook(step):
            if step == "fsync":  # the temporary file exists, the final name does not: a SIGKILL here
                raise KeyboardInterrupt

        return real_save(path, arrays, meta, _hook=hook)

    monkeypatch.setattr(ck, "save_checkpoint", killed)
    argv = ["train", *TINY, "--run-dir", str(tmp_path), "--name", "r"]
    assert main(argv) == 130
    monkeypatch.undo()
    run = tmp_path / "r"
    assert [p.name for p in (run / "checkpoints").iterdir() if p.name.endswith(".tmp")]
    assert ck.latest_checkpoint(run / "checkpoints") is None
    err = fails_cleanly(["train", "--resume", str(run), "--no-progress"], capsys, "no checkpoint", run)
    assert "--name r" in err
    assert main(argv) == 0  # the same command starts it over
    assert [u for u, _ in ck.list_checkpoints(run / "checkpoints")] == [0, 1, 2]
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.endswith(".tmp")]
    from navi_nb.train.metrics import read_metrics_csv

    assert [r["update"] for r in read_metrics_csv(run / "metrics.csv")] == [1, 2]


def test_a_folder_with_other_files_is_still_refused(trained, tmp_path, capsys):
    """Only a folder holding nothing but a run's first files is taken over; anything else is refused."""
    run = tmp_path / "r"
    run.mkdir()
    (run / "config.json").write_text("{}")
    (run / "notes.txt").write_text("mine")
    fails_cleanly(["train", *TINY, "--run-dir", str(tmp_path), "--name", "r"], capsys, "not empty", run)
    finished = copy_run(trained, tmp_path, "done")
    fails_cleanly(["train", *TINY, "--run-dir", str(tmp_path), "--name", "done"], capsys, "not empty", finished)


# ---------------------------------------------------------------- fuzzing the three files


def _checkpoint_cases(run, work, seed, indices, kinds=("checkpoint", "policy", "episodes")):
    """``(index, outcome, mutator, kind, detail)`` of checkpoint-target cases over ``run``'s files, in this
    process, through the fuzz runner (the one classifier every target uses)."""
    from navi_nb.fuzz import checkpoint, runner

    target = checkpoint.checkpoint_target(run, kinds)
    fuzzer = checkpoint.Fuzzer(run, work / "work", seed)
    folder = work / "cases"
    folder.mkdir(exist_ok=True)
    return [(i, *runner.run_case(target, fuzzer, seed, i, str(folder))) for i in indices]


def test_fuzz_subset_has_no_failure(trained, tmp_path):
    """A fixed, deterministic subset of mutated checkpoints, policy.npz and eval_episodes.npz files."""
    from collections import Counter

    from navi_nb.fuzz.checkpoint import KINDS, MUTATORS
    from navi_nb.fuzz.outcomes import FAILURES

    results = _checkpoint_cases(trained, tmp_path, 0, range(450))  # 150 of each kind (case i is kind i % 3)
    failures = [r for r in results if r[1] in FAILURES]
    assert not failures, failures[:3]
    for kind in KINDS:
        c = Counter(r[1] for r in results if r[3] == kind)
        assert sum(c.values()) == 150 and not any(c[o] for o in FAILURES), (kind, c)
        assert c["rejected"] > 75 and c["ok"] > 0, (kind, c)  # the mutations do reach the checks
    assert len(MUTATORS) >= 15


def test_fuzz_case_is_a_pure_function_of_its_index(trained, tmp_path):
    from navi_nb.fuzz.checkpoint import Fuzzer

    a = Fuzzer(trained, tmp_path / "a", seed=3)
    b = Fuzzer(trained, tmp_path / "b", seed=3)
    for target in ("checkpoint", "policy", "episodes"):
        for i in (0, 17):
            assert a.mutate(target, i) == b.mutate(target, i)
    indices = [0, 1, 2, 51, 52, 53]  # kind-cases 0 and 17 of each kind
    first = _checkpoint_cases(trained, tmp_path / "a", 3, indices)
    again = _checkpoint_cases(trained, tmp_path / "b", 3, indices)
    assert [r[:4] for r in first] == [r[:4] for r in again]


def test_fuzz_counts_a_reader_bug_as_a_traceback(trained, tmp_path, monkeypatch):
    """The outcome accounting: an exception that is not a NaviError is a traceback, not a rejection."""
    import navi_nb.train.evaluate as evaluate

    def outcome():
        return _checkpoint_cases(trained, tmp_path, 0, [0], kinds=("episodes",))[0][1]

    def broken(*a, **k):
        raise IndexError("a reader bug")

    monkeypatch.setattr(evaluate, "load_episodes", broken)
    assert outcome() == "traceback"
    monkeypatch.setattr(evaluate, "load_episodes", lambda *a, **k: ({"positions": np.array([np.nan])}, {}))
    assert outcome() == "non-finite"
    monkeypatch.setattr(evaluate, "load_episodes", lambda *a, **k: (_ for _ in ()).throw(NaviError("a\nb")))
    assert outcome() == "traceback"


def test_fuzz_command_has_a_checkpoint_target(tmp_path):
    """`navi-nb fuzz --target checkpoint` runs these cases through the command's own case runner."""
    from navi_nb.fuzz import checkpoint, runner
    from navi_nb.fuzz.outcomes import FAILURES

    bases = runner.TARGETS["checkpoint"].bases()
    results = [runner.run_case("checkpoint", bases, 0, i, str(tmp_path)) for i in range(45)]
    outcomes = [r[0] for r in results]
    assert not set(outcomes) & set(FAILURES), [r for r in results if r[0] in FAILURES][:3]
    assert "rejected" in outcomes and "ok" in outcomes
    assert {r[2] for r in results} == {"checkpoint", "policy", "episodes"}
    # the same seed and index give the same case as the library's own Fuzzer
    assert checkpoint.make_checkpoint_case(bases, 0, 7).data == bases.mutate("policy", 2, 0)[1]
