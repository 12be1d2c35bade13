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
COUNT_STEPS = False
"""Compile-time flag, bound per build (:func:`build_for`): the counting build
(``count=True``, used by ``navi-nb bench trace`` only) tallies each ray's
step kinds in :func:`trace_ray`; in the production build the tallies are
constant zeros and the compiler drops them."""
STAT_BITS = 10  # bits per step kind in trace_ray's packed tally (saturating at 1023)
STAT_MAX = (1 << STAT_BITS) - 1
STAT_KINDS = ("pruned", "free", "sphere", "candidate", "end", "descent")
"""The packed tally's fields, lowest first: steps that jumped a pruned octant,
stepped through a free leaf, took a sphere step in a near-surface leaf,
stopped at a candidate hit (refined next), ended the ray (left the cube or
passed t_max); and, not a step kind, the steps that entered a new cell (every
step descends through the layout; these found a different cell from the
step before). The first five sum to the ray's steps."""


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


def cell_exit(px, py, pz, dx, dy, dz, rx, ry, rz, lox, loy, loz, size):
    """Distance along the ray from a point inside a cube cell to the cell's exit
    (``r* = 1 / d*``, computed once per ray: multiplications instead of divisions)."""
    tx = axis_exit(px, dx, rx, lox, size)
    ty = axis_exit(py, dy, ry, loy, size)
    tz = axis_exit(pz, dz, rz, loz, size)
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


def ray_box(ox, oy, oz, dx, dy, dz, rx, ry, rz, size):
    """(t_enter, t_exit) of the ray against the cube [0, size]^3 (enter > exit: miss)."""
    ax, bx = slab(ox, dx, rx, 0.0, size)
    ay, by = slab(oy, dy, ry, 0.0, size)
    az, bz = slab(oz, dz, rz, 0.0, size)
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


def refine_hit(
    child,
    leaf_dist,
    leaf_sem,
    top_code,
    top_level,
    res,
    shift,
    ox,
    oy,
    oz,
    dx,
    dy,
    dz,
    t_hit,
    t_lo,
    t_hi,
    iters,
    unsigned,
    t_min,
):
    """Sharpen a hit's depth with Newton steps on the interpolated field along the ray.

    From ``t_hit``, each step moves by ``-f / (grad f . dir)``, kept within
    ``[t_lo, t_hi]``; a step longer than LONG_STEP voxels (a shallow ray) is
    checked by one more evaluation. Returns ``(depth, found)``: found is
    False (and the depth ``t_hit``) when the ray does not approach the surface
    there (slope above -MIN_SLOPE: a graze, or leaving it), a first step would
    leave the window, or a long step does not land within 0.25 voxel of the
    surface on a crossing the ray enters (a long step can pass the first
    crossing and land where the field rises again on the solid's far side:
    the march then goes on and meets the surface closer). ``iters >= 1``.

    ``unsigned``: the world stores |distance| (no negative leaf). Its
    interpolated field has a rounded trough, not a zero crossing, within about
    a voxel of a surface, so Newton steps taken there land short or long.
    The refinement backs off along the ray (not before ``t_min``, the ray's
    start) to a point A where the field is at least UNSIGNED_BACKOFF voxels
    (all eight samples of the interpolation on the ray's side of a plane:
    the field is exact there), evaluates B where the straight extrapolation
    from A gives UNSIGNED_NEAR, takes the slope's change from A to B as the
    field's bend along the ray, and puts the hit at the nearer root of that
    parabola from B (straight from B when it turns back before zero, from A
    when B is in the trough already). Slopes there are taken along the
    gradient rescaled to unit length (a pruned octant's lower bound in the
    interpolation shortens it). The hit stands when the field there is below
    UNSIGNED_LANDING (it says nothing about the side). A ray not approaching
    the surface (slope above -MIN_SLOPE) or with no room to back off keeps
    ``t_hit``.

    :func:`field_at` is called from one place (the top of the loop): the CPU
    build inlines it, and every extra call site would be another copy of it
    in the kernel (compile time).
    """
    t = t_hit
    k = 0  # the Newton step about to be taken
    long = False
    phase = UNSIGNED_BACK if unsigned else SIGNED_NEWTON
    n_back = 0
    f_a = 0.0
    s_a = 0.0
    t_a = 0.0
    while True:
        f, gx, gy, gz = field_at(
            child, leaf_dist, leaf_sem, top_code, top_level, res, shift, ox + t * dx, oy + t * dy, oz + t * dz
        )
        slope = gx * dx + gy * dy + gz * dz
        if phase != SIGNED_NEWTON:
            # a distance field's gradient has unit length; where the interpolation reads a pruned
            # octant's lower bound it comes out shorter, its direction still right: rescale it
            glen = math.sqrt(gx * gx + gy * gy + gz * gz)
            if glen > 0.3:
                slope = slope / glen
        if phase == UNSIGNED_BACK:  # find A: a point where the field is exact (no trough)
            if f < UNSIGNED_BACKOFF:
                if n_back == MAX_BACKOFF or t <= t_min:
                    return t_hit, False
                if n_back == 0:  # in the trough the slope says nothing: back off by the margin first
                    t = t - UNSIGNED_BACKOFF
                elif slope > -MIN_SLOPE:
                    return t_hit, False  # not approaching a surface: a graze
                else:
                    t = t - (UNSIGNED_BACKOFF - f) / (-slope) - 0.125
                if t < t_min:
                    t = t_min
                n_back += 1
                continue
            if slope > -MIN_SLOPE:
                return t_hit, False  # not approaching a surface: a graze
            f_a = f
            s_a = slope
            t_a = t
            phase = UNSIGNED_CURVE
            # B: where the straight extrapolation from A puts the field at UNSIGNED_NEAR, closer in
            t = t_a + (f_a - UNSIGNED_NEAR) / (-s_a)
            continue
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
                return t_hit, False
            phase = UNSIGNED_LAND
            continue
        if phase == UNSIGNED_LAND:  # the field says nothing about the side it lands on: only that it is low
            if f > UNSIGNED_LANDING:
                return t_hit, False
            return t, True
        if k == iters:  # only after a long last step: verify where it landed
            # near a zero, and one the ray enters: a long step on a shallow ray can pass the first
            # crossing and land on the far side of the solid, where the field rises again
            if f > 0.25 or f < -0.25 or gx * dx + gy * dy + gz * dz >= 0.0:
                return t_hit, False
            return t, True
        if f < 1e-3 and f > -1e-3:
            return t, True
        if slope > -MIN_SLOPE:
            if k == 0 or f > 0.25 or f < -0.25:
                return t_hit, False
            return t, True
        tn = t - f / slope
        if tn < t_lo or tn > t_hi:
            if k == 0 or f > 0.25 or f < -0.25:
                return t_hit, False
            return t, True
        long = tn - t > LONG_STEP or t - tn > LONG_STEP
        t = tn
        k += 1
        if k == iters and not long:
            return t, True


