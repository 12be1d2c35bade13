"""The `.gmdag` v1 file: the only module that knows its bits.

Layout (docs/FORMAT.md): a 32-byte little-endian
header ``<4sIIffffI`` (magic, version, resolution, bmin xyz, voxel_size,
node_count) followed by ``node_count`` little-endian uint64 words.

Word kinds
  inner  bit63=0 | mask<<55 (8 bits) | 0 (bits 54..32) | child_base (32 bits)
  slot   any word whose low 32 bits index a child node (addressed via parent)
  leaf   bit63=1 | 0 (bits 62..32) | semantic<<16 (u16) | float16 distance

Everything that shifts or masks these bits lives here: the Python encoders
and decoders, and the tiny scalar decoders (``nb_*``, compiled for the CPU
with ``njit(inline="always")``) that the layout decoder
(``navi_nb/world/layout.py``) uses. No kernel reads node words while tracing
or querying: they all read the decoded layout, on the CPU and on CUDA alike
(the CUDA tracer copies the layout to the device, not the words).
"""

from __future__ import annotations

import hashlib
import json
import math
import mmap as _mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numba import njit

from navi_nb.errors import GmdagError
from navi_nb.files import open_regular, write_atomic
from navi_nb.world.sidecar import (
    FLOAT32_MAX,
    SAMPLE_CONVENTIONS,
    SAMPLE_POSITION,
    canonical_sidecar,
    file_sample_convention,
    read_sidecar,
    sidecar_path,
)

MAGIC = b"GDAG"
VERSION = 1
HEADER = struct.Struct("<4sIIffffI")
HEADER_SIZE = HEADER.size  # 32
LEAF_BIT = np.uint64(1 << 63)
MAX_DEPTH = 24  # deeper trees are rejected: float32 cannot place such cubes
INDEX_MASK = 0xFFFFFFFF

# float16 bit pattern -> float32 value, for every one of the 65,536 patterns.
# Kernels index this table instead of decoding half floats by hand.
HALF_TO_FLOAT = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


# --------------------------------------------------------------------------
# scalar decoders: plain functions, compiled by each target
# --------------------------------------------------------------------------


def word_is_leaf(word):
    return (word >> np.uint64(63)) != np.uint64(0)


def word_mask(word):
    return np.int64((word >> np.uint64(55)) & np.uint64(0xFF))


def word_index(word):
    """Low 32 bits: child_base of an inner node, or the node index of a slot."""
    return np.int64(word & np.uint64(0xFFFFFFFF))


def leaf_semantic(word):
    return np.int64((word >> np.uint64(16)) & np.uint64(0xFFFF))


def leaf_half_bits(word):
    return np.int64(word & np.uint64(0xFFFF))


def popcount8(x):
    """Bits set in an 8-bit value (no intrinsic that works on both targets)."""
    x = x - ((x >> 1) & 0x55)
    x = (x & 0x33) + ((x >> 2) & 0x33)
    return (x + (x >> 4)) & 0x0F


def child_slot(word, octant):
    """Index of the slot for `octant` of an inner node, or -1 if pruned."""
    mask = word_mask(word)
    if (mask >> octant) & 1 == 0:
        return np.int64(-1)
    return word_index(word) + popcount8(mask & ((1 << octant) - 1))


def leaf_distance(word, half_table):
    """Leaf distance in metres; the +inf-for-zero quirk of one writer is read as 0."""
    d = half_table[leaf_half_bits(word)]
    if d == np.inf and leaf_semantic(word) != 0:
        return np.float32(0.0)
    return d


# CPU builds of the decoders, inlined into the kernels that call them.
nb_word_is_leaf = njit(inline="always", cache=True)(word_is_leaf)
nb_word_mask = njit(inline="always", cache=True)(word_mask)
nb_word_index = njit(inline="always", cache=True)(word_index)
nb_leaf_semantic = njit(inline="always", cache=True)(leaf_semantic)
nb_leaf_half_bits = njit(inline="always", cache=True)(leaf_half_bits)
nb_popcount8 = njit(inline="always", cache=True)(popcount8)


