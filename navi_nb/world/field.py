"""The field at a point: the one reader of a world's distance field, written once for two targets.

Every consumer of the field reads it here, over the world's decoded layout
(``navi_nb/world/layout.py``: child-code table, leaf distances in voxel
units, a dense top-level table): the tracer's ray march and Newton
refinement (``navi_nb/sense/trace_math.py``), the point queries
(``navi_nb/world/query.py``: ``navi_nb.distance``, spawn clearances) and the
environment's collision (``navi_nb/env/motion.py``). So what an actor sees
and what it bumps into are the same field.

The functions are plain Python over scalars and the layout's read-only
arrays. :func:`build_for` compiles them for one target: the CPU builds are
``nb_*`` here (``njit(inline="always")``, a few rare ones out of line), the
CUDA builds come from ``navi_nb/sense/cuda_tracer.py`` through
``trace_math.build_for`` with ``cuda.jit(device=True)``. A function's helpers
are looked up by name in a namespace given per target, so one body serves
both.

Units: voxel units of the world cube: a point ``u = (p - bmin) / voxel_size``
lies in ``[0, resolution)^3``. Arithmetic is float64 on both targets.

The rule (one for every caller): the field at a point inside the cube is the
trilinear interpolation, between voxel centres, of the values at the 8
surrounding voxel centres (:func:`field_at`; coordinates beyond the outermost
centres are clamped to them). The value at a voxel centre is its leaf's
distance, whatever the leaf's size; in a pruned octant, the distance to the
octant's nearest face (free space, a lower bound). :func:`point_value` adds
the semantic id and the rule outside the cube.
"""

from __future__ import annotations

import math
import types

from numba import njit

from navi_nb.world import gmdag

KIND_PRUNED = 0
KIND_LEAF = 1
MAX_DESCENT = gmdag.MAX_DEPTH + 1  # validated trees are never deeper
OUTSIDE_EPS = 1e-9  # voxels: a point further than this from the cube is outside it


def cell_index(q, n):
    """floor(q) clamped to [0, n - 1]: the cell holding coordinate q (in cells),
    points outside the range going to the border cell."""
    i = int(math.floor(q))
    if i < 0:
        i = 0
    if i > n - 1:
        i = n - 1
    return i


def descend_float(child, leaf_dist, leaf_sem, top_code, top_level, px, py, pz, res):
    """The cell of the world holding point ``(px, py, pz)`` (voxel units).

    Stackless, over the decoded layout (``navi_nb/world/layout.py``): one
    load from the dense (n, n, n) table of the descent at depth log2(n)
    (n = 1: the root only), then one child-code load per level, tracking the
    cell's cube. Returns ``(kind, distance, semantic, lox, loy, loz, size)``:
    kind ``KIND_LEAF`` with the leaf's distance (voxel units) and semantic id,
    or ``KIND_PRUNED`` for a cleared octant; the cell cube's lower corner and
    side in voxel units.
    """
    n = top_code.shape[0]
    tsize = res / n
    inv = n / res  # exact for power-of-two tables; with n == 1 every index clamps to 0
    ix = cell_index(px * inv, n)
    iy = cell_index(py * inv, n)
    iz = cell_index(pz * inv, n)
    code = int(top_code[ix, iy, iz])
    if code >= 0:
        size = tsize
        lox = ix * tsize
        loy = iy * tsize
        loz = iz * tsize
    else:
        shrink = n >> int(top_level[ix, iy, iz])  # top cells per side of the cell that ended it
        size = tsize * shrink
        lox = (ix - (ix & (shrink - 1))) * tsize  # shrink is a power of two, indices >= 0
        loy = (iy - (iy & (shrink - 1))) * tsize
        loz = (iz - (iz & (shrink - 1))) * tsize
    for _ in range(MAX_DESCENT):
        if code < 0:
            break
        size = size * 0.5
        octant = 0
        mx = lox + size
        if px >= mx:
            octant += 1
            lox = mx
        my = loy + size
        if py >= my:
            octant += 2
            loy = my
        mz = loz + size
        if pz >= mz:
            octant += 4
            loz = mz
        code = int(child[8 * code + octant])
    if code < -1:
        k = -code - 2
        return 1, leaf_dist[k], int(leaf_sem[k]), lox, loy, loz, size
    return 0, 0.0, 0, lox, loy, loz, size


