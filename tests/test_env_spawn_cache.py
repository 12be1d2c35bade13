"""The spawn pool's cache file: the same pool as computing it, read instead of querying the grid, and
recomputed (never trusted) when the file is damaged or of another grid."""

import numpy as np
import pytest
from conftest import compiled_scene

import navi_nb.env.nav_env as nav_env
import navi_nb.env.worlds as env_worlds
from navi_nb.env import pool_file, spawn
from navi_nb.env.nav_env import NavEnv
from navi_nb.sense.sensor import Sensor


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NAVI_NB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "spawn"


@pytest.fixture()
def queries(monkeypatch):
    """Counts the points the environment's clearance query is asked for."""
    counted = [0]
    real = env_worlds.clearance_distances

    def counting(world, points):
        counted[0] += len(points)
        return real(world, points)

    monkeypatch.setattr(env_worlds, "clearance_distances", counting)  # what the spawn samplers query
    return counted


def build(**cfg):
    return NavEnv(compiled_scene("house", 64), 4, Sensor(8, 2), **cfg)


def assert_same_pool(a, b):
    assert np.array_equal(a.reach, b.reach) and a.reach.dtype == b.reach.dtype
    assert np.array_equal(a.pool, b.pool) and a.pool.dtype == b.pool.dtype == np.float64
    assert np.array_equal(a.spawn_points, b.spawn_points) and a.spawn_points.dtype == np.float32


def computed(env):
    """The same sampler built with no cache: the independent answer."""
    s = env._spawner
    world = compiled_scene("house", 64)
    lo, hi = nav_env.field_cube(world)
    roi = spawn.region_of_interest(world)
    roi_lo, roi_hi = roi if roi is not None else (lo, hi)
    return spawn.SpawnSampler(
        s.distance_fn, (lo, hi), (roi_lo, roi_hi), s.radius, s.margin, s.cell, world.spawn_points, s.mode
    )


def test_cell_centres_are_grid_centres_bit_for_bit():
    rng = np.random.default_rng(3)
    for _ in range(5):
        lo, dims, cell = rng.normal(size=3) * 7, rng.integers(1, 9, size=3), float(rng.uniform(0.05, 0.4))
        flat = np.sort(rng.choice(int(np.prod(dims)), size=5, replace=True))
        assert spawn.cell_centres(lo, dims, cell, flat).tobytes() == spawn.grid_centres(lo, dims, cell)[flat].tobytes()


def test_a_second_environment_reads_its_pool_from_the_cache_file(cache, queries):
    first = build()
    files = sorted(cache.glob("*.npz"))
    assert len(files) == 1
    assert queries[0] > 1000  # the grid was queried
    queries[0] = 0
    second = build()
    assert queries[0] == 0  # read, not queried
    assert sorted(cache.glob("*.npz")) == files
    assert_same_pool(first._spawner, second._spawner)
    assert_same_pool(second._spawner, computed(second))
    obs_a, _ = first.reset(seed=5)
    obs_b, _ = second.reset(seed=5)
    assert np.array_equal(obs_a, obs_b)


def test_another_setting_or_another_source_is_another_file(cache, queries, monkeypatch):
    build()
    build(radius=0.25)
    assert len(list(cache.glob("*.npz"))) == 2
    monkeypatch.setattr(pool_file, "_sources_digest", "an edited source")
    queries[0] = 0
    build()
    assert len(list(cache.glob("*.npz"))) == 3 and queries[0] > 1000


