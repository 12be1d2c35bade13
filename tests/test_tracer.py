"""The CPU tracer against analytic answers, its contract, and its input checks."""

import math
import sys

import numba
import numpy as np
import pytest
from sense_helpers import dag_from_grid, ray_sphere, slab_world, sphere_world

from navi_nb.errors import NaviError
from navi_nb.sense import backend as backend_mod
from navi_nb.sense.backend import BackendError, resolve_backend
from navi_nb.sense.sensor import SenseError, Sensor
from navi_nb.sense.tracer import Tracer, trace
from navi_nb.world import gmdag

VS = 0.25  # voxel size of the hand-built worlds (metres)
R = 32  # their resolution: a cube of 8 m


def cube_exit(origins, dirs, side):
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(dirs > 0, (side - origins) / dirs, np.where(dirs < 0, -origins / dirs, np.inf))
    return t.min(axis=-1)


@pytest.fixture(scope="module")
def sphere():
    world, centre = sphere_world(R, radius=2.2, voxel_size=VS)
    return world, centre, 2.2


def test_sphere_against_exact_ray_casts(sphere):
    world, centre, radius = sphere
    rng = np.random.default_rng(3)
    pts = rng.uniform(0.3, R * VS - 0.3, (400, 3))
    origins = pts[np.linalg.norm(pts - centre, axis=1) > radius + 0.3][:24].astype(np.float32)
    yaws = rng.uniform(-math.pi, math.pi, len(origins)).astype(np.float32)
    sensor = Sensor(64, 16)
    max_d = 12.0
    depth, sem, hit = trace(world, origins, yaws, sensor, max_d)
    dirs = sensor.world_directions(yaws).astype(np.float64)
    o = np.broadcast_to(origins[:, None, None, :].astype(np.float64), dirs.shape)
    exact = ray_sphere(o, dirs, centre, radius)
    exact = np.where((exact <= max_d) & (exact <= cube_exit(o, dirs, R * VS)), exact, np.inf)
    exact_hit = np.isfinite(exact)
    err = np.abs(np.where(exact_hit, exact, max_d) - depth)
    within = err <= 1.5 * VS  # one voxel plus epsilon (half a voxel)
    # every reported hit lies within a voxel and a half of the true surface
    p = o + depth[..., None] * dirs
    surf = np.abs(np.linalg.norm(p - centre, axis=-1) - radius)
    assert np.all(surf[hit] <= 1.5 * VS)
    # a ray grazing the sphere within epsilon may report that graze: it lies on the surface
    assert (within | hit).mean() >= 0.995, within.mean()
    assert within.mean() >= 0.98, within.mean()  # the rest: grazes within epsilon, checked above
    # flags: a missed sphere is rare; extra hits are the grazes above (on the surface)
    assert np.mean(~hit & exact_hit) <= 0.005
    assert np.all(sem[hit] == 1) and np.all(sem[~hit] == 0)
    # misses report max_distance exactly
    assert np.all(depth[~hit] == np.float32(max_d))


@pytest.mark.parametrize("thickness_voxels", [2.0, 2.5, 3.0])
def test_no_ray_passes_a_wall_two_voxels_thick(thickness_voxels):
    lo = 3.1
    hi = lo + thickness_voxels * VS
    world = slab_world(R, lo=lo, hi=hi, axis=0, voxel_size=VS)
    rng = np.random.default_rng(int(thickness_voxels * 10))
    origins = rng.uniform(0.2, R * VS - 0.2, (32, 3)).astype(np.float32)
    origins[:, 0] = rng.uniform(0.2, lo - 0.3, 32)
    yaws = rng.uniform(-math.pi, math.pi, 32).astype(np.float32)
    sensor = Sensor(96, 24)
    depth, sem, hit = trace(world, origins, yaws, sensor, 20.0)
    dirs = sensor.world_directions(yaws).astype(np.float64)
    o = np.broadcast_to(origins[:, None, None, :].astype(np.float64), dirs.shape)
    end = o + depth[..., None] * dirs
    # no hit ever lies past the wall's near face by more than a voxel
    assert np.all(end[hit][:, 0] <= lo + VS + 1e-4)
    with np.errstate(divide="ignore"):
        exact = np.where(dirs[..., 0] > 0, (lo - o[..., 0]) / dirs[..., 0], np.inf)
    exact = np.where(exact <= cube_exit(o, dirs, R * VS), exact, np.inf)
    # a ray that reaches the wall more than a voxel before leaving the cube hits it
    clear = np.isfinite(exact) & (exact + 2 * VS < cube_exit(o, dirs, R * VS))
    assert np.all(hit[clear])
    # and a ray that misses leaves the cube (through another face) at most a voxel past the wall
    assert np.all(hit | ~clear)
    err = np.abs(depth - exact)[clear]
    assert np.mean(err <= 1.5 * VS) >= 0.995
    assert np.all(sem[hit] == 3)


