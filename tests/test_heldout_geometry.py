"""Held out by geometry (``navi_nb.world.fingerprint``): a world is the same world at another resolution,
sample convention or header, with a leaf changed, or exported as a mesh and compiled again.

The fingerprint is checked against the analytic scene's sign at the lattice points; training refuses a
held-out house compiled at another resolution or with a leaf changed (one line, exit 2, nothing written);
evaluation counts a training world's other forms (``navi-nb compile``'s corner-sampled output, another
resolution, a changed leaf, a mesh of it compiled again) as the train split and a different house as
held-out; a run recorded without fingerprints still evaluates, by content hash, and says so.
"""

import json
import shutil

import numpy as np
import pytest
from run_helpers import tiny_run_args
from test_train_sets import fails_cleanly

from navi_nb.cli import main
from navi_nb.world.compiler import compile_scene
from navi_nb.world.fingerprint import (
    CELL,
    MARGIN,
    SAMPLE_AT,
    TOLERANCE,
    Fingerprint,
    difference,
    fingerprint,
    from_record,
    matches,
)
from navi_nb.world.gmdag import World, decode_leaf, encode_leaf, is_leaf, load_world, save_world, world_digest
from navi_nb.world.scenes import get_scene

SET = "box,house:1-2"


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("NAVI_NB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def unnamed(world) -> World:
    """`world` with a sidecar that names no scene or seed (its sample convention kept)."""
    side = {k: v for k, v in world.sidecar.items() if k not in ("scene", "seed", "entry_digest")}
    return World(world.resolution, world.bmin.copy(), world.voxel_size, world.nodes.copy(), sidecar=side)


def one_leaf_changed(world) -> World:
    """`world` (unnamed) with the distance of its first leaf word holding a nonzero distance scaled by 0.9."""
    out = unnamed(world)
    leaves = np.nonzero(is_leaf(out.nodes))[0]
    dist, sem = decode_leaf(out.nodes[leaves])
    k = leaves[np.nonzero(dist != 0)[0][0]]
    d, s = decode_leaf(out.nodes[k : k + 1])
    out.nodes[k] = encode_leaf(int(s[0]), float(d[0]) * 0.9)
    assert out.nodes[k] != world.nodes[k]
    return out


# ------------------------------------------------------------ the fingerprint
def test_fingerprint_is_the_scene_sign_at_the_lattice():
    """At resolution 64 the fingerprint is the analytic field's sign at the points (i + 0.375) * 0.5 m of the
    16 m cube wherever the field is MARGIN or more from zero, and two different houses are far apart."""
    world = compile_scene("house", 64, 3)
    fp = fingerprint(world)
    # the cube is [-8, 8] x [-6.5, 9.5] x [-8, 8]: lattice points -16..15, -13..18, -16..15
    assert fp.lo == (-16, -13, -16) and fp.shape == (32, 32, 32)
    axes = [(np.arange(32) + lo + SAMPLE_AT) * CELL for lo in fp.lo]
    pts = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
    d, _ = get_scene("house", 3).evaluate(pts)
    d = d.reshape(32, 32, 32)
    far = np.abs(d) >= MARGIN
    assert far.mean() > 0.9 and np.array_equal(fp.solid[far], d[far] < 0)
    assert np.count_nonzero(fp.definite != far) <= 0.01 * far.size  # field bounds inside solids and far off
    assert difference(fp, Fingerprint(fp.lo, d < 0, far)) == 0.0
    other = fingerprint(compile_scene("house", 64, 4))
    assert difference(fp, other) > 40 * TOLERANCE and not matches(fp, other)
    # the differing definite samples over the smaller phase (here the free space: samples free in either house)
    differ = np.count_nonzero((fp.solid != other.solid) & (fp.definite | other.definite))
    free, solid = np.count_nonzero(~fp.solid | ~other.solid), np.count_nonzero(fp.solid | other.solid)
    assert free < solid and differ / free == pytest.approx(difference(fp, other), rel=1e-12)
    # an open world (one solid block in free space) is measured against its solid
    block, moved = np.zeros((20, 20, 20), bool), np.zeros((20, 20, 20), bool)
    block[5:9, 5:9, 5:9], moved[5:9, 5:9, 6:10] = True, True  # 64 samples each, 48 shared
    everywhere = np.ones_like(block)
    a, b = Fingerprint((0, 0, 0), block, everywhere), Fingerprint((0, 0, 0), moved, everywhere)
    assert difference(a, b) == pytest.approx(32 / 80)
    shifted = Fingerprint((0, 0, 1), moved[:, :, 1:], everywhere[:, :, 1:])  # the same, in another box
    assert difference(a, shifted) == pytest.approx(32 / 80)
    assert difference(a, Fingerprint((0, 0, 0), moved, ~everywhere)) == pytest.approx(32 / 80)  # b's definite alone
    assert difference(a, Fingerprint((0, 0, 16), block, everywhere)) == float("inf")  # a fifth overlaps: not compared
    # the record round-trips, and a damaged one is refused by name
    back = from_record(fp.to_record())
    assert back.lo == fp.lo and np.array_equal(back.solid, fp.solid) and np.array_equal(back.definite, fp.definite)
    from navi_nb.world.fingerprint import FingerprintError

    rec = fp.to_record()
    damaged = ({**rec, "solid": rec["solid"][:-8]}, {**rec, "definite": None}, {**rec, "shape": [32, 32]})
    for bad in damaged + ({**rec, "version": 0}, {**rec, "margin": 0.1}):
        with pytest.raises(FingerprintError, match="worlds.json world 3"):
            from_record(bad, "worlds.json world 3")


def test_a_cube_too_large_has_no_fingerprint():
    """A 160 m cube (32.8 million lattice points) has none and matches nothing; a 16 m solid one is all solid."""
    from navi_nb.world.fingerprint import MAX_SAMPLES, first_match

    big = World(16, np.zeros(3, np.float32), 10.0, np.array([encode_leaf(0, 5.0)], np.uint64))
    assert 320**3 > MAX_SAMPLES and fingerprint(big) is None
    solid = fingerprint(World(16, np.zeros(3, np.float32), 1.0, np.array([encode_leaf(0, -5.0)], np.uint64)))
    assert solid.lo == (0, 0, 0) and solid.shape == (32, 32, 32) and solid.solid.all()
    assert first_match(None, [solid]) is None and first_match(solid, [None, solid]) == 1


def test_same_world_matches_at_other_resolutions_conventions_and_leaves():
    a = compile_scene("house", 64, 3)
    fa = fingerprint(a)
    for b in (compile_scene("house", 32, 3), compile_scene("house", 128, 3)):
        assert matches(fa, fingerprint(b)), difference(fa, fingerprint(b))
    # navi-nb compile's corner-sampled form: the same samples, bit for bit
    from navi_nb.world.gmdag import with_sample_convention

    corner = with_sample_convention(a, "corner")
    assert corner.bmin[0] != a.bmin[0] and np.array_equal(fingerprint(corner).solid, fa.solid)
    changed = one_leaf_changed(a)
    assert world_digest(changed) != world_digest(unnamed(a)) and matches(fa, fingerprint(changed))


def test_mesh_of_a_world_compiled_again_matches(tmp_path):
    """The box scene written as a mesh (the cube's solid: the cube's faces and the room's, facing in) and
    compiled again at another resolution, with a mesh's margin of empty space around the cube."""
    from navi_nb.world.compiler import compile_mesh
    from navi_nb.world.mesh_io import Mesh, write_obj
    from navi_nb.world.mesh_scene import box_mesh, merge_meshes

    scene = compile_scene("box", 32)
    lo, side = np.asarray(scene.bmin, np.float64), 32 * float(scene.voxel_size)
    room = box_mesh((-4.0, 0.0, -3.0), (4.0, 3.0, 3.0))
    mesh = merge_meshes([box_mesh(lo, lo + side), Mesh(room.vertices, room.faces[:, ::-1].copy())])
    write_obj(tmp_path / "box.obj", mesh.vertices, mesh.faces)
    world = compile_mesh(tmp_path / "box.obj", 64)
    fs, fm = fingerprint(scene), fingerprint(world)
    assert fm.shape != fs.shape and matches(fs, fm), difference(fs, fm)
    assert not matches(fingerprint(compile_scene("house", 32, 1)), fm)


# ------------------------------------------------------------------ training
def test_training_refuses_a_heldout_house_by_geometry(tmp_path, capsys):
    """A held-out house compiled at another resolution (its sidecar naming no seed, or none: then read half a
    voxel away), or its cache entry with a leaf changed, is refused as the held-out world it is; another house
    is not."""
    from navi_nb.world.heldout import heldout_twin
    from navi_nb.world.scene_spec import HELDOUT_SEED_START, WorldItem
    from navi_nb.world.world_cache import default_cache_dir, entry_path, load_worlds

    held = HELDOUT_SEED_START + 11
    load_worlds([WorldItem(family="house", seed=held)], 32)  # an evaluation compiled it at 32
    runs = tmp_path / "runs"
    other_res = tmp_path / "other_res.gmdag"
    save_world(unnamed(compile_scene("house", 64, held)), other_res)
    leaf = tmp_path / "leaf.gmdag"
    save_world(one_leaf_changed(load_world(entry_path(default_cache_dir(), "house", held, 32))), leaf)
    bare = tmp_path / "bare.gmdag"  # no sidecar: read corner-sampled, half a voxel (0.125 m) from where it was
    save_world(compile_scene("house", 64, held), bare, sidecar=False)
    for path, res in ((other_res, 32), (leaf, 32), (bare, 32)):
        err = fails_cleanly(
            ["train", "--scenes", f"box,{path}", *tiny_run_args(scenes=None), "--run-dir", str(runs), "--name", "x"],
            capsys,
            f"scene {path} (from '{path}') is held-out world house:{held} (its geometry is that world's, "
            f"compiled at resolution {res} in the world cache)",
        )
        assert "error:" in err
        assert not (runs / "x").exists()
    assert heldout_twin(load_world(other_res)) is not None
    assert heldout_twin(unnamed(compile_scene("house", 64, 5))) is None


# ---------------------------------------------------------------- evaluation
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny finished run over the box and two houses at resolution 32."""
    root = tmp_path_factory.mktemp("runs")
    mp = pytest.MonkeyPatch()
    mp.setenv("NAVI_NB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
    assert main(["train", "--scenes", SET, *tiny_run_args(scenes=None), "--run-dir", str(root), "--name", "r"]) == 0
    mp.undo()
    return root / "r"


@pytest.fixture(scope="module")
def training_forms(tmp_path_factory, trained):
    """Files holding the run's worlds in other forms: house:2 from `navi-nb compile` (corner samples, its
    sidecar naming the scene), house:2 at resolution 64, house:2's cache entry with a leaf changed, the box
    as a mesh compiled again; and a different house."""
    from navi_nb.world.world_cache import default_cache_dir, entry_path

    folder = tmp_path_factory.mktemp("forms")
    mp = pytest.MonkeyPatch()
    mp.setenv("NAVI_NB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
    out = {k: folder / f"{k}.gmdag" for k in ("compiled", "res64", "leaf", "mesh", "other")}
    argv = ["compile", "--scene", "house", "--seed", "2", "--resolution", "32", "-o", str(out["compiled"])]
    assert main([*argv, "--no-progress"]) == 0
    save_world(unnamed(compile_scene("house", 64, 2)), out["res64"])
    save_world(one_leaf_changed(load_world(entry_path(default_cache_dir(), "house", 2, 32))), out["leaf"])
    from navi_nb.world.compiler import compile_mesh
    from navi_nb.world.mesh_io import Mesh, write_obj
    from navi_nb.world.mesh_scene import box_mesh, merge_meshes

    room = box_mesh((-4.0, 0.0, -3.0), (4.0, 3.0, 3.0))
    outer = box_mesh((-8.0, -6.5, -8.0), (8.0, 9.5, 8.0))  # the box scene's cube
    mesh = merge_meshes([outer, Mesh(room.vertices, room.faces[:, ::-1].copy())])
    write_obj(folder / "box.obj", mesh.vertices, mesh.faces)
    save_world(compile_mesh(folder / "box.obj", 64), out["mesh"])
    save_world(unnamed(compile_scene("house", 32, 5)), out["other"])
    from navi_nb.world.scene_spec import WorldItem
    from navi_nb.world.world_cache import load_worlds

    load_worlds([WorldItem(family="house", seed=1000000)], 32)  # in the cache: no progress bar in eval's errors
    mp.undo()
    return out


def test_eval_counts_a_training_world_in_other_forms_as_train(trained, training_forms, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    f = training_forms
    assert json.loads(f["compiled"].with_name("compiled.gmdag.json").read_text())["sample"] == "corner"
    forms = [f["compiled"], f["res64"], f["leaf"], f["mesh"]]
    spec = ",".join(str(p) for p in forms + [f["other"]]) + ",house:1000000"
    err = fails_cleanly(["eval", str(run), "--scenes", spec, "--episodes", "6"], capsys, "", run)
    assert f"4 of the 6 evaluation worlds (first {f['compiled']}) hold the content of training worlds" in err, err
    argv = ["eval", str(run), "--scenes", spec, "--allow-overlap", "--episodes", "12", "--json", "-"]
    assert main(argv) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["overlap_worlds"] == 4
    train_names = {p.name for p in forms}
    for world, split in zip(res["per_episode"]["world"], res["per_episode"]["split"]):
        assert split == ("train" if world in train_names else "held-out"), (world, split)
    assert set(res["per_episode"]["world"]) == train_names | {"other.gmdag", "house:1000000"}


def test_a_run_recorded_without_fingerprints_still_evaluates(trained, training_forms, tmp_path, capsys):
    """worlds.json without fingerprints (a run recorded before them): the split falls back to content hashes,
    one line says so; an exact copy is still train, another resolution is not recognised."""
    from navi_nb.world.world_cache import default_cache_dir, entry_path

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    rec = json.loads((run / "worlds.json").read_text())
    assert all(w["fingerprint"]["shape"] == [32, 32, 32] for w in rec["worlds"])
    for w in rec["worlds"]:
        del w["fingerprint"]
    (run / "worlds.json").write_text(json.dumps(rec))
    copy = tmp_path / "copy.gmdag"
    save_world(load_world(entry_path(default_cache_dir(), "house", 2, 32)), copy)
    spec = f"{copy},{training_forms['res64']}"
    argv = ["eval", str(run), "--scenes", spec, "--allow-overlap", "--episodes", "4", "--json", "-"]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert "records no geometry fingerprints: train or held-out by content hash only" in " ".join(out.err.split())
    res = json.loads(out.out)
    for world, split in zip(res["per_episode"]["world"], res["per_episode"]["split"]):
        assert split == ("train" if world == "copy.gmdag" else "held-out"), (world, split)


# ---------------------------------------------------------------- the package's reference held-out worlds
def test_the_shipped_reference_file_is_the_scenes_own():
    """The reference file holds this code's lattice, seeds and generator versions, and its records are the
    analytic scenes' fingerprints (first and last reference seed of every seeded family, recomputed)."""
    import gzip

    from navi_nb.world.fingerprint import scene_fingerprint
    from navi_nb.world.heldout import REFERENCE_FILE, REFERENCE_SEEDS, reference_geometry, reference_labels
    from navi_nb.world.scene_spec import HELDOUT_SEED_START
    from navi_nb.world.scenes import SEEDED_FAMILIES

    labels, prints, _packed = reference_geometry()
    assert labels == reference_labels() and len(labels) == REFERENCE_SEEDS * len(SEEDED_FAMILIES)
    records = json.loads(gzip.decompress(REFERENCE_FILE.read_bytes()))["records"]
    for family in SEEDED_FAMILIES:
        for seed in (HELDOUT_SEED_START, HELDOUT_SEED_START + REFERENCE_SEEDS - 1):
            assert records[f"{family}:{seed}"] == scene_fingerprint(get_scene(family, seed)).to_record()


