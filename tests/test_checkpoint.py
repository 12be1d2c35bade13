"""Checkpoint files: atomic writes, crash safety, untrusted-input reading."""

import io
import os
import signal
import subprocess
import sys
import textwrap
import time
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

from navi_nb.rng_state import GeneratorStateError, generator_from_array, generator_to_array, restore_generator
from navi_nb.train.checkpoint import (
    CheckpointError,
    checkpoint_name,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    open_checkpoint,
    prune_checkpoints,
    save_checkpoint,
)

ROOT = Path(__file__).resolve().parents[1]


def _arrays(k=1.0):
    return {
        "params": np.arange(100, dtype=np.float32) * np.float32(k),
        "adam_m": np.full((100,), k, dtype=np.float32),
        "env.pos": np.linspace(0, k, 12, dtype=np.float32).reshape(4, 3),
        "env.steps": np.arange(4, dtype=np.int64),
        "empty": np.zeros((0, 3), dtype=np.float32),
        "scalar": np.array(7, dtype=np.int64),
        "flag": np.array(True),
        "strided": np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2],
    }


def _spec(arrays):
    return {k: (v.shape, v.dtype) for k, v in arrays.items()}


def _save(folder, update, k=None):
    a = _arrays(update if k is None else k)
    return save_checkpoint(Path(folder) / checkpoint_name(update), a, {"update": update, "config_hash": "abc"})


def test_roundtrip_and_plain_numpy_reads_it(tmp_path):
    a = _arrays(3.0)
    gen = np.random.default_rng(7)
    gen.normal(size=5)
    gen.integers(0, 10, dtype=np.uint32)  # leaves a buffered 32-bit half (has_uint32) in the state
    a["rng"] = generator_to_array(gen)
    p = save_checkpoint(tmp_path / "ckpt_00000003.npz", a, {"update": 3, "config_hash": "h"})
    arrays, meta = load_checkpoint(p, _spec(a), expect_hash="h")
    for k in a:
        assert arrays[k].dtype == a[k].dtype and arrays[k].tobytes() == a[k].tobytes()
    assert meta["update"] == 3 and meta["format_version"] == 1
    # the generator's array survives the file: restored generators draw the same numbers
    g2 = np.random.default_rng(0)
    restore_generator(g2, arrays["rng"])
    g3 = generator_from_array(arrays["rng"])
    expect = gen.normal(size=10)
    assert np.array_equal(g2.normal(size=10), expect) and np.array_equal(g3.normal(size=10), expect)
    # a plain NumPy reader without pickle reads the same arrays
    with np.load(p, allow_pickle=False) as z:
        assert np.array_equal(z["params"], a["params"])
    assert os.listdir(tmp_path) == ["ckpt_00000003.npz"]


def test_bad_generator_state_refused_and_generator_untouched():
    g = np.random.default_rng(0)
    good = generator_to_array(g)
    for bad, match in (
        (good.astype(np.int64), "uint64"),
        (good[:5], r"\(6,\)"),
        (np.array([1, 0, 1, 0, 2, 0], np.uint64), "has_uint32"),
        (np.array([1, 0, 1, 0, 1, 1 << 40], np.uint64), "uinteger"),
    ):
        with pytest.raises(GeneratorStateError, match=match):
            restore_generator(g, bad)
    assert generator_to_array(g).tobytes() == good.tobytes()
    with pytest.raises(GeneratorStateError, match="PCG64"):
        generator_to_array(np.random.Generator(np.random.MT19937(0)))


class Kill(BaseException):
    """A simulated kill: not an Exception, so the writer's cleanup does not run."""


def _kill():
    raise Kill()


def test_kill_at_every_write_step_leaves_previous_loadable(tmp_path):
    _save(tmp_path, 1)
    steps = []
    save_checkpoint(tmp_path / "probe" / "x.npz", _arrays(), {}, _hook=steps.append)
    assert steps[:2] == ["open", "meta"] and steps[-2:] == ["rename", "fsync_dir"]
    assert len(steps) == 2 + len(_arrays()) + 5
    for step in steps:

        def hook(s, step=step):
            if s == step:
                raise Kill(step)

        with pytest.raises(Kill):
            save_checkpoint(tmp_path / checkpoint_name(2), _arrays(2), {"update": 2, "config_hash": "abc"}, _hook=hook)
        latest = latest_checkpoint(tmp_path)
        arrays, meta = load_checkpoint(latest, _spec(_arrays()), expect_hash="abc")
        # before the rename only update 1 exists; after it, update 2 is complete
        expect = 2 if step == "fsync_dir" else 1
        assert meta["update"] == expect, step
        tmp_left = any(p.name.endswith(".tmp") for p in tmp_path.iterdir())
        assert tmp_left == (step not in ("open", "fsync_dir")), step
        assert arrays["params"].tobytes() == _arrays(expect)["params"].tobytes()
        if step == "fsync_dir":
            (tmp_path / checkpoint_name(2)).unlink()
    # a stray temp file of a killed writer is ignored above, then cleaned by the next save
    with pytest.raises(Kill):
        save_checkpoint(tmp_path / checkpoint_name(2), _arrays(2), {}, _hook=lambda s: s == "fsync" and _kill())
    _save(tmp_path, 3)
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())
    assert [u for u, _ in list_checkpoints(tmp_path)] == [1, 3]


def test_writer_error_removes_temp(tmp_path):
    with pytest.raises(TypeError, match="object dtype"):
        save_checkpoint(tmp_path / "a.npz", {"o": np.array([None, 1], dtype=object)}, {})
    assert list(tmp_path.iterdir()) == []