def test_a_long_newton_step_does_not_tunnel_to_a_later_crossing():
    # a field that only varies along x: a shallow fall from 0.42 (slope -0.07 per voxel), a first zero
    # crossing at x = 11.82, solid to 15.2, a second crossing there. Newton's first step from the
    # march's candidate is about 5 voxels long and lands near the second crossing: the hit must be the
    # first one (no solid passed), within a voxel.
    xc = np.arange(32) + 0.5
    g = np.where(xc <= 9.5, 0.42 + (9.5 - xc), 0.1 + (xc - 15.5))
    for x, v in {10.5: 0.35, 11.5: 0.28, 12.5: -0.6, 13.5: -1.0, 14.5: -0.1}.items():
        g[int(x)] = v
    dist = np.broadcast_to(g[:, None, None], (32, 32, 32)).copy()
    world = dag_from_grid(dist, (np.abs(dist) < 2).astype(np.int64))
    sensor = Sensor(4, 1, fov_up=0.0, fov_down=0.0)  # level rays; the second one looks along +x at yaw 0
    depth, _sem, hit = trace(world, np.array([[2.5, 16.5, 16.5]], np.float32), np.zeros(1, np.float32), sensor, 30.0)
    first = 11.5 + 0.28 / (0.28 + 0.6) - 2.5  # the first crossing of the interpolated field, from the origin
    assert hit.reshape(-1)[1]
    assert abs(depth.reshape(-1)[1] - first) <= 1.0


def test_unsigned_dialect_and_infinite_zero_quirk():
    # another writer: unsigned distances, semantic flags only near the surface
    world = slab_world(R, lo=4.0, hi=5.0, axis=2, voxel_size=VS, unsigned=True)
    assert not np.any(gmdag.decode_leaf(world.nodes[gmdag.is_leaf(world.nodes)])[0] < 0)
    origins = np.array([[4.0, 4.0, 1.0], [2.0, 3.0, 0.5]], np.float32)
    yaws = np.array([math.pi, math.pi], np.float32)  # facing +z
    sensor = Sensor(1, 1)
    depth, sem, hit = trace(world, origins, yaws, sensor, 10.0)
    assert np.all(hit)
    np.testing.assert_allclose(depth[:, 0, 0], [3.0, 3.5], atol=1.5 * VS)
    # the +inf-for-zero quirk: a near-surface leaf holding +inf is a surface at distance 0
    d = np.full((2, 2, 2), 0.5)  # free cells: the flagged face is half a voxel away
    s = np.zeros((2, 2, 2), np.int64)
    s[1, :, :] = 7
    quirk = dag_from_grid(d, s, voxel_size=1.0, prune=False, collapse=False)
    nodes = quirk.nodes.copy()
    leaves = np.nonzero(gmdag.is_leaf(nodes))[0]
    for i in leaves:
        _, sm = gmdag.decode_leaf(nodes[i : i + 1])
        if sm[0] == 7:
            nodes[i] = gmdag.LEAF_BIT | (np.uint64(7) << np.uint64(16)) | np.uint64(0x7C00)  # +inf
    q = gmdag.World(resolution=2, bmin=np.zeros(3, np.float32), voxel_size=1.0, nodes=nodes)
    depth, sem, hit = trace(
        q, np.array([[0.5, 0.5, 0.5]], np.float32), np.array([math.pi / 2], np.float32), Sensor(1, 1), 5.0, refine=0
    )
    assert hit[0, 0, 0] and sem[0, 0, 0] == 7
    assert abs(depth[0, 0, 0] - 0.5) <= 1e-3  # the first point inside the flagged cell


