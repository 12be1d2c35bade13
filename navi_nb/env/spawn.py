"""Spawns and goals: where episodes start and where point-goals lie.

At construction the environment builds a *reachability grid* over the region
of interest (the scene's bounds when the world names a built-in scene, else the
world cube shrunk by the actor's radius): a cell is free when the world's
distance at its centre (the point query the collision uses,
``navi_nb/world/query.py``) is at least ``radius + margin + cell / 2``, which makes
the straight segment between two free neighbouring centres safe for the actor.
The free cells 6-connected to the world's listed spawn points (or, when it
lists none, the largest such component) form the *pool*: every spawn and goal
lies near a pool centre, so goals are reachable from spawns.

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
"""

from __future__ import annotations

import numpy as np
from numba import njit

from navi_nb.env.config import EnvConfigError

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


class SpawnSampler:
    """The pool of reachable free-space points and the batched samplers."""

    def __init__(self, distance_fn, cube_lo, cube_hi, roi_lo, roi_hi, radius, margin, cell, spawn_points, mode):
        lo = np.maximum(np.asarray(roi_lo, np.float64), np.asarray(cube_lo, np.float64) + radius)
        hi = np.minimum(np.asarray(roi_hi, np.float64), np.asarray(cube_hi, np.float64) - radius)
        if np.any(hi <= lo):
            raise EnvConfigError(
                f"spawn: the region of interest {roi_lo}..{roi_hi} leaves no room for an actor of radius {radius}"
            )
        cell = float(max(cell, float(np.max(hi - lo)) / MAX_GRID_CELLS))
        dims = np.maximum(1, np.floor((hi - lo) / cell).astype(np.int64))
        self.cell = cell
        self.radius = float(radius)
        self.margin = float(margin)
        self.distance_fn = distance_fn
        self.mode = mode
        self.lo = lo
        self.dims = dims
        ix, iy, iz = np.meshgrid(*[np.arange(d) for d in dims], indexing="ij")
        centres = lo + (np.stack([ix.ravel(), iy.ravel(), iz.ravel()], axis=1) + 0.5) * cell
        dist = np.asarray(distance_fn(centres), dtype=np.float64)
        free = (dist >= radius + margin + 0.5 * cell).reshape(tuple(dims))
        sp = np.asarray(spawn_points, dtype=np.float64).reshape(-1, 3)
        self.spawn_points = np.zeros((0, 3), np.float32)
        if sp.shape[0]:
            d_sp = np.asarray(distance_fn(sp), dtype=np.float64)
            self.spawn_points = sp[d_sp >= radius + margin].astype(np.float32)
        label = np.zeros(int(np.prod(dims)), dtype=np.int32)
        seeds = np.zeros(0, dtype=np.int64)
        if self.spawn_points.shape[0]:
            c = np.floor((self.spawn_points - lo) / cell).astype(np.int64)
            inside = np.all((c >= 0) & (c < dims), axis=1)
            c = c[inside]
            seeds = (c[:, 0] * dims[1] + c[:, 1]) * dims[2] + c[:, 2]
        if seeds.shape[0] and _flood(free, seeds, label, 1) > 0:
            reach = label.astype(bool)
        else:
            labels, best = _largest_component(free)
            reach = (labels == best) & (best > 0)
        self.pool = centres[reach]
        if self.pool.shape[0] == 0:
            raise EnvConfigError(
                f"spawn: no free space with clearance {radius + margin + 0.5 * cell:.3g} m "
                f"(radius {radius}, margin {margin:.3g}, cell {cell:.3g}) in this world"
            )
        if mode == "points" and self.spawn_points.shape[0] == 0:
            self.mode = "free"

    @property
    def nbytes(self) -> int:
        return int(self.pool.nbytes + self.spawn_points.nbytes)

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
