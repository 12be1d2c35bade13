"""Structure-aware fuzzing of the world and mesh readers (``navi-nb fuzz``).

A case is a pure function of ``(target, seed, index)``: a mutated copy of a
real file (a compiled `.gmdag` with its sidecar, or a mesh in one of the
five built-in formats) made by one named mutator, read back through one of
the load modes, then queried. Its outcome is one of

- ``ok``: loaded, and every answer is as documented (finite distances, or
  +inf from an unflagged +inf leaf; finite trace depths);
- ``rejected``: a ``NaviError`` whose message is one line (the wanted end
  for bad input);

or a failure:

- ``crash``: the worker process died (a signal, e.g. a segfault);
- ``hang``: the case ran past the time limit;
- ``non-finite``: a query answered NaN or -inf (a trace: any non-finite depth);
- ``traceback``: any other exception (a bug), or a NaviError spread over lines;
- ``warning``: it ended ok or rejected, but a Python warning (e.g. NumPy's
  overflow RuntimeWarning) was raised on the way: a user would see it printed.

Cases run in worker processes (``jobs`` of them) that take batches of case
indices; the parent watches each worker, records a dead worker's case as a
crash and a silent one's as a hang (killing it), and hands the rest of the
batch to a fresh worker. Results do not depend on scheduling (each case draws
from its own generator), so a failure is replayed in-process by its index
(``run_case``).

Targets: ``gmdag`` (four load modes: ``from_bytes``, ``load_world``, ``load_world(mmap=True)``
and the inspect path, a header-only load then ``validate_world``; then
``distance`` at 32 points and ``trace`` of 2 actors x 32 rays) and ``mesh``
(OBJ, ASCII and binary STL, ASCII and binary PLY through ``read_mesh``, then
``compile_mesh`` at resolution 16, the written bytes loaded back validated, and
``distance``).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
import time
import traceback
import warnings
from collections import Counter, deque
from dataclasses import dataclass, field

import numpy as np

from navi_nb.errors import NaviError

OUTCOMES = ("ok", "rejected", "crash", "hang", "non-finite", "traceback", "warning")
FAILURES = ("crash", "hang", "non-finite", "traceback", "warning")
LOAD_MODES = ("bytes", "file", "mmap", "inspect")
MESH_FORMATS = ("obj", "stl-ascii", "stl-binary", "ply-ascii", "ply-binary")


# --------------------------------------------------------------------------
# the files mutated
# --------------------------------------------------------------------------


def gmdag_bases():
    """Real compiled worlds (bytes, sidecar dict): box at 16 and 32, pillars at 16."""
    from navi_nb.world.compiler import compile_scene

    out = []
    for name, res in (("box", 16), ("box", 32), ("pillars", 16)):
        w = compile_scene(name, res)
        out.append((w.to_bytes(), json.loads(json.dumps(w.sidecar))))
    return out


def mesh_bases():
    """A closed box and a 3-triangle open fan in each built-in format: {format: [bytes, ...]}."""
    from navi_nb.world.mesh_io import write_obj, write_ply, write_stl
    from navi_nb.world.mesh_scene import box_mesh

    box = box_mesh((-1.0, -0.5, -1.0), (1.0, 1.5, 0.5))
    fan = (
        np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0.5]], np.float64),
        np.array([[0, 1, 2], [0, 2, 3], [0, 3, 1]], np.int64),
    )
    out = {f: [] for f in MESH_FORMATS}
    tmp = tempfile.mkdtemp(prefix="navi_nb_fuzz_")
    try:
        for v, f in ((box.vertices, box.faces), fan):
            for fmt, ext, write, kw in (
                ("obj", ".obj", write_obj, {}),
                ("stl-ascii", ".stl", write_stl, {"ascii": True}),
                ("stl-binary", ".stl", write_stl, {}),
                ("ply-ascii", ".ply", write_ply, {"binary": False}),
                ("ply-binary", ".ply", write_ply, {}),
            ):
                p = os.path.join(tmp, "m" + ext)
                write(p, v, f, **kw)
                with open(p, "rb") as fh:
                    out[fmt].append(fh.read())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


# --------------------------------------------------------------------------
# .gmdag mutators: each takes (bytes, sidecar, rng) and returns (bytes, sidecar text or None)
# --------------------------------------------------------------------------

HALF_SPECIALS = (0x7E00, 0x7C00, 0xFC00, 0x8000, 0x0000, 0x7BFF, 0xFBFF, 0x0001, 0x8001, 0xFE00, 0x7C01)
FLOAT_SPECIALS = (
    float("nan"),
    float("inf"),
    float("-inf"),
    3.4e38,
    -3.4e38,
    1e38,
    -1e38,
    1e-45,
    0.0,
    -0.0,
    1e30,
    -1e30,
    65504.0,
    1e-30,
)
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


def g_cycle(data, side, rng):
    w = _words(data)
    slots = _slot_candidates(w)
    if slots.size == 0:
        return g_child_out_of_range(data, side, rng)
    j = int(slots[rng.integers(slots.size)])
    w[j] = (w[j] & np.uint64(0xFFFFFFFF00000000)) | np.uint64(int(rng.integers(0, j + 1)))
    return _join(data, w), None


def g_retarget(data, side, rng):
    """A child slot pointed at another word (sharing, or a slot read as a node)."""
    w = _words(data)
    slots = _slot_candidates(w)
    if slots.size == 0:
        return g_child_out_of_range(data, side, rng)
    j = int(slots[rng.integers(slots.size)])
    w[j] = (w[j] & np.uint64(0xFFFFFFFF00000000)) | np.uint64(int(rng.integers(0, w.size)))
    return _join(data, w), None


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
# mesh mutators: each takes (bytes, format, rng) and returns bytes
# --------------------------------------------------------------------------

NUMBER_SPECIALS = (
    "nan",
    "inf",
    "-inf",
    "1e300",
    "-1e300",
    "3e38",
    "-3e38",
    "1e-320",
    "0",
    "-0",
    "1.5",
    "-1",
    "2147483648",
    "4000000000",
    "1e19",
    "x",
    "",
    "0x10",
    "1e",
    "+",
    "9" * 400,
)


def m_token(data, fmt, rng):
    """One whitespace-separated token replaced by a hostile number (text formats; binary: byte flips)."""
    if fmt.endswith("binary"):
        return m_binary_value(data, fmt, rng)
    toks = data.split(b" ")
    for _ in range(int(rng.integers(1, 4))):
        i = int(rng.integers(len(toks)))
        tail = b"\n" if toks[i].endswith(b"\n") else b""
        toks[i] = str(rng.choice(NUMBER_SPECIALS)).encode() + tail
    return b" ".join(toks)


def m_lines(data, fmt, rng):
    """Lines deleted, duplicated, swapped, or ended with a continuation backslash."""
    lines = data.split(b"\n")
    op = int(rng.integers(4))
    i, j = (int(x) for x in rng.integers(len(lines), size=2))
    if op == 0:
        del lines[i]
    elif op == 1:
        lines.insert(i, lines[j])
    elif op == 2:
        lines[i], lines[j] = lines[j], lines[i]
    else:
        lines[i] = lines[i] + b" \\"
    return b"\n".join(lines)


def m_truncate(data, fmt, rng):
    return data[: int(rng.integers(0, len(data)))]


def m_byte_flips(data, fmt, rng):
    b = bytearray(data)
    for _ in range(int(rng.integers(1, 6))):
        b[int(rng.integers(len(b)))] ^= int(rng.integers(1, 256))
    return bytes(b)


def m_count(data, fmt, rng):
    """A declared count changed: STL's triangle count, a PLY element count, or a PLY list count."""
    counts = [0, 1, 2, 3, 255, 65535, 1 << 31, 4_000_000_000, (1 << 32) - 1]
    if fmt == "stl-binary":
        b = bytearray(data)
        b[80:84] = struct.pack("<I", int(rng.choice(counts)))
        return bytes(b)
    if fmt.startswith("ply"):
        end = data.find(b"end_header")
        head, body = data[:end], data[end:]
        if rng.random() < 0.5 or fmt == "ply-ascii":
            lines = head.split(b"\n")
            el = [k for k, ln in enumerate(lines) if ln.startswith(b"element")]
            k = el[int(rng.integers(len(el)))]
            parts = lines[k].split(b" ")
            parts[2] = str(rng.choice(counts + [-1])).encode()
            lines[k] = b" ".join(parts)
            if fmt == "ply-ascii" or rng.random() < 0.5:
                return b"\n".join(lines) + body
            head = b"\n".join(lines)
        # binary faces are "uchar count, 3 int32": set one list count byte, or widen the count type
        b = bytearray(head + body)
        if rng.random() < 0.5:
            b = bytearray(bytes(b).replace(b"list uchar int", b"list uint int"))
        start = b.find(b"\n", b.find(b"end_header")) + 1
        nverts = int(head.split(b"element vertex ")[1].split(b"\n")[0]) if b"element vertex " in head else 0
        face0 = start + 24 * max(nverts, 0)
        if 0 <= face0 < len(b):
            b[face0] = int(rng.choice([0, 1, 2, 4, 200, 255]))
        return bytes(b)
    return m_lines(data, fmt, rng)


