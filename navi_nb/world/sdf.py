"""Analytic signed-distance primitives and CSG programs (Numba).

A scene's geometry is a *program*: a float64 array of rows (``ROW`` columns)
run by a tiny stack machine, one point at a time. Primitive rows push a
``(distance, class)`` pair; operator rows pop two (or one) and push the
result. Units are metres; the distance is negative inside solid.

Row layout: ``[op, class_side, class_bottom, class_top, p0 .. p7]``

======== ======================================= ==========================
op       parameters                              exact?
======== ======================================= ==========================
BOX      centre xyz, half extents xyz, rounding  yes (rounded box)
SPHERE   centre xyz, radius                      yes
CYLINDER end a xyz, end b xyz, radius (capped)   yes
CAPSULE  end a xyz, end b xyz, radius            yes
UNION    min; class of the nearer                exact outside the union,
                                                 a bound (|d| too small) inside
INTERSECT max; class of the farther              a bound outside
SUBTRACT a minus b = max(a, -b)                  a bound
COMPLEMENT -d (solid becomes free)               exact if its input is
======== ======================================= ==========================

A box's class comes from the face nearest the point: the bottom face
(lowest y) gets ``class_bottom``, the top face ``class_top``, the four sides
``class_side``; other primitives use ``class_side``. So the complement of a
room's box is a closed shell whose floor, ceiling and walls carry their own
classes. Scenes built as ``complement(room) ∪ solids`` are exact in free
space (a union of exact fields is exact outside all of them).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from navi_nb.threads import RangeKernel

ROW = 12
OP_BOX, OP_SPHERE, OP_CYLINDER, OP_CAPSULE = 0, 1, 2, 3
OP_UNION, OP_INTERSECT, OP_SUBTRACT, OP_COMPLEMENT = 10, 11, 12, 13
STACK = 32
CHUNK = 256  # points per parallel work item (one stack allocation each)
PRUNE_RUN = 64  # points that share one pruned program (evaluate_program)


# --------------------------------------------------------------------------
# program builders (Python side)
# --------------------------------------------------------------------------


def _row(op, cls, params, bottom=None, top=None):
    r = np.zeros(ROW, dtype=np.float64)
    r[0] = op
    r[1] = cls
    r[2] = cls if bottom is None else bottom
    r[3] = cls if top is None else top
    p = np.asarray(params, dtype=np.float64).ravel()
    r[4 : 4 + p.size] = p
    return r


def box(centre, half, cls, rounding=0.0, bottom=None, top=None):
    half = np.asarray(half, dtype=np.float64)
    if np.any(half <= 0) or rounding < 0 or rounding > half.min():
        raise ValueError("box needs positive half extents and 0 <= rounding <= min half extent")
    return _row(OP_BOX, cls, list(centre) + list(half) + [rounding], bottom, top)


def box_min_max(lo, hi, cls, rounding=0.0, bottom=None, top=None):
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    return box((lo + hi) / 2, (hi - lo) / 2, cls, rounding, bottom, top)


def sphere(centre, radius, cls):
    return _row(OP_SPHERE, cls, list(centre) + [radius])


def cylinder(a, b, radius, cls):
    return _row(OP_CYLINDER, cls, list(a) + list(b) + [radius])


def capsule(a, b, radius, cls):
    return _row(OP_CAPSULE, cls, list(a) + list(b) + [radius])


def op(code):
    return _row(code, 0, [])


def union_all(rows):
    """Program for the union of primitive rows: push, union, push, union..."""
    out = [rows[0]]
    for r in rows[1:]:
        out.append(r)
        out.append(op(OP_UNION))
    return out


def check_program(program):
    """Raise ValueError unless the program leaves exactly one value on the stack."""
    program = np.asarray(program, dtype=np.float64)
    if program.ndim != 2 or program.shape[1] != ROW or program.shape[0] == 0:
        raise ValueError(f"program must be (P, {ROW}) float64")
    depth = 0
    for i, code in enumerate(program[:, 0].astype(int)):
        if code in (OP_BOX, OP_SPHERE, OP_CYLINDER, OP_CAPSULE):
            depth += 1
        elif code in (OP_UNION, OP_INTERSECT, OP_SUBTRACT):
            depth -= 1
        elif code == OP_COMPLEMENT:
            pass
        else:
            raise ValueError(f"program row {i}: unknown op {code}")
        if depth < 1 or depth > STACK:
            raise ValueError(f"program row {i}: stack depth {depth} out of 1..{STACK}")
    if depth != 1:
        raise ValueError(f"program leaves {depth} values on the stack (expected 1)")
    return program


# --------------------------------------------------------------------------
# scalar primitives
# --------------------------------------------------------------------------


@njit(inline="always", cache=True)
def _box(px, py, pz, row):
    rr = row[10]
    qx = abs(px - row[4]) - (row[7] - rr)
    qy = abs(py - row[5]) - (row[8] - rr)
    qz = abs(pz - row[6]) - (row[9] - rr)
    ox = max(qx, 0.0)
    oy = max(qy, 0.0)
    oz = max(qz, 0.0)
    m = max(qx, max(qy, qz))
    d = np.sqrt(ox * ox + oy * oy + oz * oz) + min(m, 0.0) - rr
    if qy >= qx and qy >= qz:
        if py < row[5]:
            cls = row[2]
        else:
            cls = row[3]
    else:
        cls = row[1]
    return d, cls


@njit(inline="always", cache=True)
def _sphere(px, py, pz, row):
    dx = px - row[4]
    dy = py - row[5]
    dz = pz - row[6]
    return np.sqrt(dx * dx + dy * dy + dz * dz) - row[7], row[1]


@njit(inline="always", cache=True)
def _cylinder(px, py, pz, row):
    # capped cylinder between a and b (Inigo Quilez's exact formula)
    bax = row[7] - row[4]
    bay = row[8] - row[5]
    baz = row[9] - row[6]
    pax = px - row[4]
    pay = py - row[5]
    paz = pz - row[6]
    r = row[10]
    baba = bax * bax + bay * bay + baz * baz
    paba = pax * bax + pay * bay + paz * baz
    cx = pax * baba - bax * paba
    cy = pay * baba - bay * paba
    cz = paz * baba - baz * paba
    x = np.sqrt(cx * cx + cy * cy + cz * cz) - r * baba
    y = abs(paba - baba * 0.5) - baba * 0.5
    x2 = x * x
    y2 = y * y * baba
    if max(x, y) < 0.0:
        d = -min(x2, y2)
    else:
        d = 0.0
        if x > 0.0:
            d += x2
        if y > 0.0:
            d += y2
    s = 1.0 if d >= 0.0 else -1.0
    return s * np.sqrt(abs(d)) / baba, row[1]


@njit(inline="always", cache=True)
def _capsule(px, py, pz, row):
    bax = row[7] - row[4]
    bay = row[8] - row[5]
    baz = row[9] - row[6]
    pax = px - row[4]
    pay = py - row[5]
    paz = pz - row[6]
    baba = bax * bax + bay * bay + baz * baz
    h = 0.0
    if baba > 0.0:
        h = min(max((pax * bax + pay * bay + paz * baz) / baba, 0.0), 1.0)
    dx = pax - bax * h
    dy = pay - bay * h
    dz = paz - baz * h
    return np.sqrt(dx * dx + dy * dy + dz * dz) - row[10], row[1]


@njit(inline="always", cache=True)
def _primitive(code, px, py, pz, row):
    """(distance, class) of a primitive row at a point."""
    if code == OP_BOX:
        return _box(px, py, pz, row)
    if code == OP_SPHERE:
        return _sphere(px, py, pz, row)
    if code == OP_CYLINDER:
        return _cylinder(px, py, pz, row)
    return _capsule(px, py, pz, row)


@njit(cache=True)
def eval_point(program, rows, n_rows, px, py, pz, sd, sc):
    """Run the program's rows ``rows[:n_rows]`` (all of them, or those :func:`prune_rows` keeps) at one
    point; sd/sc are scratch stacks (float64 each)."""
    top = -1
    for k in range(n_rows):
        row = program[rows[k]]
        code = int(row[0])
        if code == OP_COMPLEMENT:
            sd[top] = -sd[top]
            continue
        if code >= OP_UNION:
            b = sd[top]
            bc = sc[top]
            top -= 1
            a = sd[top]
            if code == OP_UNION:
                if b < a:
                    sd[top] = b
                    sc[top] = bc
            elif code == OP_INTERSECT:
                if b > a:
                    sd[top] = b
                    sc[top] = bc
            else:  # OP_SUBTRACT
                if -b > a:
                    sd[top] = -b
                    sc[top] = bc
            continue
        d, c = _primitive(code, px, py, pz, row)
        top += 1
        sd[top] = d
        sc[top] = c
    return sd[0], sc[0]


@njit(cache=True)
def prune_rows(program, cx, cy, cz, h, rows, sd, first):
    """The rows that decide the program's value and class everywhere within ``h`` of ``(cx, cy, cz)``:
    written to ``rows``, their count returned; sd (float64) and first (int64) are scratch stacks.

    Every primitive is an exact distance and min, max and negation keep a function 1-Lipschitz, so each
    operand of an operator is within ``h`` of its value at the centre anywhere in the ball. Where one
    operand of a union is larger than the other by more than ``2 h`` (plus a rounding margin) there, it
    never wins the union in the ball, and dropping its rows and the operator's row leaves the other
    operand's value and class at every point: the same operations in the same order, so the same bits.
    Likewise the smaller operand of an intersection, and a subtraction's ``b`` where ``-b`` never exceeds
    ``a``. The value at the centre of an operator is computed in full either way (the parents' tests
    need it)."""
    n = 0
    top = -1
    for i in range(program.shape[0]):
        row = program[i]
        code = int(row[0])
        rows[n] = i
        n += 1
        if code == OP_COMPLEMENT:
            sd[top] = -sd[top]
            continue
        if code < OP_UNION:
            d, _c = _primitive(code, cx, cy, cz, row)
            top += 1
            sd[top] = d
            first[top] = n - 1  # where this operand's rows start in ``rows``
            continue
        b = sd[top]
        b_first = first[top]
        top -= 1
        a = sd[top]
        if code == OP_SUBTRACT:
            b = -b
        # the margin: the operands' rounding (relative 1e-12 is far above float64's) and the ball
        gap = 2.0 * h + 1e-12 * (abs(a) + abs(b)) + 1e-12
        keep_a = True
        keep_b = True
        if code == OP_UNION:
            keep_b = not (b - a > gap)
            keep_a = not (a - b > gap)
        elif code == OP_INTERSECT:
            keep_b = not (a - b > gap)
            keep_a = not (b - a > gap)
        else:  # OP_SUBTRACT: only b (dropping a would leave a complement to write)
            keep_b = not (a - b > gap)
        if not keep_b:  # the result is a: drop b's rows and this row
            n = b_first
        elif not keep_a:  # the result is b: move b's rows over a's and drop this row
            a_first = first[top]
            m = n - 1 - b_first
            for k in range(m):
                rows[a_first + k] = rows[b_first + k]
            n = a_first + m
            sd[top] = b
            continue
        if code == OP_UNION:
            sd[top] = min(a, b)
        else:
            sd[top] = max(a, b)
    return n


@njit(inline="always", cache=True)
def _bounding_ball(points, i0, i1):
    """(centre x, y, z, radius) of a ball holding ``points[i0:i1]``: their bounding box's centre and half
    diagonal (rounded up a little)."""
    lo0, lo1, lo2 = points[i0, 0], points[i0, 1], points[i0, 2]
    hi0, hi1, hi2 = lo0, lo1, lo2
    for i in range(i0 + 1, i1):
        lo0 = min(lo0, points[i, 0])
        lo1 = min(lo1, points[i, 1])
        lo2 = min(lo2, points[i, 2])
        hi0 = max(hi0, points[i, 0])
        hi1 = max(hi1, points[i, 1])
        hi2 = max(hi2, points[i, 2])
    e0, e1, e2 = 0.5 * (hi0 - lo0), 0.5 * (hi1 - lo1), 0.5 * (hi2 - lo2)
    return lo0 + e0, lo1 + e1, lo2 + e2, np.sqrt(e0 * e0 + e1 * e1 + e2 * e2) * (1.0 + 1e-12)


@njit(cache=True, nogil=True)
def evaluate_chunks(k0, k1, program, points, out_d, out_c):
    """Chunks ``k0 .. k1 - 1`` (of ``CHUNK`` points) of :data:`evaluate_program`."""
    n = points.shape[0]
    for k in range(k0, k1):
        sd = np.empty(STACK, dtype=np.float64)
        sc = np.empty(STACK, dtype=np.float64)
        first = np.empty(STACK, dtype=np.int64)
        rows = np.empty(program.shape[0], dtype=np.int64)
        for i0 in range(k * CHUNK, min(n, (k + 1) * CHUNK), PRUNE_RUN):
            i1 = min(n, i0 + PRUNE_RUN)
            cx, cy, cz, h = _bounding_ball(points, i0, i1)
            n_rows = prune_rows(program, cx, cy, cz, h, rows, sd, first)
            for i in range(i0, i1):
                d, c = eval_point(program, rows, n_rows, points[i, 0], points[i, 1], points[i, 2], sd, sc)
                out_d[i] = d
                out_c[i] = np.int32(c)


def _chunks(program, points, *rest):
    return (points.shape[0] + CHUNK - 1) // CHUNK


evaluate_program = RangeKernel(evaluate_chunks, _chunks, 1)
"""``evaluate_program(program, points, out_d, out_c)``: signed distance (metres) and class at points (N,3)
float64 -> out_d (N,), out_c (N,) int32, in chunks of ``CHUNK`` points on the threads
(``threads.run_ranges``).