def descend(child, leaf_dist, leaf_sem, top_code, top_level, px, py, pz, res, shift):
    """:func:`descend_float`'s answer, on the integer voxel index bits when the
    dense table lines up with the voxels (``shift >= 0``, see :func:`table_shift`).

    The cells are powers of two on integer corners, so ``p >= lo + size/2``
    is the voxel index's bit: the same cells, without float compares or
    branches on them. Points outside the cube clamp to its border voxels, as
    the float descent's compares do.

    The walk below the table always takes ``shift`` levels, and where the
    descent already ended (a leaf or pruned octant above the voxels) the
    level's load reads a harmless child slot and its result is not taken.
    Whether a point's descent ends at the table, one level down or at a voxel
    changes from step to step of a ray, so an early exit on it was
    mispredicted on most steps; the fixed walk takes 8-10 % off a traced
    ray's time (same cells, same bits; docs/SENSING.md). LLVM compiles each
    level's select as a branch around its load, which skips the loads below
    where the descent ended; forcing every load (no branch) was slower. The
    leaf's values and the table's level are read unconditionally.
    """
    if shift < 0:
        return descend_float(child, leaf_dist, leaf_sem, top_code, top_level, px, py, pz, res)
    r = int(res)
    vx = cell_index(px, r)
    vy = cell_index(py, r)
    vz = cell_index(pz, r)
    tx = vx >> shift
    ty = vy >> shift
    tz = vz >> shift
    top = int(top_code[tx, ty, tz])
    top_cell = (top_code.shape[0] >> int(top_level[tx, ty, tz])) << shift
    code = top
    b = shift if child.shape[0] > 0 else 0  # no inner node anywhere: no level to walk (and no slot to read)
    size_bits = b
    while b > 0:
        b -= 1
        inner = code >= 0
        below = int(child[8 * max(code, 0) + ((vx >> b) & 1) + (((vy >> b) & 1) << 1) + (((vz >> b) & 1) << 2)])
        code = below if inner else code
        size_bits = b if inner else size_bits
    cell = (1 << size_bits) if top >= 0 else top_cell
    keep = -cell  # two's complement mask of the bits above the cell size
    lox = float(vx & keep)
    loy = float(vy & keep)
    loz = float(vz & keep)
    size = float(cell)
    k = max(-code - 2, 0)
    dist = leaf_dist[k] if leaf_dist.shape[0] > 0 else 0.0
    sem = int(leaf_sem[k]) if leaf_sem.shape[0] > 0 else 0
    if code < -1:
        return 1, dist, sem, lox, loy, loz, size
    return 0, 0.0, 0, lox, loy, loz, size


def cell_value(child, leaf_dist, leaf_sem, top_code, top_level, res, shift, px, py, pz):
    """The field at a point (voxel units): its leaf's distance, or for a pruned
    octant the distance to the octant's nearest face (a lower bound)."""
    kind, dist, sem, lox, loy, loz, size = descend(
        child, leaf_dist, leaf_sem, top_code, top_level, px, py, pz, res, shift
    )
    if kind == 1:
        return dist
    v = px - lox
    if lox + size - px < v:
        v = lox + size - px
    if py - loy < v:
        v = py - loy
    if loy + size - py < v:
        v = loy + size - py
    if pz - loz < v:
        v = pz - loz
    if loz + size - pz < v:
        v = loz + size - pz
    return v


def axis_lerp_index(q, res):
    """(lower centre index, fraction) of coordinate ``q`` between voxel centres."""
    c = q - 0.5
    hi = res - 1.0
    if c < 0.0:
        c = 0.0
    if c > hi:
        c = hi
    i = float(math.floor(c))
    if i > hi - 1.0:
        i = hi - 1.0
    if i < 0.0:
        i = 0.0
    return i, c - i


