"""Point queries on a compiled world: signed distance and semantic id.

``distance(world, points)`` is the validated, batched, parallel entry point.
``query_point`` is the scalar query, compiled ``njit(inline="always")`` so
other kernels (the environment's collision) can inline it.

What a query answers (docs/COMPILER.md, "Queries"):

- in a leaf coarser than a voxel: the leaf's value (a bound);
- in a voxel leaf: the trilinear interpolation of the 8 voxel-centre values
  around the point when all 8 are voxel leaves (exact on planes; within half
  a voxel of the field near surfaces), else the leaf's own value;
- in a pruned octant: the distance to the octant's boundary (free space, a
  safe lower bound), semantic 0;
- outside the world cube: where the nearest point of the cube is free, the
  distance to the cube plus the value there (a lower bound if the outside
  is free); where it is solid, that (negative) value; semantic 0.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from navi_nb.errors import NaviError
from navi_nb.world.gmdag import (HALF_TO_FLOAT, MAX_DEPTH, World, nb_child_slot, nb_leaf_distance,
                                 nb_leaf_semantic, nb_word_index, nb_word_is_leaf, validate_world)

LOCATE_LEAF, LOCATE_PRUNED, LOCATE_BROKEN = 0, 1, 2


class QueryError(NaviError, ValueError):
    """Bad query input (points shape or values)."""


@njit(inline="always", cache=True)
def locate(nodes, half_table, res, ux, uy, uz):
    """Descend to the cell holding (ux, uy, uz), in voxel units inside [0, res).

    Returns (status, value, semantic, size, x0, y0, z0): status LOCATE_LEAF
    (value/semantic of the leaf), LOCATE_PRUNED (a clear mask bit), or
    LOCATE_BROKEN (an index out of range: only in unvalidated arrays);
    size and x0.. give the cell (voxel units).
    """
    n = nodes.shape[0]
    node = 0
    size = res
    x0 = 0.0
    y0 = 0.0
    z0 = 0.0
    for _ in range(MAX_DEPTH + 1):
        w = nodes[node]
        if nb_word_is_leaf(w):
            return LOCATE_LEAF, nb_leaf_distance(w, half_table), nb_leaf_semantic(w), size, x0, y0, z0
        half = size * 0.5
        o = 0
        if ux >= x0 + half:
            o |= 1
            x0 += half
        if uy >= y0 + half:
            o |= 2
            y0 += half
        if uz >= z0 + half:
            o |= 4
            z0 += half
        size = half
        slot = nb_child_slot(w, o)
        if slot < 0:
            return LOCATE_PRUNED, np.float32(0.0), np.int64(0), size, x0, y0, z0
        if slot >= n:
            break
        node = nb_word_index(nodes[slot])
        if node >= n:
            break
    return LOCATE_BROKEN, np.float32(0.0), np.int64(0), size, x0, y0, z0


@njit(inline="always", cache=True)
def query_point(nodes, half_table, bmin, voxel_size, resolution, x, y, z):
    """Signed distance (float32, metres) and semantic id (int64) at world point (x, y, z)."""
    res = float(resolution)
    ux = (x - bmin[0]) / voxel_size
    uy = (y - bmin[1]) / voxel_size
    uz = (z - bmin[2]) / voxel_size
    top = res * (1.0 - 1e-12)
    cx = min(max(ux, 0.0), top)
    cy = min(max(uy, 0.0), top)
    cz = min(max(uz, 0.0), top)
    ox = ux - cx
    oy = uy - cy
    oz = uz - cz
    outside = math.sqrt(ox * ox + oy * oy + oz * oz) * voxel_size
    status, v, sem, size, x0, y0, z0 = locate(nodes, half_table, res, cx, cy, cz)
    if status == LOCATE_BROKEN:
        return np.float32(0.0), np.int64(0)
    if status == LOCATE_PRUNED:
        v = min(min(cx - x0, x0 + size - cx), min(min(cy - y0, y0 + size - cy), min(cz - z0, z0 + size - cz)))
        v = v * voxel_size
        sem = 0
    if outside > 1e-9 * voxel_size:
        if v < 0.0:  # solid at the cube's face: stay solid, magnitude not grown
            return np.float32(v), np.int64(0)
        return np.float32(outside + v), np.int64(0)
    if status == LOCATE_PRUNED or size != 1.0 or not math.isfinite(v):
        return np.float32(v), sem
    # voxel leaf: trilinear interpolation among the 8 surrounding voxel centres
    gx = ux - 0.5
    gy = uy - 0.5
    gz = uz - 0.5
    bx = math.floor(gx)
    by = math.floor(gy)
    bz = math.floor(gz)
    if bx < 0.0 or by < 0.0 or bz < 0.0 or bx + 1.0 >= res or by + 1.0 >= res or bz + 1.0 >= res:
        return np.float32(v), sem
    tx = gx - bx
    ty = gy - by
    tz = gz - bz
    acc = 0.0
    for k in range(8):
        px = bx + (k & 1) + 0.5
        py = by + ((k >> 1) & 1) + 0.5
        pz = bz + ((k >> 2) & 1) + 0.5
        s2, v2, _sem2, size2, _a, _b, _c = locate(nodes, half_table, res, px, py, pz)
        if s2 != LOCATE_LEAF or size2 != 1.0 or not math.isfinite(v2):
            return np.float32(v), sem
        wx = tx if (k & 1) else 1.0 - tx
        wy = ty if ((k >> 1) & 1) else 1.0 - ty
        wz = tz if ((k >> 2) & 1) else 1.0 - tz
        acc += wx * wy * wz * v2
    return np.float32(acc), sem


@njit(inline="always", cache=True)
def _query_row(nodes, half_table, bmin, voxel_size, resolution, points, out_d, out_s, i):
    d, s = query_point(nodes, half_table, bmin, voxel_size, resolution,
                       np.float64(points[i, 0]), np.float64(points[i, 1]), np.float64(points[i, 2]))
    out_d[i] = d
    out_s[i] = np.uint16(s)


@njit(parallel=True, cache=True)
def query_distance(nodes, half_table, bmin, voxel_size, resolution, points, out_d, out_s):
    """Kernel: points (N,3) metres -> out_d (N,) float32 metres, out_s (N,) uint16."""
    for i in prange(points.shape[0]):
        _query_row(nodes, half_table, bmin, voxel_size, resolution, points, out_d, out_s, i)


@njit(cache=True)
def query_distance_serial(nodes, half_table, bmin, voxel_size, resolution, points, out_d, out_s):
    """query_distance on one thread: small batches skip the parallel launch."""
    for i in range(points.shape[0]):
        _query_row(nodes, half_table, bmin, voxel_size, resolution, points, out_d, out_s, i)


SERIAL_BELOW = 512  # batches smaller than this run on one thread


def world_arrays(world: World):
    """(nodes, half_table, bmin float64 (3,), voxel_size float64, resolution) for kernels.

    Deep-validates the world once (the query kernels trust its indices).
    """
    if not world.deep_checked:
        validate_world(world)
    nodes = np.asarray(world.nodes)
    if nodes.dtype != np.uint64:
        nodes = nodes.astype(np.uint64)
    return (nodes, HALF_TO_FLOAT, np.asarray(world.bmin, dtype=np.float32).astype(np.float64),
            float(np.float32(world.voxel_size)), int(world.resolution))


def distance(world: World, points):
    """Signed distance (float32 (N,), metres, negative in solid) and semantic (uint16 (N,)).

    points: (N,3) float32/float64 world coordinates, finite. Numba parallel
    over points; see the module doc for what each region answers.
    """
    if not isinstance(world, World):
        raise QueryError(f"distance: expected a World, got {type(world).__name__}")
    p = np.asarray(points)
    if p.ndim != 2 or p.shape[1] != 3:
        raise QueryError(f"distance: points must be shaped (N, 3), got {p.shape}")
    if p.dtype not in (np.float32, np.float64):
        if not np.issubdtype(p.dtype, np.number) or np.issubdtype(p.dtype, np.complexfloating):
            raise QueryError(f"distance: points must be real numbers, got dtype {p.dtype}")
        p = p.astype(np.float64)
    if not np.all(np.isfinite(p)):
        bad = int(np.nonzero(~np.all(np.isfinite(p), axis=1))[0][0])
        raise QueryError(f"distance: point {bad} is not finite ({p[bad].tolist()})")
    p = np.ascontiguousarray(p)
    nodes, table, bmin, voxel, res = world_arrays(world)
    out_d = np.empty(p.shape[0], dtype=np.float32)
    out_s = np.empty(p.shape[0], dtype=np.uint16)
    if p.shape[0]:
        kernel = query_distance_serial if p.shape[0] < SERIAL_BELOW else query_distance
        kernel(nodes, table, bmin, voxel, res, p, out_d, out_s)
    return out_d, out_s
