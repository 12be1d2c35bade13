"""Scene specs: the syntax, de-duplication, held-out seeds and every bad input."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

import numpy as np
import pytest

from navi_nb.cli import main
from navi_nb.world.gmdag import World, encode_leaf, save_world
from navi_nb.world.scene_spec import (
    HELDOUT_SEED_START,
    MAX_WORLDS,
    SceneSpecError,
    WorldItem,
    check_ram,
    check_training_items,
    estimated_bytes,
    heldout_spec,
    is_heldout,
    overlap,
    parse_spec,
)


def labels(items):
    return [it.label for it in items]


@functools.cache
def _box_bytes():
    from navi_nb.world.compiler import compile_scene

    w = compile_scene("box", 16)
    return w.to_bytes(), w.sidecar


def write_box(path):
    """A small valid world file (the box scene at resolution 16, with its sidecar)."""
    import json

    data, sidecar = _box_bytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    (path.parent / (path.name + ".json")).write_text(json.dumps(sidecar))
    return path


def test_ranges_seeds_and_families():
    assert labels(parse_spec("house:0-3")) == ["house:0", "house:1", "house:2", "house:3"]
    assert labels(parse_spec("house:7")) == ["house:7"]
    assert labels(parse_spec("house")) == ["house:0"]
    assert labels(parse_spec("box")) == labels(parse_spec("box:0")) == ["box:0"]
    assert labels(parse_spec(" maze:0-1 , clutter:5 ")) == ["maze:0", "maze:1", "clutter:5"]
    # bare seeds continue the family before them
    assert labels(parse_spec("house:0-1,5,8-9")) == ["house:0", "house:1", "house:5", "house:8", "house:9"]
    assert labels(parse_spec(["pillars:2", "maze:3"])) == ["pillars:2", "maze:3"]
    items = parse_spec("house:0-199")
    assert len(items) == 200 and items[-1].seed == 199 and all(it.origin == "house:0-199" for it in items)


def test_duplicates_keep_their_first_place(tmp_path):
    assert labels(parse_spec("house:2-4,house:0-3,maze:1,house:4")) == [
        "house:2",
        "house:3",
        "house:4",
        "house:0",
        "house:1",
        "maze:1",
    ]
    a = write_box(tmp_path / "w" / "a.gmdag")
    # the same file by another path (relative, through a link) is one world
    os.symlink(a, tmp_path / "link.gmdag")
    items = parse_spec(f"{a},w/a.gmdag,link.gmdag", base_dir=tmp_path)
    assert len(items) == 1 and items[0].path == a.resolve()


def test_files_folders_globs_and_lists(tmp_path):
    a = write_box(tmp_path / "set" / "a.gmdag")
    b = write_box(tmp_path / "set" / "b.gmdag")
    write_box(tmp_path / "set" / "sub" / "c.gmdag")  # folders are not searched recursively
    (tmp_path / "set" / "notes.txt").write_text("not a world")  # only .gmdag files count in a folder
    assert [it.path for it in parse_spec(str(tmp_path / "set"))] == [a.resolve(), b.resolve()]
    assert [it.path for it in parse_spec(str(tmp_path / "set" / "*.gmdag"))] == [a.resolve(), b.resolve()]
    assert len(parse_spec(str(tmp_path / "set" / "*" / "*.gmdag"))) == 1
    lst = tmp_path / "lists" / "train.txt"
    lst.parent.mkdir()
    lst.write_text("# training worlds\nhouse:0-2   # three houses\n\n../set/b.gmdag, maze:4\n@inner.txt\n")
    (tmp_path / "lists" / "inner.txt").write_text("clutter:1\n../set/a.gmdag\n")
    want = ["house:0", "house:1", "house:2", str(b.resolve()), "maze:4", "clutter:1", str(a.resolve())]
    assert labels(parse_spec(f"@{lst}")) == want
    assert labels(parse_spec(str(lst))) == want  # a .txt path is a list file too
    assert labels(parse_spec("@lists/train.txt,pillars:1", base_dir=tmp_path)) == want + ["pillars:1"]


def test_mesh_files_are_items(tmp_path):
    a = write_box(tmp_path / "set" / "a.gmdag")
    for name in ("room.obj", "part.STL", "scan.ply", "b.off", "c.glb"):
        (tmp_path / "set" / name).write_text("v 0 0 0\n")  # parsed only when compiled
    # a named mesh is an item (a file, by its resolved path); a folder picks up only .gmdag files; a glob
    # picks up the .gmdag and mesh files it matches
    items = parse_spec("set/room.obj,set/part.STL,box,./set/room.obj", base_dir=tmp_path)
    assert labels(items) == [str(tmp_path / "set" / "room.obj"), str(tmp_path / "set" / "part.STL"), "box:0"]
    assert [it.mesh for it in items] == [True, True, False] and not items[0].builtin
    assert [it.path for it in parse_spec(str(tmp_path / "set"))] == [a.resolve()]
    globbed = parse_spec(str(tmp_path / "set" / "*"))
    assert [it.path.name for it in globbed] == ["a.gmdag", "b.off", "c.glb", "part.STL", "room.obj", "scan.ply"]
    assert [it.mesh for it in globbed] == [False, True, True, True, True, True]
    # estimated like a built-in world at the same resolution (not by the mesh file's size)
    assert estimated_bytes(items[0], 256) == estimated_bytes(parse_spec("house")[0], 256)


def test_heldout_range():
    assert HELDOUT_SEED_START == 1_000_000
    assert heldout_spec("house", 3) == "house:1000000-1000002"
    items = parse_spec(heldout_spec("maze", 2))
    assert [is_heldout(it) for it in items] == [True, True]
    assert not is_heldout(WorldItem(family="house", seed=999_999))
    assert not is_heldout(WorldItem(path="x.gmdag"))
    train = parse_spec("house:999998-1000001")
    with pytest.raises(SceneSpecError, match=r"house:1000000 \(from 'house:999998-1000001'\) is held out"):
        check_training_items(train)
    assert check_training_items(train, allow_heldout=True) == train
    assert check_training_items(parse_spec("house:0-9")) is not None
    assert labels(overlap(parse_spec("house:0-5"), parse_spec("maze:0-9,house:4-20"))) == ["house:4", "house:5"]
    with pytest.raises(SceneSpecError):
        heldout_spec("house", 0)


@pytest.mark.parametrize(
    "spec,match",
    [
        ("house:a", "'house:a': seeds must be N or A-B"),
        ("house:1-", "'house:1-': seeds must be"),
        ("house:-3", "'house:-3': seeds must be"),
        ("house:5-3", "'house:5-3': empty range 5-3"),
        ("house:", "'house:': seeds must be"),
        ("house:1,,maze:2", "empty item"),
        ("house:1,", "empty item"),
        ("", "empty item"),
        ("attic:1", "'attic:1': unknown family 'attic'"),
        ("attic", "'attic': .*does not exist"),
        ("box:1-3", "'box:1-3': box has a single layout"),
        ("3-5", "'3-5': seeds need a family first"),
        ("house:0-999999999", "names 1,000,000,000 worlds, more than the limit"),
        ("house:99999999999999999999", "larger than"),
    ],
)
def test_malformed_specs(spec, match):
    with pytest.raises(SceneSpecError, match=match):
        parse_spec(spec)


def test_bad_files(tmp_path):
    with pytest.raises(SceneSpecError, match="'nope.gmdag': .*does not exist"):
        parse_spec("house:1,nope.gmdag", base_dir=tmp_path)
    bad = tmp_path / "bad.gmdag"
    bad.write_bytes(b"not a world at all, just some bytes")
    with pytest.raises(SceneSpecError, match="'bad.gmdag': .*wrong magic"):
        parse_spec("bad.gmdag", base_dir=tmp_path)
    short = tmp_path / "short.gmdag"
    short.write_bytes(_box_bytes()[0][:-8])
    with pytest.raises(SceneSpecError, match="short.gmdag.*header says node_count"):
        parse_spec(str(short))
    (tmp_path / "empty").mkdir()
    with pytest.raises(SceneSpecError, match="'empty': folder .* holds no .gmdag file"):
        parse_spec("empty", base_dir=tmp_path)
    with pytest.raises(SceneSpecError, match="no .gmdag or mesh file matches"):
        parse_spec(str(tmp_path / "*.nothing.gmdag"))
    (tmp_path / "x.png").write_text("not a world")
    with pytest.raises(SceneSpecError, match="x.png is not a .gmdag file, mesh file \\(.obj .stl .ply .off .glb\\)"):
        parse_spec("x.png", base_dir=tmp_path)
    (tmp_path / "locked.obj").write_text("v 0 0 0\n")
    (tmp_path / "locked.obj").chmod(0)
    if not os.access(tmp_path / "locked.obj", os.R_OK):  # (root reads it anyway)
        with pytest.raises(SceneSpecError, match="'locked.obj': cannot read mesh file"):
            parse_spec("locked.obj", base_dir=tmp_path)
    with pytest.raises(SceneSpecError, match="cannot read list file"):
        parse_spec("@missing.txt", base_dir=tmp_path)
    (tmp_path / "loop.txt").write_text("house:1\n@loop.txt\n")
    with pytest.raises(SceneSpecError, match="loop.txt:2: .*includes itself"):
        parse_spec("@loop.txt", base_dir=tmp_path)
    (tmp_path / "typo.txt").write_text("house:1\n# fine\nmaze:9-2\n")
    with pytest.raises(SceneSpecError, match=r"typo.txt:3: scene spec item 'maze:9-2': empty range"):
        parse_spec("typo.txt", base_dir=tmp_path)
    (tmp_path / "blank.txt").write_text("# nothing here\n\n")
    with pytest.raises(SceneSpecError, match="names no worlds"):
        parse_spec("blank.txt", base_dir=tmp_path)


def test_world_too_small_to_spawn_in(tmp_path):
    tiny = World(
        resolution=16,
        bmin=np.zeros(3, np.float32),
        voxel_size=0.01,
        nodes=np.array([encode_leaf(0, 0.05)], dtype=np.uint64),
    )
    save_world(tiny, tmp_path / "tiny.gmdag")
    with pytest.raises(SceneSpecError, match=r"'tiny.gmdag': world .*tiny.gmdag is too small to spawn in \(0.16 m"):
        parse_spec("tiny.gmdag", base_dir=tmp_path)
    # the box is 3 m from floor to ceiling, with 1 m voxels at resolution 16: an actor
    # of radius r needs 2 r + 2 voxels, so 0.25 m fits and 0.5 m does not
    write_box(tmp_path / "box.gmdag")
    assert len(parse_spec("box.gmdag", base_dir=tmp_path, actor_radius=0.25)) == 1
    with pytest.raises(SceneSpecError, match=r"'box.gmdag': .*too small to spawn in \(3 m across"):
        parse_spec("box.gmdag", base_dir=tmp_path, actor_radius=0.5)


def test_ram_is_checked_before_loading(tmp_path):
    items = parse_spec("house:0-9,maze:0-99")
    need = check_ram(items, 128, available=10**12)
    assert need == sum(estimated_bytes(it, 128) for it in items)
    assert estimated_bytes(items[0], 256) > 3.9 * estimated_bytes(items[0], 128) - 4 * 2**17
    with pytest.raises(SceneSpecError, match=r"'maze:0-99': 110 worlds at resolution 128 would need about"):
        check_ram(items, 128, available=need)  # only half may be used
    a = write_box(tmp_path / "a.gmdag")
    file_item = parse_spec(str(a))[0]
    assert estimated_bytes(file_item, 128) == a.stat().st_size + 64 * 1024
    assert MAX_WORLDS >= 100_000


def test_one_ram_check(monkeypatch):
    import navi_nb.ram as ram
    from navi_nb.errors import NaviError

    assert ram.available_ram() > 0
    assert ram.check_fits(600 << 20, "x", available=1200 << 20) == 1200 << 20
    with pytest.raises(NaviError, match=r"^x would need about 0.59 GiB of RAM, more than 50% of the 1.17 GiB"):
        ram.check_fits(601 << 20, "x", fraction=0.5, available=1200 << 20)
    with pytest.raises(SceneSpecError, match=r"about 2.00 GiB of RAM \(y\), more than the 1.00 GiB available$"):
        ram.check_fits(2 << 30, "x", available=1 << 30, detail=" (y)", error=SceneSpecError)
    monkeypatch.setattr(ram, "available_ram", lambda: None)  # nothing readable: nothing refused
    assert ram.check_fits(1 << 60, "x") is None


def test_cli_spec_and_errors(tmp_path, capsys):
    assert main(["scenes", "--spec", "house:0-4,maze:1000000-1000001"]) == 0
    out = capsys.readouterr().out
    assert "7 worlds: house 5, maze 2; held-out 2" in out
    mesh = Path(__file__).resolve().parents[1] / "navi_nb" / "data" / "meshes" / "wallhole.obj"
    assert main(["scenes", "--spec", f"{mesh},house:7"]) == 0
    assert "2 worlds: meshes 1, house 1; held-out 0" in capsys.readouterr().out
    assert main(["scenes", "--spec", "maze:3"]) == 0
    assert "1 world: maze 1; held-out 0" in capsys.readouterr().out
    assert main(["scenes"]) == 0
    out = capsys.readouterr().out
    assert "held out for evaluation: seeds >= 1,000,000" in out and "house:0-199 " in out
    assert main(["scenes", "--compile", "house:3-1", "--cache", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert "empty range 3-1" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "c").exists()


def test_too_many_worlds_names_the_list_file_that_named_them(tmp_path):
    """A list file of 200,001 one-seed lines is blamed as one source (not its first line, "house:0 (1 worlds)"),
    a nested list file for its own lines, a range for itself; and the family with the most seeds is named."""
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("".join(f"house:{i}\n" for i in range(MAX_WORLDS + 1)))
    with pytest.raises(SceneSpecError) as exc:
        parse_spec(f"maze:0-9,@{seeds}")
    assert str(exc.value) == (
        f"scene spec names {MAX_WORLDS + 11:,} worlds, more than the limit of {MAX_WORLDS:,}; the most from list "
        f"file {seeds} ({MAX_WORLDS + 1:,} worlds); the family with the most seeds is house ({MAX_WORLDS + 1:,})"
    )
    outer = tmp_path / "outer.txt"
    outer.write_text(f"maze:0-5\n@{seeds}\n")
    with pytest.raises(SceneSpecError, match=f"the most from list file {re.escape(str(seeds))} "):
        parse_spec(f"@{outer}")
    half = MAX_WORLDS // 2
    with pytest.raises(SceneSpecError, match=rf"the most from item 'maze:0-{half}' \({half + 1:,} worlds\)"):
        parse_spec(f"house:0-{half - 1},maze:0-{half},clutter:0-9")
