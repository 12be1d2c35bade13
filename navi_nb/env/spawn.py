"""Spawns and goals: where episodes start and where point-goals lie.

At construction the environment builds a *reachability grid* over the region
of interest (the scene's bounds when the world names a built-in scene, else the
world cube shrunk by the actor's radius): a cell is free when the world's
distance at its centre (the point query the collision uses,
``navi_nb/world/query.py``) is at least ``radius + margin + cell / 2``, which makes
the straight segment between two free neighbouring centres safe for the actor.
The *pool* is one 6-connected component of the free cells: of the components
that hold the world's listed spawn points, the one with the most cells (ties
to the one of the earliest listed point), or, when no listed point lies in a
free cell, the largest component. Listed points in other components are
dropped, and the world's :attr:`SpawnSampler.note` says so in one line (a
world whose free space the grid's clearance splits: two closed rooms, or a
coarse world whose doorways close). Every spawn and goal lies near a pool
centre, so every goal is reachable from every spawn.

Building the grid queries every cell centre (about 50,000 a house at 128, 8 to 9
ms), so its result, the pool's cells, which listed spawn points stay and the
counts of the note, is kept in ``spawn/KEY.npz`` beside the world cache (``NAVI_NB_CACHE``
moves it), KEY hashing the world's bytes, every setting the grid depends on and
the sources of the code that computes it: a start over 200 houses reads 200
small files instead of querying ten million points. Each file holds, beside
the arrays, a digest of them keyed with its own name (:func:`read_pool`), so
a file that is missing, unreadable (any failure of the zip or npz layers),
not of the expected shapes, whose arrays do not match its digest, or whose
pool has no cell is computed again and replaced; one that cannot be written is
skipped (the cache only saves time). The pool is the same either way.

Sampling is batched and seeded: one ``np.random.Generator`` for spawns, one for
goals, each drawn once for all the actors being reset, so results do not depend
on thread counts or on the order of kernels.

- spawn ``"free"``: a pool centre chosen uniformly, jittered by up to a quarter
  cell per axis (the jitter is dropped where it would cut the clearance);
  yaw uniform in [-pi, pi).
- spawn ``"points"``: one of the world's spawn points, chosen uniformly.
- goal: ``goal_candidates`` pool centres per actor, drawn uniformly; the first
  whose straight-line distance from the spawn lies in
  ``[goal_min_distance, goal_max_distance]`` wins, else the candidate closest to
  that range.
- goal first (``goal_distance="geodesic"`` or a ratio bound): the goal is a pool
  centre drawn uniformly, its geodesic field is computed (``geodesic.py``), and
  the spawn is the first of ``goal_candidates`` pool centres (or of the listed
  spawn points) whose distance from the goal lies in the band and whose
  geodesic / straight ratio lies in ``[goal_min_ratio, goal_max_ratio]``, else
  the first in the band, else the closest to it; then jittered as above.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numba import njit

from navi_nb.env.config import EnvConfigError
from navi_nb.env.pool_file import pool_cache_key, read_pool, write_pool

GOAL_CANDIDATES = 64
MAX_GRID_CELLS = 160  # per axis


@njit(cache=True)
def _flood(free, seeds, label_out, value):
    """6-connected flood fill over ``free`` (X,Y,Z) bool from flat ``seeds``:
    unlabelled reached cells of label_out (X*Y*Z,) int32 get ``value``.
    Returns how many cells it labelled."""
    nx, ny, nz = free.shape
    flat = free.ravel()
    stack = np.empty(flat.shape[0], dtype=np.int64)
    top = 0
    count = 0
    for s in seeds:
        if flat[s] and label_out[s] == 0:
            label_out[s] = value
            count += 1
            stack[top] = s
            top += 1
    while top > 0:
        top -= 1
        c = stack[top]
        iz = c % nz
        iy = (c // nz) % ny
        ix = c // (ny * nz)
        for k in range(6):
            jx, jy, jz = ix, iy, iz
            if k == 0:
                jx -= 1
            elif k == 1:
                jx += 1
            elif k == 2:
                jy -= 1
            elif k == 3:
                jy += 1
            elif k == 4:
                jz -= 1
            else:
                jz += 1
            if jx < 0 or jy < 0 or jz < 0 or jx >= nx or jy >= ny or jz >= nz:
                continue
            n = (jx * ny + jy) * nz + jz
            if flat[n] and label_out[n] == 0:
                label_out[n] = value
                count += 1
                stack[top] = n
                top += 1
    return count


@njit(cache=True)
def _seed_parts(free, seeds, labels):
    """Flood each component of ``free`` that holds a seed, in the seeds' order: the component of the
    ``k``-th seed to reach a new one gets label ``k + 1`` in labels (X*Y*Z,) int32 (zeros on entry).
    Returns (parts,) int64, each part's cell count (a seed outside ``free`` starts none)."""
    counts = np.zeros(seeds.shape[0], dtype=np.int64)
    one = np.empty(1, dtype=np.int64)
    n = 0
    flat = free.ravel()
    for s in seeds:
        if flat[s] and labels[s] == 0:
            one[0] = s
            counts[n] = _flood(free, one, labels, n + 1)
            n += 1
    return counts[:n]


