"""A world's geometry fingerprint: which points of a fixed metric lattice are solid.

Two files hold the same world when their geometry agrees, whatever their resolution, header (``bmin``,
voxel size), sample convention (centre or corner), sidecar, name or place in the world cache. The
fingerprint reads only the geometry: the distance field (``query.distance``: the one field every consumer
reads, trilinear between voxel centres) at the points ``(i + SAMPLE_AT) * CELL`` metres on each axis, for
every lattice index ``i`` whose point lies in the world's cube, as two bits a sample: solid (negative) and
definite (``MARGIN`` or more from zero). The lattice is fixed in world coordinates, not in the world's
voxels, so any two worlds' samples coincide where their cubes overlap.

``CELL`` is 0.5 m and ``SAMPLE_AT`` 0.375: the built-in scenes put every face on a 0.125 m lattice and
make walls, obstacles and free gaps at least 0.75 m wide, so every wall and every gap holds a sample, and
no sample lies on a face (each is 0.0625 m or more from the nearest one).

Two fingerprints match (:func:`difference` <= ``TOLERANCE``) when, where their lattice boxes overlap (when
that holds a quarter of each box or more: a world's cube may reach further into empty space than another's,
as a mesh's margin does; a small fragment of a world is not compared), the samples whose solidity differs
and that are definite in either world are at most 0.25 % of the smaller phase there: of the samples solid in
either world, or of those free in either, whichever is fewer. A closed world (a house: solid around its
rooms) is measured against its free space, an open one (an object in empty space) against its solid. A coarse
field rounds convex edges off, so a sample near a surface may change sides with the resolution (up to 3.2 %
of the free space between 32 and 128, for mazes with many wall ends); no definite one did: house:0-5,
maze:0-4, pillars:1-3, clutter:1-4 and box at 32, 64 and 256 differ from their worlds at 128 by 0, and the
box scene written as a mesh with its cube and compiled at 64 or 128 from its world at 32 by 0. Two different
worlds differ by 0.97 % (held-out maze:1000015 and maze:372, the closest of the 100 held-out mazes against
maze:0-399 but for 7 byte-identical pairs) to 80 %; the held-out houses from house:0-299 by 10.5 % or more.
A leaf word's sign flipped moves the samples of every voxel sharing it: of 40 random leaf words of house:3
at 128, 36 moved 0.25 % or less, 4 shared or large ones 5.9 % to 61 % (another world, as far as geometry
goes).

Computing one costs a point query per sample (32,768 for a built-in's 16 m cube), 5 to 10 ms a world;
:func:`stored_records` keeps a set's in one file under ``fingerprints/`` beside the world cache, named by
its worlds' content digests (``gmdag.world_digest``), so a set loaded again reads them back instead.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
from numba import njit

from navi_nb.errors import NaviError
from navi_nb.files import read_regular, write_atomic

FINGERPRINT_VERSION = 2  # 2: the definite bits
"""Bump when the lattice, the sampling or the encoding changes: records of another version are not compared."""
CELL = 0.5  # metres between lattice points
SAMPLE_AT = 0.375  # lattice point i of an axis is at (i + SAMPLE_AT) * CELL metres
MARGIN = 0.15  # metres: a sample this far from a surface or more is definite (it kept its side at 32 to 256)
TOLERANCE = 0.0025  # the largest differing fraction of the smaller phase at which two worlds are one
MIN_OVERLAP = 0.25  # two boxes are compared where they overlap, when that holds at least this much of each
MAX_SAMPLES = 1 << 21  # a cube holding more lattice points (a 64 m side: a second or more) has no fingerprint
MAX_RECORD_CHARS = 1 << 22  # a record's encoded bits longer than this are damaged
FINGERPRINT_DIR = "fingerprints"
SCENE_PAD = 1.0  # metres around a scene's region of interest that its fingerprint (scene_fingerprint) covers


class FingerprintError(NaviError, ValueError):
    """A fingerprint record that is damaged or of another version."""


def _words(bits: np.ndarray) -> np.ndarray:
    """A bool array packed 64 samples a uint64 word (C order, zero-padded), for counting bits."""
    packed = np.packbits(bits.reshape(-1))
    return np.concatenate([packed, np.zeros(-len(packed) % 8, np.uint8)]).view(np.uint64)


def _encode_bits(bits: np.ndarray) -> str:
    return base64.b64encode(zlib.compress(np.packbits(bits.reshape(-1)).tobytes(), 9)).decode("ascii")


def _decode_bits(text, shape, where, name) -> np.ndarray:
    if not isinstance(text, str) or len(text) > MAX_RECORD_CHARS:
        raise FingerprintError(f"{where}: its {name} bits are missing or longer than {MAX_RECORD_CHARS} characters")
    n = int(np.prod(shape))
    try:
        # at most the bytes the box needs (and one more, to see a longer stream): never a zlib bomb
        data = base64.b64decode(text.encode("ascii"), validate=True)
        stream = zlib.decompressobj()
        packed = stream.decompress(data, (n + 7) // 8 + 1)
    except (ValueError, zlib.error) as exc:
        raise FingerprintError(f"{where}: its {name} bits do not decode ({exc})") from None
    if not stream.eof or stream.unconsumed_tail or stream.unused_data:  # cut short (checksum unread) or longer
        raise FingerprintError(f"{where}: its {name} bits are not one whole zlib stream")
    if len(packed) != (n + 7) // 8:
        raise FingerprintError(f"{where}: {len(packed)} bytes of {name} bits for a box of {n} points")
    return np.unpackbits(np.frombuffer(packed, np.uint8), count=n).astype(bool).reshape(shape)


@dataclass(frozen=True, eq=False)
class Fingerprint:
    """A world's samples at lattice points ``lo + (i, j, k)``: ``solid`` (nx, ny, nz) bool, the field's sign,
    and ``definite``, where the field is ``MARGIN`` or more from zero (a sample nearer a surface may fall
    on either side at another resolution)."""

    lo: tuple
    solid: np.ndarray
    definite: np.ndarray

    @property
    def shape(self) -> tuple:
        return tuple(int(n) for n in self.solid.shape)

    @cached_property
    def solid_words(self) -> np.ndarray:
        return _words(self.solid)

    @cached_property
    def definite_words(self) -> np.ndarray:
        return _words(self.definite)

    def to_record(self) -> dict:
        """The JSON form ``worlds.json`` keeps: version, lattice, box and both bit arrays (packed, zlib, base64)."""
        return {
            "version": FINGERPRINT_VERSION,
            "cell": CELL,
            "sample_at": SAMPLE_AT,
            "margin": MARGIN,
            "lo": list(self.lo),
            "shape": list(self.shape),
            "solid": _encode_bits(self.solid),
            "definite": _encode_bits(self.definite),
        }


def from_record(rec, where="fingerprint") -> Fingerprint:
    """The Fingerprint a :meth:`Fingerprint.to_record` dict holds; FingerprintError naming `where` otherwise."""
    if not isinstance(rec, dict):
        raise FingerprintError(f"{where}: not an object")
    lattice = (rec.get("version"), rec.get("cell"), rec.get("sample_at"), rec.get("margin"))
    if lattice != (FINGERPRINT_VERSION, CELL, SAMPLE_AT, MARGIN):
        raise FingerprintError(
            f"{where}: version {rec.get('version')!r}, cell {rec.get('cell')!r} m; this code compares version "
            f"{FINGERPRINT_VERSION}, cell {CELL} m"
        )
    lo, shape = rec.get("lo"), rec.get("shape")
    ints = all(
        isinstance(v, list) and len(v) == 3 and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
        for v in (lo, shape)
    )
    if not ints or min(shape) < 1 or int(np.prod(shape)) > MAX_SAMPLES:
        raise FingerprintError(f"{where}: its box (lo {lo!r}, shape {shape!r}) is damaged")
    solid = _decode_bits(rec.get("solid"), shape, where, "solid")
    definite = _decode_bits(rec.get("definite"), shape, where, "definite")
    return Fingerprint(tuple(lo), solid, definite)


def _points_in(lo_m, hi_m) -> tuple:
    """``(lo, shape)``: the lattice points from ``lo_m`` to ``hi_m`` metres (each axis), at least one per axis."""
    lo = np.ceil(np.asarray(lo_m) / CELL - SAMPLE_AT).astype(np.int64)
    hi = np.floor(np.asarray(hi_m) / CELL - SAMPLE_AT).astype(np.int64)
    return tuple(int(x) for x in lo), tuple(int(x) for x in np.maximum(hi - lo + 1, 1))


def _sampled(lo, shape, field) -> Fingerprint:
    """The Fingerprint of the box (``lo``, ``shape``) from ``field(points) -> (distance, ...)`` at its points."""
    axes = [(np.arange(shape[k], dtype=np.float64) + lo[k] + SAMPLE_AT) * CELL for k in range(3)]
    d = field(np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3))[0]
    return Fingerprint(lo, (d < 0).reshape(shape), (np.abs(d) >= MARGIN).reshape(shape))


def lattice_box(world) -> tuple:
    """``(lo, shape)``: the lattice points that lie in the world's field cube (``layout.field_origin`` to it plus
    resolution voxels; the cube the field's voxel centres span), at least one per axis."""
    from navi_nb.world.layout import field_origin

    origin = field_origin(world)
    return _points_in(origin, origin + float(np.float32(world.resolution) * np.float32(world.voxel_size)))


