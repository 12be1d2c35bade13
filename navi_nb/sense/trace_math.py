"""The tracer's scalar math, written once and compiled for two targets.

Every function here is plain Python over scalars (and the read-only arrays
of the world's decoded layout, ``navi_nb/world/layout.py``). The field at a
point (the descent through the layout and its trilinear interpolation) is
``navi_nb/world/field.py``'s, the one reader of the field that the point
queries and the collision use too. The CPU kernel uses the ``nb_*`` builds
(``njit(inline="always")``, on top of ``field.CPU``);
``navi_nb/sense/cuda_tracer.py`` builds the field's and these functions with
``cuda.jit(device=True)`` through :func:`build_for`. The helpers a function
calls are looked up by name in a namespace given per target, so one body
serves both.

Units: everything inside is in *voxel units* of the world cube: a point
``u = (p - bmin) / voxel_size`` lies in ``[0, resolution)^3``; ray parameters
``t`` are voxel lengths along a unit direction. Arithmetic is float64 on both
targets (so the two agree to the last bit on the same inputs; the outputs are
float32).

The world travels as one read-only tuple, the decoded layout
``lay = (child, leaf_dist, leaf_sem, top_code, top_level, res)`` (with the
top table's ``shift`` appended, ``field``, where the field is read), a ray as
``ray = (ox, oy, oz, dx, dy, dz)`` and the march's settings as ``march =
(t_max, eps, nudge, max_steps, refine, signed)``; arrays a kernel writes are
passed on their own (Numba loses writes to an array reached through a tuple
in a parallel loop).

The tracing rule (docs/SENSING.md has the full contract):

* pruned octant (clear mask bit): no surface inside, jump to its exit plus a
  tiny nudge;
* free leaf (semantic 0, distance >= 0): no surface inside, step by the larger
  of its distance and its exit;
* near-surface leaf (semantic != 0): hit when its distance is below epsilon
  (depth ``t + distance``), else step by the distance;
* negative leaf (inside solid): hit; the depth is ``t + distance`` (the
  surface lies at least ``|distance|`` behind) but not before the last point
  known to be in free space.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from navi_nb.world import field
from navi_nb.world.field import descend, field_at, field_at_outer, table_shift  # the plain functions; build_for

# binds these names to a target's builds

BIG = 1.0e30  # "no crossing" along an axis the ray does not move on (voxel units)
REFINE_WINDOW = 8.0  # voxels past the detected hit that refinement may move the depth
MIN_SLOPE = 0.05  # a refined hit needs the field to fall at least this fast along the ray
LONG_STEP = 2.0  # voxels: a longer Newton step is verified by one more evaluation
GRAZE_MARGIN = 0.25  # voxels: a ray in a solid-centred cell marches on only when this far outside
UNSIGNED_BACKOFF = 1.75  # voxels (about sqrt 3): an unsigned field is linear this far from a plane
UNSIGNED_LANDING = 0.75  # voxels: an unsigned field's interpolation stays below this at its surface
MAX_BACKOFF = 4  # evaluations spent finding the back-off point
UNSIGNED_NEAR = 0.75  # voxels: the field at the second, closer point of an unsigned refinement
SIGNED_NEWTON, UNSIGNED_BACK, UNSIGNED_CURVE, UNSIGNED_LAND = 0, 1, 2, 3  # refine_hit's phases
STAT_BITS = 10  # bits per step kind in a ray's packed tally (saturating at 1023)
STAT_MAX = (1 << STAT_BITS) - 1
STAT_KINDS = ("pruned", "free", "sphere", "candidate", "end", "descent")
"""A ray's step kinds, in the order of their fields in the tally (lowest
first): steps that jumped a pruned octant, stepped through a free leaf, took
a sphere step in a near-surface leaf, stopped at a candidate hit (refined
next), ended the ray (left the cube or passed t_max); and, not a step kind,
the steps that entered a new cell (every step descends through the layout;
these found a different cell from the step before). The first five sum to
the ray's steps."""
PRUNED, FREE, SPHERE, CANDIDATE, END, DESCENT = range(len(STAT_KINDS))


