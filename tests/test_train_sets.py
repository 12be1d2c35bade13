"""Training and evaluation over a set of worlds (``--scenes SPEC``).

Tiny runs (box and small houses at resolution 32, four actors, two updates):
the run records its set and refuses changed worlds on resume and eval; the
weights do not depend on the shard count; evaluation splits episodes into
train and held-out worlds and refuses an overlap unless it is asked for; every
bad set is one line naming the item, exit 2, nothing written.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from run_helpers import tiny_run_args

from navi_nb.cli import main
from navi_nb.train.config import TrainConfig, from_dict
from navi_nb.train.evaluate import bootstrap_interval, wilson_interval
from navi_nb.world.gmdag import World, encode_leaf, load_world, save_world

SET = "box,house:1-2"
TINY = tiny_run_args(scenes=None, eval_episodes=6)


def tiny_config(**kw):
    base = dict(
        scenes=SET,
        resolution=32,
        actors=4,
        sensor_az=8,
        sensor_el=4,
        rollout_steps=16,
        hidden=[16],
        update_epochs=1,
        num_minibatches=2,
        total_steps=128,
        checkpoint_every=1,
        eval_episodes=0,
        env={"max_steps": 20},
    )
    base.update(kw)
    return from_dict(base)


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("NAVI_NB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def snapshot(folder: Path):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def fails_cleanly(argv, capsys, match, folder=None):
    before = snapshot(folder) if folder is not None and folder.exists() else None
    code = main(argv)
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2, (code, err)
    assert err.startswith("error:") and err.count("error:") == 1 and match in err, err
    assert "Traceback" not in err
    if before is not None:
        assert snapshot(folder) == before, "run folder changed"
    return err


@pytest.fixture(scope="module")
def world_file(tmp_path_factory):
    """A small world file (the box compiled at 32) for file items."""
    from navi_nb.world.compiler import compile_scene

    path = tmp_path_factory.mktemp("worlds") / "room.gmdag"
    save_world(compile_scene("box", 32), path)
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory, world_file):
    """One tiny finished run over two houses, the box and a world file."""
    root = tmp_path_factory.mktemp("runs")
    mp = pytest.MonkeyPatch()
    mp.setenv("NAVI_NB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
    assert main(["train", "--scenes", f"{SET},{world_file}", *TINY, "--run-dir", str(root), "--name", "r"]) == 0
    mp.undo()
    return root / "r"


# ----------------------------------------------------------------- settings
def test_scenes_setting():
    assert TrainConfig().scenes == "house"
    with pytest.raises(Exception, match="scene is now scenes"):
        from_dict({"scene": "box"})
    with pytest.raises(Exception, match="resolution must be a power of two"):
        tiny_config(resolution=48)
    with pytest.raises(Exception, match="scenes must be a non-empty scene spec"):
        tiny_config(scenes=" ")


def test_intervals_match_independent_values():
    # Wilson 95 % for 8 of 10 (textbook value: 0.490 to 0.943) and for 0 of 20 (0 to 0.161)
    lo, hi = wilson_interval(8, 10)
    assert abs(lo - 0.4902) < 1e-3 and abs(hi - 0.9433) < 1e-3
    lo, hi = wilson_interval(0, 20)
    assert lo == 0.0 and abs(hi - 0.1611) < 1e-3
    # bootstrap: seeded (same values, same interval), around the mean, about +-1.96 standard errors
    v = np.random.default_rng(5).normal(2.0, 1.0, 400)
    a, b = bootstrap_interval(v), bootstrap_interval(v)
    assert a == b
    se = v.std() / np.sqrt(v.size)
    assert a[0] < v.mean() < a[1]
    assert abs((a[1] - a[0]) / (2 * 1.96 * se) - 1) < 0.15
    assert bootstrap_interval(np.ones(7)) == [1.0, 1.0]


# ------------------------------------------------------------ run and resume
def test_run_records_its_set(trained, world_file):
    names = set(snapshot(trained))
    assert "worlds.json" in names and "world.gmdag" not in names
    rec = json.loads((trained / "worlds.json").read_text())
    assert rec["scenes"] == f"{SET},{world_file}" and rec["resolution"] == 32
    assert [w["name"] for w in rec["worlds"]] == ["box:0", "house:1", "house:2", "room.gmdag"]
    copy = trained / rec["worlds"][3]["file"]
    assert copy.read_bytes() == world_file.read_bytes()  # the file item is kept in the run folder
    from navi_nb.train.runs import world_digest

    assert rec["worlds"][3]["digest"] == world_digest(load_world(world_file))
    ev = json.loads((trained / "eval.json").read_text())
    assert set(ev["splits"]) == {"train"} and ev["splits"]["train"]["episodes"] == 6
    assert set(ev["per_episode"]["world"]) <= {w["name"] for w in rec["worlds"]}


def test_resume_and_eval_refuse_a_changed_world(trained, tmp_path, capsys, world_file):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    rec = json.loads((run / "worlds.json").read_text())
    # a changed copy of the file world
    other = tmp_path / "other.gmdag"
    from navi_nb.world.compiler import compile_scene

    save_world(compile_scene("box", 64), other)
    shutil.copy(other, run / rec["worlds"][3]["file"])
    fails_cleanly(["train", "--resume", str(run)], capsys, "is not the one the run trained in", run)
    fails_cleanly(["eval", str(run), "--episodes", "2"], capsys, "is not the one the run trained in", run)
    # a built-in world whose recorded hash no longer matches (as after a generator change)
    shutil.rmtree(run)
    shutil.copytree(trained, run)
    rec["worlds"][1]["digest"] = "0" * 16
    (run / "worlds.json").write_text(json.dumps(rec))
    fails_cleanly(["train", "--resume", str(run)], capsys, "world house:1 is not the one the run trained in", run)
    # a record of another set
    rec = json.loads((trained / "worlds.json").read_text())
    rec["scenes"] = "box"
    (run / "worlds.json").write_text(json.dumps(rec))
    fails_cleanly(["eval", str(run)], capsys, "does not record the set of its config", run)


def test_train_in_a_mesh(tmp_path, capsys):
    """``--scenes room.obj``: the mesh is compiled into the world cache at the run's resolution, the run keeps
    the compiled world, and evaluating it again (another spec naming the mesh) loads the same world."""
    from navi_nb.train.runs import world_digest
    from navi_nb.world.mesh_scene import sample_mesh_path
    from navi_nb.world.world_cache import default_cache_dir, mesh_entry_path

    mesh = tmp_path / "room.obj"
    shutil.copy(sample_mesh_path("wallhole.obj"), mesh)
    root = tmp_path / "runs"
    assert main(["train", *tiny_run_args(scenes=str(mesh)), "--run-dir", str(root), "--name", "m"]) == 0
    capsys.readouterr()
    rec = json.loads((root / "m" / "worlds.json").read_text())["worlds"]
    entry = mesh_entry_path(default_cache_dir(), mesh, 32)
    assert [w["name"] for w in rec] == ["room.obj"] and rec[0]["source"] == str(mesh.resolve())
    assert rec[0]["file"] == "worlds/00000-room.obj.gmdag"
    assert (root / "m" / rec[0]["file"]).read_bytes() == entry.read_bytes()
    assert rec[0]["digest"] == world_digest(load_world(entry))
    ev = json.loads((root / "m" / "eval.json").read_text())
    assert set(ev["per_episode"]["world"]) == {"room.obj"}
    mesh.unlink()  # the run's own set is its compiled copy: the mesh is not needed again
    assert main(["eval", str(root / "m"), "--episodes", "2"]) == 0
    shutil.copy(sample_mesh_path("wallhole.obj"), mesh)
    fails_cleanly(["eval", str(root / "m"), "--scenes", str(mesh)], capsys, "are training worlds of run")
    assert main(["eval", str(root / "m"), "--episodes", "2", "--scenes", str(mesh), "--allow-overlap"]) == 0
    assert "train" in json.loads((root / "m" / "eval.json").read_text())["splits"]


def test_same_weights_at_one_and_two_shards(tmp_path):
    from navi_nb.train.loop import Trainer

    params, visited = [], []
    for shards in (1, 2):
        cfg = tiny_config(shards=shards, run_dir=str(tmp_path), name=f"s{shards}", env={"max_steps": 8})
        tr = Trainer.create(cfg)
        tr.train(progress=False)
        params.append(tr.policy.params.copy())
        visited.append(tr.env.get_state()["world_index"].copy())
    assert params[0].tobytes() == params[1].tobytes()
    assert np.array_equal(visited[0], visited[1])


def test_resumed_set_run_matches_the_uninterrupted_one(tmp_path):
    from navi_nb.train.loop import Trainer

    full = Trainer.create(tiny_config(run_dir=str(tmp_path), name="full"))
    full.train(progress=False)
    part = Trainer.create(tiny_config(run_dir=str(tmp_path), name="part"))
    part.train(progress=False, stop_after=1)
    resumed = Trainer.resume(tmp_path / "part")
    assert resumed.update == 1 and len(resumed.world_set) == 3
    resumed.train(progress=False)
    assert resumed.policy.params.tobytes() == full.policy.params.tobytes()


# ------------------------------------------------------------------ evaluation
def test_eval_splits_train_and_heldout(trained, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    # held-out houses only: every episode is held-out, none in a training world
    assert main(["eval", str(run), "--scenes", "house:1000000-1000002", "--episodes", "6", "--json", "-"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert set(res["splits"]) == {"held-out"} and res["overlap_worlds"] == 0
    assert all(w.startswith("house:100000") for w in res["per_episode"]["world"])
    assert res["splits"]["held-out"]["episodes"] == 6
    # an overlapping set is refused without the flag, nothing written
    fails_cleanly(["eval", str(run), "--scenes", "house:2-3"], capsys, "training worlds of run", run)
    # with it: the training world's episodes are the train split, the others held-out
    assert (
        main(
            ["eval", str(run), "--scenes", "house:2,house:1000000", "--allow-overlap", "--episodes", "8", "--json", "-"]
        )
        == 0
    )
    res = json.loads(capsys.readouterr().out)
    assert res["overlap_worlds"] == 1
    for world, split in zip(res["per_episode"]["world"], res["per_episode"]["split"]):
        assert split == ("train" if world == "house:2" else "held-out")
    n = {s: res["per_episode"]["split"].count(s) for s in ("train", "held-out")}
    for s, g in res["splits"].items():
        assert g["episodes"] == n[s]
        succ = [x for x, sp in zip(res["per_episode"]["success"], res["per_episode"]["split"]) if sp == s]
        assert g["success_rate"] == sum(succ) / len(succ)
        assert g["spl_mean_ci95"][0] <= g["spl_mean"] <= g["spl_mean_ci95"][1]
    if len(res["splits"]) == 2:
        assert (
            res["generalization_gap"]
            == res["splits"]["train"]["success_rate"] - res["splits"]["held-out"]["success_rate"]
        )
    # the final distance is the distance from the last position to the goal
    assert main(["eval", str(run), "--episodes", "4"]) == 0
    capsys.readouterr()
    from navi_nb.train.evaluate import load_episodes

    eps, _ = load_episodes(run)
    ev = json.loads((run / "eval.json").read_text())
    last = eps["positions"][eps["length"], np.arange(4)].astype(np.float64)
    dist = np.linalg.norm(last - eps["goals"].astype(np.float64), axis=1)
    np.testing.assert_allclose(ev["per_episode"]["final_distance"], dist, rtol=1e-6)


def test_train_and_heldout_disjoint(tmp_path, capsys):
    """Held-out seeds cannot enter a training set by accident; an eval set of held-out seeds never overlaps
    a training set of ordinary seeds."""
    from navi_nb.world.scene_spec import HELDOUT_SEED_START, heldout_spec, overlap, parse_spec

    fails_cleanly(
        ["train", "--scenes", f"house:0-3,{HELDOUT_SEED_START + 7}", "--run-dir", str(tmp_path / "r")],
        capsys,
        f"scene house:{HELDOUT_SEED_START + 7} (from '{HELDOUT_SEED_START + 7}') is held out",
    )
    assert not (tmp_path / "r").exists()
    train = parse_spec("house:0-199,maze:0-99,clutter:0-99")
    for fam in ("house", "maze", "clutter"):
        assert overlap(parse_spec(heldout_spec(fam, 100)), train) == []


def test_a_heldout_world_is_refused_in_training_under_any_name(tmp_path, capsys):
    """A held-out world passed as a file is held out: by its sidecar's seed, or (sidecar dropped) by its node
    words matching the world cache's held-out entry; the run folder is not left behind."""
    from navi_nb.world.compiler import compile_scene
    from navi_nb.world.scene_spec import HELDOUT_SEED_START, WorldItem
    from navi_nb.world.world_cache import default_cache_dir, entry_path, load_worlds

    held = HELDOUT_SEED_START + 5
    runs = tmp_path / "runs"
    named = tmp_path / "mine.gmdag"
    save_world(compile_scene("house", 32, held), named)
    err = fails_cleanly(["train", "--scenes", f"box,{named}", *TINY, "--run-dir", str(runs), "--name", "x"], capsys, "")
    assert f"scene {named} (from '{named}') is held-out world house:{held} (its sidecar names it)" in err, err
    assert not (runs / "x").exists()
    load_worlds([WorldItem(family="house", seed=held)], 32)
    plain = tmp_path / "plain.gmdag"
    shutil.copyfile(entry_path(default_cache_dir(), "house", held, 32), plain)
    assert not Path(str(plain) + ".json").exists()
    err = fails_cleanly(["train", "--scenes", str(plain), *TINY, "--run-dir", str(runs), "--name", "x"], capsys, "")
    assert f"is held-out world house:{held} (its node words are that world's in the world cache)" in err, err
    assert not (runs / "x").exists()


