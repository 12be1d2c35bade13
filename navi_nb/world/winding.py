"""Inside or outside a triangle mesh: winding numbers, closed parts, pseudonormals and which parts to trust.

- ``bvh_moments`` / ``winding_number``: the generalised winding number summed
  through the BVH, with the far-field dipole of Barill et al. 2018 for
  clusters seen from farther than beta times their radius; ``winding_brute``
  the exact sum over every triangle (small sets).
- ``closed_components``: faces joined through shared edges, and which parts
  are closed (each directed edge once and its reverse once).
- ``trusted_components``: the closed parts whose pseudonormal sign equals the
  whole mesh's winding rule near them.
- ``pseudonormals`` / ``pseudonormal_inside``: angle-weighted pseudonormals
  (Baerentzen & Aanaes 2005) and the sign test against them.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from navi_nb.world.triangle_geometry import FEATURE_EAB, FEATURE_FACE, FEATURE_VC, triangle_solid_angle

__all__ = [
    "WINDING_BETA",
    "TRUST_WORK",
    "bvh_moments",
    "winding_number",
    "winding_brute",
    "closed_components",
    "trusted_components",
    "pseudonormals",
    "pseudonormal_inside",
    "face_components",
]

WINDING_BETA = 2.0  # far-field test of the winding number: |c - p| > beta * radius
TRUST_WORK = 2_000_000  # solid angles (samples x triangles) a part may spend proving itself; else untrusted


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


def closed_components(faces, n_vertices):
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


def trusted_components(v, faces, comp, comp_ok):
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
        fc = order[starts[c] : starts[c + 1]]
        verts = np.concatenate([v[np.unique(faces[fc])], tri[fc].mean(axis=1)])  # vertices and centroids
        expect = 0.0 if volume[c] > 0 else 1.0
        overlap = np.all((lo <= hi[c] + pad) & (hi >= lo[c] - pad), axis=1)
        overlap[c] = False
        others = np.flatnonzero(overlap)
        if others.size == 0:
            trusted[c] = expect == 0.0  # a negative part with nothing around it is a void in nothing
            continue
        fo = np.concatenate([order[starts[d] : starts[d + 1]] for d in others])
        if verts.shape[0] * fo.size > TRUST_WORK:
            trusted[c] = False
            continue
        t9o = np.ascontiguousarray(t9[fo])
        for samples in (verts[:: max(1, verts.shape[0] // 32)], verts):  # a cheap look first
            w = np.empty(samples.shape[0])
            winding_brute(samples, t9o, w)
            if not np.all(np.abs(w - expect) < 0.5):
                trusted[c] = False
                break
    return trusted


def pseudonormals(v, faces):
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


@njit(inline="always")
def pseudonormal_inside(px, py, pz, qx, qy, qz, slot, feat, tri, edge_n, vert_n):
    """True when p lies behind the pseudonormal of feature ``feat`` of slot's triangle at q.

    A face's normal is (b - a) x (c - a) from the triangle record itself (no
    extra memory read); edges and vertices use their precomputed pseudonormals.
    """
    if feat == FEATURE_FACE:
        nx = tri[slot, 4] * tri[slot, 8] - tri[slot, 5] * tri[slot, 7]
        ny = tri[slot, 5] * tri[slot, 6] - tri[slot, 3] * tri[slot, 8]
        nz = tri[slot, 3] * tri[slot, 7] - tri[slot, 4] * tri[slot, 6]
    elif feat <= FEATURE_VC:
        nx = vert_n[slot, feat, 0]
        ny = vert_n[slot, feat, 1]
        nz = vert_n[slot, feat, 2]
    else:
        e = feat - FEATURE_EAB
        nx = edge_n[slot, e, 0]
        ny = edge_n[slot, e, 1]
        nz = edge_n[slot, e, 2]
    return (px - qx) * nx + (py - qy) * ny + (pz - qz) * nz < 0.0
