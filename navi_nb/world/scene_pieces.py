"""The pieces every built-in scene family is built from: the scene type, the families' registry
(names, descriptions, seeds, generator versions, cube sizes), walls and doorways, the seeded layouts'
geometry rules (footprints, furniture) and the maze of a spanning tree. ``scenes.py`` builds the
classic families from them, ``large_layouts.py`` the large ones; both import this module, neither the
other's (``scenes.get_scene`` dispatches to both)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from navi_nb.errors import NaviError
from navi_nb.world import sdf
from navi_nb.world.sdf import OP_COMPLEMENT, box_min_max, capsule, cylinder, op

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
    "box": "an empty 8 x 6 m room (one layout; no seeds)",
    "pillars": "a hall with a grid of round or square columns (seed 0: 12 x 10 m, 3 x 3 round)",
    "house": "rooms joined by doorways, with furniture (seed 0: five rooms and a hall; the default)",
    "maze": "a maze of 2-3 m cells, some with loops (seed 0: 5 x 5 cells of 2.5 m, a perfect maze)",
    "clutter": "a room with random boxes, posts, spheres and beams (seed 0: 12 x 12 m)",
    "bigmaze": "a maze of 8-16 x 8-16 cells of 2-2.5 m, 16-40 m across, some with loops",
    "rooms": "a grid of 2-6 x 2-6 rooms of 3-7 m, doors on a spanning tree plus a few loops, furniture",
}
# Families whose seed shapes the layout. Each generator has a version: it goes
# into compile-cache keys, so bump it whenever a seed's layout changes.
SEEDED_FAMILIES = ("house", "maze", "clutter", "pillars", "bigmaze", "rooms")
GENERATOR_VERSION = {"box": 1, "pillars": 2, "house": 2, "maze": 2, "clutter": 2, "bigmaze": 1, "rooms": 1}
LARGE_FAMILIES = ("bigmaze", "rooms")  # built in navi_nb/world/large_layouts.py
# How many times wider than CUBE_SIDE a family's world cube is, and so how many times the asked
# resolution it compiles at (the voxel size stays CUBE_SIDE / resolution): 64 m holds 40 m layouts.
RESOLUTION_SCALE = {"bigmaze": 4, "rooms": 4}
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
    # the built-in cube is this many times CUBE_SIDE: compile_scene multiplies the resolution by it
    resolution_scale: int = 1

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
        return {
            "scene": self.name,
            "seed": int(self.seed),
            "class_names": list(self.class_names),
            "spawn_points": np.asarray(self.spawn_points, dtype=np.float64).round(4).tolist(),
            "bounds_of_interest": [list(map(float, self.bounds_min)), list(map(float, self.bounds_max))],
        }


# --------------------------------------------------------------------------
# building blocks
# --------------------------------------------------------------------------


def room_shell(lo, hi):
    """Rows for the solid around a room: complement of its box, faces classed."""
    return [box_min_max(lo, hi, WALL, bottom=FLOOR, top=CEILING), op(OP_COMPLEMENT)]


def wall_boxes(axis, at, lo, hi, doors=(), thickness=0.75, door_height=2.125):
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


def scene_program(rows):
    """Union every solid (shell first) into one program."""
    prog = [rows[0][0], rows[0][1]] if isinstance(rows[0], list) else [rows[0]]
    for r in rows[1:]:
        if isinstance(r, list):
            prog.extend(r)
        else:
            prog.append(r)
        prog.append(op(sdf.OP_UNION))
    return sdf.check_program(np.array(prog))


def grid_spawn_points(scene, spacing=1.0, rng=None, count=None):
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


def resolution_scale(family) -> int:
    """How many times the asked resolution the built-in `family` compiles at (1 but for LARGE_FAMILIES)."""
    return RESOLUTION_SCALE.get(family, 1)


def finish_scene(name, rows, lo, hi, seed, spacing=1.0):
    """The Scene of family `name`: program, bounds, its family's world cube and spawn points."""
    scale = resolution_scale(name)
    side = CUBE_SIDE * scale
    s = Scene(
        name=name,
        description=SCENES[name],
        program=scene_program(rows),
        bounds_min=np.asarray(lo, dtype=np.float64),
        bounds_max=np.asarray(hi, dtype=np.float64),
        seed=seed,
        cube_min=np.array([-side / 2, HEIGHT / 2 - side / 2, -side / 2]),  # CUBE_MIN at scale 1
        cube_side=side,
        resolution_scale=scale,
    )
    s.spawn_points = grid_spawn_points(s, spacing)
    if len(s.spawn_points) == 0:
        raise SceneError(f"scene {name!r} (seed {seed}) has no free spawn point")
    return s