def test_contract_inside_solid_outside_cube_and_limits(sphere):
    world, centre, radius = sphere
    sensor = Sensor(16, 5)
    inside = centre.astype(np.float32)[None]
    depth, sem, hit = trace(world, inside, np.zeros(1, np.float32), sensor, 5.0)
    assert np.all(depth == 0.0) and np.all(hit) and np.all(sem == 1)
    # outside the cube: looking away misses; looking at the sphere enters the cube and hits it
    outside = np.array([[-3.0, centre[1], centre[2]]], np.float32)
    away = np.array([-math.pi / 2], np.float32)  # faces -x
    toward = np.array([math.pi / 2], np.float32)  # faces +x
    one = Sensor(1, 1)
    d, s, h = trace(world, outside, away, one, 50.0)
    assert not h.any() and d[0, 0, 0] == 50.0 and s[0, 0, 0] == 0
    d, s, h = trace(world, outside, toward, one, 50.0)
    assert h.all() and abs(d[0, 0, 0] - (3.0 + centre[0] - radius)) <= 1.5 * VS
    # max_distance short of the surface: a miss at exactly max_distance
    d, s, h = trace(world, outside, toward, one, 3.0)
    assert not h.any() and d[0, 0, 0] == np.float32(3.0)
    exact = 3.0 + centre[0] - radius
    d, s, h = trace(world, outside, toward, one, exact - 2 * VS)
    assert not h.any()
    d, s, h = trace(world, outside, toward, one, exact + 2 * VS)
    assert h.all()
    # a huge (finite) max_distance is fine; misses report it, still finite
    d, s, h = trace(world, outside, away, one, 1e30)
    assert d[0, 0, 0] == np.float32(1e30) and np.isfinite(d).all()
    # zero-length step budget: no lookups, every ray a miss
    d, s, h = trace(world, inside, np.zeros(1, np.float32), sensor, 5.0, max_steps=0)
    assert not h.any() and np.all(d == 5.0) and np.all(s == 0)
    # a budget too small to reach the surface: a miss, never a partial depth
    d, s, h = trace(world, outside, toward, one, 50.0, max_steps=1)
    assert not h.any() and d[0, 0, 0] == 50.0


def test_random_poses_depth_always_in_range(sphere):
    world, centre, radius = sphere
    rng = np.random.default_rng(11)
    origins = rng.uniform(-4, 12, (64, 3)).astype(np.float32)  # inside, outside, in solid
    yaws = rng.uniform(-10, 10, 64).astype(np.float32)
    for max_d in (1e-3, 0.7, 4.0, 1e6):
        d, s, h = trace(world, origins, yaws, Sensor(16, 8), max_d)
        assert np.all(np.isfinite(d)) and np.all(d >= 0) and np.all(d <= np.float32(max_d))
        assert np.all(s[~h] == 0) and np.all(d[~h] == np.float32(max_d))


