"""The ``gmdag`` fuzz target: mutated compiled worlds (with their sidecars) read back and queried.

The bases are real compiled worlds (``box`` at 16 and 32, ``pillars`` at 16) and one written word by word
(``shared_slots_world``: resolution 4, child slots shared by several parents, a layout the compiler does
not emit). Each case's mutator (structure-aware: each knows the word layout of docs/FORMAT.md) changes one
of them, then the case is read through one of four load modes (by ``index % 4``): ``from_bytes``,
``load_world``, ``load_world(mmap=True)`` and the inspect path (a header-only load, then
``validate_world``). A rejection must name its input (the file, or ``caseN`` for bytes): one that does not
is a failure (``Unnamed``). What loads is queried: ``distance`` at 32 points and ``trace`` of 2 actors x
32 rays.
"""

from __future__ import annotations

import json
import os
import struct

import numpy as np

from navi_nb.fuzz.cases import FLOAT_SPECIALS, Case, Target, case_file_name, pick_case, query_points, write_case
from navi_nb.fuzz.outcomes import NonFinite, Unnamed

LOAD_MODES = ("bytes", "file", "mmap", "inspect")
N_GMDAG_BASES = 4  # gmdag_bases() makes this many


def shared_slots_world():
    """A valid world of 17 words written by hand (resolution 4, two levels): the root's five child slots point
    at two shared leaves and at an inner node whose eight slots all point at one of those leaves."""
    from navi_nb.world import gmdag

    nodes = [
        gmdag.encode_inner(0b10110101, 3),  # word 0: the root, five children, slots at words 3..7
        gmdag.encode_leaf(0, 1.0),  # word 1
        gmdag.encode_leaf(2, 0.25),  # word 2
        1,  # words 3..7: the root's slots, both leaves twice and the inner node at word 8
        2,
        1,
        2,
        8,
        gmdag.encode_inner(0xFF, 9),  # word 8: eight children, slots at words 9..16
    ] + [2] * 8
    return gmdag.World(4, np.zeros(3, np.float32), 0.5, np.array([int(w) for w in nodes], dtype=np.uint64))


def gmdag_bases():
    """(bytes, sidecar dict) of each base: box at 16 and 32, pillars at 16 (compiled), and
    ``shared_slots_world`` (no sidecar of its own)."""
    from navi_nb.world.compiler import compile_scene

    out = []
    for name, res in (("box", 16), ("box", 32), ("pillars", 16)):
        w = compile_scene(name, res)
        out.append((w.to_bytes(), json.loads(json.dumps(w.sidecar))))
    out.append((shared_slots_world().to_bytes(), {}))
    return out


# --------------------------------------------------------------------------
# mutators: each takes (bytes, sidecar, rng) and returns (bytes, sidecar text or None)
# --------------------------------------------------------------------------

HALF_SPECIALS = (0x7E00, 0x7C00, 0xFC00, 0x8000, 0x0000, 0x7BFF, 0xFBFF, 0x0001, 0x8001, 0xFE00, 0x7C01)
INT_SPECIALS = (0, 1, 2, 3, 7, 8, 16, 1 << 13, 1 << 24, (1 << 31) - 1, 1 << 31, (1 << 32) - 1)


def _words(data):
    n = (len(data) - 32) // 8
    return np.frombuffer(data, dtype="<u8", count=n, offset=32).astype(np.uint64)


def _join(data, words):
    return bytes(data[:32]) + words.astype("<u8").tobytes()


def _leaf_index(words):
    return np.flatnonzero((words >> np.uint64(63)) != 0)


def _slot_candidates(words):
    """Indices of child-slot words (every word reached through an inner node's run)."""
    inner = np.flatnonzero((words >> np.uint64(63)) == 0)
    out = []
    for i in inner[:64]:
        w = int(words[i])
        mask = (w >> 55) & 0xFF
        base = w & 0xFFFFFFFF
        if mask and base + int(mask).bit_count() <= words.size:
            out.extend(range(base, base + int(mask).bit_count()))
    return np.array(sorted(set(out)), dtype=np.int64)


def g_truncate(data, side, rng):
    return data[: int(rng.integers(0, len(data)))], None


def g_trailing(data, side, rng):
    return data + rng.integers(0, 256, int(rng.integers(1, 24)), dtype=np.uint8).tobytes(), None


def g_byte_flips(data, side, rng):
    b = bytearray(data)
    for _ in range(int(rng.integers(1, 6))):
        b[int(rng.integers(len(b)))] ^= int(rng.integers(1, 256))
    return bytes(b), None


def g_header_field(data, side, rng):
    """One header field set to a hostile value of its type."""
    b = bytearray(data)
    which = int(rng.integers(8))
    if which == 0:
        b[0:4] = rng.choice([b"GDAG"[::-1], b"\0\0\0\0", b"GDAH", b"gdag"])
    elif which == 1:
        b[4:8] = struct.pack("<I", int(rng.choice([0, 2, 255, (1 << 32) - 1])))
    elif which == 2:
        b[8:12] = struct.pack("<I", int(rng.choice(INT_SPECIALS)))
    elif which in (3, 4, 5):
        b[12 + 4 * (which - 3) : 16 + 4 * (which - 3)] = struct.pack("<f", float(rng.choice(FLOAT_SPECIALS)))
    elif which == 6:
        b[24:28] = struct.pack("<f", float(rng.choice(FLOAT_SPECIALS + (-1.0, 1e37, 2e38))))
    else:
        n = (len(data) - 32) // 8
        b[28:32] = struct.pack("<I", int(rng.choice([0, 1, n - 1, n + 1, (1 << 32) - 1])))
    return bytes(b), None