@njit(cache=True)
def _largest_component(free):
    """Label of every cell's component (0 = not free) and the largest's label."""
    flat = free.ravel()
    labels = np.zeros(flat.shape[0], dtype=np.int32)
    best, best_count = 0, 0
    label = 0
    seeds = np.empty(1, dtype=np.int64)
    for s in range(flat.shape[0]):
        if flat[s] and labels[s] == 0:
            label += 1
            seeds[0] = s
            count = _flood(free, seeds, labels, label)
            if count > best_count:
                best, best_count = label, count
    return labels, best


@njit(cache=True)
def _cell_at(dims, lo, cell, x, y, z):
    """The flat index of the grid cell holding point (x, y, z), or -1 outside the grid."""
    ix = int(np.floor((x - lo[0]) / cell))
    iy = int(np.floor((y - lo[1]) / cell))
    iz = int(np.floor((z - lo[2]) / cell))
    if ix < 0 or iy < 0 or iz < 0 or ix >= dims[0] or iy >= dims[1] or iz >= dims[2]:
        return -1
    return (ix * dims[1] + iy) * dims[2] + iz


@njit(cache=True)
def _segment_free(reach, dims, lo, cell, ax, ay, az, bx, by, bz):
    """Every point of segment a-b, sampled every quarter cell, lies in a reachable cell."""
    dx = bx - ax
    dy = by - ay
    dz = bz - az
    steps = int(np.sqrt(dx * dx + dy * dy + dz * dz) / (0.25 * cell)) + 1
    for k in range(steps + 1):
        t = k / steps
        c = _cell_at(dims, lo, cell, ax + t * dx, ay + t * dy, az + t * dz)
        if c < 0 or not reach[c]:
            return False
    return True


@njit(inline="always", cache=True)
def _entry_before(f, c, g, d):
    """Heap entry (key ``f``, cell ``c``) orders before ``(g, d)``: the smaller key, ties to the lower cell."""
    return f < g or (f == g and c < d)


@njit(inline="always", cache=True)
def _heap_push(heap, size, f, c):
    """Add the entry (key ``f``, cell ``c``) to the 4-ary min-heap of ``size`` entries in ``heap`` (float64
    pairs: key, cell; room for one more); returns the new size."""
    fc = np.float64(c)
    i = size
    while i > 0:
        p = (i - 1) >> 2
        if _entry_before(heap[2 * p], heap[2 * p + 1], f, fc):
            break
        heap[2 * i] = heap[2 * p]
        heap[2 * i + 1] = heap[2 * p + 1]
        i = p
    heap[2 * i] = f
    heap[2 * i + 1] = fc
    return size + 1


