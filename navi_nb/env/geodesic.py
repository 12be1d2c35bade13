"""Geodesic distance fields: the distance to a goal along the shortest path through free space.

A point-goal episode's progress reward can be measured along the shortest path rather than the
straight line (``progress = "geodesic"``, the default), as Habitat's PointNav reward is. At each
episode start the environment runs Dijkstra's algorithm from the goal over the reachability grid
of the actor's world (the spawn pool's cells, ``navi_nb/env/spawn.py``): every pool cell gets the
length of the shortest chain of moves to one of its 26 neighbours (edge lengths 1, sqrt 2, sqrt 3
cells) that ends at the goal's cell, plus the straight distance from that cell's centre to the goal.
During the episode the field is read at the actor's centre by trilinear interpolation between the
eight nearest cell centres, weighted over those that lie in the pool (so a step inside one cell
still counts and no value from the far side of a wall is mixed in: pool centres on opposite sides
of a wall are at least twice the clearance apart, more than a cell's diagonal).

A chain of 26-neighbour moves is never shorter than the true path and is longer by at most
``1 / cos`` of the angle between the path and the nearest move direction, about 8 % in the
worst direction; ENVIRONMENT states the measured error against analytic shortest paths.

Fields live per actor, one float32 per pool cell of its world (``n_max`` the largest pool of the
run's worlds); the per-world tables (which grid cell is which pool slot and back) are shared.
Pool cells the goal cannot reach (another component of the pool) read as ``-1`` and are left out
of the interpolation like cells outside the pool. Everything is integer-indexed and summed in a
fixed order, with ties in the heap broken by slot index: a field depends on its goal and world
only, never on the thread count or on which other actors reset with it.
"""

from __future__ import annotations

import math
import time

import numpy as np
from numba import njit

from navi_nb.env.config import EnvConfigError
from navi_nb.env.tasks import straight_distance
from navi_nb.ram import check_fits
from navi_nb.threads import defer

UNREACHED = np.float32(-1.0)
# the index of a 32-bit word's single set bit: de Bruijn's sequence 0x077CB531, as the bit hacks write it
_DEBRUIJN_BIT = np.array(
    [
        0,
        1,
        28,
        2,
        29,
        14,
        24,
        3,
        30,
        22,
        20,
        15,
        25,
        17,
        4,
        8,
        31,
        27,
        13,
        23,
        21,
        19,
        16,
        7,
        26,
        12,
        18,
        6,
        11,
        5,
        10,
        9,
    ],
    np.int64,
)


# ---------------------------------------------------------------------------
FIELD_COARSEN = 2
"""Field cells per axis are this many spawn-grid cells: 8 times fewer cells to search, a field in
well under a millisecond for a house (the full grid costs several: more than a tick's budget)."""