def m_binary_value(data, fmt, rng):
    """A float or index field of a binary file set to a hostile value."""
    b = bytearray(data)
    if fmt == "stl-binary":
        n = (len(b) - 84) // 50
        if n <= 0:
            return m_byte_flips(data, fmt, rng)
        off = 84 + 50 * int(rng.integers(n)) + 12 + 4 * int(rng.integers(9))
        b[off : off + 4] = struct.pack("<f", float(rng.choice(FLOAT_SPECIALS)))
        return bytes(b)
    if fmt == "ply-binary":
        start = b.find(b"\n", b.find(b"end_header")) + 1
        if rng.random() < 0.5:  # a vertex coordinate (float64)
            off = start + 8 * int(rng.integers(24))
            if off + 8 <= len(b):
                b[off : off + 8] = struct.pack("<d", float(rng.choice(FLOAT_SPECIALS + (1e300, -1e300))))
        else:  # a face index (int32)
            if rng.random() < 0.5:
                b = bytearray(bytes(b).replace(b"list uchar int", b"list uchar float"))
                start = b.find(b"\n", b.find(b"end_header")) + 1
            off = len(b) - 4 * int(rng.integers(1, 10))
            if off >= start:
                b[off : off + 4] = struct.pack("<i", int(rng.choice([-1, 8, 1 << 30, -(1 << 31), 3])))
        return bytes(b)
    return m_token(data, fmt, rng)


