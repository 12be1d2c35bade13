"""Triangle meshes in and out: OBJ, STL (binary and ASCII), PLY (ASCII and binary).

``read_mesh(path) -> Mesh`` returns float64 vertices ``(V, 3)`` and int64 faces
``(F, 3)`` (counter-clockwise seen from outside, as the file gives them).

- OBJ: ``v`` lines (extra components such as w or colours ignored; ``\\``
  continues a line, and a file may not end inside one), ``f`` lines with
  ``i``, ``i/t``, ``i//n``, ``i/t/n`` forms, 1-based or negative (relative)
  indices; n-gons are fan-triangulated from their first corner. Comments and
  all other statements (``vt``, ``vn``, ``o``, ``g``, ``usemtl`` ...) are skipped.
- STL: binary when the size is exactly ``84 + 50 * count`` (even if the header
  starts with ``solid``), else ASCII when it starts with ``solid``. STL repeats
  each corner per facet; corners equal to within ``MERGE_TOLERANCE`` of the
  bounding-box diagonal are merged so that edges are shared and a watertight
  STL reads as a closed mesh.
- PLY: ``ascii``, ``binary_little_endian`` and ``binary_big_endian``; the
  ``vertex`` element needs ``x, y, z``; the ``face`` element needs a list
  property ``vertex_indices`` (or ``vertex_index``) of integral values (a float
  index such as 1.5 is refused); other properties and other elements are
  skipped by their declared types. Polygons are fan-triangulated.
- Any other extension goes through ``trimesh`` (the optional ``mesh`` extra).

The reader is picked by the file's suffix (or the one ``read_mesh`` is given);
only regular files are read: a FIFO, a device or a socket is refused unopened.

Degenerate triangles are kept here (the reader is faithful to the file);
``MeshField`` drops them and counts them. Bad input raises ``MeshError`` naming
the file and, where possible, the line or byte offset.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from navi_nb.errors import NaviError
from navi_nb.files import read_regular

__all__ = ["Mesh", "MeshError", "read_mesh", "check_mesh", "write_obj", "write_stl", "write_ply"]


class MeshError(NaviError, ValueError):
    """A mesh file or array is unreadable or not a valid triangle mesh."""


@dataclass(frozen=True)
class Mesh:
    """Triangles: ``vertices`` float64 (V, 3) metres, ``faces`` int64 (F, 3) vertex indices."""

    vertices: np.ndarray
    faces: np.ndarray

    @property
    def n_vertices(self) -> int:
        return int(self.vertices.shape[0])

    @property
    def n_faces(self) -> int:
        return int(self.faces.shape[0])


def check_mesh(vertices, faces, source="mesh") -> Mesh:
    """Validate and convert arrays into a ``Mesh``; raise MeshError naming ``source``."""
    try:
        v = np.ascontiguousarray(vertices, dtype=np.float64)
        f = np.asarray(faces)
    except (TypeError, ValueError) as exc:
        raise MeshError(f"{source}: vertices/faces are not numeric arrays ({exc})") from None
    if v.ndim != 2 or v.shape[1] != 3:
        raise MeshError(f"{source}: vertices must have shape (V, 3), got {v.shape}")
    if f.ndim != 2 or f.shape[1] != 3:
        raise MeshError(f"{source}: faces must have shape (F, 3), got {f.shape}")
    if v.shape[0] == 0 or f.shape[0] == 0:
        raise MeshError(f"{source}: empty mesh ({v.shape[0]} vertices, {f.shape[0]} faces)")
    if f.dtype.kind not in "iu":
        if f.dtype.kind == "f" and np.all(np.isfinite(f)) and np.all(f == np.round(f)):
            f = f.astype(np.int64)
        else:
            raise MeshError(f"{source}: face indices must be integers, got dtype {f.dtype}")
    f = np.ascontiguousarray(f, dtype=np.int64)
    bad = ~np.isfinite(v).all(axis=1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise MeshError(
            f"{source}: vertex {i} is not finite ({v[i].tolist()}); {int(bad.sum())} non-finite vertices in all"
        )
    out = (f < 0) | (f >= v.shape[0])
    if out.any():
        i = int(np.flatnonzero(out.any(axis=1))[0])
        raise MeshError(
            f"{source}: face {i} has vertex index out of range {f[i].tolist()} (mesh has {v.shape[0]} vertices)"
        )
    return Mesh(v, f)


def read_mesh(path, suffix=None) -> Mesh:
    """Read a triangle mesh from OBJ, STL or PLY (others via trimesh); raise MeshError.

    suffix: the suffix that picks the reader (default: ``path``'s own; a scene spec passes that of the name
    it was given, so a link ``room.obj`` to a file without a suffix reads as OBJ). Only a regular file is
    read (``navi_nb.files.read_regular``)."""
    p = Path(path)
    try:
        data = read_regular(p, "mesh file")
    except OSError as exc:
        raise MeshError(f"{p}: cannot read mesh file ({exc.strerror or exc})") from None
    ext = (suffix if suffix is not None else p.suffix).lower()
    if ext == ".obj":
        v, f = _parse_obj(data, p)
    elif ext == ".stl":
        v, f = _parse_stl(data, p)
    elif ext == ".ply":
        v, f = _parse_ply(data, p)
    else:
        v, f = _read_trimesh(p, data, ext)
    return check_mesh(v, f, str(p))


# --------------------------------------------------------------------------
# OBJ
# --------------------------------------------------------------------------


def _parse_obj(data: bytes, src):
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    verts = []
    tris = []
    pending = ""
    pending_from = 0  # line number where an open continuation began
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if line.endswith("\\"):  # continuation: join with the next line
            pending_from = pending_from or lineno
            pending += line[:-1] + " "
            continue
        pending_from = 0
        line, pending = pending + line, ""
        if not line:
            continue
        parts = line.split()
        tag = parts[0]
        if tag == "v":
            try:
                verts.append((float(parts[1]), float(parts[2]), float(parts[3])))
            except (IndexError, ValueError):
                raise MeshError(f"{src}: line {lineno}: bad vertex {raw.strip()!r}") from None
        elif tag == "f":
            nv = len(verts)
            idx = []
            for tok in parts[1:]:
                head = tok.split("/", 1)[0]
                try:
                    i = int(head)
                except ValueError:
                    raise MeshError(f"{src}: line {lineno}: bad face index {tok!r}") from None
                if i > 0:
                    i -= 1
                elif i < 0:
                    i += nv
                else:
                    raise MeshError(f"{src}: line {lineno}: face index 0 (OBJ indices start at 1)")
                if i < 0 or i >= nv:
                    raise MeshError(
                        f"{src}: line {lineno}: face index {head} out of range ({nv} vertices defined so far)"
                    )
                idx.append(i)
            if len(idx) < 3:
                raise MeshError(f"{src}: line {lineno}: face with {len(idx)} corners (need 3 or more)")
            a = idx[0]
            for k in range(1, len(idx) - 1):
                tris.append((a, idx[k], idx[k + 1]))
    if pending_from:
        raise MeshError(
            f"{src}: line {pending_from}: the file ends inside a '\\' continuation (the statement is incomplete)"
        )
    if not tris:
        raise MeshError(f"{src}: no faces found in OBJ ({len(verts)} vertices)")
    return np.array(verts, dtype=np.float64).reshape(-1, 3), np.array(tris, dtype=np.int64)


# --------------------------------------------------------------------------
# STL
# --------------------------------------------------------------------------

_STL_DTYPE = np.dtype([("n", "<f4", 3), ("v", "<f4", (3, 3)), ("attr", "<u2")])


def _parse_stl(data: bytes, src):
    size = len(data)
    if size >= 84:
        count = struct.unpack_from("<I", data, 80)[0]
        if 84 + 50 * count == size:
            if count == 0:
                raise MeshError(f"{src}: binary STL with 0 triangles (empty mesh)")
            rec = np.frombuffer(data, dtype=_STL_DTYPE, count=count, offset=84)
            return _merge_corners(rec["v"].astype(np.float64).reshape(-1, 3))
    if data.lstrip()[:5].lower() == b"solid":
        return _merge_corners(_parse_stl_ascii(data, src))
    if size < 84:
        raise MeshError(f"{src}: truncated STL: {size} bytes, a binary STL needs at least 84")
    count = struct.unpack_from("<I", data, 80)[0]
    raise MeshError(
        f"{src}: binary STL header at byte 80 declares {count} triangles "
        f"({84 + 50 * count} bytes) but the file has {size} bytes"
    )


def _parse_stl_ascii(data: bytes, src):
    text = data.decode("latin-1")
    corners = []
    in_facet = 0  # line number of the open facet, 0 when none
    n_in_facet = 0
    for lineno, raw in enumerate(text.splitlines(), 1):
        parts = raw.split()
        if not parts:
            continue
        tag = parts[0].lower()
        if tag == "facet":
            in_facet, n_in_facet = lineno, 0
        elif tag == "vertex":
            try:
                corners.append((float(parts[1]), float(parts[2]), float(parts[3])))
            except (IndexError, ValueError):
                raise MeshError(f"{src}: line {lineno}: bad vertex {raw.strip()!r}") from None
            n_in_facet += 1
        elif tag == "endfacet":
            if n_in_facet != 3:
                raise MeshError(f"{src}: line {lineno}: facet with {n_in_facet} vertices (need 3)")
            in_facet = 0
    if in_facet:
        raise MeshError(f"{src}: truncated ASCII STL: facet opened at line {in_facet} never ends")
    if not corners:
        raise MeshError(f"{src}: no facets found in ASCII STL")
    if len(corners) % 3:
        raise MeshError(f"{src}: ASCII STL has {len(corners)} vertices, not a multiple of 3")
    return np.array(corners, dtype=np.float64)


MERGE_TOLERANCE = 1e-9  # STL corners on the same grid cell of this fraction of the box diagonal merge


def _merge_corners(corners):
    """(3F, 3) facet corners -> (vertices, faces), merging corners that snap to one grid cell.

    The grid step is MERGE_TOLERANCE times the bounding-box diagonal: exporters
    write the same corner with float noise (e.g. 0 and -2.7e-16), which would
    otherwise split edges and make a watertight STL look open. Each merged
    vertex keeps the coordinates of its first corner.
    """
    c = np.ascontiguousarray(corners, dtype=np.float64)
    if not np.isfinite(c).all():
        return c, np.arange(c.shape[0], dtype=np.int64).reshape(-1, 3)  # check_mesh reports it
    span = c.max(axis=0) - c.min(axis=0)
    with np.errstate(over="ignore"):
        diagonal = float(np.linalg.norm(span))
    if not np.isfinite(diagonal):  # coordinates near 1e308: scale first (np.linalg.norm squares)
        big = float(np.max(np.abs(span)))
        diagonal = big * float(np.linalg.norm(span / big)) if np.isfinite(big) else np.inf
    step = MERGE_TOLERANCE * max(diagonal, 1e-300)
    key = np.round((c - c.min(axis=0)) / step).astype(np.int64)  # at most ~1e9: fits int64
    _, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
    return c[first], inverse.reshape(-1, 3).astype(np.int64)


# --------------------------------------------------------------------------
# PLY
# --------------------------------------------------------------------------

_PLY_TYPES = {
    "char": "i1",
    "int8": "i1",
    "uchar": "u1",
    "uint8": "u1",
    "short": "i2",
    "int16": "i2",
    "ushort": "u2",
    "uint16": "u2",
    "int": "i4",
    "int32": "i4",
    "uint": "u4",
    "uint32": "u4",
    "float": "f4",
    "float32": "f4",
    "double": "f8",
    "float64": "f8",
}


def _parse_ply(data: bytes, src):
    if not data.startswith(b"ply"):
        raise MeshError(f"{src}: not a PLY file (missing 'ply' magic at byte 0)")
    end = data.find(b"end_header")
    if end < 0:
        raise MeshError(f"{src}: PLY header has no 'end_header'")
    nl = data.find(b"\n", end)
    body_start = len(data) if nl < 0 else nl + 1
    header = data[:end].decode("latin-1").splitlines()
    fmt = None
    elements = []  # [name, count, [(name, type) or (name, (count_type, item_type))]]
    for lineno, raw in enumerate(header, 1):
        parts = raw.split()
        if not parts or parts[0] in ("ply", "comment", "obj_info"):
            continue
        try:
            if parts[0] == "format":
                fmt = parts[1]
            elif parts[0] == "element":
                elements.append([parts[1], int(parts[2]), []])
                if elements[-1][1] < 0:
                    raise ValueError
            elif parts[0] == "property":
                if not elements:
                    raise ValueError
                if parts[1] == "list":
                    prop = (parts[4], (_PLY_TYPES[parts[2]], _PLY_TYPES[parts[3]]))
                else:
                    prop = (parts[2], _PLY_TYPES[parts[1]])
                elements[-1][2].append(prop)
            else:
                raise ValueError
        except (IndexError, ValueError, KeyError):
            raise MeshError(f"{src}: PLY header line {lineno}: cannot parse {raw.strip()!r}") from None
    if fmt not in ("ascii", "binary_little_endian", "binary_big_endian"):
        raise MeshError(f"{src}: unsupported PLY format {fmt!r}")
    names = [e[0] for e in elements]
    if "vertex" not in names or "face" not in names:
        raise MeshError(f"{src}: PLY needs 'vertex' and 'face' elements, has {names}")
    if fmt == "ascii":
        vals = _ply_ascii(data[body_start:], elements, src)
    else:
        vals = _ply_binary(data, body_start, elements, "<" if fmt.endswith("little_endian") else ">", src)
    vtx = vals["vertex"]
    try:
        verts = np.stack([np.asarray(vtx[k], dtype=np.float64) for k in ("x", "y", "z")], axis=1)
    except KeyError:
        raise MeshError(f"{src}: PLY vertex element lacks x, y or z") from None
    face = vals["face"]
    lists = face.get("vertex_indices", face.get("vertex_index"))
    if lists is None:
        raise MeshError(f"{src}: PLY face element lacks a 'vertex_indices' list")
    return verts, _fan(lists, src)


def _integer_indices(values, src, where):
    """Face indices as int64; refuse non-integral or non-finite values (never truncate 1.5 to 1)."""
    a = np.asarray(values)
    if a.dtype.kind in "iu":
        return a.astype(np.int64)
    a = a.astype(np.float64)
    bad = ~np.isfinite(a) | (a != np.round(a)) | (np.abs(a) > 2.0**62)
    if bad.any():
        raise MeshError(f"{src}: PLY {where} has a non-integer vertex index {float(a[bad].flat[0])!r}")
    return a.astype(np.int64)


def _fan(lists, src):
    """Face index lists -> (F, 3) int64 triangles by fanning polygons."""
    if isinstance(lists, np.ndarray):  # uniform polygon size (k columns)
        lists = _integer_indices(lists, src, "face list")
        k = lists.shape[1]
        if k < 3:
            raise MeshError(f"{src}: PLY faces with {k} corners (need 3 or more)")
        a = np.repeat(lists[:, :1], k - 2, axis=1)
        tris = np.stack([a, lists[:, 1:-1], lists[:, 2:]], axis=2).reshape(-1, 3)
        return tris.astype(np.int64)
    tris = []
    for i, poly in enumerate(lists):
        if len(poly) < 3:
            raise MeshError(f"{src}: PLY face {i} has {len(poly)} corners (need 3 or more)")
        poly = _integer_indices(poly, src, f"face {i}")
        for k in range(1, len(poly) - 1):
            tris.append((int(poly[0]), int(poly[k]), int(poly[k + 1])))
    return np.array(tris, dtype=np.int64).reshape(-1, 3)


def _ply_ascii(body: bytes, elements, src):
    toks = body.split()
    pos = 0
    out = {}
    for name, count, props in elements:
        has_list = any(isinstance(t, tuple) for _, t in props)
        if not has_list:
            n = count * len(props)
            if pos + n > len(toks):
                raise MeshError(f"{src}: truncated ASCII PLY in element {name!r}")
            try:
                arr = np.array(toks[pos : pos + n], dtype=np.float64).reshape(count, len(props))
            except ValueError:
                raise MeshError(f"{src}: ASCII PLY element {name!r} has a non-numeric value") from None
            pos += n
            out[name] = {pname: arr[:, j] for j, (pname, _) in enumerate(props)}
            continue
        cols = {pname: [] for pname, _ in props}
        try:
            for _ in range(count):
                for pname, t in props:
                    if isinstance(t, tuple):
                        k = int(toks[pos])
                        if k < 0:
                            raise ValueError
                        vals = toks[pos + 1 : pos + 1 + k]
                        if len(vals) < k:
                            raise IndexError
                        cols[pname].append([float(x) for x in vals])  # _fan refuses non-integers
                        pos += 1 + k
                    else:
                        cols[pname].append(float(toks[pos]))
                        pos += 1
        except IndexError:
            raise MeshError(f"{src}: truncated ASCII PLY in element {name!r}") from None
        except ValueError:
            raise MeshError(f"{src}: ASCII PLY element {name!r} has a bad value") from None
        out[name] = cols
    return out


def _ply_binary(data, offset, elements, endian, src):
    out = {}
    for name, count, props in elements:
        has_list = any(isinstance(t, tuple) for _, t in props)
        if not props:  # an element with no properties takes no bytes
            out[name] = {}
            continue
        if not has_list:
            dt = np.dtype([(f"p{j}", endian + t) for j, (_, t) in enumerate(props)])
            need = dt.itemsize * count
            if offset + need > len(data):
                raise MeshError(
                    f"{src}: truncated binary PLY in element {name!r} at byte {offset} "
                    f"(needs {need} bytes, {len(data) - offset} left)"
                )
            rec = np.frombuffer(data, dtype=dt, count=count, offset=offset)
            offset += need
            out[name] = {pname: rec[f"p{j}"] for j, (pname, _) in enumerate(props)}
            continue
        out[name], offset = _ply_binary_lists(data, offset, name, count, props, endian, src)
    if offset != len(data):
        pass  # trailing bytes after the last element are tolerated (some writers pad)
    return out


def _ply_binary_lists(data, offset, name, count, props, endian, src):
    """An element with list properties: fast path when every list has the same length."""
    # Guess a uniform layout from the first record, then verify every count.
    layout = []
    pos = offset
    try:
        for pname, t in props:
            if isinstance(t, tuple):
                ct = np.dtype(endian + t[0])
                k = int(np.frombuffer(data, dtype=ct, count=1, offset=pos)[0]) if count else 0
                layout.append((pname, t, k))
                pos += ct.itemsize + k * np.dtype(t[1]).itemsize
            else:
                layout.append((pname, t, None))
                pos += np.dtype(t).itemsize
            if pos > len(data):  # e.g. a list count of 4e9: the first record cannot fit
                raise ValueError
    except ValueError:
        raise MeshError(
            f"{src}: truncated binary PLY in element {name!r} at byte {pos} "
            f"(the first record needs more bytes than the file has)"
        ) from None
    fields = []
    for j, (_name, t, k) in enumerate(layout):
        if k is None:
            fields.append((f"p{j}", endian + t))
        else:
            fields.append((f"c{j}", endian + t[0]))
            if k > 0:
                fields.append((f"p{j}", endian + t[1], (k,)))
    dt = np.dtype(fields)
    need = dt.itemsize * count
    uniform = offset + need <= len(data)
    if uniform:
        rec = np.frombuffer(data, dtype=dt, count=count, offset=offset)
        for j, (_name, _t, k) in enumerate(layout):
            if k is not None and np.any(rec[f"c{j}"] != k):
                uniform = False
    if uniform:
        cols = {}
        for j, (pname, _t, k) in enumerate(layout):
            if k is None:
                cols[pname] = rec[f"p{j}"]
            else:
                cols[pname] = rec[f"p{j}"].reshape(count, k) if k > 0 else np.zeros((count, 0), np.int64)
        return cols, offset + need
    # General path: record by record.
    cols = {pname: [] for pname, _ in props}
    pos = offset
    try:
        for _ in range(count):
            for pname, t in props:
                if isinstance(t, tuple):
                    ct = np.dtype(endian + t[0])
                    it = np.dtype(endian + t[1])
                    k = int(np.frombuffer(data, dtype=ct, count=1, offset=pos)[0])
                    pos += ct.itemsize
                    if k < 0 or pos + k * it.itemsize > len(data):
                        raise ValueError
                    cols[pname].append(np.frombuffer(data, dtype=it, count=k, offset=pos).tolist())
                    pos += k * it.itemsize
                else:
                    it = np.dtype(endian + t)
                    cols[pname].append(float(np.frombuffer(data, dtype=it, count=1, offset=pos)[0]))
                    pos += it.itemsize
    except ValueError:
        raise MeshError(f"{src}: truncated binary PLY in element {name!r} at byte {pos}") from None
    return cols, pos


# --------------------------------------------------------------------------
# trimesh fallback
# --------------------------------------------------------------------------


def _read_trimesh(p: Path, data: bytes, ext: str):
    """A mesh through trimesh, from the bytes already read (its type from ``ext``, not the file's name)."""
    try:
        import trimesh
    except ImportError:
        raise MeshError(
            f"{p}: reading '{ext}' files needs trimesh, the optional 'mesh' extra "
            '(pip install -e ".[mesh]"); built-in readers: .obj .stl .ply'
        ) from None
    import io

    try:
        m = trimesh.load(io.BytesIO(data), file_type=ext.lstrip("."), force="mesh", process=False)
    except Exception as exc:  # trimesh raises many types for bad files
        raise MeshError(f"{p}: trimesh could not read the file ({type(exc).__name__}: {exc})") from None
    v = np.asarray(getattr(m, "vertices", np.zeros((0, 3))), dtype=np.float64)
    f = np.asarray(getattr(m, "faces", np.zeros((0, 3))), dtype=np.int64)
    return v.reshape(-1, 3), f.reshape(-1, 3)


# --------------------------------------------------------------------------
# writers (tests write the same mesh in each format)
# --------------------------------------------------------------------------


def write_obj(path, vertices, faces) -> None:
    """Write an OBJ with ``v`` and 1-based ``f`` lines (full float64 precision)."""
    m = check_mesh(vertices, faces, str(path))
    lines = ["# written by navi_nb"]
    lines += [f"v {x!r} {y!r} {z!r}" for x, y, z in m.vertices.tolist()]
    lines += [f"f {a + 1} {b + 1} {c + 1}" for a, b, c in m.faces.tolist()]
    Path(path).write_text("\n".join(lines) + "\n")


def write_stl(path, vertices, faces, ascii=False) -> None:
    """Write a binary (default) or ASCII STL; coordinates are stored as float32 by the format."""
    m = check_mesh(vertices, faces, str(path))
    tri = m.vertices[m.faces]  # (F, 3, 3)
    n = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    ln = np.linalg.norm(n, axis=1, keepdims=True)
    n = np.divide(n, ln, out=np.zeros_like(n), where=ln > 0)
    if ascii:
        out = ["solid navi_nb"]
        for k in range(len(tri)):
            out.append("  facet normal {:.9g} {:.9g} {:.9g}".format(*n[k]))
            out.append("    outer loop")
            for c in tri[k].astype(np.float32).tolist():
                out.append("      vertex {!r} {!r} {!r}".format(*c))
            out.append("    endloop")
            out.append("  endfacet")
        out.append("endsolid navi_nb")
        Path(path).write_text("\n".join(out) + "\n")
        return
    rec = np.zeros(len(tri), dtype=_STL_DTYPE)
    rec["n"] = n
    rec["v"] = tri
    header = b"navi_nb binary STL".ljust(80, b" ")
    Path(path).write_bytes(header + struct.pack("<I", len(tri)) + rec.tobytes())


def write_ply(path, vertices, faces, binary=True) -> None:
    """Write a PLY (binary little-endian by default, else ASCII) with float64 vertices."""
    m = check_mesh(vertices, faces, str(path))
    fmt = "binary_little_endian" if binary else "ascii"
    head = (
        f"ply\nformat {fmt} 1.0\ncomment written by navi_nb\n"
        f"element vertex {m.n_vertices}\nproperty double x\nproperty double y\nproperty double z\n"
        f"element face {m.n_faces}\nproperty list uchar int vertex_indices\nend_header\n"
    )
    if not binary:
        body = [f"{x!r} {y!r} {z!r}" for x, y, z in m.vertices.tolist()]
        body += [f"3 {a} {b} {c}" for a, b, c in m.faces.tolist()]
        Path(path).write_text(head + "\n".join(body) + "\n")
        return
    fd = np.dtype([("k", "u1"), ("i", "<i4", (3,))])
    frec = np.zeros(m.n_faces, dtype=fd)
    frec["k"] = 3
    frec["i"] = m.faces
    Path(path).write_bytes(head.encode() + m.vertices.astype("<f8").tobytes() + frec.tobytes())