def tally_step(tally, kind):
    """The march's hook on each step of kind ``kind`` (:data:`STAT_KINDS`).
    The shipped build keeps no tally: this returns 0 and the compiler drops
    it; ``navi_nb/bench/anatomy.py`` builds the march with a counting one."""
    return 0


def tally_cell(tally, same_cell):
    """The march's hook after each descent (``same_cell``: the cell of the
    step before); as :func:`tally_step`, 0 in the shipped build."""
    return 0


def axis_exit(p, d, rd, lo, size):
    """Ray parameter at which coordinate ``p`` moving at rate ``d`` (``rd = 1 / d``)
    leaves ``[lo, lo+size)``."""
    if d > 0.0:
        return (lo + size - p) * rd
    if d < 0.0:
        return (lo - p) * rd
    return BIG


def reciprocal(d):
    """1 / d, or 0 for d == 0 (then :func:`axis_exit` does not use it)."""
    if d == 0.0:
        return 0.0
    return 1.0 / d


def cell_exit(p, d, rd, lo, size):
    """Distance along the ray from a point ``p`` inside a cube cell (corner ``lo``,
    edge ``size``) to the cell's exit, moving along ``d`` (``rd``: its reciprocals,
    computed once per ray: multiplications instead of divisions). Points and
    vectors are (x, y, z) tuples."""
    tx = axis_exit(p[0], d[0], rd[0], lo[0], size)
    ty = axis_exit(p[1], d[1], rd[1], lo[1], size)
    tz = axis_exit(p[2], d[2], rd[2], lo[2], size)
    t = tx
    if ty < t:
        t = ty
    if tz < t:
        t = tz
    if t < 0.0:
        t = 0.0
    return t


def slab(o, d, rd, lo, hi):
    """(t_enter, t_exit) of the ray against one axis slab [lo, hi] (``rd = 1 / d``)."""
    if d > 0.0:
        return (lo - o) * rd, (hi - o) * rd
    if d < 0.0:
        return (hi - o) * rd, (lo - o) * rd
    if o >= lo and o <= hi:
        return -BIG, BIG
    return BIG, -BIG


def ray_box(o, d, rd, size):
    """(t_enter, t_exit) of the ray from ``o`` along ``d`` (``rd``: reciprocals) against
    the cube [0, size]^3 (enter > exit: miss)."""
    ax, bx = slab(o[0], d[0], rd[0], 0.0, size)
    ay, by = slab(o[1], d[1], rd[1], 0.0, size)
    az, bz = slab(o[2], d[2], rd[2], 0.0, size)
    t0 = ax
    if ay > t0:
        t0 = ay
    if az > t0:
        t0 = az
    t1 = bx
    if by < t1:
        t1 = by
    if bz < t1:
        t1 = bz
    return t0, t1


GO_ON, FOUND, NOT_FOUND = 0, 1, 2  # what a refinement step decided


def newton_step(f, slope, t, t_lo, t_hi, k, iters, long):
    """One Newton step of a signed world's refinement, from the field ``f`` and its
    ``slope`` along the ray at ``t`` (``k``: the step about to be taken; ``long``:
    the last one was longer than LONG_STEP). Returns ``(decision, t, k, long)``."""
    if k == iters:  # only after a long last step: verify where it landed
        # near a zero, and one the ray enters: a long step on a shallow ray can pass the first
        # crossing and land on the far side of the solid, where the field rises again
        if f > 0.25 or f < -0.25 or slope >= 0.0:
            return NOT_FOUND, t, k, long
        return FOUND, t, k, long
    if f < 1e-3 and f > -1e-3:
        return FOUND, t, k, long
    if slope > -MIN_SLOPE:
        if k == 0 or f > 0.25 or f < -0.25:
            return NOT_FOUND, t, k, long
        return FOUND, t, k, long
    tn = t - f / slope
    if tn < t_lo or tn > t_hi:
        if k == 0 or f > 0.25 or f < -0.25:
            return NOT_FOUND, t, k, long
        return FOUND, t, k, long
    long = tn - t > LONG_STEP or t - tn > LONG_STEP
    k += 1
    if k == iters and not long:
        return FOUND, tn, k, long
    return GO_ON, tn, k, long


