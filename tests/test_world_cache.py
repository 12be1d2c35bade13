"""The world compile cache: keys, bit-identical entries, parallel compiles, loading, bad input."""

from __future__ import annotations

import mmap

import pytest

from navi_nb.world import scenes
from navi_nb.world.compiler import COMPILER_VERSION, compile_scene
from navi_nb.world.scene_spec import SceneSpecError, parse_spec
from navi_nb.world.sidecar import read_sidecar, sidecar_path
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
    from navi_nb.world.mesh_scene import sample_mesh_path

    items = parse_spec(f"clutter:1-2,pillars:4,{sample_mesh_path('wallhole.obj')}")  # a mesh compiles in a worker
    compile_worlds(items, RES, tmp_path / "serial", jobs=1)
    paths = compile_worlds(items, RES, tmp_path / "par", jobs=2, progress=True)
    for p in paths:
        q = tmp_path / "serial" / p.relative_to(tmp_path / "par")
        assert p.read_bytes() == q.read_bytes()
        assert _same_but_seconds(read_sidecar(p), read_sidecar(q))  # all but the compile time


def _same_but_seconds(a, b):
    """Sidecars equal but for the compile time (and so a cache entry's digest, which covers it)."""
    a, b = dict(a), dict(b)
    a.pop("entry_digest", None)
    b.pop("entry_digest", None)
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
    monkeypatch.setattr("navi_nb.ram.available_ram", lambda: 1000)
    with pytest.raises(SceneSpecError, match="'house:1': 1 worlds at resolution 32 would need about"):
        compile_worlds(items, RES, cache)
    assert not cache.exists()
    monkeypatch.undo()
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be")
    with pytest.raises(WorldCacheError, match="is not writable"):
        compile_worlds(items, RES, blocker / "cache")


# ------------------------------------------------------------------ mesh files in specs
def _counted(items, cache, res=RES):
    """compile_worlds over `items`, returning (paths, how many entries it compiled)."""
    calls = []
    paths = compile_worlds(items, res, cache, jobs=1, progress=lambda done, total: calls.append(done))
    return paths, len(calls)


def test_mesh_item_compiles_once_into_the_cache(tmp_path, capsys):
    import json
    import shutil

    from navi_nb.cli import main
    from navi_nb.world.mesh_scene import sample_mesh_path
    from navi_nb.world.world_cache import file_digest, mesh_entry_path

    mesh = tmp_path / "room.obj"
    shutil.copy(sample_mesh_path("wallhole.obj"), mesh)
    items = parse_spec(f"{mesh},box")
    assert [it.mesh for it in items] == [True, False] and items[0].label == str(mesh.resolve())
    cache = tmp_path / "cache"
    paths, compiled = _counted(items, cache)
    assert compiled == 2
    entry = paths[0]
    assert entry == mesh_entry_path(cache, mesh, RES)
    assert entry.name == f"{file_digest(mesh)[:32]}-obj.gmdag" and entry.parent.name == f"r{RES}-m4"
    # the second time nothing is compiled and the entries are untouched
    stamp = entry.stat().st_mtime_ns
    assert _counted(items, cache) == (paths, 0) and entry.stat().st_mtime_ns == stamp
    # the entry is `navi-nb compile MESH --resolution RES --sample centre` bit for bit (the sidecar but for
    # the compile time; the cache keeps the compiler's centre samples, the command writes corners by default)
    out = tmp_path / "room.gmdag"
    argv = ["compile", str(mesh.resolve()), "-o", str(out), "--resolution", str(RES), "--no-progress"]
    argv += ["--sample", "centre"]
    assert main(argv) == 0
    capsys.readouterr()
    assert entry.read_bytes() == out.read_bytes()
    assert _same_but_seconds(read_sidecar(entry), json.loads((tmp_path / "room.gmdag.json").read_text()))
    # keyed by content: the same bytes elsewhere hit the entry; other bytes or another resolution do not
    twin = tmp_path / "sub" / "twin.OBJ"
    twin.parent.mkdir()
    shutil.copy(mesh, twin)
    assert _counted(parse_spec(str(twin)), cache) == ([entry], 0)
    with open(mesh, "a") as fh:
        fh.write("v 0 0 0\n")  # an unused vertex: the same triangles, another file
    new, compiled = _counted(parse_spec(str(mesh)), cache)
    assert compiled == 1 and new != [entry] and new[0].read_bytes() == entry.read_bytes()
    assert _counted(parse_spec(str(mesh)), cache, res=16)[1] == 1
    # loading: in order, memory-mapped, named by the mesh
    worlds = load_worlds(items, RES, cache)
    assert worlds[0].to_bytes() == out.read_bytes() and worlds[0].source == f"<mesh {mesh.resolve()} @ {RES}>"