def voxel_fast(child, leaf_dist, top_code, shift, vx, vy, vz):
    """The field at the centre of voxel ``(vx, vy, vz)`` (integers in ``[0, res)``),
    or NaN where this fast path cannot answer (then :func:`cell_value` does).

    shift: log2 of the voxels per side of a dense-table cell (-1: the table
    does not line up with the voxels). The descent below the table runs in
    integers on the voxel index bits (the same cells the general descent
    finds); a pruned octant is left to :func:`cell_value`. The usual depth
    below the table (shift 2: resolution 256 and up) is written out: the
    refinement calls this 8 times per hit, and straight-line code there made
    the whole tracer 3-7 % faster than the loop (measured, same bits). On the
    CPU it is one compiled function that those 8 sites call
    (``OUTER_FUNCTIONS``), not 8 inlined copies.
    """
    if shift >= 0:
        code = int(top_code[vx >> shift, vy >> shift, vz >> shift])
        if shift == 2:  # the dense table's usual depth (resolution 256 and up): straight-line code
            if code >= 0:
                code = int(child[8 * code + ((vx >> 1) & 1) + (vy & 2) + ((vz & 2) << 1)])
                if code >= 0:
                    code = int(child[8 * code + (vx & 1) + ((vy & 1) << 1) + ((vz & 1) << 2)])
        else:
            b = shift - 1
            while code >= 0 and b >= 0:
                code = int(child[8 * code + ((vx >> b) & 1) + (((vy >> b) & 1) << 1) + (((vz >> b) & 1) << 2)])
                b -= 1
        if code < -1:
            return leaf_dist[-code - 2]
    return math.nan


def corner_values(child, leaf_dist, leaf_sem, top_code, top_level, res, shift, jx, jy, jz):
    """The field at the 8 voxel centres from ``(jx, jy, jz)`` to ``+1`` on each axis
    (x fastest), each through :func:`cell_value` (the general path)."""
    return (
        cell_value(child, leaf_dist, leaf_sem, top_code, top_level, res, shift, jx + 0.5, jy + 0.5, jz + 0.5),
        cell_value(child, leaf_dist, leaf_sem, top_code, top_level, res, shift, jx + 1.5, jy + 0.5, jz + 0.5),
        cell_value(child, leaf_dist, leaf_sem, top_code, top_level, res, shift, jx + 0.5, jy + 1.5, jz + 0.5),
        cell_value(child, leaf_dist, leaf_sem, top_code, top_level, res, shift, jx + 1.5, jy + 1.5, jz + 0.5),
        cell_value(child, leaf_dist, leaf_sem, top_code, top_level, res, shift, jx + 0.5, jy + 0.5, jz + 1.5),
        cell_value(child, leaf_dist, leaf_sem, top_code, top_level, res, shift, jx + 1.5, jy + 0.5, jz + 1.5),
        cell_value(child, leaf_dist, leaf_sem, top_code, top_level, res, shift, jx + 0.5, jy + 1.5, jz + 1.5),
        cell_value(child, leaf_dist, leaf_sem, top_code, top_level, res, shift, jx + 1.5, jy + 1.5, jz + 1.5),
    )


def corner_term(acc, gx, gy, gz, fx, fy, fz, ox, oy, oz, v):
    """Add corner ``(ox, oy, oz)`` (0.0 or 1.0 each) holding ``v`` to the trilinear sums.

    The offsets are floats: Numba types an integer constant argument as a literal, and each of the eight
    corners would compile a copy of this function of its own."""
    wx = fx if ox == 1.0 else 1.0 - fx
    wy = fy if oy == 1.0 else 1.0 - fy
    wz = fz if oz == 1.0 else 1.0 - fz
    acc += wx * wy * wz * v
    gx += (1.0 if ox == 1.0 else -1.0) * wy * wz * v
    gy += (1.0 if oy == 1.0 else -1.0) * wx * wz * v
    gz += (1.0 if oz == 1.0 else -1.0) * wx * wy * v
    return acc, gx, gy, gz


def table_shift(top_code, res):
    """log2(res / n) for the (n, n, n) dense table when both are powers of two, else -1."""
    n = top_code.shape[0]
    r = int(res)
    if r != res or r < n or r % n != 0:
        return -1
    ratio = r // n
    if ratio & (ratio - 1) != 0:
        return -1
    shift = 0
    while (1 << shift) < ratio:
        shift += 1
    return shift


