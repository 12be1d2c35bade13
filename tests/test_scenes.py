"""Built-in scenes: the analytic oracles against independent answers."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import scene

from navi_nb.errors import NaviError
from navi_nb.world import sdf
from navi_nb.world.scenes import MIN_GAP, SCENES, SEEDED_FAMILIES, SceneError, get_scene

NAMES = list(SCENES)
# (family, seed) pairs the oracle tests run on: every family's seed 0 and two drawn layouts
CASES = [(n, 0) for n in NAMES] + [(n, s) for n in SEEDED_FAMILIES for s in (1, 1_000_003)]


def _room_distance(p, lo, hi):
    """Exact signed distance of the solid around an axis-aligned room (free inside)."""
    inside = np.all((p > lo) & (p < hi), axis=1)
    d_in = np.min(np.concatenate([p - lo, hi - p], axis=1), axis=1)
    d_out = np.linalg.norm(p - np.clip(p, lo, hi), axis=1)
    return np.where(inside, d_in, -d_out)


def test_box_scene_is_exact_room():
    s = scene("box")
    rng = np.random.default_rng(0)
    p = rng.uniform(s.bounds_min - 1.0, s.bounds_max + 1.0, size=(20000, 3))
    d, c = s.evaluate(p)
    np.testing.assert_allclose(d, _room_distance(p, s.bounds_min, s.bounds_max), atol=1e-12)
    # classes: nearest face decides floor / ceiling / wall
    mid = (s.bounds_min + s.bounds_max) / 2
    probe = np.array([[mid[0], 0.1, mid[2]], [mid[0], 2.9, mid[2]], [s.bounds_max[0] - 0.1, 1.5, mid[2]]])
    _, c = s.evaluate(probe)
    assert [s.class_names[k] for k in c] == ["floor", "ceiling", "wall"]


def _segment_distance(p, a, b):
    t = np.linspace(0.0, 1.0, 20001)
    pts = a[None, :] + t[:, None] * (b - a)[None, :]
    return np.array([np.min(np.linalg.norm(pts - q, axis=1)) for q in p])


def test_primitives_against_independent_formulas():
    rng = np.random.default_rng(1)
    p = rng.uniform(-2, 2, size=(300, 3))
    out_d = np.empty(len(p))
    out_c = np.empty(len(p), np.int32)

    def run(rows):
        sdf.evaluate_program(sdf.check_program(np.array(rows)), p, out_d, out_c)
        return out_d.copy()

    # sphere
    np.testing.assert_allclose(
        run([sdf.sphere([0.1, 0.2, -0.3], 0.7, 4)]), np.linalg.norm(p - [0.1, 0.2, -0.3], axis=1) - 0.7, atol=1e-12
    )
    # capsule: distance to a densely sampled segment
    a, b = np.array([-0.5, 0.0, 0.2]), np.array([0.6, 0.4, -0.1])
    np.testing.assert_allclose(run([sdf.capsule(a, b, 0.3, 4)]), _segment_distance(p, a, b) - 0.3, atol=2e-4)
    # rounded box = (distance to the shrunk box) - r, the shrunk box by clamping
    lo, hi, r = np.array([-0.8, -0.3, -0.5]), np.array([0.4, 0.9, 0.7]), 0.2
    core_lo, core_hi = lo + r, hi - r
    outside = np.linalg.norm(p - np.clip(p, core_lo, core_hi), axis=1)
    inside = -np.min(np.concatenate([p - core_lo, core_hi - p], axis=1), axis=1)
    ref = np.where(outside > 0, outside, inside) - r
    np.testing.assert_allclose(run([sdf.box_min_max(lo, hi, 4, rounding=r)]), ref, atol=1e-12)
    # vertical capped cylinder: radial and axial parts
    c, r, y0, y1 = np.array([0.3, 0.0, -0.2]), 0.5, -0.4, 0.8
    radial = np.hypot(p[:, 0] - c[0], p[:, 2] - c[2]) - r
    axial = np.maximum(y0 - p[:, 1], p[:, 1] - y1)
    ref = np.minimum(np.maximum(radial, axial), 0) + np.hypot(np.maximum(radial, 0), np.maximum(axial, 0))
    np.testing.assert_allclose(run([sdf.cylinder([c[0], y0, c[2]], [c[0], y1, c[2]], r, 5)]), ref, atol=1e-12)
    # operators on two spheres
    s1 = np.linalg.norm(p - [0.3, 0, 0], axis=1) - 0.6
    s2 = np.linalg.norm(p - [-0.3, 0, 0], axis=1) - 0.6
    rows = [sdf.sphere([0.3, 0, 0], 0.6, 1), sdf.sphere([-0.3, 0, 0], 0.6, 2)]
    np.testing.assert_allclose(run(rows + [sdf.op(sdf.OP_UNION)]), np.minimum(s1, s2), atol=1e-12)
    np.testing.assert_allclose(run(rows + [sdf.op(sdf.OP_INTERSECT)]), np.maximum(s1, s2), atol=1e-12)
    np.testing.assert_allclose(run(rows + [sdf.op(sdf.OP_SUBTRACT)]), np.maximum(s1, -s2), atol=1e-12)
    np.testing.assert_allclose(run(rows[:1] + [sdf.op(sdf.OP_COMPLEMENT)]), -s1, atol=1e-12)
    with pytest.raises(ValueError):
        sdf.check_program(np.array(rows))  # two values left on the stack


def _program_reference(program, p):
    """The program run row by row over all points at once in NumPy (the stack machine's rules written
    again): (distance, class) per point."""
    stack = []
    for row in program:
        code = int(row[0])
        if code == sdf.OP_COMPLEMENT:
            d, c = stack.pop()
            stack.append((-d, c))
        elif code >= sdf.OP_UNION:
            (b, bc), (a, ac) = stack.pop(), stack.pop()
            take = {sdf.OP_UNION: b < a, sdf.OP_INTERSECT: b > a, sdf.OP_SUBTRACT: -b > a}[code]
            stack.append((np.where(take, -b if code == sdf.OP_SUBTRACT else b, a), np.where(take, bc, ac)))
        else:
            prim = {sdf.OP_BOX: sdf._box, sdf.OP_SPHERE: sdf._sphere}.get(code)
            prim = prim or {sdf.OP_CYLINDER: sdf._cylinder, sdf.OP_CAPSULE: sdf._capsule}[code]
            out = [prim.py_func(x, y, z, row) for x, y, z in p]
            stack.append((np.array([o[0] for o in out]), np.array([o[1] for o in out])))
    ((d, c),) = stack
    return d, c.astype(np.int32)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pruned_evaluation_is_the_whole_program_bit_for_bit(seed):
    """evaluate_program runs, per run of nearby points, only the rows that can decide them; on random
    programs with every operator, at points in tight clusters (where it prunes most) and spread out, its
    distances and classes equal the whole program's, run row by row, to the last bit."""
    rng = np.random.default_rng(seed)

    def primitive():
        c = rng.uniform(-3, 3, 3)
        kind = rng.integers(4)
        if kind == 0:
            return [sdf.box(c, rng.uniform(0.2, 1.5, 3), int(rng.integers(1, 6)), rounding=0.1)]
        if kind == 1:
            return [sdf.sphere(c, rng.uniform(0.2, 1.2), int(rng.integers(1, 6)))]
        b = c + rng.normal(size=3)
        make = sdf.cylinder if kind == 2 else sdf.capsule
        return [make(c, b, rng.uniform(0.1, 0.6), int(rng.integers(1, 6)))]

    def tree(depth):
        if depth == 0 or rng.random() < 0.25:
            rows = primitive()
        else:
            code = [sdf.OP_UNION, sdf.OP_UNION, sdf.OP_INTERSECT, sdf.OP_SUBTRACT][rng.integers(4)]
            rows = tree(depth - 1) + tree(depth - 1) + [sdf.op(code)]
        return rows + [sdf.op(sdf.OP_COMPLEMENT)] if rng.random() < 0.1 else rows

    program = sdf.check_program(np.array(tree(5)))
    clusters = rng.uniform(-4, 4, (40, 1, 3)) + rng.normal(0, 0.3, (40, 64, 3))
    p = np.concatenate([clusters.reshape(-1, 3), rng.uniform(-4, 4, (256, 3))])
    d, c = np.empty(len(p)), np.empty(len(p), np.int32)
    sdf.evaluate_program(program, p, d, c)
    ref_d, ref_c = _program_reference(program, p)
    assert np.array_equal(d.view(np.int64), ref_d.view(np.int64))
    assert np.array_equal(c, ref_c)
    # at the edge of the rule: runs of PRUNE_RUN points on a segment across the plane where two spheres'
    # distances are equal, the segment's centre x0 swept past its half-length h (the operand that wins at
    # the segment's end is dropped only where it wins nowhere: a margin below 2 h gets these wrong)
    two = sdf.check_program(np.array([sdf.sphere([-2, 0, 0], 1, 1), sdf.sphere([2, 0, 0], 1, 2), sdf.op(sdf.OP_UNION)]))
    h, n = 0.5, sdf.PRUNE_RUN
    p = np.zeros((64 * n, 3))
    p[:, 0] = (np.linspace(0.5 * h, 1.5 * h, 64)[:, None] + np.linspace(-h, h, n)[None, :]).reshape(-1)
    d, c = np.empty(len(p)), np.empty(len(p), np.int32)
    sdf.evaluate_program(two, p, d, c)
    ref_d, ref_c = _program_reference(two, p)
    assert np.array_equal(d.view(np.int64), ref_d.view(np.int64))
    assert np.array_equal(c, ref_c)
    # the clusters are pruned: a run of 64 of them keeps fewer rows than the program has
    rows, sd, first = np.empty(len(program), np.int64), np.empty(sdf.STACK), np.empty(sdf.STACK, np.int64)
    q = clusters[0]
    lo, hi = q.min(axis=0), q.max(axis=0)
    kept = sdf.prune_rows(program, *((lo + hi) / 2), float(np.linalg.norm(hi - lo) / 2), rows, sd, first)
    assert kept < len(program)