def unsigned_step(phase, f, slope, t, t_lo, t_hi, t_min, n_back, anchor):
    """One step of an unsigned world's refinement (:func:`refine_hit`), from the field
    ``f`` and its ``slope`` (along the unit gradient) at ``t``; ``anchor = (f_a, s_a,
    t_a)``: the field, slope and place at A. Returns ``(decision, t, phase, n_back,
    anchor)``."""
    f_a, s_a, t_a = anchor
    if phase == UNSIGNED_BACK:  # find A: a point where the field is exact (no trough)
        if f < UNSIGNED_BACKOFF:
            if n_back == MAX_BACKOFF or t <= t_min:
                return NOT_FOUND, t, phase, n_back, anchor
            if n_back == 0:  # in the trough the slope says nothing: back off by the margin first
                t = t - UNSIGNED_BACKOFF
            elif slope > -MIN_SLOPE:
                return NOT_FOUND, t, phase, n_back, anchor  # not approaching a surface: a graze
            else:
                t = t - (UNSIGNED_BACKOFF - f) / (-slope) - 0.125
            if t < t_min:
                t = t_min
            return GO_ON, t, phase, n_back + 1, anchor
        if slope > -MIN_SLOPE:
            return NOT_FOUND, t, phase, n_back, anchor  # not approaching a surface: a graze
        # B: where the straight extrapolation from A puts the field at UNSIGNED_NEAR, closer in
        return GO_ON, t + (f - UNSIGNED_NEAR) / (-slope), UNSIGNED_CURVE, n_back, (f, slope, t)
    if phase == UNSIGNED_CURVE:  # the slope's change from A to B gives the field's bend along the ray
        if f < 0.75 * UNSIGNED_NEAR or f >= f_a or slope > -MIN_SLOPE:
            f = f_a  # B is in the trough already: extrapolate straight from A
            slope = s_a
            t = t_a
            bend = 0.0
        else:
            bend = (slope - s_a) / (t - t_a)
            # a distance field bends at most as the distance to one point does: (1 - slope^2) / f
            top = (1.0 - slope * slope) / f
            if bend > top:
                bend = top
            if bend < -top:
                bend = -top
        disc = slope * slope - 2.0 * bend * f
        if disc < 0.0:  # the parabola turns back before zero (a bend overestimated on a shallow ray)
            disc = slope * slope  # the hit stands: extrapolate straight from B
        t = t + 2.0 * f / (-slope + math.sqrt(disc))  # the nearer root of f + slope x + bend x^2 / 2
        if t < t_lo or t > t_hi:
            return NOT_FOUND, t, phase, n_back, anchor
        return GO_ON, t, UNSIGNED_LAND, n_back, anchor
    # UNSIGNED_LAND: the field says nothing about the side it lands on, only that it is low
    if f > UNSIGNED_LANDING:
        return NOT_FOUND, t, phase, n_back, anchor
    return FOUND, t, phase, n_back, anchor


