"""Point-triangle geometry in float64, on triangles stored as rows (a, b - a, c - a) of 9 numbers.

``closest_on_triangle`` (nearest point and which feature it lies on: a
vertex, an edge or the face) and ``triangle_solid_angle`` (signed solid angle
seen from a point), both inlined into the mesh field's kernels.
"""

from __future__ import annotations

import math

from numba import njit

__all__ = [
    "closest_on_triangle",
    "triangle_solid_angle",
    "FEATURE_VA",
    "FEATURE_VB",
    "FEATURE_VC",
    "FEATURE_EAB",
    "FEATURE_EBC",
    "FEATURE_ECA",
    "FEATURE_FACE",
]

# feature codes of the nearest point on a triangle (a, b, c): vertices, edges ab, bc, ca, the face
FEATURE_VA, FEATURE_VB, FEATURE_VC, FEATURE_EAB, FEATURE_EBC, FEATURE_ECA, FEATURE_FACE = 0, 1, 2, 3, 4, 5, 6


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
        return ax, ay, az, FEATURE_VA
    bpx = apx - abx
    bpy = apy - aby
    bpz = apz - abz
    d3 = abx * bpx + aby * bpy + abz * bpz
    d4 = acx * bpx + acy * bpy + acz * bpz
    if d3 >= 0.0 and d4 <= d3:
        return ax + abx, ay + aby, az + abz, FEATURE_VB
    vc = d1 * d4 - d3 * d2
    if vc <= 0.0 and d1 >= 0.0 and d3 <= 0.0:
        den = d1 - d3
        v = d1 / den if den > 0.0 else 0.0  # den is |ab|^2; 0 only when it cancels (p far from a tiny edge)
        return ax + v * abx, ay + v * aby, az + v * abz, FEATURE_EAB
    cpx = apx - acx
    cpy = apy - acy
    cpz = apz - acz
    d5 = abx * cpx + aby * cpy + abz * cpz
    d6 = acx * cpx + acy * cpy + acz * cpz
    if d6 >= 0.0 and d5 <= d6:
        return ax + acx, ay + acy, az + acz, FEATURE_VC
    vb = d5 * d2 - d1 * d6
    if vb <= 0.0 and d2 >= 0.0 and d6 <= 0.0:
        den = d2 - d6
        w = d2 / den if den > 0.0 else 0.0
        return ax + w * acx, ay + w * acy, az + w * acz, FEATURE_ECA
    va = d3 * d6 - d5 * d4
    if va <= 0.0 and (d4 - d3) >= 0.0 and (d5 - d6) >= 0.0:
        den = (d4 - d3) + (d5 - d6)
        w = (d4 - d3) / den if den > 0.0 else 0.0
        return (ax + abx + w * (acx - abx), ay + aby + w * (acy - aby), az + abz + w * (acz - abz), FEATURE_EBC)
    area2 = va + vb + vc
    if not area2 > 0.0:  # cancelled to 0 (or NaN): p is so far that any corner is as near within rounding
        return ax, ay, az, FEATURE_VA
    denom = 1.0 / area2
    v = vb * denom
    w = vc * denom
    return ax + abx * v + acx * w, ay + aby * v + acy * w, az + abz * v + acz * w, FEATURE_FACE


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
    den = (
        la * lb * lc
        + (ax * bx + ay * by + az * bz) * lc
        + (bx * cx + by * cy + bz * cz) * la
        + (cx * ax + cy * ay + cz * az) * lb
    )
    return 2.0 * math.atan2(det, den)