def test_raycast_box_room_is_analytic():
    s = scene("box")
    rng = np.random.default_rng(2)
    o = rng.uniform(s.bounds_min + 0.5, s.bounds_max - 0.5, size=(500, 3))
    v = rng.normal(size=(500, 3))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    # exit distance of a ray from inside a box: the nearest plane crossing
    with np.errstate(divide="ignore"):
        t_hi = np.where(v > 0, (s.bounds_max - o) / v, np.inf)
        t_lo = np.where(v < 0, (s.bounds_min - o) / v, np.inf)
    ref = np.minimum(t_hi, t_lo).min(axis=1)
    depth = s.raycast(o, v, 100.0)
    np.testing.assert_allclose(depth, ref, atol=1e-5)
    assert np.all(s.raycast(o, v, 0.25) == 0.25)  # misses report max_distance


@pytest.mark.parametrize("name,seed", CASES)
def test_raycast_hits_the_first_surface(name, seed):
    s = scene(name, seed)
    rng = np.random.default_rng(3)
    o = s.spawn_points[rng.integers(len(s.spawn_points), size=200)].astype(np.float64)
    v = rng.normal(size=(200, 3))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    depth = s.raycast(o, v, 50.0)
    assert np.all(depth < 50.0)  # closed worlds: every ray hits
    hit = o + depth[:, None] * v
    d, _ = s.evaluate(hit)
    assert np.all(np.abs(d) < 1e-5)
    # nothing solid before the hit: the field stays positive along the way
    for f in np.linspace(0.0, 0.999, 40):
        d, _ = s.evaluate(o + (f * depth)[:, None] * v)
        assert np.all(d > -1e-9)