def g_bounds_extreme(data, side, rng):
    """bmin and voxel_size together near the float32 limits (a cube that just fits, or not)."""
    b = bytearray(data)
    res = struct.unpack_from("<I", b, 8)[0] or 1
    big = float(rng.choice([1e37, 1e38, 3e38, 3.4e38]))
    voxel = big / res * float(rng.choice([0.5, 1.0, 2.0]))
    b[12:24] = struct.pack("<fff", *(float(rng.choice([-big, 0.0, big / 2])) for _ in range(3)))
    b[24:28] = struct.pack("<f", min(voxel, 3.4e38))
    return bytes(b), None


def g_child_out_of_range(data, side, rng):
    w = _words(data)
    i = int(rng.integers(w.size))
    w[i] = (w[i] & np.uint64(0xFFFFFFFF00000000)) | np.uint64(int(rng.integers(w.size, 1 << 32)))
    return _join(data, w), None


def _repoint_slot(data, side, rng, backward):
    """One child slot pointed at itself or an earlier word (``backward``), or at any word."""
    w = _words(data)
    slots = _slot_candidates(w)
    if slots.size == 0:
        return g_child_out_of_range(data, side, rng)
    j = int(slots[rng.integers(slots.size)])
    w[j] = (w[j] & np.uint64(0xFFFFFFFF00000000)) | np.uint64(int(rng.integers(0, j + 1 if backward else w.size)))
    return _join(data, w), None


def g_cycle(data, side, rng):
    return _repoint_slot(data, side, rng, backward=True)


def g_retarget(data, side, rng):
    """A child slot pointed at another word (sharing, or a slot read as a node)."""
    return _repoint_slot(data, side, rng, backward=False)


def g_high_bits(data, side, rng):
    w = _words(data)
    for _ in range(int(rng.integers(1, 3))):
        i = int(rng.integers(w.size))
        w[i] ^= np.uint64(1) << np.uint64(int(rng.integers(32, 64)))
    return _join(data, w), None


def g_mask(data, side, rng):
    w = _words(data)
    inner = np.flatnonzero((w >> np.uint64(63)) == 0)
    i = int(inner[rng.integers(inner.size)]) if inner.size else 0
    w[i] = (w[i] & ~(np.uint64(0xFF) << np.uint64(55))) | (np.uint64(int(rng.integers(0, 256))) << np.uint64(55))
    return _join(data, w), None


def g_leaf_half(data, side, rng):
    """Half-float specials (NaN, +-inf, -0, +-65504, subnormals) in one leaf, or in all leaves of one sign."""
    w = _words(data)
    leaves = _leaf_index(w)
    if leaves.size == 0:
        return g_byte_flips(data, side, rng)
    bits = int(rng.choice(HALF_SPECIALS))
    if rng.random() < 0.5:
        pick = leaves[rng.integers(leaves.size, size=int(rng.integers(1, 4)))]
    else:
        neg = (w[leaves] & np.uint64(0x8000)) != 0
        pick = leaves[neg if rng.random() < 0.5 else ~neg]
    w[pick] = (w[pick] & ~np.uint64(0xFFFF)) | np.uint64(bits)
    return _join(data, w), None


def g_leaf_semantic(data, side, rng):
    w = _words(data)
    leaves = _leaf_index(w)
    if leaves.size == 0:
        return g_byte_flips(data, side, rng)
    pick = leaves[rng.integers(leaves.size, size=int(rng.integers(1, 8)))]
    sem = np.uint64(int(rng.choice([0, 1, 2, 255, 65535, int(rng.integers(0, 65536))])))
    w[pick] = (w[pick] & ~(np.uint64(0xFFFF) << np.uint64(16))) | (sem << np.uint64(16))
    return _join(data, w), None


def g_swap(data, side, rng):
    w = _words(data)
    i, j = (int(x) for x in rng.integers(w.size, size=2))
    w[i], w[j] = w[j], w[i]
    return _join(data, w), None


def g_root_leaf(data, side, rng):
    """Word 0 replaced: a leaf root (a whole world of one value) or an inner root over junk."""
    w = _words(data)
    leaves = _leaf_index(w)
    w[0] = (
        w[int(leaves[rng.integers(leaves.size)])]
        if leaves.size and rng.random() < 0.5
        else np.uint64(int(rng.integers(0, 1 << 63)))
    )
    return _join(data, w), None


