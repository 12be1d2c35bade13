"""Mesh readers and writers: the same box through every format, OBJ/PLY/STL corner cases, bad files."""

import struct
from pathlib import Path

import numpy as np
import pytest

from navi_nb.errors import NaviError
from navi_nb.world.mesh_io import MeshError, check_mesh, read_mesh, write_obj, write_ply, write_stl
from navi_nb.world.mesh_scene import SAMPLE_MESHES, box_mesh, sample_mesh_path


def triangle_set(vertices, faces):
    """Triangles as a sorted list of coordinate tuples, each rotated to start at its smallest corner.

    Independent of vertex numbering and of which corner a face starts at, but
    keeps orientation (a reversed triangle compares different).
    """
    out = []
    for tri in np.asarray(vertices)[np.asarray(faces)]:
        corners = [tuple(float(x) for x in c) for c in tri]
        k = corners.index(min(corners))
        out.append(tuple(corners[k:] + corners[:k]))
    return sorted(out)


BOX = box_mesh((-1.0, -0.5, -2.0), (1.5, 0.75, 0.25))  # coordinates exact in float32


@pytest.mark.parametrize(
    "writer,kwargs,name",
    [
        (write_obj, {}, "box.obj"),
        (write_stl, {}, "box.stl"),
        (write_stl, {"ascii": True}, "box_ascii.stl"),
        (write_ply, {}, "box.ply"),
        (write_ply, {"binary": False}, "box_ascii.ply"),
    ],
)
def test_same_box_through_every_format(tmp_path, writer, kwargs, name):
    path = tmp_path / name
    writer(path, BOX.vertices, BOX.faces, **kwargs)
    m = read_mesh(path)
    assert m.vertices.dtype == np.float64 and m.faces.dtype == np.int64
    assert m.faces.shape == (12, 3)
    assert triangle_set(m.vertices, m.faces) == triangle_set(BOX.vertices, BOX.faces)
    # STL repeats corners per facet: equal corners must be merged back into 8 vertices
    assert m.vertices.shape == (8, 3)


def test_obj_ngons_negative_indices_and_forms(tmp_path):
    text = """# a quad and a pentagon, several index forms
o thing
v 0 0 0
v 1 0 0 1.0
v 1 1 0
v 0 1 0
vt 0 0
vn 0 0 1
f 1/1/1 2/1/1 3//1 4   # quad -> two triangles
v 2 0 0
v 3 0 0
v 3 1 0
v 2.5 2 0
v 2 1 0
f -5 -4 -3 \\
  -2 -1
l 1 2
usemtl none
"""
    path = tmp_path / "shapes.obj"
    path.write_text(text)
    m = read_mesh(path)
    expected = np.array([[0, 1, 2], [0, 2, 3], [4, 5, 6], [4, 6, 7], [4, 7, 8]])
    np.testing.assert_array_equal(m.faces, expected)
    assert m.vertices.shape == (9, 3)
    np.testing.assert_array_equal(m.vertices[7], [2.5, 2.0, 0.0])


def test_binary_stl_whose_header_starts_with_solid(tmp_path):
    tri = np.array([[[0, 0, 0], [1, 0, 0], [0, 1, 0]], [[0, 0, 0], [0, 1, 0], [0, 0, 1]]], np.float32)
    rec = b"".join(struct.pack("<3f", 0, 0, 0) + t.tobytes() + b"\0\0" for t in tri)
    path = tmp_path / "solid_header.stl"
    path.write_bytes(b"solid looks like ascii".ljust(80, b" ") + struct.pack("<I", 2) + rec)
    m = read_mesh(path)
    assert m.faces.shape == (2, 3) and m.vertices.shape == (4, 3)
    assert triangle_set(m.vertices, m.faces) == triangle_set(tri.reshape(-1, 3), np.arange(6).reshape(2, 3))


def test_ply_extra_properties_lists_and_elements(tmp_path):
    # vertex with normals and colours, a face with an extra list and a scalar, an extra element
    verts = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], np.float64)
    head = (
        b"ply\nformat binary_little_endian 1.0\ncomment test\n"
        b"element vertex 4\nproperty float x\nproperty float y\nproperty float z\n"
        b"property float nx\nproperty float ny\nproperty float nz\n"
        b"property uchar red\nproperty uchar green\nproperty uchar blue\n"
        b"element face 2\nproperty uchar flags\nproperty list uchar int vertex_indices\n"
        b"property list uchar float texcoord\nproperty int material\n"
        b"element edge 1\nproperty int vertex1\nproperty int vertex2\nend_header\n"
    )
    body = b""
    for v in verts:
        body += struct.pack("<3f3f3B", *v, 0, 0, 1, 255, 0, 0)
    # first face: a quad with a 2-value texcoord list; second: a triangle with a 6-value list
    body += struct.pack("<B", 7) + struct.pack("<B4i", 4, 0, 1, 2, 3) + struct.pack("<B2f", 2, 0.5, 0.5)
    body += struct.pack("<i", 3)
    body += struct.pack("<B", 1) + struct.pack("<B3i", 3, 0, 2, 3) + struct.pack("<B6f", 6, *range(6))
    body += struct.pack("<i", 4)
    body += struct.pack("<2i", 0, 1)
    path = tmp_path / "extra.ply"
    path.write_bytes(head + body)
    m = read_mesh(path)
    np.testing.assert_array_equal(m.faces, [[0, 1, 2], [0, 2, 3], [0, 2, 3]])
    np.testing.assert_array_equal(m.vertices, verts)


