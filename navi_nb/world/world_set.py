"""A world set: several worlds loaded once into one shared structure.

Each world keeps its own resolution, bounds, voxel size and sample convention
(``layout.sample_offset``). The decoded layouts (``navi_nb/world/layout.py``)
of all worlds are packed, once, into five flat arrays (child codes, leaf
distances, leaf semantics, dense top tables, top levels) plus two small
per-world tables:

* ``iparams`` (W, 6) int64: ``child`` offset and length, leaf offset and
  length, top-table offset and side ``n`` (the table holds ``n**3`` entries);
* ``fparams`` (W, 5) float64: the field origin x, y, z (metres, where the
  field's voxel coordinates are 0: ``layout.field_origin``), the voxel size
  and the resolution.

In a set of several worlds the leaves and inner nodes of all worlds form one
pool in which equal leaves and equal subtrees are stored once
(:func:`share_subtrees`: 64 generated houses at 128 hold 151,040 inner nodes
and 13,424 leaves between them, 39,900 and 615 of them distinct); each
world's dense top table points into the pool. A kernel reads world ``w``
through views (:func:`world_field`): the same arrays, shapes and arithmetic
as a single world's layout, and the same cells and values, hence the same
bits. Worlds with identical node arrays (the same world listed twice, or two
copies of one file) are packed once and share their tables too. A set of one
keeps its own layout as decoded. After packing, each world's cached layout
(``layout.world_layout``) is replaced by views into the packed arrays, so the
point queries and the tracer read one copy; nothing is ever copied per actor.

A single world is the set of one (:meth:`WorldSet.of`). :meth:`WorldSet.map_layouts` takes the
packed arrays from a file mapped read-only instead (``navi_nb/world/layout_cache.py``): the same
bytes, one copy in the page cache for every process on the host.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
from numba import njit

from navi_nb.errors import NaviError
from navi_nb.world import gmdag
from navi_nb.world.field import nb_table_shift
from navi_nb.world.layout import Layout, decode_layout, field_origin, sample_offset, top_depth_for

SET_TOP_DEPTH = 5
"""Deepest dense top table of a world in a set of several (32**3 entries, 160 KiB; a single
world keeps ``layout.TOP_DEPTH``). The table only speeds up the descent (the cells found are
the same at any depth), and 64 worlds' 64**3 tables (80 MiB) would miss the caches on every
ray's first lookups."""
IP_CHILD, IP_CHILD_LEN, IP_LEAF, IP_LEAF_LEN, IP_TOP, IP_TOP_N = range(6)
FP_OX, FP_OY, FP_OZ, FP_VOXEL, FP_RES = range(5)


class WorldSetError(NaviError, ValueError):
    """A world set that cannot be built (no worlds, wrong types, names or items not matching)."""


class PackedWorlds:
    """The packed arrays of a :class:`WorldSet` (see the module doc).

    ``arrays`` is the tuple kernels take: ``(child, leaf_dist, leaf_sem,
    top_code, top_level, iparams, fparams)``. ``distinct`` (W,) int64: the
    index of the first world holding the same data (itself when distinct).
    """

    def __init__(self, worlds, decoded=None):
        """``decoded``: the arrays of :func:`decode_packed` (e.g. mapped from a layout file); decoded here
        when None."""
        W = len(worlds)
        if decoded is None:
            decoded = decode_packed(worlds)
        self.distinct = decoded["distinct"]
        self.child = decoded["child"]
        self.leaf_dist = decoded["leaf_dist"]
        self.leaf_sem = decoded["leaf_sem"]
        self.top_code = decoded["top_code"]
        self.top_level = decoded["top_level"]
        self.added = decoded["added"]
        ip = decoded["iparams"]
        self.mapped = None  # the layout file the arrays are mapped from (map_packed), if any
        self.map_note = None  # why they were decoded rather than mapped as they were (map_packed)
        fp = np.zeros((W, 5), np.float64)
        for w, world in enumerate(worlds):
            fp[w, FP_OX : FP_OZ + 1] = field_origin(world)
            fp[w, FP_VOXEL] = float(np.float32(world.voxel_size))
            fp[w, FP_RES] = float(world.resolution)
        self.iparams = ip
        self.fparams = fp
        self.arrays = (self.child, self.leaf_dist, self.leaf_sem, self.top_code, self.top_level, ip, fp)
        # every world's cached layout now reads the packed arrays: one copy of each
        for w, world in enumerate(worlds):
            voxel = float(np.float32(world.voxel_size))
            world._navi_layout = (world.nodes, 1.0 / voxel, self.layout_of(w))

    def layout_of(self, w) -> Layout:
        """World ``w``'s layout as views into the packed arrays."""
        c0, cn, l0, ln, t0, n = (int(x) for x in self.iparams[w])
        return Layout(
            self.child[c0 : c0 + cn],
            self.leaf_dist[l0 : l0 + ln],
            self.leaf_sem[l0 : l0 + ln],
            self.top_code[t0 : t0 + n**3].reshape(n, n, n),
            self.top_level[t0 : t0 + n**3].reshape(n, n, n),
        )

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self.arrays)


