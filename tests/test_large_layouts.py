"""The large scene families (bigmaze, rooms): sizes, long ways round, specs, cache keys and compiled size.

The connectivity, gap-rule, spawn-clearance and accuracy checks of every seeded family run on them in
test_scenes.py (they are in SEEDED_FAMILIES); here what is theirs alone, measured on the analytic field.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque

import numpy as np
import pytest

from navi_nb.world.scenes import GENERATOR_VERSION, LARGE_FAMILIES, SEEDED_FAMILIES, get_scene


def _plan(s, y, step=0.125, clear=0.05):
    """Free cells of the floor plan at height y (a grid of `step` over the interior) and their centres."""
    xs = np.arange(s.bounds_min[0] + step / 2, s.bounds_max[0], step)
    zs = np.arange(s.bounds_min[2] + step / 2, s.bounds_max[2], step)
    gx, gz = np.meshgrid(xs, zs, indexing="ij")
    pts = np.stack([gx.ravel(), np.full(gx.size, y), gz.ravel()], axis=1)
    return (s.evaluate(pts)[0] > clear).reshape(gx.shape), xs, zs


def test_large_families_are_registered_and_seeded():
    assert set(LARGE_FAMILIES) <= set(SEEDED_FAMILIES)
    assert GENERATOR_VERSION["bigmaze"] == 1 and GENERATOR_VERSION["rooms"] == 1
    for name in LARGE_FAMILIES:
        a, b = get_scene(name, 11), get_scene(name, 11)  # a seed is one layout, built again bit for bit
        assert np.array_equal(a.program, b.program) and np.array_equal(a.spawn_points, b.spawn_points)
        assert a.cube_side == 64.0 and a.resolution_scale == 4
        assert np.all(a.bounds_min - a.cube_min >= 8.0) and np.all(a.cube_min + a.cube_side - a.bounds_max >= 8.0)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5, 1_000_000])
def test_rooms_grid_and_room_sides_in_range(seed):
    """Above the lintels (2.125 m) only walls are solid: each room is one component there; its free span
    plus half a wall on each inner side is its side, 3-7 m; the grid is 2-6 x 2-6 rooms."""
    from scipy import ndimage

    s = get_scene("rooms", seed)
    free, xs, zs = _plan(s, 2.5)
    labels, n = ndimage.label(free)
    spans_x, spans_z = set(), set()
    for sl in ndimage.find_objects(labels):
        x0, x1 = xs[sl[0].start] - 0.0625, xs[sl[0].stop - 1] + 0.0625
        z0, z1 = zs[sl[1].start] - 0.0625, zs[sl[1].stop - 1] + 0.0625
        inner = 0.375  # half a wall, on a side that is not the outer wall
        side_x = (x1 - x0) + inner * (int(x0 > s.bounds_min[0] + 1e-6) + int(x1 < s.bounds_max[0] - 1e-6))
        side_z = (z1 - z0) + inner * (int(z0 > s.bounds_min[2] + 1e-6) + int(z1 < s.bounds_max[2] - 1e-6))
        assert 3.0 - 1e-6 <= side_x <= 7.0 + 1e-6 and 3.0 - 1e-6 <= side_z <= 7.0 + 1e-6, (seed, side_x, side_z)
        spans_x.add(round(x0, 3))
        spans_z.add(round(z0, 3))
    nx, nz = len(spans_x), len(spans_z)
    assert 2 <= nx <= 6 and 2 <= nz <= 6 and n == nx * nz, (seed, nx, nz, n)


def test_rooms_vary_over_seeds():
    grids = set()
    for seed in range(12):
        s = get_scene("rooms", seed)
        grids.add(tuple(np.round(s.bounds_max - s.bounds_min, 3)))
    assert len(grids) >= 10


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 1_000_000])
def test_bigmaze_cells_and_size_in_range(seed):
    """Spawn points sit at every cell's centre (and in the openings): exactly one cell size of 2, 2.25 or
    2.5 m puts a spawn point at each centre of a grid filling the interior; 8-16 cells a side, up to 40 m."""
    s = get_scene("bigmaze", seed)
    sp = {(round(float(p[0]), 4), round(float(p[2]), 4)) for p in s.spawn_points}
    ext = s.bounds_max - s.bounds_min
    assert 16.0 <= ext[0] <= 40.0 and 16.0 <= ext[2] <= 40.0
    fits = []
    for cell in (2.0, 2.25, 2.5):
        nx, nz = ext[0] / cell, ext[2] / cell
        if abs(nx - round(nx)) > 1e-9 or abs(nz - round(nz)) > 1e-9:
            continue
        nx, nz = round(nx), round(nz)
        centres = {
            (round(s.bounds_min[0] + (i + 0.5) * cell, 4), round(s.bounds_min[2] + (k + 0.5) * cell, 4))
            for i in range(nx)
            for k in range(nz)
        }
        if centres <= sp:
            fits.append((cell, nx, nz))
    assert len(fits) == 1, fits
    _, nx, nz = fits[0]
    assert 8 <= nx <= 16 and 8 <= nz <= 16


def _floor_paths(free, start):
    """Breadth-first 4-neighbour step counts from cell `start` over the free cells (-1: not reached)."""
    dist = np.full(free.shape, -1, np.int64)
    dist[start] = 0
    q = deque([start])
    while q:
        i, j = q.popleft()
        for a, b in ((i + 1, j), (i - 1, j), (i, j + 1), (i, j - 1)):
            if 0 <= a < free.shape[0] and 0 <= b < free.shape[1] and free[a, b] and dist[a, b] < 0:
                dist[a, b] = dist[i, j] + 1
                q.append((a, b))
    return dist


@pytest.mark.parametrize("name", LARGE_FAMILIES)
def test_long_ways_round(name):
    """The point of the large layouts: from a spawn point some other lies over twice the straight line
    away along the floor (4-neighbour steps of 0.25 m, room for a 0.3 m actor), and every one is reached."""
    step = 0.25
    for seed in (1, 2):
        s = get_scene(name, seed)
        free, xs, zs = _plan(s, 1.0, step, clear=0.3)
        sp = s.spawn_points.astype(np.float64)
        ij = np.stack([np.round((sp[:, 0] - xs[0]) / step), np.round((sp[:, 2] - zs[0]) / step)], 1).astype(int)
        dist = _floor_paths(free, tuple(ij[0]))
        steps = dist[ij[:, 0], ij[:, 1]]
        assert np.all(steps >= 0), (name, seed)
        straight = np.linalg.norm(sp[1:, [0, 2]] - sp[0, [0, 2]], axis=1)
        # 4-neighbour steps overstate a path by up to sqrt(2): a ratio over 2 * sqrt(2) is a real detour
        assert np.max(steps[1:] * step / straight) > 2.0 * np.sqrt(2.0), (name, seed)


def test_heldout_seeds_refused_in_training_specs():
    from navi_nb.world.scene_spec import SceneSpecError, check_training_items, parse_spec

    for name in LARGE_FAMILIES:
        items = parse_spec(f"{name}:999998-999999")
        assert [it.label for it in check_training_items(items)] == [f"{name}:999998", f"{name}:999999"]
        with pytest.raises(SceneSpecError, match=f"{name}:1000000 .*held out"):
            check_training_items(parse_spec(f"{name}:999999-1000000"))
        assert check_training_items(parse_spec(f"{name}:1000000"), allow_heldout=True)


def test_cache_entries_are_the_familys_own_at_the_scaled_resolution(tmp_path):
    from navi_nb.world.compiler import COMPILER_VERSION
    from navi_nb.world.world_cache import entry_path

    p = entry_path(tmp_path, "rooms", 7, 128)
    assert p == tmp_path / f"rooms-g1-c{COMPILER_VERSION}" / "r512" / "7.gmdag"
    assert entry_path(tmp_path, "bigmaze", 7, 64).parent.name == "r256"
    assert entry_path(tmp_path, "maze", 7, 128) == tmp_path / f"maze-g2-c{COMPILER_VERSION}" / "r128" / "7.gmdag"


def test_a_cached_heldout_large_world_is_known_by_content(tmp_path):
    """The cache keeps a large world under its file's resolution, where the held-out check looks for a copy of
    it: a copy of rooms:1000000 with its sidecar dropped is still that held-out world."""
    from navi_nb.world.gmdag import load_world
    from navi_nb.world.heldout import cached_twin
    from navi_nb.world.scene_spec import parse_spec
    from navi_nb.world.world_cache import compile_worlds

    (path,) = compile_worlds(parse_spec("rooms:1000000"), 16, tmp_path, jobs=1)
    assert path.parent.name == "r64"
    copy = tmp_path / "copy.gmdag"
    copy.write_bytes(path.read_bytes())
    world = load_world(copy)
    assert world.resolution == 64 and cached_twin(world, tmp_path) == "rooms:1000000"


def test_compiles_at_the_scaled_resolution_with_the_standard_voxel():
    from navi_nb.world.compiler import CompileError, compile_scene

    w = compile_scene("rooms", 16, 3)  # 64 voxels of 1 m over the 64 m cube: the standard cube's voxel at 16
    assert w.resolution == 64 and w.voxel_size == 1.0
    assert np.allclose(w.bmin, [-32.0, -30.5, -32.0])
    with pytest.raises(CompileError, match="'bigmaze' compiles at 4x the resolution.*4096 gives 16384"):
        compile_scene("bigmaze", 4096, 3)


def test_largest_seed_fits_the_memory_estimate():
    """The largest rooms world among seeds 0-2999 by interior (seed 438, 34 x 37.5 m) compiled at 128
    stays under the per-world estimate of a spec (check_ram)."""
    from navi_nb.world.compiler import compile_scene
    from navi_nb.world.scene_spec import BUILTIN_BYTES_AT_128, WORLD_OVERHEAD_BYTES, estimated_bytes, parse_spec

    w = compile_scene("rooms", 128, 438)
    assert w.resolution == 512 and abs(w.voxel_size - 0.125) < 1e-9
    (item,) = parse_spec("rooms:438")
    assert estimated_bytes(item, 128) == BUILTIN_BYTES_AT_128 + WORLD_OVERHEAD_BYTES
    assert len(w.to_bytes()) + len(json.dumps(w.sidecar)) < BUILTIN_BYTES_AT_128


def test_a_resolution_the_large_families_cannot_compile_is_refused_by_the_spec():
    from navi_nb.world.scene_spec import SceneSpecError, check_ram, estimated_bytes, parse_spec

    items = parse_spec("house:1,rooms:3")
    assert estimated_bytes(items[0], 8192) > 0 and estimated_bytes(items[1], 2048) > 0
    with pytest.raises(SceneSpecError, match="'rooms:3': rooms compiles .* up to 2048"):
        check_ram(items, 4096, available=2**60)


def _scene_digest(name, seeds):
    h = hashlib.sha256()
    for seed in seeds:
        s = get_scene(name, seed)
        for a in (s.program, s.spawn_points, s.bounds_min, s.bounds_max, s.cube_min):
            h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def test_existing_families_keep_their_layouts():
    """Programs, spawn points, bounds and cubes of maze and house seeds as the generators built them
    before the large families shared their pieces (digests taken from that code)."""
    seeds = list(range(40)) + [1_000_000, 1_000_001]
    assert _scene_digest("maze", seeds) == MAZE_DIGEST
    assert _scene_digest("house", seeds) == HOUSE_DIGEST


MAZE_DIGEST = "6b133becd5aae573"
HOUSE_DIGEST = "49152b2ebaff0186"
