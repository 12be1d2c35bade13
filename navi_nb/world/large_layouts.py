"""The large built-in scene families: layouts up to about 40 m across, with long ways round.

Built from the pieces of ``navi_nb/world/scenes.py`` (its shell, walls with doorways, furniture and
the MIN_GAP footprint rule), so they keep the same geometry rules (0.75 m walls, 1.25 m doorways and
openings, every footprint MIN_GAP from every other and from the walls, all on the 0.125 m grid) and
are connected for an actor needing up to MIN_GAP / 2 of clearance. Their world cube is 64 m
(``scenes.RESOLUTION_SCALE``), compiled at four times the asked resolution.

- ``bigmaze``: the maze of ``scenes.maze_rows`` on 8-16 x 8-16 cells of 2-2.5 m (16-40 m a side); a
  depth-first spanning tree, then up to 30 % of the remaining inner walls opened as loops.
- ``rooms``: a grid of 2-6 x 2-6 rooms whose columns and rows are 3-7 m wide (between wall centre
  lines, or a centre line and the outer wall's face). A random spanning tree of the rooms' adjacencies
  gets one doorway per wall it crosses, then a few more adjacencies get one (loops); each room holds
  up to two pieces of furniture.
"""

from __future__ import annotations

import numpy as np

from navi_nb.world.scene_pieces import (
    DOOR_CLEARANCE,
    DOOR_WIDTH,
    EMBED,
    HEIGHT,
    WALL_THICKNESS,
    Footprints,
    SceneError,
    finish_scene,
    maze_rows,
    room_shell,
    scatter_furniture,
    uniform_grid,
    wall_boxes,
)

BIG_INTERIOR = 40.0  # metres: the widest interior of a large layout
BIGMAZE_CELLS = (8, 16)  # cells a side, drawn in this range (inclusive)
BIGMAZE_CELL = (2.0, 2.5)  # metres, on a 0.25 m grid
ROOMS_GRID = (2, 6)  # rooms a side, drawn in this range (inclusive)
ROOM_SIDE = (3.0, 7.0)  # metres between wall centre lines, on a 0.5 m grid