def m_header(data, fmt, rng):
    """PLY header lines and types, OBJ/STL keywords: replaced or dropped."""
    if fmt.startswith("ply"):
        end = data.find(b"end_header")
        lines = data[:end].split(b"\n")
        i = int(rng.integers(len(lines)))
        lines[i] = rng.choice(
            [
                b"",
                b"format binary_big_endian 1.0",
                b"format ascii 2.0",
                b"property list",
                b"property float",
                b"property quad x",
                b"element face",
                b"element vertex x",
                b"property list uchar double vertex_indices",
                b"element face 1\nproperty uchar n",
                b"format binary_little_endian 1.0",
            ]
        )
        return b"\n".join(lines) + data[end:]
    if fmt == "stl-binary":
        b = bytearray(data)
        b[0:5] = b"solid"
        return bytes(b)
    words = (b"v ", b"f ", b"vertex", b"facet", b"endfacet", b"solid", b"endloop")
    a, c = rng.choice(len(words), size=2)
    return data.replace(words[int(a)], words[int(c)], int(rng.integers(1, 4)))


MESH_MUTATORS = {
    "token": m_token,
    "lines": m_lines,
    "truncate": m_truncate,
    "byte-flips": m_byte_flips,
    "count": m_count,
    "binary-value": m_binary_value,
    "header": m_header,
}