def test_a_damaged_or_foreign_file_is_computed_again_and_replaced(cache, queries):
    good = build()
    (path,) = cache.glob("*.npz")
    n_cells, n_points = good._spawner.reach.shape[0], compiled_scene("house", 64).spawn_points.shape[0]
    whole = path.read_bytes()
    middle = len(whole) // 2
    bad_files = {
        "garbage": b"not a pool file",
        "truncated": whole[:100],
        "bytes changed inside": whole[:middle]
        + bytes(b ^ 0x5A for b in whole[middle : middle + 16])
        + whole[middle + 16 :],
    }
    for why, data in bad_files.items():
        path.write_bytes(data)
        assert pool_file.read_pool(path, n_cells, n_points) is None, why
        queries[0] = 0
        env = build()
        assert queries[0] > 1000, why
        assert_same_pool(env._spawner, good._spawner)
        assert pool_file.read_pool(path, n_cells, n_points) is not None, why  # replaced by a good one
    # a readable pool of another grid's size
    pool_file.write_pool(path, np.ones(n_cells + 1, bool), np.ones(n_points, bool))
    assert pool_file.read_pool(path, n_cells, n_points) is None
    env = build()
    assert_same_pool(env._spawner, good._spawner)
    # wrong dtype
    np.savez(path.with_suffix(".tmp.npz"), reach=np.zeros(n_cells, np.int8), keep=np.ones(n_points, bool))
    path.with_suffix(".tmp.npz").replace(path)
    assert pool_file.read_pool(path, n_cells, n_points) is None


def test_a_cache_that_cannot_be_written_only_costs_time(tmp_path, monkeypatch, queries):
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setenv("NAVI_NB_CACHE", str(blocker / "cache"))  # its folder cannot be made
    env = build()
    assert queries[0] > 1000 and not (blocker / "spawn").exists()
    assert_same_pool(env._spawner, computed(env))
    assert not pool_file.write_pool(blocker / "spawn" / "x.npz", env._spawner.reach, np.ones(0, bool))


def test_a_cache_folder_without_the_world_hash_is_refused(tmp_path):
    from navi_nb.env.config import EnvConfigError

    env = build()
    s = env._spawner
    with pytest.raises(EnvConfigError, match="world_digest"):
        spawn.SpawnSampler(s.distance_fn, (s.lo, s.lo + 1.0), (s.lo, s.lo + 1.0), 0.2, 0.01, 0.2, [], "free", tmp_path)
    assert not any(tmp_path.iterdir())


def _zip_fields(whole):
    """Offsets of the first member's local header and central directory record in a pool file's bytes."""
    import io
    import zipfile

    local = zipfile.ZipFile(io.BytesIO(whole)).infolist()[0].header_offset
    return local, whole.index(b"PK\x01\x02")


# (field, offset in its header, bit, what zipfile raises when np.load reads it, None: it reads on)
ZIP_FLIPS = [
    ("central", 6, 0x40, NotImplementedError),  # version needed to extract: 2.0 -> 8.4
    ("central", 8, 0x01, RuntimeError),  # general purpose flags: encrypted
    ("central", 10, 0x01, NotImplementedError),  # compression method: deflate -> deflate64
    ("central", 10, 0x04, OSError),  # compression method: deflate -> bzip2 (the stream is not bzip2)
    ("local", 4, 0x40, None),  # the local header's version, flags and method, which zipfile may ignore
    ("local", 6, 0x01, None),
    ("local", 6, 0x20, None),
    ("local", 8, 0x01, None),
]


def test_every_zip_field_flip_is_a_silent_recompute_of_the_same_pool(cache, queries, capfd):
    good = build()
    (path,) = cache.glob("*.npz")
    n_cells, n_points = good._spawner.reach.shape[0], compiled_scene("house", 64).spawn_points.shape[0]
    whole = path.read_bytes()
    local, central = _zip_fields(whole)
    capfd.readouterr()
    for where, offset, bit, raised in ZIP_FLIPS:
        damaged = bytearray(whole)
        damaged[(central if where == "central" else local) + offset] ^= bit
        path.write_bytes(bytes(damaged))
        if raised is not None:
            with pytest.raises(raised):
                with np.load(path) as f:
                    f["reach"]
            assert pool_file.read_pool(path, n_cells, n_points) is None
        queries[0] = 0
        env = build()  # no traceback, no message: computed again (or read, where the flip is harmless)
        assert queries[0] > 1000 or raised is None
        assert_same_pool(env._spawner, good._spawner)
        assert pool_file.read_pool(path, n_cells, n_points) is not None
    out = capfd.readouterr()
    assert out.out == "" and out.err == ""


