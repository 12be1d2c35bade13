"""Signed distance to a triangle mesh: a BVH in flat arrays, Numba kernels parallel over points.

``MeshField(vertices, faces, classes=None, sign="auto").evaluate(points, cap=None) -> (sdf, class)``

Distance: exact Euclidean distance (float64) to the nearest triangle, found by a
depth-first walk of a bounding-volume hierarchy (binned surface-area heuristic,
leaves of at most ``LEAF_SIZE`` triangles), nearer child first, pruning every
box farther than the best so far, warm-started from the previous point's
nearest triangle. Runs of GROUP consecutive points (the compiler's 8 sibling
cells) share one gathering of candidate triangles (see ``group_nearest``).

Sign (negative inside solid), see docs/MESHES.md. Faces sharing an edge form a
part; a part is closed when each directed edge appears once and its reverse
once. The reference rule is the generalised winding number: inside where
``w >= 0.5`` (Jacobson et al. 2013), summed through the same BVH with the
far-field dipole of Barill et al. 2018 (a cluster seen from farther than
``WINDING_BETA`` times its radius contributes ``A . (c - p) / (4 pi |c - p|^3)``,
nearer clusters are opened down to exact triangle solid angles).

- ``sign="auto"`` (default): where the nearest triangle belongs to a *trusted*
  closed part, the sign of ``(p - q) . N`` with ``q`` the nearest point and
  ``N`` the angle-weighted pseudonormal of its feature (Baerentzen & Aanaes
  2005): exact and almost free. A closed part is trusted when the other parts
  add, around it, exactly what its orientation needs (0 around a solid, 1
  around a void): checked at its vertices and face centroids with exact
  winding numbers (``winding.trusted_components``). Elsewhere (open parts, parts
  nested in or crossing another solid, inverted parts) the winding number.
- ``sign="winding"``: the winding number everywhere (several times slower).
- ``sign="unsigned"``: all distances positive.

``cap`` (for the compiler): a point farther than ``cap`` from every triangle
gets exactly ``+-cap`` (right sign) and class 0. Its sign still needs the
nearest feature, except on meshes whose parts are all closed, where a point
inside the surface-free ball of an earlier point of its chunk copies that
point's sign (and a run of points whose cap balls all lie in that ball needs
no search at all). Points within ``cap`` get exactly the values they get
without it.

Class: the class of the nearest face (``classes`` per face, default 1), 0 for
beyond-cap points. Degenerate faces (repeated index or zero area in float64)
are dropped before anything else and counted in ``n_degenerate``.

The parts, by concern: ``bvh.py`` (build and packed records),
``triangle_geometry.py`` (closest point, solid angle), ``nearest_search.py``
(nearest-triangle walks, shared by groups of points), ``winding.py`` (winding
number, closed parts, pseudonormals, trust); this module runs them over chunks
of points in parallel and holds the ``MeshField`` object.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from navi_nb.threads import RangeKernel
from navi_nb.world.bvh import LEAF_SIZE, STACK, build_bvh, pack_nodes
from navi_nb.world.mesh_io import MeshError, check_mesh
from navi_nb.world.nearest_search import GROUP, MAX_CANDIDATES, group_nearest, nearest_triangle
from navi_nb.world.winding import (
    WINDING_BETA,
    bvh_moments,
    closed_components,
    pseudonormal_inside,
    pseudonormals,
    trusted_components,
    winding_number,
)

__all__ = ["MeshField", "LEAF_SIZE", "WINDING_BETA"]

CHUNK = 512  # points per parallel work item (one traversal stack each)


@njit(cache=True)
def evaluate_chunk(ch, points, cap, search2, sign_mode, all_closed, mesh, beta2, sdf, cls):
    """Points ch * CHUNK .. (ch + 1) * CHUNK - 1 of evaluate_kernel, in order (one thread)."""
    tri, tri_class, tri_closed, edge_n, vert_n, nf, ni, mom = mesh
    p_count = points.shape[0]
    stack = np.empty(STACK, np.int64)
    dstack = np.empty(STACK, np.float64)
    cand = np.empty(MAX_CANDIDATES, np.int64)
    gb2 = np.empty(GROUP)
    gslot = np.empty(GROUP, np.int64)
    gfeat = np.empty(GROUP, np.int64)
    gq = np.empty((GROUP, 3))
    scratch = (stack, dstack, cand)
    out = (gb2, gslot, gq, gfeat)
    hint = -1
    misses = 0
    # all_closed: last point of this chunk with a known sign and the radius of its surface-free ball
    fx = 0.0
    fy = 0.0
    fz = 0.0
    fr = -1.0
    fneg = False
    c_end = min(p_count, (ch + 1) * CHUNK)
    for g0 in range(ch * CHUNK, c_end, GROUP):
        g1 = min(c_end, g0 + GROUP)
        if sign_mode == 1 and all_closed and fr > 0.0:
            # every point's cap ball inside the last free ball: beyond cap, same sign, no search
            inside = True
            for i in range(g0, g1):
                dx = points[i, 0] - fx
                dy = points[i, 1] - fy
                dz = points[i, 2] - fz
                if math.sqrt(dx * dx + dy * dy + dz * dz) + cap > fr:
                    inside = False
                    break
            if inside:
                for i in range(g0, g1):
                    sdf[i] = -cap if fneg else cap
                    cls[i] = 0
                continue
        hint, misses = group_nearest(points, g0, g1, search2, hint, misses, tri, nf, ni, scratch, out)
        for i in range(g0, g1):
            j = i - g0
            px = points[i, 0]
            py = points[i, 1]
            pz = points[i, 2]
            best2 = gb2[j]
            slot = gslot[j]
            d = math.sqrt(best2) if slot >= 0 else cap
            if d > cap:
                d = cap
            cls[i] = tri_class[slot] if slot >= 0 and d < cap else 0
            neg = False
            if sign_mode == 1:
                df = -1.0
                if slot < 0 and all_closed and fr > 0.0:
                    df = math.sqrt((px - fx) * (px - fx) + (py - fy) * (py - fy) + (pz - fz) * (pz - fz))
                if 0.0 <= df < fr:
                    neg = fneg  # inside a neighbour's free ball: same sign (every part is closed)
                else:
                    free2 = best2
                    qx = gq[j, 0]
                    qy = gq[j, 1]
                    qz = gq[j, 2]
                    feat = gfeat[j]
                    if slot < 0:  # beyond cap: the sign still needs the nearest feature
                        free2, slot, qx, qy, qz, feat = nearest_triangle(
                            px, py, pz, np.inf, hint, tri, nf, ni, stack, dstack
                        )
                    if tri_closed[slot] != 0:
                        neg = pseudonormal_inside(px, py, pz, qx, qy, qz, slot, feat, tri, edge_n, vert_n)
                    else:
                        neg = winding_number(px, py, pz, tri, ni, mom, beta2, stack) >= 0.5
                    fx = px
                    fy = py
                    fz = pz
                    fr = math.sqrt(free2)
                    fneg = neg
            elif sign_mode == 2:
                neg = winding_number(px, py, pz, tri, ni, mom, beta2, stack) >= 0.5
            sdf[i] = -d if neg else d


@njit(cache=True, nogil=True)
def evaluate_chunks(k0, k1, points, cap, sign_mode, all_closed, mesh, beta, sdf, cls):
    """Chunks ``k0 .. k1 - 1`` (of ``CHUNK`` points) of :data:`evaluate_kernel`."""
    # auto on a mesh with open parts: the sign needs the nearest feature anyway, so search unbounded
    search2 = cap * cap if (sign_mode != 1 or all_closed) else np.inf
    for ch in range(k0, k1):
        evaluate_chunk(ch, points, cap, search2, sign_mode, all_closed, mesh, beta * beta, sdf, cls)


def _chunks(points, *rest):
    return (points.shape[0] + CHUNK - 1) // CHUNK


evaluate_kernel = RangeKernel(evaluate_chunks, _chunks, 1)
"""Signed distance and class at points: ``evaluate_kernel(points, cap, sign_mode, all_closed, mesh, beta, sdf, cls)``,
its chunks on the threads (``threads.run_ranges``).

