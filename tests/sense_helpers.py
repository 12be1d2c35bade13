"""Test helpers for the sensing tests: hand-built DAGs from dense grids.

``dag_from_grid`` is a second, deliberately simple implementation of the
format's writer (recursive, pure Python, over a dense grid), so the tracer can
be tested without the compiler and against analytic answers.
"""

from __future__ import annotations

import numpy as np

from navi_nb.world import gmdag


def dag_from_grid(
    dist, sem, voxel_size=1.0, bmin=(0.0, 0.0, 0.0), prune=True, collapse=True, unsigned=False, keep_band=3.0
):
    """A World whose leaves hold ``dist[x, y, z]`` (metres) and ``sem[x, y, z]``.

    dist, sem: (R, R, R) arrays, R a power of two, indexed [x, y, z].
    prune: clear the mask bit of octants that are all free (semantic 0, distance > 0).
    collapse: an octant whose leaves are all semantic 0 with the same sign becomes one
    leaf holding their minimum |distance| (a safe lower bound) with that sign.
    unsigned: store |distance| (another writer's dialect).
    keep_band: blocks holding a cell within this many voxels of a surface are neither
    pruned nor collapsed (like the compiler, so interpolation stencils stay at voxel level).
    """
    dist = np.asarray(dist, dtype=np.float64)
    sem = np.asarray(sem, dtype=np.int64)
    r = dist.shape[0]
    assert dist.shape == (r, r, r) and sem.shape == dist.shape and r & (r - 1) == 0 and r >= 2
    if unsigned:
        dist = np.abs(dist)
    nodes = [np.uint64(0)]  # word 0: the root, written last

    def leaf(s, d):
        return gmdag.encode_leaf(int(s), float(d), rounding="toward_zero")

    def build(x, y, z, size, is_root=False):
        """Word index of the node for the cube, or None when pruned."""
        block_d = dist[x : x + size, y : y + size, z : z + size]
        block_s = sem[x : x + size, y : y + size, z : z + size]
        free = np.all(block_s == 0) and np.all(block_d > 0)
        far = np.all(np.abs(block_d) >= keep_band * voxel_size)
        if prune and free and far and not is_root:
            return None
        if size == 1:
            nodes.append(leaf(block_s[0, 0, 0], block_d[0, 0, 0]))
            return len(nodes) - 1
        if collapse and far and not is_root and np.all(block_s == 0):
            if np.all(block_d > 0):
                nodes.append(leaf(0, block_d.min()))
                return len(nodes) - 1
            if np.all(block_d < 0):
                nodes.append(leaf(0, -np.abs(block_d).min()))
                return len(nodes) - 1
        h = size // 2
        children = []
        mask = 0
        for k in range(8):
            cx = x + h * (k & 1)
            cy = y + h * ((k >> 1) & 1)
            cz = z + h * ((k >> 2) & 1)
            c = build(cx, cy, cz, h)
            if c is not None:
                mask |= 1 << k
                children.append(c)
        if mask == 0:  # an inner node needs at least one child: keep one free leaf
            nodes.append(leaf(0, block_d.min()))
            children.append(len(nodes) - 1)
            mask = 1
        base = len(nodes)
        for c in children:
            nodes.append(gmdag.encode_slot(c))
        word = gmdag.encode_inner(mask, base)
        if is_root:
            nodes[0] = word
            return 0
        nodes.append(word)
        return len(nodes) - 1

    build(0, 0, 0, r, is_root=True)
    world = gmdag.World(
        resolution=r,
        bmin=np.asarray(bmin, dtype=np.float32),
        voxel_size=float(voxel_size),
        nodes=np.array(nodes, dtype=np.uint64),
        source="<dense grid>",
    )
    gmdag.validate_world(world)
    return world