def test_a_pool_with_wrong_cells_is_computed_again(cache, queries):
    good = build()
    (path,) = cache.glob("*.npz")
    reach = good._spawner.reach
    with np.load(path) as f:
        keep, digest = f["keep"], f["digest"]
    extra = reach.copy()
    extra[np.flatnonzero(~reach)[0]] = True  # a cell outside the pool
    wrong = {"one extra cell": extra, "one cell less": reach & (np.arange(reach.size) != np.flatnonzero(reach)[7])}
    wrong |= {"every cell on": np.ones_like(reach), "every cell off": np.zeros_like(reach)}
    for why, cells in wrong.items():
        np.savez_compressed(path.with_suffix(".tmp.npz"), reach=cells, keep=keep, digest=digest)  # the old digest
        path.with_suffix(".tmp.npz").replace(path)
        assert pool_file.read_pool(path, reach.size, keep.size) is None, why
        queries[0] = 0
        env = build()
        assert queries[0] > 1000, why
        assert_same_pool(env._spawner, good._spawner)
    # a pool of no cell is never read back, even with its own digest: computed again, not "no free space"
    pool_file.write_pool(path, np.zeros_like(reach), keep)
    assert pool_file.read_pool(path, reach.size, keep.size) is None
    assert_same_pool(build()._spawner, good._spawner)
    # a good pool of another world (or setting) copied under this one's name
    build(radius=0.25)  # its pool file: the same grid, other cells
    (other_path,) = set(cache.glob("*.npz")) - {path}
    path.write_bytes(other_path.read_bytes())
    with np.load(path) as f:
        assert f["reach"].shape == reach.shape  # the same grid: only the digest's key tells them apart
    assert pool_file.read_pool(path, reach.size, keep.size) is None
    assert_same_pool(build()._spawner, good._spawner)


def test_a_world_without_free_space_is_named_in_its_set(cache):
    """A set whose third world is solid everywhere: the spawn refusal names that world and its place."""
    from navi_nb.env.config import EnvConfigError
    from navi_nb.world.gmdag import World, encode_leaf
    from navi_nb.world.world_set import WorldSet

    box = compiled_scene("box", 32)
    solid = World(
        resolution=16,
        bmin=np.zeros(3, np.float32),
        voxel_size=0.5,
        nodes=np.array([encode_leaf(0, -1.0)], dtype=np.uint64),
        source="solid.gmdag",
    )
    world_set = WorldSet([box, box, solid])
    with pytest.raises(EnvConfigError, match=r"^world .*solid.* \(3 of 3\): spawn: no free space") as e:
        NavEnv(world_set, 3, Sensor(8, 2))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("member", ["reach", "keep", "digest"])
def test_a_pool_member_that_is_no_npy_array_is_computed_again(cache, queries, member):
    """np.load gives a member that does not start with the .npy magic (one cut to a few bytes, say) as
    bytes, not an array: such a file is not to be trusted, not an AttributeError."""
    import zipfile

    good = build()
    (path,) = cache.glob("*.npz")
    with zipfile.ZipFile(path) as zf:
        members = {name: zf.read(name) for name in zf.namelist()}
    members[f"{member}.npy"] = members[f"{member}.npy"][:4]
    with zipfile.ZipFile(path, "w") as zf:
        for name, body in members.items():
            zf.writestr(name, body)
    with np.load(path) as f:
        assert isinstance(f[member], bytes)
    n_points = np.asarray(good.world.spawn_points).reshape(-1, 3).shape[0]  # the listed points, kept or not
    assert pool_file.read_pool(path, good._spawner.reach.size, n_points) is None
    queries[0] = 0
    env = build()
    assert queries[0] > 1000
    assert_same_pool(env._spawner, good._spawner)
