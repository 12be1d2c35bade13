"""Nearest-triangle search through the packed BVH (Numba kernels, one point or a group at a time).

``nearest_triangle``: a depth-first walk, nearer child first, pruning every box
farther than the best so far, warm-started from a hint triangle.
``group_nearest``: runs of up to GROUP neighbouring points (the compiler's 8
sibling cells) share one gathering of candidate triangles
(``gather_candidates``), with the same answers as one search per point.
"""

from __future__ import annotations

import math

from numba import njit

from navi_nb.world.bvh import box_dist2
from navi_nb.world.triangle_geometry import closest_on_triangle

__all__ = ["GROUP", "MAX_CANDIDATES", "nearest_triangle", "gather_candidates", "group_nearest"]

GROUP = 8  # consecutive points that share one candidate search (a cell's 8 children)
MAX_CANDIDATES = 48  # a group whose candidate ball holds more triangles is searched point by point


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
def group_nearest(points, g0, g1, search2, hint, misses, tri, nf, ni, scratch, out):
    """Nearest triangle (closer than sqrt(search2)) for points g0..g1-1, into out = (gb2, gslot, gq, gfeat).

    scratch = (stack, dstack, cand): the traversal stacks and the candidate
    list, allocated once per chunk by the caller.

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
    stack, dstack, cand = scratch
    gb2, gslot, gq, gfeat = out
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
            b2, sl, qx, qy, qz, f = nearest_triangle(
                points[i, 0], points[i, 1], points[i, 2], search2, hint, tri, nf, ni, stack, dstack
            )
            if sl >= 0:
                hint = sl
            gb2[j] = b2
            gslot[j] = sl
            gfeat[j] = f
            gq[j, 0] = qx
            gq[j, 1] = qy
            gq[j, 2] = qz
    return hint, misses