# --------------------------------------------------------------------------
# cases
# --------------------------------------------------------------------------


@dataclass
class Case:
    index: int
    mutator: str
    mode: str  # load mode (gmdag) or mesh format
    data: bytes
    sidecar: str | None = None


def case_rng(seed, index):
    return np.random.default_rng([int(seed), int(index)])


N_GMDAG_BASES = 3  # gmdag_bases() makes this many
N_MESH_BASES = 2  # mesh_bases() makes this many of each format


def gmdag_label(seed, index) -> tuple:
    """(generator, base number, mutator, load mode) of a case, without building any file."""
    rng = case_rng(seed, index)
    base = int(rng.integers(N_GMDAG_BASES))
    return (
        rng,
        base,
        sorted(GMDAG_MUTATORS)[int(rng.integers(len(GMDAG_MUTATORS)))],
        LOAD_MODES[index % len(LOAD_MODES)],
    )


def mesh_label(seed, index) -> tuple:
    """(generator, base number, mutator, format) of a case, without building any file."""
    rng = case_rng(seed, index)
    base = int(rng.integers(N_MESH_BASES))
    return (
        rng,
        base,
        sorted(MESH_MUTATORS)[int(rng.integers(len(MESH_MUTATORS)))],
        MESH_FORMATS[index % len(MESH_FORMATS)],
    )


def make_gmdag_case(bases, seed, index) -> Case:
    rng, base, name, mode = gmdag_label(seed, index)
    data, side = bases[base]
    new, sidecar = GMDAG_MUTATORS[name](data, side, rng)
    if sidecar is None and mode != "bytes" and rng.random() < 0.5:
        sidecar = json.dumps(side)  # the real sidecar travels with the file
    return Case(index, name, mode, bytes(new), sidecar)


def make_mesh_case(bases, seed, index) -> Case:
    rng, base, name, fmt = mesh_label(seed, index)
    data = bases[fmt][base]
    return Case(index, name, fmt, bytes(MESH_MUTATORS[name](data, fmt, rng)))


def case_file_name(case: Case, target: str) -> str:
    ext = {"gmdag": ".gmdag", "checkpoint": f".{case.mode}.npz"}.get(target, "." + case.mode.split("-")[0])
    return f"case{case.index}{ext}"


def write_case(case: Case, target: str, folder) -> str:
    path = os.path.join(folder, case_file_name(case, target))
    with open(path, "wb") as fh:
        fh.write(case.data)
    if case.sidecar is not None:
        with open(path + ".json", "wb") as fh:
            fh.write(case.sidecar.encode("utf-8", "surrogateescape"))
    return path


class NonFinite(Exception):
    """A query answered a value the documentation does not allow (NaN, -inf)."""


def _query_points(world, rng, n=32):
    ext = float(world.extent)
    lo = world.bmin.astype(np.float64)
    u = rng.uniform(-0.25, 1.25, size=(n, 3))
    u[:4] = [[0, 0, 0], [1, 1, 1], [0.5, 0.5, 0.5], [1e-9, 0.999999, 0.5]]
    return lo + u * ext


def check_world_answers(world, rng, sensor=None):
    """distance and trace on a loaded world; raise NonFinite on an undocumented value."""
    from navi_nb.sense.sensor import Sensor
    from navi_nb.sense.tracer import trace
    from navi_nb.world.query import distance

    pts = _query_points(world, rng)
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