def test_scenes_against_analytic_raycasts():
    """Acceptance 1: every built-in scene at 128 against the exact analytic ray cast."""
    from navi_nb.world import compiler, scenes

    sensor = Sensor(64, 16)
    max_d = 20.0
    for name in scenes.SCENES:
        scene = scenes.get_scene(name)
        world = compiler.compile_scene(scene, 128)
        vs = world.voxel_size
        rng = np.random.default_rng(5)
        pick = rng.choice(len(scene.spawn_points), min(16, len(scene.spawn_points)), replace=False)
        origins = scene.spawn_points[pick].astype(np.float32)
        yaws = rng.uniform(-math.pi, math.pi, len(origins)).astype(np.float32)
        depth, sem, hit = trace(world, origins, yaws, sensor, max_d)
        dirs = sensor.world_directions(yaws)
        o = np.broadcast_to(origins[:, None, None, :], dirs.shape)
        exact = scene.raycast(o.reshape(-1, 3), dirs.reshape(-1, 3), max_d).reshape(depth.shape)
        err = np.abs(exact - depth)
        within = err <= 1.5 * vs
        # a ray may graze a surface within epsilon: the hit it reports must lie on a surface
        ends = (o + depth[..., None] * dirs).reshape(-1, 3)
        on_surface = (np.abs(scene.evaluate(ends)[0]) <= 1.5 * vs).reshape(depth.shape)
        ok = within | (hit & on_surface)
        assert ok.mean() >= 0.995, (name, within.mean(), ok.mean())
        assert (hit == (exact < max_d)).mean() >= 0.995, name
        # no ray passes through a wall two voxels thick: a ray that ends beyond the exact first
        # surface may only have clipped solid less than a voxel deep (a chord under two voxels)
        late = np.argwhere(depth > exact + 1.5 * vs)
        for a, i, j in late:
            ts = np.arange(exact[a, i, j], depth[a, i, j], 0.25 * vs)
            inside = scene.evaluate(origins[a] + ts[:, None] * dirs[a, i, j])[0]
            assert inside.min() > -vs, (name, (a, i, j), exact[a, i, j], depth[a, i, j])


def test_same_bits_at_one_and_two_threads(sphere):
    world, centre, radius = sphere
    rng = np.random.default_rng(2)
    origins = rng.uniform(0, 8, (8, 3)).astype(np.float32)
    yaws = rng.uniform(-3, 3, 8).astype(np.float32)
    sensor = Sensor(32, 8)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        a = trace(world, origins, yaws, sensor, 9.0)
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        b = trace(world, origins, yaws, sensor, 9.0)
    finally:
        numba.set_num_threads(before)
    for x, y in zip(a, b):
        assert np.array_equal(x, y)


def test_tracer_reuses_buffers_and_matches_trace(sphere):
    world, centre, radius = sphere
    sensor = Sensor(16, 4)
    tracer = Tracer(world, sensor, 6.0)
    rng = np.random.default_rng(4)
    o1 = rng.uniform(0, 8, (3, 3)).astype(np.float32)
    y1 = rng.uniform(-3, 3, 3).astype(np.float32)
    r1 = tracer.trace(o1, y1)
    ref = trace(world, o1, y1, sensor, 6.0)
    for x, y in zip(r1, ref):
        assert np.array_equal(x, y)
    o2 = rng.uniform(0, 8, (5, 3))  # float64 accepted; grows the buffers
    r2 = tracer.trace(o2, rng.uniform(-3, 3, 5))
    assert r2[0].shape == (5, 16, 4)
    r3 = tracer.trace(o2[:2], np.zeros(2))
    assert np.shares_memory(r3[0], r2[0])  # the same buffers, reused
    out = tuple(np.empty((2, 16, 4), dt) for dt in (np.float32, np.uint16, np.bool_))
    r4 = tracer.trace(o2[:2], np.zeros(2), out=out)
    assert r4[0] is out[0] and np.array_equal(out[0], r3[0])
    fixed = Tracer(world, sensor, 6.0, max_actors=2)
    with pytest.raises(SenseError, match="max_actors"):
        fixed.trace(o2, np.zeros(5))
    empty = tracer.trace(np.zeros((0, 3), np.float32), np.zeros(0, np.float32))
    assert empty[0].shape == (0, 16, 4)


def _sentinel_out(n, sensor):
    shape = (n,) + sensor.shape
    return (np.full(shape, 7.0, np.float32), np.full(shape, 9, np.uint16), np.ones(shape, np.bool_))


