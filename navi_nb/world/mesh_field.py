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
  winding numbers (``_trusted_components``). Elsewhere (open parts, parts
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
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from navi_nb.world.mesh_io import MeshError, check_mesh

__all__ = ["MeshField", "LEAF_SIZE", "WINDING_BETA"]

LEAF_SIZE = 2        # triangles per BVH leaf
WINDING_BETA = 2.0   # far-field test of the winding number: |c - p| > beta * radius
CHUNK = 512          # points per parallel work item (one traversal stack each)
GROUP = 8            # consecutive points that share one candidate search (a cell's 8 children)
MAX_CANDIDATES = 48  # a group whose candidate ball holds more triangles is searched point by point
STACK = 256          # traversal stack entries; build_bvh caps the tree depth below this

# feature codes of the nearest point on a triangle (a, b, c)
_VA, _VB, _VC, _EAB, _EBC, _ECA, _FACE = 0, 1, 2, 3, 4, 5, 6


# --------------------------------------------------------------------------
# BVH build (one thread; ~35k triangles in a few ms)
# --------------------------------------------------------------------------

SAH_BINS = 16       # centroid bins per axis for the surface-area-heuristic split
SAH_DEPTH = 64      # below this depth, median splits (keeps depth < SAH_DEPTH + 64 < STACK)


@njit(inline="always")
def _half_area(lo, hi):
    dx = hi[0] - lo[0]
    dy = hi[1] - lo[1]
    dz = hi[2] - lo[2]
    return dx * dy + dy * dz + dz * dx


@njit(cache=True)
def sah_split(order, s, e, tri_min, tri_max, centroid, clo, chi, use_sah):
    """Partition order[s:e] by the cheapest binned SAH plane; return the split index.

    Cost of a plane: half-area(left box) * left count + half-area(right box) *
    right count, over SAH_BINS centroid bins on each axis. Falls back to a
    median split on the longest centroid axis when no plane separates.
    """
    nb = SAH_BINS
    best_cost = np.inf
    best_axis = -1
    best_bin = -1
    bcount = np.zeros(nb, np.int64)
    blo = np.empty((nb, 3))
    bhi = np.empty((nb, 3))
    rarea = np.empty(nb)
    rcount = np.empty(nb, np.int64)
    lo = np.empty(3)
    hi = np.empty(3)
    for axis in range(3):
        ext = chi[axis] - clo[axis]
        if not (use_sah and ext > 0.0):
            continue
        scale = nb / ext
        bcount[:] = 0
        blo[:, :] = np.inf
        bhi[:, :] = -np.inf
        for k in range(s, e):
            t = order[k]
            b = min(int((centroid[t, axis] - clo[axis]) * scale), nb - 1)
            bcount[b] += 1
            for j in range(3):
                blo[b, j] = min(blo[b, j], tri_min[t, j])
                bhi[b, j] = max(bhi[b, j], tri_max[t, j])
        # sweep from the right: area and count of bins b..nb-1
        lo[:] = np.inf
        hi[:] = -np.inf
        c = 0
        for b in range(nb - 1, 0, -1):
            c += bcount[b]
            for j in range(3):
                lo[j] = min(lo[j], blo[b, j])
                hi[j] = max(hi[j], bhi[b, j])
            rcount[b] = c
            rarea[b] = _half_area(lo, hi) if c > 0 else 0.0
        lo[:] = np.inf
        hi[:] = -np.inf
        c = 0
        for b in range(nb - 1):  # plane after bin b
            c += bcount[b]
            for j in range(3):
                lo[j] = min(lo[j], blo[b, j])
                hi[j] = max(hi[j], bhi[b, j])
            if c == 0 or rcount[b + 1] == 0:
                continue
            cost = _half_area(lo, hi) * c + rarea[b + 1] * rcount[b + 1]
            if cost < best_cost:
                best_cost = cost
                best_axis = axis
                best_bin = b
    if best_axis >= 0:
        scale = nb / (chi[best_axis] - clo[best_axis])
        i = s
        j = e - 1
        while i <= j:
            t = order[i]
            if min(int((centroid[t, best_axis] - clo[best_axis]) * scale), nb - 1) <= best_bin:
                i += 1
            else:
                order[i] = order[j]
                order[j] = t
                j -= 1
        if i > s and i < e:
            return i
    # median split on the longest axis (all centroids in one bin, or coincident)
    axis = 0
    ext = chi[0] - clo[0]
    for j in range(1, 3):
        if chi[j] - clo[j] > ext:
            ext = chi[j] - clo[j]
            axis = j
    idx = order[s:e].copy()
    keys = np.empty(e - s)
    for k in range(e - s):
        keys[k] = centroid[idx[k], axis]
    perm = np.argsort(keys, kind="mergesort")  # stable: the tree is deterministic
    for k in range(e - s):
        order[s + k] = idx[perm[k]]
    return (s + e) // 2


@njit(cache=True)
def build_bvh(tri_min, tri_max, centroid, leaf_size):
    """Binned-SAH BVH over F triangles (leaves of at most leaf_size).

    tri_min, tri_max, centroid: (F, 3) float64 per-triangle box and centroid.
    Returns node_min, node_max (N, 3) float64; node_a (N,) int64 = first child
    (internal; children are node_a and node_a + 1) or first slot in ``order``
    (leaf); node_n (N,) int64 = 0 for internal, triangle count for leaves;
    order (F,) int64 = triangle index per leaf slot. Children always have
    larger indices than their parent.
    """
    f = tri_min.shape[0]
    cap = max(2 * f, 1)
    node_min = np.empty((cap, 3))
    node_max = np.empty((cap, 3))
    node_a = np.zeros(cap, np.int64)
    node_n = np.zeros(cap, np.int64)
    order = np.arange(f)
    st_node = np.empty(cap, np.int64)
    st_s = np.empty(cap, np.int64)
    st_e = np.empty(cap, np.int64)
    st_d = np.zeros(cap, np.int64)
    st_node[0] = 0
    st_s[0] = 0
    st_e[0] = f
    sp = 1
    count = 1
    while sp > 0:
        sp -= 1
        node = st_node[sp]
        s = st_s[sp]
        e = st_e[sp]
        depth = st_d[sp]
        lo0 = np.inf
        lo1 = np.inf
        lo2 = np.inf
        hi0 = -np.inf
        hi1 = -np.inf
        hi2 = -np.inf
        clo = np.full(3, np.inf)
        chi = np.full(3, -np.inf)
        for k in range(s, e):
            t = order[k]
            lo0 = min(lo0, tri_min[t, 0])
            lo1 = min(lo1, tri_min[t, 1])
            lo2 = min(lo2, tri_min[t, 2])
            hi0 = max(hi0, tri_max[t, 0])
            hi1 = max(hi1, tri_max[t, 1])
            hi2 = max(hi2, tri_max[t, 2])
            for j in range(3):
                clo[j] = min(clo[j], centroid[t, j])
                chi[j] = max(chi[j], centroid[t, j])
        node_min[node, 0] = lo0
        node_min[node, 1] = lo1
        node_min[node, 2] = lo2
        node_max[node, 0] = hi0
        node_max[node, 1] = hi1
        node_max[node, 2] = hi2
        if e - s <= leaf_size:
            node_a[node] = s
            node_n[node] = e - s
            continue
        mid = sah_split(order, s, e, tri_min, tri_max, centroid, clo, chi, depth < SAH_DEPTH)
        left = count
        count += 2
        node_a[node] = left
        node_n[node] = 0
        st_node[sp] = left
        st_s[sp] = s
        st_e[sp] = mid
        st_d[sp] = depth + 1
        sp += 1
        st_node[sp] = left + 1
        st_s[sp] = mid
        st_e[sp] = e
        st_d[sp] = depth + 1
        sp += 1
    return node_min[:count].copy(), node_max[:count].copy(), node_a[:count].copy(), node_n[:count].copy(), order


@njit(cache=True)
def pack_nodes(node_min, node_max, node_a, node_n, out_f, out_i):
    """Write the BVH into 32-byte records: float32 box (rounded outwards) + int32 link.

    out_f (M, 8) float32 and out_i (M, 8) int32 view the same memory. Record
    layout: [min xyz, max xyz, a, n]. Old node 0 stays 0; old node k > 0 goes
    to k + 1 (record 1 is unused) so that every sibling pair (2j, 2j + 1)
    shares one 64-byte cache line.
    """
    for k in range(node_a.shape[0]):
        r = 0 if k == 0 else k + 1
        for j in range(3):
            lo = np.float32(node_min[k, j])
            if lo > node_min[k, j]:
                lo = np.nextafter(lo, np.float32(-np.inf))
            hi = np.float32(node_max[k, j])
            if hi < node_max[k, j]:
                hi = np.nextafter(hi, np.float32(np.inf))
            out_f[r, j] = lo
            out_f[r, 3 + j] = hi
        out_i[r, 6] = node_a[k] if node_n[k] > 0 else node_a[k] + 1
        out_i[r, 7] = node_n[k]
    for j in range(6):
        out_f[1, j] = np.nan
    out_i[1, 6] = 0
    out_i[1, 7] = 0


@njit(cache=True)
def bvh_moments(tri, node_i, mom):
    """Per node record: mom[:, 0:3] area-vector sum, [3:6] area centroid, [6] radius.

    tri (F, 9) float64 rows (a, b - a, c - a) in leaf-slot order; node_i the
    packed links. Children come after parents, so one reverse sweep fills
    every node from its children. The radius bounds every triangle point's
    distance from the centroid (the far-field test of the winding number).
    """
    m = node_i.shape[0]
    wsum = np.zeros(m)
    lo = np.empty((m, 3))
    hi = np.empty((m, 3))
    for node in range(m - 1, -1, -1):
        if node == 1:
            continue
        n = node_i[node, 7]
        for j in range(7):
            mom[node, j] = 0.0
        if n > 0:
            s = node_i[node, 6]
            for j in range(3):
                lo[node, j] = np.inf
                hi[node, j] = -np.inf
            for k in range(s, s + n):
                nx = 0.5 * (tri[k, 4] * tri[k, 8] - tri[k, 5] * tri[k, 7])
                ny = 0.5 * (tri[k, 5] * tri[k, 6] - tri[k, 3] * tri[k, 8])
                nz = 0.5 * (tri[k, 3] * tri[k, 7] - tri[k, 4] * tri[k, 6])
                mom[node, 0] += nx
                mom[node, 1] += ny
                mom[node, 2] += nz
                ar = math.sqrt(nx * nx + ny * ny + nz * nz)
                wsum[node] += ar
                for j in range(3):
                    va = tri[k, j]
                    vb = va + tri[k, 3 + j]
                    vc = va + tri[k, 6 + j]
                    mom[node, 3 + j] += ar * (va + vb + vc) / 3.0
                    lo[node, j] = min(lo[node, j], va, vb, vc)
                    hi[node, j] = max(hi[node, j], va, vb, vc)
        else:
            c = node_i[node, 6]
            wsum[node] = wsum[c] + wsum[c + 1]
            for j in range(3):
                mom[node, j] = mom[c, j] + mom[c + 1, j]
                mom[node, 3 + j] = mom[c, 3 + j] * wsum[c] + mom[c + 1, 3 + j] * wsum[c + 1]
                lo[node, j] = min(lo[c, j], lo[c + 1, j])
                hi[node, j] = max(hi[c, j], hi[c + 1, j])
        for j in range(3):
            if wsum[node] > 0.0:
                mom[node, 3 + j] /= wsum[node]
            else:
                mom[node, 3 + j] = 0.5 * (lo[node, j] + hi[node, j])
        r2 = 0.0
        for j in range(3):
            d = max(mom[node, 3 + j] - lo[node, j], hi[node, j] - mom[node, 3 + j])
            r2 += d * d
        mom[node, 6] = math.sqrt(r2) * (1.0 + 1e-12)
        mom[node, 7] = 0.0


# --------------------------------------------------------------------------
# scalar geometry
# --------------------------------------------------------------------------

@njit(inline="always")
def closest_on_triangle(px, py, pz, t, k):
    """Nearest point q on triangle k of t (F, 9) rows (a, b - a, c - a) to p.

    Returns (qx, qy, qz, feature code). Ericson, Real-Time Collision
    Detection, 5.1.5, in float64.
    """
    ax = t[k, 0]
    ay = t[k, 1]
    az = t[k, 2]
    abx = t[k, 3]
    aby = t[k, 4]
    abz = t[k, 5]
    acx = t[k, 6]
    acy = t[k, 7]
    acz = t[k, 8]
    apx = px - ax
    apy = py - ay
    apz = pz - az
    d1 = abx * apx + aby * apy + abz * apz
    d2 = acx * apx + acy * apy + acz * apz
    if d1 <= 0.0 and d2 <= 0.0:
        return ax, ay, az, _VA
    bpx = apx - abx
    bpy = apy - aby
    bpz = apz - abz
    d3 = abx * bpx + aby * bpy + abz * bpz
    d4 = acx * bpx + acy * bpy + acz * bpz
    if d3 >= 0.0 and d4 <= d3:
        return ax + abx, ay + aby, az + abz, _VB
    vc = d1 * d4 - d3 * d2
    if vc <= 0.0 and d1 >= 0.0 and d3 <= 0.0:
        v = d1 / (d1 - d3)
        return ax + v * abx, ay + v * aby, az + v * abz, _EAB
    cpx = apx - acx
    cpy = apy - acy
    cpz = apz - acz
    d5 = abx * cpx + aby * cpy + abz * cpz
    d6 = acx * cpx + acy * cpy + acz * cpz
    if d6 >= 0.0 and d5 <= d6:
        return ax + acx, ay + acy, az + acz, _VC
    vb = d5 * d2 - d1 * d6
    if vb <= 0.0 and d2 >= 0.0 and d6 <= 0.0:
        w = d2 / (d2 - d6)
        return ax + w * acx, ay + w * acy, az + w * acz, _ECA
    va = d3 * d6 - d5 * d4
    if va <= 0.0 and (d4 - d3) >= 0.0 and (d5 - d6) >= 0.0:
        w = (d4 - d3) / ((d4 - d3) + (d5 - d6))
        return (ax + abx + w * (acx - abx), ay + aby + w * (acy - aby),
                az + abz + w * (acz - abz), _EBC)
    denom = 1.0 / (va + vb + vc)
    v = vb * denom
    w = vc * denom
    return ax + abx * v + acx * w, ay + aby * v + acy * w, az + abz * v + acz * w, _FACE


@njit(inline="always")
def _gap2(p, lo, hi):
    """Squared distance from coordinate p to the interval [lo, hi] (0 inside)."""
    t = lo - p
    if t > 0.0:
        return t * t
    t = p - hi
    if t > 0.0:
        return t * t
    return 0.0


@njit(inline="always")
def box_dist2(px, py, pz, nf, node):
    """Squared distance from p to the box of packed node record ``node`` (0 inside)."""
    d = 0.0
    d += _gap2(px, nf[node, 0], nf[node, 3])
    d += _gap2(py, nf[node, 1], nf[node, 4])
    d += _gap2(pz, nf[node, 2], nf[node, 5])
    return d


@njit(inline="always")
def triangle_solid_angle(px, py, pz, t, k):
    """Signed solid angle of triangle k seen from p (Van Oosterom & Strackee 1983)."""
    ax = t[k, 0] - px
    ay = t[k, 1] - py
    az = t[k, 2] - pz
    bx = ax + t[k, 3]
    by = ay + t[k, 4]
    bz = az + t[k, 5]
    cx = ax + t[k, 6]
    cy = ay + t[k, 7]
    cz = az + t[k, 8]
    la = math.sqrt(ax * ax + ay * ay + az * az)
    lb = math.sqrt(bx * bx + by * by + bz * bz)
    lc = math.sqrt(cx * cx + cy * cy + cz * cz)
    det = ax * (by * cz - bz * cy) - ay * (bx * cz - bz * cx) + az * (bx * cy - by * cx)
    den = la * lb * lc + (ax * bx + ay * by + az * bz) * lc \
        + (bx * cx + by * cy + bz * cz) * la + (cx * ax + cy * ay + cz * az) * lb
    return 2.0 * math.atan2(det, den)


# --------------------------------------------------------------------------
# query kernels
# --------------------------------------------------------------------------

@njit(cache=True)
def nearest_triangle(px, py, pz, best2, hint, tri, nf, ni, stack, dstack):
    """Walk the BVH for the nearest triangle closer than sqrt(best2).

    Returns (best2, slot, qx, qy, qz, feature); slot -1 when none is closer.
    hint: a slot to try first (the previous point's nearest; -1 for none):
    its distance bounds the walk from the start, which prunes most boxes for
    nearby points. stack (int64) and dstack (float64) hold pending nodes and
    their box distances, so a node is dropped when popped if the best has
    shrunk past it.
    """
    slot = -1
    feat = -1
    qx = 0.0
    qy = 0.0
    qz = 0.0
    if hint >= 0:
        cx, cy, cz, f = closest_on_triangle(px, py, pz, tri, hint)
        d2 = (px - cx) * (px - cx) + (py - cy) * (py - cy) + (pz - cz) * (pz - cz)
        if d2 < best2:
            best2 = d2
            slot = hint
            feat = f
            qx = cx
            qy = cy
            qz = cz
    sp = 0
    d0 = box_dist2(px, py, pz, nf, 0)
    if d0 < best2:
        stack[0] = 0
        dstack[0] = d0
        sp = 1
    while sp > 0:
        sp -= 1
        if dstack[sp] >= best2:
            continue
        node = stack[sp]
        n = ni[node, 7]
        if n > 0:
            s = ni[node, 6]
            for k in range(s, s + n):
                cx, cy, cz, f = closest_on_triangle(px, py, pz, tri, k)
                dx = px - cx
                dy = py - cy
                dz = pz - cz
                d2 = dx * dx + dy * dy + dz * dz
                if d2 < best2:
                    best2 = d2
                    slot = k
                    feat = f
                    qx = cx
                    qy = cy
                    qz = cz
            continue
        c = ni[node, 6]
        dl = box_dist2(px, py, pz, nf, c)
        dr = box_dist2(px, py, pz, nf, c + 1)
        # push the farther child first so the nearer one is walked next
        if dl <= dr:
            if dr < best2:
                stack[sp] = c + 1
                dstack[sp] = dr
                sp += 1
            if dl < best2:
                stack[sp] = c
                dstack[sp] = dl
                sp += 1
        else:
            if dl < best2:
                stack[sp] = c
                dstack[sp] = dl
                sp += 1
            if dr < best2:
                stack[sp] = c + 1
                dstack[sp] = dr
                sp += 1
    return best2, slot, qx, qy, qz, feat


@njit(cache=True)
def winding_number(px, py, pz, tri, ni, mom, beta2, stack):
    """Generalised winding number at p through the BVH with dipole far field."""
    w = 0.0
    stack[0] = 0
    sp = 1
    while sp > 0:
        sp -= 1
        node = stack[sp]
        dx = mom[node, 3] - px
        dy = mom[node, 4] - py
        dz = mom[node, 5] - pz
        d2 = dx * dx + dy * dy + dz * dz
        r = mom[node, 6]
        if d2 > beta2 * r * r:
            w += (mom[node, 0] * dx + mom[node, 1] * dy + mom[node, 2] * dz) / (d2 * math.sqrt(d2))
            continue
        n = ni[node, 7]
        if n > 0:
            s = ni[node, 6]
            for k in range(s, s + n):
                w += triangle_solid_angle(px, py, pz, tri, k)
            continue
        c = ni[node, 6]
        stack[sp] = c
        stack[sp + 1] = c + 1
        sp += 2
    return w / (4.0 * math.pi)


@njit(inline="always")
def pseudonormal_inside(px, py, pz, qx, qy, qz, slot, feat, tri, edge_n, vert_n):
    """True when p lies behind the pseudonormal of feature ``feat`` of slot's triangle at q.

    A face's normal is (b - a) x (c - a) from the triangle record itself (no
    extra memory read); edges and vertices use their precomputed pseudonormals.
    """
    if feat == _FACE:
        nx = tri[slot, 4] * tri[slot, 8] - tri[slot, 5] * tri[slot, 7]
        ny = tri[slot, 5] * tri[slot, 6] - tri[slot, 3] * tri[slot, 8]
        nz = tri[slot, 3] * tri[slot, 7] - tri[slot, 4] * tri[slot, 6]
    elif feat <= _VC:
        nx = vert_n[slot, feat, 0]
        ny = vert_n[slot, feat, 1]
        nz = vert_n[slot, feat, 2]
    else:
        e = feat - _EAB
        nx = edge_n[slot, e, 0]
        ny = edge_n[slot, e, 1]
        nz = edge_n[slot, e, 2]
    return (px - qx) * nx + (py - qy) * ny + (pz - qz) * nz < 0.0


@njit(cache=True)
def gather_candidates(cx, cy, cz, r2, tri, nf, ni, stack, cand):
    """Slots of every leaf whose box is nearer than sqrt(r2) to c, into cand; -1 if they overflow it."""
    nc = 0
    if box_dist2(cx, cy, cz, nf, 0) >= r2:
        return 0
    stack[0] = 0
    sp = 1
    while sp > 0:
        sp -= 1
        node = stack[sp]
        n = ni[node, 7]
        if n > 0:
            if nc + n > cand.shape[0]:
                return -1
            s = ni[node, 6]
            for k in range(s, s + n):
                cand[nc] = k
                nc += 1
            continue
        c = ni[node, 6]
        if box_dist2(cx, cy, cz, nf, c) < r2:
            stack[sp] = c
            sp += 1
        if box_dist2(cx, cy, cz, nf, c + 1) < r2:
            stack[sp] = c + 1
            sp += 1
    return nc


@njit(cache=True)
def group_nearest(points, g0, g1, search2, hint, misses, tri, nf, ni, stack, dstack, cand,
                  gb2, gslot, gq, gfeat):
    """Nearest triangle (closer than sqrt(search2)) for points g0..g1-1, into gb2/gslot/gq/gfeat.

    Neighbouring points share the search: with c their centre and r their
    radius, every point p has d(p) <= d(c) + r, so its nearest triangle lies
    within R = min(sqrt(search2), d(c) + r) + r of c. The triangles of every
    leaf box nearer than R to c are gathered once and each point takes the
    nearest of them, which is the same as its own search. Falls back to one
    search per point when the ball holds more than MAX_CANDIDATES triangles.
    The ball is first sized from the previous nearest triangle (``hint``, one
    triangle test), then, if that ball holds too many, from a search at c.
    ``misses`` counts groups of this chunk that fell back; after 2 the chunk
    goes point by point (its points are not neighbours). Returns (hint, misses).
    """
    m = g1 - g0
    nc = -1
    if misses < 2 and m > 1:
        cx = 0.0
        cy = 0.0
        cz = 0.0
        for i in range(g0, g1):
            cx += points[i, 0]
            cy += points[i, 1]
            cz += points[i, 2]
        cx /= m
        cy /= m
        cz /= m
        rg2 = 0.0
        for i in range(g0, g1):
            dx = points[i, 0] - cx
            dy = points[i, 1] - cy
            dz = points[i, 2] - cz
            rg2 = max(rg2, dx * dx + dy * dy + dz * dz)
        rg = math.sqrt(rg2)
        lim = math.sqrt(search2)
        if hint >= 0:  # first try the bound from the previous nearest triangle: no search at c
            ax, ay, az, f = closest_on_triangle(cx, cy, cz, tri, hint)
            lim = min(lim, math.sqrt((cx - ax) * (cx - ax) + (cy - ay) * (cy - ay) + (cz - az) * (cz - az)) + rg)
            rr = (lim + rg) * (1.0 + 1e-12) + 1e-300
            nc = gather_candidates(cx, cy, cz, rr * rr, tri, nf, ni, stack, cand)
        if nc < 0:
            b2c, sc, qx, qy, qz, f = nearest_triangle(cx, cy, cz, search2, hint, tri, nf, ni, stack, dstack)
            lim = math.sqrt(search2)
            if sc >= 0:
                hint = sc
                lim = min(lim, math.sqrt(b2c) + rg)
            rr = (lim + rg) * (1.0 + 1e-12) + 1e-300
            nc = gather_candidates(cx, cy, cz, rr * rr, tri, nf, ni, stack, cand)
        if nc < 0:
            misses += 1
    if nc >= 0:
        for i in range(g0, g1):
            px = points[i, 0]
            py = points[i, 1]
            pz = points[i, 2]
            j = i - g0
            best2 = search2
            slot = -1
            for c in range(nc):
                k = cand[c]
                ax, ay, az, f = closest_on_triangle(px, py, pz, tri, k)
                d2 = (px - ax) * (px - ax) + (py - ay) * (py - ay) + (pz - az) * (pz - az)
                if d2 < best2:
                    best2 = d2
                    slot = k
                    gfeat[j] = f
                    gq[j, 0] = ax
                    gq[j, 1] = ay
                    gq[j, 2] = az
            gb2[j] = best2
            gslot[j] = slot
            if slot >= 0:
                hint = slot
    else:
        for i in range(g0, g1):
            j = i - g0
            b2, sl, qx, qy, qz, f = nearest_triangle(points[i, 0], points[i, 1], points[i, 2], search2, hint,
                                                     tri, nf, ni, stack, dstack)
            if sl >= 0:
                hint = sl
            gb2[j] = b2
            gslot[j] = sl
            gfeat[j] = f
            gq[j, 0] = qx
            gq[j, 1] = qy
            gq[j, 2] = qz
    return hint, misses


@njit(cache=True)
def evaluate_chunk(ch, points, cap, search2, sign_mode, all_closed, tri, tri_class, tri_closed,
                   edge_n, vert_n, nf, ni, mom, beta2, sdf, cls):
    """Points ch * CHUNK .. (ch + 1) * CHUNK - 1 of evaluate_kernel, in order (one thread)."""
    p_count = points.shape[0]
    stack = np.empty(STACK, np.int64)
    dstack = np.empty(STACK, np.float64)
    cand = np.empty(MAX_CANDIDATES, np.int64)
    gb2 = np.empty(GROUP)
    gslot = np.empty(GROUP, np.int64)
    gfeat = np.empty(GROUP, np.int64)
    gq = np.empty((GROUP, 3))
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
        hint, misses = group_nearest(points, g0, g1, search2, hint, misses, tri, nf, ni, stack,
                                         dstack, cand, gb2, gslot, gq, gfeat)
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
                        free2, slot, qx, qy, qz, feat = nearest_triangle(px, py, pz, np.inf, hint, tri, nf,
                                                                         ni, stack, dstack)
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


@njit(parallel=True, cache=True)
def evaluate_kernel(points, cap, sign_mode, all_closed, tri, tri_class, tri_closed, edge_n, vert_n,
                    nf, ni, mom, beta, sdf, cls):
    """Signed distance and class at points.

    points (P, 3) float64; cap float64 (inf for none); sign_mode 0 unsigned,
    1 auto (pseudonormal where the nearest triangle's component is closed,
    else winding), 2 winding; all_closed: every component is closed (then the
    sign is constant inside any surface-free ball, and a beyond-cap point
    inside the free ball of an earlier point of its chunk copies its sign);
    per leaf slot: tri (F, 9) float64, tri_class (F,) int32, tri_closed (F,)
    uint8, edge_n (F, 3, 3) (edges ab, bc, ca), vert_n (F, 3,
    3) (corners a, b, c) pseudonormals; nf/ni the packed BVH (float32 / int32
    views), mom (M, 8) float64 moments. Writes sdf (P,) float64, cls (P,) int32.

    Points are processed in fixed chunks of CHUNK (whatever the thread count),
    each chunk in order, so results do not depend on the number of threads.
    """
    p_count = points.shape[0]
    n_chunks = (p_count + CHUNK - 1) // CHUNK
    # auto on a mesh with open parts: the sign needs the nearest feature anyway, so search unbounded
    search2 = cap * cap if (sign_mode != 1 or all_closed) else np.inf
    for ch in prange(n_chunks):
        evaluate_chunk(ch, points, cap, search2, sign_mode, all_closed, tri, tri_class, tri_closed,
                       edge_n, vert_n, nf, ni, mom, beta * beta, sdf, cls)


@njit(parallel=True, cache=True)
def winding_kernel(points, tri, ni, mom, beta, out):
    """Generalised winding number at points (P, 3) float64 into out (P,) float64."""
    p_count = points.shape[0]
    n_chunks = (p_count + CHUNK - 1) // CHUNK
    beta2 = beta * beta
    for ch in prange(n_chunks):
        stack = np.empty(STACK, np.int64)
        for i in range(ch * CHUNK, min(p_count, (ch + 1) * CHUNK)):
            out[i] = winding_number(points[i, 0], points[i, 1], points[i, 2], tri, ni, mom, beta2, stack)


@njit(cache=True)
def _find(parent, x):
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


@njit(cache=True)
def face_components(sorted_keys, sorted_faces, n_faces):
    """Component label per face: faces sharing an (undirected) edge are joined.

    sorted_keys (3F,) int64 undirected edge keys sorted; sorted_faces (3F,)
    the face of each key. Labels are the smallest face index of the component.
    """
    parent = np.arange(n_faces)
    for k in range(1, sorted_keys.shape[0]):
        if sorted_keys[k] == sorted_keys[k - 1]:
            a = _find(parent, sorted_faces[k])
            b = _find(parent, sorted_faces[k - 1])
            if a < b:
                parent[b] = a
            elif b < a:
                parent[a] = b
    out = np.empty(n_faces, np.int64)
    for f in range(n_faces):
        out[f] = _find(parent, f)
    return out


# --------------------------------------------------------------------------
# the field object
# --------------------------------------------------------------------------

def _edge_status(faces, n_vertices):
    """Per face: True when each of its 3 directed edges appears exactly once and its reverse exactly once."""
    a = faces.reshape(-1)
    b = faces[:, [1, 2, 0]].reshape(-1)
    fwd = a * n_vertices + b
    order = np.argsort(fwd, kind="stable")
    srt = fwd[order]
    same = srt[1:] == srt[:-1]
    once_sorted = np.ones(srt.size, bool)
    once_sorted[1:] &= ~same
    once_sorted[:-1] &= ~same
    once = np.empty(srt.size, bool)
    once[order] = once_sorted
    rev = b * n_vertices + a
    idx = np.minimum(np.searchsorted(srt, rev), srt.size - 1)
    rev_once = (srt[idx] == rev) & once_sorted[idx]
    return (once & rev_once).reshape(-1, 3).all(axis=1)


def _closed_components(faces, n_vertices):
    """(component index per face (F,) int64, component is closed (C,) bool)."""
    a = faces
    b = faces[:, [1, 2, 0]]
    key = (np.minimum(a, b) * n_vertices + np.maximum(a, b)).reshape(-1)
    order = np.argsort(key, kind="stable")
    owner = np.repeat(np.arange(faces.shape[0]), 3)
    label = face_components(key[order], owner[order], faces.shape[0])
    good = _edge_status(faces, n_vertices)
    roots, inv = np.unique(label, return_inverse=True)
    comp_ok = np.ones(roots.size, bool)
    np.logical_and.at(comp_ok, inv, good)
    return inv.astype(np.int64), comp_ok


TRUST_WORK = 2_000_000  # solid angles (samples x triangles) a part may spend proving itself; else untrusted


@njit(cache=True)
def winding_brute(points, tri, out):
    """Exact winding number of triangles tri (F, 9) rows (a, b - a, c - a) at points (P, 3).

    Serial: it runs on small sets, where a parallel launch costs more than the work.
    """
    for i in range(points.shape[0]):
        w = 0.0
        for k in range(tri.shape[0]):
            w += triangle_solid_angle(points[i, 0], points[i, 1], points[i, 2], tri, k)
        out[i] = w / (4.0 * math.pi)


def _trusted_components(v, faces, comp, comp_ok):
    """Closed parts whose pseudonormal sign equals the whole mesh's winding rule near them.

    Near a closed part C (oriented by the sign of its volume) the pseudonormal
    gives C's own winding number, 0 or +-1. That decides the whole mesh's
    ``w >= 0.5`` only if the other parts add 0 around a positive C (it is not
    inside another solid) or 1 around a negative C (a void inside a solid).
    This is checked exactly at every vertex and face centroid of C, summing
    the other parts whose boxes overlap C's box (parts with disjoint boxes add
    0 when closed). Intersecting parts usually have such a sample inside each
    other and fail too (a crossing that hides between samples is missed).
    Parts that fail, or whose check would cost more than TRUST_WORK, get the
    winding number instead.
    """
    n_comp = comp_ok.size
    trusted = comp_ok.copy()
    tri = v[faces]
    t9 = np.concatenate([tri[:, 0], tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]], axis=1)
    order = np.argsort(comp, kind="stable")
    starts = np.searchsorted(comp[order], np.arange(n_comp + 1))
    lo = np.full((n_comp, 3), np.inf)
    hi = np.full((n_comp, 3), -np.inf)
    np.minimum.at(lo, comp, tri.min(axis=1))
    np.maximum.at(hi, comp, tri.max(axis=1))
    pad = 1e-9 * float(np.linalg.norm(hi.max(axis=0) - lo.min(axis=0)))
    det = np.einsum("ij,ij->i", tri[:, 0], np.cross(tri[:, 1], tri[:, 2]))
    volume = np.bincount(comp, weights=det, minlength=n_comp)
    for c in np.flatnonzero(comp_ok):
        fc = order[starts[c]:starts[c + 1]]
        verts = np.concatenate([v[np.unique(faces[fc])], tri[fc].mean(axis=1)])  # vertices and centroids
        expect = 0.0 if volume[c] > 0 else 1.0
        overlap = np.all((lo <= hi[c] + pad) & (hi >= lo[c] - pad), axis=1)
        overlap[c] = False
        others = np.flatnonzero(overlap)
        if others.size == 0:
            trusted[c] = expect == 0.0  # a negative part with nothing around it is a void in nothing
            continue
        fo = np.concatenate([order[starts[d]:starts[d + 1]] for d in others])
        if verts.shape[0] * fo.size > TRUST_WORK:
            trusted[c] = False
            continue
        t9o = np.ascontiguousarray(t9[fo])
        for samples in (verts[::max(1, verts.shape[0] // 32)], verts):  # a cheap look first
            w = np.empty(samples.shape[0])
            winding_brute(samples, t9o, w)
            if not np.all(np.abs(w - expect) < 0.5):
                trusted[c] = False
                break
    return trusted


def _pseudonormals(v, faces):
    """Unit face normals (F, 3); edge pseudonormals per face edge ab, bc, ca (F, 3, 3); angle-weighted
    vertex pseudonormals per corner (F, 3, 3)."""
    tri = v[faces]
    n = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    n /= np.linalg.norm(n, axis=1, keepdims=True)
    nv = v.shape[0]
    a = faces
    b = faces[:, [1, 2, 0]]
    key = (np.minimum(a, b) * nv + np.maximum(a, b)).reshape(-1)
    uniq, inv = np.unique(key, return_inverse=True)
    rep = np.repeat(n, 3, axis=0)
    acc = np.stack([np.bincount(inv, weights=rep[:, j], minlength=uniq.size) for j in range(3)], axis=1)
    edge_n = acc[inv].reshape(-1, 3, 3)
    angle = np.empty(faces.shape)
    for j in range(3):
        u = tri[:, (j + 1) % 3] - tri[:, j]
        w = tri[:, (j + 2) % 3] - tri[:, j]
        cosang = np.einsum("ij,ij->i", u, w) / (np.linalg.norm(u, axis=1) * np.linalg.norm(w, axis=1))
        angle[:, j] = np.arccos(np.clip(cosang, -1.0, 1.0))
    wn = (angle[:, :, None] * n[:, None, :]).reshape(-1, 3)
    corner = faces.reshape(-1)
    vacc = np.stack([np.bincount(corner, weights=wn[:, j], minlength=nv) for j in range(3)], axis=1)
    vert_n = vacc[faces]
    return n, edge_n, vert_n


def _aligned(shape, dtype, align=64):
    """Zeroed array whose data starts on an ``align``-byte boundary."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape))
    raw = np.zeros(n * dt.itemsize + align, np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + n * dt.itemsize].view(dt).reshape(shape)


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
                raise MeshError(f"MeshField: classes must be ({f.shape[0]},) integers, got "
                                f"{cl.shape} {cl.dtype}")
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
        comp, comp_ok = _closed_components(f, v.shape[0])
        self.n_components = int(comp_ok.size)
        self.n_closed_components = int(comp_ok.sum())
        self.closed = bool(comp_ok.all())
        trusted = _trusted_components(v, f, comp, comp_ok) if sign == "auto" else comp_ok
        self.n_trusted_components = int(trusted.sum())
        comp_closed = trusted[comp]
        self.sign = sign
        self.beta = float(beta)
        tri = v[f]
        self.bounds_min = tri.reshape(-1, 3).min(axis=0)
        self.bounds_max = tri.reshape(-1, 3).max(axis=0)
        node_min, node_max, node_a, node_n, order = build_bvh(
            tri.min(axis=1), tri.max(axis=1), tri.mean(axis=1), LEAF_SIZE)
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
            _, en, vn = _pseudonormals(v, f)
            self._en = np.ascontiguousarray(en[order])
            self._vn = np.ascontiguousarray(vn[order])
        else:
            self._en = np.zeros((1, 3, 3))
            self._vn = np.zeros((1, 3, 3))

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
        evaluate_kernel(p, c, mode, self.closed, self._tri, self._class, self._closed, self._en, self._vn,
                        self._nf, self._ni, self._mom, self.beta, sdf, cls)
        return sdf, cls

    def winding_number(self, points):
        """Generalised winding number (P,) float64 at points (P, 3) (dipole far field)."""
        p = self._points(points)
        out = np.empty(p.shape[0])
        winding_kernel(p, self._tri, self._ni, self._mom, self.beta, out)
        return out