@pytest.mark.parametrize("name,seed", CASES)
def test_spawn_points_free_with_clearance(name, seed):
    s = scene(name, seed)
    sp = s.spawn_points
    assert sp.dtype == np.float32 and sp.ndim == 2 and sp.shape[1] == 3 and len(sp) >= 20
    d, _ = s.evaluate(sp)
    assert np.all(d >= 0.5 - 1e-6)
    assert np.all((sp >= s.bounds_min) & (sp <= s.bounds_max))
    assert s.class_names[0] == "none" and "floor" in s.class_names and "wall" in s.class_names


@pytest.mark.parametrize("name,seed", CASES)
def test_free_space_is_connected_for_an_actor(name, seed):
    """Every spawn point reaches every other one for a 0.25 m sphere at 1 m height
    (doorways wide enough): flood fill over a 5 cm grid of the analytic field."""
    s = scene(name, seed)
    step = 0.05
    xs = np.arange(s.bounds_min[0], s.bounds_max[0], step)
    zs = np.arange(s.bounds_min[2], s.bounds_max[2], step)
    gx, gz = np.meshgrid(xs, zs, indexing="ij")
    pts = np.stack([gx.ravel(), np.full(gx.size, 1.0), gz.ravel()], axis=1)
    free = (s.evaluate(pts)[0] >= 0.25).reshape(gx.shape)
    from scipy import ndimage

    labels, _ = ndimage.label(free)
    ix = np.round((s.spawn_points[:, 0] - xs[0]) / step).astype(int)
    iz = np.round((s.spawn_points[:, 2] - zs[0]) / step).astype(int)
    assert len(set(labels[ix, iz].tolist())) == 1 and labels[ix[0], iz[0]] != 0