@pytest.mark.parametrize(
    "case",
    [
        "origins_shape",
        "yaws_shape",
        "origins_int",
        "yaws_object",
        "nan_origin",
        "inf_yaw",
        "max_zero",
        "max_negative",
        "max_nan",
        "max_inf",
        "max_bool",
        "epsilon",
        "steps_negative",
        "steps_float",
        "refine",
        "sensor",
        "world",
        "out_shape",
        "out_dtype",
        "out_tuple",
        "backend_name",
    ],
)
def test_bad_input_raises_before_writing(sphere, case):
    world, centre, radius = sphere
    sensor = Sensor(8, 4)
    origins = np.full((2, 3), 4.0, np.float32)
    origins[:, 0] = 0.5
    yaws = np.zeros(2, np.float32)
    out = _sentinel_out(2, sensor)
    kwargs = dict(world=world, origins=origins, yaws=yaws, sensor=sensor, max_distance=5.0, out=out)
    if case == "origins_shape":
        kwargs["origins"] = origins[:, :2]
    elif case == "yaws_shape":
        kwargs["yaws"] = np.zeros(3, np.float32)
    elif case == "origins_int":
        kwargs["origins"] = origins.astype(np.int32)
    elif case == "yaws_object":
        kwargs["yaws"] = np.array([0.0, None], dtype=object)
    elif case == "nan_origin":
        kwargs["origins"] = origins.copy()
        kwargs["origins"][1, 2] = np.nan
    elif case == "inf_yaw":
        kwargs["yaws"] = np.array([0.0, np.inf], np.float32)
    elif case == "max_zero":
        kwargs["max_distance"] = 0.0
    elif case == "max_negative":
        kwargs["max_distance"] = -1.0
    elif case == "max_nan":
        kwargs["max_distance"] = float("nan")
    elif case == "max_inf":
        kwargs["max_distance"] = float("inf")
    elif case == "max_bool":
        kwargs["max_distance"] = True
    elif case == "epsilon":
        kwargs["epsilon"] = 0.0
    elif case == "steps_negative":
        kwargs["max_steps"] = -1
    elif case == "steps_float":
        kwargs["max_steps"] = 10.5
    elif case == "refine":
        kwargs["refine"] = -2
    elif case == "sensor":
        kwargs["sensor"] = (8, 4)
    elif case == "world":
        kwargs["world"] = world.nodes
    elif case == "out_shape":
        kwargs["out"] = _sentinel_out(3, sensor)
        out = kwargs["out"]
    elif case == "out_dtype":
        kwargs["out"] = (out[0].astype(np.float64), out[1], out[2])
        out = kwargs["out"]
    elif case == "out_tuple":
        kwargs["out"] = out[0]
    elif case == "backend_name":
        kwargs["backend"] = "gpu"
    snapshot = [np.copy(a) for a in (out if isinstance(out, tuple) else (out,))]
    with pytest.raises(NaviError) as info:
        trace(**kwargs)
    assert str(info.value)  # a message naming what was wrong
    for before, after in zip(snapshot, out if isinstance(out, tuple) else (out,)):
        assert np.array_equal(before, after)


def test_corrupt_world_rejected_before_tracing():
    bad = gmdag.World(
        resolution=2,
        bmin=np.zeros(3, np.float32),
        voxel_size=1.0,
        nodes=np.array([gmdag.encode_inner(1, 5)], np.uint64),
    )  # slots past the end
    with pytest.raises(gmdag.GmdagError):
        trace(bad, np.zeros((1, 3), np.float32), np.zeros(1, np.float32), Sensor(2, 2), 1.0)


def test_unusable_cuda_backend_names_what_is_missing(monkeypatch):
    monkeypatch.setattr(backend_mod, "simulator_enabled", lambda: False)
    monkeypatch.setitem(sys.modules, "cupy", None)  # as if CuPy were not installed
    with pytest.raises(BackendError, match="CuPy") as info:
        resolve_backend("cuda")
    assert isinstance(info.value, NaviError) and 'pip install -e ".[cuda]"' in str(info.value)
    assert resolve_backend("auto") == "cpu"
    world, _ = sphere_world(4, radius=1.0)
    out = _sentinel_out(1, Sensor(2, 2))
    with pytest.raises(BackendError):
        trace(world, np.zeros((1, 3), np.float32), np.zeros(1, np.float32), Sensor(2, 2), 1.0, backend="cuda", out=out)
    assert np.all(out[0] == 7.0)
    with pytest.raises(BackendError, match="unknown backend"):
        resolve_backend("tpu")