points (P, 3) float64; cap float64 (inf for none); sign_mode 0 unsigned,
1 auto (pseudonormal where the nearest triangle's component is closed,
else winding), 2 winding; all_closed: every component is closed (then the
sign is constant inside any surface-free ball, and a beyond-cap point
inside the free ball of an earlier point of its chunk copies its sign);
mesh: the bundle ``(tri, tri_class, tri_closed, edge_n, vert_n, nf, ni, mom)``
(``MeshField.mesh``, built once), per leaf slot: tri (F, 9) float64, tri_class (F,) int32, tri_closed (F,)
uint8, edge_n (F, 3, 3) (edges ab, bc, ca), vert_n (F, 3,
3) (corners a, b, c) pseudonormals; nf/ni the packed BVH (float32 / int32
views), mom (M, 8) float64 moments. Writes sdf (P,) float64, cls (P,) int32.

Points are processed in fixed chunks of CHUNK (whatever the thread count),
each chunk in order, so results do not depend on the number of threads.
"""


@njit(cache=True, nogil=True)
def winding_chunks(k0, k1, points, tri, ni, mom, beta, out):
    """Chunks ``k0 .. k1 - 1`` of :data:`winding_kernel`."""
    p_count = points.shape[0]
    beta2 = beta * beta
    stack = np.empty(STACK, np.int64)
    for ch in range(k0, k1):
        for i in range(ch * CHUNK, min(p_count, (ch + 1) * CHUNK)):
            out[i] = winding_number(points[i, 0], points[i, 1], points[i, 2], tri, ni, mom, beta2, stack)


winding_kernel = RangeKernel(winding_chunks, _chunks, 1)
"""Generalised winding number at points (P, 3) float64 into out (P,) float64:
``winding_kernel(points, tri, ni, mom, beta, out)``, its chunks on the threads."""


def _aligned(shape, dtype, align=64):
    """Zeroed array whose data starts on an ``align``-byte boundary."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape))
    raw = np.zeros(n * dt.itemsize + align, np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off : off + n * dt.itemsize].view(dt).reshape(shape)