@njit(cache=True)
def _coarse_tables(reach, dims, cdims, slot_of_cell, cell_of_slot, edges):
    """A world's field grid from its spawn grid: a coarse cell holds FIELD_COARSEN^3 fine cells and is in
    the field's pool when one of them is in the spawn pool. ``slot_of_cell`` (prod cdims,) int32 is
    filled with slots (-1 outside), ``cell_of_slot`` with their cells, and ``edges`` (slots,) uint32 with
    bit ``(ox+1)*9 + (oy+1)*3 + (oz+1)`` set when a pool cell of the slot is a 26-neighbour of a pool cell
    of the coarse neighbour at offset (ox, oy, oz): two coarse cells are joined only where the spawn
    grid itself joins them, so no edge crosses a wall the spawn pool does not cross. Returns the slot
    count."""
    f = FIELD_COARSEN
    nx, ny, nz = dims[0], dims[1], dims[2]
    cy, cz = cdims[1], cdims[2]
    for c in range(slot_of_cell.shape[0]):
        slot_of_cell[c] = -1
    n = 0
    for c in range(reach.shape[0]):
        if reach[c]:
            ix, iy, iz = _grid_coords(np.int64(c), dims)
            cc = ((ix // f) * cy + iy // f) * cz + iz // f
            if slot_of_cell[cc] < 0:
                slot_of_cell[cc] = n
                n += 1
    for cc in range(slot_of_cell.shape[0]):
        s = slot_of_cell[cc]
        if s >= 0:
            cell_of_slot[s] = cc
            edges[s] = 0
    for c in range(reach.shape[0]):
        if not reach[c]:
            continue
        ix, iy, iz = _grid_coords(np.int64(c), dims)
        s = slot_of_cell[((ix // f) * cy + iy // f) * cz + iz // f]
        for ox in range(-1, 2):
            jx = ix + ox
            if jx < 0 or jx >= nx:
                continue
            for oy in range(-1, 2):
                jy = iy + oy
                if jy < 0 or jy >= ny:
                    continue
                for oz in range(-1, 2):
                    jz = iz + oz
                    if jz < 0 or jz >= nz or not reach[(jx * ny + jy) * nz + jz]:
                        continue
                    dx = jx // f - ix // f
                    dy = jy // f - iy // f
                    dz = jz // f - iz // f
                    if dx != 0 or dy != 0 or dz != 0:
                        edges[s] |= np.uint32(1) << np.uint32((dx + 1) * 9 + (dy + 1) * 3 + (dz + 1))
    return n


class FieldGrids:
    """The field grids of a run's worlds, packed for the field kernels (shared by every actor).

    ``tables`` is the tuple the kernels take: ``(slot_of_cell, cell_off, cell_of_slot, slot_off, edges,
    dims, lo, cell)``: ``slot_of_cell[cell_off[w] + c]`` the slot of world ``w``'s field cell ``c`` (-1
    outside its pool), ``cell_of_slot[slot_off[w] + s]`` the cell of slot ``s`` and ``edges[slot_off[w]
    + s]`` its joined neighbours (:func:`_coarse_tables`), ``dims`` (W,3) int64, ``lo`` (W,3) float64 the
    grid's corner, ``cell`` (W,) float64 its cell size (FIELD_COARSEN spawn cells).
    """

    def __init__(self, spawners):
        slots, cells, edges, cell_off, slot_off, all_dims = [], [], [], [0], [0], []
        for sp in spawners:
            dims = np.asarray(sp.dims, np.int64)
            cdims = -(-dims // FIELD_COARSEN)
            reach = np.ascontiguousarray(sp.reach, bool)
            slot = np.empty(int(np.prod(cdims)), np.int32)
            cell = np.empty(slot.shape[0], np.int32)
            edge = np.empty(slot.shape[0], np.uint32)
            n = _coarse_tables(reach, dims, cdims, slot, cell, edge)
            slots.append(slot)
            cells.append(cell[:n])
            edges.append(edge[:n])
            all_dims.append(cdims)
            cell_off.append(cell_off[-1] + slot.shape[0])
            slot_off.append(slot_off[-1] + n)
        self.n_slots = np.diff(np.asarray(slot_off, np.int64))
        self.n_max = max(1, int(self.n_slots.max()))
        self.tables = (
            np.concatenate(slots),
            np.asarray(cell_off, np.int64),
            np.concatenate(cells),
            np.asarray(slot_off, np.int64),
            np.concatenate(edges),
            np.stack(all_dims),
            np.stack([np.asarray(sp.lo, np.float64) for sp in spawners]),
            np.asarray([FIELD_COARSEN * float(sp.cell) for sp in spawners], np.float64),
        )

    @property
    def nbytes(self) -> int:
        """Bytes of the shared tables."""
        return int(sum(a.nbytes for a in self.tables))

    def field_bytes_per_actor(self) -> int:
        """Bytes of one actor's field (float32 per slot of the largest pool)."""
        return 4 * self.n_max


@njit(inline="always", cache=True)
def _grid_coords(c, dims):
    nz = dims[2]
    ny = dims[1]
    return c // (ny * nz), (c // nz) % ny, c % nz


@njit(cache=True)
def _one_field(tables, w, gx, gy, gz, out, bucket, count):
    """Dijkstra from the goal (gx, gy, gz) over world ``w``'s pool: ``out[s]`` (n_max,) float32 the
    path length in metres from slot ``s``'s centre to the goal, UNREACHED where no path joins them
    (and beyond the pool's slots).

    The queue is Dial's: buckets one cell wide. Every edge is at least a cell long, so when bucket
    ``k`` comes up nothing can lower the cells in it any more, and the order within a bucket changes
    no value (each final value is a minimum over final neighbours). Edges reach at most two buckets
    ahead, so four buckets are used round-robin: ``bucket`` (4, n_max) int64 and ``count`` (4,). A cell
    is queued again when its value falls into another bucket (at most one entry a bucket) and skipped
    when popped stale. A relaxation does not ask whether the neighbour is settled: a settled value lies in
    this bucket or an earlier one, below ``f + cell``, so the edge never lowers it (and should rounding
    ever let it, the lowered value is never read: ``out`` keeps the settled one). That test, taken the
    other way about half the time, was mispredicted often enough to cost 45 % of a field."""
    slot_of_cell, cell_off, cell_of_slot, slot_off, edges, dims_w, lo_w, cell_w = tables
    dims = dims_w[w]
    lo = lo_w[w]
    cell = cell_w[w]
    nx, ny, nz = dims[0], dims[1], dims[2]
    c0, s0 = cell_off[w], slot_off[w]
    dist = np.empty(out.shape[0], np.float64)
    for s in range(out.shape[0]):
        out[s] = UNREACHED
        dist[s] = np.inf
    for b in range(4):
        count[b] = 0
    ix = int(math.floor((gx - lo[0]) / cell))
    iy = int(math.floor((gy - lo[1]) / cell))
    iz = int(math.floor((gz - lo[2]) / cell))
    if ix < 0 or iy < 0 or iz < 0 or ix >= nx or iy >= ny or iz >= nz:
        return
    g_slot = slot_of_cell[c0 + (ix * ny + iy) * nz + iz]
    if g_slot < 0:
        return
    # seeds: the goal's cell and the cells joined to it, at their straight distance from the goal (a
    # single seed would add the goal's offset from its cell's centre to every value)
    inv = 1.0 / cell
    mask = edges[s0 + g_slot] | (np.uint32(1) << np.uint32(13))  # bit 13: offset (0, 0, 0), the cell itself
    k = 1 << 30
    for e in range(27):
        if not (mask >> np.uint32(e)) & np.uint32(1):
            continue
        jx, jy, jz = ix + e // 9 - 1, iy + (e // 3) % 3 - 1, iz + e % 3 - 1
        t = slot_of_cell[c0 + (jx * ny + jy) * nz + jz]
        cx = lo[0] + (jx + 0.5) * cell
        cy = lo[1] + (jy + 0.5) * cell
        cz = lo[2] + (jz + 0.5) * cell
        dist[t] = math.sqrt((cx - gx) ** 2 + (cy - gy) ** 2 + (cz - gz) ** 2)
        q = int(dist[t] * inv)
        bucket[q & 3, count[q & 3]] = t
        count[q & 3] += 1
        k = min(k, q)
    pending = count[0] + count[1] + count[2] + count[3]
    # per neighbour bit: the flat-index offset and the edge length
    offset = np.empty(27, np.int64)
    step_of = np.empty(27, np.float64)
    lengths = (0.0, cell, cell * math.sqrt(2.0), cell * math.sqrt(3.0))
    for e in range(27):
        ox, oy, oz = e // 9 - 1, (e // 3) % 3 - 1, e % 3 - 1
        offset[e] = (ox * ny + oy) * nz + oz
        step_of[e] = lengths[ox * ox + oy * oy + oz * oz]
    while pending > 0:
        b = k & 3
        while count[b] > 0:
            count[b] -= 1
            pending -= 1
            s = bucket[b, count[b]]
            f = dist[s]
            if out[s] >= 0.0 or int(f * inv) != k:
                continue  # settled already, or queued again since with a lower value
            out[s] = np.float32(f)
            here = c0 + np.int64(cell_of_slot[s0 + s])
            mask = edges[s0 + s]
            while mask:
                low = mask & (~mask + np.uint32(1))  # the lowest joined neighbour's bit
                mask ^= low
                e = _DEBRUIJN_BIT[np.uint32(low * np.uint32(0x077CB531)) >> np.uint32(27)]
                t = slot_of_cell[here + offset[e]]
                g = f + step_of[e]  # never below a settled neighbour's value: no test for those (see above)
                if g < dist[t]:
                    q = int(g * inv)
                    if dist[t] == np.inf or q != int(dist[t] * inv):  # at most one entry a bucket
                        bucket[q & 3, count[q & 3]] = t
                        count[q & 3] += 1
                        pending += 1
                    dist[t] = g
        k += 1


@njit(cache=True, nogil=True)
def goal_fields(rows, world_index, goal, tables, field):
    """The field of each actor in ``rows`` (int64) toward its goal ``goal[i]`` (A,3) float32, in its
    world ``world_index[i]``: row ``i`` of ``field`` (A, n_max) float32, each field computed alone (its
    own queue), so the bits depend on nothing else. One thread: a tick resets a few actors at most, and
    a ``parallel=True`` kernel would add seconds to a cold first run's compile for nothing."""
    n_max = field.shape[1]
    for j in range(rows.shape[0]):
        i = rows[j]
        bucket = np.empty((4, n_max), np.int64)
        count = np.zeros(4, np.int64)
        _one_field(
            tables,
            world_index[i],
            np.float64(goal[i, 0]),
            np.float64(goal[i, 1]),
            np.float64(goal[i, 2]),
            field[i],
            bucket,
            count,
        )


@njit(inline="always", cache=True)
def field_at(tables, w, values, px, py, pz):
    """The field ``values`` (n_max,) float32 of world ``w`` read at point (px, py, pz): trilinear over the
    eight nearest cell centres, weighted over those in the pool that the goal reaches; -1.0 when none is."""
    slot_of_cell, cell_off, cell_of_slot, slot_off, edges, dims_w, lo_w, cell_w = tables
    dims = dims_w[w]
    lo = lo_w[w]
    inv = 1.0 / cell_w[w]
    ux = (px - lo[0]) * inv - 0.5
    uy = (py - lo[1]) * inv - 0.5
    uz = (pz - lo[2]) * inv - 0.5
    ix = int(math.floor(ux))
    iy = int(math.floor(uy))
    iz = int(math.floor(uz))
    tx = ux - ix
    ty = uy - iy
    tz = uz - iz
    c0 = cell_off[w]
    acc = 0.0
    wsum = 0.0
    for k in range(8):
        ox = k >> 2
        oy = (k >> 1) & 1
        oz = k & 1
        jx = ix + ox
        jy = iy + oy
        jz = iz + oz
        if jx < 0 or jy < 0 or jz < 0 or jx >= dims[0] or jy >= dims[1] or jz >= dims[2]:
            continue
        s = slot_of_cell[c0 + (jx * dims[1] + jy) * dims[2] + jz]
        if s < 0:
            continue
        v = values[s]
        if v < 0.0:
            continue
        wt = (tx if ox else 1.0 - tx) * (ty if oy else 1.0 - ty) * (tz if oz else 1.0 - tz)
        acc += wt * np.float64(v)
        wsum += wt
    if wsum <= 0.0:
        return -1.0
    return acc / wsum


@njit(cache=True, nogil=True)
def progress_potential(geodesic, rows, pos, goal, world_index, tables, field, before, out):
    """The progress potential of actors ``rows`` at ``pos``: the geodesic field read there (``geodesic``)
    or the straight distance to the goal, float64 into ``out``. Where the field has no value (the actor
    pressed against geometry, no pool centre around it) the potential stays ``before`` (no progress)."""
    for j in range(rows.shape[0]):
        i = rows[j]
        if geodesic:
            px, py, pz = np.float64(pos[i, 0]), np.float64(pos[i, 1]), np.float64(pos[i, 2])
            g = field_at(tables, world_index[i], field[i], px, py, pz)
            out[i] = g if g >= 0.0 else before[i]
        else:
            out[i] = straight_distance(goal, pos, i)


@njit(cache=True)
def field_at_points(tables, w, values, points, out):
    """``field_at`` for many points of one world: (n,3) float64 -> out (n,) float64."""
    for q in range(points.shape[0]):
        out[q] = field_at(tables, w, values, points[q, 0], points[q, 1], points[q, 2])


@njit(cache=True)
def fields_at(rows, world_index, tables, field, points, out):
    """The field of each actor ``rows[j]`` read at its candidate points ``points[j]`` (n,K,3) float64:
    ``out`` (n,K) float64, -1.0 where it has no value."""
    for j in range(rows.shape[0]):
        i = rows[j]
        for k in range(points.shape[1]):
            out[j, k] = field_at(tables, world_index[i], field[i], points[j, k, 0], points[j, k, 1], points[j, k, 2])


def lattice_distance(a, b, cell) -> np.ndarray:
    """The length of the shortest chain of 26-neighbour moves from ``a`` to ``b`` (..., 3) in open space,
    in metres: with the offsets' sizes sorted ``p >= q >= r`` (cells), ``(p - q) + sqrt 2 (q - r) + sqrt 3 r``.
    A field's value divided by it is the detour ratio with the lattice's directional bias taken out
    (in sight, a field reads this distance, not the straight one)."""
    o = np.sort(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)) / cell, axis=-1)
    r, q, p = o[..., 0], o[..., 1], o[..., 2]
    return cell * ((p - q) + math.sqrt(2.0) * (q - r) + math.sqrt(3.0) * r)


def pick_in_band(dist, ratio, dmin, dmax, rmin, rmax):
    """(n,) int64: per row of candidates (n,K), the first whose distance ``dist`` lies in ``[dmin, dmax]``
    and whose detour ratio in ``[rmin, rmax]`` (rmax 0: no bound); else the first in the band; else the
    one closest to the band. Candidates with no distance (``dist < 0``) come last."""
    known = dist >= 0
    band = known & (dist >= dmin) & (dist <= dmax)
    both = band & (ratio >= rmin) & ((ratio <= rmax) if rmax > 0 else True)
    miss = np.where(known, np.abs(dist - np.clip(dist, dmin, dmax)), np.inf)
    return np.where(
        both.any(axis=1),
        np.argmax(both, axis=1),
        np.where(band.any(axis=1), np.argmax(band, axis=1), np.argmin(miss, axis=1)),
    )


def _start_fields(enabled, geodesic, rows, world_index, goal, pos, tables, field, dist):
    """The fields of ``rows`` (when ``enabled``) and their potential into ``dist``; returns the seconds the
    fields took (:meth:`GoalFields.start`)."""
    t0 = time.perf_counter()
    if enabled and rows.shape[0]:
        goal_fields(rows, world_index, goal, tables, field)
    seconds = time.perf_counter() - t0
    progress_potential(geodesic, rows, pos, goal, world_index, tables, field, dist, dist)
    return seconds


class GoalFields:
    """Each actor's geodesic field toward its goal, and the shared grids it is read on.

    ``enabled`` False (the explore task, or euclidean progress and goals) keeps no field: the kernels
    get empty stand-ins of the right types and compute straight distances.
    """

    def __init__(self, spawners, n_actors, enabled):
        self.enabled = bool(enabled)
        self.seconds = 0.0  # the fields' time on the calling thread (compute, settle)
        if self.enabled:
            self.grids = FieldGrids(spawners)
            self.tables = self.grids.tables
            need = n_actors * self.grids.field_bytes_per_actor()
            check_fits(
                need,
                f"geodesic fields for {n_actors} actors ({self.grids.field_bytes_per_actor() / 1024:.0f} KiB each)",
                error=EnvConfigError,
            )
            self.field = np.zeros((n_actors, self.grids.n_max), np.float32)
        else:
            self.grids = None
            i32, i64, f64 = np.zeros(1, np.int32), np.zeros(2, np.int64), np.ones(1, np.float64)
            self.tables = (i32, i64, i32, i64, np.zeros(1, np.uint32), np.ones((1, 3), np.int64), np.zeros((1, 3)), f64)
            self.field = np.zeros((n_actors, 1), np.float32)
        # the world and goal each actor's field was computed for (-1 and NaN: none yet)
        self.field_world = np.full(n_actors, -1, np.int64)
        self.field_goal = np.full((n_actors, 3), np.nan, np.float32)

    @property
    def bytes_per_actor(self) -> int:
        return int(self.field.nbytes // max(1, self.field.shape[0])) if self.enabled else 0

    @property
    def shared_bytes(self) -> int:
        return self.grids.nbytes if self.enabled else 0

    def compute(self, rows, world_index, goal):
        """The fields of actors ``rows`` (int64) toward their goals; adds the time taken to ``seconds``."""
        if self.enabled and rows.shape[0]:
            t0 = time.perf_counter()
            goal_fields(rows, world_index, goal, self.tables, self.field)
            self.field_world[rows] = world_index[rows]
            self.field_goal[rows] = goal[rows]
            self.seconds += time.perf_counter() - t0

    def start(self, geodesic, rows, world_index, goal, pos, dist):
        """:meth:`compute` for actors ``rows`` and then their potential at ``pos`` into ``dist``
        (:meth:`potential`), on a worker thread (``threads.defer``) while the caller goes on; returns the
        job, which :meth:`settle` waits for. The caller changes none of the arrays for ``rows`` meanwhile,
        and nothing reads their fields or ``dist`` before the job is settled."""
        if self.enabled:
            self.field_world[rows] = world_index[rows]
            self.field_goal[rows] = goal[rows]
        args = (self.enabled, geodesic and self.enabled, rows, world_index, goal, pos, self.tables, self.field, dist)
        return defer(_start_fields, *args)

    def settle(self, job):
        """Wait for a :meth:`start` job. ``seconds`` counts the fields' time on the caller's thread: the time
        they took when the caller computed them (one thread), else the time it waited for the worker."""
        t0 = time.perf_counter()
        took = job.result()
        self.seconds += took if job.here else time.perf_counter() - t0

    def compute_changed(self, world_index, goal):
        """The fields of the actors whose world or goal is not the one their field was computed for (a field
        is a pure function of the two: the others are already what :meth:`compute` would write)."""
        same = (self.field_world == world_index) & (self.field_goal == goal).all(axis=1)
        self.compute(np.flatnonzero(~same).astype(np.int64), world_index, goal)

    def potential(self, geodesic, rows, pos, goal, world_index, before, out):
        """The progress potential of ``rows`` into ``out`` (:func:`progress_potential`)."""
        progress_potential(
            geodesic and self.enabled, rows, pos, goal, world_index, self.tables, self.field, before, out
        )

    def read(self, rows, world_index, points) -> np.ndarray:
        """(n,K) float64: the fields of ``rows`` at ``points`` (n,K,3), -1 where they have no value."""
        out = np.empty(points.shape[:2], np.float64)
        fields_at(rows, world_index, self.tables, self.field, np.ascontiguousarray(points, np.float64), out)
        return out

    def eccentricity(self, w, start) -> float:
        """The longest geodesic distance (metres) from point ``start`` to any cell of world ``w``'s pool
        that it reaches: half of it bounds the pool's geodesic diameter from below, and twice it from above."""
        out = np.zeros((1, self.grids.n_max), np.float32)
        goal_fields(
            np.zeros(1, np.int64),
            np.array([w], np.int32),
            np.asarray(start, np.float32).reshape(1, 3),
            self.tables,
            out,
        )
        return float(out.max())

    def check_band(self, spawners, names, dmin, dmax):
        """Refuse a geodesic goal band that some world cannot hold: no two of its pool's points are ``dmin``
        apart along free space (twice the longest path from one point bounds that distance from above)."""
        for w, sp in enumerate(spawners):
            reach = 2.0 * self.eccentricity(w, sp.pool[0])
            if reach < dmin:
                raise EnvConfigError(
                    f"NavEnv: world {names[w]} has no two points {dmin} m apart along free space (at most "
                    f"{reach:.2f} m): goal band {dmin}..{dmax} m (goal_distance geodesic) cannot be met there"
                )

    def sample_goal_first(self, rows, groups, world_index, pos, yaw, goal, cfg, rng_spawn, rng_goal):
        """Episodes of actors ``rows`` drawn goal first: the goal uniform over the pool, its field, then the
        spawn among ``GOAL_CANDIDATES`` pool cells (or the world's spawn points) by the goal band and the
        detour ratio, both read from the field with its lattice bias divided out (:func:`lattice_distance`).
        ``groups``: (spawn sampler, its rows) per world, as the environment orders them; writes ``pos``,
        ``yaw`` and ``goal`` of those rows."""
        for spawner, sub in groups:
            goal[sub] = spawner.sample_pool(rng_goal, sub.shape[0])
        self.compute(rows, world_index, goal)
        geodesic = cfg.goal_distance == "geodesic"
        for spawner, sub in groups:
            cand = spawner.spawn_candidates(rng_spawn, sub.shape[0])  # (n, K, 3) float64
            field = self.read(sub, world_index, cand)
            g = goal[sub].astype(np.float64)[:, None, :]
            straight = np.linalg.norm(cand - g, axis=2)
            lattice = np.maximum(lattice_distance(cand, g, spawner.cell * FIELD_COARSEN), 1e-9)
            ratio = np.where(field >= 0, np.maximum(field / lattice, 1.0), -1.0)
            dist = np.where(field >= 0, ratio * straight if geodesic else straight, -1.0)
            pick = pick_in_band(
                dist, ratio, cfg.goal_min_distance, cfg.goal_max_distance, cfg.goal_min_ratio, cfg.goal_max_ratio
            )
            pos[sub], yaw[sub] = spawner.finish_spawns(rng_spawn, cand[np.arange(sub.shape[0]), pick])

    def compile_kernels(self, world_index, pos, goal, before, out):
        """Compile the field kernels for these argument types (run for no actor: nothing changes)."""
        none = np.zeros(0, np.int64)
        goal_fields(none, world_index, goal, self.tables, self.field)
        progress_potential(self.enabled, none, pos, goal, world_index, self.tables, self.field, before, out)
        fields_at(none, world_index, self.tables, self.field, np.zeros((0, 1, 3)), np.zeros((0, 1)))