def layout_depths(worlds) -> list:
    """Each world's dense top-table depth in a set of ``worlds`` (a single world keeps
    ``layout.TOP_DEPTH``'s; several at most :data:`SET_TOP_DEPTH`)."""
    if len(worlds) == 1:
        return [top_depth_for(int(worlds[0].resolution))]
    return [min(top_depth_for(int(w.resolution)), SET_TOP_DEPTH) for w in worlds]


def decode_packed(worlds) -> dict:
    """The packed arrays of ``worlds`` decoded from their nodes: ``child``, ``leaf_dist``, ``leaf_sem``,
    ``top_code``, ``top_level`` (flat), ``iparams`` (W, 6), ``distinct`` (W,) and ``added`` (W,): the
    bytes each world adds (:meth:`WorldSet.nbytes_per_world`). A set of several worlds stores its
    leaves and subtrees in one pool (:func:`share_subtrees`)."""
    W = len(worlds)
    distinct = np.arange(W, dtype=np.int64)
    layouts, keys = [], {}
    for w, (world, depth) in enumerate(zip(worlds, layout_depths(worlds))):
        key = _world_key(world) if W > 1 else None
        if key in keys:
            distinct[w] = keys[key]
            layouts.append(None)
            continue
        keys[key] = w
        # decoded afresh, never from a layout cached on the world (which may be views of a file)
        voxel = float(np.float32(world.voxel_size))
        layouts.append(decode_layout(world, 1.0 / voxel, top_depth=depth))
    own = [lay for lay in layouts if lay is not None]
    owners = [w for w in range(W) if layouts[w] is not None]
    if len(own) > 1:
        child, leaf_dist, leaf_sem, top_codes, pool_added = share_subtrees(own)
    else:
        child, leaf_dist, leaf_sem = own[0].child, own[0].leaf_dist, own[0].leaf_sem
        top_codes = [own[0].top_code]
        pool_added = [int(child.nbytes + leaf_dist.nbytes + leaf_sem.nbytes)]
    ip = np.zeros((W, 6), np.int64)
    added = np.zeros(W, np.int64)
    top = 0
    for k, w in enumerate(owners):
        n = own[k].top_code.shape[0]
        ip[w] = (0, child.shape[0], 0, leaf_dist.shape[0], top, n)
        added[w] = pool_added[k] + n**3 * (top_codes[k].itemsize + own[k].top_level.itemsize)
        top += n * n * n
    for w in range(W):
        if layouts[w] is None:
            ip[w] = ip[distinct[w]]
    return {
        "child": child,
        "leaf_dist": leaf_dist,
        "leaf_sem": leaf_sem,
        "top_code": np.concatenate([t.reshape(-1) for t in top_codes]),
        "top_level": np.concatenate([lay.top_level.reshape(-1) for lay in own]),
        "iparams": ip,
        "distinct": distinct,
        "added": added,
    }


_ROW_MIX = np.array(
    [
        0x9E3779B97F4A7C15,
        0xC2B2AE3D27D4EB4F,
        0x165667B19E3779F9,
        0xD6E8FEB86659FD93,
        0xFF51AFD7ED558CCD,
        0xC4CEB9FE1A85EC53,
        0x94D049BB133111EB,
        0xBF58476D1CE4E5B9,
    ],
    np.uint64,
)  # odd 64-bit constants (golden ratio, xxHash, SplitMix64, Murmur3): a row's hash mixes each column