def test_ply_uniform_fast_path_and_big_endian(tmp_path):
    verts = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], np.float64)
    faces = np.array([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]])
    for endian, tag in (("<", "binary_little_endian"), (">", "binary_big_endian")):
        head = (
            f"ply\nformat {tag} 1.0\nelement vertex 4\nproperty double x\nproperty double y\n"
            "property double z\nproperty uchar quality\n"
            "element face 4\nproperty list uchar uint vertex_indices\nproperty ushort tag\n"
            "end_header\n"
        ).encode()
        body = b"".join(struct.pack(endian + "3dB", *v, 9) for v in verts)
        body += b"".join(struct.pack(endian + "B3IH", 3, *f, 5) for f in faces)
        path = tmp_path / f"t{tag}.ply"
        path.write_bytes(head + body)
        m = read_mesh(path)
        np.testing.assert_array_equal(m.faces, faces)
        np.testing.assert_array_equal(m.vertices, verts)


def test_ascii_ply_polygons(tmp_path):
    path = tmp_path / "quad.ply"
    path.write_text(
        "ply\nformat ascii 1.0\nelement vertex 5\nproperty float x\nproperty float y\n"
        "property float z\nproperty float confidence\nelement face 2\n"
        "property list uchar int vertex_index\nend_header\n"
        "0 0 0 1\n1 0 0 1\n1 1 0 1\n0 1 0 1\n2 2 2 0.5\n4 0 1 2 3\n3 1 4 2\n"
    )
    m = read_mesh(path)
    np.testing.assert_array_equal(m.faces, [[0, 1, 2], [0, 2, 3], [1, 4, 2]])