def fingerprint(world) -> Fingerprint | None:
    """The world's fingerprint, computed (one point query per lattice point of its cube); None for a cube of
    more than ``MAX_SAMPLES`` lattice points (such a world is known by its content digests alone)."""
    from navi_nb.world.query import distance

    lo, shape = lattice_box(world)
    if int(np.prod(shape)) > MAX_SAMPLES:
        return None
    return _sampled(lo, shape, lambda points: distance(world, points))


def scene_fingerprint(scene) -> Fingerprint:
    """The fingerprint of an analytic scene (``scene_pieces.Scene``) from its own field, over the lattice points
    of its region of interest widened by ``SCENE_PAD`` (its walls and what lies just outside them) and kept in
    its cube: what a compiled world of it matches with :func:`difference_within` at any resolution, with no
    compile. The box is the layout's, not the cube's, so a large family's costs its layout's samples."""
    lo, shape = _points_in(
        np.maximum(np.asarray(scene.bounds_min, np.float64) - SCENE_PAD, scene.cube_min),
        np.minimum(np.asarray(scene.bounds_max, np.float64) + SCENE_PAD, scene.cube_min + scene.cube_side),
    )
    return _sampled(lo, shape, scene.evaluate)


# --------------------------------------------------------------------------
# the store beside the world cache
# --------------------------------------------------------------------------