def yaw_cos_sin(yaw):
    """(cos, sin) of a float32 yaw, in float64."""
    y = float(yaw)
    return math.cos(y), math.sin(y)


def yaw_rotate(vx, vy, vz, cos_yaw, sin_yaw):
    """Actor frame -> world frame: yaw grows to the right (heading azimuth).

    forward (0,0,-1) -> (sin, 0, -cos); right (1,0,0) -> (cos, 0, sin).
    """
    return vx * cos_yaw - vz * sin_yaw, vy, vx * sin_yaw + vz * cos_yaw


def pack_stats(n_pruned, n_free, n_sphere, n_cand, n_end, n_desc):
    """The counting build's tally of one ray in one int64 (STAT_KINDS order,
    STAT_BITS each, saturating); 0 in the production build."""
    if not COUNT_STEPS:
        return 0
    out = 0
    shift = 0
    for v in (n_pruned, n_free, n_sphere, n_cand, n_end, n_desc):
        if v > STAT_MAX:
            v = STAT_MAX
        out |= v << shift
        shift += STAT_BITS
    return out


def trace_ray(
    child,
    leaf_dist,
    leaf_sem,
    top_code,
    top_level,
    res,
    ox,
    oy,
    oz,
    dx,
    dy,
    dz,
    t_max,
    eps,
    nudge,
    max_steps,
    refine,
    signed,
):
    """Sphere-trace one ray through the DAG, all lengths in voxel units.

    The world is the decoded layout (``navi_nb/world/layout.py``; leaf
    distances in voxel units). refine: Newton iterations that sharpen a
    hit's depth (0: none). signed: the world holds negative distances (then
    a hit whose refinement finds no zero crossing is taken as a graze and the
    ray marches on). (ox, oy, oz): origin in voxel units (may lie outside the
    cube); (dx, dy, dz): unit direction. t_max > 0: the maximum distance.
    eps: hit epsilon; nudge: the push past a cell's exit; max_steps: cell
    visits. Returns ``(depth, semantic, hit, steps, stats)``; on a miss
    ``(t_max, 0, False, steps, stats)``. steps: the march's cell visits;
    stats: :func:`pack_stats`'s tally (0 unless the counting build).

    The march stops at a candidate hit and leaves the loop; the candidate is
    refined in one place below (so the CPU build holds one inlined copy of the
    refinement), and a graze goes back to marching.
    """
    rx = reciprocal(dx)
    ry = reciprocal(dy)
    rz = reciprocal(dz)
    t0, t1 = ray_box(ox, oy, oz, dx, dy, dz, rx, ry, rz, res)
    shift = table_shift(top_code, res)
    if t0 < 0.0:
        t0 = 0.0
    t_end = t1
    if t_max < t_end:
        t_end = t_max
    if t0 > t_end:
        return t_max, 0, False, 0, pack_stats(0, 0, 0, 0, 0, 0)
    t = t0
    t_free = t0  # the surface lies beyond this point (last point known free)
    last_sem = 0
    ckind = 0
    cdist = 0.0
    csem = 0
    clox = 0.0
    cloy = 0.0
    cloz = 0.0
    csize = -1.0  # no cell yet
    steps = 0
    n_pruned = 0  # the tallies (COUNT_STEPS builds only; constant 0 otherwise)
    n_free = 0
    n_sphere = 0
    n_cand = 0
    n_end = 0
    n_desc = 0
    while True:
        # march to the next candidate hit: inside solid (d < 0) or a near-surface leaf closer than eps
        candidate = False
        px = 0.0
        py = 0.0
        pz = 0.0
        d = 0.0
        while steps < max_steps:
            steps += 1
            if t > t_end:
                if COUNT_STEPS:
                    n_end += 1
                return t_max, 0, False, steps, pack_stats(n_pruned, n_free, n_sphere, n_cand, n_end, n_desc)
            px = ox + t * dx
            py = oy + t * dy
            pz = oz + t * dz
            # every step descends: a test for "still in the last cell" held on about 2 % of steps and
            # cost more than the descents it saved (same cells either way)
            plox, ploy, ploz, psize = clox, cloy, cloz, csize  # the last cell (for the counting build's tally)
            ckind, cdist, csem, clox, cloy, cloz, csize = descend(
                child, leaf_dist, leaf_sem, top_code, top_level, px, py, pz, res, shift
            )
            if COUNT_STEPS:
                if not (clox == plox and cloy == ploy and cloz == ploz and csize == psize):
                    n_desc += 1
            if ckind == 0:  # pruned octant: empty, skip to its exit
                if COUNT_STEPS:
                    n_pruned += 1
                step = cell_exit(px, py, pz, dx, dy, dz, rx, ry, rz, clox, cloy, cloz, csize)
                t_free = t + step
                t = t_free + nudge
                continue
            d = cdist  # voxel units, NaN already read as 0 by the layout
            if d < 0.0:  # inside solid
                if COUNT_STEPS:
                    n_cand += 1
                if t == t0:  # the ray starts in solid (or enters the cube there)
                    return (
                        t0,
                        (csem if csem != 0 else 1),
                        True,
                        steps,
                        pack_stats(n_pruned, n_free, n_sphere, n_cand, n_end, n_desc),
                    )
                candidate = True
                break
            if csem != 0:  # near a surface
                last_sem = csem
                if d < eps:
                    if COUNT_STEPS:
                        n_cand += 1
                    candidate = True
                    break
                if COUNT_STEPS:
                    n_sphere += 1
                t_free = t
                t = t + d
            else:  # free leaf: no surface in the cell
                if COUNT_STEPS:
                    n_free += 1
                step = cell_exit(px, py, pz, dx, dy, dz, rx, ry, rz, clox, cloy, cloz, csize)
                if d > step:
                    t = t + d
                    t_free = t
                else:
                    t_free = t + step
                    t = t_free + nudge
        if not candidate:  # max_steps used up
            return t_max, 0, False, steps, pack_stats(n_pruned, n_free, n_sphere, n_cand, n_end, n_desc)
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
            depth, found = refine_hit(
                child,
                leaf_dist,
                leaf_sem,
                top_code,
                top_level,
                res,
                shift,
                ox,
                oy,
                oz,
                dx,
                dy,
                dz,
                depth,
                t_free,
                t_hi,
                refine,
                not signed,
                t0,
            )
            if signed and not found:
                if not solid:
                    # no zero crossing of the interpolated signed field near here: the ray
                    # grazes the surface; march on (a real wall shows negative cells ahead)
                    t_free = t
                    if d < eps * 0.5:
                        d = eps * 0.5
                    t = t + d
                    continue
                fh, gx, gy, gz = field_at_outer(child, leaf_dist, leaf_sem, top_code, top_level, res, shift, px, py, pz)
                if fh > GRAZE_MARGIN:
                    # the cell's centre is in solid but the ray passes outside it: a graze
                    t_free = t
                    if fh < eps * 0.5:
                        fh = eps * 0.5
                    t = t + fh
                    continue
        if depth > t_max:
            return t_max, 0, False, steps, pack_stats(n_pruned, n_free, n_sphere, n_cand, n_end, n_desc)
        sem = csem
        if solid:
            if sem == 0:
                sem = last_sem
            if sem == 0:
                sem = 1
        return depth, sem, True, steps, pack_stats(n_pruned, n_free, n_sphere, n_cand, n_end, n_desc)


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


