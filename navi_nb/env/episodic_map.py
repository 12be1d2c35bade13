"""The episodic map: what each actor has learnt of its world this episode, as a 2-D grid it observes.

Each actor holds a grid of square cells (``map_cell`` metres a side) over the x-z plane of its world's
field cube, cleared at every episode start and updated after every observation from what the actor
itself sensed (the world's own geometry is never read):

- visits: how many observations the actor's centre made in the cell (a count, saturating at 255);
- seen free: a ray of the actor's sensor crossed the cell before its hit;
- seen occupied: a ray of the actor's sensor hit a surface in the cell.

Only rays within ``map_band`` radians of horizontal count (the map is a slice at the actor's height): each
one's hit point, projected onto the x-z plane, ends a 2-D walk through the cells from the actor's centre
(every cell the segment crosses, in order, by a grid traversal); the cells before the last are seen free,
the last seen occupied when the ray hit and seen free when it ran out of range. A cell can be both (a wall
across it). Walks stop at the grid's side.

The observation (the ``map`` entry of ``obs_layout``) is an egocentric ``S x S`` crop (``S = map_crop``)
turned to the actor's heading, channel by channel (``map_channels``: 3 = visits, seen free, seen occupied;
2 = visits, seen occupied), each channel row-major with row 0 farthest ahead and column 0 leftmost: crop
cell ``(r, q)`` reads the map cell holding the point ``((S - 1) / 2 - r) * map_cell`` metres ahead of the
actor's centre and ``(q - (S - 1) / 2) * map_cell`` to its right (nearest cell, no interpolation). Visits
read ``log1p(count) / log1p(255)``, the seen flags 0 or 1, and points outside the grid 0.

With ``map_coarse`` = k > 0 the crop gains one more channel after those: the visits over coarse cells of k x k
map cells (``k * map_cell`` metres a side, aligned with the map's cells at the cube's corner), read at the same
``S x S`` points spaced ``k * map_cell`` apart, so the actor sees where it has been k times as far. Each actor
keeps the coarse counts beside its grid (a visit counts in its cell's coarse cell too, saturating at 255 on its
own); a point reads the coarse cell of the map cell it falls in, 0 off the map's grid.

Every actor's grid has the cells of the largest world of the set (each world's grid starts at its own cube's
corner, the coarse counts after the largest world's cells in byte 0); the grids are ``(actors, cells, 2)``
uint8 (visits, seen bits), part of the environment's state.
The update and the crop run in one kernel over ranges of actors, each actor writing its own grid and its
own observation rows only, so the bits do not depend on the thread count.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from navi_nb.env.config import MAX_MAP_CROP, EnvConfig, EnvConfigError
from navi_nb.env.motion import field_cube
from navi_nb.threads import RangeKernel

VISITS, SEEN = 0, 1  # the two bytes of a cell
SEEN_FREE, SEEN_OCCUPIED = 1, 2  # the bits of SEEN
VISIT_CAP = 255
CHANNELS = {3: ("visits", "seen_free", "seen_occupied"), 2: ("visits", "seen_occupied")}
"""The crop's channels, in order, for each ``map_channels``."""
MAP_GRAIN = 8
"""The fewest actors a thread is handed at once (each is a few microseconds of walks and crop)."""
_INV_LOG_CAP = 1.0 / math.log1p(VISIT_CAP)


def map_columns(cfg) -> int:
    """The observation columns the map takes under ``cfg``, an EnvConfig or a dict of its settings (the defaults
    for those it lacks; a training config's ``env``), 0 when the map is off."""
    get = cfg.get if isinstance(cfg, dict) else (lambda name, _default: getattr(cfg, name))
    cell, crop = get("map_cell", 0), get("map_crop", EnvConfig.map_crop)
    channels, coarse = get("map_channels", EnvConfig.map_channels), get("map_coarse", EnvConfig.map_coarse)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (cell, crop, channels, coarse)):
        return 0  # not settings the environment takes: its validation names them
    if not (cell > 0 and 2 <= crop <= MAX_MAP_CROP and channels in (2, 3)):
        return 0
    return int(crop) ** 2 * (int(channels) + (1 if coarse > 0 else 0))


def map_bytes(n_actors, n_cells) -> int:
    """Bytes of ``n_actors`` grids of ``n_cells`` cells (two uint8 each)."""
    return 2 * int(n_actors) * int(n_cells)