def default_fingerprint_dir() -> Path:
    """``fingerprints/`` beside the world cache's ``worlds/`` (``NAVI_NB_CACHE``, else ``XDG_CACHE_HOME``)."""
    from navi_nb.world.world_cache import default_cache_dir

    return default_cache_dir().parent / FINGERPRINT_DIR


def _store_path(folder: Path, digests) -> Path:
    lattice = [FINGERPRINT_VERSION, CELL, SAMPLE_AT, MARGIN]
    key = hashlib.blake2b(json.dumps([lattice, list(digests)]).encode(), digest_size=20).hexdigest()
    return folder / f"{key}.json"


def _read_store(path: Path, digests):
    """The records a store file holds for exactly `digests`, or None when it is missing or not sound."""
    try:
        data = read_regular(path, "fingerprint file", MAX_RECORD_CHARS * max(1, len(digests)))
        line, body = data.split(b"\n", 1)
        if line.decode("ascii") != hashlib.blake2b(body, digest_size=20).hexdigest():
            return None
        stored = json.loads(body)
    except (OSError, ValueError):
        return None
    if not isinstance(stored, dict) or stored.get("digests") != list(digests):
        return None
    records = stored.get("records")
    return records if isinstance(records, list) and len(records) == len(digests) else None


def stored_records(worlds, digests=None, folder=None) -> list:
    """Each world's :meth:`Fingerprint.to_record` (None for a world without one), read from the store when a
    sound file for exactly these worlds (their ``gmdag.world_digest``s, `digests` when already computed) is
    there, else computed and written there: one file a set, so a set loaded again costs one small read. A
    store that cannot be written is passed over; a damaged file is computed again and replaced."""
    from navi_nb.world.gmdag import world_digest

    if digests is None:
        digests = [world_digest(w) for w in worlds]
    folder = Path(folder) if folder is not None else default_fingerprint_dir()
    path = _store_path(folder, digests)
    records = _read_store(path, digests)
    if records is not None:
        return records
    records = [None if fp is None else fp.to_record() for fp in map(fingerprint, worlds)]
    body = json.dumps({"digests": list(digests), "records": records}, sort_keys=True).encode()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(path, hashlib.blake2b(body, digest_size=20).hexdigest().encode() + b"\n" + body)
    except OSError:
        pass  # a read-only cache: the fingerprints are still right, only not kept
    return records


