"""The ``mesh`` fuzz target: mutated meshes read, compiled, loaded back and queried.

The bases are a closed box and an open three-triangle fan, each written by the package's writers as OBJ,
ASCII STL, binary STL, ASCII PLY and binary PLY (the format is ``index % 5``). What ``read_mesh`` reads is
compiled (``compile_mesh``, resolution 16), the written bytes are loaded back validated (the compiler must
never write a file its own loader refuses), and ``distance`` is asked at 16 points.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile

import numpy as np

from navi_nb.fuzz.cases import FLOAT_SPECIALS, Case, Target, pick_case, query_points, write_case
from navi_nb.fuzz.outcomes import NonFinite

MESH_FORMATS = ("obj", "stl-ascii", "stl-binary", "ply-ascii", "ply-binary")
N_MESH_BASES = 2  # mesh_bases() makes this many of each format


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
# mutators: each takes (bytes, format, rng) and returns bytes
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
# reading a case: read, compile, load back, query
# --------------------------------------------------------------------------


def run_mesh_case(case: Case, folder, rng, bases=None):
    from navi_nb.world.compiler import compile_mesh
    from navi_nb.world.gmdag import from_bytes
    from navi_nb.world.query import distance

    path = write_case(case, "mesh", folder)
    world = compile_mesh(path, 16)
    back = from_bytes(world.to_bytes(), source=path)  # what `compile` writes must load validated
    d, _ = distance(back, query_points(back, rng, 16))
    if np.any(np.isnan(d) | (d == -np.inf)):
        raise NonFinite(f"distance of the compiled mesh: {d.tolist()}")


# --------------------------------------------------------------------------
# cases: which base, mutator and format case ``index`` is
# --------------------------------------------------------------------------


def mesh_label(seed, index) -> tuple:
    """(generator, base number, mutator, format) of a case, without building any file."""
    return pick_case(seed, index, N_MESH_BASES, MESH_MUTATORS, MESH_FORMATS)


def make_mesh_case(bases, seed, index) -> Case:
    rng, base, name, fmt = mesh_label(seed, index)
    data = bases[fmt][base]
    return Case(index, name, fmt, bytes(MESH_MUTATORS[name](data, fmt, rng)))


TARGET = Target(mesh_bases, make_mesh_case, run_mesh_case, mesh_label, "mesh")
