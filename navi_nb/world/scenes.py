"""Built-in procedural scenes: analytic CSG programs with surface classes.

Every scene is a closed world: the solid is ``complement(interior box)``
(floor, walls and ceiling, infinitely thick) united with interior walls and
obstacles. Free space is the positive side and its distance is exact there
(a union of exact fields is exact outside all of them); inside solid the
value is a bound whose sign is exact. Units are metres, y is up, floors at
y = 0, ceilings at y = 3.

``get_scene(name, seed=0)`` returns a :class:`Scene`; ``SCENES`` maps names
to one-line descriptions. The families in ``SEEDED_FAMILIES`` are seeded
generators: the seed draws the floor size, the rooms, doorways, furniture or
obstacles, and every layout is connected for an actor needing up to
``MIN_GAP / 2`` of clearance (see "seeded layouts" below). Seed 0 of house,
maze and pillars is the classic hand-made layout. Scenes are the oracles of the tests: ``evaluate``
gives the analytic field, ``raycast`` sphere traces it to 1e-6 m.

The large families (``LARGE_FAMILIES``: ``bigmaze``, ``rooms``, up to about 40 m across) live in
``navi_nb/world/large_layouts.py``; both are built from the shared pieces of ``scene_pieces.py``. They compile in a cube
``RESOLUTION_SCALE`` times as wide at that many times the resolution, so a world of any family has the
same voxel size at the same resolution (0.125 m at 128).
"""

from __future__ import annotations

import numpy as np

from navi_nb.world import large_layouts
from navi_nb.world.scene_pieces import (  # noqa: F401 (the pieces are this module's names too: callers import them here)
    CEILING,
    CLASS_NAMES,
    CUBE_MIN,
    CUBE_SIDE,
    DEFAULT_SCENE,
    DOOR_CLEARANCE,
    DOOR_WIDTH,
    EMBED,
    FLOOR,
    GENERATOR_VERSION,
    HEIGHT,
    LARGE_FAMILIES,
    MAX_INTERIOR,
    MIN_GAP,
    NONE,
    OBSTACLE,
    PILLAR,
    RESOLUTION_SCALE,
    SCENES,
    SEEDED_FAMILIES,
    SPAWN_CLEARANCE,
    SPAWN_HEIGHT,
    WALL,
    WALL_THICKNESS,
    Footprints,
    Scene,
    SceneError,
    finish_scene,
    furniture_piece,
    grid_spawn_points,
    maze_rows,
    resolution_scale,
    room_shell,
    scatter_furniture,
    scene_program,
    snap,
    uniform_grid,
    wall_boxes,
)
from navi_nb.world.sdf import box_min_max, capsule, cylinder, sphere

# --------------------------------------------------------------------------
# the scenes
# --------------------------------------------------------------------------


def _box(seed):
    lo, hi = [-4.0, 0.0, -3.0], [4.0, HEIGHT, 3.0]
    return finish_scene("box", [room_shell(lo, hi)], lo, hi, seed)


# --------------------------------------------------------------------------
# the scenes
# --------------------------------------------------------------------------


def _pillars(seed):
    if seed == 0:  # the classic hall
        lo, hi = [-6.0, 0.0, -5.0], [6.0, HEIGHT, 5.0]
        rows = [room_shell(lo, hi)]
        for x in (-3.0, 0.0, 3.0):
            for z in (-2.5, 0.0, 2.5):
                rows.append(cylinder([x, -EMBED, z], [x, HEIGHT + EMBED, z], 0.375, PILLAR))
        return finish_scene("pillars", rows, lo, hi, seed)
    rng = np.random.default_rng(seed)
    w = uniform_grid(rng, 9.0, MAX_INTERIOR, 0.5)
    d = uniform_grid(rng, 8.0, 13.0, 0.5)
    lo, hi = [-w / 2, 0.0, -d / 2], [w / 2, HEIGHT, d / 2]
    rows = [room_shell(lo, hi)]
    feet = Footprints(lo, hi)
    shape = int(rng.integers(3))  # 0 round, 1 square, 2 both
    r = uniform_grid(rng, 0.375, 0.625, 0.125)
    nx, nz = int(rng.integers(2, 5)), int(rng.integers(2, 5))
    for i in range(nx):
        for k in range(nz):
            if rng.random() < 0.15:  # a missing column
                continue
            x = snap(lo[0] + w * (i + 0.5) / nx + rng.uniform(-0.375, 0.375))
            z = snap(lo[2] + d * (k + 0.5) / nz + rng.uniform(-0.375, 0.375))
            flo, fhi = np.array([x - r, z - r]), np.array([x + r, z + r])
            if not feet.fits(flo, fhi):
                continue
            feet.add(flo, fhi)
            square = shape == 1 or (shape == 2 and rng.random() < 0.5)
            if square:
                rows.append(box_min_max([x - r, -EMBED, z - r], [x + r, HEIGHT + EMBED, z + r], PILLAR, rounding=0.125))
            else:
                rows.append(cylinder([x, -EMBED, z], [x, HEIGHT + EMBED, z], r, PILLAR))
    return finish_scene("pillars", rows, lo, hi, seed)