@njit(inline="always", cache=True)
def _heap_pop(heap, size):
    """Remove the first entry of the 4-ary min-heap; returns ``(its cell, the new size)``."""
    c = np.int64(heap[1])
    size -= 1
    if size > 0:
        lf = heap[2 * size]
        lc = heap[2 * size + 1]
        i = 0
        while True:
            a = 4 * i + 1
            if a >= size:
                break
            m = a
            mf = heap[2 * a]
            mc = heap[2 * a + 1]
            for b in range(a + 1, min(a + 4, size)):
                if _entry_before(heap[2 * b], heap[2 * b + 1], mf, mc):
                    m = b
                    mf = heap[2 * b]
                    mc = heap[2 * b + 1]
            if _entry_before(lf, lc, mf, mc):
                break
            heap[2 * i] = mf
            heap[2 * i + 1] = mc
            i = m
        heap[2 * i] = lf
        heap[2 * i + 1] = lc
    return c, size


REACHABLE, TOUCHED, CLOSED = 1, 2, 4  # the bits of a cell's state in a search (:func:`_a_star`)
NO_PATH, PATH, HEAP_FULL = 0, 1, 2  # what a search found


@njit(cache=True)
def _a_star(dims, cell, s_cell, g_cell, search, heap):
    """A* from cell ``s_cell`` to ``g_cell`` over the reachable cells' 26 neighbours (edges between cell
    centres, heuristic the straight distance). Returns PATH when a path joins them, its cells then
    chained from the goal back to the start by ``parent``, NO_PATH when none does, or HEAP_FULL when
    ``heap`` (float64 pairs) lacks room for a closed cell's 26 neighbours (:func:`_search` then searches again
    with a larger one).
    ``search``: the scratch of :func:`path_lengths`, ``(cost, parent, state, touched)``; ``state``
    holds each cell's REACHABLE bit, and this search's TOUCHED (cost set) and CLOSED bits, cleared
    again before it returns.

    The open set is a 4-ary heap of (key, cell) entries: a cell whose cost falls is pushed again and
    its stale entry skipped once closed. Entries pop in the order of (key, cell), as from any heap
    with that order, so the cells close and the parents fall as an indexed heap's would (the same
    paths, bit for bit), with fewer writes a push and no slot table to keep: 1.5 to 1.7 times as fast
    on the quick start's worlds."""
    cost, parent, state, touched = search
    ny, nz = dims[1], dims[2]
    state[s_cell] |= TOUCHED
    touched[0] = s_cell
    n_touched = 1
    cost[s_cell] = 0.0
    parent[s_cell] = -1
    tx, ty, tz = g_cell // (ny * nz), (g_cell // nz) % ny, g_cell % nz
    size = _heap_push(heap, np.int64(0), 0.0, s_cell)
    outcome = NO_PATH
    while size > 0:
        c, size = _heap_pop(heap, size)
        if state[c] & CLOSED:  # a stale entry
            continue
        state[c] |= CLOSED
        if c == g_cell:
            outcome = PATH
            break
        if 2 * (size + 26) > heap.shape[0]:  # no room for every neighbour's entry
            outcome = HEAP_FULL
            break
        ix, iy, iz = c // (ny * nz), (c // nz) % ny, c % nz
        gc = cost[c]
        for ox in range(-1, 2):
            jx = ix + ox
            if jx < 0 or jx >= dims[0]:
                continue
            for oy in range(-1, 2):
                jy = iy + oy
                if jy < 0 or jy >= ny:
                    continue
                for oz in range(-1, 2):
                    jz = iz + oz
                    if jz < 0 or jz >= nz or (ox == 0 and oy == 0 and oz == 0):
                        continue
                    n = (jx * ny + jy) * nz + jz
                    st = state[n]
                    if st & (REACHABLE | CLOSED) != REACHABLE:
                        continue
                    if not st & TOUCHED:
                        state[n] = st | TOUCHED
                        touched[n_touched] = n
                        n_touched += 1
                        cost[n] = np.inf
                    g = gc + cell * np.sqrt(ox * ox + oy * oy + oz * oz)
                    if g < cost[n]:
                        cost[n] = g
                        parent[n] = c
                        h = cell * np.sqrt((jx - tx) ** 2 + (jy - ty) ** 2 + (jz - tz) ** 2)
                        size = _heap_push(heap, size, g + h, n)
    for k in range(n_touched):
        state[touched[k]] &= REACHABLE
    return outcome