def refine_hit(field, ray, t_hit, t_lo, t_hi, iters, unsigned, t_min):
    """Sharpen a hit's depth on the interpolated field along the ray.

    ``field``: the decoded layout with the top table's shift appended; ``ray``
    as in the module doc. Signed worlds (:func:`newton_step`): from ``t_hit``,
    each step moves by ``-f / (grad f . dir)``, kept within ``[t_lo, t_hi]``;
    a step longer than LONG_STEP voxels (a shallow ray) is checked by one more
    evaluation. Returns ``(depth, found)``: found is False (and the depth
    ``t_hit``) when the ray does not approach the surface there (slope above
    -MIN_SLOPE: a graze, or leaving it), a first step would leave the window,
    or a long step does not land within 0.25 voxel of the surface on a
    crossing the ray enters (a long step can pass the first crossing and land
    where the field rises again on the solid's far side: the march then goes
    on and meets the surface closer). ``iters >= 1``.

    ``unsigned`` (:func:`unsigned_step`): the world stores |distance| (no
    negative leaf). Its interpolated field has a rounded trough, not a zero
    crossing, within about a voxel of a surface, so Newton steps taken there
    land short or long. The refinement backs off along the ray (not before
    ``t_min``, the ray's start) to a point A where the field is at least
    UNSIGNED_BACKOFF voxels (all eight samples of the interpolation on the
    ray's side of a plane: the field is exact there), evaluates B where the
    straight extrapolation from A gives UNSIGNED_NEAR, takes the slope's
    change from A to B as the field's bend along the ray, and puts the hit at
    the nearer root of that parabola from B (straight from B when it turns
    back before zero, from A when B is in the trough already). Slopes there
    are taken along the gradient rescaled to unit length (a pruned octant's
    lower bound in the interpolation shortens it). The hit stands when the
    field there is below UNSIGNED_LANDING (it says nothing about the side).
    A ray not approaching the surface (slope above -MIN_SLOPE) or with no
    room to back off keeps ``t_hit``.

    :func:`field_at` is called from one place (the top of the loop): the CPU
    build inlines it, and every extra call site would be another copy of it
    in the kernel (compile time).
    """
    child, leaf_dist, leaf_sem, top_code, top_level, res, shift = field
    ox, oy, oz, dx, dy, dz = ray
    t = t_hit
    k = 0  # the Newton step about to be taken
    long = False
    phase = UNSIGNED_BACK if unsigned else SIGNED_NEWTON
    n_back = 0
    anchor = (0.0, 0.0, 0.0)
    while True:
        f, gx, gy, gz = field_at(
            child, leaf_dist, leaf_sem, top_code, top_level, res, shift, ox + t * dx, oy + t * dy, oz + t * dz
        )
        slope = gx * dx + gy * dy + gz * dz
        if phase == SIGNED_NEWTON:
            decision, t, k, long = newton_step(f, slope, t, t_lo, t_hi, k, iters, long)
        else:
            # a distance field's gradient has unit length; where the interpolation reads a pruned
            # octant's lower bound it comes out shorter, its direction still right: rescale it
            glen = math.sqrt(gx * gx + gy * gy + gz * gz)
            if glen > 0.3:
                slope = slope / glen
            decision, t, phase, n_back, anchor = unsigned_step(phase, f, slope, t, t_lo, t_hi, t_min, n_back, anchor)
        if decision == FOUND:
            return t, True
        if decision == NOT_FOUND:
            return t_hit, False


def yaw_cos_sin(yaw):
    """(cos, sin) of a float32 yaw, in float64."""
    y = float(yaw)
    return math.cos(y), math.sin(y)


def yaw_rotate(vx, vy, vz, cos_yaw, sin_yaw):
    """Actor frame -> world frame: yaw grows to the right (heading azimuth).

    forward (0,0,-1) -> (sin, 0, -cos); right (1,0,0) -> (cos, 0, sin).
    """
    return vx * cos_yaw - vz * sin_yaw, vy, vx * sin_yaw + vz * cos_yaw


AT_MISS, AT_CANDIDATE, AT_SOLID_START = 0, 1, 2  # where march_to_candidate stopped