def _house_classic(seed):
    # west wing (x < -2): two rooms split at z = 0; hall -2 < x < 2.5; east wing split at z = 1
    lo, hi = [-7.5, 0.0, -5.5], [7.5, HEIGHT, 5.5]
    e, w = EMBED, 1.25
    rows = [room_shell(lo, hi)]
    rows += wall_boxes("z", -2.0, -5.5 - e, 5.5 + e, doors=[(-3.0, w), (2.5, w)])
    rows += wall_boxes("x", 0.0, -7.5 - e, -2.0, doors=[(-5.0, w)])
    rows += wall_boxes("z", 2.5, -5.5 - e, 5.5 + e, doors=[(-2.0, w), (3.0, w)])
    rows += wall_boxes("x", 1.0, 2.5, 7.5 + e, doors=[(5.0, w)])
    rows += wall_boxes("x", -2.75, 2.5, 4.5)  # a wall stub in the south-east room
    # furniture: edges rounded by one voxel at 128, nothing thinner than 3 voxels
    rows.append(box_min_max([-6.75, -e, -4.75], [-5.0, 0.75, -3.75], OBSTACLE, rounding=0.125))  # table
    rows.append(box_min_max([-6.75, -e, 2.0], [-6.0, 0.875, 4.25], OBSTACLE, rounding=0.125))  # sofa
    rows.append(cylinder([-4.0, -e, 4.5], [-4.0, 0.5, 4.5], 0.375, OBSTACLE))  # stool
    rows.append(cylinder([0.0, -e, 4.5], [0.0, 1.0, 4.5], 0.375, OBSTACLE))  # barrel
    rows.append(capsule([4.5, 1.125, -4.5], [6.5, 1.125, -4.5], 0.375, OBSTACLE))  # rail
    rows.append(box_min_max([4.5, -e, 2.75], [6.75, 0.5, 4.75], OBSTACLE, rounding=0.125))  # bed
    rows.append(cylinder([-0.25, -e, -3.0], [-0.25, HEIGHT + e, -3.0], 0.375, PILLAR))
    return finish_scene("house", rows, lo, hi, seed)


MIN_ROOM = 2.75  # metres between wall centre lines (or a centre line and the outer face)


def _house(seed):
    """Rooms from a random binary partition of a random floor, one or two doors per partition wall."""
    if seed == 0:
        return _house_classic(seed)
    rng = np.random.default_rng(seed)
    for _ in range(100):  # a partition whose junctions leave some wall no doorway is drawn again
        layout = _house_layout(rng)
        if layout is not None:
            rows, lo, hi = layout
            return finish_scene("house", rows, lo, hi, seed)
    raise SceneError(f"house seed {seed}: no layout with a doorway in every wall")