class MapGrid:
    """The map's geometry over a world set (shared, not per actor): per world the x-z corner of its field
    cube (``lo`` (W, 2) float64) and its cells per axis (``dims`` (W, 2) int64); cell ``(ix, iz)`` is
    index ``ix * dims[w, 1] + iz`` of an actor's grid. With ``coarse`` = k > 0, coarse cell
    ``(ix // k, iz // k)`` is index ``fine_cells + (ix // k) * coarse_dims[w, 1] + iz // k``. ``n_cells``:
    the cells a grid holds, the largest world's ``fine_cells`` and then its coarse cells."""

    def __init__(self, world_set, cell, coarse=0):
        self.cell = float(cell)
        self.coarse = int(coarse)
        los, dims = [], []
        for wd in world_set.worlds:
            lo, hi = field_cube(wd)
            los.append(lo[[0, 2]])
            dims.append(np.maximum(1, np.ceil((hi[[0, 2]] - lo[[0, 2]]) / self.cell - 1e-9)).astype(np.int64))
        self.lo = np.stack(los).astype(np.float64)
        self.dims = np.stack(dims).astype(np.int64)
        self.fine_cells = int(np.max(self.dims[:, 0] * self.dims[:, 1]))
        k = max(self.coarse, 1)
        self.coarse_dims = (self.dims + k - 1) // k if self.coarse else np.zeros_like(self.dims)
        self.n_cells = self.fine_cells + int(np.max(self.coarse_dims[:, 0] * self.coarse_dims[:, 1]))

    def tables(self) -> tuple:
        """The kernels' bundle ``(lo, dims, cell, (coarse, coarse_dims, fine_cells))``."""
        return (self.lo, self.dims, self.cell, (self.coarse, self.coarse_dims, self.fine_cells))

    def cell_of(self, w, x, z) -> int:
        """The index of the cell of world ``w`` holding the point ``(x, z)`` (for tests and pictures), -1 outside."""
        ix = math.floor((float(x) - self.lo[w, 0]) / self.cell)
        iz = math.floor((float(z) - self.lo[w, 1]) / self.cell)
        nx, nz = self.dims[w]
        return int(ix * nz + iz) if 0 <= ix < nx and 0 <= iz < nz else -1

    def image(self, grid, w) -> np.ndarray:
        """One actor's grid ``(cells, 2)`` in world ``w`` as ``(nx, nz, 2)`` (x down the rows, z across)."""
        nx, nz = (int(v) for v in self.dims[w])
        return np.asarray(grid)[: nx * nz].reshape(nx, nz, 2)


def band_rays(sensor, band) -> tuple:
    """The map's rays of ``sensor``: those within ``band`` radians of horizontal, as ``(index, xz)``: each one's
    column in an actor's flattened ``(Az, El)`` rays (int64) and its direction's x and z in the actor frame
    (float64, horizontal length ``cos(elevation)``). Raises EnvConfigError when the band holds no row."""
    rows = np.flatnonzero(np.abs(sensor.elevations) <= band + 1e-12)
    if not rows.shape[0]:
        nearest = float(np.min(np.abs(sensor.elevations)))
        raise EnvConfigError(
            f"env config: map_band {band} holds none of the sensor's {sensor.el_count} elevation rows (the "
            f"nearest to horizontal is {nearest:.4g} rad from it); widen map_band or use more rows"
        )
    az = np.repeat(np.arange(sensor.az_count), rows.shape[0])
    el = np.tile(rows, sensor.az_count)
    xz = sensor.directions[az, el][:, [0, 2]].astype(np.float64)
    return (az * sensor.el_count + el).astype(np.int64), np.ascontiguousarray(xz)


@njit(inline="always", cache=True)
def _cell(x, lo, inv_cell):
    return int(math.floor((x - lo) * inv_cell))


