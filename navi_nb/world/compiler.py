"""Compile a signed-distance field (scene, mesh, anything with `.evaluate`) into a `.gmdag`.

Method (docs/COMPILER.md): level-synchronous top-down subdivision of the
world cube. At each level the field is evaluated at the centres of the
candidate cells (batched). A cell of half-diagonal ``hd`` whose centre value
``d`` has ``|d| < hd + band`` may hold a surface (or lie in the
interpolation stencil of a point that is near one) and is subdivided down to
voxel level; other cells collapse into one leaf:

- solid (``d < 0``): ``-(|d| - hd)``, magnitude rounded toward zero;
- free, ``d >= 4 hd``: ``d - hd`` rounded down to a quarter of ``hd`` (a
  lower bound >= half the true distance anywhere in the cell);
- free but weaker: subdivided further (never pruned: a pruned octant makes
  point queries answer the distance to its boundary, useless for collision);
- free and entirely outside the region of interest: pruned (clear mask bit).

Voxel leaves hold the field at the voxel centre (nearest half float) with
the surface class as semantic id when ``|d| <= semantic_band`` (else 0).
Then identical leaves and subtrees are shared bottom-up through hash tables
with exact comparison, and the DAG is emitted with the root at word 0
(navi_nb/world/dagshare.py).
"""

from __future__ import annotations

import copy
import inspect
import math
import time

import numpy as np
from numba import njit

from navi_nb.errors import NaviError
from navi_nb.world import gmdag
from navi_nb.world.dagshare import KIND_INNER, InnerTable, LeafTable, dedup, dedup_range
from navi_nb.world.gmdag import ROUND_NEAREST, ROUND_TOWARD_ZERO, World, nb_encode_leaf

COMPILER_VERSION = 1
BAND_VOXELS = 3.0  # subdivision band; >= 2 + sqrt(3)/2 keeps interpolation stencils at voxel level
SEMANTIC_BAND_VOXELS = 2.0  # voxel leaves this close to a surface carry its class
MARGIN_VOXELS = 4  # default empty voxels between the region of interest and the cube faces
COLLAPSE_FACTOR = 4.0  # free cells collapse when d >= 4 hd
EVAL_CHUNK = 1 << 17  # points per field.evaluate call (bounds peak memory)
# Fields whose evaluate takes `cap` (MeshField) may answer "at least cap" for
# points farther than cap. A cell below the root has a subdivided parent, so
# its centre value is below (COLLAPSE_FACTOR + 1) * 2 hd + band < 16 hd for
# band < 6 hd: the cap never changes the output, it only skips far work.
CAP_FACTOR = 16.0
# Largest coordinate a region of interest may have: the fitted cube (up to twice
# the extent, plus margins) must still fit the header's float32 fields.
MAX_COORDINATE = 1e37


class CompileError(NaviError, ValueError):
    """Bad compiler input (resolution, bounds, field output)."""


# --------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------


@njit(inline="always", cache=True)
def _pow2_floor(x):
    """Largest power of two <= x (x > 0): coarse values so equal leaves repeat."""
    return 2.0 ** math.floor(math.log2(x))


@njit(cache=True)
def _classify(d, cls, coords, cell_metres, grid, finest, band, sem_band, kind, word):
    """Decide each cell: leaf (word), inner (subdivide) or pruned. See module doc.

    grid = (bmin, roi_lo, roi_hi): the cube's minimum corner and the region of interest (metres).
    """
    bmin, roi_lo, roi_hi = grid
    hd = cell_metres * math.sqrt(3.0) * 0.5
    for i in range(d.shape[0]):
        v = d[i]
        if v == np.inf:  # wholly outside the region of interest, known free: pruned
            kind[i] = 2
        elif finest:
            sem = 0
            if abs(v) <= sem_band:
                sem = cls[i]
                if sem <= 0 or sem > 0xFFFF:
                    sem = 1
            kind[i] = 0
            word[i] = nb_encode_leaf(sem, v, ROUND_NEAREST)
        elif abs(v) < hd + band:
            kind[i] = 1
        elif v < 0.0:
            kind[i] = 0
            word[i] = nb_encode_leaf(0, -_pow2_floor(abs(v) - hd), ROUND_TOWARD_ZERO)
        else:
            outside = False
            for a in range(3):
                lo = bmin[a] + coords[i, a] * cell_metres
                if lo + cell_metres < roi_lo[a] or lo > roi_hi[a]:
                    outside = True
            if outside:
                kind[i] = 2
            elif v >= COLLAPSE_FACTOR * hd:
                q = 0.25 * hd
                kind[i] = 0
                word[i] = nb_encode_leaf(0, math.floor((v - hd) / q) * q, ROUND_TOWARD_ZERO)
            else:
                kind[i] = 1