@njit(inline="always", cache=True)
def nb_child_slot(word, octant):
    mask = nb_word_mask(word)
    if (mask >> octant) & 1 == 0:
        return np.int64(-1)
    return nb_word_index(word) + nb_popcount8(mask & ((1 << octant) - 1))


@njit(inline="always", cache=True)
def nb_leaf_distance(word, half_table):
    d = half_table[nb_leaf_half_bits(word)]
    if d == np.inf and nb_leaf_semantic(word) != 0:
        return np.float32(0.0)
    return d


ROUND_NEAREST = 0  # nearest half float, ties to even (as NumPy's astype)
ROUND_TOWARD_ZERO = 1  # never grows the magnitude: a bound stays a bound
HALF_MAX_BITS = 0x7BFF  # 65504, the largest finite half


@njit(inline="always", cache=True)
def nb_half_bits(x, mode):
    """float16 bit pattern of a finite float64 `x` (magnitudes clamp at 65504).

    Exact arithmetic on the binary expansion: |x| = (1 + f) * 2**e, the 10
    mantissa bits are f * 1024 (exact in float64), rounded to nearest even
    (ROUND_NEAREST, as NumPy's cast) or down (ROUND_TOWARD_ZERO). Below
    2**-14 the halves are subnormal: |x| * 2**24 rounded the same way.
    """
    a = abs(x)
    if a >= 65504.0:
        bits = HALF_MAX_BITS
    else:
        m, e = math.frexp(a)  # a = m * 2**e, 0.5 <= m < 1 (m = 0 for a = 0)
        e -= 1  # a = (2 m) * 2**e, 1 <= 2 m < 2
        if a == 0.0 or e < -14:
            mf = a * 16777216.0  # subnormal units of 2**-24
            base = 0
        else:
            mf = (2.0 * m - 1.0) * 1024.0
            base = (e + 15) << 10
        r = math.floor(mf)
        if mode == ROUND_NEAREST:
            rem = mf - r
            if rem > 0.5 or (rem == 0.5 and (int(r) & 1) == 1):
                r += 1.0
        bits = base + int(r)  # a carry out of the mantissa bumps the exponent: still right
        if bits > HALF_MAX_BITS:
            bits = HALF_MAX_BITS
    if x < 0.0 and bits != 0:
        bits |= 0x8000
    return bits


@njit(inline="always", cache=True)
def nb_encode_leaf(semantic, distance, mode):
    """Leaf word from a semantic id (0..65535) and a distance in metres."""
    return (
        (np.uint64(1) << np.uint64(63))
        | (np.uint64(semantic & 0xFFFF) << np.uint64(16))
        | np.uint64(nb_half_bits(distance, mode))
    )


@njit(inline="always", cache=True)
def nb_encode_inner(mask, child_base):
    return (np.uint64(mask & 0xFF) << np.uint64(55)) | np.uint64(child_base & 0xFFFFFFFF)


# --------------------------------------------------------------------------
# encoders (vectorised, Python side)
# --------------------------------------------------------------------------


def encode_inner(mask, child_base):
    """Inner-node words from 8-bit masks and child_base indices (arrays ok)."""
    mask = np.asarray(mask, dtype=np.uint64)
    base = np.asarray(child_base, dtype=np.uint64)
    if np.any(mask == 0) or np.any(mask > 0xFF) or np.any(base > INDEX_MASK):
        raise ValueError("inner node needs a mask in 1..255 and a 32-bit child_base")
    return (mask << np.uint64(55)) | base


def encode_slot(child_index):
    child_index = np.asarray(child_index, dtype=np.uint64)
    if np.any(child_index > INDEX_MASK):
        raise ValueError("child index does not fit in 32 bits")
    return child_index