def test_seed_zero_is_the_classic_layout():
    """Seed 0 of house, maze, pillars and box builds the layouts of generator version 1
    (hashes of their programs and spawn points as built before seeds drew layouts)."""
    import hashlib

    want = {
        "house": ("82c5601bff651e69", "603a41bb962d314e"),
        "maze": ("1db407ac591857e9", "f7c835f5abfd62e0"),
        "pillars": ("e1566c4bb4c33546", "8743a6dd625bffd6"),
        "box": ("993a1d480782c5f8", "cde8c228be6a3367"),
    }
    for name, (prog, spawns) in want.items():
        s = get_scene(name, 0)
        assert hashlib.sha256(s.program.tobytes()).hexdigest()[:16] == prog, name
        assert hashlib.sha256(s.spawn_points.tobytes()).hexdigest()[:16] == spawns, name


@pytest.mark.parametrize("name", SEEDED_FAMILIES)
def test_seeds_change_layouts(name):
    layouts = [get_scene(name, seed) for seed in range(8)]
    assert np.array_equal(get_scene(name, 5).program, layouts[5].program)  # a seed is a layout
    programs = {s.program.tobytes() for s in layouts}
    assert len(programs) == 8
    # variety beyond positions: the floor size and the number of solids change too
    sizes = {tuple(s.bounds_max - s.bounds_min) for s in layouts}
    solids = {len(s.program) for s in layouts}
    assert len(sizes) >= 3 and len(solids) >= 3, (sizes, solids)


def test_house_seeds_vary_rooms_and_doors():
    """Rooms (the free floor's components with every doorway closed) number 3 to 7."""
    from scipy import ndimage

    counts = set()
    for seed in range(1, 9):
        s = get_scene("house", seed)
        step = 0.125
        xs = np.arange(s.bounds_min[0] + step / 2, s.bounds_max[0], step)
        zs = np.arange(s.bounds_min[2] + step / 2, s.bounds_max[2], step)
        gx, gz = np.meshgrid(xs, zs, indexing="ij")
        # above the lintels (2.125 m) only walls are solid: rooms are the components there
        pts = np.stack([gx.ravel(), np.full(gx.size, 2.5), gz.ravel()], axis=1)
        free = (s.evaluate(pts)[0] > 0.05).reshape(gx.shape)
        counts.add(ndimage.label(free)[1])
    assert min(counts) >= 3 and max(counts) <= 7 and len(counts) >= 3, counts