def march_to_candidate(field, ray, rd, span, march, walk):
    """March from ``walk``'s point to the next candidate hit: inside solid
    (d < 0) or a near-surface leaf closer than eps.

    ``rd``: the direction's reciprocals; ``span = (t0, t_end)``: where the
    ray enters the cube and where it stops; ``walk = (t, t_free, last_sem,
    steps, tally, cell)``: the ray parameter, the last point known free (the
    surface lies beyond it), the last near-surface semantic, the cell visits
    so far, the step tally (:func:`tally_step`) and the last cell visited
    ``(lox, loy, loz, size)``. Returns ``(outcome, t, t_free, last_sem,
    steps, tally, cell, d, sem, p)``: outcome AT_MISS (the ray left the cube,
    passed t_end or used up max_steps), AT_CANDIDATE or AT_SOLID_START (the
    ray starts in solid, or enters the cube there); d, sem: the candidate leaf's
    distance and semantic; p: the point where it was found.
    """
    child, leaf_dist, leaf_sem, top_code, top_level, res, shift = field
    ox, oy, oz, dx, dy, dz = ray
    t0, t_end = span
    _t_max, eps, nudge, max_steps, _refine, _signed = march
    t, t_free, last_sem, steps, tally, cell = walk
    d = 0.0
    csem = 0
    p = (0.0, 0.0, 0.0)
    while steps < max_steps:
        steps += 1
        if t > t_end:
            return AT_MISS, t, t_free, last_sem, steps, tally_step(tally, END), cell, d, csem, p
        p = (ox + t * dx, oy + t * dy, oz + t * dz)
        # every step descends: a test for "still in the last cell" held on about 2 % of steps and
        # cost more than the descents it saved (same cells either way)
        ckind, cdist, csem, clox, cloy, cloz, csize = descend(
            child, leaf_dist, leaf_sem, top_code, top_level, p[0], p[1], p[2], res, shift
        )
        tally = tally_cell(tally, clox == cell[0] and cloy == cell[1] and cloz == cell[2] and csize == cell[3])
        cell = (clox, cloy, cloz, csize)
        if ckind == 0:  # pruned octant: empty, skip to its exit
            tally = tally_step(tally, PRUNED)
            t_free = t + cell_exit(p, (dx, dy, dz), rd, (clox, cloy, cloz), csize)
            t = t_free + nudge
            continue
        d = cdist  # voxel units, NaN already read as 0 by the layout
        if d < 0.0:  # inside solid
            tally = tally_step(tally, CANDIDATE)
            if t == t0:
                return AT_SOLID_START, t, t_free, last_sem, steps, tally, cell, d, csem, p
            return AT_CANDIDATE, t, t_free, last_sem, steps, tally, cell, d, csem, p
        if csem != 0:  # near a surface
            last_sem = csem
            if d < eps:
                return AT_CANDIDATE, t, t_free, last_sem, steps, tally_step(tally, CANDIDATE), cell, d, csem, p
            tally = tally_step(tally, SPHERE)
            t_free = t
            t = t + d
        else:  # free leaf: no surface in the cell
            tally = tally_step(tally, FREE)
            step = cell_exit(p, (dx, dy, dz), rd, (clox, cloy, cloz), csize)
            if d > step:
                t = t + d
                t_free = t
            else:
                t_free = t + step
                t = t_free + nudge
    return AT_MISS, t, t_free, last_sem, steps, tally, cell, d, csem, p