def fingerprints(worlds, digests=None, folder=None) -> list:
    """The worlds' Fingerprints (:func:`stored_records`; None for a world without one)."""
    records = stored_records(worlds, digests, folder)
    where = f"fingerprint store {default_fingerprint_dir() if folder is None else folder}"
    return [None if rec is None else from_record(rec, where) for rec in records]


# --------------------------------------------------------------------------
# comparing
# --------------------------------------------------------------------------


_BYTE_BITS = np.array([bin(i).count("1") for i in range(256)], np.uint8)  # set bits of each byte value


def _bit_count(words: np.ndarray) -> int:
    """The set bits of a uint64 array (NumPy 2's ``bitwise_count``, else a table of the 256 byte values)."""
    count = getattr(np, "bitwise_count", None)
    if count is None:
        return int(_BYTE_BITS[words.view(np.uint8)].sum(dtype=np.int64))
    return int(count(words).sum(dtype=np.int64))


def _window(bits: np.ndarray, own_lo, lo, hi) -> np.ndarray:
    """`bits` (a box at lattice point `own_lo`) at lattice points ``lo`` up to (not including) ``hi``."""
    return bits[tuple(slice(lo[k] - own_lo[k], hi[k] - own_lo[k]) for k in range(3))]


def _overlap_box(a: Fingerprint, b: Fingerprint) -> tuple:
    """``(lo, hi, points)``: the lattice box both fingerprints cover."""
    lo = tuple(max(a.lo[k], b.lo[k]) for k in range(3))
    hi = tuple(min(a.lo[k] + a.shape[k], b.lo[k] + b.shape[k]) for k in range(3))
    return lo, hi, int(np.prod([max(0, hi[k] - lo[k]) for k in range(3)]))


def _differing_share(a: Fingerprint, b: Fingerprint, lo, hi, overlap) -> float:
    """The samples of the box lo:hi whose solidity differs, definite in either world, as a fraction of the
    smaller phase there (see the module doc)."""
    if a.lo == b.lo and a.shape == b.shape:  # one box (built-ins, one cube): on the packed bits
        sides = a.solid_words ^ b.solid_words
        differ, changed = _bit_count(sides & (a.definite_words | b.definite_words)), _bit_count(sides)
        both = _bit_count(a.solid_words & b.solid_words)
    else:
        sa, sb = _window(a.solid, a.lo, lo, hi), _window(b.solid, b.lo, lo, hi)
        definite = _window(a.definite, a.lo, lo, hi) | _window(b.definite, b.lo, lo, hi)
        differ, changed = int(np.count_nonzero((sa != sb) & definite)), int(np.count_nonzero(sa != sb))
        both = int(np.count_nonzero(sa & sb))
    if differ == 0:
        return 0.0
    smaller = min(both + changed, overlap - both)  # solid in either world, or free in either
    return differ / smaller


def difference(a: Fingerprint, b: Fingerprint) -> float:
    """The samples whose solidity differs, definite in either world, where the two boxes overlap, as a fraction
    of the smaller phase there (see the module doc); 0.0 for identical geometry, infinity when the overlap
    holds less than ``MIN_OVERLAP`` of either box (the worlds are not compared)."""
    lo, hi, overlap = _overlap_box(a, b)
    if overlap < MIN_OVERLAP * max(a.solid.size, b.solid.size):
        return float("inf")
    return _differing_share(a, b, lo, hi, overlap)