def reference_descend(world, p, dscale):
    """The cell holding ``p`` (voxel units, inside the cube) by walking the words from the root:
    (kind, distance * dscale, semantic, lo (3,), size); NaN leaves read as 0."""
    nodes = world.nodes
    lo = np.zeros(3)
    size = float(world.resolution)
    node = 0
    while True:
        w = nodes[node]
        if gmdag.word_is_leaf(w):
            d = float(gmdag.leaf_distance(w, gmdag.HALF_TO_FLOAT)) * dscale
            return 1, (0.0 if d != d else d), int(gmdag.leaf_semantic(w)), lo, size
        size *= 0.5
        octant = 0
        for axis in range(3):
            if p[axis] >= lo[axis] + size:
                octant += 1 << axis
                lo[axis] += size
        slot = int(gmdag.child_slot(w, octant))
        if slot < 0:
            return 0, 0.0, 0, lo, size
        node = int(gmdag.word_index(nodes[slot]))


def reference_field(world, p):
    """The field at world point ``p`` (metres) by the one rule every reader follows
    (``navi_nb/world/field.py``), written out plainly over the node words:
    trilinear interpolation between voxel centres of the centre values (a leaf's
    distance, or in a pruned octant the distance to its nearest face), the point
    clamped into the cube and the outside rule added. Returns (metres, semantic).
    Assumes finite leaf distances."""
    voxel = float(np.float32(world.voxel_size))
    res = int(world.resolution)
    u = (np.asarray(p, np.float64) - np.asarray(world.bmin, np.float32).astype(np.float64)) / voxel
    c = np.clip(u, 0.0, res * (1.0 - 1e-12))
    outside = float(np.linalg.norm(u - c))

    def centre_value(q):
        kind, d, _s, lo, size = reference_descend(world, q, 1.0 / voxel)
        if kind == 1:
            return d
        return float(min(np.min(q - lo), np.min(lo + size - q)))

    g = np.clip(c - 0.5, 0.0, res - 1.0)
    i = np.clip(np.floor(g), 0.0, max(res - 2.0, 0.0))
    f = g - i
    val = 0.0
    for k in range(8):
        o = np.array([k & 1, (k >> 1) & 1, (k >> 2) & 1], np.float64)
        w = float(np.prod(np.where(o == 1, f, 1.0 - f)))
        val += w * centre_value(i + o + 0.5)
    kind, _d, sem, _lo, _size = reference_descend(world, c, 1.0 / voxel)
    if outside > 1e-9:
        return (val if val < 0.0 else outside + val) * voxel, 0
    return val * voxel, (sem if kind == 1 else 0)


def centres(r, voxel_size=1.0, bmin=(0.0, 0.0, 0.0)):
    """(R, R, R, 3) float64 voxel centres in metres, indexed [x, y, z]."""
    i = (np.arange(r) + 0.5) * voxel_size
    g = np.stack(np.meshgrid(i, i, i, indexing="ij"), axis=-1)
    return g + np.asarray(bmin, dtype=np.float64)


def sphere_world(r=32, radius=8.0, centre=None, voxel_size=1.0, band=2.0, **kw):
    """A solid sphere; returns (world, centre). Semantic 1 within ``band`` voxels of the surface."""
    if centre is None:
        centre = np.full(3, r * voxel_size / 2.0)
    p = centres(r, voxel_size)
    d = np.linalg.norm(p - np.asarray(centre), axis=-1) - radius
    s = (np.abs(d) < band * voxel_size).astype(np.int64)
    return dag_from_grid(d, s, voxel_size=voxel_size, **kw), np.asarray(centre, dtype=np.float64)


def slab_world(r=32, lo=12.0, hi=16.0, axis=0, voxel_size=1.0, band=2.0, sem_id=3, **kw):
    """A solid slab ``lo <= p[axis] <= hi`` (metres) across the whole cube."""
    p = centres(r, voxel_size)[..., axis]
    d = np.maximum(lo - p, p - hi)
    s = np.where(np.abs(d) < band * voxel_size, sem_id, 0)
    return dag_from_grid(d, s, voxel_size=voxel_size, **kw)


def ray_sphere(origins, dirs, centre, radius):
    """Exact first-hit distance (inf on a miss, 0 from inside) of rays against a sphere."""
    oc = origins - centre
    b = np.sum(oc * dirs, axis=-1)
    c = np.sum(oc * oc, axis=-1) - radius * radius
    disc = b * b - c
    t = -b - np.sqrt(np.maximum(disc, 0.0))
    out = np.where((disc >= 0) & (t >= 0), t, np.inf)
    return np.where(c <= 0, 0.0, out)
