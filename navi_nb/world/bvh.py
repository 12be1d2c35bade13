"""Bounding-volume hierarchy over triangles in flat arrays, for the mesh distance field.

``build_bvh`` (binned surface-area heuristic, one thread; ~35k triangles in a
few ms) returns nodes in which children always follow their parent;
``pack_nodes`` writes them as 32-byte records (float32 box rounded outwards +
int32 link) with sibling pairs sharing a cache line; ``box_dist2`` is the
squared distance from a point to a packed record's box, the pruning test of
every walk over the tree.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["LEAF_SIZE", "STACK", "build_bvh", "pack_nodes", "box_dist2"]

LEAF_SIZE = 2  # triangles per BVH leaf
STACK = 256  # traversal stack entries; build_bvh caps the tree depth below this
SAH_BINS = 16  # centroid bins per axis for the surface-area-heuristic split
SAH_DEPTH = 64  # below this depth, median splits (keeps depth < SAH_DEPTH + 64 < STACK)


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