@njit(cache=True)
def _children(coords, kind, d, reach, start, stop, n_out):
    """Coords (8 per inner cell, octant order) of the children of inner cells
    start..stop-1, and the sign each child's centre inherits: +-1 when the
    parent's centre value proves no surface lies between the parent's centre
    and its children's centres (|d| >= reach, their distance), else 0."""
    out = np.empty((n_out, 3), dtype=np.int16)  # resolution <= 8192: coords fit
    sign = np.zeros(n_out, dtype=np.int8)
    j = 0
    for i in range(start, stop):
        if kind[i] == 1:
            sg = 0
            if d[i] >= reach:
                sg = 1
            elif d[i] <= -reach:
                sg = -1
            for k in range(8):
                out[j, 0] = 2 * coords[i, 0] + (k & 1)
                out[j, 1] = 2 * coords[i, 1] + ((k >> 1) & 1)
                out[j, 2] = 2 * coords[i, 2] + ((k >> 2) & 1)
                sign[j] = sg
                j += 1
    return out, sign


@njit(cache=True)
def _prepare(coords, sign, cell_metres, grid, free_outside, gap, split, lists, d):
    """Sort a chunk's cells by how they are evaluated; write their centres.

    grid as ``_classify``; lists = (cen_s, idx_s, cen_u, idx_u). Cells farther
    than `gap` outside the region of interest (free_outside) get d = +inf
    (pruned) and no evaluation; with `split`, cells of known sign go to the unsigned
    list (cen_u, idx_u), the others to the signed one. Returns (n_s, n_u).
    """
    bmin, roi_lo, roi_hi = grid
    cen_s, idx_s, cen_u, idx_u = lists
    ns = 0
    nu = 0
    for i in range(coords.shape[0]):
        if free_outside:
            o = False
            for a in range(3):
                lo = bmin[a] + coords[i, a] * cell_metres
                if lo + cell_metres < roi_lo[a] - gap or lo > roi_hi[a] + gap:
                    o = True
            if o:
                d[i] = np.inf
                continue
        if split and sign[i] != 0:
            for a in range(3):
                cen_u[nu, a] = bmin[a] + (coords[i, a] + 0.5) * cell_metres
            idx_u[nu] = i
            nu += 1
        else:
            for a in range(3):
                cen_s[ns, a] = bmin[a] + (coords[i, a] + 0.5) * cell_metres
            idx_s[ns] = i
            ns += 1
    return ns, nu


@njit(cache=True)
def _scatter(idx, vals, cls, sign, use_sign, d, c):
    for j in range(idx.shape[0]):
        i = idx[j]
        v = vals[j]
        if use_sign:
            v = abs(v) * sign[i]
        d[i] = v
        c[i] = cls[j]


# --------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------


def fit_cube(bounds_min, bounds_max, resolution, margin=None):
    """(bmin float32 (3,), voxel_size float32) of a cube around the bounds.

    margin: metres of space kept around the bounds on every side; None keeps
    MARGIN_VOXELS voxels.
    """
    lo = np.asarray(bounds_min, dtype=np.float64)
    hi = np.asarray(bounds_max, dtype=np.float64)
    ext = float(np.max(hi - lo))
    if margin is None:
        side = ext * resolution / (resolution - 2 * MARGIN_VOXELS)
    else:
        side = ext + 2.0 * float(margin)
    with np.errstate(over="ignore"):  # a cube too large for float32 is refused by check_cube
        voxel = np.float32(side / resolution)
        while float(voxel) * resolution < side:
            voxel = np.nextafter(voxel, np.float32(np.inf))
        centre = lo / 2 + hi / 2
        bmin = (centre - float(voxel) * resolution / 2).astype(np.float32)
    return bmin, voxel