def trace_ray(lay, ray, march):
    """Sphere-trace one ray through the DAG, all lengths in voxel units.

    ``lay``: the decoded layout (``navi_nb/world/layout.py``; leaf distances
    in voxel units). ``ray = (ox, oy, oz, dx, dy, dz)``: origin in voxel
    units (may lie outside the cube), unit direction. ``march = (t_max, eps,
    nudge, max_steps, refine, signed)``: the maximum distance (> 0), the hit
    epsilon, the push past a cell's exit, the cell visits allowed, the Newton
    iterations that sharpen a hit's depth (0: none) and whether the world
    holds negative distances (then a hit whose refinement finds no zero
    crossing is taken as a graze and the ray marches on). Returns ``(depth,
    semantic, hit, steps, tally)``; on a miss ``(t_max, 0, False, steps,
    tally)``. steps: the march's cell visits; tally: :func:`tally_step`'s
    (0 in the shipped build).

    The march stops at a candidate hit (:func:`march_to_candidate`); the
    candidate is refined in one place here (so the CPU build holds one
    inlined copy of the refinement), and a graze goes back to marching.
    """
    child, leaf_dist, leaf_sem, top_code, top_level, res = lay
    t_max, eps, _nudge, _max_steps, refine, signed = march
    d3 = (ray[3], ray[4], ray[5])
    rd = (reciprocal(ray[3]), reciprocal(ray[4]), reciprocal(ray[5]))
    t0, t1 = ray_box((ray[0], ray[1], ray[2]), d3, rd, res)
    shift = table_shift(top_code, res)
    field = (child, leaf_dist, leaf_sem, top_code, top_level, res, shift)
    if t0 < 0.0:
        t0 = 0.0
    t_end = t1
    if t_max < t_end:
        t_end = t_max
    if t0 > t_end:
        return t_max, 0, False, 0, 0
    t = t0
    t_free = t0
    last_sem = 0
    steps = 0
    tally = 0
    cell = (0.0, 0.0, 0.0, -1.0)  # no cell yet
    while True:
        outcome, t, t_free, last_sem, steps, tally, cell, d, csem, p = march_to_candidate(
            field, ray, rd, (t0, t_end), march, (t, t_free, last_sem, steps, tally, cell)
        )
        if outcome == AT_MISS:
            return t_max, 0, False, steps, tally
        if outcome == AT_SOLID_START:
            return t0, (csem if csem != 0 else 1), True, steps, tally
        solid = d < 0.0
        depth = t + d
        if solid and depth < t_free:  # the surface lies at least |d| behind, but not before t_free
            depth = t_free
        if refine > 0:
            if solid:
                t_hi = t + REFINE_WINDOW
            else:
                t_hi = t + d + REFINE_WINDOW
            if t_hi > t_end:
                t_hi = t_end
            depth, found = refine_hit(field, ray, depth, t_free, t_hi, refine, not signed, t0)
            if signed and not found:
                if not solid:
                    # no zero crossing of the interpolated signed field near here: the ray
                    # grazes the surface; march on (a real wall shows negative cells ahead)
                    t_free = t
                    if d < eps * 0.5:
                        d = eps * 0.5
                    t = t + d
                    continue
                fh, _gx, _gy, _gz = field_at_outer(
                    child, leaf_dist, leaf_sem, top_code, top_level, res, shift, p[0], p[1], p[2]
                )
                if fh > GRAZE_MARGIN:
                    # the cell's centre is in solid but the ray passes outside it: a graze
                    t_free = t
                    if fh < eps * 0.5:
                        fh = eps * 0.5
                    t = t + fh
                    continue
        if depth > t_max:
            return t_max, 0, False, steps, tally
        sem = csem
        if solid:
            if sem == 0:
                sem = last_sem
            if sem == 0:
                sem = 1
        return depth, sem, True, steps, tally


def ray_start(a, r, bmin, inv_voxel, dirs, origins, c, s):
    """(ox, oy, oz, dx, dy, dz): ray ``r`` of actor ``a`` in voxel units, its
    direction turned by the actor's yaw (``c, s``: :func:`yaw_cos_sin`)."""
    # np.float64, not float(): Numba's float() keeps a float32 float32, and the unrotated dy would type the
    # march's helpers a second time
    dx, dy, dz = yaw_rotate(np.float64(dirs[r, 0]), np.float64(dirs[r, 1]), np.float64(dirs[r, 2]), c, s)
    ox = (float(origins[a, 0]) - float(bmin[0])) * inv_voxel
    oy = (float(origins[a, 1]) - float(bmin[1])) * inv_voxel
    oz = (float(origins[a, 2]) - float(bmin[2])) * inv_voxel
    return ox, oy, oz, dx, dy, dz


def write_ray(i, depth, sem, hit, voxel, max_distance, depth_out, sem_out, hit_out):
    """Write ray ``i``'s result (depth in voxel units) in metres, clamped to the contract
    (a NaN depth, which only a hand-made world could cause, is written as 0)."""
    if hit:
        dm = depth * voxel
        if dm > max_distance:
            dm = max_distance
        if not (dm >= 0.0):
            dm = 0.0
        depth_out[i] = dm
        sem_out[i] = sem
        hit_out[i] = True
    else:
        depth_out[i] = max_distance
        sem_out[i] = 0
        hit_out[i] = False


def trace_one(i, a, r, lay, frame, march, max_distance, depth_out, sem_out, hit_out):
    """Ray ``i`` of the flattened (actor, ray) batch, ray ``r`` of actor ``a``
    (``i = a * n_dirs + r``, the caller tracks them): rotate, trace, write outputs.

    ``frame = (bmin, inv_voxel, voxel, dirs, origins, c, s)``: the world's
    field origin and voxel size, dirs (n_dirs, 3) float32 actor frame,
    origins (A, 3) float32 metres, ``c, s`` the cos and sin of the actor's
    yaw (:func:`yaw_cos_sin`, computed once per actor by the caller);
    outputs flat (A * n_dirs,). (The CPU kernel calls the three steps itself:
    one level less of Numba's inlining, whose IR copies made up most of its
    compile time.)
    """
    bmin, inv_voxel, voxel, dirs, origins, c, s = frame
    ray = ray_start(a, r, bmin, inv_voxel, dirs, origins, c, s)
    depth, sem, hit, _steps, _tally = trace_ray(lay, ray, march)
    write_ray(i, depth, sem, hit, voxel, max_distance, depth_out, sem_out, hit_out)


