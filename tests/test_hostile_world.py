"""Hostile world, sidecar and mesh files: each ends in one clean NaviError line, never a
traceback, a warning first, or a file the package's own loader would refuse."""

from __future__ import annotations

import json
import struct
import warnings

import numpy as np
import pytest
from conftest import compiled_scene

from navi_nb.cli import main
from navi_nb.world import gmdag
from navi_nb.world.compiler import CompileError, compile_mesh
from navi_nb.world.gmdag import GmdagError, from_bytes, load_world, save_world, validate_world
from navi_nb.world.mesh_io import MeshError, read_mesh
from navi_nb.world.sidecar import sidecar_path

NEG_INF_HALF = 0xFC00


def _with_negative_leaves_as(world, half_bits):
    """A copy of `world` whose negative leaves all hold the half-float pattern `half_bits`."""
    nodes = np.array(world.nodes, dtype=np.uint64)
    leaf = gmdag.is_leaf(nodes)
    dist, _ = gmdag.decode_leaf(nodes[leaf])
    idx = np.flatnonzero(leaf)[dist < 0]
    assert idx.size > 0
    nodes[idx] = (nodes[idx] & ~np.uint64(0xFFFF)) | np.uint64(half_bits)
    return gmdag.World(
        resolution=world.resolution, bmin=world.bmin.copy(), voxel_size=world.voxel_size, nodes=nodes
    ), int(idx.min())


def _one_error_line(err):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and "Traceback" not in err and "Warning" not in err
    return lines[0]


# --------------------------------------------------------------------------
# -inf leaves
# --------------------------------------------------------------------------


def test_negative_infinity_leaves_fail_validation_in_every_load_mode(tmp_path):
    bad, _ = _with_negative_leaves_as(compiled_scene("box", 64), NEG_INF_HALF)
    path = tmp_path / "neginf.gmdag"
    save_world(bad, path, sidecar=False)
    for mmap in (False, True):
        with pytest.raises(GmdagError, match=r"neginf\.gmdag: leaf \d+ holds a -inf distance") as exc:
            load_world(path, mmap=mmap)
        assert "\n" not in str(exc.value)
    with pytest.raises(GmdagError, match="-inf"):
        from_bytes(bad.to_bytes(), source="mem")
    with pytest.raises(GmdagError, match="-inf"):
        validate_world(bad)
    loaded = load_world(path, validate=False)  # header checks only: the documented fast path
    assert loaded.node_count == bad.node_count


def test_finite_and_positive_infinity_leaves_still_load():
    # The documented quirk: +inf (flagged reads 0, unflagged stays far) is legal; -65504 is finite.
    for bits in (0x7C00, 0xFBFF):
        w, _ = _with_negative_leaves_as(compiled_scene("box", 16), bits)
        validate_world(w)


def test_inspect_names_the_negative_infinity_leaf(tmp_path, capsys):
    bad, _ = _with_negative_leaves_as(compiled_scene("box", 16), NEG_INF_HALF)
    path = tmp_path / "neginf.gmdag"
    save_world(bad, path, sidecar=False)
    assert main(["inspect", str(path)]) == 1
    out = capsys.readouterr().out
    assert "INVALID" in out and "-inf distance" in out


# --------------------------------------------------------------------------
# header bounds that overflow float32
# --------------------------------------------------------------------------


def _header_file(tmp_path, bmin, voxel, resolution=2):
    leaf = int(gmdag.encode_leaf(0, 1.0))
    data = gmdag.HEADER.pack(gmdag.MAGIC, 1, resolution, *bmin, voxel, 1) + leaf.to_bytes(8, "little")
    path = tmp_path / "h.gmdag"
    path.write_bytes(data)
    return path


def test_header_whose_maximum_corner_overflows_is_refused_without_warnings(tmp_path):
    path = _header_file(tmp_path, (3e38, 0.0, 0.0), 1e38)  # bmin finite, bmin + extent is not
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(GmdagError, match="bounds maximum overflows float32"):
            load_world(path)
        with pytest.raises(GmdagError, match="overflows float32"):
            load_world(_header_file(tmp_path, (0.0, 0.0, 0.0), 3e38, resolution=4))


def test_corner_sampled_world_whose_field_origin_overflows_is_refused_without_warnings(tmp_path):
    """No sidecar: another writer's file, read as corner-sampled, so the field starts half a voxel below
    bmin; at bmin = -3.4e38 with a 1e38 voxel that origin is no float32 (the tracer's cast warned)."""
    path = _header_file(tmp_path, (-3.4e38, 0.0, 0.0), 1e38)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(GmdagError, match="field origin"):
            load_world(path)


