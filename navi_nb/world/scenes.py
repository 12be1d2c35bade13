"""Built-in procedural scenes: analytic CSG programs with surface classes.

Every scene is a closed world: the solid is ``complement(interior box)``
(floor, walls and ceiling, infinitely thick) united with interior walls and
obstacles. Free space is the positive side and its distance is exact there
(a union of exact fields is exact outside all of them); inside solid the
value is a bound whose sign is exact. Units are metres, y is up, floors at
y = 0, ceilings at y = 3.

``get_scene(name, seed=0)`` returns a :class:`Scene`; ``SCENES`` maps names
to one-line descriptions. Scenes are the oracles of the tests: ``evaluate``
gives the analytic field, ``raycast`` sphere traces it to 1e-6 m.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from navi_nb.errors import NaviError
from navi_nb.world import sdf
from navi_nb.world.sdf import OP_COMPLEMENT, box_min_max, capsule, cylinder, op, sphere

CLASS_NAMES = ["none", "floor", "wall", "ceiling", "obstacle", "pillar"]
NONE, FLOOR, WALL, CEILING, OBSTACLE, PILLAR = range(6)
HEIGHT = 3.0
SPAWN_HEIGHT = 1.0  # spawn points sit 1 m above the floor
SPAWN_CLEARANCE = 0.5  # metres of free space around every spawn point
EMBED = 1.0  # metres solids reach into floor, ceiling and outer walls
CUBE_SIDE = 16.0  # every built-in scene compiles in this cube: 0.125 m voxels at 128
CUBE_MIN = (-8.0, HEIGHT / 2 - 8.0, -8.0)
# Geometry sits on a 0.125 m grid; walls and obstacles are >= 0.75 m thick,
# round parts >= 0.375 m in radius and free gaps >= 0.75 m wide, so no thin
# ridge of the field (where interpolation errs most) lies within two voxels
# of a surface at resolution 128.

SCENES = {
    "box": "an empty 8 x 6 m room",
    "pillars": "a 12 x 10 m hall with a 3 x 3 grid of round columns",
    "house": "five rooms and a hall joined by doorways, with furniture (the default)",
    "maze": "a 5 x 5 maze of 2.5 m cells (seeded layout)",
    "clutter": "a 12 x 12 m room with 30 seeded random obstacles",
}
DEFAULT_SCENE = "house"


class SceneError(NaviError, ValueError):
    """Unknown scene name or bad scene arguments."""


@dataclass
class Scene:
    """An analytic scene: CSG program, classes, spawn points, region of interest."""

    name: str
    description: str
    program: np.ndarray  # (P, sdf.ROW) float64
    bounds_min: np.ndarray  # (3,) float64, region of interest (the interior)
    bounds_max: np.ndarray
    class_names: list = field(default_factory=lambda: list(CLASS_NAMES))
    spawn_points: np.ndarray = None  # (S, 3) float32
    seed: int = 0
    # the world cube to compile into: minimum corner and side (metres). Built-in
    # scenes use CUBE_MIN / CUBE_SIDE so their faces sit on voxel boundaries at
    # every resolution >= 128 (equal surfaces then give equal subtrees).
    cube_min: np.ndarray = None
    cube_side: float = None

    def evaluate(self, points):
        """(sdf float64 (N,), class int32 (N,)) at points (N,3); metres, negative in solid."""
        p = np.ascontiguousarray(np.asarray(points, dtype=np.float64).reshape(-1, 3))
        d = np.empty(p.shape[0], dtype=np.float64)
        c = np.empty(p.shape[0], dtype=np.int32)
        if p.shape[0]:
            sdf.evaluate_program(self.program, p, d, c)
        return d, c

    def raycast(self, origins, dirs, max_distance):
        """Exact depth (float64, metres) along unit `dirs` from `origins` (N,3).

        Sphere traces the analytic field until it is below 1e-6 m. A miss
        (nothing within max_distance) returns max_distance; a ray that starts
        inside solid returns 0.
        """
        o = np.ascontiguousarray(np.asarray(origins, dtype=np.float64).reshape(-1, 3))
        v = np.asarray(dirs, dtype=np.float64).reshape(-1, 3)
        v = np.ascontiguousarray(v / np.linalg.norm(v, axis=1, keepdims=True))
        if o.shape != v.shape:
            raise SceneError(f"raycast: origins {o.shape} and dirs {v.shape} differ")
        out = np.empty(o.shape[0], dtype=np.float64)
        if o.shape[0]:
            sdf.raycast_program(self.program, o, v, float(max_distance), 1e-6, 100000, out)
        return out

    def sidecar(self) -> dict:
        return {"scene": self.name, "seed": int(self.seed), "class_names": list(self.class_names),
                "spawn_points": np.asarray(self.spawn_points, dtype=np.float64).round(4).tolist(),
                "bounds_of_interest": [list(map(float, self.bounds_min)), list(map(float, self.bounds_max))]}


# --------------------------------------------------------------------------
# building blocks
# --------------------------------------------------------------------------

def _room(lo, hi):
    """Rows for the solid around a room: complement of its box, faces classed."""
    return [box_min_max(lo, hi, WALL, bottom=FLOOR, top=CEILING), op(OP_COMPLEMENT)]


def _wall(axis, at, lo, hi, doors=(), thickness=0.75, door_height=2.125):
    """Solid boxes of a floor-to-ceiling wall with doorway gaps.

    axis "x": the wall runs along x at z = at from x = lo to hi; "z": along z
    at x = at. doors: (centre, width) along the run. Boxes reach EMBED into
    the floor and ceiling (and runs should reach EMBED into the outer walls),
    so no faces are coplanar and the creases a union leaves inside solid stay
    farther than a few voxels from the surface.
    """
    t = thickness / 2
    y0, y1 = -EMBED, HEIGHT + EMBED
    cuts = sorted((c - w / 2, c + w / 2) for c, w in doors)
    spans, start = [], lo
    for a, b in cuts:
        spans.append((start, a))
        spans.append(("lintel", a, b))
        start = b
    spans.append((start, hi))
    rows = []
    for s in spans:
        if s[0] == "lintel":
            a, b, ya = s[1] - t, s[2] + t, door_height  # overlap the posts: no seam inside solid
            if ya >= y1:
                continue
        else:
            a, b, ya = s[0], s[1], y0
            if b - a < 1e-9:
                continue
        if axis == "x":
            rows.append(box_min_max([a, ya, at - t], [b, y1, at + t], WALL))
        else:
            rows.append(box_min_max([at - t, ya, a], [at + t, y1, b], WALL))
    return rows


def _program(rows):
    """Union every solid (shell first) into one program."""
    prog = [rows[0][0], rows[0][1]] if isinstance(rows[0], list) else [rows[0]]
    for r in rows[1:]:
        if isinstance(r, list):
            prog.extend(r)
        else:
            prog.append(r)
        prog.append(op(sdf.OP_UNION))
    return sdf.check_program(np.array(prog))


def _spawn_points(scene, spacing=1.0, rng=None, count=None):
    """Free points at SPAWN_HEIGHT on a grid with >= SPAWN_CLEARANCE of room."""
    lo, hi = scene.bounds_min, scene.bounds_max
    xs = np.arange(lo[0] + spacing / 2, hi[0], spacing / 2)
    zs = np.arange(lo[2] + spacing / 2, hi[2], spacing / 2)
    gx, gz = np.meshgrid(xs, zs, indexing="ij")
    pts = np.stack([gx.ravel(), np.full(gx.size, SPAWN_HEIGHT), gz.ravel()], axis=1)
    d, _ = scene.evaluate(pts)
    pts = pts[d >= SPAWN_CLEARANCE]
    if rng is not None and count is not None and len(pts) > count:
        pts = pts[np.sort(rng.choice(len(pts), count, replace=False))]
    return pts.astype(np.float32)


def _finish(name, rows, lo, hi, seed, spacing=1.0):
    s = Scene(name=name, description=SCENES[name], program=_program(rows),
              bounds_min=np.asarray(lo, dtype=np.float64), bounds_max=np.asarray(hi, dtype=np.float64),
              seed=seed, cube_min=np.array(CUBE_MIN, dtype=np.float64), cube_side=CUBE_SIDE)
    s.spawn_points = _spawn_points(s, spacing)
    if len(s.spawn_points) == 0:
        raise SceneError(f"scene {name!r} (seed {seed}) has no free spawn point")
    return s


# --------------------------------------------------------------------------
# the scenes
# --------------------------------------------------------------------------

def _box(seed):
    lo, hi = [-4.0, 0.0, -3.0], [4.0, HEIGHT, 3.0]
    return _finish("box", [_room(lo, hi)], lo, hi, seed)


def _pillars(seed):
    lo, hi = [-6.0, 0.0, -5.0], [6.0, HEIGHT, 5.0]
    rows = [_room(lo, hi)]
    for x in (-3.0, 0.0, 3.0):
        for z in (-2.5, 0.0, 2.5):
            rows.append(cylinder([x, -EMBED, z], [x, HEIGHT + EMBED, z], 0.375, PILLAR))
    return _finish("pillars", rows, lo, hi, seed)


def _house(seed):
    # west wing (x < -2): two rooms split at z = 0; hall -2 < x < 2.5; east wing split at z = 1
    lo, hi = [-7.5, 0.0, -5.5], [7.5, HEIGHT, 5.5]
    e, w = EMBED, 1.25
    rows = [_room(lo, hi)]
    rows += _wall("z", -2.0, -5.5 - e, 5.5 + e, doors=[(-3.0, w), (2.5, w)])
    rows += _wall("x", 0.0, -7.5 - e, -2.0, doors=[(-5.0, w)])
    rows += _wall("z", 2.5, -5.5 - e, 5.5 + e, doors=[(-2.0, w), (3.0, w)])
    rows += _wall("x", 1.0, 2.5, 7.5 + e, doors=[(5.0, w)])
    rows += _wall("x", -2.75, 2.5, 4.5)  # a wall stub in the south-east room
    # furniture: edges rounded by one voxel at 128, nothing thinner than 3 voxels
    rows.append(box_min_max([-6.75, -e, -4.75], [-5.0, 0.75, -3.75], OBSTACLE, rounding=0.125))  # table
    rows.append(box_min_max([-6.75, -e, 2.0], [-6.0, 0.875, 4.25], OBSTACLE, rounding=0.125))  # sofa
    rows.append(cylinder([-4.0, -e, 4.5], [-4.0, 0.5, 4.5], 0.375, OBSTACLE))  # stool
    rows.append(cylinder([0.0, -e, 4.5], [0.0, 1.0, 4.5], 0.375, OBSTACLE))  # barrel
    rows.append(capsule([4.5, 1.125, -4.5], [6.5, 1.125, -4.5], 0.375, OBSTACLE))  # rail
    rows.append(box_min_max([4.5, -e, 2.75], [6.75, 0.5, 4.75], OBSTACLE, rounding=0.125))  # bed
    rows.append(cylinder([-0.25, -e, -3.0], [-0.25, HEIGHT + e, -3.0], 0.375, PILLAR))
    return _finish("house", rows, lo, hi, seed)


def _maze(seed, n=5, cell=2.5, thickness=0.75):
    rng = np.random.default_rng(seed)
    size = n * cell
    lo, hi = [-size / 2, 0.0, -size / 2], [size / 2, HEIGHT, size / 2]
    # depth-first maze over n x n cells; `opened` holds the removed walls
    seen = np.zeros((n, n), dtype=bool)
    opened = set()
    stack = [(0, 0)]
    seen[0, 0] = True
    while stack:
        i, j = stack[-1]
        nbrs = [(i + di, j + dj) for di, dj in ((1, 0), (-1, 0), (0, 1), (0, -1))
                if 0 <= i + di < n and 0 <= j + dj < n and not seen[i + di, j + dj]]
        if not nbrs:
            stack.pop()
            continue
        a = nbrs[rng.integers(len(nbrs))]
        opened.add(frozenset([(i, j), a]))
        seen[a] = True
        stack.append(a)
    rows = [_room(lo, hi)]
    x0 = lo[0]
    gap = 1.25  # a removed wall leaves an opening this wide (posts stay)

    def ext(k):  # runs reach EMBED into the outer walls, thickness / 2 past inner posts
        return EMBED if k in (0, n) else thickness / 2

    for i in range(n):
        for j in range(n):
            # the wall on the +x side of cell (i, j), and the one on its +z side
            if i + 1 < n:
                at = x0 + (i + 1) * cell
                c = x0 + (j + 0.5) * cell
                doors = [(c, gap)] if frozenset([(i, j), (i + 1, j)]) in opened else []
                rows += _wall("z", at, c - cell / 2 - ext(j), c + cell / 2 + ext(j + 1),
                              doors=doors, thickness=thickness, door_height=HEIGHT + EMBED)
            if j + 1 < n:
                at = x0 + (j + 1) * cell
                c = x0 + (i + 0.5) * cell
                doors = [(c, gap)] if frozenset([(i, j), (i, j + 1)]) in opened else []
                rows += _wall("x", at, c - cell / 2 - ext(i), c + cell / 2 + ext(i + 1),
                              doors=doors, thickness=thickness, door_height=HEIGHT + EMBED)
    return _finish("maze", rows, lo, hi, seed, spacing=cell / 2)


def _clutter(seed, count=30):
    rng = np.random.default_rng(seed)
    lo, hi = [-6.0, 0.0, -6.0], [6.0, HEIGHT, 6.0]
    rows = [_room(lo, hi)]
    placed = []
    tries = 0
    while len(placed) < count and tries < 5000:
        tries += 1
        r = rng.uniform(0.375, 0.6)
        x, z = rng.uniform(-5.25 + 1.3 * r, 5.25 - 1.3 * r, size=2)
        if any((x - px) ** 2 + (z - pz) ** 2 < (1.3 * (r + pr) + 0.75) ** 2 for px, pz, pr in placed):
            continue
        placed.append((x, z, r))
        kind = rng.integers(4)
        if kind == 0:
            h = rng.uniform(0.75, 2.0)
            hz = max(0.8 * r, 0.375)
            rows.append(box_min_max([x - r, -EMBED, z - hz], [x + r, h, z + hz], OBSTACLE, rounding=0.125))
        elif kind == 1:
            rows.append(sphere([x, rng.uniform(r + 0.75, HEIGHT - 0.75 - r), z], r, OBSTACLE))
        elif kind == 2:
            top = rng.uniform(0.75, HEIGHT - 0.75) if rng.random() < 0.6 else HEIGHT + EMBED
            rows.append(cylinder([x, -EMBED, z], [x, top, z], r, OBSTACLE))
        else:
            a = rng.uniform(0, np.pi)
            dx, dz = np.cos(a) * r * 1.3, np.sin(a) * r * 1.3
            y = rng.uniform(1.125, 1.875)
            rows.append(capsule([x - dx, y, z - dz], [x + dx, y, z + dz], 0.375, OBSTACLE))
    return _finish("clutter", rows, lo, hi, seed, spacing=0.75)


def make_scene(name, room_min, room_max, solids=(), *, description="a custom scene",
               class_names=None, spawn_spacing=1.0, cube_min=None, cube_side=None) -> Scene:
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
        program = _program([_room(lo, hi)] + list(solids))
    except ValueError as exc:
        raise SceneError(f"make_scene {name!r}: {exc}") from None
    s = Scene(name=name, description=description, program=program, bounds_min=lo, bounds_max=hi,
              class_names=list(class_names or CLASS_NAMES),
              cube_min=None if cube_min is None else np.asarray(cube_min, dtype=np.float64),
              cube_side=cube_side)
    s.spawn_points = _spawn_points(s, spawn_spacing)
    if len(s.spawn_points) == 0:
        raise SceneError(f"make_scene {name!r}: no free spawn point with {SPAWN_CLEARANCE} m of clearance")
    return s


_BUILDERS = {"box": _box, "pillars": _pillars, "house": _house, "maze": _maze, "clutter": _clutter}


def get_scene(name=DEFAULT_SCENE, seed=0) -> Scene:
    """The built-in scene `name` (see SCENES); `seed` shapes maze and clutter."""
    if name not in _BUILDERS:
        raise SceneError(f"unknown scene {name!r}; built-in scenes: {', '.join(SCENES)}")
    try:
        seed = int(seed)
    except (TypeError, ValueError):
        raise SceneError(f"scene seed must be an integer, got {seed!r}") from None
    if seed < 0:
        raise SceneError(f"scene seed must be >= 0, got {seed}")
    return _BUILDERS[name](seed)