@pytest.mark.parametrize("family, seed, resolutions", [("house", 1000003, (32, 64, 128)), ("rooms", 1000001, (32,))])
def test_a_scenes_fingerprint_is_what_its_compiled_worlds_hold(family, seed, resolutions):
    """The analytic scene's fingerprint over its layout equals its compiled worlds' samples there at every
    resolution (difference 0), and another seed's is far from them."""
    from navi_nb.world.fingerprint import difference_within, scene_fingerprint

    own, other = scene_fingerprint(get_scene(family, seed)), scene_fingerprint(get_scene(family, seed + 1))
    for res in resolutions:
        world = fingerprint(compile_scene(family, res, seed))
        assert difference_within(world, own) == 0.0, res
        assert difference_within(world, other) > 100 * TOLERANCE, res
    assert difference_within(own, fingerprint(compile_scene(family, resolutions[0], seed))) == float("inf")


def test_the_compiled_search_agrees_with_difference_within():
    """first_within (one compiled pass, leaving a part early) finds the first part difference_within accepts,
    over parts at the tolerance's edge: one sample flipped in a part of the world, then more and more."""
    from navi_nb.world.fingerprint import difference_within, first_within, pack_parts, scene_fingerprint

    world = fingerprint(compile_scene("house", 32, 1000005))
    own = scene_fingerprint(get_scene("house", 1000005))
    changed = np.flatnonzero(own.definite & ~own.solid)  # definite free samples, made solid one by one
    parts = [scene_fingerprint(get_scene("house", s)) for s in (1000006, 1000007)]
    for n in (1, 2, 4, 8, 16, 32, 64):
        solid = own.solid.copy().reshape(-1)
        solid[changed[:: max(1, changed.size // n)][:n]] = True
        parts.append(Fingerprint(own.lo, solid.reshape(own.shape), own.definite))
    parts.append(Fingerprint((own.lo[0] - 1, *own.lo[1:]), own.solid, own.definite))  # a box the world may not hold
    for k in range(len(parts)):
        want = next((i for i in range(k, len(parts)) if difference_within(world, parts[i]) <= TOLERANCE), None)
        got = first_within(world, pack_parts(parts[k:]))
        assert (None if got is None else got + k) == want, k
    assert first_within(world, pack_parts(parts[:2])) is None
    assert first_within(world, pack_parts(parts[2:3])) == 0  # one sample flipped: within the tolerance


def test_training_refuses_a_heldout_world_no_cache_holds(tmp_path, monkeypatch, capsys):
    """With an empty world cache (a machine that never compiled it), a held-out house or big maze compiled at
    any resolution and passed without a name is refused as the held-out world it is, by the package's
    reference geometry; one line, exit 2, nothing written. A training house is not."""
    from navi_nb.world.heldout import heldout_twin

    monkeypatch.setenv("NAVI_NB_CACHE", str(tmp_path / "empty_cache"))
    runs = tmp_path / "runs"
    for family, seed, res in (("house", 1000042, 64), ("bigmaze", 1000007, 32)):
        path = tmp_path / f"{family}.gmdag"
        save_world(unnamed(compile_scene(family, res, seed)), path)
        fails_cleanly(
            ["train", "--scenes", f"box,{path}", *tiny_run_args(scenes=None), "--run-dir", str(runs), "--name", "x"],
            capsys,
            f"scene {path} (from '{path}') is held-out world {family}:{seed} (its geometry holds that world's "
            "layout, one of the held-out worlds the package fingerprints)",
        )
        assert not (runs / "x").exists()
    assert heldout_twin(unnamed(compile_scene("house", 64, 5))) is None
    from navi_nb.world.scene_spec import HELDOUT_SEED_START
    from navi_nb.world.world_cache import builtin_entries

    assert all(e.seed < HELDOUT_SEED_START for e in builtin_entries(tmp_path / "empty_cache" / "worlds"))


@pytest.mark.parametrize(
    "content, match",
    [
        (b"not gzip", "cannot be read"),
        (None, "is not this version's"),  # another spec: a generator version changed since it was written
        (b"", "cannot be read"),
    ],
)
def test_a_damaged_or_stale_reference_file_is_one_line_naming_it(tmp_path, monkeypatch, content, match):
    import gzip

    from navi_nb.world import heldout

    path = tmp_path / "reference.json.gz"
    if content is None:
        content = gzip.compress(json.dumps({**heldout.reference_spec(), "seeds": [1000000, 99]}).encode())
    path.write_bytes(content)
    monkeypatch.setattr(heldout, "REFERENCE_FILE", path)
    heldout.reference_geometry.cache_clear()
    try:
        with pytest.raises(heldout.SceneSpecError, match=f"held-out reference file {path} {match}.*reinstall"):
            heldout.reference_geometry()
    finally:
        heldout.reference_geometry.cache_clear()