# --------------------------------------------------------------------------
# sidecars with wrong types
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sidecar, key",
    [
        ({"spawn_points": "abc"}, "spawn_points"),
        ({"class_names": 5}, "class_names"),
        ({"spawn_points": [[1, 2]]}, "spawn_points"),
        ({"spawn_points": [[1, 2, "x"]]}, "spawn_points"),
        ({"spawn_points": [[1, 2, 1e300]]}, "spawn_points"),
        ({"spawn_points": [[1, 2, True]]}, "spawn_points"),
        ({"class_names": []}, "class_names"),
        ({"class_names": ["none", 3]}, "class_names"),
        ({"bounds_of_interest": "ab"}, "bounds_of_interest"),
        ({"bounds_of_interest": [[0, 0, 0], [1, 1]]}, "bounds_of_interest"),
        ({"bounds_of_interest": [[2, 0, 0], [1, 1, 1]]}, "bounds_of_interest"),
        ({"scene": ["x"]}, "scene"),
        ({"seed": 1.5}, "seed"),
        ({"triangles": -1}, "triangles"),
        ({"compiler": 3}, "compiler"),
    ],
)
def test_sidecar_with_wrong_types_is_refused_at_load(tmp_path, sidecar, key):
    path = tmp_path / "w.gmdag"
    save_world(compiled_scene("box", 16), path, sidecar=False)
    sidecar_path(path).write_text(json.dumps(sidecar))
    with pytest.raises(GmdagError, match=rf"w\.gmdag\.json: sidecar key '{key}' must be") as exc:
        load_world(path)
    assert "\n" not in str(exc.value)


def test_sidecar_non_finite_json_tokens_and_deep_nesting_are_refused(tmp_path):
    path = tmp_path / "w.gmdag"
    save_world(compiled_scene("box", 16), path, sidecar=False)
    sidecar_path(path).write_text('{"spawn_points": [[0, NaN, 0]]}')
    with pytest.raises(GmdagError, match="spawn_points"):
        load_world(path)
    sidecar_path(path).write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(GmdagError, match="sidecar is not valid JSON"):
        load_world(path)


def test_compiled_sidecar_round_trips_and_its_values_are_used(tmp_path):
    w = compiled_scene("box", 16)
    path = tmp_path / "w.gmdag"
    save_world(w, path)
    back = load_world(path)
    assert back.sidecar == json.loads(json.dumps(w.sidecar))
    np.testing.assert_array_equal(back.spawn_points, np.asarray(w.sidecar["spawn_points"], np.float32))
    assert back.class_names == w.sidecar["class_names"]