def trace_one(
    i,
    a,
    r,
    child,
    leaf_dist,
    leaf_sem,
    top_code,
    top_level,
    res,
    bmin,
    inv_voxel,
    voxel,
    dirs,
    origins,
    c,
    s,
    t_max,
    eps,
    nudge,
    max_steps,
    refine,
    signed,
    max_distance,
    depth_out,
    sem_out,
    hit_out,
):
    """Ray ``i`` of the flattened (actor, ray) batch, ray ``r`` of actor ``a``
    (``i = a * n_dirs + r``, the caller tracks them): rotate, trace, write outputs.

    dirs (n_dirs, 3) float32 actor frame; origins (A, 3) float32 metres;
    ``c, s``: cos and sin of the actor's yaw (:func:`yaw_cos_sin`, computed
    once per actor by the caller); outputs flat (A * n_dirs,). (The CPU kernel
    calls the three steps itself: one level less of Numba's inlining, whose
    IR copies made up most of its compile time.)
    """
    ox, oy, oz, dx, dy, dz = ray_start(a, r, bmin, inv_voxel, dirs, origins, c, s)
    depth, sem, hit, _steps, _stats = trace_ray(
        child,
        leaf_dist,
        leaf_sem,
        top_code,
        top_level,
        res,
        ox,
        oy,
        oz,
        dx,
        dy,
        dz,
        t_max,
        eps,
        nudge,
        max_steps,
        refine,
        signed,
    )
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
    "refine_hit",
    "pack_stats",
    "yaw_cos_sin",
    "yaw_rotate",
    "trace_ray",
    "ray_start",
    "write_ray",
    "trace_one",
)