def _house_layout(rng):
    w = uniform_grid(rng, 10.0, MAX_INTERIOR, 0.5)
    d = uniform_grid(rng, 8.0, 13.0, 0.5)
    lo, hi = [-w / 2, 0.0, -d / 2], [w / 2, HEIGHT, d / 2]
    target = int(rng.integers(3, 8))
    leaves = [(lo[0], hi[0], lo[2], hi[2])]  # rooms: x0, x1, z0, z1 (wall centre lines or outer faces)
    walls = []  # (axis, at, run_lo, run_hi)
    while len(leaves) < target:
        # split the largest room that can be split, across its longer side
        areas = [(x1 - x0) * (z1 - z0) for x0, x1, z0, z1 in leaves]
        order = sorted(range(len(leaves)), key=lambda k: -areas[k])
        for i in order:
            x0, x1, z0, z1 = leaves[i]
            axes = [a for a, span in (("z", x1 - x0), ("x", z1 - z0)) if span >= 2 * MIN_ROOM]
            if axes:
                break
        else:
            break
        # "z": a wall along z at some x (splits the x span); prefer the longer span
        axis = axes[0] if len(axes) == 1 else ("z" if x1 - x0 >= z1 - z0 else "x")
        if len(axes) == 2 and rng.random() < 0.25:
            axis = "x" if axis == "z" else "z"
        a, b = (x0, x1) if axis == "z" else (z0, z1)
        at = uniform_grid(rng, a + MIN_ROOM, b - MIN_ROOM, 0.25)
        leaves.pop(i)
        if axis == "z":
            walls.append(("z", at, z0, z1))
            leaves += [(x0, at, z0, z1), (at, x1, z0, z1)]
        else:
            walls.append(("x", at, x0, x1))
            leaves += [(x0, x1, z0, at), (x0, x1, at, z1)]
    outer = {"z": (lo[2], hi[2]), "x": (lo[0], hi[0])}  # run limits per wall axis
    rows = [room_shell(lo, hi)]
    t = WALL_THICKNESS
    for axis, at, a, b in walls:
        # wall faces along this wall's run: the outer faces at its ends, or the
        # faces of the walls it ends on, and of every wall ending on it
        # (coordinates are copied, never computed, so they compare exactly)
        junctions = [at2 for ax2, at2, a2, b2 in walls if ax2 != axis and a <= at2 <= b and at in (a2, b2)]
        faces = []
        for end in (a, b):
            faces.append((end, 0.0) if end in outer[axis] else (end, t / 2))
        faces += [(j, t / 2) for j in junctions]
        half = DOOR_WIDTH / 2 + DOOR_CLEARANCE
        allowed = [c for c in np.arange(a, b + 1e-9, 0.125) if all(abs(c - f) >= half + ft - 1e-9 for f, ft in faces)]
        n_doors = 2 if (b - a >= 6.0 and rng.random() < 0.35) else 1
        doors = []
        for _ in range(n_doors):
            free = [c for c in allowed if all(abs(c - dc) >= DOOR_WIDTH + MIN_GAP for dc, _ in doors)]
            if not free:
                break
            doors.append((float(free[int(rng.integers(len(free)))]), DOOR_WIDTH))
        if not doors:  # junctions from both sides leave no stretch wide enough
            return None
        ra = a - EMBED if a in outer[axis] else a
        rb = b + EMBED if b in outer[axis] else b
        rows += wall_boxes(axis, at, ra, rb, doors=sorted(doors), thickness=t)
    # furniture: a few pieces per room, clear of walls, doors and each other
    for x0, x1, z0, z1 in leaves:
        cx0 = x0 + (0.0 if x0 == lo[0] else t / 2)
        cx1 = x1 - (0.0 if x1 == hi[0] else t / 2)
        cz0 = z0 + (0.0 if z0 == lo[2] else t / 2)
        cz1 = z1 - (0.0 if z1 == hi[2] else t / 2)
        feet = Footprints([cx0, 0.0, cz0], [cx1, 0.0, cz1])
        scatter_furniture(rng, rows, feet, int(rng.integers(0, 4)))
    return rows, lo, hi