CHILD = textwrap.dedent("""
    import sys, numpy as np
    from pathlib import Path
    from navi_nb.train.checkpoint import save_checkpoint, checkpoint_name
    folder = Path(sys.argv[1])
    for u in range(1, 10**6):
        a = {"big": np.full(2_000_000, u, dtype=np.float32), "small": np.full(3, u, dtype=np.int64)}
        save_checkpoint(folder / checkpoint_name(u), a, {"update": u})
        if u == 1:
            print("ready", flush=True)
""")


def test_sigkill_during_writes_keeps_a_loadable_checkpoint(tmp_path):
    spec = {"big": ((2_000_000,), np.float32), "small": ((3,), np.int64)}
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for trial, delay in enumerate([0.05, 0.13, 0.31]):
        folder = tmp_path / f"t{trial}"
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(folder)], stdout=subprocess.PIPE, env=env)
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        found = list_checkpoints(folder)
        assert found, "no checkpoint survived"
        update, path = found[-1]
        arrays, meta = load_checkpoint(path, spec)
        assert meta["update"] == update
        assert (arrays["big"] == update).all() and (arrays["small"] == update).all()


def test_truncated_and_corrupt_files_refused(tmp_path):
    a = _arrays(5.0)
    p = save_checkpoint(tmp_path / "c.npz", a, {"update": 5})
    data = p.read_bytes()
    bad = tmp_path / "bad.npz"
    for cut in list(range(0, len(data), max(1, len(data) // 97))) + [len(data) - 1]:
        bad.write_bytes(data[:cut])
        with pytest.raises(CheckpointError):
            load_checkpoint(bad, _spec(a))
    # a flipped byte inside an array's data: caught by the zip CRC
    i = data.index(a["params"].tobytes()[8:40])
    flipped = bytearray(data)
    flipped[i + 3] ^= 0xFF
    bad.write_bytes(bytes(flipped))
    with pytest.raises(CheckpointError, match="corrupt"):
        load_checkpoint(bad, _spec(a))
    with pytest.raises(CheckpointError, match="no such file"):
        open_checkpoint(tmp_path / "missing.npz")


def _raw_npy_header(shape, descr):
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def _crafted(tmp_path, members, meta=b'{"format_version": 1}'):
    p = tmp_path / "crafted.npz"
    with zipfile.ZipFile(p, "w") as zf:
        zf.writestr("meta.json", meta)
        for name, payload in members.items():
            zf.writestr(name, payload)
    return p


def test_huge_declared_array_refused_without_allocating(tmp_path):
    huge = _raw_npy_header((10**12,), "<f4") + b"\0" * 64
    p = _crafted(tmp_path, {"params.npy": huge})
    tracemalloc.start()
    for spec in (
        {"params": ((100,), np.float32)},  # what the config implies
        {"params": ((10**12,), np.float32)},
    ):  # even a spec that asks for it: over the limit
        with pytest.raises(CheckpointError, match="declares"):
            open_checkpoint(p).read_arrays(spec)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 2_000_000, peak


def test_unexpected_missing_and_mistyped_members_refused(tmp_path):
    good = {"params.npy": _raw_npy_header((2,), "<f4") + b"\0" * 8}
    spec = {"params": ((2,), np.float32)}
    p = _crafted(tmp_path, dict(good, **{"extra.npy": _raw_npy_header((1,), "<f4") + b"\0" * 4}))
    with pytest.raises(CheckpointError, match="unexpected"):
        open_checkpoint(p).read_arrays(spec)
    p = _crafted(tmp_path, good)
    with pytest.raises(CheckpointError, match="missing"):
        open_checkpoint(p).read_arrays(dict(spec, other=((1,), np.float32)))
    p = _crafted(tmp_path, {"params.npy": _raw_npy_header((2,), "|O") + b"\0" * 16})
    with pytest.raises(CheckpointError, match="dtype"):
        open_checkpoint(p).read_arrays(spec)
    p = _crafted(tmp_path, {"params.npy": _raw_npy_header((2,), "<f8") + b"\0" * 16})
    with pytest.raises(CheckpointError, match="dtype"):
        open_checkpoint(p).read_arrays(spec)
    p = _crafted(tmp_path, {"params.npy": _raw_npy_header((2,), "<f4") + b"\0" * 4})
    with pytest.raises(CheckpointError, match="data bytes"):
        open_checkpoint(p).read_arrays(spec)
    p = _crafted(tmp_path, dict(good, **{"../evil.txt": b"x"}))
    with pytest.raises(CheckpointError, match="unexpected member"):
        open_checkpoint(p)
    p = _crafted(tmp_path, good, meta=b'{"format_version": 99}')
    with pytest.raises(CheckpointError, match="format version"):
        open_checkpoint(p)
    p = _crafted(tmp_path, good, meta=b"[1, 2")
    with pytest.raises(CheckpointError, match="meta.json"):
        open_checkpoint(p)
    p = _crafted(tmp_path, good)
    arrays = open_checkpoint(p).read_arrays(spec)
    assert arrays["params"].tolist() == [0.0, 0.0]


def test_config_hash_mismatch_refused(tmp_path):
    p = _save(tmp_path, 1)
    with pytest.raises(CheckpointError, match="another configuration"):
        load_checkpoint(p, _spec(_arrays()), expect_hash="other")


def test_prune_keeps_newest(tmp_path):
    for u in (1, 2, 3, 4):
        _save(tmp_path, u)
    (tmp_path / "notes.txt").write_text("kept")
    prune_checkpoints(tmp_path, 2)
    assert [u for u, _ in list_checkpoints(tmp_path)] == [3, 4]
    assert (tmp_path / "notes.txt").exists()