def difference_within(world: Fingerprint, part: Fingerprint) -> float:
    """:func:`difference` over the box of `part` alone (a scene's layout, :func:`scene_fingerprint`), when the
    box of `world` holds all of it; infinity otherwise (a world that holds the layout only in part is not
    compared, whatever else its cube holds)."""
    lo, hi, overlap = _overlap_box(world, part)
    if overlap < part.solid.size:
        return float("inf")
    return _differing_share(world, part, lo, hi, overlap)


def pack_parts(parts) -> tuple:
    """Fingerprints as :func:`first_within` reads them: ``(solid, definite)`` of all of them end to end (uint8,
    C order), their boxes' lows and shapes (int64 (R, 3)) and starts in those arrays (int64 (R + 1,))."""
    sizes = np.array([p.solid.size for p in parts], np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    solid = np.concatenate([p.solid.reshape(-1) for p in parts] or [np.zeros(0, bool)]).view(np.uint8)
    definite = np.concatenate([p.definite.reshape(-1) for p in parts] or [np.zeros(0, bool)]).view(np.uint8)
    lows = np.array([p.lo for p in parts], np.int64).reshape(-1, 3)
    shapes = np.array([p.shape for p in parts], np.int64).reshape(-1, 3)
    return solid, definite, lows, shapes, starts


def first_within(world: Fingerprint, packed, tolerance=TOLERANCE) -> int | None:
    """The index of the first of the packed parts (:func:`pack_parts`) that `world` holds within `tolerance`
    (:func:`difference_within`), or None. One compiled pass that leaves a part as soon as its differing
    samples exceed `tolerance` of its box (more than of its smaller phase): a few milliseconds for 600 layouts."""
    solid, definite, lows, shapes, starts = packed
    k = _first_within(
        world.solid.view(np.uint8), world.definite.view(np.uint8), np.asarray(world.lo, np.int64),
        (solid, definite, lows, shapes, starts), float(tolerance),
    )  # fmt: skip
    return None if k < 0 else int(k)


@njit(cache=True, nogil=True)
def _first_within(solid, definite, lo, parts, tolerance):
    """:func:`first_within`'s pass (``parts`` = :func:`pack_parts`' tuple); -1 when no part matches."""
    part_solid, part_definite, lows, shapes, starts = parts
    nx, ny, nz = solid.shape
    for r in range(lows.shape[0]):
        ox, oy, oz = lows[r, 0] - lo[0], lows[r, 1] - lo[1], lows[r, 2] - lo[2]
        sx, sy, sz = shapes[r, 0], shapes[r, 1], shapes[r, 2]
        if ox < 0 or oy < 0 or oz < 0 or ox + sx > nx or oy + sy > ny or oz + sz > nz:
            continue  # the world does not hold this part's box
        overlap = sx * sy * sz
        differ, changed, both = 0, 0, 0
        k = starts[r]
        for i in range(sx):
            for j in range(sy):
                for m in range(sz):
                    a, b = solid[ox + i, oy + j, oz + m], part_solid[k]
                    if a != b:
                        changed += 1
                        if definite[ox + i, oy + j, oz + m] or part_definite[k]:
                            differ += 1
                    elif a:
                        both += 1
                    k += 1
            if differ > tolerance * overlap:
                break
        if differ == 0:
            return r
        if differ <= tolerance * overlap and differ <= tolerance * min(both + changed, overlap - both):
            return r
    return -1


def matches(a: Fingerprint, b: Fingerprint, tolerance=TOLERANCE) -> bool:
    """Whether `a` and `b` are one world's geometry (:func:`difference` at most `tolerance`)."""
    return difference(a, b) <= tolerance


def first_match(fp: Fingerprint | None, candidates) -> int | None:
    """The index of the first of `candidates` (Fingerprints, or None for worlds without one) that `fp`
    matches, or None (always for `fp` None)."""
    for k, other in enumerate(candidates):
        if fp is not None and other is not None and matches(fp, other):
            return k
    return None