def round_half(distance, mode="nearest"):
    """float16 values of `distance`; mode 'down' / 'toward_zero' keep bounds safe.

    'down' never rounds a distance up (a lower bound stays a lower bound);
    'toward_zero' shrinks the magnitude of both signs.
    """
    d = np.array(distance, dtype=np.float64, ndmin=1)
    if not np.all(np.isfinite(d)):
        raise ValueError("leaf distances must be finite")
    d = np.clip(d, -65504.0, 65504.0)
    h = d.astype(np.float16)
    if mode == "nearest":
        return h
    back = h.astype(np.float64)
    if mode == "down":
        too_big = back > d
        h[too_big] = np.nextafter(h[too_big], np.float16(-np.inf))
    elif mode == "toward_zero":
        too_big = np.abs(back) > np.abs(d)
        h[too_big] = np.nextafter(h[too_big], np.float16(0.0))
    else:
        raise ValueError(f"unknown rounding mode {mode!r}")
    return h


def encode_leaf(semantic, distance, rounding="nearest"):
    """Leaf words from semantic ids (u16) and distances in metres (arrays ok)."""
    sem = np.asarray(semantic, dtype=np.int64)
    if np.any(sem < 0) or np.any(sem > 0xFFFF):
        raise ValueError("semantic id must fit in 16 bits")
    half = round_half(distance, rounding).view(np.uint16).astype(np.uint64)
    if np.ndim(distance) == 0 and np.ndim(semantic) == 0:
        half = half[0]
    return LEAF_BIT | (sem.astype(np.uint64) << np.uint64(16)) | half


def decode_leaf(words):
    """(distance float32, semantic uint16) of leaf words, quirk applied."""
    words = np.asarray(words, dtype=np.uint64)
    sem = ((words >> np.uint64(16)) & np.uint64(0xFFFF)).astype(np.uint16)
    dist = HALF_TO_FLOAT[(words & np.uint64(0xFFFF)).astype(np.int64)]
    dist = np.where((dist == np.inf) & (sem != 0), np.float32(0.0), dist)
    return dist.astype(np.float32), sem


def is_leaf(words):
    return (np.asarray(words, dtype=np.uint64) >> np.uint64(63)) != 0


# --------------------------------------------------------------------------
# the world object
# --------------------------------------------------------------------------


@dataclass
class World:
    """A loaded `.gmdag`: header fields, bounds and the uint64 node array.

    ``nodes`` may be a read-only memory map. ``sidecar`` holds the optional
    JSON next to the file (scene name, class names, spawn points, settings).
    """

    resolution: int
    bmin: np.ndarray  # (3,) float32, metres
    voxel_size: float  # metres, float32 in the file
    nodes: np.ndarray  # (node_count,) uint64
    version: int = VERSION
    sidecar: dict = field(default_factory=dict)
    source: str = "<memory>"
    deep_checked: bool = False

    @property
    def node_count(self) -> int:
        return int(self.nodes.shape[0])

    @property
    def extent(self) -> float:
        """Side of the world cube in metres."""
        return float(np.float32(self.resolution) * np.float32(self.voxel_size))

    @property
    def bmax(self) -> np.ndarray:
        return (self.bmin.astype(np.float32) + np.float32(self.extent)).astype(np.float32)

    @property
    def nbytes(self) -> int:
        return HEADER_SIZE + 8 * self.node_count

    @property
    def class_names(self) -> list:
        return list(self.sidecar.get("class_names", ["none", "surface"]))

    @property
    def spawn_points(self) -> np.ndarray:
        pts = self.sidecar.get("spawn_points")
        if not pts:
            return np.zeros((0, 3), dtype=np.float32)
        return np.asarray(pts, dtype=np.float32).reshape(-1, 3)

    def header_bytes(self) -> bytes:
        b = np.asarray(self.bmin, dtype=np.float32)
        return HEADER.pack(
            MAGIC,
            self.version,
            self.resolution,
            float(b[0]),
            float(b[1]),
            float(b[2]),
            float(np.float32(self.voxel_size)),
            self.node_count,
        )

    def to_bytes(self) -> bytes:
        return self.header_bytes() + np.ascontiguousarray(self.nodes, dtype="<u8").tobytes()

    def __repr__(self):
        return (
            f"World({self.source!r}, resolution={self.resolution}, voxel_size={self.voxel_size:g}, "
            f"bmin={tuple(float(x) for x in self.bmin)}, nodes={self.node_count})"
        )


