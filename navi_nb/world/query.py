"""Point queries on a compiled world: signed distance and semantic id.

``distance(world, points)`` is the validated, batched, parallel entry point.
``query_point`` is the scalar query, compiled ``njit(inline="always")`` so
other kernels (the environment's collision and spawn clearances) can inline
it; it takes the world as the tuple :func:`world_arrays` returns.

The field is read through ``navi_nb/world/field.py`` over the world's decoded
layout (``navi_nb/world/layout.py``), the same reader the tracer's rays use,
so what an actor senses and what it collides with are one field. What a
query answers (``field.point_value``):

- inside the world cube: the trilinear interpolation, between voxel centres,
  of the values at the 8 surrounding voxel centres (coordinates beyond the
  outermost centres clamp to them). A centre's value is its leaf's distance
  whatever the leaf's size (a coarse leaf's value is a bound), or in a pruned
  octant the distance to the octant's nearest face (free space, a lower
  bound). Exact on planes; within about half a voxel of the field near
  surfaces. The semantic id is the leaf holding the point (0 in a pruned
  octant);
- outside the world cube: where the nearest point of the cube has a value
  ``f >= 0``, the distance to the cube plus ``f`` (a lower bound if the
  outside is free); where ``f < 0`` (solid), ``f``; semantic 0.

Leaves that do not hold finite distances (NaN, +-inf: only hand-made,
unvalidated worlds) are read as the layout reads them (NaN as 0, +-inf as
+-65504 metres-equivalent halves): a query never answers NaN or an infinity.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from navi_nb.errors import NaviError
from navi_nb.threads import RangeKernel
from navi_nb.world.field import nb_point_value, nb_table_shift
from navi_nb.world.gmdag import World, validate_world
from navi_nb.world.layout import field_origin, world_layout


class QueryError(NaviError, ValueError):
    """Bad query input (points shape or values)."""


@njit(inline="always", cache=True)
def query_point(field, x, y, z):
    """Signed distance (float64, metres) and semantic id (int64) at world point (x, y, z).

    field: the tuple :func:`world_arrays` returns.
    """
    child, leaf_dist, leaf_sem, top_code, top_level, res, shift, bmin, voxel = field
    v, sem = nb_point_value(
        child,
        leaf_dist,
        leaf_sem,
        top_code,
        top_level,
        res,
        shift,
        (x - bmin[0]) / voxel,
        (y - bmin[1]) / voxel,
        (z - bmin[2]) / voxel,
    )
    return v * voxel, sem


@njit(inline="always", cache=True)
def _query_row(field, points, out_d, out_s, i):
    d, s = query_point(field, np.float64(points[i, 0]), np.float64(points[i, 1]), np.float64(points[i, 2]))
    out_d[i] = np.float32(d)
    out_s[i] = np.uint16(s)


@njit(cache=True, nogil=True)
def query_rows(i0, i1, field, points, out_d, out_s):
    """Points ``i0 .. i1 - 1`` of :data:`query_distance`."""
    for i in range(i0, i1):
        _query_row(field, points, out_d, out_s, i)


SERIAL_BELOW = 512  # the fewest points a thread is handed: smaller batches run in the calling thread


def _points(field, points, *rest):
    return points.shape[0]


query_distance = RangeKernel(query_rows, _points, SERIAL_BELOW)
"""Kernel: ``query_distance(field, points, out_d, out_s)``, points (N,3) metres -> out_d (N,) float32
metres, out_s (N,) uint16, on the threads (``threads.run_ranges``)."""


def world_arrays(world: World):
    """The world as kernels read it: ``(child, leaf_dist, leaf_sem, top_code,
    top_level, res float, shift int, origin float64 (3,), voxel float)``, origin
    where the field's voxel coordinates are 0 (``layout.field_origin``: ``bmin``,
    or half a voxel below it for a corner-sampled world).

    The first five are the decoded layout (``navi_nb/world/layout.py``, leaf
    distances in voxel units; the same cached layout the tracer uses), shift
    the dense table's alignment with the voxels (``field.table_shift``).
    Deep-validates the world once (the layout's decoder trusts its indices).
    """
    if not world.deep_checked:
        validate_world(world)
    voxel = float(np.float32(world.voxel_size))
    lay = world_layout(world, 1.0 / voxel)
    res = float(world.resolution)
    shift = int(nb_table_shift(lay.top_code, res))
    bmin = field_origin(world)  # bmin, shifted half a voxel down for a corner-sampled world
    return (lay.child, lay.leaf_dist, lay.leaf_sem, lay.top_code, lay.top_level, res, shift, bmin, voxel)


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
    field = world_arrays(world)
    out_d = np.empty(p.shape[0], dtype=np.float32)
    out_s = np.empty(p.shape[0], dtype=np.uint16)
    if p.shape[0]:
        query_distance(field, p, out_d, out_s)
    return out_d, out_s