def load_gmdag_case(case: Case, folder):
    from navi_nb.world.gmdag import from_bytes, load_world, validate_world

    if case.mode == "bytes":
        return from_bytes(case.data, source=f"case{case.index}")
    path = write_case(case, "gmdag", folder)
    if case.mode == "file":
        return load_world(path)
    if case.mode == "mmap":
        return load_world(path, mmap=True)
    return validate_world(load_world(path, validate=False))


def run_gmdag_case(case: Case, folder, rng):
    world = load_gmdag_case(case, folder)
    try:
        check_world_answers(world, rng)
    finally:
        del world


def run_mesh_case(case: Case, folder, rng):
    from navi_nb.world.compiler import compile_mesh
    from navi_nb.world.gmdag import from_bytes
    from navi_nb.world.query import distance

    path = write_case(case, "mesh", folder)
    world = compile_mesh(path, 16)
    back = from_bytes(world.to_bytes(), source=path)  # what `compile` writes must load validated
    d, _ = distance(back, _query_points(back, rng, 16))
    if np.any(np.isnan(d) | (d == -np.inf)):
        raise NonFinite(f"distance of the compiled mesh: {d.tolist()}")


# --------------------------------------------------------------------------
# checkpoint: a tiny run's checkpoint, policy.npz and eval_episodes.npz
# (mutators and readers: navi_nb.train.fuzz_checkpoint; case i is kind i % 3)
# --------------------------------------------------------------------------

_RUN_FUZZER = []  # this process's Fuzzer over its own tiny run, made once by checkpoint_bases


def checkpoint_bases():
    """A tiny run trained and evaluated in a temporary folder (once per process), and the Fuzzer over its files."""
    import atexit

    from navi_nb.train.fuzz_checkpoint import Fuzzer, make_tiny_run

    if not _RUN_FUZZER:
        root = tempfile.mkdtemp(prefix="navi_nb_fuzz_run_")
        atexit.register(shutil.rmtree, root, True)
        _RUN_FUZZER.append(Fuzzer(make_tiny_run(root), os.path.join(root, "work")))
    return _RUN_FUZZER[0]