HOSTILE_SIDECARS = (
    "",
    "null",
    "[]",
    "5",
    '"x"',
    "{",
    "{}",
    '{"spawn_points": "abc"}',
    '{"class_names": 5}',
    '{"spawn_points": [[1, 2]]}',
    '{"spawn_points": [[0, NaN, 0]]}',
    '{"spawn_points": [[0, 1e999, 0]]}',
    '{"spawn_points": [[0, 1e300, 0]]}',
    '{"class_names": []}',
    '{"class_names": [1, 2]}',
    '{"bounds_of_interest": "ab"}',
    '{"bounds_of_interest": [[0, 0, 0], [1, 1]]}',
    '{"bounds_of_interest": [[1, 1, 1], [0, 0, 0]]}',
    '{"scene": 3}',
    '{"seed": "x"}',
    '{"spawn_points": [[0, 0, ' + "9" * 400 + "]]}",
    "[" * 50000 + "]" * 50000,
    "\xff\xfe garbage",
)


def g_sidecar(data, side, rng):
    """A valid world with a hostile sidecar: a fixed list, or one key of the real sidecar given a wrong value."""
    if rng.random() < 0.5:
        return data, str(rng.choice(HOSTILE_SIDECARS))
    s = dict(side)
    key = str(rng.choice(sorted(s) + ["spawn_points", "class_names", "bounds_of_interest"]))
    s[key] = [None, "x", 5, -1, 1.5, [], {}, [[1, 2, 3]], [[1e38, 0, 0]], True, float("nan"), [["a", "b", "c"]]][
        int(rng.integers(12))
    ]
    return data, json.dumps(s)


GMDAG_MUTATORS = {
    "truncate": g_truncate,
    "trailing": g_trailing,
    "byte-flips": g_byte_flips,
    "header-field": g_header_field,
    "bounds-extreme": g_bounds_extreme,
    "child-range": g_child_out_of_range,
    "cycle": g_cycle,
    "retarget": g_retarget,
    "high-bits": g_high_bits,
    "mask": g_mask,
    "leaf-half": g_leaf_half,
    "leaf-semantic": g_leaf_semantic,
    "swap": g_swap,
    "root": g_root_leaf,
    "sidecar": g_sidecar,
}


# --------------------------------------------------------------------------
# cases
# --------------------------------------------------------------------------


def gmdag_label(seed, index) -> tuple:
    """(generator, base number, mutator, load mode) of a case, without building any file."""
    return pick_case(seed, index, N_GMDAG_BASES, GMDAG_MUTATORS, LOAD_MODES)


def make_gmdag_case(bases, seed, index) -> Case:
    rng, base, name, mode = gmdag_label(seed, index)
    data, side = bases[base]
    new, sidecar = GMDAG_MUTATORS[name](data, side, rng)
    if sidecar is None and mode != "bytes" and rng.random() < 0.5:
        sidecar = json.dumps(side)  # the real sidecar travels with the file
    return Case(index, name, mode, bytes(new), sidecar)


def check_world_answers(world, rng, sensor=None):
    """distance and trace on a loaded world; raise NonFinite on an undocumented value."""
    from navi_nb.sense.sensor import Sensor
    from navi_nb.sense.tracer import trace
    from navi_nb.world.query import distance

    pts = query_points(world, rng)
    if np.all(np.isfinite(pts)):
        d, _ = distance(world, pts)
        bad = np.isnan(d) | (d == -np.inf)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise NonFinite(f"distance at {pts[i].tolist()} = {float(d[i])}")
    sensor = sensor or Sensor(8, 4)
    origins = pts[2:4] if np.all(np.isfinite(pts[2:4])) else np.zeros((2, 3))
    depth, _, _ = trace(world, origins, rng.uniform(-np.pi, np.pi, 2), sensor, 10.0)
    if not np.all(np.isfinite(depth)):
        raise NonFinite(f"trace depth {float(depth[~np.isfinite(depth)][0])} from {origins[0].tolist()}")


def gmdag_case_source(case: Case, folder) -> str:
    """The name a rejection of the case must start with: its file's path, or ``caseN`` for bytes."""
    return f"case{case.index}" if case.mode == "bytes" else os.path.join(folder, case_file_name(case, "gmdag"))


def load_gmdag_case(case: Case, folder):
    from navi_nb.world.gmdag import from_bytes, load_world, validate_world

    if case.mode == "bytes":
        return from_bytes(case.data, source=gmdag_case_source(case, folder))
    path = write_case(case, "gmdag", folder)
    if case.mode == "file":
        return load_world(path)
    if case.mode == "mmap":
        return load_world(path, mmap=True)
    return validate_world(load_world(path, validate=False))


def run_gmdag_case(case: Case, folder, rng, bases=None):
    from navi_nb.errors import NaviError

    try:
        world = load_gmdag_case(case, folder)
    except NaviError as exc:
        source, text = gmdag_case_source(case, folder), str(exc)
        if "\n" not in text and not text.startswith(source):  # (a message over lines is a traceback anyway)
            raise Unnamed(f"a rejection not naming {source}: {type(exc).__name__}: {exc}") from None
        raise
    try:
        check_world_answers(world, rng)
    finally:
        del world


TARGET = Target(gmdag_bases, make_gmdag_case, run_gmdag_case, gmdag_label, "gmdag")