def world_digest(world) -> str:
    """A short content hash of everything a run reads of a world, 16 hex digits: SHA-256 of its exact file
    bytes (header and nodes) and of its sidecar as loaded (spawn points, classes, bounds of interest, the
    sample convention; :func:`canonical_sidecar`, without the keys of :data:`DIGEST_SKIPS`)."""
    h = hashlib.sha256(world.header_bytes())
    h.update(np.ascontiguousarray(world.nodes, dtype="<u8").view(np.uint8))  # the file's bytes, not copied
    h.update(b"\0sidecar\0")
    h.update(canonical_sidecar(world.sidecar))
    return h.hexdigest()[:16]


def bytes_digest(world) -> str:
    """The content hash of a world's file bytes alone (16 hex digits of SHA-256), what runs recorded before
    :func:`world_digest` covered the sidecar: such a run's worlds are still recognised by it."""
    return hashlib.sha256(world.to_bytes()).hexdigest()[:16]


def check_header_fields(fields, source):
    """Header rules on unpacked ``HEADER`` fields; raise GmdagError naming `source`."""
    magic, version, resolution, bx, by, bz, voxel, count = fields
    if magic != MAGIC:
        raise GmdagError(source, f"wrong magic {magic!r} (expected {MAGIC!r})")
    if version != VERSION:
        raise GmdagError(source, f"version {version} is not supported (expected 1)")
    if resolution == 0:
        raise GmdagError(source, "resolution is 0")
    if not all(np.isfinite([bx, by, bz])):
        raise GmdagError(source, f"non-finite bounds minimum ({bx}, {by}, {bz})")
    if not np.isfinite(voxel) or voxel <= 0:
        raise GmdagError(source, f"voxel_size {voxel} is not finite and positive")
    if count == 0:
        raise GmdagError(source, "node_count is 0")
    # float64 products of float32 values are exact enough to tell an overflow
    # without NumPy printing a RuntimeWarning before the error
    extent = float(np.float32(resolution)) * float(np.float32(voxel))
    if extent > FLOAT32_MAX:
        raise GmdagError(source, "resolution * voxel_size overflows float32")
    with np.errstate(over="ignore"):  # the same float32 sum as World.bmax
        bmax = np.array([bx, by, bz], dtype=np.float32) + np.float32(extent)
    if not np.all(np.isfinite(bmax)):
        raise GmdagError(source, f"bounds maximum overflows float32 (bmin ({bx}, {by}, {bz}) + extent {extent:g})")


def from_bytes(data, source="<bytes>", validate=True) -> World:
    """Parse a whole file held in memory (bytes, bytearray, memoryview or mmap)."""
    buf = memoryview(data)
    if buf.nbytes < HEADER_SIZE:
        raise GmdagError(source, f"file is {buf.nbytes} bytes, shorter than the 32-byte header")
    fields = HEADER.unpack_from(buf, 0)
    check_header_fields(fields, source)
    count = fields[7]
    need = HEADER_SIZE + 8 * count
    if buf.nbytes < need:
        raise GmdagError(
            source, f"payload holds {(buf.nbytes - HEADER_SIZE) // 8} words, header says node_count {count}"
        )
    if buf.nbytes > need:
        raise GmdagError(source, f"{buf.nbytes - need} trailing bytes after node_count words")
    nodes = np.frombuffer(buf, dtype="<u8", count=count, offset=HEADER_SIZE)
    if nodes.dtype != np.uint64:  # big-endian host: make a native copy
        nodes = nodes.astype(np.uint64)
    world = World(
        resolution=int(fields[2]),
        bmin=np.array(fields[3:6], dtype=np.float32),
        voxel_size=float(fields[6]),
        nodes=nodes,
        version=int(fields[1]),
        source=str(source),
    )
    if validate:
        validate_world(world)
    return world


