"""Procedural meshes with exact answers, the shipped sample meshes, and the ~35k-triangle benchmark scene.

- ``box_mesh(bmin, bmax)``: a closed, outward-oriented box of 12 triangles.
- ``icosphere(subdivisions, radius, center)``: a closed, outward-oriented
  geodesic sphere (20 * 4**s triangles, vertices on the sphere).
- ``torus_mesh(R, r, n_major, n_minor, center)``: a closed, outward-oriented torus.
- ``sample_mesh_path(name) -> Path``: one of the real meshes shipped in
  ``navi_nb/data/meshes`` (``SAMPLE_MESHES``; MIT-licensed models from trimesh,
  see the README and LICENSE there).
- ``benchmark_mesh_scene() -> (Mesh, classes)``: a room (a thick hollow box:
  outer box plus inward-facing inner box, closed and free of overlaps, so
  inside/outside is well defined) with copies of the shipped meshes scaled and
  placed on its floor, about 35,000 triangles in all. Classes: 1 room shell,
  2 placed objects.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from navi_nb.world.mesh_io import Mesh, MeshError, read_mesh

__all__ = [
    "box_mesh",
    "icosphere",
    "torus_mesh",
    "merge_meshes",
    "sample_mesh_path",
    "SAMPLE_MESHES",
    "SAMPLE_MESH_DIR",
    "benchmark_mesh_scene",
    "TARGET_TRIANGLES",
    "ROOM_MIN",
    "ROOM_MAX",
    "WALL",
]

TARGET_TRIANGLES = 35_000
ROOM_MIN = np.array([-6.0, 0.0, -6.0])  # inner (free) extent of the room, metres
ROOM_MAX = np.array([6.0, 3.0, 6.0])
WALL = 0.25  # wall, floor and ceiling thickness
LIFT = 0.01  # objects float 1 cm above the floor: no coplanar contact

SAMPLE_MESH_DIR = Path(__file__).resolve().parents[1] / "data" / "meshes"
SAMPLE_MESHES = ("fandisk.obj", "featuretype.STL", "rabbit.obj", "teapot.stl", "wallhole.obj")

# (file, footprint size in metres, copies) of the benchmark scene's objects; counts chosen
# so the scene holds about 35k triangles (room 24 + 5750*3 + 3476*3 + 894*4 + 1252*3)
_PLACED = (("fandisk.obj", 1.6, 3), ("featuretype.STL", 1.4, 3), ("teapot.stl", 1.0, 4), ("rabbit.obj", 1.0, 3))


def box_mesh(bmin=(-1.0, -1.0, -1.0), bmax=(1.0, 1.0, 1.0)) -> Mesh:
    """Closed box with outward normals (counter-clockwise seen from outside)."""
    lo = np.asarray(bmin, dtype=np.float64)
    hi = np.asarray(bmax, dtype=np.float64)
    # the faces table reads one box side per row
    # fmt: off
    v = np.array([[lo[0], lo[1], lo[2]], [hi[0], lo[1], lo[2]], [hi[0], hi[1], lo[2]], [lo[0], hi[1], lo[2]],
                  [lo[0], lo[1], hi[2]], [hi[0], lo[1], hi[2]], [hi[0], hi[1], hi[2]], [lo[0], hi[1], hi[2]]])
    f = np.array([[0, 3, 2], [0, 2, 1],   # -z
                  [4, 5, 6], [4, 6, 7],   # +z
                  [0, 1, 5], [0, 5, 4],   # -y
                  [3, 7, 6], [3, 6, 2],   # +y
                  [0, 4, 7], [0, 7, 3],   # -x
                  [1, 2, 6], [1, 6, 5]],  # +x
                 dtype=np.int64)
    # fmt: on
    return Mesh(v, f)


def _sphere_midpoint(verts, mid, i, j):
    """Index of the unit-sphere midpoint of edge (i, j), appended to verts the first time."""
    key = (min(i, j), max(i, j))
    if key not in mid:
        m = verts[i] + verts[j]
        verts.append(m / np.linalg.norm(m))
        mid[key] = len(verts) - 1
    return mid[key]


def icosphere(subdivisions=2, radius=1.0, center=(0.0, 0.0, 0.0)) -> Mesh:
    """Closed geodesic sphere: 20 * 4**subdivisions outward triangles, vertices on the sphere."""
    t = (1.0 + 5.0**0.5) / 2.0
    v = [
        (-1, t, 0),
        (1, t, 0),
        (-1, -t, 0),
        (1, -t, 0),
        (0, -1, t),
        (0, 1, t),
        (0, -1, -t),
        (0, 1, -t),
        (t, 0, -1),
        (t, 0, 1),
        (-t, 0, -1),
        (-t, 0, 1),
    ]
    f = [
        (0, 11, 5),
        (0, 5, 1),
        (0, 1, 7),
        (0, 7, 10),
        (0, 10, 11),
        (1, 5, 9),
        (5, 11, 4),
        (11, 10, 2),
        (10, 7, 6),
        (7, 1, 8),
        (3, 9, 4),
        (3, 4, 2),
        (3, 2, 6),
        (3, 6, 8),
        (3, 8, 9),
        (4, 9, 5),
        (2, 4, 11),
        (6, 2, 10),
        (8, 6, 7),
        (9, 8, 1),
    ]
    verts = [np.array(p, dtype=np.float64) / np.linalg.norm(p) for p in v]
    faces = f
    for _ in range(int(subdivisions)):
        mid = {}  # edge (i, j), i < j -> index of its midpoint on the sphere
        nf = []
        for a, b, c in faces:
            ab, bc, ca = (
                _sphere_midpoint(verts, mid, a, b),
                _sphere_midpoint(verts, mid, b, c),
                _sphere_midpoint(verts, mid, c, a),
            )
            nf += [(a, ab, ca), (b, bc, ab), (c, ca, bc), (ab, bc, ca)]
        faces = nf
    vv = np.array(verts) * float(radius) + np.asarray(center, dtype=np.float64)
    return Mesh(vv, np.array(faces, dtype=np.int64))


def torus_mesh(major=1.0, minor=0.3, n_major=32, n_minor=16, center=(0.0, 0.0, 0.0)) -> Mesh:
    """Closed torus around the y axis with outward normals (2 * n_major * n_minor triangles)."""
    u = np.arange(n_major) * (2 * np.pi / n_major)
    w = np.arange(n_minor) * (2 * np.pi / n_minor)
    uu, ww = np.meshgrid(u, w, indexing="ij")
    rr = major + minor * np.cos(ww)
    v = np.stack([rr * np.cos(uu), minor * np.sin(ww), rr * np.sin(uu)], axis=-1).reshape(-1, 3)
    i, j = np.meshgrid(np.arange(n_major), np.arange(n_minor), indexing="ij")
    a = i * n_minor + j
    b = ((i + 1) % n_major) * n_minor + j
    c = ((i + 1) % n_major) * n_minor + (j + 1) % n_minor
    d = i * n_minor + (j + 1) % n_minor
    f = np.concatenate([np.stack([a, d, c], -1).reshape(-1, 3), np.stack([a, c, b], -1).reshape(-1, 3)])
    return Mesh(v + np.asarray(center, dtype=np.float64), f.astype(np.int64))


def merge_meshes(meshes) -> Mesh:
    """Concatenate meshes into one (indices shifted)."""
    verts, faces, off = [], [], 0
    for m in meshes:
        verts.append(m.vertices)
        faces.append(m.faces + off)
        off += m.vertices.shape[0]
    return Mesh(np.concatenate(verts), np.concatenate(faces))


def _room() -> Mesh:
    outer = box_mesh(ROOM_MIN - WALL, ROOM_MAX + WALL)
    inner = box_mesh(ROOM_MIN, ROOM_MAX)
    inner = Mesh(inner.vertices, inner.faces[:, ::-1].copy())  # facing into the room: its inside is free
    return merge_meshes([outer, inner])


def sample_mesh_path(name: str) -> Path:
    """Path of a shipped sample mesh (one of ``SAMPLE_MESHES``)."""
    if name not in SAMPLE_MESHES:
        raise MeshError(f"sample mesh {name!r}: not one of {', '.join(SAMPLE_MESHES)}")
    path = SAMPLE_MESH_DIR / name
    if not path.is_file():
        raise MeshError(f"sample mesh {name!r}: {path} is missing (an incomplete install of navi_nb)")
    return path


def _fit(mesh: Mesh, size: float, x: float, z: float, yaw: float) -> Mesh:
    """Scale a mesh so its larger footprint side is ``size``, yaw it, stand it on the floor at (x, z).

    Meshes authored z-up (STL parts) keep their axes: only footprint and height matter here.
    """
    v = mesh.vertices - mesh.vertices.min(axis=0)
    ext = v.max(axis=0)
    s = size / max(ext[0], ext[2], 1e-12)
    v = (v - np.array([ext[0], 0.0, ext[2]]) / 2) * s
    c, sn = np.cos(yaw), np.sin(yaw)
    x2 = c * v[:, 0] + sn * v[:, 2]
    z2 = -sn * v[:, 0] + c * v[:, 2]
    v = np.stack([x2 + x, v[:, 1] + ROOM_MIN[1] + LIFT, z2 + z], axis=1)
    return Mesh(v, mesh.faces)


def _slots(n):
    """n floor positions on a grid inside the room, away from the walls."""
    side = int(np.ceil(np.sqrt(n)))
    xs = np.linspace(ROOM_MIN[0] + 1.5, ROOM_MAX[0] - 1.5, side)
    zs = np.linspace(ROOM_MIN[2] + 1.5, ROOM_MAX[2] - 1.5, side)
    return [(xs[k % side], zs[k // side]) for k in range(n)]


def benchmark_mesh_scene():
    """(Mesh, classes int32 (F,)) of about 35,000 triangles: a room with the sample meshes on its floor."""
    room = _room()
    items = []
    for name, size, copies in _PLACED:
        items += [(read_mesh(sample_mesh_path(name)), size)] * copies
    slots = _slots(len(items))
    objects = [_fit(m, size, x, z, yaw=0.7 * k) for k, ((m, size), (x, z)) in enumerate(zip(items, slots))]
    mesh = merge_meshes([room] + objects)
    classes = np.full(mesh.faces.shape[0], 2, np.int32)
    classes[: room.faces.shape[0]] = 1
    return mesh, classes