# --------------------------------------------------------------------------
# building the functions for one target
# --------------------------------------------------------------------------

# in the order they must be built (a function's helpers come first), after the field's
MATH_FUNCTIONS = (
    "axis_exit",
    "reciprocal",
    "cell_exit",
    "slab",
    "ray_box",
    "newton_step",
    "unsigned_step",
    "refine_hit",
    "tally_step",
    "tally_cell",
    "yaw_cos_sin",
    "yaw_rotate",
    "march_to_candidate",
    "trace_ray",
    "ray_start",
    "write_ray",
    "trace_one",
)

SCALAR_MATH = (
    "axis_exit",
    "reciprocal",
    "cell_exit",
    "slab",
    "ray_box",
    "newton_step",
    "unsigned_step",
    "tally_step",
    "tally_cell",
    "yaw_cos_sin",
    "yaw_rotate",
)
"""Helpers of numbers only: on the CPU separate functions that LLVM inlines after linking (as
``field.SCALAR_HELPERS``: the same bits and speed, each typed once; the tracer's cold first call about
3-5 s shorter)."""
OUTER_MATH = SCALAR_MATH + ("refine_hit",)
"""Built with ``decorate_outer``: on the CPU a separate function (the refinement: called once per hit)."""


def build_for(decorate, decorate_outer=None, field_built=None, hooks=None):
    """Build the field's functions (``navi_nb/world/field.py``) and then every
    math function here with ``decorate`` (a decorator); returns a dict name ->
    compiled function.

    ``hooks``: plain functions to build in place of :func:`tally_step` and
    :func:`tally_cell` (a dict name -> function; ``navi_nb/bench/anatomy.py``'s
    counting build; give it a ``decorate`` that renames its functions, so that
    their cached code never shares a name with the shipped build's).

    ``field_built``: the field's functions already built for this target
    (the CPU passes ``field.CPU``, so there is one build of each).
    ``decorate_outer`` (default: ``decorate``) builds the field's
    ``OUTER_FUNCTIONS`` and :data:`OUTER_MATH`: on the CPU these stay
    separate functions, compiled once, without Numba's reference counting
    (``_nrt=False``: they allocate nothing), so a call passes the arrays'
    fields and nothing else. Everything a ray does on every step is inlined
    into the parallel kernel: a call there costs about 75-100 ns with
    reference counting (every array argument unpacked, counts touched), and
    calling everything out of line without it ran at 77 % of the inlined
    speed. The refinement (once per hit, with its inlined field lookup) is
    the one hot function kept out of line: inlined, Numba copies its IR into
    the kernel and the kernel's cold compile took about 55 s on the quiet
    2-core machine; out of line the tracer compiles in about 28 s and traces
    3-4 % slower per thread (same bits). Out of line too: ``descend_float``
    (non-power-of-two worlds), the general corner lookup (``corner_values``,
    ``cell_value``) and the graze check (``field_at_outer``).
    """
    if field_built is None:
        field_built = field.build_for(decorate, decorate_outer)
    plain = dict(globals())
    plain.update(hooks or {})
    return field.build_for(
        decorate, decorate_outer, names=MATH_FUNCTIONS, module_globals=plain, built=dict(field_built), outer=OUTER_MATH
    )


_CPU = build_for(njit(inline="always", cache=True), njit(cache=True, _nrt=False), field_built=field.CPU)
nb_trace_ray = _CPU["trace_ray"]
nb_ray_start = _CPU["ray_start"]
nb_write_ray = _CPU["write_ray"]
nb_yaw_cos_sin = _CPU["yaw_cos_sin"]