# --------------------------------------------------------------------------
# seeded layouts: shared rules
#
# Seeded families keep every obstacle's footprint (its xz bounding rectangle,
# as if it reached the ceiling) at least MIN_GAP from every other footprint
# and from the walls, and every doorway at least DOOR_CLEARANCE from a wall
# junction. Footprints grown by MIN_GAP / 2 are then disjoint convex sets
# that do not touch the room's boundary, so the free floor of every room stays
# connected for any actor needing up to MIN_GAP / 2 of clearance; doors join
# the rooms of a binary partition (or the cells of a spanning-tree maze), so
# the whole layout is connected.
# --------------------------------------------------------------------------

MIN_GAP = 1.25  # metres of free floor between footprints, and between footprints and walls
DOOR_WIDTH = 1.25
DOOR_CLEARANCE = 0.25  # free wall kept between a doorway and the nearest wall face
WALL_THICKNESS = 0.75
MAX_INTERIOR = 15.0  # interiors fit the 16 m cube with room to spare


def snap(x, step=0.125):
    """x snapped to the geometry grid."""
    return float(np.round(x / step) * step)


def uniform_grid(rng, a, b, step):
    """A value in [a, b] on a grid of `step` (a and b on that grid), uniformly."""
    n = int(np.floor((b - a) / step + 1e-9))
    return a + step * int(rng.integers(n + 1))


class Footprints:
    """xz rectangles of placed obstacles; `fits` applies the MIN_GAP rule."""

    def __init__(self, lo, hi, gap=MIN_GAP):
        self.lo = np.asarray(lo, dtype=np.float64)[[0, 2]]  # clear interior of the room
        self.hi = np.asarray(hi, dtype=np.float64)[[0, 2]]
        self.gap = gap
        self.rects = []

    def fits(self, rlo, rhi):
        g = self.gap - 1e-9
        if np.any(rlo < self.lo + g) or np.any(rhi > self.hi - g):
            return False
        for a, b in self.rects:  # separated by >= gap along some axis
            if not (rlo[0] >= b[0] + g or a[0] >= rhi[0] + g or rlo[1] >= b[1] + g or a[1] >= rhi[1] + g):
                return False
        return True

    def add(self, rlo, rhi):
        self.rects.append((np.asarray(rlo, dtype=np.float64), np.asarray(rhi, dtype=np.float64)))


def furniture_piece(rng, x, z):
    """(row, footprint lo (x, z), footprint hi) of a random furniture piece centred near (x, z)."""
    e = EMBED
    kind = int(rng.integers(6))
    if kind in (0, 1, 2):  # table, sofa, bed: rounded boxes
        hx = uniform_grid(rng, 0.375, 1.125, 0.125)
        hz = uniform_grid(rng, 0.375, 1.125, 0.125)
        top = (0.75, 0.875, 0.5)[kind]
        lo, hi = [x - hx, z - hz], [x + hx, z + hz]
        return box_min_max([lo[0], -e, lo[1]], [hi[0], top, hi[1]], OBSTACLE, rounding=0.125), lo, hi
    if kind == 3:  # stool or barrel
        r = uniform_grid(rng, 0.375, 0.5, 0.125)
        top = uniform_grid(rng, 0.5, 1.0, 0.125)
        return cylinder([x, -e, z], [x, top, z], r, OBSTACLE), [x - r, z - r], [x + r, z + r]
    if kind == 4:  # a rail along x or z at chest height
        half = uniform_grid(rng, 0.5, 1.0, 0.125)
        r = 0.375
        if rng.random() < 0.5:
            a, b = [x - half, 1.125, z], [x + half, 1.125, z]
        else:
            a, b = [x, 1.125, z - half], [x, 1.125, z + half]
        lo = [min(a[0], b[0]) - r, min(a[2], b[2]) - r]
        hi = [max(a[0], b[0]) + r, max(a[2], b[2]) + r]
        return capsule(a, b, r, OBSTACLE), lo, hi
    r = 0.375  # a floor-to-ceiling pillar
    return cylinder([x, -e, z], [x, HEIGHT + e, z], r, PILLAR), [x - r, z - r], [x + r, z + r]