def test_render_with_a_bad_sidecar_prints_one_error_line(tmp_path, capsys):
    pytest.importorskip("PIL")
    path = tmp_path / "w.gmdag"
    save_world(compiled_scene("box", 16), path, sidecar=False)
    sidecar_path(path).write_text(json.dumps({"spawn_points": [[1, 2]]}))
    assert main(["render", str(path), "-o", str(tmp_path / "v.png")]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "spawn_points" in line and not (tmp_path / "v.png").exists()


# --------------------------------------------------------------------------
# meshes
# --------------------------------------------------------------------------


def _binary_stl(path, triangles):
    rec = np.zeros(len(triangles), dtype=[("n", "<f4", 3), ("v", "<f4", (3, 3)), ("attr", "<u2")])
    rec["v"] = triangles
    path.write_bytes(b" " * 80 + struct.pack("<I", len(triangles)) + rec.tobytes())
    return path


def test_compile_refuses_a_mesh_whose_cube_overflows_float32(tmp_path, capsys):
    stl = _binary_stl(tmp_path / "big.stl", [[[-3e38, 0, 0], [3e38, 0, 0], [0, 3e38, 0]]])
    out = tmp_path / "big.gmdag"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy overflow warning before the error
        assert main(["compile", str(stl), "-o", str(out), "--resolution", "16", "--no-progress"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "big.stl" in line and "float32" in line
    assert not out.exists()


@pytest.mark.parametrize("scale", [1e300, 1e38])
def test_huge_mesh_coordinates_are_refused_before_any_warning(tmp_path, scale):
    obj = tmp_path / "huge.obj"
    obj.write_text(f"v {-scale!r} 0 0\nv {scale!r} 0 0\nv 0 {scale!r} 0\nf 1 2 3\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(CompileError, match="would not fit float32"):
            compile_mesh(obj, 16)
        stl = _binary_stl(tmp_path / "huge.stl", [[[-3e38, 0, 0], [3e38, 0, 0], [0, 1.0, 0]]])
        m = read_mesh(stl)  # the reader stays faithful: three distinct corners
        assert m.n_vertices == 3


def _ply(head_faces, face_bytes):
    verts = np.array([0, 0, 0, 1, 0, 0, 0, 1, 0], "<f4").tobytes()
    return (
        b"ply\nformat binary_little_endian 1.0\nelement vertex 3\nproperty float x\nproperty float y\n"
        b"property float z\nelement face 1\n" + head_faces + b"\nend_header\n" + verts + face_bytes
    )


def test_ply_list_count_of_four_billion_is_a_mesh_error(tmp_path):
    p = tmp_path / "big.ply"
    p.write_bytes(_ply(b"property list uint int vertex_indices", struct.pack("<I3i", 4_000_000_000, 0, 1, 2)))
    with pytest.raises(MeshError, match=r"big\.ply: truncated binary PLY in element 'face'"):
        read_mesh(p)


def test_ply_float_face_indices_must_be_integers(tmp_path):
    p = tmp_path / "f.ply"
    p.write_bytes(_ply(b"property list uchar float vertex_indices", bytes([3]) + struct.pack("<3f", 0, 1.5, 2)))
    with pytest.raises(MeshError, match="non-integer vertex index 1.5"):
        read_mesh(p)
    p.write_bytes(_ply(b"property list uchar float vertex_indices", bytes([3]) + struct.pack("<3f", 0, 1, 2)))
    np.testing.assert_array_equal(read_mesh(p).faces, [[0, 1, 2]])  # integral floats are fine
    a = tmp_path / "a.ply"
    a.write_text(
        "ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\nproperty float z\n"
        "element face 1\nproperty list uchar float vertex_indices\nend_header\n"
        "0 0 0\n1 0 0\n0 1 0\n3 0 1.5 2\n"
    )
    with pytest.raises(MeshError, match="non-integer vertex index 1.5"):
        read_mesh(a)


def test_obj_file_ending_inside_a_continuation_is_refused(tmp_path):
    p = tmp_path / "c.obj"
    p.write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nf 1 2 3\nf 1 2 \\\n")
    with pytest.raises(MeshError, match=r"c\.obj: line 6: the file ends inside a '\\' continuation"):
        read_mesh(p)
    p.write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 \\\n 2 3\n")  # a continuation that ends is joined
    np.testing.assert_array_equal(read_mesh(p).faces, [[0, 1, 2]])


# --------------------------------------------------------------------------
# the CLI's error line
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["x[/].gmdag", "[bold]x.gmdag", "x[/]y[red].gmdag"])
def test_markup_in_user_text_prints_as_typed(tmp_path, capsys, name):
    assert main(["inspect", str(tmp_path / name)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line == f"error: {tmp_path / name}: no such file"


def test_long_error_lines_are_not_wrapped(tmp_path, capsys):
    long_name = tmp_path / ("a_rather_long_folder_name_" * 4) / "missing_world_file_with_a_long_name.gmdag"
    assert main(["inspect", str(long_name)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert len(line) > 120 and line == f"error: {long_name}: no such file"


def test_inspect_of_a_valid_file_with_markup_in_its_name(tmp_path, capsys):
    (tmp_path / "w[").mkdir()
    path = tmp_path / "w[" / "]x.gmdag"  # the path holds "[/]", rich's closing tag
    save_world(compiled_scene("box", 16), path)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "valid" in out and "w[/]x.gmdag" in out.replace("\n", "").replace(" ", "")


def test_markup_in_a_run_name_prints_as_typed(tmp_path, capsys):
    assert (
        main(
            [
                "train",
                "--scenes",
                "box",
                "--name",
                "x[/]y",
                "--total-steps",
                "64",
                "--no-progress",
                "--run-dir",
                str(tmp_path),
            ]
        )
        == 2
    )
    line = _one_error_line(capsys.readouterr().err)
    assert "'x[/]y'" in line
    assert list(tmp_path.iterdir()) == []  # refused before any run folder is made


def test_mesh_with_one_far_vertex_compiles_without_a_division_error(tmp_path):
    """Fuzz case mesh/seed 0/39: one coordinate near 1e30 beside unit ones. Points ~1e29 from a unit
    triangle make the closest-point denominators (|ab|^2, the area) cancel to 0 in float64."""
    from navi_nb.errors import NaviError
    from navi_nb.fuzz import mesh

    case = mesh.make_mesh_case(mesh.mesh_bases(), 0, 39)
    try:
        mesh.run_mesh_case(case, str(tmp_path), np.random.default_rng([0, 39, 1]))
    except NaviError:
        pass  # a clear refusal is fine; a ZeroDivisionError/SystemError is the bug
