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

SCENES = {
    "box": "an empty 8 x 6 m room",
    "pillars": "a 12 x 10 m hall with a 3 x 3 grid of round columns",
    "house": "five rooms and a hall joined by doorways, with furniture (the default)",
    "maze": "a 5 x 5 maze of 2.4 m cells (seeded layout)",
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


def _wall(axis, at, lo, hi, doors=(), thickness=0.4, door_height=2.1):
    """Solid boxes of a floor-to-ceiling wall with doorway gaps.

    axis "x": the wall runs along x at z = at from x = lo to hi; "z": along z
    at x = at. doors: (centre, width) along the run. Boxes reach 0.2 m into
    the floor and ceiling, so no faces are coplanar.
    """
    t = thickness / 2
    y0, y1 = -0.2, HEIGHT + 0.2
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
            a, b, ya = s[1], s[2], door_height
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
              seed=seed)
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
            rows.append(cylinder([x, -0.5, z], [x, HEIGHT + 0.5, z], 0.35, PILLAR))
    return _finish("pillars", rows, lo, hi, seed)


def _house(seed):
    lo, hi = [-8.0, 0.0, -6.0], [8.0, HEIGHT, 6.0]
    rows = [_room(lo, hi)]
    # west wing (x < -2): two rooms split at z = 0; hall -2 < x < 3; east wing split at z = 1
    rows += _wall("z", -2.0, -6.2, 6.2, doors=[(-3.5, 1.2), (3.0, 1.2)])
    rows += _wall("x", 0.0, -8.2, -2.0, doors=[(-5.0, 1.2)])
    rows += _wall("z", 3.0, -6.2, 6.2, doors=[(-2.0, 1.2), (4.0, 1.2)])
    rows += _wall("x", 1.0, 3.0, 8.2, doors=[(5.5, 1.2)])
    rows += _wall("x", -3.0, 3.0, 5.0)  # a closet wall stub in the south-east room
    # furniture (rounded, so no knife edges)
    rows.append(box_min_max([-7.0, -0.1, -5.0], [-5.2, 0.75, -4.0], OBSTACLE, rounding=0.08))  # table
    rows.append(box_min_max([-7.6, -0.1, 2.0], [-6.8, 0.9, 4.5], OBSTACLE, rounding=0.15))  # sofa
    rows.append(sphere([-4.0, 0.45, 4.8], 0.45, OBSTACLE))  # ball
    rows.append(cylinder([0.5, -0.1, 4.5], [0.5, 1.0, 4.5], 0.4, OBSTACLE))  # barrel
    rows.append(capsule([5.0, 0.3, -5.0], [7.0, 0.3, -4.2], 0.3, OBSTACLE))  # log
    rows.append(box_min_max([5.0, -0.1, 3.0], [7.2, 0.5, 5.2], OBSTACLE, rounding=0.1))  # bed
    rows.append(cylinder([-0.5, -0.5, -3.0], [-0.5, HEIGHT + 0.5, -3.0], 0.3, PILLAR))
    return _finish("house", rows, lo, hi, seed)


def _maze(seed, n=5, cell=2.4, thickness=0.4):
    rng = np.random.default_rng(seed)
    size = n * cell
    lo, hi = [-size / 2, 0.0, -size / 2], [size / 2, HEIGHT, size / 2]
    # depth-first maze over n x n cells; open[(a, b)] for removed walls
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
    gap = 1.2  # opening width in a removed wall's place: walls are cut, posts stay
    for i in range(n):
        for j in range(n):
            # wall on the +x side of cell (i, j), and on the +z side
            if i + 1 < n:
                at = x0 + (i + 1) * cell
                c = x0 + (j + 0.5) * cell
                doors = [(c, gap)] if frozenset([(i, j), (i + 1, j)]) in opened else []
                rows += _wall("z", at, c - cell / 2 - thickness / 2, c + cell / 2 + thickness / 2,
                              doors=doors, thickness=thickness, door_height=HEIGHT + 1.0)
            if j + 1 < n:
                at = x0 + (j + 1) * cell
                c = x0 + (i + 0.5) * cell
                doors = [(c, gap)] if frozenset([(i, j), (i, j + 1)]) in opened else []
                rows += _wall("x", at, c - cell / 2 - thickness / 2, c + cell / 2 + thickness / 2,
                              doors=doors, thickness=thickness, door_height=HEIGHT + 1.0)
    return _finish("maze", rows, lo, hi, seed, spacing=cell / 2)


def _clutter(seed, count=30):
    rng = np.random.default_rng(seed)
    lo, hi = [-6.0, 0.0, -6.0], [6.0, HEIGHT, 6.0]
    rows = [_room(lo, hi)]
    placed = []
    tries = 0
    while len(placed) < count and tries < 5000:
        tries += 1
        x, z = rng.uniform(-5.2, 5.2, size=2)
        r = rng.uniform(0.25, 0.6)
        if any((x - px) ** 2 + (z - pz) ** 2 < (r + pr + 0.7) ** 2 for px, pz, pr in placed):
            continue
        placed.append((x, z, r))
        kind = rng.integers(4)
        if kind == 0:
            h = rng.uniform(0.4, 2.0)
            rows.append(box_min_max([x - r, -0.1, z - r * 0.8], [x + r, h, z + r * 0.8], OBSTACLE,
                                    rounding=0.08))
        elif kind == 1:
            rows.append(sphere([x, rng.uniform(r, 2.0), z], r, OBSTACLE))
        elif kind == 2:
            rows.append(cylinder([x, -0.1, z], [x, rng.uniform(0.5, HEIGHT + 0.5), z], r, OBSTACLE))
        else:
            a = rng.uniform(0, np.pi)
            dx, dz = np.cos(a) * r * 1.5, np.sin(a) * r * 1.5
            y = rng.uniform(0.3, 2.2)
            rows.append(capsule([x - dx, y, z - dz], [x + dx, y, z + dz], 0.25, OBSTACLE))
    return _finish("clutter", rows, lo, hi, seed, spacing=0.75)


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
