"""Paths that are not regular files (a FIFO, a device, a socket, a folder) given as worlds, meshes, list
files or cache files: refused in one line before they are opened (or, for a cache file, computed again
and replaced), never a hang; list files have a size bound; a link's reader is picked by the link's name.

Every test runs under an alarm, so a regression that blocks on a FIFO fails instead of hanging the suite."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat

import numpy as np
import pytest

from navi_nb.cli import main
from navi_nb.files import FileKindError, open_regular, read_regular, regular_file
from navi_nb.world import scene_spec
from navi_nb.world.scene_spec import MAX_LIST_BYTES, WorldItem, parse_spec

DEADLINE_S = 120  # generous: a compile on a busy machine; a blocked open never ends


@pytest.fixture(autouse=True)
def deadline():
    def expired(signum, frame):
        # not TimeoutError: that is an OSError, which the code under test catches and recovers from
        pytest.fail(f"still running after {DEADLINE_S} s: blocked on a FIFO?", pytrace=False)

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(DEADLINE_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def fifo(path):
    os.mkfifo(path)
    return path


def refused_in_one_line(argv, capsys, *words):
    """``main(argv)`` exits 2 with one ``error:`` line holding every one of ``words``."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and "Traceback" not in err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


# ------------------------------------------------------------------ the helper


def test_regular_files_pass_and_every_other_kind_is_named(tmp_path):
    f = tmp_path / "a.txt"
    f.write_bytes(b"hello")
    assert regular_file(f) == f and read_regular(f, max_bytes=5) == b"hello"
    link = tmp_path / "link"
    link.symlink_to(f)
    assert read_regular(link) == b"hello"  # links are followed
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tmp_path / "s"))
        for path, kind in [
            (fifo(tmp_path / "p"), "a FIFO"),
            (tmp_path, "a folder"),
            ("/dev/null", "a character device"),
            (tmp_path / "s", "a socket"),
        ]:
            with pytest.raises(FileKindError, match=f"{kind}, not a regular file") as exc:
                open_regular(path, "thing")
            assert isinstance(exc.value, OSError) and "\n" not in str(exc.value)
            assert str(exc.value).startswith(f"thing {path}: ")
    finally:
        sock.close()
    with pytest.raises(FileNotFoundError):
        regular_file(tmp_path / "missing")


def test_the_bound_is_checked_from_the_size_and_from_what_a_read_gives(tmp_path):
    f = tmp_path / "big"
    f.write_bytes(b"x" * 100)
    with pytest.raises(FileKindError, match="larger than the bound of 99 bytes"):
        regular_file(f, max_bytes=99)
    assert len(read_regular(f, max_bytes=100)) == 100
    # /proc files are regular and report size 0, then give more: the read stops at the bound + 1 bytes
    assert stat.S_ISREG(os.stat("/proc/self/maps").st_mode) and os.stat("/proc/self/maps").st_size == 0
    with pytest.raises(FileKindError, match="larger than the bound of 16 bytes"):
        read_regular("/proc/self/maps", "list file", 16)


# ------------------------------------------------------------------ spec items


def test_a_fifo_gmdag_spec_item_is_refused_in_one_line(tmp_path, capsys):
    p = fifo(tmp_path / "a.gmdag")
    refused_in_one_line(["scenes", "--spec", str(p)], capsys, str(p), "a FIFO, not a regular file")


def test_a_fifo_obj_spec_item_is_refused_in_one_line(tmp_path, capsys):
    p = fifo(tmp_path / "room.obj")
    refused_in_one_line(["scenes", "--spec", str(p)], capsys, str(p), "mesh file", "a FIFO")


def test_a_fifo_gmdag_sidecar_is_refused_in_one_line(tmp_path, capsys):
    from conftest import compiled_scene

    from navi_nb.world.gmdag import save_world

    p = tmp_path / "w.gmdag"
    save_world(compiled_scene("box", 16), p, sidecar=False)
    fifo(tmp_path / "w.gmdag.json")
    refused_in_one_line(["scenes", "--spec", str(p)], capsys, "w.gmdag.json", "cannot read sidecar", "a FIFO")


@pytest.mark.parametrize("how", ["@", "txt"])
def test_a_fifo_list_file_is_refused_in_one_line(tmp_path, capsys, how):
    p = fifo(tmp_path / "set.txt")
    item = f"@{p}" if how == "@" else str(p)
    refused_in_one_line(["scenes", "--spec", item], capsys, "list file", str(p), "a FIFO")


def test_dev_zero_as_a_list_file_is_refused_in_one_line(capsys):
    refused_in_one_line(["scenes", "--spec", "@/dev/zero"], capsys, "list file /dev/zero", "a character device")