def check_cube(bmin, voxel, resolution, what="world cube"):
    """Refuse a cube whose corners or voxel size do not fit the header's float32 fields.

    Uses the header rules of the `.gmdag` reader, so the compiler never writes
    a file its own loader rejects.
    """
    b = np.asarray(bmin, dtype=np.float32)
    try:
        gmdag.check_header_fields(
            (
                gmdag.MAGIC,
                gmdag.VERSION,
                int(resolution),
                float(b[0]),
                float(b[1]),
                float(b[2]),
                float(np.float32(voxel)),
                1,
            ),
            what,
        )
    except gmdag.GmdagError as exc:
        raise CompileError(f"{what} does not fit the .gmdag header: {exc.rule}") from None


def _explicit_cube(cube, resolution):
    try:
        cmin = np.asarray(cube[0], dtype=np.float64).reshape(3)
        side = float(cube[1])
    except (TypeError, ValueError, IndexError) as exc:
        raise CompileError(f"cube must be (minimum corner (3,), side), got {cube!r}") from exc
    if not (np.all(np.isfinite(cmin)) and np.isfinite(side) and side > 0):
        raise CompileError(f"cube must be finite with a positive side, got {cube!r}")
    voxel = np.float32(side / resolution)
    return cmin.astype(np.float32), voxel


def _check_args(bounds_min, bounds_max, resolution, margin):
    if isinstance(resolution, bool) or not isinstance(resolution, (int, np.integer)):
        raise CompileError(f"resolution must be an integer, got {resolution!r}")
    resolution = int(resolution)
    if resolution < 16 or resolution > 8192 or resolution & (resolution - 1):
        raise CompileError(f"resolution must be a power of two in 16..8192, got {resolution}")
    lo = np.asarray(bounds_min, dtype=np.float64).reshape(-1)
    hi = np.asarray(bounds_max, dtype=np.float64).reshape(-1)
    if lo.shape != (3,) or hi.shape != (3,) or not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        raise CompileError(f"bounds must be two finite 3-vectors, got {bounds_min!r}, {bounds_max!r}")
    # the cube around them is stored as float32: refuse before any arithmetic overflows
    if max(np.max(np.abs(lo)), np.max(np.abs(hi))) > MAX_COORDINATE:
        raise CompileError(
            f"bounds {lo.tolist()} .. {hi.tolist()} exceed {MAX_COORDINATE:g} m: the world cube would not fit float32"
        )
    if np.any(hi < lo) or not np.any(hi > lo):  # flat along some axis is fine (a wall, a sheet)
        raise CompileError(f"bounds are empty: min {lo.tolist()} max {hi.tolist()}")
    if margin is not None and not (np.isfinite(margin) and margin >= 0):
        raise CompileError(f"margin must be a finite number >= 0, got {margin!r}")
    return lo, hi, resolution


def _accepts_cap(field):
    try:
        return "cap" in inspect.signature(field.evaluate).parameters
    except (TypeError, ValueError):
        return False


def _evaluate(field, centres, cap=None):
    d, c = field.evaluate(centres) if cap is None else field.evaluate(centres, cap=cap)
    d = np.asarray(d, dtype=np.float64).reshape(-1)
    c = np.asarray(c).reshape(-1).astype(np.int64)
    if d.shape[0] != centres.shape[0] or c.shape[0] != centres.shape[0]:
        raise CompileError("field.evaluate returned arrays of the wrong length")
    if not np.all(np.isfinite(d)):
        raise CompileError("field.evaluate returned non-finite distances")
    return d, c