def field_at(child, leaf_dist, leaf_sem, top_code, top_level, res, shift, px, py, pz):
    """Trilinear interpolation of the leaf distances between voxel centres, and its gradient.

    ``shift`` as :func:`table_shift`. Returns ``(f, gx, gy, gz)`` in voxel
    units (the gradient is per voxel). The 8 corners are read by 8 calls
    of :func:`voxel_fast`, written out (10 % faster per ray than a loop over
    the corners, measured); only when one of them needs the general descent
    do all go through :func:`corner_values`, a call kept off the common path.
    """
    if res < 2.0:  # a one-voxel world: no second centre to interpolate with (nor to read)
        return cell_value(child, leaf_dist, leaf_sem, top_code, top_level, res, shift, px, py, pz), 0.0, 0.0, 0.0
    ix, fx = axis_lerp_index(px, res)
    iy, fy = axis_lerp_index(py, res)
    iz, fz = axis_lerp_index(pz, res)
    jx = int(ix)
    jy = int(iy)
    jz = int(iz)
    v0 = voxel_fast(child, leaf_dist, top_code, shift, jx, jy, jz)
    v1 = voxel_fast(child, leaf_dist, top_code, shift, jx + 1, jy, jz)
    v2 = voxel_fast(child, leaf_dist, top_code, shift, jx, jy + 1, jz)
    v3 = voxel_fast(child, leaf_dist, top_code, shift, jx + 1, jy + 1, jz)
    v4 = voxel_fast(child, leaf_dist, top_code, shift, jx, jy, jz + 1)
    v5 = voxel_fast(child, leaf_dist, top_code, shift, jx + 1, jy, jz + 1)
    v6 = voxel_fast(child, leaf_dist, top_code, shift, jx, jy + 1, jz + 1)
    v7 = voxel_fast(child, leaf_dist, top_code, shift, jx + 1, jy + 1, jz + 1)
    if not (v0 == v0 and v1 == v1 and v2 == v2 and v3 == v3 and v4 == v4 and v5 == v5 and v6 == v6 and v7 == v7):
        v0, v1, v2, v3, v4, v5, v6, v7 = corner_values(
            child, leaf_dist, leaf_sem, top_code, top_level, res, shift, jx, jy, jz
        )
    acc, gx, gy, gz = corner_term(0.0, 0.0, 0.0, 0.0, fx, fy, fz, 0.0, 0.0, 0.0, v0)
    acc, gx, gy, gz = corner_term(acc, gx, gy, gz, fx, fy, fz, 1.0, 0.0, 0.0, v1)
    acc, gx, gy, gz = corner_term(acc, gx, gy, gz, fx, fy, fz, 0.0, 1.0, 0.0, v2)
    acc, gx, gy, gz = corner_term(acc, gx, gy, gz, fx, fy, fz, 1.0, 1.0, 0.0, v3)
    acc, gx, gy, gz = corner_term(acc, gx, gy, gz, fx, fy, fz, 0.0, 0.0, 1.0, v4)
    acc, gx, gy, gz = corner_term(acc, gx, gy, gz, fx, fy, fz, 1.0, 0.0, 1.0, v5)
    acc, gx, gy, gz = corner_term(acc, gx, gy, gz, fx, fy, fz, 0.0, 1.0, 1.0, v6)
    acc, gx, gy, gz = corner_term(acc, gx, gy, gz, fx, fy, fz, 1.0, 1.0, 1.0, v7)
    return acc, gx, gy, gz


def field_at_outer(child, leaf_dist, leaf_sem, top_code, top_level, res, shift, px, py, pz):
    """:func:`field_at` as a separate function on the CPU, for call sites where
    an inlined copy would only add compile time (the point query, the tracer's
    graze check)."""
    return field_at(child, leaf_dist, leaf_sem, top_code, top_level, res, shift, px, py, pz)


