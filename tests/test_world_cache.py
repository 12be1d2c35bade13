"""The world compile cache: keys, bit-identical entries, parallel compiles, loading, bad input."""

from __future__ import annotations

import mmap

import pytest

from navi_nb.world import scenes
from navi_nb.world.compiler import COMPILER_VERSION, compile_scene
from navi_nb.world.gmdag import read_sidecar
from navi_nb.world.scene_spec import SceneSpecError, parse_spec
from navi_nb.world.world_cache import WorldCacheError, compile_worlds, entry_path, load_worlds

RES = 32


def test_entries_are_keyed_and_bit_identical(tmp_path):
    items = parse_spec("house:0-1,box")
    calls = []
    paths = compile_worlds(items, RES, tmp_path, jobs=1, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(1, 3), (2, 3), (3, 3)]
    g = scenes.GENERATOR_VERSION
    assert paths == [
        tmp_path / f"house-g{g['house']}-c{COMPILER_VERSION}" / f"r{RES}" / "0.gmdag",
        tmp_path / f"house-g{g['house']}-c{COMPILER_VERSION}" / f"r{RES}" / "1.gmdag",
        tmp_path / f"box-g{g['box']}-c{COMPILER_VERSION}" / f"r{RES}" / "0.gmdag",
    ]
    for it, p in zip(items, paths):
        assert p.read_bytes() == compile_scene(it.family, RES, it.seed).to_bytes()
        side = read_sidecar(p)
        assert side["scene"] == it.family and side["seed"] == it.seed and len(side["spawn_points"]) > 0
    # nothing temporary left behind; a second call compiles nothing
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file() and p.name.startswith(".")) == []
    stamps = [p.stat().st_mtime_ns for p in paths]
    calls.clear()
    assert compile_worlds(items, RES, tmp_path, jobs=1, progress=lambda d, t: calls.append(d)) == paths
    assert calls == [] and [p.stat().st_mtime_ns for p in paths] == stamps


def test_generator_version_starts_a_new_entry(tmp_path, monkeypatch):
    item = parse_spec("maze:3")
    old = entry_path(tmp_path, "maze", 3, RES)
    monkeypatch.setitem(scenes.GENERATOR_VERSION, "maze", scenes.GENERATOR_VERSION["maze"] + 1)
    new = entry_path(tmp_path, "maze", 3, RES)
    assert new != old and entry_path(tmp_path, "maze", 3, 64) != new
    assert compile_worlds(item, RES, tmp_path) == [new] and new.is_file() and not old.exists()


def test_parallel_compile_matches_serial(tmp_path):
    items = parse_spec("clutter:1-2,pillars:4")
    compile_worlds(items, RES, tmp_path / "serial", jobs=1)
    paths = compile_worlds(items, RES, tmp_path / "par", jobs=2, progress=True)
    for p in paths:
        q = tmp_path / "serial" / p.relative_to(tmp_path / "par")
        assert p.read_bytes() == q.read_bytes()
        assert _same_but_seconds(read_sidecar(p), read_sidecar(q))  # all but the compile time


def _same_but_seconds(a, b):
    a, b = dict(a), dict(b)
    a["compiler"] = {k: v for k, v in a["compiler"].items() if k != "seconds"}
    b["compiler"] = {k: v for k, v in b["compiler"].items() if k != "seconds"}
    return a == b


def test_load_worlds_in_order_mapped_and_repaired(tmp_path):
    src = compile_scene("box", RES)
    from navi_nb.world.gmdag import save_world

    save_world(src, tmp_path / "mine.gmdag")
    items = parse_spec(f"maze:2,{tmp_path / 'mine.gmdag'},house:5")
    worlds = load_worlds(items, RES, tmp_path / "cache")
    assert [w.sidecar.get("seed") for w in worlds] == [2, 0, 5]
    assert worlds[0].to_bytes() == compile_scene("maze", RES, 2).to_bytes()
    assert worlds[1].to_bytes() == src.to_bytes()
    assert isinstance(worlds[2].nodes.base, mmap.mmap) or isinstance(
        getattr(worlds[2].nodes.base, "obj", None), mmap.mmap
    )
    # a damaged entry is compiled again
    entry = entry_path(tmp_path / "cache", "house", 5, RES)
    entry.write_bytes(entry.read_bytes()[:100])
    again = load_worlds(items[2:], RES, tmp_path / "cache", mmap=False)
    assert again[0].to_bytes() == compile_scene("house", RES, 5).to_bytes()


def test_bad_input_writes_nothing(tmp_path, monkeypatch):
    items = parse_spec("house:1")
    cache = tmp_path / "cache"
    with pytest.raises(WorldCacheError, match="resolution must be a power of two"):
        compile_worlds(items, 100, cache)
    with pytest.raises(WorldCacheError, match="jobs must be an integer >= 1"):
        compile_worlds(items, RES, cache, jobs=0)
    with pytest.raises(WorldCacheError, match="needs WorldItems"):
        compile_worlds(["house:1"], RES, cache)
    monkeypatch.setattr("navi_nb.memory.available_memory", lambda: 1000)
    with pytest.raises(SceneSpecError, match="'house:1': 1 worlds at resolution 32 would need about"):
        compile_worlds(items, RES, cache)
    assert not cache.exists()
    monkeypatch.undo()
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be")
    with pytest.raises(WorldCacheError, match="is not writable"):
        compile_worlds(items, RES, blocker / "cache")