def test_the_image_the_cpu_tracer_writes_is_the_observations_encoding_of_its_own_rays(sphere):
    """``Tracer.trace(image=...)``: each actor's rays, as ``log1p(depth) / log1p(max)`` (and semantic / (C - 1))
    in row ``dest[a]``, the other rows and the columns after the rays untouched; the same at 1 and 2 threads."""
    world, centre, _ = sphere
    sensor = Sensor(16, 4)
    R = sensor.n_rays
    rng = np.random.default_rng(4)
    origins = (np.asarray(centre, np.float32) + rng.uniform(-3.0, 3.0, (5, 3))).astype(np.float32)
    yaws = rng.uniform(-np.pi, np.pi, 5).astype(np.float32)
    tracer = Tracer(world, sensor, 6.0)
    depth, sem, _ = (b.copy() for b in tracer.trace(origins, yaws))
    inv_log_max, sem_scale = 1.0 / math.log1p(6.0), 1.0 / 3.0
    dest = np.array([6, 0, 3, 9, 1], np.int64)
    for with_semantic in (False, True):
        for threads in (1, min(2, numba.config.NUMBA_NUM_THREADS)):
            out = np.full((10, 2 * R + 3), -7.0, np.float32)
            old = numba.get_num_threads()
            numba.set_num_threads(threads)
            try:
                d2, s2, _ = tracer.trace(origins, yaws, image=(dest, out, inv_log_max, sem_scale, with_semantic))
            finally:
                numba.set_num_threads(old)
            assert np.array_equal(d2, depth) and np.array_equal(s2, sem)
            want = (np.log1p(depth.reshape(5, R).astype(np.float64)) * inv_log_max).astype(np.float32)
            np.testing.assert_allclose(out[dest, :R], want, rtol=1e-6, atol=0)  # (NumPy's log1p, not the kernel's)
            if with_semantic:
                np.testing.assert_array_equal(out[dest, R : 2 * R], (sem.reshape(5, R) * sem_scale).astype(np.float32))
            else:
                assert (out[dest, R:] == -7.0).all()
            assert (out[dest, 2 * R :] == -7.0).all()
            others = np.setdiff1d(np.arange(10), dest)
            assert (out[others] == -7.0).all()


@pytest.mark.parametrize("case", ["not_a_tuple", "dest_dtype", "dest_shape", "dest_row", "out_dtype", "narrow"])
def test_a_bad_image_is_refused_before_any_ray_is_traced(sphere, case):
    world, centre, _ = sphere
    sensor = Sensor(8, 4)
    origins = np.tile(np.asarray(centre, np.float32), (2, 1))
    yaws = np.zeros(2, np.float32)
    tracer = Tracer(world, sensor, 5.0, max_actors=2)
    tracer._buffers[0][...] = -1.0  # what the last trace left: a refused call must not overwrite it
    dest, out = np.array([0, 1], np.int64), np.zeros((2, 40), np.float32)
    image = {
        "not_a_tuple": dest,
        "dest_dtype": (dest.astype(np.int32), out, 1.0, 1.0, False),
        "dest_shape": (dest[:1], out, 1.0, 1.0, False),
        "dest_row": (np.array([0, 2], np.int64), out, 1.0, 1.0, False),
        "out_dtype": (dest, out.astype(np.float64), 1.0, 1.0, False),
        "narrow": (dest, out, 1.0, 1.0, True),  # 40 columns; depth and semantic need 64
    }[case]
    with pytest.raises(SenseError, match="image"):
        tracer.trace(origins, yaws, image=image)
    assert (tracer._buffers[0] == -1.0).all() and not out.any()