SCALAR_MATH = ("axis_exit", "reciprocal", "cell_exit", "slab", "ray_box", "pack_stats", "yaw_cos_sin", "yaw_rotate")
"""Helpers of numbers only: on the CPU separate functions that LLVM inlines after linking (as
``field.SCALAR_HELPERS``: the same bits and speed, each typed once; the tracer's cold first call about
3-5 s shorter)."""
OUTER_MATH = SCALAR_MATH + ("refine_hit",)
"""Built with ``decorate_outer``: on the CPU a separate function (the refinement: called once per hit)."""


def build_for(decorate, decorate_outer=None, field_built=None, count=False):
    """Build the field's functions (``navi_nb/world/field.py``) and then every
    math function here with ``decorate`` (a decorator); returns a dict name ->
    compiled function.

    ``count``: the value of :data:`COUNT_STEPS` in this build (True: the
    counting build, whose ``trace_ray`` tallies its step kinds; give it a
    ``decorate`` that renames, see :func:`counted_name`, so that its cached
    code never shares a name with the production build's).

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
    built = dict(field_built)
    built["COUNT_STEPS"] = bool(count)
    return field.build_for(
        decorate, decorate_outer, names=MATH_FUNCTIONS, module_globals=globals(), built=built, outer=OUTER_MATH
    )


def counted_name(decorate):
    """``decorate`` applied to a copy of the function named ``<name>_counted``
    (Numba's cache keys compiled code on the module and qualified name, not on
    the globals a build binds: the counting build's functions need their own names)."""

    def rename(func):
        new = field.retarget(func, {})
        new.__name__ = func.__name__ + "_counted"
        new.__qualname__ = func.__qualname__ + "_counted"
        return decorate(new)

    return rename


_CPU = build_for(njit(inline="always", cache=True), njit(cache=True, _nrt=False), field_built=field.CPU)
nb_trace_ray = _CPU["trace_ray"]
_CPU_COUNTED = build_for(
    counted_name(njit(inline="always", cache=True)),
    counted_name(njit(cache=True, _nrt=False)),
    field_built=field.CPU,
    count=True,
)
nb_trace_ray_counted = _CPU_COUNTED["trace_ray"]
"""The counting build of :func:`trace_ray` (``navi-nb bench trace`` only)."""
nb_ray_start = _CPU["ray_start"]
nb_write_ray = _CPU["write_ray"]
nb_yaw_cos_sin = _CPU["yaw_cos_sin"]