def _spawn_grid_connected(s, radius=0.2, margin=0.0625, cell=0.2):
    """The env's reachability grid (navi_nb/env/spawn.py at resolution 128 defaults), rebuilt
    here over the analytic field: the spawn points' free cells are one 6-connected
    component, and every spawn point lies next to it."""
    from scipy import ndimage

    lo, hi = s.bounds_min + radius, s.bounds_max - radius
    dims = np.maximum(1, np.floor((hi - lo) / cell).astype(int))
    axes = [lo[a] + (np.arange(dims[a]) + 0.5) * cell for a in range(3)]
    centres = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
    free = (s.evaluate(centres)[0] >= radius + margin + 0.5 * cell).reshape(dims)
    labels, _ = ndimage.label(free)
    c = np.floor((s.spawn_points.astype(np.float64) - lo) / cell).astype(int)
    at = labels[c[:, 0], c[:, 1], c[:, 2]]
    main = set(at[at > 0].tolist())
    if len(main) != 1:
        return False
    for p in c[at == 0]:  # a spawn point whose own cell centre lacks clearance
        near = labels[max(p[0] - 1, 0) : p[0] + 2, max(p[1] - 1, 0) : p[1] + 2, max(p[2] - 1, 0) : p[2] + 2]
        if not main & set(near.ravel().tolist()):
            return False
    return True


@pytest.mark.parametrize("name", SEEDED_FAMILIES)
def test_every_layout_is_connected(name):
    seeds = list(range(24)) + [1_000_000, 1_000_001, 2**40 + 7]
    bad = [seed for seed in seeds if not _spawn_grid_connected(get_scene(name, seed))]
    assert not bad, f"{name}: disconnected seeds {bad}"


@pytest.mark.parametrize("name", SEEDED_FAMILIES)
def test_layouts_keep_the_gap_rule(name):
    """Independent of the generator's bookkeeping: on the floor plan at 1.5 m, free
    space with MIN_GAP / 2 of clearance is one component for every seed."""
    from scipy import ndimage

    for seed in (1, 2, 3, 4):
        s = get_scene(name, seed)
        step = 0.0625
        xs = np.arange(s.bounds_min[0] + step / 2, s.bounds_max[0], step)
        zs = np.arange(s.bounds_min[2] + step / 2, s.bounds_max[2], step)
        gx, gz = np.meshgrid(xs, zs, indexing="ij")
        pts = np.stack([gx.ravel(), np.full(gx.size, 1.5), gz.ravel()], axis=1)
        d = s.evaluate(pts)[0].reshape(gx.shape)
        n = ndimage.label(d >= 0.45)[1]
        assert n == 1, (name, seed, n)


def test_the_env_pool_is_one_component():
    """SpawnSampler itself, fed the analytic field: its pool of spawn and goal cells
    is one 6-connected component for drawn layouts."""
    from scipy import ndimage

    from navi_nb.env.spawn import SpawnSampler

    for name in SEEDED_FAMILIES:
        for seed in (2, 9):
            s = get_scene(name, seed)
            cube_lo = s.cube_min
            cube_hi = s.cube_min + s.cube_side
            sampler = SpawnSampler(
                lambda p, s=s: s.evaluate(p)[0],
                (cube_lo, cube_hi),
                (s.bounds_min, s.bounds_max),
                0.2,
                0.0625,
                0.2,
                s.spawn_points,
                "free",
            )
            idx = np.round((sampler.pool - sampler.lo) / sampler.cell - 0.5).astype(int)
            grid = np.zeros(tuple(sampler.dims), dtype=bool)
            grid[idx[:, 0], idx[:, 1], idx[:, 2]] = True
            assert ndimage.label(grid)[1] == 1, (name, seed)
            assert len(sampler.pool) > 0.3 * np.prod(sampler.dims) / 3  # a real share of the floor


@pytest.mark.parametrize("name", SEEDED_FAMILIES)
def test_drawn_layout_compiles_accurately(name):
    from test_compiler import check_accuracy

    from navi_nb.world.compiler import compile_scene

    s = scene(name, 3)
    world = compile_scene(s, 128)
    check_accuracy(world, lambda p: s.evaluate(p)[0], s.bounds_min - 1.0, s.bounds_max + 1.0)


def test_bad_scene_arguments():
    with pytest.raises(SceneError, match="unknown scene 'attic'"):
        get_scene("attic")
    with pytest.raises(NaviError, match="seed"):
        get_scene("maze", -1)
    with pytest.raises(NaviError, match="seed"):
        get_scene("maze", "x")
    assert MIN_GAP / 2 >= 0.45  # the clearance the connectivity tests ask for