def equal_rows(rows):
    """``(distinct, inverse)`` for the rows of an (N, 8) int64 array: each distinct row once, in no
    particular order, and for each row the index of its equal in ``distinct``.

    Sorted by a 64-bit hash of the rows, equal rows lie next to each other; every pair of neighbours
    with equal hashes is then compared in full, and should two different rows ever share a hash the
    rows are grouped by ``np.unique`` instead: exact either way. About 15 times faster than
    ``np.unique(axis=0)``, which sorts the rows as structured records (most of a cold run's packing of
    200 worlds)."""
    n = rows.shape[0]
    if n == 0:
        return rows.reshape(0, 8), np.zeros(0, np.int64)
    h = (rows.astype(np.uint64) * _ROW_MIX).sum(axis=1)  # wraps modulo 2**64
    h ^= h >> np.uint64(31)
    order = np.argsort(h)
    hs, rs = h[order], rows[order]
    same_hash = hs[1:] == hs[:-1]
    if np.any(same_hash & np.any(rs[1:] != rs[:-1], axis=1)):
        distinct, inverse = np.unique(rows, axis=0, return_inverse=True)
        return distinct, inverse.reshape(-1)
    first = np.empty(n, np.bool_)
    first[0] = True
    first[1:] = ~same_hash
    inverse = np.empty(n, np.int64)
    inverse[order] = np.cumsum(first) - 1
    return rs[first], inverse