def bigmaze(seed):
    """A maze of up to 16 x 16 cells: the cell size, counts and loop share from one stream, the walls
    from another (as ``maze`` draws them)."""
    shape = np.random.default_rng([seed, 1])
    cell = uniform_grid(shape, BIGMAZE_CELL[0], BIGMAZE_CELL[1], 0.25)
    most = min(BIGMAZE_CELLS[1], int(BIG_INTERIOR // cell))
    nx = int(shape.integers(BIGMAZE_CELLS[0], most + 1))
    nz = int(shape.integers(BIGMAZE_CELLS[0], most + 1))
    loops = float(shape.uniform(0.0, 0.3))
    rows, lo, hi = maze_rows(np.random.default_rng(seed), nx, nz, cell, loops, WALL_THICKNESS)
    # spawn points at the cells' centres (the grid's other points lie on wall lines)
    return finish_scene("bigmaze", rows, lo, hi, seed, spacing=cell)


def _spanning_doors(rng, nx, nz):
    """The room adjacencies that get a doorway: a random spanning tree of the nx x nz grid (Kruskal's
    algorithm over the edges in a random order), then 1 to 1 + rooms / 6 of the other edges (loops).
    Edges are ((i, j), (i2, j2)) with (i2, j2) the +x or +z neighbour."""
    edges = [((i, j), (i + 1, j)) for i in range(nx - 1) for j in range(nz)]
    edges += [((i, j), (i, j + 1)) for i in range(nx) for j in range(nz - 1)]
    parent = list(range(nx * nz))

    def root(k):
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    tree, rest = [], []
    for e in (edges[k] for k in rng.permutation(len(edges))):
        a, b = root(e[0][0] * nz + e[0][1]), root(e[1][0] * nz + e[1][1])
        if a != b:
            parent[a] = b
            tree.append(e)
        else:
            rest.append(e)
    loops = min(len(rest), int(rng.integers(1, 2 + nx * nz // 6)))
    return tree + rest[:loops]


def _door_centre(rng, a, b, outer_a, outer_b):
    """A doorway centre on the 0.125 m grid along a wall run from a to b (wall centre lines, or outer
    faces where outer_a / outer_b), keeping DOOR_CLEARANCE from the faces of the walls at its ends."""
    half = DOOR_WIDTH / 2 + DOOR_CLEARANCE
    first = a + half + (0.0 if outer_a else WALL_THICKNESS / 2)
    last = b - half - (0.0 if outer_b else WALL_THICKNESS / 2)
    if last < first:  # ROOM_SIDE's lower bound leaves room: never for a valid layout
        raise SceneError(f"rooms: a wall of {b - a:g} m has no room for a doorway")
    return uniform_grid(rng, first, last, 0.125)


def rooms(seed):
    """A grid of rooms with doorways on a random spanning tree plus a few loops, and furniture."""
    rng = np.random.default_rng(seed)
    nx = int(rng.integers(ROOMS_GRID[0], ROOMS_GRID[1] + 1))
    nz = int(rng.integers(ROOMS_GRID[0], ROOMS_GRID[1] + 1))
    widths = [uniform_grid(rng, ROOM_SIDE[0], ROOM_SIDE[1], 0.5) for _ in range(nx)]
    depths = [uniform_grid(rng, ROOM_SIDE[0], ROOM_SIDE[1], 0.5) for _ in range(nz)]
    w, d = sum(widths), sum(depths)
    lo, hi = [-w / 2, 0.0, -d / 2], [w / 2, HEIGHT, d / 2]
    xs = [lo[0] + sum(widths[:k]) for k in range(nx + 1)]  # wall centre lines (the ends: outer faces)
    zs = [lo[2] + sum(depths[:k]) for k in range(nz + 1)]
    doors_x = {k: [] for k in range(1, nx)}  # doorways (centre along z) of the wall at x = xs[k]
    doors_z = {k: [] for k in range(1, nz)}  # doorways (centre along x) of the wall at z = zs[k]
    for (i, j), (i2, _) in _spanning_doors(rng, nx, nz):
        if i2 != i:  # a wall along z between columns i and i + 1, in row j
            doors_x[i2].append(_door_centre(rng, zs[j], zs[j + 1], j == 0, j + 1 == nz))
        else:  # a wall along x between rows j and j + 1, in column i
            doors_z[j + 1].append(_door_centre(rng, xs[i], xs[i + 1], i == 0, i + 1 == nx))
    rows = [room_shell(lo, hi)]
    t = WALL_THICKNESS
    for k in range(1, nx):
        doors = [(c, DOOR_WIDTH) for c in sorted(doors_x[k])]
        rows += wall_boxes("z", xs[k], lo[2] - EMBED, hi[2] + EMBED, doors=doors, thickness=t)
    for k in range(1, nz):
        doors = [(c, DOOR_WIDTH) for c in sorted(doors_z[k])]
        rows += wall_boxes("x", zs[k], lo[0] - EMBED, hi[0] + EMBED, doors=doors, thickness=t)
    for i in range(nx):  # furniture: up to two pieces per room, clear of walls, doors and each other
        for j in range(nz):
            cx0 = xs[i] + (0.0 if i == 0 else t / 2)
            cx1 = xs[i + 1] - (0.0 if i + 1 == nx else t / 2)
            cz0 = zs[j] + (0.0 if j == 0 else t / 2)
            cz1 = zs[j + 1] - (0.0 if j + 1 == nz else t / 2)
            feet = Footprints([cx0, 0.0, cz0], [cx1, 0.0, cz1])
            scatter_furniture(rng, rows, feet, int(rng.integers(0, 3)))
    return finish_scene("rooms", rows, lo, hi, seed, spacing=2.0)


BUILDERS = {"bigmaze": bigmaze, "rooms": rooms}