@njit(inline="always", cache=True)
def _walk(maps, i, cells, x0, z0, x1, z1, hit):
    """Mark the cells the segment ``(x0, z0) -> (x1, z1)`` crosses in actor ``i``'s grid: seen free before
    the last, the last seen occupied with ``hit`` (else free); stops at the grid's side. cells ``(lo0, lo1,
    nx, nz, inv_cell, cell)``: the grid of the actor's world (its corner, cells per axis, cell size)."""
    lo0, lo1, nx, nz, inv_cell, cell = cells
    ix = min(max(_cell(x0, lo0, inv_cell), 0), nx - 1)
    iz = min(max(_cell(z0, lo1, inv_cell), 0), nz - 1)
    ex = _cell(x1, lo0, inv_cell)
    ez = _cell(z1, lo1, inv_cell)
    dx = x1 - x0
    dz = z1 - z0
    sx = 1 if dx > 0.0 else -1
    sz = 1 if dz > 0.0 else -1
    # the segment's parameter (0 at the start, 1 at the end) where it crosses the next x and z cell side
    tx = ((ix + (1 if sx > 0 else 0)) * cell + lo0 - x0) / dx if dx != 0.0 else math.inf
    tz = ((iz + (1 if sz > 0 else 0)) * cell + lo1 - z0) / dz if dz != 0.0 else math.inf
    ddx = cell / abs(dx) if dx != 0.0 else math.inf
    ddz = cell / abs(dz) if dz != 0.0 else math.inf
    for _ in range(abs(ex - ix) + abs(ez - iz)):
        if ix < 0 or ix >= nx or iz < 0 or iz >= nz:
            return
        maps[i, ix * nz + iz, 1] |= 1
        if tx < tz:
            ix += sx
            tx += ddx
        else:
            iz += sz
            tz += ddz
    if 0 <= ex < nx and 0 <= ez < nz:
        maps[i, ex * nz + ez, 1] |= 2 if hit else 1


@njit(inline="always", cache=True)
def _centre_cell(grid, w, x0, z0):
    """The cell ``(ix, iz)`` of world ``w``'s grid that a visit of a centre at ``(x0, z0)`` (float64) counts in
    (clamped to the grid: a centre is never off it by more than the cube's margin)."""
    lo, dims, cell, _coarse = grid
    nx, nz = dims[w, 0], dims[w, 1]
    inv_cell = 1.0 / cell
    ix = min(max(_cell(x0, lo[w, 0], inv_cell), 0), nx - 1)
    iz = min(max(_cell(z0, lo[w, 1], inv_cell), 0), nz - 1)
    return ix, iz