@njit(cache=True)
def _search(dims, cell, s_cell, g_cell, search, heap):
    """:func:`_a_star`, again with a heap twice as large each time it runs out of room (rare: a heap
    of four entries a cell); returns ``(PATH or NO_PATH, the heap)``."""
    outcome = _a_star(dims, cell, s_cell, g_cell, search, heap)
    while outcome == HEAP_FULL:
        heap = np.empty(2 * heap.shape[0], np.float64)
        outcome = _a_star(dims, cell, s_cell, g_cell, search, heap)
    return outcome, heap


@njit(cache=True)
def _taut_length(reach, dims, lo, cell, parent, g_cell, start, goal, points):
    """The length of the cell path that ``parent`` chains from ``g_cell`` back to the start's cell, pulled
    taut: from each point, on to the last of the following path points that a straight segment through
    reachable cells still reaches. The path's ends are the points ``start`` and ``goal`` themselves (each
    (3,) float64), not their cells' centres. ``points``: scratch ``(path, px, py, pz)``."""
    path, px, py, pz = points
    ny, nz = dims[1], dims[2]
    k = 0
    c = g_cell
    while c >= 0:
        path[k] = c
        k += 1
        c = parent[c]
    m = 0
    px[m], py[m], pz[m] = start[0], start[1], start[2]
    m += 1
    for j in range(k - 2, 0, -1):  # skip the start's and the goal's own cells
        c = path[j]
        px[m] = lo[0] + (c // (ny * nz) + 0.5) * cell
        py[m] = lo[1] + ((c // nz) % ny + 0.5) * cell
        pz[m] = lo[2] + (c % nz + 0.5) * cell
        m += 1
    px[m], py[m], pz[m] = goal[0], goal[1], goal[2]
    m += 1
    length = 0.0
    i = 0
    while i < m - 1:
        j = i + 1
        while j + 1 < m and _segment_free(reach, dims, lo, cell, px[i], py[i], pz[i], px[j + 1], py[j + 1], pz[j + 1]):
            j += 1
        length += np.sqrt((px[j] - px[i]) ** 2 + (py[j] - py[i]) ** 2 + (pz[j] - pz[i]) ** 2)
        i = j
    return length


@njit(cache=True, nogil=True)
def path_lengths(reach, dims, lo, cell, starts, goals):
    """Shortest path length (metres) from each start to its goal through the reachable cells.

    A* over the cells' 26 neighbours (:func:`_a_star`), then the cell path pulled taut
    (:func:`_taut_length`). Never below the straight distance. A pair whose start or goal is not in a
    reachable cell, or that no path joins, gets NaN: its shortest path is unknown (the straight line
    would cross walls). The environment draws neither: its spawns and goals lie in the pool's cells,
    one component, which a path joins.
    """
    n_cells = dims[0] * dims[1] * dims[2]
    out = np.empty(starts.shape[0], np.float64)
    state = np.empty(n_cells, np.uint8)
    for c in range(n_cells):
        state[c] = REACHABLE if reach[c] else 0
    search = (np.empty(n_cells, np.float64), np.empty(n_cells, np.int64), state, np.empty(n_cells, np.int64))
    heap = np.empty(2 * 4 * n_cells, np.float64)  # (key, cell) pairs; the pages a search touches
    points = (
        np.empty(n_cells + 2, np.int64),
        np.empty(n_cells + 2, np.float64),
        np.empty(n_cells + 2, np.float64),
        np.empty(n_cells + 2, np.float64),
    )
    start = np.empty(3, np.float64)
    goal = np.empty(3, np.float64)
    for q in range(starts.shape[0]):
        for a in range(3):
            start[a] = np.float64(starts[q, a])
            goal[a] = np.float64(goals[q, a])
        sx, sy, sz = start[0], start[1], start[2]
        gx, gy, gz = goal[0], goal[1], goal[2]
        straight = np.sqrt((gx - sx) ** 2 + (gy - sy) ** 2 + (gz - sz) ** 2)
        out[q] = straight
        s_cell = _cell_at(dims, lo, cell, sx, sy, sz)
        g_cell = _cell_at(dims, lo, cell, gx, gy, gz)
        if s_cell < 0 or g_cell < 0 or not (reach[s_cell] and reach[g_cell]):
            out[q] = np.nan
            continue
        if _segment_free(reach, dims, lo, cell, sx, sy, sz, gx, gy, gz):
            continue  # in sight: the straight line is the path
        outcome, heap = _search(dims, cell, s_cell, g_cell, search, heap)
        if outcome == NO_PATH:
            out[q] = np.nan
            continue
        length = _taut_length(reach, dims, lo, cell, search[1], g_cell, start, goal, points)
        if length > straight:
            out[q] = length
    return out


def axis_centres(lo, dims, cell) -> list:
    """Per axis, the (n,) float64 cell centres ``lo + (index + 0.5) * cell`` of a grid."""
    return [lo[a] + (np.arange(int(dims[a])) + 0.5) * cell for a in range(3)]


def grid_centres(lo, dims, cell) -> np.ndarray:
    """(X*Y*Z, 3) float64: the centres of a grid's cells in flat index order (x outermost, z fastest).
    Filled one axis at a time from broadcast rows: several times faster than the index grid of
    ``np.meshgrid``, the same bits."""
    xs, ys, zs = axis_centres(lo, dims, cell)
    out = np.empty((xs.shape[0], ys.shape[0], zs.shape[0], 3), dtype=np.float64)
    out[..., 0] = xs[:, None, None]
    out[..., 1] = ys[None, :, None]
    out[..., 2] = zs[None, None, :]
    return out.reshape(-1, 3)


def cell_centres(lo, dims, cell, flat) -> np.ndarray:
    """(n, 3) float64: the centres of the cells at flat indices ``flat``, the bits :func:`grid_centres`
    gives them (the same per-axis rows), without building the whole grid."""
    rows = axis_centres(lo, dims, cell)
    index = np.unravel_index(np.asarray(flat, np.int64), tuple(int(d) for d in dims))
    return np.stack([rows[a][index[a]] for a in range(3)], axis=1)


def region_of_interest(world):
    """The sidecar's ``bounds_of_interest`` (written by the scene compiler), else None."""
    side = world.sidecar if isinstance(world.sidecar, dict) else {}
    b = side.get("bounds_of_interest")
    try:
        lo, hi = np.asarray(b[0], np.float64).reshape(3), np.asarray(b[1], np.float64).reshape(3)
    except (TypeError, ValueError, IndexError):
        return None
    if not (np.isfinite(lo).all() and np.isfinite(hi).all() and np.all(hi > lo)):
        return None
    return lo, hi


class SpawnSampler:
    """The pool of reachable free-space points and the batched samplers."""

    def __init__(
        self, distance_fn, cube, roi, radius, margin, cell, spawn_points, mode, cache_dir=None, world_digest=None
    ):
        """cube, roi: ``(lo, hi)`` corners of the world's cube and of its region of interest. cache_dir:
        the folder of pool files (:func:`default_pool_dir`) to read the grid's result from, or to write it
        to when it is not there, under :func:`pool_cache_key` of ``world_digest`` (the world's content
        hash, ``gmdag.world_digest``) and these settings; None computes it."""
        (cube_lo, cube_hi), (roi_lo, roi_hi) = cube, roi
        cache = None
        if cache_dir is not None:
            if not isinstance(world_digest, str) or not world_digest:
                raise EnvConfigError("spawn: a pool cache folder needs the world's content hash (world_digest)")
            key = pool_cache_key(world_digest, cube_lo, cube_hi, roi_lo, roi_hi, radius, margin, cell, spawn_points)
            cache = Path(cache_dir) / f"{key}.npz"
        lo = np.maximum(np.asarray(roi_lo, np.float64), np.asarray(cube_lo, np.float64) + radius)
        hi = np.minimum(np.asarray(roi_hi, np.float64), np.asarray(cube_hi, np.float64) - radius)
        if np.any(hi <= lo):
            raise EnvConfigError(
                f"spawn: the region of interest {roi_lo}..{roi_hi} leaves no room for an actor of radius {radius}"
            )
        cell = float(max(cell, float(np.max(hi - lo)) / MAX_GRID_CELLS))
        dims = np.maximum(1, np.floor((hi - lo) / cell).astype(np.int64))
        self.cell = cell
        self.cache_path = cache  # the pool file read or written (None: no pool cache)
        self.radius = float(radius)
        self.margin = float(margin)
        self.distance_fn = distance_fn
        self.mode = mode
        self.lo = lo
        self.dims = dims
        sp = np.asarray(spawn_points, dtype=np.float64).reshape(-1, 3)
        found = read_pool(cache, int(np.prod(dims)), sp.shape[0]) if cache is not None else None
        if found is None:
            centres = grid_centres(lo, dims, cell)
            reach, keep, split = self._reachable_cells(centres, sp)
            if cache is not None and reach.any():  # a pool of no cell is refused below, and never read back
                write_pool(cache, reach, keep, split)
            self.pool = centres[reach]
        else:
            reach, keep, split = found
            self.pool = cell_centres(lo, dims, cell, np.flatnonzero(reach))
        self.spawn_points = sp[keep].astype(np.float32)
        self.reach = np.ascontiguousarray(reach)  # (X*Y*Z,) bool: the pool's cells (path_lengths)
        self.split = split  # (3,) int64: components holding listed spawn points, their cells, points dropped
        if self.pool.shape[0] == 0:
            raise EnvConfigError(
                f"spawn: no free space with clearance {radius + margin + 0.5 * cell:.3g} m "
                f"(radius {radius}, margin {margin:.3g}, cell {cell:.3g}) in this world"
            )
        if mode == "points" and self.spawn_points.shape[0] == 0:
            self.mode = "free"

    def _reachable_cells(self, centres, sp):
        """``(reach, keep, split)``: the pool's cells, flat (X*Y*Z,) bool (one component: the largest that
        holds listed spawn points, else the largest), which listed spawn points stay (k,) bool (those with
        the clearance whose cell is in the pool) and :attr:`split`'s counts."""
        lo, dims, cell, distance_fn = self.lo, self.dims, self.cell, self.distance_fn
        dist = np.asarray(distance_fn(centres), dtype=np.float64)
        free = (dist >= self.radius + self.margin + 0.5 * cell).reshape(tuple(dims))
        keep = np.zeros(sp.shape[0], dtype=bool)
        if sp.shape[0]:
            keep = np.asarray(distance_fn(sp), dtype=np.float64) >= self.radius + self.margin
        label = np.zeros(int(np.prod(dims)), dtype=np.int32)
        seeds = np.full(sp.shape[0], -1, dtype=np.int64)  # each listed point's cell (-1: dropped or outside)
        c = np.floor((sp.astype(np.float32) - lo) / cell).astype(np.int64)  # the float32 points actors get
        inside = keep & np.all((c >= 0) & (c < dims), axis=1)
        seeds[inside] = (c[inside, 0] * dims[1] + c[inside, 1]) * dims[2] + c[inside, 2]
        parts = _seed_parts(free, seeds[inside], label)
        if parts.shape[0]:
            reach = label == int(np.argmax(parts)) + 1  # the most cells; ties to the earliest listed point's
        else:
            labels, best = _largest_component(free)
            reach = (labels == best) & (best > 0)
        in_pool = inside & reach[np.maximum(seeds, 0)]
        split = np.array([parts.shape[0], parts.sum(), np.sum(keep & ~in_pool)], np.int64)
        return np.ascontiguousarray(reach.ravel()), in_pool, split

    def compile_kernels(self):
        """Compile (or load from Numba's cache) the grid's kernels, the flood fill and the clearance query,
        by running them on one cell and one point (nothing changes). A pool read from its cache file runs
        neither, and a warm-up child that builds its environment from one must still leave them
        compiled for the run's worlds whose pools are not cached."""
        free = np.ones((1, 1, 1), dtype=bool)
        _flood(free, np.zeros(1, np.int64), np.zeros(1, np.int32), 1)
        _seed_parts(free, np.zeros(1, np.int64), np.zeros(1, np.int32))
        _largest_component(free)
        self.distance_fn(self.pool[:1])

    @property
    def note(self):
        """One line when the listed spawn points fall in several components of the free space (the pool
        keeps one, :meth:`_reachable_cells`) or some with the clearance lie outside the pool, else None."""
        parts, cells, dropped = (int(v) for v in self.split)
        clearance = f"{self.radius + self.margin + 0.5 * self.cell:.3g} m"
        if parts > 1:
            return (
                f"its free space at clearance {clearance} splits the spawn points over {parts} parts: the pool "
                f"keeps the largest ({self.pool.shape[0]} of their {cells} cells of {self.cell:.3g} m) and drops "
                f"the {dropped} spawn point(s) outside it"
            )
        if dropped:
            return f"{dropped} spawn point(s) lie outside the pool's cells (clearance {clearance}) and are dropped"
        return None

    @property
    def nbytes(self) -> int:
        return int(self.pool.nbytes + self.spawn_points.nbytes + self.reach.nbytes)

    def path_lengths(self, starts, goals) -> np.ndarray:
        """(n,) float64 metres: the shortest path from each start to its goal through the pool's
        cells (:func:`path_lengths`), the distance SPL divides by."""
        starts = np.ascontiguousarray(starts, np.float64).reshape(-1, 3)
        goals = np.ascontiguousarray(goals, np.float64).reshape(-1, 3)
        return path_lengths(self.reach, self.dims, self.lo, float(self.cell), starts, goals)

    def sample_spawns(self, rng: np.random.Generator, n: int):
        """(n,3) float32 positions and (n,) float32 yaws."""
        if self.mode == "points":
            idx = rng.integers(0, self.spawn_points.shape[0], size=n)
            pos = self.spawn_points[idx].astype(np.float64)
        else:
            idx = rng.integers(0, self.pool.shape[0], size=n)
            jitter = rng.uniform(-0.25 * self.cell, 0.25 * self.cell, size=(n, 3))
            pos = self.pool[idx]
            cand = pos + jitter
            if n:
                ok = np.asarray(self.distance_fn(cand), np.float64) >= self.radius + self.margin
                pos = np.where(ok[:, None], cand, pos)
        yaw = rng.uniform(-np.pi, np.pi, size=n)
        return pos.astype(np.float32), yaw.astype(np.float32)

    def sample_pool(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """(n,3) float32: pool centres drawn uniformly (goals drawn before their spawns)."""
        return self.pool[rng.integers(0, self.pool.shape[0], size=n)].astype(np.float32)

    def spawn_candidates(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """(n, K, 3) float64: per row, K = ``GOAL_CANDIDATES`` pool centres drawn uniformly, or, in
        ``"points"`` mode, every listed spawn point."""
        if self.mode == "points":
            return np.broadcast_to(self.spawn_points.astype(np.float64), (n,) + self.spawn_points.shape).copy()
        return self.pool[rng.integers(0, self.pool.shape[0], size=(n, GOAL_CANDIDATES))]

    def finish_spawns(self, rng: np.random.Generator, pos):
        """Chosen candidates (n,3) as spawns: jittered like :meth:`sample_spawns` (free mode) and a uniform
        yaw; returns (n,3) float32 positions and (n,) float32 yaws."""
        n = pos.shape[0]
        if self.mode != "points" and n:
            cand = pos + rng.uniform(-0.25 * self.cell, 0.25 * self.cell, size=(n, 3))
            ok = np.asarray(self.distance_fn(cand), np.float64) >= self.radius + self.margin
            pos = np.where(ok[:, None], cand, pos)
        yaw = rng.uniform(-np.pi, np.pi, size=n)
        return pos.astype(np.float32), yaw.astype(np.float32)

    def sample_goals(self, rng: np.random.Generator, spawns, dmin, dmax):
        """(n,3) float32 goals, one per spawn row."""
        n = spawns.shape[0]
        idx = rng.integers(0, self.pool.shape[0], size=(n, GOAL_CANDIDATES))
        cand = self.pool[idx]  # (n, K, 3)
        d = np.linalg.norm(cand - spawns.astype(np.float64)[:, None, :], axis=2)
        ok = (d >= dmin) & (d <= dmax)
        miss = np.abs(d - np.clip(d, dmin, dmax))
        pick = np.where(ok.any(axis=1), np.argmax(ok, axis=1), np.argmin(miss, axis=1))
        return cand[np.arange(n), pick].astype(np.float32)