def checkpoint_label(seed, index) -> tuple:
    """(generator, base number, mutator, file kind) of a case, without building any file."""
    from navi_nb.train.fuzz_checkpoint import TARGETS as KINDS
    from navi_nb.train.fuzz_checkpoint import case_mutator

    kind = KINDS[index % len(KINDS)]
    rng, name = case_mutator(seed, kind, index // len(KINDS))
    return rng, 0, name, kind


def make_checkpoint_case(fuzzer, seed, index) -> Case:
    kind = checkpoint_label(seed, index)[3]
    name, data = fuzzer.mutate(kind, index // 3, seed)
    return Case(index, name, kind, data)


def run_checkpoint_case(case: Case, folder, rng):
    from navi_nb.train.fuzz_checkpoint import non_finite_members

    bad = non_finite_members(checkpoint_bases().load_bytes(case.mode, case.data))
    if bad:
        raise NonFinite(f"loaded non-finite values in {bad}")


@dataclass
class Target:
    bases: object  # () -> bases
    make: object  # (bases, seed, index) -> Case
    run: object  # (case, folder, rng) -> None; raises NaviError (rejected), NonFinite, or a bug
    label: object  # (seed, index) -> (rng, base, mutator, mode): names a case whose worker died


TARGETS = {
    "gmdag": Target(gmdag_bases, make_gmdag_case, run_gmdag_case, gmdag_label),
    "mesh": Target(mesh_bases, make_mesh_case, run_mesh_case, mesh_label),
    "checkpoint": Target(checkpoint_bases, make_checkpoint_case, run_checkpoint_case, checkpoint_label),
}


def run_case(target, bases, seed: int, index: int, folder) -> tuple:
    """One case in this process: (outcome, mutator, mode, detail). Never raises for the case's faults.

    target: a name in TARGETS, or a Target.
    """
    t = TARGETS[target] if isinstance(target, str) else target
    case = t.make(bases, seed, index)
    rng = np.random.default_rng([int(seed), int(index), 1])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            t.run(case, folder, rng)
            outcome, detail = "ok", ""
        except NaviError as exc:
            text = str(exc)
            outcome = "rejected" if text and "\n" not in text else "traceback"
            detail = f"{type(exc).__name__}: {text}"
        except NonFinite as exc:
            outcome, detail = "non-finite", str(exc)
        except Exception as exc:  # noqa: BLE001  (any other exception is the bug being looked for)
            tb = traceback.extract_tb(exc.__traceback__)
            where = f" at {os.path.basename(tb[-1].filename)}:{tb[-1].lineno}" if tb else ""
            outcome, detail = "traceback", f"{type(exc).__name__}: {exc}{where}"
        finally:
            for name in os.listdir(folder):
                try:
                    os.unlink(os.path.join(folder, name))
                except OSError:
                    pass
    if caught and outcome in ("ok", "rejected"):  # a user would see the warning printed before the answer
        w = caught[0]
        outcome, detail = (
            "warning",
            (
                f"{w.category.__name__}: {w.message} at {os.path.basename(w.filename)}:"
                f"{w.lineno} (then {outcome}) {detail}"
            ),
        )
    return outcome, case.mutator, case.mode, detail[:300]


# --------------------------------------------------------------------------
# the process pool
# --------------------------------------------------------------------------


def _worker(conn, target, seed):
    """Build the bases, warm the kernels, then run batches of case indices until told to stop.

    target: a name in TARGETS or a Target (passed whole: a spawned worker sees only importable names).
    """
    try:
        import numba

        numba.set_num_threads(1)  # parallelism comes from the processes
    except (ImportError, ValueError):
        pass
    folder = tempfile.mkdtemp(prefix="navi_nb_fuzz_")
    try:
        bases = target.bases()
        run_case(target, bases, seed, 0, folder)  # compile/load every kernel once before timing starts
        conn.send(("ready",))
        while True:
            batch = conn.recv()
            if batch is None:
                break
            for index in batch:
                conn.send(("case", index) + run_case(target, bases, seed, index, folder))
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        pass
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@dataclass
class Report:
    target: str
    seed: int
    cases: int
    jobs: int
    timeout: float
    seconds: float = 0.0
    counts: Counter = field(default_factory=Counter)
    by_mutator: dict = field(default_factory=dict)  # mutator -> Counter of outcomes
    by_mode: dict = field(default_factory=dict)  # load mode / format -> Counter
    failures: list = field(default_factory=list)  # (index, outcome, mutator, mode, detail), first ones
    restarts: int = 0

    @property
    def failed(self) -> int:
        return sum(self.counts[o] for o in FAILURES)

    def add(self, index, outcome, mutator, mode, detail, keep_failures=50):
        self.counts[outcome] += 1
        self.by_mutator.setdefault(mutator, Counter())[outcome] += 1
        self.by_mode.setdefault(mode, Counter())[outcome] += 1
        if outcome in FAILURES and len(self.failures) < keep_failures:
            self.failures.append((index, outcome, mutator, mode, detail))

    def to_dict(self):
        return {
            "target": self.target,
            "seed": self.seed,
            "cases": self.cases,
            "jobs": self.jobs,
            "timeout_s": self.timeout,
            "seconds": round(self.seconds, 2),
            "worker_restarts": self.restarts,
            "counts": {o: self.counts[o] for o in OUTCOMES},
            "by_mutator": {k: dict(v) for k, v in sorted(self.by_mutator.items())},
            "by_mode": {k: dict(v) for k, v in sorted(self.by_mode.items())},
            "failures": [list(f) for f in self.failures],
        }


class _Slot:
    def __init__(self, ctx, target, seed):
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, target, seed), daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent
        self.batch = deque()  # indices sent and not yet answered, in order
        self.ready = False
        self.since = time.monotonic()

    def stop(self, kill=False):
        try:
            if kill:
                self.proc.kill()
            else:
                self.conn.send(None)
        except (OSError, BrokenPipeError):
            pass
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=5)
        self.conn.close()