def load_world(path, *, mmap=False, validate=True, sidecar=True, side=None) -> World:
    """Load a `.gmdag` file.

    validate: True runs the deep walk (the default: a file from a user is
    untrusted); False checks the header and sizes only.
    mmap: map the file read-only instead of reading it (large worlds).
    sidecar: also read ``PATH.json`` when it exists.
    side: the sidecar's content when the caller has read it already (checked
    by :func:`check_sidecar`; the world cache reads its bytes to check them).
    """
    path = Path(path)
    try:
        with open_regular(path, "world file") as fh:
            if mmap:
                size = os.fstat(fh.fileno()).st_size
                if size == 0:
                    raise GmdagError(path, "file is empty")
                data = _mmap.mmap(fh.fileno(), 0, access=_mmap.ACCESS_READ)
            else:
                data = fh.read()
    except OSError as exc:
        raise GmdagError(path, f"cannot read file ({exc.strerror or exc})") from exc
    world = from_bytes(data, source=path, validate=validate)
    side = read_sidecar(path) if side is None else side
    if sidecar:
        world.sidecar = side
    world.sidecar["sample"] = file_sample_convention(side, sidecar_path(path))
    if world.sidecar["sample"] == "corner":
        # corner samples put the field's origin half a voxel below bmin: it must still be a float32
        origin = np.asarray(world.bmin, np.float64) - 0.5 * float(world.voxel_size)
        if not np.all(np.abs(origin) <= FLOAT32_MAX):
            raise GmdagError(path, "a corner-sampled world whose field origin (bmin - voxel/2) does not fit float32")
    return world


def with_sample_convention(world: World, sample: str) -> World:
    """The same field written in convention ``sample``: the same node words with ``bmin``
    moved so that every leaf's sample stays where it is (a centre-sampled world written
    corner-sampled has ``bmin + voxel / 2``). ``world`` itself when it is in that convention
    already."""
    if sample not in SAMPLE_CONVENTIONS:
        raise GmdagError(
            world.source, f"sample convention must be one of {', '.join(SAMPLE_CONVENTIONS)}, got {sample!r}"
        )
    side = world.sidecar if isinstance(world.sidecar, dict) else {}
    have = side.get("sample", "centre")
    if have == sample:
        return world
    shift = (SAMPLE_POSITION[have] - SAMPLE_POSITION[sample]) * float(np.float32(world.voxel_size))
    bmin = (np.asarray(world.bmin, np.float32).astype(np.float64) + shift).astype(np.float32)
    out = World(
        resolution=world.resolution,
        bmin=bmin,
        voxel_size=world.voxel_size,
        nodes=world.nodes,
        version=world.version,
        source=world.source,
        deep_checked=world.deep_checked,
    )
    out.sidecar = dict(side)
    out.sidecar["sample"] = sample
    return out


def save_world(world: World, path, sidecar=True, sample=None) -> Path:
    """Write `world` as exact v1 bytes and its sidecar JSON (which always names the sample convention).

    ``sample`` (``"corner"`` or ``"centre"``; None: the world's own) writes the file in that
    convention (:func:`with_sample_convention`: the same node words, ``bmin`` moved by half a
    voxel). Without a sidecar, readers take a file for corner-sampled.
    """
    if sample is not None:
        world = with_sample_convention(world, sample)
    data = world.to_bytes()
    if sidecar:
        # navi_nb's files always record their sample convention (in-memory worlds without the key are centre-sampled)
        side = dict(world.sidecar)
        side.setdefault("sample", "centre")
        # both files replaced whole (an interrupted save leaves the old file or the new, never a torn one),
        # the sidecar first: the world file last, as the world cache does
        write_atomic(sidecar_path(path), json.dumps(side, indent=1, sort_keys=True).encode())
    return write_atomic(path, data)