def compile_field(
    field,
    bounds_min,
    bounds_max,
    resolution=128,
    *,
    margin=None,
    cube=None,
    band=BAND_VOXELS,
    semantic_band=SEMANTIC_BAND_VOXELS,
    sidecar=None,
    progress=None,
    unsigned_field=None,
    free_outside=False,
) -> World:
    """Compile any field with ``.evaluate(points (N,3) float64) -> (sdf, class)``.

    bounds_min/max: the region of interest (metres); the world cube is fitted
    around it with `margin` metres (None: MARGIN_VOXELS voxels), unless
    cube = (minimum corner (3,), side) gives it explicitly. band and
    semantic_band are in voxels. progress: optional callable(depth, depths,
    cells_at_depth). Returns a validated World with a sidecar dict.

    unsigned_field: an optional cheaper field giving |distance| (and class),
    used for cells whose sign their parent's value proves (|d_parent| at
    least the distance between the two centres). free_outside: space outside the region of interest is known to
    be free, so cells wholly outside it are pruned without evaluating them.
    """
    lo, hi, resolution = _check_args(bounds_min, bounds_max, resolution, margin)
    t0 = time.perf_counter()
    if cube is None:
        bmin, voxel = fit_cube(lo, hi, resolution, margin)
    else:
        bmin, voxel = _explicit_cube(cube, resolution)
    check_cube(bmin, voxel, resolution)
    h = float(voxel)
    bmin64 = bmin.astype(np.float64)
    depths = int(round(math.log2(resolution)))
    band_m = band * h
    sem_m = semantic_band * h

    use_cap = _accepts_cap(field)
    ctx = _Level(field, unsigned_field, free_outside, use_cap, bmin64, lo, hi, h, band_m, sem_m)
    leaves = LeafTable()
    shared = InnerTable()
    kinds, words = [], []
    coords = np.zeros((1, 3), dtype=np.int16)
    sign = np.zeros(1, dtype=np.int8)
    finest_ref = None
    for depth in range(depths):
        n = coords.shape[0]
        cell = h * (resolution >> depth)
        kind, word, d = ctx.run(coords, sign, cell, False, use_cap and depth > 0)
        kinds.append(kind)
        words.append(word)
        if progress is not None:
            progress(depth, depths, n)
        inner = np.nonzero(kind == KIND_INNER)[0]
        if inner.size == 0:
            break
        hd = cell * math.sqrt(3.0) / 2
        if depth + 1 < depths:
            coords, sign = _children(coords, kind, d, hd / 2, 0, n, 8 * inner.size)
            continue
        # The finest level, in chunks of parents: evaluate, encode and share the
        # leaves, then share the parents themselves at once. Only one int32 ref
        # per parent cell is kept, never the voxel arrays.
        last_kind, last_word = kinds.pop(), words.pop()
        last_ref = np.empty(n, dtype=np.int32)
        per = max(1, EVAL_CHUNK // 8)
        start = 0
        for s in range(0, inner.size, per):
            m = min(inner.size, s + per) - s
            stop = n if s + m == inner.size else int(inner[s + m - 1]) + 1
            cc, cs = _children(coords, last_kind, d, hd / 2, start, stop, 8 * m)
            ck, cw, _ = ctx.run(cc, cs, h, True, use_cap)
            child_ref = np.empty(8 * m, dtype=np.int32)
            leaves.refs(ck, cw, child_ref)
            del cc, cs, ck, cw
            dedup_range(last_kind[start:stop], last_word[start:stop], child_ref, leaves, shared, last_ref[start:stop])
            start = stop
        finest_ref = last_ref
        if progress is not None:
            progress(depths, depths, 8 * inner.size)
    del coords, sign

    nodes = dedup(kinds, words, finest_ref, leaves, shared)
    world = World(resolution=resolution, bmin=bmin, voxel_size=float(voxel), nodes=nodes)
    gmdag.validate_world(world)
    _stamp_sidecar(world, sidecar, lo, hi, band, semantic_band, margin, t0)
    return world


def _stamp_sidecar(world, sidecar, lo, hi, band, semantic_band, margin, t0):
    """The sidecar of a compiled world: the caller's entries, defaults, and how it was compiled."""
    world.sidecar = dict(sidecar or {})
    world.sidecar.setdefault("class_names", ["none", "surface"])
    world.sidecar.setdefault("spawn_points", [])
    world.sidecar["bounds_of_interest"] = [lo.tolist(), hi.tolist()]
    world.sidecar["sample"] = "centre"  # leaves hold the distance at their voxel's centre
    world.sidecar["compiler"] = {
        "version": COMPILER_VERSION,
        "resolution": world.resolution,
        "band_voxels": band,
        "semantic_band_voxels": semantic_band,
        "margin": None if margin is None else float(margin),
        "seconds": round(time.perf_counter() - t0, 4),
    }


class _Level:
    """Evaluates and classifies the cells of one level (in chunks)."""

    def __init__(self, field, unsigned_field, free_outside, use_cap, bmin, lo, hi, h, band, sem_band):
        self.field, self.unsigned, self.free_outside = field, unsigned_field, free_outside
        self.h, self.band, self.sem_band = h, band, sem_band
        self.grid = (bmin, lo, hi)  # what the cell kernels read together
        self.evaluations = 0
        self._buf = None

    def run(self, coords, sign, cell, finest, capped):
        n = coords.shape[0]
        hd = cell * math.sqrt(3.0) / 2
        # voxel values are needed exactly up to 2 + sqrt(3) voxels (interpolation
        # stencils of points within 2 voxels); coarser cells up to 16 hd
        cap = (4.0 * self.h if finest else CAP_FACTOR * hd) if capped else None
        kind = np.empty(n, dtype=np.int8)
        word = np.zeros(n, dtype=np.uint64)
        dall = np.empty(n, dtype=np.float32)  # kept for the children's inherited signs only
        if self._buf is None:  # reused across calls: fresh pages cost more than the work
            self._buf = (
                np.empty((EVAL_CHUNK, 3)),
                np.empty(EVAL_CHUNK, dtype=np.int64),
                np.empty((EVAL_CHUNK, 3)),
                np.empty(EVAL_CHUNK, dtype=np.int64),
                np.empty(EVAL_CHUNK, dtype=np.float64),
                np.empty(EVAL_CHUNK, dtype=np.int64),
            )
        cen_s, idx_s, cen_u, idx_u, dbuf, cbuf = self._buf
        split = self.unsigned is not None
        for s in range(0, n, EVAL_CHUNK):
            e = min(n, s + EVAL_CHUNK)
            d, c, sg = dbuf[: e - s], cbuf[: e - s], sign[s:e]
            c[:] = 0
            # a pruned cell must hold no interpolation stencil point of a point within
            # 2 voxels of a surface: keep band + 1 voxel of space evaluated
            ns, nu = _prepare(
                coords[s:e], sg, cell, self.grid, self.free_outside, self.band + self.h, split, self._buf[:4], d
            )
            for field, cen, idx, k, signed in (
                (self.field, cen_s, idx_s, ns, False),
                (self.unsigned, cen_u, idx_u, nu, True),
            ):
                if k:
                    v, cl = _evaluate(field, cen[:k], cap)
                    _scatter(idx[:k], v, cl, sg, signed, d, c)
            self.evaluations += ns + nu
            _classify(d, c, coords[s:e], cell, self.grid, finest, self.band, self.sem_band, kind[s:e], word[s:e])
            if not finest:  # float32 rounding must not invent a sign the parent does not have
                dall[s:e] = np.where(np.abs(d) >= hd / 2, d, 0.0)
        return kind, word, dall


def compile_scene(name_or_scene="house", resolution=128, seed=0, *, margin=None, progress=None) -> World:
    """Compile a built-in scene (name or Scene) from its analytic field.

    The cube is the scene's own (cube_min, cube_side) unless `margin` (metres)
    asks for a cube fitted around its region of interest. A scene whose cube is
    ``resolution_scale`` times the standard one (the large families) compiles at
    that many times `resolution`, so its voxels are the standard cube's.
    """
    from navi_nb.world.scenes import Scene, get_scene

    scene = name_or_scene if isinstance(name_or_scene, Scene) else get_scene(name_or_scene, seed)
    cube = None
    if margin is None and scene.cube_min is not None:
        cube = (scene.cube_min, scene.cube_side)
    scaled = resolution  # a bad value is refused by compile_field as it was given
    is_int = isinstance(resolution, (int, np.integer)) and not isinstance(resolution, bool)
    if margin is None and scene.resolution_scale != 1 and is_int:
        scaled = int(resolution) * scene.resolution_scale
    if scaled != resolution and scaled > 8192:
        raise CompileError(
            f"scene {scene.name!r} compiles at {scene.resolution_scale}x the resolution (its {scene.cube_side:g} m "
            f"cube at the voxel size of the standard one): {resolution} gives {scaled}, above 8192"
        )
    world = compile_field(
        scene,
        scene.bounds_min,
        scene.bounds_max,
        scaled,
        margin=margin,
        cube=cube,
        sidecar=scene.sidecar(),
        progress=progress,
    )
    world.source = f"<scene {scene.name} @ {resolution}>"
    return world


def compile_mesh(mesh_or_path, resolution=256, margin=None, *, progress=None, name=None, classes=None) -> World:
    """Compile a triangle mesh (Mesh, (vertices, faces) pair, or a file path).

    Distances are signed (MeshField decides inside from outside: pseudonormals
    on closed meshes, the generalised winding number otherwise); space outside
    the triangles' bounding box counts as free. Semantic ids: `classes` per
    face (default 1) on near-surface voxels. A mesh whose coordinates exceed
    MAX_COORDINATE, or whose world cube does not fit float32, is refused
    (CompileError) before any field is built.
    """
    from navi_nb.world.mesh_field import MeshField

    if isinstance(mesh_or_path, (str, bytes)) or hasattr(mesh_or_path, "__fspath__"):
        from navi_nb.world.mesh_io import read_mesh

        name = name or str(mesh_or_path)
        mesh = read_mesh(mesh_or_path)
        vertices, faces = mesh.vertices, mesh.faces
    elif isinstance(mesh_or_path, tuple):
        vertices, faces = mesh_or_path
    else:
        vertices, faces = mesh_or_path.vertices, mesh_or_path.faces
    _check_mesh_bounds(vertices, resolution, margin, name or "mesh")
    field = MeshField(vertices, faces, classes=classes)
    # cells whose parent's value proves their sign only need |distance|: no sign
    # test. The same BVH serves both: a shallow copy with `sign` switched.
    unsigned = copy.copy(field)
    unsigned.sign = "unsigned"
    sidecar = {
        "scene": name or "mesh",
        "class_names": ["none", "surface"],
        "spawn_points": [],
        "triangles": int(np.asarray(faces).shape[0]),
        "closed": bool(getattr(field, "closed", False)),
    }
    world = compile_field(
        field,
        field.bounds_min,
        field.bounds_max,
        resolution,
        margin=margin,
        sidecar=sidecar,
        progress=progress,
        unsigned_field=unsigned,
        free_outside=True,
    )
    world.source = f"<mesh {name or 'mesh'} @ {resolution}>"
    return world


def _check_mesh_bounds(vertices, resolution, margin, name):
    """Refuse a mesh whose world cube would not fit float32, before any field is built."""
    v = np.asarray(vertices, dtype=np.float64).reshape(-1, 3)
    if v.shape[0] == 0 or not np.all(np.isfinite(v)):
        return  # MeshField names these faults
    lo, hi = v.min(axis=0), v.max(axis=0)
    if max(np.max(np.abs(lo)), np.max(np.abs(hi))) > MAX_COORDINATE:
        raise CompileError(
            f"{name}: vertex coordinates reach {max(np.max(np.abs(lo)), np.max(np.abs(hi))):g} m, "
            f"beyond {MAX_COORDINATE:g} m: the world cube would not fit float32"
        )
    if margin is not None and not (np.isfinite(margin) and 0 <= margin <= MAX_COORDINATE):
        return  # _check_args names it
    if isinstance(resolution, (int, np.integer)) and not isinstance(resolution, bool) and resolution >= 16:
        bmin, voxel = fit_cube(lo, hi, int(resolution), margin)
        check_cube(bmin, voxel, int(resolution), f"{name}: world cube")