def scatter_furniture(rng, rows, feet, count, tries=40):
    """Place up to `count` random pieces inside `feet`'s room under the MIN_GAP rule."""
    placed = 0
    for _ in range(tries):
        if placed >= count:
            break
        x = snap(rng.uniform(feet.lo[0], feet.hi[0]))
        z = snap(rng.uniform(feet.lo[1], feet.hi[1]))
        row, lo, hi = furniture_piece(rng, x, z)
        if feet.fits(np.asarray(lo), np.asarray(hi)):
            feet.add(lo, hi)
            rows.append(row)
            placed += 1
    return placed


def maze_rows(rng, nx, nz, cell, loops, thickness=0.75):
    """(rows, lo, hi) of a maze of nx x nz square cells of side `cell` centred on the origin: a depth-first
    spanning tree of the cells drawn from `rng`, then each remaining inner wall opened with probability
    `loops` (cycles: more than one way round). A removed wall leaves a 1.25 m opening between posts."""
    lo = [-nx * cell / 2, 0.0, -nz * cell / 2]
    hi = [nx * cell / 2, HEIGHT, nz * cell / 2]
    # depth-first maze over nx x nz cells; `opened` holds the removed walls
    seen = np.zeros((nx, nz), dtype=bool)
    opened = set()
    stack = [(0, 0)]
    seen[0, 0] = True
    while stack:
        i, j = stack[-1]
        nbrs = [
            (i + di, j + dj)
            for di, dj in ((1, 0), (-1, 0), (0, 1), (0, -1))
            if 0 <= i + di < nx and 0 <= j + dj < nz and not seen[i + di, j + dj]
        ]
        if not nbrs:
            stack.pop()
            continue
        a = nbrs[rng.integers(len(nbrs))]
        opened.add(frozenset([(i, j), a]))
        seen[a] = True
        stack.append(a)
    if loops > 0:  # extra openings make cycles (more than one way round)
        for i in range(nx):
            for j in range(nz):
                for a in ((i + 1, j), (i, j + 1)):
                    if a[0] < nx and a[1] < nz and rng.random() < loops:
                        opened.add(frozenset([(i, j), a]))
    rows = [room_shell(lo, hi)]
    x0, z0 = lo[0], lo[2]
    gap = 1.25  # a removed wall leaves an opening this wide (posts stay)

    def ext(k, m):  # runs reach EMBED into the outer walls, thickness / 2 past inner posts
        return EMBED if k in (0, m) else thickness / 2

    for i in range(nx):
        for j in range(nz):
            # the wall on the +x side of cell (i, j), and the one on its +z side
            if i + 1 < nx:
                at = x0 + (i + 1) * cell
                c = z0 + (j + 0.5) * cell
                doors = [(c, gap)] if frozenset([(i, j), (i + 1, j)]) in opened else []
                rows += wall_boxes(
                    "z",
                    at,
                    c - cell / 2 - ext(j, nz),
                    c + cell / 2 + ext(j + 1, nz),
                    doors=doors,
                    thickness=thickness,
                    door_height=HEIGHT + EMBED,
                )
            if j + 1 < nz:
                at = z0 + (j + 1) * cell
                c = x0 + (i + 0.5) * cell
                doors = [(c, gap)] if frozenset([(i, j), (i, j + 1)]) in opened else []
                rows += wall_boxes(
                    "x",
                    at,
                    c - cell / 2 - ext(i, nx),
                    c + cell / 2 + ext(i + 1, nx),
                    doors=doors,
                    thickness=thickness,
                    door_height=HEIGHT + EMBED,
                )
    return rows, lo, hi