# --------------------------------------------------------------------------
# deep validation
# --------------------------------------------------------------------------

_DEEP_RULES = {
    1: "root index out of range",
    2: "inner node {node} has an empty child mask",
    3: "inner node {node} has reserved bits 54..32 set",
    4: "inner node {node}: child slots run past the end of the node array",
    5: "inner node {node}: child index {extra} out of range",
    6: "leaf {node} has reserved bits 62..32 set",
    7: "leaf {node} holds a NaN distance",
    10: "leaf {node} holds a -inf distance (only +inf, read as far or as 0 when flagged, is allowed)",
    8: "cycle: node {node} is its own ancestor",
    9: "tree deeper than " + str(MAX_DEPTH) + " levels below node {node}",
}


# The skeleton both depth-first walks below share (the deep check and the census): an explicit stack of
# (node, next octant to offer) pairs from word 0, one level per depth. A walk reads the node on top, asks
# ``_dfs_next_child`` for that node's next present child (the level's octant cursor moves past it), decides
# whether to enter it (``_dfs_push``) and pops the node when it offers no more children.


@njit(inline="always", cache=True)
def _dfs_stack(max_depth):
    """The stack of a walk from word 0, room for ``max_depth + 2`` levels: (node, next octant) per level,
    the root on level 0 with its cursor at octant 0."""
    stack_node = np.empty(max_depth + 2, dtype=np.int64)
    stack_oct = np.empty(max_depth + 2, dtype=np.int64)
    stack_node[0] = 0
    stack_oct[0] = 0
    return stack_node, stack_oct


@njit(inline="always", cache=True)
def _dfs_next_child(nodes, w, stack_oct, top):
    """The node index of inner word ``w``'s next present child (octant order) from level ``top``'s cursor,
    which moves past it; -1 once all eight octants are offered. The child's slot must be in range (the deep
    check tests the node's slots before it asks)."""
    while stack_oct[top] < 8:
        k = stack_oct[top]
        stack_oct[top] = k + 1
        slot = nb_child_slot(w, k)
        if slot >= 0:
            return nb_word_index(nodes[slot])
    return np.int64(-1)


@njit(inline="always", cache=True)
def _dfs_push(stack_node, stack_oct, top, child):
    """Enter ``child``: the new top level, its cursor at octant 0."""
    top += 1
    stack_node[top] = child
    stack_oct[top] = 0
    return top


@njit(cache=True)
def _deep_walk(nodes, max_depth):
    """Iterative DFS from word 0. Returns (code, node, extra); code 0 = valid.

    state: 0 unseen, 1 on the current path, 2 finished (shared subtrees are
    visited once). Every index is range-checked before it is read.
    """
    n = nodes.shape[0]
    if n == 0:
        return 1, 0, 0
    state = np.zeros(n, dtype=np.uint8)
    stack_node, stack_oct = _dfs_stack(max_depth)
    top = 0
    state[0] = 1
    while top >= 0:
        node = stack_node[top]
        w = nodes[node]
        if nb_word_is_leaf(w):
            if (w >> np.uint64(32)) & np.uint64(0x7FFFFFFF) != np.uint64(0):
                return 6, node, 0
            h = nb_leaf_half_bits(w)
            if (h & 0x7C00) == 0x7C00 and (h & 0x03FF) != 0:
                return 7, node, 0
            if h == 0xFC00:  # -inf: no reader can use it (traces would answer NaN)
                return 10, node, 0
            state[node] = 2
            top -= 1
            continue
        if stack_oct[top] == 0:  # first visit: check the node itself
            if (w >> np.uint64(32)) & np.uint64(0x7FFFFF) != np.uint64(0):
                return 3, node, 0
            mask = nb_word_mask(w)
            if mask == 0:
                return 2, node, 0
            if nb_word_index(w) + nb_popcount8(mask) > n:
                return 4, node, 0
        pushed = False
        while True:  # one call site of the inlined helper: two made this loop ten times slower
            child = _dfs_next_child(nodes, w, stack_oct, top)
            if child < 0:
                break
            if child >= n:
                return 5, node, child
            if state[child] == 1:
                return 8, child, 0
            if state[child] == 0:
                if top + 1 > max_depth:
                    return 9, node, 0
                top = _dfs_push(stack_node, stack_oct, top, child)
                state[child] = 1
                pushed = True
                break
            # finished (2): a shared subtree, seen once
        if not pushed:
            state[node] = 2
            top -= 1
    return 0, 0, 0