def test_eval_finds_a_training_world_under_another_name(trained, tmp_path, capsys):
    """A file copy of a training world (the run's world file renamed; a cached house's entry without its
    sidecar) is a training world: refused without the flag, the train split with it; a held-out house stays
    held-out."""
    from navi_nb.world.world_cache import default_cache_dir, entry_path

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    room = next((run / "worlds").glob("*room.gmdag"))
    renamed = tmp_path / "other.gmdag"
    shutil.copyfile(room, renamed)
    shutil.copyfile(str(room) + ".json", str(renamed) + ".json")
    house = tmp_path / "house_copy.gmdag"
    shutil.copyfile(entry_path(default_cache_dir(), "house", 2, 32), house)
    spec = f"{renamed},{house},house:1000000"
    err = fails_cleanly(["eval", str(run), "--scenes", spec, "--episodes", "6"], capsys, "", run)
    assert f"2 of the 3 evaluation worlds (first {renamed}) hold the content of training worlds" in err, err
    argv = ["eval", str(run), "--scenes", spec, "--allow-overlap", "--episodes", "6", "--json", "-"]
    assert main(argv) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["overlap_worlds"] == 2
    for world, split in zip(res["per_episode"]["world"], res["per_episode"]["split"]):
        assert split == ("held-out" if world == "house:1000000" else "train"), (world, split)


