"""Refusals that leave nothing behind and name their cause: a new run refused after its folder was claimed
removes the --run-dir it made; a compile that runs out of RAM is one line naming the world and the
resolution (in this process, in a worker process, under `navi-nb compile`), and any other command's is one
line too; `train` names a sensor too large for RAM by its flags, as `render` does; an atomic write gives its
file the mode the umask gives."""

import concurrent.futures

import pytest
from run_helpers import tiny_run_args

from navi_nb.cli import main
from navi_nb.world import world_cache
from navi_nb.world.scene_spec import WorldItem

IMPOSSIBLE_BAND = ["--env", "goal_min_distance=100", "--env", "goal_max_distance=200"]


def one_line_error(capsys, code) -> str:
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and err.count("error:") == 1 and err.startswith("error:"), err
    return " ".join(err.split())


def test_a_new_run_refused_after_its_folder_was_claimed_removes_the_run_dir_it_made(tmp_path, capsys):
    """The box holds no goal 100 m away: NavEnv refuses after the run folder was made and locked; the run folder
    and the missing --run-dir above it are removed again, an existing --run-dir is kept as it was."""
    deep = tmp_path / "new" / "runs"
    err = one_line_error(capsys, main(["train", *tiny_run_args(), *IMPOSSIBLE_BAND, "--run-dir", str(deep)]))
    assert "goal band 100..200 m" in err
    assert not (tmp_path / "new").exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "other").write_text("x")
    one_line_error(capsys, main(["train", *tiny_run_args(), *IMPOSSIBLE_BAND, "--run-dir", str(kept), "--name", "a"]))
    assert sorted(p.name for p in kept.iterdir()) == ["other"]


def _out_of_ram(*args, **kwargs):
    raise MemoryError("Unable to allocate 538. MiB for an array")


def test_a_compile_out_of_ram_names_the_world_and_resolution(tmp_path, monkeypatch):
    monkeypatch.setattr(world_cache, "compile_one", _out_of_ram)
    with pytest.raises(world_cache.WorldCacheError, match=r"scene house:7: compiling it at resolution 32 ran out"):
        world_cache.load_worlds([WorldItem(family="house", seed=7)], 32, cache_dir=tmp_path, jobs=1)


class _ThreadPool(concurrent.futures.ThreadPoolExecutor):
    """A stand-in for the process pool: the same futures, MemoryError passed back through ``result()``."""

    def __init__(self, max_workers=None, mp_context=None, initializer=None):
        super().__init__(max_workers=max_workers)


def test_a_compile_worker_out_of_ram_names_the_world_and_resolution(tmp_path, monkeypatch):
    monkeypatch.setattr(world_cache, "compile_one", _out_of_ram)
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", _ThreadPool)
    monkeypatch.setattr(world_cache, "_kernels_cold", lambda item: False)
    items = [WorldItem(family="house", seed=s) for s in (7, 8)]
    with pytest.raises(world_cache.WorldCacheError, match=r"scene house:[78]: compiling it at resolution 32 ran"):
        world_cache.load_worlds(items, 32, cache_dir=tmp_path, jobs=2)


def test_navi_nb_compile_out_of_ram_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch):
    import navi_nb.world.compiler

    monkeypatch.setattr(navi_nb.world.compiler, "compile_scene", _out_of_ram)
    out = tmp_path / "h.gmdag"
    argv = ["compile", "--scene", "house", "--seed", "3", "--resolution", "64", "-o", str(out), "--no-progress"]
    err = one_line_error(capsys, main(argv))
    assert "compiling scene house (seed 3) at --resolution 64 ran out of RAM" in err
    assert not any(tmp_path.iterdir())


def test_any_command_out_of_ram_is_one_line(capsys, monkeypatch):
    import navi_nb.commands.info

    monkeypatch.setattr(navi_nb.commands.info, "run", _out_of_ram)
    err = one_line_error(capsys, main(["info"]))
    assert "navi-nb info: ran out of RAM" in err


def test_train_names_a_sensor_too_large_for_ram_by_its_flags(tmp_path, capsys):
    argv = ["train", *tiny_run_args(), "--sensor-az", "65536", "--sensor-el", "65536", "--run-dir", str(tmp_path / "r")]
    err = one_line_error(capsys, main(argv))
    assert "--sensor-az 65536 --sensor-el 65536 (4,294,967,296 rays) would need about" in err
    assert not (tmp_path / "r").exists()


def test_an_atomic_write_gives_the_file_the_mode_open_would(tmp_path):
    """mkstemp makes its temporary 0600; the renamed file (a run's config.json, a world cache entry) gets the
    umask's mode, as files opened for writing do, so a shared cache or run folder stays readable."""
    import os

    from navi_nb.files import write_atomic

    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "a.json", b"{}\n")
        (tmp_path / "b.json").write_bytes(b"{}\n")
        os.umask(0o077)
        write_atomic(tmp_path / "c.json", b"{}\n")
    finally:
        os.umask(old)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == (tmp_path / "b.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "c.json").stat().st_mode & 0o777 == 0o600