def validate_world(world: World) -> World:
    """Deep check (docs/FORMAT.md, "Reading"); raises GmdagError naming the rule."""
    nodes = np.asarray(world.nodes).view()
    # always a read-only array (a loaded file's nodes are; a compiled world's are not): one compiled
    # signature of the walk, so the trainer loads the one its world-compile processes left in the cache
    nodes.flags.writeable = False
    code, node, extra = _deep_walk(nodes, MAX_DEPTH)
    if code:
        raise GmdagError(world.source, _DEEP_RULES[int(code)].format(node=int(node), extra=int(extra)))
    world.deep_checked = True
    return world


def node_census(world: World):
    """Counts of reachable inner nodes, leaves and child slots by depth.

    Returns a dict: inner, leaf, pruned (clear mask bits), slot counts per
    depth (lists), reachable unique words, and the visits a dense walk would
    make (tree size without sharing). Assumes a validated world.
    """
    inner, leaf, pruned, tree = _census(np.asarray(world.nodes), MAX_DEPTH)
    top = int(np.max(np.nonzero((inner + leaf) > 0)[0])) + 1 if np.any(inner + leaf) else 0
    return {
        "inner": inner[:top].tolist(),
        "leaf": leaf[:top].tolist(),
        "pruned": pruned[:top].tolist(),
        "tree_nodes": int(tree),
    }


@njit(cache=True)
def _census(nodes, max_depth):
    n = nodes.shape[0]
    inner = np.zeros(max_depth + 2, dtype=np.int64)
    leaf = np.zeros(max_depth + 2, dtype=np.int64)
    pruned = np.zeros(max_depth + 2, dtype=np.int64)
    # first depth at which each unique node is met (counts unique nodes per depth)
    seen_depth = np.full(n, -1, dtype=np.int64)
    # tree size without sharing: subtree sizes bottom-up via DFS post-order
    subtree = np.zeros(n, dtype=np.float64)
    done = np.zeros(n, dtype=np.uint8)
    stack_node, stack_oct = _dfs_stack(max_depth)
    top = 0
    while top >= 0:
        node = stack_node[top]
        w = nodes[node]
        if stack_oct[top] == 0 and seen_depth[node] < 0:
            seen_depth[node] = top
            if nb_word_is_leaf(w):
                leaf[top] += 1
            else:
                inner[top] += 1
                pruned[top + 1] += 8 - nb_popcount8(nb_word_mask(w))
        if nb_word_is_leaf(w) or done[node] == 1:
            if nb_word_is_leaf(w):
                subtree[node] = 1.0
                done[node] = 1
            top -= 1
            continue
        pushed = False
        while True:  # one call site of the inlined helper (see _deep_walk)
            child = _dfs_next_child(nodes, w, stack_oct, top)
            if child < 0:
                break
            if done[child] == 0:
                top = _dfs_push(stack_node, stack_oct, top, child)
                pushed = True
                break
        if not pushed:
            total = 1.0
            for k in range(8):
                slot = nb_child_slot(w, k)
                if slot >= 0:
                    total += subtree[nb_word_index(nodes[slot])]
            subtree[node] = total
            done[node] = 1
            top -= 1
    return inner, leaf, pruned, subtree[0]
