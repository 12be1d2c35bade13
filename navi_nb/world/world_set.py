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

Child codes stay local to their world (a world's ``child`` slice is its own
layout, unchanged), so a kernel reads world ``w`` through views
(:func:`world_field`): the same arrays, shapes and arithmetic as a single
world's layout, hence the same bits. Worlds with identical node arrays
(the same world listed twice, or two copies of one file) are packed once and
share their slices. After packing, each world's cached layout
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
    ``top_code``, ``top_level`` (flat), ``iparams`` (W, 6) and ``distinct`` (W,)."""
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
    ip = np.zeros((W, 6), np.int64)
    c = leaf = top = 0
    for w in range(W):
        lay = layouts[w]
        if lay is None:
            ip[w] = ip[distinct[w]]
        else:
            n = lay.top_code.shape[0]
            ip[w] = (c, lay.child.shape[0], leaf, lay.leaf_dist.shape[0], top, n)
            c += lay.child.shape[0]
            leaf += lay.leaf_dist.shape[0]
            top += n * n * n
    return {
        "child": np.concatenate([lay.child for lay in own]),
        "leaf_dist": np.concatenate([lay.leaf_dist for lay in own]),
        "leaf_sem": np.concatenate([lay.leaf_sem for lay in own]),
        "top_code": np.concatenate([lay.top_code.reshape(-1) for lay in own]),
        "top_level": np.concatenate([lay.top_level.reshape(-1) for lay in own]),
        "iparams": ip,
        "distinct": distinct,
    }


def map_packed(worlds, cache_dir) -> PackedWorlds:
    """``worlds``' packed arrays mapped read-only from their layout file in ``cache_dir``
    (``navi_nb/world/layout_cache.py``), written first when missing or not to be trusted. Where the
    folder cannot be written, the arrays are decoded into this process's memory instead
    (``PackedWorlds.mapped`` None, ``map_note`` says why)."""
    from navi_nb.world import layout_cache

    keys = [_world_key(w) for w in worlds]
    key = layout_cache.layout_key(worlds, keys, layout_depths(worlds))
    path = Path(cache_dir) / f"{key}.layout"
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
        """(W,) int64: bytes of packed data each world adds (its decoded layout; 0 for
        a world whose data an earlier one already holds). Their sum plus the per-world
        tables (``constant_nbytes``) is the set's whole packed size."""
        p = self.packed
        out = np.zeros(len(self), np.int64)
        for w in range(len(self)):
            if p.distinct[w] != w:
                continue
            _, cn, _, ln, _, n = (int(x) for x in p.iparams[w])
            out[w] = (
                cn * p.child.itemsize
                + ln * (p.leaf_dist.itemsize + p.leaf_sem.itemsize)
                + n**3 * (p.top_code.itemsize + p.top_level.itemsize)
            )
        return out

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