class MeshField:
    """Signed distance field over triangles (see the module docstring for the rules).

    Attributes: ``bounds_min``/``bounds_max`` (3,) float64 of the kept
    triangles; ``closed`` (every edge shared by exactly two consistently
    oriented faces); ``sign`` ("auto", "winding" or "unsigned");
    ``n_faces`` kept, ``n_degenerate`` dropped; ``n_components`` and
    ``n_closed_components`` (faces joined through shared edges).
    """

    def __init__(self, vertices, faces, classes=None, sign="auto", beta=WINDING_BETA):
        mesh = check_mesh(vertices, faces, "MeshField")
        v, f = mesh.vertices, mesh.faces
        if classes is None:
            cl = np.ones(f.shape[0], np.int32)
        else:
            cl = np.asarray(classes)
            if cl.shape != (f.shape[0],) or cl.dtype.kind not in "iu":
                raise MeshError(f"MeshField: classes must be ({f.shape[0]},) integers, got {cl.shape} {cl.dtype}")
            if cl.size and (cl.min() < 0 or cl.max() > 65535):
                raise MeshError("MeshField: classes must lie in 0..65535")
            cl = cl.astype(np.int32)
        if sign not in ("auto", "winding", "unsigned"):
            raise MeshError(f"MeshField: sign must be 'auto', 'winding' or 'unsigned', got {sign!r}")
        if not (np.isfinite(beta) and beta > 1.0):
            raise MeshError(f"MeshField: beta must be a finite number > 1, got {beta!r}")
        tri = v[f]
        area2 = np.linalg.norm(np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]), axis=1)
        keep = (area2 > 0.0) & (f[:, 0] != f[:, 1]) & (f[:, 1] != f[:, 2]) & (f[:, 2] != f[:, 0])
        self.n_degenerate = int((~keep).sum())
        f = f[keep]
        cl = cl[keep]
        if f.shape[0] == 0:
            raise MeshError("MeshField: every face is degenerate (zero area)")
        self.n_faces = int(f.shape[0])
        comp, comp_ok = closed_components(f, v.shape[0])
        self.n_components = int(comp_ok.size)
        self.n_closed_components = int(comp_ok.sum())
        self.closed = bool(comp_ok.all())
        trusted = trusted_components(v, f, comp, comp_ok) if sign == "auto" else comp_ok
        self.n_trusted_components = int(trusted.sum())
        comp_closed = trusted[comp]
        self.sign = sign
        self.beta = float(beta)
        tri = v[f]
        self.bounds_min = tri.reshape(-1, 3).min(axis=0)
        self.bounds_max = tri.reshape(-1, 3).max(axis=0)
        node_min, node_max, node_a, node_n, order = build_bvh(
            tri.min(axis=1), tri.max(axis=1), tri.mean(axis=1), LEAF_SIZE
        )
        t = tri[order]
        self._tri = np.ascontiguousarray(np.concatenate([t[:, 0], t[:, 1] - t[:, 0], t[:, 2] - t[:, 0]], axis=1))
        self._class = np.ascontiguousarray(cl[order])
        self._closed = np.ascontiguousarray(comp_closed[order].astype(np.uint8))
        self._face_index = order  # slot -> kept-face index
        m = node_a.shape[0] + 1
        self._nf = _aligned((m, 8), np.float32)
        self._ni = self._nf.view(np.int32)
        pack_nodes(node_min, node_max, node_a, node_n, self._nf, self._ni)
        self._mom = _aligned((m, 8), np.float64)
        bvh_moments(self._tri, self._ni, self._mom)
        self.n_nodes = int(node_a.shape[0])
        if sign == "auto":
            _, en, vn = pseudonormals(v, f)
            self._en = np.ascontiguousarray(en[order])
            self._vn = np.ascontiguousarray(vn[order])
        else:
            self._en = np.zeros((1, 3, 3))
            self._vn = np.zeros((1, 3, 3))
        # the arrays the evaluate kernel reads together, in its order
        self.mesh = (self._tri, self._class, self._closed, self._en, self._vn, self._nf, self._ni, self._mom)

    @staticmethod
    def _points(points):
        p = np.asarray(points)
        if p.ndim != 2 or p.shape[1] != 3:
            raise MeshError(f"MeshField.evaluate: points must have shape (N, 3), got {p.shape}")
        p = np.ascontiguousarray(p, dtype=np.float64)
        if not np.isfinite(p).all():
            i = int(np.flatnonzero(~np.isfinite(p).all(axis=1))[0])
            raise MeshError(f"MeshField.evaluate: point {i} is not finite ({p[i].tolist()})")
        return p

    def evaluate(self, points, cap=None):
        """Signed distance (P,) float64 and class (P,) int32 at points (P, 3).

        With ``cap``: points farther than ``cap`` from every triangle get
        exactly ``cap`` (with the right sign) and class 0.
        """
        p = self._points(points)
        sdf = np.empty(p.shape[0])
        cls = np.empty(p.shape[0], np.int32)
        c = np.inf if cap is None else float(cap)
        if not c > 0.0:
            raise MeshError(f"MeshField.evaluate: cap must be positive, got {cap!r}")
        mode = {"unsigned": 0, "auto": 1, "winding": 2}[self.sign]
        evaluate_kernel(p, c, mode, self.closed, self.mesh, self.beta, sdf, cls)
        return sdf, cls

    def winding_number(self, points):
        """Generalised winding number (P,) float64 at points (P, 3) (dipole far field)."""
        p = self._points(points)
        out = np.empty(p.shape[0])
        winding_kernel(p, self._tri, self._ni, self._mom, self.beta, out)
        return out