def _maze(seed, n=5, cell=2.5, thickness=0.75):
    rng = np.random.default_rng(seed)
    nx = nz = n
    loops = 0.0
    if seed != 0:  # seed 0 keeps the classic 5 x 5 maze of 2.5 m cells
        shape = np.random.default_rng([seed, 1])  # its own stream: the walls below draw as before
        cell = uniform_grid(shape, 2.0, 3.0, 0.25)
        most = int(MAX_INTERIOR // cell)
        nx, nz = int(shape.integers(3, most + 1)), int(shape.integers(3, most + 1))
        loops = float(shape.uniform(0.0, 0.3))  # the share of remaining inner walls opened too
    rows, lo, hi = maze_rows(rng, nx, nz, cell, loops, thickness)
    return finish_scene("maze", rows, lo, hi, seed, spacing=cell / 2)


def _clutter(seed):
    """Random obstacles (boxes, floating spheres, posts, beams) in a random room, MIN_GAP apart."""
    rng = np.random.default_rng(seed)
    if seed == 0:
        w = d = 12.0
    else:
        w = uniform_grid(rng, 8.0, 14.0, 0.5)
        d = uniform_grid(rng, 8.0, 14.0, 0.5)
    lo, hi = [-w / 2, 0.0, -d / 2], [w / 2, HEIGHT, d / 2]
    rows = [room_shell(lo, hi)]
    feet = Footprints(lo, hi)
    count = round(w * d / 6.0)  # a dense packing under the gap rule
    for _ in range(2000):
        if len(feet.rects) >= count:
            break
        r = rng.uniform(0.375, 0.6)
        x = snap(rng.uniform(lo[0], hi[0]))
        z = snap(rng.uniform(lo[2], hi[2]))
        kind = int(rng.integers(4))
        if kind == 0:  # a box
            h = rng.uniform(0.75, 2.0)
            hz = max(0.8 * r, 0.375)
            flo, fhi = [x - r, z - hz], [x + r, z + hz]
            row = box_min_max([x - r, -EMBED, z - hz], [x + r, h, z + hz], OBSTACLE, rounding=0.125)
        elif kind == 1:  # a floating sphere
            flo, fhi = [x - r, z - r], [x + r, z + r]
            row = sphere([x, rng.uniform(r + 0.75, HEIGHT - 0.75 - r), z], r, OBSTACLE)
        elif kind == 2:  # a post, sometimes to the ceiling
            top = rng.uniform(0.75, HEIGHT - 0.75) if rng.random() < 0.6 else HEIGHT + EMBED
            flo, fhi = [x - r, z - r], [x + r, z + r]
            row = cylinder([x, -EMBED, z], [x, top, z], r, OBSTACLE)
        else:  # a tilted beam
            a = rng.uniform(0, np.pi)
            dx, dz = np.cos(a) * r * 1.3, np.sin(a) * r * 1.3
            y = rng.uniform(1.125, 1.875)
            flo = [x - abs(dx) - 0.375, z - abs(dz) - 0.375]
            fhi = [x + abs(dx) + 0.375, z + abs(dz) + 0.375]
            row = capsule([x - dx, y, z - dz], [x + dx, y, z + dz], 0.375, OBSTACLE)
        flo, fhi = np.asarray(flo), np.asarray(fhi)
        if feet.fits(flo, fhi):
            feet.add(flo, fhi)
            rows.append(row)
    return finish_scene("clutter", rows, lo, hi, seed, spacing=0.75)


def make_scene(
    name,
    room_min,
    room_max,
    solids=(),
    *,
    description="a custom scene",
    class_names=None,
    spawn_spacing=1.0,
    cube_min=None,
    cube_side=None,
) -> Scene:
    """A closed custom scene: the room ``[room_min, room_max]`` (metres) with
    ``solids`` inside, each a primitive row from :mod:`navi_nb.world.sdf`
    (``box``, ``sphere``, ``cylinder``, ``capsule``) or a list of rows forming
    one CSG expression. The room's floor, walls and ceiling get the classes
    floor, wall and ceiling; give your solids classes from ``CLASS_NAMES`` (or
    your own ``class_names``). The world cube defaults to one fitted around
    the room by the compiler; spawn points are found on a grid.
    """
    lo = np.asarray(room_min, dtype=np.float64)
    hi = np.asarray(room_max, dtype=np.float64)
    if lo.shape != (3,) or hi.shape != (3,) or not np.all(np.isfinite(lo)) or not np.all(hi > lo):
        raise SceneError(f"make_scene {name!r}: room_min {lo.tolist()} must be below room_max {hi.tolist()}")
    try:
        program = scene_program([room_shell(lo, hi)] + list(solids))
    except ValueError as exc:
        raise SceneError(f"make_scene {name!r}: {exc}") from None
    s = Scene(
        name=name,
        description=description,
        program=program,
        bounds_min=lo,
        bounds_max=hi,
        class_names=list(class_names or CLASS_NAMES),
        cube_min=None if cube_min is None else np.asarray(cube_min, dtype=np.float64),
        cube_side=cube_side,
    )
    s.spawn_points = grid_spawn_points(s, spawn_spacing)
    if len(s.spawn_points) == 0:
        raise SceneError(f"make_scene {name!r}: no free spawn point with {SPAWN_CLEARANCE} m of clearance")
    return s


_BUILDERS = {"box": _box, "pillars": _pillars, "house": _house, "maze": _maze, "clutter": _clutter}


def get_scene(name=DEFAULT_SCENE, seed=0) -> Scene:
    """The built-in scene `name` (see SCENES); `seed` (an integer >= 0) shapes the
    layout of the SEEDED_FAMILIES and is ignored by the others."""
    if name not in SCENES:
        raise SceneError(f"unknown scene {name!r}; built-in scenes: {', '.join(SCENES)}")
    try:
        seed = int(seed)
    except (TypeError, ValueError):
        raise SceneError(f"scene seed must be an integer, got {seed!r}") from None
    if seed < 0:
        raise SceneError(f"scene seed must be >= 0, got {seed}")
    if name in LARGE_FAMILIES:
        return large_layouts.BUILDERS[name](seed)
    return _BUILDERS[name](seed)