def test_a_list_file_over_the_bound_is_refused_naming_the_bound(tmp_path, capsys, monkeypatch):
    assert MAX_LIST_BYTES == 16 * 1024 * 1024
    p = tmp_path / "set.txt"
    p.write_text("box\n" * 100)
    monkeypatch.setattr(scene_spec, "MAX_LIST_BYTES", 64)
    refused_in_one_line(["scenes", "--spec", f"@{p}"], capsys, str(p), "larger than the bound of 64 bytes")
    monkeypatch.setattr(scene_spec, "MAX_LIST_BYTES", 400)
    assert [it.label for it in parse_spec(f"@{p}")] == ["box:0"]  # at the bound: read


def test_a_fifo_named_inside_a_list_file_is_refused_in_one_line(tmp_path, capsys):
    p = fifo(tmp_path / "a.gmdag")
    (tmp_path / "set.txt").write_text("box\na.gmdag\n")
    refused_in_one_line(["scenes", "--spec", f"@{tmp_path / 'set.txt'}"], capsys, "'a.gmdag'", str(p), "a FIFO")


# ------------------------------------------------------------------ a link's name picks the reader


def test_an_obj_link_to_a_file_without_a_suffix_is_read_as_obj(tmp_path):
    from navi_nb.world.mesh_io import read_mesh
    from navi_nb.world.mesh_scene import sample_mesh_path
    from navi_nb.world.world_cache import load_worlds, mesh_entry_path

    blob = tmp_path / "blob"
    shutil.copy(sample_mesh_path("wallhole.obj"), blob)
    link = tmp_path / "room.obj"
    link.symlink_to(blob)
    (item,) = parse_spec(str(link))
    assert item.path == blob.resolve() and item.mesh and item.reader_suffix == ".obj"
    want = read_mesh(sample_mesh_path("wallhole.obj"))
    got = read_mesh(item.path, item.reader_suffix)
    assert np.array_equal(got.vertices, want.vertices) and np.array_equal(got.faces, want.faces)
    cache = tmp_path / "cache"
    assert mesh_entry_path(cache, item.path, 16, suffix=item.reader_suffix).name.endswith("-obj.gmdag")
    (world,) = load_worlds([item], 16, cache, actor_radius=0.0)
    assert world.source == f"<mesh {blob.resolve()} @ 16>"


def test_a_gmdag_link_to_a_file_named_obj_is_read_as_a_world(tmp_path):
    from conftest import compiled_scene

    from navi_nb.world.gmdag import save_world

    target = tmp_path / "really.obj"
    save_world(compiled_scene("box", 16), target, sidecar=False)
    link = tmp_path / "w.gmdag"
    link.symlink_to(target)
    (item,) = parse_spec(str(link), actor_radius=0.0)
    assert item.path == target.resolve() and not item.mesh


# ------------------------------------------------------------------ cache files


def test_a_fifo_spawn_pool_file_is_treated_as_missing_and_replaced(tmp_path):
    from navi_nb.env import pool_file

    path = fifo(tmp_path / "pool.npz")
    assert pool_file.read_pool(path, 4, 2) is None  # never opened
    reach, keep = np.array([True, False, True, True]), np.array([True, False])
    assert pool_file.write_pool(path, reach, keep)  # what the sampler does after computing the pool
    assert stat.S_ISREG(os.stat(path).st_mode)
    got = pool_file.read_pool(path, 4, 2)
    assert got is not None and np.array_equal(got[0], reach) and np.array_equal(got[1], keep)


def test_a_fifo_layout_file_is_decoded_again_and_replaced(tmp_path):
    from navi_nb.world.compiler import compile_scene
    from navi_nb.world.world_set import WorldSet

    worlds = [compile_scene("box", resolution=16, seed=0)]  # its own: mapped views must not outlive the test
    path = WorldSet(worlds).map_layouts(tmp_path).mapped
    good = path.read_bytes()
    path.unlink()
    fifo(path)
    packed = WorldSet(worlds).map_layouts(tmp_path)
    assert "a FIFO, not a regular file" in packed.map_note and "decoded and written" in packed.map_note
    assert packed.mapped == path and stat.S_ISREG(os.stat(path).st_mode) and path.read_bytes() == good


@pytest.mark.parametrize("which", ["world", "sidecar"])
def test_a_fifo_world_cache_entry_is_compiled_again_and_replaced(tmp_path, which):
    from navi_nb.world.sidecar import sidecar_path
    from navi_nb.world.world_cache import entry_path, load_worlds

    cache = tmp_path / "cache"
    items = [WorldItem(family="box", seed=0, origin="box")]
    (first,) = load_worlds(items, 16, cache)
    entry = entry_path(cache, "box", 0, 16)
    good = entry.read_bytes()
    del first
    victim = entry if which == "world" else sidecar_path(entry)
    victim.unlink()
    fifo(victim)
    (again,) = load_worlds(items, 16, cache)
    assert stat.S_ISREG(os.stat(victim).st_mode) and entry.read_bytes() == good
    assert again.to_bytes() == good