BAD_FILES = {
    "empty.obj": b"",
    "nofaces.obj": b"v 0 0 0\nv 1 0 0\nv 0 1 0\n",
    "range.obj": b"v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 4\n",
    "zero.obj": b"v 0 0 0\nv 1 0 0\nv 0 1 0\nf 0 1 2\n",
    "neg.obj": b"v 0 0 0\nv 1 0 0\nv 0 1 0\nf -1 -2 -4\n",
    "nan.obj": b"v 0 0 nan\nv 1 0 0\nv 0 1 0\nf 1 2 3\n",
    "inf.obj": b"v 0 0 inf\nv 1 0 0\nv 0 1 0\nf 1 2 3\n",
    "badvert.obj": b"v 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n",
    "twocorners.obj": b"v 0 0 0\nv 1 0 0\nf 1 2\n",
    "garbage.obj": b"v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 x\n",
    "short.stl": b"\x00" * 40,
    "trunc.stl": b"bin".ljust(80, b" ") + struct.pack("<I", 3) + b"\x00" * 60,
    "zero.stl": b"bin".ljust(80, b" ") + struct.pack("<I", 0),
    "trunc_ascii.stl": b"solid x\nfacet normal 0 0 1\nouter loop\nvertex 0 0 0\nvertex 1 0 0\n",
    "twovert_ascii.stl": b"solid x\nfacet normal 0 0 1\nouter loop\nvertex 0 0 0\nvertex 1 0 0\nendloop\n"
    b"endfacet\nendsolid\n",
    "nofacets_ascii.stl": b"solid x\nendsolid x\n",
    "magic.ply": b"plx\nformat ascii 1.0\nend_header\n",
    "noend.ply": b"ply\nformat ascii 1.0\nelement vertex 3\n",
    "format.ply": b"ply\nformat binary_middle_endian 1.0\nelement vertex 0\nelement face 0\nend_header\n",
    "type.ply": b"ply\nformat ascii 1.0\nelement vertex 1\nproperty quad x\nend_header\n",
    "noface.ply": b"ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\n"
    b"property float z\nend_header\n0 0 0\n",
    "trunc_ascii.ply": b"ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\n"
    b"property float z\nelement face 1\nproperty list uchar int vertex_indices\nend_header\n"
    b"0 0 0\n1 0 0\n0 1 0\n3 0 1\n",
    "trunc_bin.ply": b"ply\nformat binary_little_endian 1.0\nelement vertex 3\nproperty float x\n"
    b"property float y\nproperty float z\nelement face 1\n"
    b"property list uchar int vertex_indices\nend_header\n" + b"\x00" * 20,
    "range.ply": b"ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\n"
    b"property float z\nelement face 1\nproperty list uchar int vertex_indices\nend_header\n"
    b"0 0 0\n1 0 0\n0 1 0\n3 0 1 3\n",
    "unknown.xyzmesh": b"\x00\x01 not a mesh",
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_malformed_files_raise_mesh_error(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(BAD_FILES[name])
    with pytest.raises(MeshError) as info:
        read_mesh(path)
    assert isinstance(info.value, NaviError)
    assert name in str(info.value)  # the message names the file


def test_missing_file_and_bad_arrays(tmp_path):
    with pytest.raises(MeshError, match="cannot read"):
        read_mesh(tmp_path / "nope.obj")
    with pytest.raises(MeshError, match="shape"):
        check_mesh(np.zeros((3, 2)), [[0, 1, 2]])
    with pytest.raises(MeshError, match="empty"):
        check_mesh(np.zeros((0, 3)), np.zeros((0, 3), int))
    with pytest.raises(MeshError, match="integers"):
        check_mesh(np.zeros((3, 3)), [[0.5, 1, 2]])
    with pytest.raises(MeshError, match="out of range"):
        check_mesh(np.zeros((3, 3)), [[0, 1, -1]])


def test_obj_error_names_the_line(tmp_path):
    path = tmp_path / "l.obj"
    path.write_bytes(b"# c\nv 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 9\n")
    with pytest.raises(MeshError, match="line 5"):
        read_mesh(path)


def test_fuzzed_meshes_never_crash(tmp_path):
    """Random byte flips and truncations of valid files end in MeshError or a valid mesh."""
    rng = np.random.default_rng(1)
    sources = {}
    for name, writer, kw in (
        ("a.obj", write_obj, {}),
        ("b.stl", write_stl, {}),
        ("c.ply", write_ply, {}),
        ("d.ply", write_ply, {"binary": False}),
        ("e.stl", write_stl, {"ascii": True}),
    ):
        write_path = tmp_path / name
        writer(write_path, BOX.vertices, BOX.faces, **kw)
        sources[name] = write_path.read_bytes()
    outcomes = {"ok": 0, "error": 0}
    for trial in range(300):
        name = list(sources)[trial % len(sources)]
        data = bytearray(sources[name])
        if trial % 3 == 0:
            data = data[: int(rng.integers(0, len(data)))]
        else:
            for _ in range(int(rng.integers(1, 6))):
                data[int(rng.integers(0, len(data)))] = int(rng.integers(0, 256))
        path = tmp_path / f"fuzz{trial}{Path(name).suffix}"
        path.write_bytes(bytes(data))
        try:
            m = read_mesh(path)
        except MeshError:
            outcomes["error"] += 1
            continue
        assert np.isfinite(m.vertices).all()
        assert m.faces.min() >= 0 and m.faces.max() < len(m.vertices)
        outcomes["ok"] += 1
    assert outcomes["ok"] > 0 and outcomes["error"] > 0


@pytest.mark.parametrize(
    "name,faces",
    [("fandisk.obj", 5750), ("featuretype.STL", 3476), ("teapot.stl", 894), ("wallhole.obj", 66), ("rabbit.obj", 1252)],
)
def test_sample_meshes_read(name, faces):
    m = read_mesh(sample_mesh_path(name))
    assert m.faces.shape == (faces, 3)
    assert np.isfinite(m.vertices).all() and m.faces.min() >= 0 and m.faces.max() < len(m.vertices)


def test_sample_mesh_path_names_the_set():
    assert sorted(SAMPLE_MESHES) == sorted(
        p.name for p in sample_mesh_path("teapot.stl").parent.iterdir() if p.suffix.lower() in (".obj", ".stl")
    )
    with pytest.raises(MeshError, match="'bunny.obj'"):
        sample_mesh_path("bunny.obj")


def test_sample_meshes_agree_with_trimesh():
    trimesh = pytest.importorskip("trimesh", reason="trimesh (the 'mesh' extra) is not installed")
    for name in ("fandisk.obj", "featuretype.STL", "teapot.stl"):
        ours = read_mesh(sample_mesh_path(name))
        theirs = trimesh.load(str(sample_mesh_path(name)), force="mesh")
        area_ours = (
            0.5
            * np.linalg.norm(
                np.cross(*(ours.vertices[ours.faces][:, 1:] - ours.vertices[ours.faces][:, :1]).transpose(1, 0, 2)),
                axis=1,
            ).sum()
        )
        assert abs(area_ours - theirs.area) <= 1e-6 * theirs.area, name


def test_other_formats_without_trimesh_name_the_extra(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "trimesh", None)  # import trimesh now raises ImportError
    path = tmp_path / "model.glb"
    path.write_bytes(b"glTF")
    with pytest.raises(MeshError, match="'mesh' extra"):
        read_mesh(path)


def test_other_formats_through_trimesh(tmp_path):
    trimesh = pytest.importorskip("trimesh", reason="trimesh (the 'mesh' extra) is not installed")
    path = tmp_path / "box.off"
    trimesh.Trimesh(BOX.vertices, BOX.faces, process=False).export(str(path))
    m = read_mesh(path)
    assert triangle_set(m.vertices, m.faces) == triangle_set(BOX.vertices, BOX.faces)