@njit(inline="always", cache=True)
def _coarse_cell(coarse, w, ix, iz):
    """The grid index of the coarse cell holding map cell ``(ix, iz)`` of world ``w`` (``coarse`` > 0)."""
    k, coarse_dims, fine_cells = coarse
    return fine_cells + (ix // k) * coarse_dims[w, 1] + iz // k


@njit(inline="always", cache=True)
def _update(maps, i, grid, rays, traced, r):
    """Actor ``i``'s grid after trace row ``r``'s observation: the visit of its centre, then its rays' walks."""
    lo, dims, cell, coarse = grid
    ray_index, ray_xz = rays
    origins, yaws, world_index, depth, hit = traced
    w = world_index[r]
    lo0, lo1 = lo[w, 0], lo[w, 1]
    nx, nz = dims[w, 0], dims[w, 1]
    inv_cell = 1.0 / cell
    x0 = np.float64(origins[r, 0])
    z0 = np.float64(origins[r, 2])
    cx, cz = _centre_cell(grid, w, x0, z0)
    c = cx * nz + cz
    if maps[i, c, 0] < VISIT_CAP:
        maps[i, c, 0] += 1
    if coarse[0] > 0:
        c = _coarse_cell(coarse, w, cx, cz)
        if maps[i, c, 0] < VISIT_CAP:
            maps[i, c, 0] += 1
    psi = np.float64(yaws[r])
    s, co = math.sin(psi), math.cos(psi)
    cells = (lo0, lo1, nx, nz, inv_cell, cell)
    for k in range(ray_index.shape[0]):
        q = ray_index[k]
        d = np.float64(depth[r, q])
        wx = ray_xz[k, 0] * co - ray_xz[k, 1] * s  # the actor frame turned by the yaw (motion.py's frames)
        wz = ray_xz[k, 0] * s + ray_xz[k, 1] * co
        _walk(maps, i, cells, x0, z0, x0 + d * wx, z0 + d * wz, hit[r, q])


@njit(inline="always", cache=True)
def _point_cell(pose, lo0, lo1, inv_cell, f, g):
    """The map cell ``(ix, iz)`` (unclamped) holding the point ``f`` metres ahead of and ``g`` to the right of
    the pose ``(x0, z0, sin(yaw), cos(yaw))``."""
    x0, z0, s, co = pose
    return _cell(x0 + f * s + g * co, lo0, inv_cell), _cell(z0 - f * co + g * s, lo1, inv_cell)


@njit(inline="always", cache=True)
def _visits_value(visits):
    """A visit count as the crop reads it: ``log1p(count) / log1p(255)``."""
    return np.float32(math.log1p(np.float64(visits)) * _INV_LOG_CAP)


@njit(inline="always", cache=True)
def _crop(maps, i, grid, traced, r, out, row):
    """Actor ``i``'s crop around trace row ``r``'s pose into row ``row`` of the observations."""
    lo, dims, cell, coarse = grid
    origins, yaws, world_index, _depth, _hit = traced
    obs, col, size, channels = out
    w = world_index[r]
    nx, nz = dims[w, 0], dims[w, 1]
    inv_cell = 1.0 / cell
    x0 = np.float64(origins[r, 0])
    z0 = np.float64(origins[r, 2])
    psi = np.float64(yaws[r])
    pose = (x0, z0, math.sin(psi), math.cos(psi))
    lo0, lo1 = lo[w, 0], lo[w, 1]
    half = 0.5 * (size - 1)
    plane = size * size
    for a in range(size):
        f = (half - a) * cell  # metres ahead
        for b in range(size):
            g = (b - half) * cell  # metres to the right
            ix, iz = _point_cell(pose, lo0, lo1, inv_cell, f, g)
            k = col + a * size + b
            visits, seen = 0, 0
            if 0 <= ix < nx and 0 <= iz < nz:
                visits = maps[i, ix * nz + iz, 0]
                seen = maps[i, ix * nz + iz, 1]
            obs[row, k] = _visits_value(visits)
            if channels == 3:
                obs[row, k + plane] = np.float32(seen & 1)
            obs[row, k + (channels - 1) * plane] = np.float32((seen >> 1) & 1)
    if coarse[0] > 0:
        far = coarse[0] * cell  # the same points, k map cells apart
        for a in range(size):
            for b in range(size):
                ix, iz = _point_cell(pose, lo0, lo1, inv_cell, (half - a) * far, (b - half) * far)
                visits = 0
                if 0 <= ix < nx and 0 <= iz < nz:
                    visits = maps[i, _coarse_cell(coarse, w, ix, iz), 0]
                obs[row, col + channels * plane + a * size + b] = _visits_value(visits)


@njit(cache=True, nogil=True)
def map_span(i0, i1, grid, rays, traced, jobs, maps, out):
    """Actors ``i0 .. i1 - 1``'s map update and crop, each actor alone.

    grid: :meth:`MapGrid.tables`. rays: :func:`band_rays`. traced ``(origins (N,3) float32, yaws (N,) float32,
    world_index (N,) int32, depth (N,R) float32, hit (N,R) bool)``: a trace's rows. jobs ``(kept, kept_dest,
    fresh, fresh_dest)`` (A,) int64 each: actor i's grid is updated from trace row ``kept[i]`` (-1: none) and
    its crop written to row ``kept_dest[i]`` of the observations; then, where ``fresh[i]`` >= 0, cleared (a new
    episode), updated from row ``fresh[i]`` and cropped into row ``fresh_dest[i]``. maps (A, cells, 2) uint8.
    out ``(obs (M,D) float32, first column, crop size, channels)``.
    """
    kept, kept_dest, fresh, fresh_dest = jobs
    for i in range(i0, i1):
        if kept[i] >= 0:
            _update(maps, i, grid, rays, traced, kept[i])
            _crop(maps, i, grid, traced, kept[i], out, kept_dest[i])
        if fresh[i] >= 0:
            for c in range(maps.shape[1]):
                maps[i, c, 0] = 0
                maps[i, c, 1] = 0
            _update(maps, i, grid, rays, traced, fresh[i])
            _crop(maps, i, grid, traced, fresh[i], out, fresh_dest[i])


@njit(cache=True)
def visits_after(grid, maps, world_index, pos, out):
    """Each actor's visit count of the cell its centre is in, as its grid will hold it once the observation from
    ``pos`` is recorded (:func:`map_span`'s update from the same pose): the count there now plus 1, saturating
    at 255, so >= 1. grid: :meth:`MapGrid.tables`; maps (A, cells, 2) uint8; world_index (A,) int32; pos (A, 3)
    float32; writes out (A,) int32. The count bonus's n (``reward_count``, ``tasks.score_step``)."""
    dims = grid[1]
    for i in range(pos.shape[0]):
        w = world_index[i]
        cx, cz = _centre_cell(grid, w, np.float64(pos[i, 0]), np.float64(pos[i, 2]))
        v = np.int32(maps[i, cx * dims[w, 1] + cz, 0])
        out[i] = v + 1 if v < VISIT_CAP else VISIT_CAP


def _actors(grid, rays, traced, jobs, maps, out):
    return maps.shape[0]


update_maps = RangeKernel(map_span, _actors, MAP_GRAIN)
"""Every actor's map update and crop (arguments as :func:`map_span`'s after ``i0, i1``)."""


class EpisodicMap:
    """The map of an environment: its geometry (:class:`MapGrid`), the sensor's rays it reads
    (:func:`band_rays`) and the crop's place in the observation. The grids themselves are the environment's
    state (``maps``, (actors, cells, 2) uint8), handed to :meth:`observe`."""

    def __init__(self, world_set, sensor, cfg, n_actors, available=None):
        from navi_nb.ram import check_fits

        self.grid = MapGrid(world_set, cfg.map_cell, cfg.map_coarse)
        self.rays = band_rays(sensor, cfg.map_band)
        need = map_bytes(n_actors, self.grid.n_cells)
        check_fits(
            need,
            f"the map (map_cell={cfg.map_cell}: {self.grid.n_cells:,} cells a grid, {int(n_actors):,} actors)",
            available=available,
            error=EnvConfigError,
        )
        self.n_cells = self.grid.n_cells
        self.crop, self.channels = cfg.map_crop, cfg.map_channels
        self.seconds = 0.0  # time spent updating and cropping, summed (bench train reads it)

    def observe(self, maps, traced, kept, fresh, obs, column):
        """Update the grids ``maps`` from the trace rows ``traced`` (:func:`map_span`) and write the crops into
        ``obs`` from ``column`` on. kept ``(actors, dest)``: trace row j is actor ``actors[j]``'s observation
        now (its crop to row ``dest[j]``), or None; fresh ``(actors, first)``: trace row ``first + j`` is the
        first observation of actor ``actors[j]``'s new episode (its grid cleared first; its crop to row
        ``actors[j]``), after the kept one, or None."""
        import time

        t0 = time.perf_counter()
        A = maps.shape[0]
        jobs = np.full((4, A), -1, np.int64)
        if kept is not None:
            jobs[0, kept[0]] = np.arange(kept[0].shape[0])
            jobs[1, kept[0]] = kept[1]
        if fresh is not None:
            jobs[2, fresh[0]] = fresh[1] + np.arange(fresh[0].shape[0])
            jobs[3, fresh[0]] = fresh[0]
        origins, yaws, wi, depth, hit = traced
        n = origins.shape[0]
        traced = (origins, yaws, wi, depth.reshape(n, -1), hit.reshape(n, -1))
        update_maps(self.grid.tables(), self.rays, traced, tuple(jobs), maps, (obs, column, self.crop, self.channels))
        self.seconds += time.perf_counter() - t0

    def compile(self, maps, obs, column):
        """Compile (or load) the kernel for these argument types without running it."""
        from numba import typeof

        rows = (np.zeros((0, 3), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int32))
        traced = rows + (np.zeros((0, 1), np.float32), np.zeros((0, 1), bool))
        jobs = tuple(np.zeros(maps.shape[0], np.int64) for _ in range(4))
        args = (self.grid.tables(), self.rays, traced, jobs, maps, (obs, column, self.crop, self.channels))
        update_maps.compile(tuple(typeof(a) for a in args))


def replay_map(world_set, w, sensor, cfg, positions, yaws, depth, hit) -> np.ndarray:
    """The grid ``(cells, 2)`` an actor holds after observing from ``positions`` (T,3) / ``yaws`` (T,) in world
    ``w`` with the rays ``depth`` / ``hit`` (T, Az, El) traced there, one observation after another from a
    cleared grid: the map an episode ended with, rebuilt from its logged poses (``navi-nb render``)."""
    em = EpisodicMap(world_set, sensor, cfg, 1)
    maps = np.zeros((1, em.n_cells, 2), np.uint8)
    obs = np.zeros((1, map_columns(cfg)), np.float32)
    origins = np.ascontiguousarray(positions, dtype=np.float32)
    yaw = np.ascontiguousarray(yaws, dtype=np.float32)
    wi = np.full(origins.shape[0], w, np.int32)
    one = np.zeros(1, np.int64)
    for t in range(origins.shape[0]):
        traced = (origins[t : t + 1], yaw[t : t + 1], wi[t : t + 1], depth[t : t + 1], hit[t : t + 1])
        em.observe(maps, traced, (one, one) if t else None, None if t else (one, 0), obs, 0)
    return maps[0]