# ------------------------------------------------------------------ bad input
def test_bad_sets_exit_2_and_write_nothing(tmp_path, capsys, monkeypatch):
    runs = tmp_path / "runs"
    cache = tmp_path / "cache"
    monkeypatch.setenv("NAVI_NB_CACHE", str(cache))

    def bad(spec, match, *extra):
        fails_cleanly(["train", "--scenes", spec, *extra, "--run-dir", str(runs)], capsys, match)
        assert not runs.exists() and not cache.exists()

    bad("house:0-9,,maze", "empty item")
    bad("house:9-3", "'house:9-3': empty range")
    bad("castle:1-4", "'castle:1-4': unknown family 'castle'")
    bad("house:0-3," + str(tmp_path / "nope.gmdag"), "nope.gmdag does not exist")
    (tmp_path / "junk.gmdag").write_bytes(b"not a world")
    bad(str(tmp_path / "junk.gmdag"), "junk.gmdag")
    tiny = World(
        resolution=16,
        bmin=np.zeros(3, np.float32),
        voxel_size=0.01,
        nodes=np.array([encode_leaf(0, 0.05)], dtype=np.uint64),
    )
    save_world(tiny, tmp_path / "tiny.gmdag")
    bad(f"box,{tmp_path / 'tiny.gmdag'}", "too small to spawn in")
    import navi_nb.ram

    monkeypatch.setattr(navi_nb.ram, "available_ram", lambda: 10 * 2**20)
    bad("box,maze:0-99", "'maze:0-99': 101 worlds at resolution 128 would need about")
    monkeypatch.undo()
    monkeypatch.setenv("NAVI_NB_CACHE", str(cache))
    bad("house:0-1", "resolution must be a power of two", "--resolution", "100")