def point_value(child, leaf_dist, leaf_sem, top_code, top_level, res, shift, ux, uy, uz):
    """The field and semantic id at a point ``(ux, uy, uz)`` in voxel units (anywhere).

    Returns ``(value, semantic)``, value in voxel units (float64, finite: the
    layout reads non-finite leaves as finite values). Inside the cube the
    value is :func:`field_at`'s interpolation and the semantic id is the leaf
    holding the point (0 in a pruned octant). Outside the cube, with ``f``
    the value at the nearest point of the cube and ``o`` the distance to it:
    ``f`` where ``f < 0`` (solid at the cube's face stays solid, its magnitude
    not grown), else ``o + f`` (a lower bound if the outside is free);
    semantic 0.
    """
    top = res * (1.0 - 1e-12)
    cx = min(max(ux, 0.0), top)
    cy = min(max(uy, 0.0), top)
    cz = min(max(uz, 0.0), top)
    ox = ux - cx
    oy = uy - cy
    oz = uz - cz
    outside = math.sqrt(ox * ox + oy * oy + oz * oz)
    f, _gx, _gy, _gz = field_at_outer(child, leaf_dist, leaf_sem, top_code, top_level, res, shift, cx, cy, cz)
    if outside > OUTSIDE_EPS:
        if f < 0.0:
            return f, 0
        return outside + f, 0
    kind, _dist, sem, _lx, _ly, _lz, _size = descend(
        child, leaf_dist, leaf_sem, top_code, top_level, cx, cy, cz, res, shift
    )
    if kind == KIND_PRUNED:
        sem = 0
    return f, sem


# --------------------------------------------------------------------------
# building the functions for one target
# --------------------------------------------------------------------------

# in the order they must be built (a function's helpers come first)
FIELD_FUNCTIONS = (
    "table_shift",
    "cell_index",
    "descend_float",
    "descend",
    "cell_value",
    "axis_lerp_index",
    "voxel_fast",
    "corner_values",
    "corner_term",
    "field_at",
    "field_at_outer",
    "point_value",
)
SCALAR_HELPERS = ("cell_index", "axis_lerp_index", "corner_term")
"""Helpers that take and return numbers only. On the CPU they are separate compiled functions (built
with ``decorate_outer``) rather than Numba IR-inlined copies: Numba links a callee's code into its
caller and LLVM inlines such small functions there, so the kernels' speed and bits are
unchanged, while Numba types and lowers each once instead of once per call site (a function taking
arrays is different: a call passes every array's fields, hence the IR inlining elsewhere)."""
OUTER_FUNCTIONS = SCALAR_HELPERS + ("descend_float", "cell_value", "voxel_fast", "corner_values", "field_at_outer")
"""Built with ``decorate_outer``: on the CPU these stay separate (not IR-inlined) functions, without
reference counting (``_nrt=False``: they allocate nothing). The scalar helpers (above); rare paths;
``field_at_outer`` for the point query (:func:`point_value`): the collision's kernel then holds one
call instead of an inlined copy of the interpolation (its cold compile went from about 34 s to 2 s);
and ``voxel_fast``, called 8 times per interpolation: one compiled copy instead of 8 inlined ones took
the tracer's refinement from 6.4 to 2.6 s of cold compile and ``field_at_outer`` from 5.5 to 2.8 s, at
the same tracer speed and bits (measured)."""


def retarget(func, namespace):
    """A copy of plain function ``func`` whose global names resolve in ``namespace`` first."""
    g = dict(func.__globals__)
    g.update(namespace)
    new = types.FunctionType(func.__code__, g, func.__name__, func.__defaults__, func.__closure__)
    new.__doc__ = func.__doc__
    new.__module__ = func.__module__
    new.__qualname__ = func.__qualname__
    return new


def build_for(
    decorate, decorate_outer=None, names=FIELD_FUNCTIONS, module_globals=None, built=None, outer=OUTER_FUNCTIONS
):
    """Build the functions ``names`` (plain functions of ``module_globals``,
    default this module's) with ``decorate``, those in ``outer`` (default
    OUTER_FUNCTIONS) with ``decorate_outer`` (default: ``decorate``), each
    resolving its helpers in ``built`` (a dict name -> compiled function,
    extended and returned)."""
    decorate_outer = decorate_outer or decorate
    built = {} if built is None else built
    this = globals() if module_globals is None else module_globals
    for name in names:
        deco = decorate_outer if name in outer else decorate
        built[name] = deco(retarget(this[name], built))
    return built


CPU = build_for(njit(inline="always", cache=True), njit(cache=True, _nrt=False))
"""The CPU builds, name -> dispatcher (the tracer's CPU kernel builds on these)."""
nb_table_shift = CPU["table_shift"]
nb_descend = CPU["descend"]
nb_descend_float = CPU["descend_float"]
nb_field_at = CPU["field_at"]
nb_point_value = CPU["point_value"]