def share_subtrees(layouts):
    """One pool of leaves and inner nodes for several decoded layouts, each stored once.

    Leaves are equal when their distance (voxel units, compared by its bits) and semantic id are;
    inner nodes when their eight child codes are, once the children are pooled (so equal subtrees
    of different worlds become one), found height by height from the leaves up. The codes keep
    their meaning (``>= 0`` an inner node, ``-1`` pruned, ``<= -2`` a leaf), so every world's
    descent finds the same cells and values in the pool as in its own layout: the same bits.
    Returns ``(child, leaf_dist, leaf_sem, top_codes, added)``: the pooled arrays, each layout's
    top table in pool codes, and the pool bytes each layout adds (nodes it holds first).
    """
    L = len(layouts)
    # leaves: by (distance bits, semantic)
    bits = np.concatenate([lay.leaf_dist.view(np.int64) for lay in layouts])
    sems = np.concatenate([lay.leaf_sem.astype(np.int64) for lay in layouts])
    leaf_off = np.cumsum([0] + [lay.leaf_dist.shape[0] for lay in layouts])
    ukeys, leaf_of = np.unique(np.stack([bits, sems], axis=1), axis=0, return_inverse=True)
    leaf_of = leaf_of.reshape(-1)
    leaf_dist = np.ascontiguousarray(ukeys[:, 0]).view(np.float64)
    leaf_sem = ukeys[:, 1].astype(layouts[0].leaf_sem.dtype)
    # inner nodes: every layout's rows, with their world's offsets, by height
    rows = np.concatenate([lay.child.reshape(-1, 8).astype(np.int64) for lay in layouts])
    counts = [lay.child.shape[0] // 8 for lay in layouts]
    inner_off = np.cumsum([0] + counts)
    row_world = np.repeat(np.arange(L), counts)
    inner = rows >= 0
    rows_g = np.where(inner, rows + inner_off[row_world][:, None], -1)  # inner children as global row numbers
    mapped_leaf = np.full(rows.shape, -1, np.int64)  # leaf children as pooled leaf codes
    at_row, at_col = np.nonzero(rows <= -2)
    mapped_leaf[at_row, at_col] = -leaf_of[-rows[at_row, at_col] - 2 + leaf_off[row_world[at_row]]] - 2
    # heights, from the leaves up: rows with no inner child are height 0 (most rows), so only the rows
    # above them are worked out again, at most the trees' depth times
    height = np.zeros(rows.shape[0], np.int64)
    upper = np.nonzero(inner.any(axis=1))[0]
    up_inner, up_g = inner[upper], np.where(inner[upper], rows_g[upper], 0)
    for _ in range(rows.shape[0] + 1):
        h = np.where(up_inner, height[up_g] + 1, 0).max(axis=1)
        if np.array_equal(h, height[upper]):
            break
        height[upper] = h
    pool_of = np.full(rows.shape[0], -1, np.int64)
    pooled = []
    base = 0
    for level in range(int(height.max()) + 1 if rows.shape[0] else 0):
        sel = np.nonzero(height == level)[0]
        if sel.size == 0:
            continue
        r = np.where(inner[sel], pool_of[np.where(inner[sel], rows_g[sel], 0)], mapped_leaf[sel])
        urows, inv = equal_rows(r)
        pool_of[sel] = base + inv
        pooled.append(urows)
        base += urows.shape[0]
    # number the pool in first-seen order (world by world, each in its breadth-first order): a world's
    # nodes stay near each other, as in its own layout, instead of sorted by height across all worlds
    first_row = np.full(base, rows.shape[0], np.int64)
    np.minimum.at(first_row, pool_of, np.arange(rows.shape[0]))
    renumber = np.empty(base, np.int64)
    renumber[np.argsort(first_row, kind="stable")] = np.arange(base)
    pool_rows = np.concatenate(pooled) if pooled else np.zeros((0, 8), np.int64)
    pool_rows = pool_rows[np.argsort(renumber, kind="stable")]
    pool_rows = np.where(pool_rows >= 0, renumber[np.where(pool_rows >= 0, pool_rows, 0)], pool_rows)
    pool_of = renumber[pool_of]
    child = pool_rows.astype(layouts[0].child.dtype).reshape(-1)
    # each layout's top table in pool codes
    top_codes = []
    for k, lay in enumerate(layouts):
        t = lay.top_code.astype(np.int64)
        g = np.where(t >= 0, pool_of[np.where(t >= 0, t + inner_off[k], 0)], -1)
        g = np.where(t <= -2, -leaf_of[np.where(t <= -2, -t - 2 + leaf_off[k], 0)] - 2, g)
        top_codes.append(g.astype(lay.top_code.dtype))
    # who holds each pooled node first
    first_inner = np.full(base, L, np.int64)
    np.minimum.at(first_inner, pool_of, row_world)
    first_leaf = np.full(leaf_dist.shape[0], L, np.int64)
    np.minimum.at(first_leaf, leaf_of, np.repeat(np.arange(L), np.diff(leaf_off)))
    row_bytes = 8 * child.itemsize
    leaf_bytes = leaf_dist.itemsize + leaf_sem.itemsize
    added = [
        int(np.count_nonzero(first_inner == k) * row_bytes + np.count_nonzero(first_leaf == k) * leaf_bytes)
        for k in range(L)
    ]
    return child, leaf_dist, leaf_sem, top_codes, added


def map_packed(worlds, cache_dir) -> PackedWorlds:
    """``worlds``' packed arrays mapped read-only from their layout file in ``cache_dir``
    (``navi_nb/world/layout_cache.py``), written first when missing or not to be trusted. Where the
    folder cannot be written, the arrays are decoded into this process's memory instead
    (``PackedWorlds.mapped`` None, ``map_note`` says why)."""
    from navi_nb.world import layout_cache

    path, key = layout_file(worlds, cache_dir)
    arrays, why = layout_cache.map_layout(path, key)
    note = None
    if arrays is None:
        note = f"layout file {path}: {why}; decoded and written"
        decoded = decode_packed(worlds)
        try:
            layout_cache.write_layout(path, key, decoded, replace=why != "missing")
        except OSError as exc:
            packed = PackedWorlds(worlds, decoded)
            packed.map_note = f"layout file {path}: cannot write it ({exc.strerror or exc}); decoded in memory"
            return packed
        arrays, why2 = layout_cache.map_layout(path, key)
        if arrays is None:  # another process replaced it with a bad file in between: use ours
            packed = PackedWorlds(worlds, decoded)
            packed.map_note = f"layout file {path}: {why2} right after writing it; decoded in memory"
            return packed
    packed = PackedWorlds(worlds, arrays)
    packed.mapped = path
    packed.map_note = note
    return packed


def layout_file(worlds, cache_dir):
    """``(path, key)``: where in ``cache_dir`` the layout file of ``worlds`` is, and the key it holds."""
    from navi_nb.world import layout_cache

    key = layout_cache.layout_key(worlds, [_world_key(w) for w in worlds], layout_depths(worlds))
    return Path(cache_dir) / f"{key}.layout", key


def _world_key(world):
    """Worlds with equal keys hold the same decoded layout."""
    nodes = np.ascontiguousarray(world.nodes)
    digest = hashlib.blake2b(nodes.view(np.uint8), digest_size=16).hexdigest()
    return (int(world.resolution), float(np.float32(world.voxel_size)), digest)


class WorldSet:
    """Several loaded worlds, packed once for the kernels.

    ``WorldSet(worlds, names=None, items=None)``: worlds, a non-empty list of
    :class:`~navi_nb.world.gmdag.World`; names, one string per world
    (default: the scene spec label "house:7" from ``items``, else the file's
    name, else "world<k>"); items, the ``scene_spec.WorldItem`` per world or
    None. ``WorldSet.of(world)`` is the set of one.
    """

    def __init__(self, worlds, names=None, items=None):
        worlds = list(worlds) if isinstance(worlds, (list, tuple)) else worlds
        if not isinstance(worlds, list) or not worlds:
            raise WorldSetError("WorldSet: worlds must be a non-empty list of World")
        for k, w in enumerate(worlds):
            if not isinstance(w, gmdag.World):
                raise WorldSetError(f"WorldSet: worlds[{k}] is a {type(w).__name__}, not a World")
        W = len(worlds)
        if items is None:
            items = [None] * W
        items = list(items)
        if len(items) != W:
            raise WorldSetError(f"WorldSet: {len(items)} items for {W} worlds")
        if names is None:
            names = [_default_name(w, it, k) for k, (w, it) in enumerate(zip(worlds, items))]
        names = list(names)
        if len(names) != W or not all(isinstance(n, str) for n in names):
            raise WorldSetError(f"WorldSet: names must be {W} strings")
        for w in worlds:
            if not w.deep_checked:
                gmdag.validate_world(w)
        self.worlds = worlds
        self.names = names
        self.items = items
        self.families = [_family(w, it) for w, it in zip(worlds, items)]
        self._packed = None

    @classmethod
    def of(cls, world) -> WorldSet:
        """The set of one world (a WorldSet is returned as it is). Cached on the World, so
        every user of one world (tracer, environment) shares one packed copy."""
        if isinstance(world, WorldSet):
            return world
        cached = getattr(world, "_navi_set_of_one", None)
        offset = sample_offset(world)  # a changed sample convention makes a new set
        if cached is not None and cached[0] is world.nodes and cached[1] == offset:
            return cached[2]
        ws = cls([world])
        world._navi_set_of_one = (world.nodes, offset, ws)
        return ws

    def __len__(self) -> int:
        return len(self.worlds)

    def __repr__(self):
        shown = ", ".join(self.names[:4]) + (", ..." if len(self) > 4 else "")
        return f"WorldSet({len(self)} worlds: {shown})"

    @property
    def packed(self) -> PackedWorlds:
        """The packed arrays (built on first use, then shared)."""
        if self._packed is None:
            self._packed = PackedWorlds(self.worlds)
        return self._packed

    def map_layouts(self, cache_dir=None) -> PackedWorlds:
        """Use the packed arrays mapped read-only from the set's layout file (:func:`map_packed`; default
        folder ``layout_cache.default_layout_dir()``), so processes on one host share their pages."""
        if cache_dir is None:
            from navi_nb.world.layout_cache import default_layout_dir

            cache_dir = default_layout_dir()
        self._packed = map_packed(self.worlds, cache_dir)
        return self._packed

    def nbytes_per_world(self) -> np.ndarray:
        """(W,) int64: bytes of packed data each world adds: its dense top table and the pooled
        leaves and inner nodes no earlier world holds (0 for a world whose data an earlier one
        already holds). Their sum plus the per-world tables (``constant_nbytes``) is the set's
        whole packed size."""
        return np.asarray(self.packed.added, np.int64).copy()

    def constant_nbytes(self) -> int:
        """Bytes of the per-world tables (the part not owned by any one world)."""
        p = self.packed
        return int(p.iparams.nbytes + p.fparams.nbytes)


def _default_name(world, item, k):
    if item is not None:
        return item.label if item.builtin else Path(str(item.path)).name
    if world.source and world.source != "<memory>" and not world.source.startswith("<"):
        return Path(world.source).name
    return f"world{k}"


def _family(world, item):
    if item is not None:
        return item.family if item.builtin else "file"
    return "file"


def layout_views(child, leaf_dist, leaf_sem, top_code, top_level, ip, w):
    """World ``w``'s decoded layout as views into the packed arrays (``ip``: the
    ``iparams`` table): ``(child, leaf_dist, leaf_sem, top_code (n, n, n), top_level
    (n, n, n))``, the arrays a single world's ``Layout`` holds. Plain Python,
    compiled for the CPU here and for CUDA by the tracer."""
    c0 = ip[w, 0]
    l0 = ip[w, 2]
    ln = ip[w, 3]
    t0 = ip[w, 4]
    n = ip[w, 5]
    t1 = t0 + n * n * n
    return (
        child[c0 : c0 + ip[w, 1]],
        leaf_dist[l0 : l0 + ln],
        leaf_sem[l0 : l0 + ln],
        top_code[t0:t1].reshape((n, n, n)),
        top_level[t0:t1].reshape((n, n, n)),
    )


nb_layout_views = njit(inline="always", cache=True)(layout_views)


@njit(inline="always", cache=True)
def world_field(packed, w):
    """World ``w`` of the packed arrays as ``query.world_arrays`` returns one world:
    ``(child, leaf_dist, leaf_sem, top_code, top_level, res, shift, origin (3,), voxel)``
    (views, no copies)."""
    child, leaf_dist, leaf_sem, top_code, top_level, ip, fp = packed
    c, ld, ls, tc, tl = nb_layout_views(child, leaf_dist, leaf_sem, top_code, top_level, ip, w)
    res = fp[w, FP_RES]
    return c, ld, ls, tc, tl, res, nb_table_shift(tc, res), fp[w, 0:3], fp[w, FP_VOXEL]