def run_fuzz(
    target="gmdag", cases=1000, seed=0, jobs=None, timeout=10.0, batch=64, warmup_timeout=600.0, progress=None
) -> Report:
    """Run cases 0..cases-1 of `target` in `jobs` worker processes; return a Report.

    timeout: seconds one case may take before its worker is killed (a hang).
    progress: optional callable(done, total) called as results arrive.
    """
    import multiprocessing as mp
    from multiprocessing.connection import wait

    if isinstance(target, str):
        if target not in TARGETS:
            raise ValueError(f"unknown fuzz target {target!r}")
        name, target = target, TARGETS[target]
    else:
        name = getattr(target, "name", "custom")
    if not jobs:
        jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    jobs = max(1, int(jobs))
    # spawn, not fork: a parent that has run a Numba parallel kernel (OpenMP) cannot fork safely
    ctx = mp.get_context("spawn")
    report = Report(name, int(seed), int(cases), jobs, float(timeout))
    todo = deque(range(int(cases)))
    t0 = time.perf_counter()
    slots = [_Slot(ctx, target, seed) for _ in range(min(jobs, max(1, int(cases))))]
    done = 0

    def feed(slot):
        if slot.ready and not slot.batch and todo:
            take = [todo.popleft() for _ in range(min(batch, len(todo)))]
            slot.batch.extend(take)
            slot.conn.send(take)
            slot.since = time.monotonic()

    def replace(slot, outcome, detail):
        nonlocal done
        if slot.batch:
            index = slot.batch.popleft()
            _, _, mutator, mode = target.label(seed, index)
            report.add(index, outcome, mutator, mode, detail)
            done += 1
            todo.extendleft(reversed(slot.batch))
        slot.stop(kill=True)
        report.restarts += 1
        return _Slot(ctx, target, seed)

    try:
        while done < cases:
            conns = {s.conn: s for s in slots}
            for conn in wait(list(conns), timeout=0.25):
                slot = conns[conn]
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    slot.proc.join(timeout=5)
                    code = slot.proc.exitcode
                    if not slot.ready:
                        raise RuntimeError(f"a fuzz worker died while starting (exit code {code})") from None
                    why = f"worker died: signal {-code}" if code and code < 0 else f"worker exited ({code})"
                    slots[slots.index(slot)] = replace(slot, "crash", why)
                    continue
                if msg[0] == "ready":
                    slot.ready = True
                elif msg[0] == "case":
                    index = slot.batch.popleft()
                    assert index == msg[1]
                    report.add(*msg[1:])
                    done += 1
                    if progress is not None:
                        progress(done, cases)
                slot.since = time.monotonic()
            now = time.monotonic()
            for k, slot in enumerate(slots):
                limit = timeout if slot.ready else warmup_timeout
                if (slot.batch or not slot.ready) and now - slot.since > limit:
                    if not slot.ready:
                        raise RuntimeError(f"a fuzz worker did not start within {warmup_timeout:g} s")
                    slots[k] = replace(slot, "hang", f"no answer within {timeout:g} s")
                else:
                    feed(slot)
    finally:
        for slot in slots:
            slot.stop()
    report.seconds = time.perf_counter() - t0
    return report


def failure_inputs(report: Report, folder) -> list:
    """Write the input files of the report's failures into `folder` (after the run); return their paths."""
    bases = TARGETS[report.target].bases()
    paths = []
    for index, *_ in report.failures:
        case = TARGETS[report.target].make(bases, report.seed, index)
        paths.append(write_case(case, report.target, folder))
    return paths
