"""A world's in-memory layout: the DAG decoded once into flat arrays.

Every kernel that reads the field (the tracer, point queries, collision)
reads it through this layout and ``navi_nb/world/field.py``. The `.gmdag`
words are for storage and interchange (docs/FORMAT.md); a descent
through them costs two dependent loads per level (the node word, then its
child slot) plus bit decoding, and each leaf a half-float table lookup and a
scaling. :func:`decode_layout` turns a validated world into:

* ``child`` (M * 8,) int32: for inner node ``m`` (numbered in breadth-first
  order from the root, 0) and octant ``o``, ``child[8 * m + o]`` is a *code*:
  ``>= 0`` the inner child's number, ``-1`` a pruned (cleared) octant,
  ``<= -2`` leaf number ``-code - 2``;
* ``leaf_dist`` (L,) float64: each leaf's distance in *voxel units*
  (``float(half) * (1 / voxel_size)``); ``leaf_sem`` (L,) int32 its
  semantic id. Non-finite halves are read as finite values so that no
  reader ever sees NaN or an infinity: NaN as 0, one writer's ``+inf`` for 0
  in a near-surface leaf as 0, any other ``+inf`` as +65504 (the largest
  finite half) and ``-inf`` as -65504, both times the scale;
* ``top_code`` (n, n, n) int32 and ``top_level`` (n, n, n) int8: a dense
  table of the descent at depth ``log2(n)`` (the code reached there, or the
  leaf / pruned octant that ended the descent earlier and the level where
  it did). ``n`` is ``res / 2`` up to ``2**TOP_DEPTH`` (1 for resolutions
  that are not powers of two), so most descents are one table load, one or
  two child loads and a leaf load.

Leaves are shared in the DAG, so ``leaf_*`` are small (hundreds to tens of
thousands of entries); ``child`` holds 32 bytes per unique inner node.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from navi_nb.world import gmdag

TOP_DEPTH = 6
"""Deepest dense top table: 64**3 int32 codes (1 MiB) + int8 levels (256 KiB).
(A 128**3 table, 8 MiB, was slower at resolution 256: it does not stay in cache.)"""
LEAF_CODE_BASE = 2  # leaf number k has code -(k + 2); -1 is a pruned octant
HALF_MAX = 65504.0  # the largest finite half: infinite leaves are read as this magnitude


class Layout:
    """Decoded arrays of one world for one voxel scale (see the module doc)."""

    def __init__(self, child, leaf_dist, leaf_sem, top_code, top_level):
        self.child = child
        self.leaf_dist = leaf_dist
        self.leaf_sem = leaf_sem
        self.top_code = top_code
        self.top_level = top_level

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.child, self.leaf_dist, self.leaf_sem, self.top_code, self.top_level))


@njit(cache=True)
def _number_nodes(nodes, node_code):
    """Breadth-first from the root: node_code[i] = the code of word i (inner / leaf);
    returns (inner count, leaf count, order of inner word indices)."""
    n = nodes.shape[0]
    order = np.empty(n, np.int64)
    n_inner = 0
    n_leaf = 0
    head = 0
    tail = 0
    order[tail] = 0
    tail += 1
    if gmdag.nb_word_is_leaf(nodes[0]):
        node_code[0] = -(0 + LEAF_CODE_BASE)
        return 0, 1, order[:0]
    node_code[0] = 0
    n_inner = 1
    while head < tail:
        node = order[head]
        head += 1
        w = nodes[node]
        mask = gmdag.nb_word_mask(w)
        base = gmdag.nb_word_index(w)
        k = 0
        for o in range(8):
            if (mask >> o) & 1 == 0:
                continue
            c = gmdag.nb_word_index(nodes[base + k])
            k += 1
            if node_code[c] != np.int64(-1):
                continue
            if gmdag.nb_word_is_leaf(nodes[c]):
                node_code[c] = -(n_leaf + LEAF_CODE_BASE)
                n_leaf += 1
            else:
                node_code[c] = n_inner
                n_inner += 1
                order[tail] = c
                tail += 1
    return n_inner, n_leaf, order[:tail]


@njit(cache=True)
def _fill(nodes, half_table, dscale, node_code, inner_order, child, leaf_dist, leaf_sem):
    for m in range(inner_order.shape[0]):
        w = nodes[inner_order[m]]
        mask = gmdag.nb_word_mask(w)
        base = gmdag.nb_word_index(w)
        k = 0
        for o in range(8):
            if (mask >> o) & 1 == 0:
                child[8 * m + o] = -1
                continue
            c = gmdag.nb_word_index(nodes[base + k])
            k += 1
            child[8 * m + o] = node_code[c]
    for i in range(nodes.shape[0]):
        code = node_code[i]
        if code > -LEAF_CODE_BASE:
            continue
        w = nodes[i]
        sem = gmdag.nb_leaf_semantic(w)
        h = np.float64(gmdag.nb_leaf_distance(w, half_table))
        if not (h == h):
            h = 0.0
        elif h > HALF_MAX:
            h = HALF_MAX
        elif h < -HALF_MAX:
            h = -HALF_MAX
        d = h * dscale
        k = -code - LEAF_CODE_BASE
        leaf_dist[k] = d
        leaf_sem[k] = sem


@njit(cache=True)
def _fill_top(child, root_code, res, depth, top_code, top_level):
    n = top_code.shape[0]
    size0 = res / n
    for i in range(n):
        for j in range(n):
            for k in range(n):
                px = (i + 0.5) * size0
                py = (j + 0.5) * size0
                pz = (k + 0.5) * size0
                code = root_code
                lox = 0.0
                loy = 0.0
                loz = 0.0
                size = res
                level = 0
                while level < depth and code >= 0:
                    size = size * 0.5
                    octant = 0
                    if px >= lox + size:
                        octant += 1
                        lox = lox + size
                    if py >= loy + size:
                        octant += 2
                        loy = loy + size
                    if pz >= loz + size:
                        octant += 4
                        loz = loz + size
                    code = child[8 * code + octant]
                    level += 1
                top_code[i, j, k] = code
                top_level[i, j, k] = level


def top_depth_for(res: int) -> int:
    """Depth of the dense table: one level above the voxels, at most TOP_DEPTH; 0 off powers of two."""
    if res & (res - 1) != 0 or res < 2:
        return 0
    return max(0, min(TOP_DEPTH, res.bit_length() - 2))


def decode_layout(world, dscale: float, top_depth: int | None = None) -> Layout:
    """Decode a validated World into a :class:`Layout` (leaf distances times ``dscale``)."""
    nodes = np.ascontiguousarray(world.nodes, dtype=np.uint64)
    res = int(world.resolution)
    node_code = np.full(nodes.shape[0], -1, np.int64)
    n_inner, n_leaf, order = _number_nodes(nodes, node_code)
    child = np.empty(max(1, n_inner) * 8, np.int32)
    if n_inner == 0:
        child[:] = -1
    leaf_dist = np.zeros(max(1, n_leaf), np.float64)
    leaf_sem = np.zeros(max(1, n_leaf), np.int32)
    _fill(nodes, gmdag.HALF_TO_FLOAT, float(dscale), node_code, order, child, leaf_dist, leaf_sem)
    depth = top_depth_for(res) if top_depth is None else int(top_depth)
    n = 1 << depth
    top_code = np.empty((n, n, n), np.int32)
    top_level = np.empty((n, n, n), np.int8)
    _fill_top(child, int(node_code[0]), float(res), depth, top_code, top_level)
    return Layout(child, leaf_dist, leaf_sem, top_code, top_level)


def world_layout(world, dscale: float) -> Layout:
    """:func:`decode_layout`, cached on the World (per node array and scale)."""
    cached = getattr(world, "_navi_layout", None)
    if cached is not None and cached[0] is world.nodes and cached[1] == dscale:
        return cached[2]
    layout = decode_layout(world, dscale)
    world._navi_layout = (world.nodes, dscale, layout)
    return layout


SAMPLE_OFFSETS = {"centre": 0.0, "corner": 0.5}
"""Voxels to add to ``(p - bmin) / voxel`` so that a leaf's sample point lands on its
voxel's centre in the field's voxel units (the field interpolates between centres)."""


def sample_offset(world) -> float:
    """0.0 for a centre-sampled world, 0.5 for a corner-sampled one (the sidecar's
    ``"sample"`` key; ``load_world`` always sets it, in-memory worlds without it are navi_nb's,
    centre-sampled)."""
    value = world.sidecar.get("sample", "centre") if isinstance(world.sidecar, dict) else "centre"
    if value not in SAMPLE_OFFSETS:
        raise gmdag.GmdagError(
            world.source, f"sample convention must be one of {', '.join(SAMPLE_OFFSETS)}, got {value!r}"
        )
    return SAMPLE_OFFSETS[value]


def field_origin(world) -> np.ndarray:
    """(3,) float64 metres: where the field's voxel coordinates are 0, so that
    ``u = (p - field_origin) / voxel``. ``bmin`` for a centre-sampled world (exactly,
    so its bits are unchanged), ``bmin - voxel / 2`` for a corner-sampled one (whose
    samples ``bmin + i * voxel`` then sit at voxel centres)."""
    bmin = np.asarray(world.bmin, dtype=np.float32).astype(np.float64)
    off = sample_offset(world)
    if off == 0.0:
        return bmin
    return bmin - off * float(np.float32(world.voxel_size))