def test_broken_meshes_are_one_line_naming_the_file(tmp_path, capsys):
    from navi_nb.cli import main

    cache = tmp_path / "cache"
    bad_index = tmp_path / "bad.obj"
    bad_index.write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 9\n")
    with pytest.raises(SceneSpecError, match=r"^scene spec item '.*bad.obj': .*bad.obj: line 4: face index 9 out"):
        compile_worlds(parse_spec(f"box,{bad_index}"), RES, cache)
    assert not cache.exists()  # read before anything is written
    flat = tmp_path / "flat.ply"
    flat.write_text(
        "ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\nproperty float z\n"
        "element face 1\nproperty list uchar int vertex_indices\nend_header\n0 0 0\n1 1 1\n2 2 2\n3 0 1 2\n"
    )
    with pytest.raises(SceneSpecError, match=r"'.*flat.ply': .*flat.ply: .*every face is degenerate"):
        compile_worlds(parse_spec(str(flat)), RES, cache)
    assert not [p for p in cache.rglob("*.gmdag")]
    tiny = tmp_path / "tiny.obj"  # a 1 cm triangle: its world has no room for an actor
    tiny.write_text("v 0 0 0\nv 0.01 0 0\nv 0 0.01 0\nf 1 2 3\n")
    with pytest.raises(SceneSpecError, match=r"'.*tiny.obj': the world compiled from .*tiny.obj is too small"):
        load_worlds(parse_spec(str(tiny)), RES, cache)
    # the command line: one line, exit 2
    for spec, why in ((bad_index, "face index 9 out of range"), (flat, "degenerate")):
        assert main(["scenes", "--compile", str(spec), "--cache", str(cache), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and spec.name in err and why in err, err


def test_render_takes_a_mesh_through_the_cache(tmp_path, monkeypatch, capsys):
    import shutil

    from navi_nb.cli import main
    from navi_nb.world.mesh_scene import sample_mesh_path
    from navi_nb.world.world_cache import default_cache_dir, mesh_entry_path

    monkeypatch.setenv("NAVI_NB_CACHE", str(tmp_path / "cache"))
    mesh = tmp_path / "walls.obj"
    shutil.copy(sample_mesh_path("wallhole.obj"), mesh)
    out = tmp_path / "walls.png"
    argv = ["render", str(mesh), "--pose", "5,1.5,-5,0", "-o", str(out), "--resolution", str(RES)]
    assert main([*argv, "--sensor-az", "32", "--sensor-el", "8", "--size", "96"]) == 0
    assert out.stat().st_size > 0 and "wrote" in capsys.readouterr().out
    entry = mesh_entry_path(default_cache_dir(), mesh, RES)
    assert entry.is_file()
    stamp = entry.stat().st_mtime_ns
    assert (
        main([*argv, "--sensor-az", "32", "--sensor-el", "8", "--size", "96"]) == 0
        and entry.stat().st_mtime_ns == stamp
    )


# ------------------------------------------------------------------ integrity of entries
def _leaf_offsets(path):
    """Byte offsets in a .gmdag file of its leaf words' distance bits (the low 16 of each leaf)."""
    import numpy as np

    from navi_nb.world.gmdag import HEADER_SIZE, is_leaf, load_world

    nodes = np.asarray(load_world(path, validate=False).nodes)
    return HEADER_SIZE + 8 * np.flatnonzero(is_leaf(nodes))


def _flip(path, offset, bit):
    data = bytearray(path.read_bytes())
    data[offset] ^= bit
    path.write_bytes(bytes(data))


def test_a_flipped_leaf_distance_is_compiled_again_and_the_digests_are_the_clean_ones(tmp_path, capsys):
    from navi_nb.world.gmdag import load_world, world_digest
    from navi_nb.world.world_cache import read_entry

    cache = tmp_path / "cache"
    items = parse_spec("house:1,maze:2")
    clean = load_worlds(items, RES, cache)
    want = [world_digest(w) for w in clean]
    entry = entry_path(cache, "house", 1, RES)
    good = entry.read_bytes()
    _flip(entry, int(_leaf_offsets(entry)[10]), 0x04)  # one bit of a leaf's half-float distance
    assert load_world(entry).to_bytes() != good  # the damage passes the format's deep check...
    assert read_entry(entry)[0] is None  # ...not the entry's digest
    capsys.readouterr()
    again = load_worlds(items, RES, cache)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(entry) in err and "compiling it again" in err, err
    assert entry.read_bytes() == good and [world_digest(w) for w in again] == want
    assert all(_same_but_seconds(a.sidecar, b.sidecar) for a, b in zip(again, clean))
    assert "entry_digest" not in again[0].sidecar
    load_worlds(items, RES, cache)
    assert capsys.readouterr().err == ""  # rebuilt: nothing more to say


def test_every_one_of_400_random_bit_flips_of_an_entry_is_refused(tmp_path):
    import random

    from navi_nb.world.world_cache import read_entry

    cache = tmp_path / "cache"
    (entry,) = compile_worlds(parse_spec("house:3"), RES, cache)
    rng = random.Random(7)
    good, side = entry.read_bytes(), sidecar_path(entry).read_bytes()
    for _ in range(200):
        offset, bit = rng.randrange(len(good)), 1 << rng.randrange(8)
        _flip(entry, offset, bit)
        assert read_entry(entry, validate=False)[0] is None, (offset, bit)
        entry.write_bytes(good)
    for _ in range(200):  # the sidecar's bytes are covered too, its digest's own line included
        offset, bit = rng.randrange(len(side)), 1 << rng.randrange(8)
        sidecar_path(entry).write_bytes(side[:offset] + bytes([side[offset] ^ bit]) + side[offset + 1 :])
        assert read_entry(entry, validate=False)[0] is None, (offset, bit)
    sidecar_path(entry).write_bytes(side)
    assert read_entry(entry)[0] is not None


def test_another_seeds_entry_copied_into_the_slot_is_compiled_again(tmp_path):
    import shutil

    from navi_nb.world.gmdag import world_digest

    cache = tmp_path / "cache"
    items = parse_spec("house:1-2")
    want = [world_digest(w) for w in load_worlds(items, RES, cache)]
    one, two = (entry_path(cache, "house", s, RES) for s in (1, 2))
    shutil.copy(two, one)  # the world alone
    assert [world_digest(w) for w in load_worlds(items, RES, cache)] == want
    shutil.copy(two, one)  # the whole entry: world and sidecar
    shutil.copy(sidecar_path(two), sidecar_path(one))
    worlds = load_worlds(items, RES, cache)
    assert [world_digest(w) for w in worlds] == want and worlds[0].sidecar["seed"] == 1
    assert one.read_bytes() == compile_scene("house", RES, 1).to_bytes()


def test_an_edited_sidecar_is_compiled_again_and_seen_by_the_world_digest(tmp_path):
    import json

    from navi_nb.world.gmdag import load_world, world_digest

    cache = tmp_path / "cache"
    items = parse_spec("house:4")
    (clean,) = load_worlds(items, RES, cache)
    entry = entry_path(cache, "house", 4, RES)
    for key, value in (("sample", "corner"), ("spawn_points", [[1.0, 1.0, 1.0]])):
        side = json.loads(sidecar_path(entry).read_text())
        side[key] = value
        sidecar_path(entry).write_text(json.dumps(side))
        # read as a plain file, the edit is a valid world of another digest (what a run would have recorded)
        assert world_digest(load_world(entry)) != world_digest(clean)
        (w,) = load_worlds(items, RES, cache)
        assert world_digest(w) == world_digest(clean) and _same_but_seconds(w.sidecar, clean.sidecar), key
        assert w.sidecar["sample"] == "centre" and w.to_bytes() == clean.to_bytes()


def test_a_damaged_entry_in_a_read_only_cache_is_one_line_naming_it(tmp_path, monkeypatch):
    from navi_nb.world import world_cache

    cache = tmp_path / "cache"
    items = parse_spec("box")
    load_worlds(items, RES, cache)
    entry = entry_path(cache, "box", 0, RES)
    _flip(entry, int(_leaf_offsets(entry)[0]), 0x01)
    monkeypatch.setattr(world_cache, "_not_writable", lambda folder: "Read-only file system")
    with pytest.raises(WorldCacheError, match=r"^world cache entry .*0\.gmdag: its content does not match") as e:
        load_worlds(items, RES, cache)
    assert "\n" not in str(e.value) and "read-only" in str(e.value)
    monkeypatch.undo()
    assert load_worlds(items, RES, cache)[0].to_bytes() == compile_scene("box", RES).to_bytes()


def test_an_entry_without_a_digest_is_compiled_again(tmp_path):
    import json

    cache = tmp_path / "cache"
    items = parse_spec("box")
    (entry,) = compile_worlds(items, RES, cache)
    side = json.loads(sidecar_path(entry).read_text())
    del side["entry_digest"]
    sidecar_path(entry).write_text(json.dumps(side))
    stamp = entry.stat().st_mtime_ns
    load_worlds(items, RES, cache)
    assert "entry_digest" in json.loads(sidecar_path(entry).read_text()) and entry.stat().st_mtime_ns != stamp


@pytest.mark.parametrize("which", ["world", "sidecar"])
def test_a_folder_in_an_entry_files_place_is_refused_in_one_line_and_kept(tmp_path, which):
    cache = tmp_path / "cache"
    items = parse_spec("box")
    (entry,) = compile_worlds(items, RES, cache)
    path = entry if which == "world" else sidecar_path(entry)
    path.unlink()
    path.mkdir()
    (path / "kept").write_text("a file of the user's")
    with pytest.raises(WorldCacheError, match=r"cannot replace .*remove what is in its place") as e:
        load_worlds(items, RES, cache)
    assert "\n" not in str(e.value) and str(path) in str(e.value)
    assert (path / "kept").read_text() == "a file of the user's"
    assert not [p for p in entry.parent.iterdir() if p.name.startswith(".tmp-")]  # no staging folder left


def test_entries_an_older_version_wrote_share_one_line(tmp_path, capsys):
    """Entries without an entry digest (an older navi-nb's, not damage) are compiled again with one line for
    all of them, naming the first; a damaged entry still gets its own line."""
    import json

    from navi_nb.world.sidecar import sidecar_path
    from navi_nb.world.world_cache import _reported

    cache = tmp_path / "cache"
    items = parse_spec("house:1,house:2,maze:3")
    load_worlds(items, RES, cache)
    for family, seed in (("house", 1), ("house", 2)):
        sp = sidecar_path(entry_path(cache, family, seed, RES))
        side = json.loads(sp.read_text())
        del side["entry_digest"]
        sp.write_text(json.dumps(side, indent=1))
    damaged = entry_path(cache, "maze", 3, RES)
    _flip(damaged, int(_leaf_offsets(damaged)[10]), 0x04)
    _reported.clear()
    capsys.readouterr()
    load_worlds(items, RES, cache)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines
    assert "written by an older navi-nb, or edited by hand" in lines[0]
    assert str(entry_path(cache, "house", 1, RES)) in lines[0]
    assert str(damaged) in lines[1] and "compiling it again" in lines[1]


def test_a_sidecar_written_again_by_hand_is_named_as_edited_not_as_an_older_version(tmp_path, capsys):
    import json

    from navi_nb.world.sidecar import sidecar_path
    from navi_nb.world.world_cache import _reported, read_entry

    cache = tmp_path / "cache"
    items = parse_spec("house:1")
    load_worlds(items, RES, cache)
    entry = entry_path(cache, "house", 1, RES)
    sp = sidecar_path(entry)
    sp.write_text(json.dumps(json.loads(sp.read_text()), indent=2, sort_keys=True))  # reformatted by an editor
    assert read_entry(entry) == (None, "its sidecar was edited (its entry digest is no longer its first line)")
    _reported.clear()
    capsys.readouterr()
    load_worlds(items, RES, cache)
    err = capsys.readouterr().err
    assert "its sidecar was edited" in err and "older navi-nb" not in err and str(entry) in err, err


def test_builtin_entries_reads_back_what_entry_path_names(tmp_path):
    """builtin_entries is entry_path's inverse: every built-in entry name, at any version, and nothing else."""
    from navi_nb.world.world_cache import CacheEntry, builtin_entries

    want = [("house", 0, 32), ("house", 1000003, 32), ("house", 7, 64), ("maze", 12, 32)]
    for family, seed, res in want:
        p = entry_path(tmp_path, family, seed, res)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"")
        (p.parent / (p.name + ".json")).write_bytes(b"")  # a sidecar is not an entry
    old = tmp_path / f"box-g0-c{COMPILER_VERSION}" / "r32" / "5.gmdag"  # an older generator's folder
    old.parent.mkdir(parents=True)
    old.write_bytes(b"")
    for stray in ("notafamily-g1-c1/r32/1.gmdag", "house/r32/2.gmdag", "house-g1-c1/r32/07.gmdag",
                  "house-g1-c1/rx/3.gmdag", "mesh-c1-f1-v1/r32-m2/ab-obj.gmdag"):  # fmt: skip
        (tmp_path / stray).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / stray).write_bytes(b"")
    everything = builtin_entries(tmp_path)
    assert sorted((e.family, e.seed, e.resolution) for e in everything) == sorted(want + [("box", 5, 32)])
    for e in everything:
        assert isinstance(e, CacheEntry)
        assert e.path == (old if e.family == "box" else entry_path(tmp_path, e.family, e.seed, e.resolution))
    assert [(e.family, e.seed) for e in builtin_entries(tmp_path, 64)] == [("house", 7)]
    assert builtin_entries(tmp_path / "missing") == []