Each run of ``PRUNE_RUN`` points runs only the rows that decide its bounding box (:func:`prune_rows`):
the same values and classes as the whole program, bit for bit; callers that pass nearby points in
runs (the compiler's cells) save most of the work."""


@njit(cache=True, nogil=True)
def raycast_chunks(k0, k1, program, origins, dirs, max_distance, eps, max_steps, out):
    """Chunks ``k0 .. k1 - 1`` (of ``CHUNK`` rays) of :data:`raycast_program`."""
    n = origins.shape[0]
    for k in range(k0, k1):
        sd = np.empty(STACK, dtype=np.float64)
        sc = np.empty(STACK, dtype=np.float64)
        rows = np.arange(program.shape[0])
        for i in range(k * CHUNK, min(n, (k + 1) * CHUNK)):
            t = 0.0
            res = max_distance
            for _ in range(max_steps):
                d, c = eval_point(
                    program,
                    rows,
                    rows.shape[0],
                    origins[i, 0] + t * dirs[i, 0],
                    origins[i, 1] + t * dirs[i, 1],
                    origins[i, 2] + t * dirs[i, 2],
                    sd,
                    sc,
                )
                if d < eps:
                    res = t
                    break
                t += d
                if t >= max_distance:
                    break
            out[i] = min(res, max_distance)


raycast_program = RangeKernel(raycast_chunks, _chunks, 1)
"""``raycast_program(program, origins, dirs, max_distance, eps, max_steps, out)``: sphere trace the exact
field, depth (metres) per ray, max_distance on a miss, in chunks of ``CHUNK`` rays on the threads.
origins, dirs (N,3) float64 (dirs unit length). A ray starting inside solid (d <= eps) returns 0."""
