"""`navi-nb compile / inspect / scenes`: outputs, and clean errors with non-zero exits."""

from __future__ import annotations

import numpy as np
import pytest

from navi_nb.cli import main
from navi_nb.world.gmdag import load_world


def test_scenes_lists_all(capsys):
    assert main(["scenes"]) == 0
    out = capsys.readouterr().out
    for name in ("box", "pillars", "house", "maze", "clutter"):
        assert name in out
    assert "default" in out


def test_compile_scene_then_inspect(tmp_path, capsys):
    out = tmp_path / "box.gmdag"
    assert main(["compile", "--scene", "box", "-o", str(out), "--resolution", "32", "--no-progress"]) == 0
    text = capsys.readouterr().out
    for word in ("resolution", "nodes", "bytes", "ratio to dense", "time"):
        assert word in text
    world = load_world(out)
    assert world.resolution == 32 and world.sidecar["scene"] == "box"
    assert len(world.spawn_points) > 0
    # written corner-sampled (as other readers read): the scene's cube moved up half a voxel
    from navi_nb.world.compiler import compile_scene

    own = compile_scene("box", 32)
    assert world.sidecar["sample"] == "corner" and "voxel corners" in text
    assert np.array_equal(world.nodes, own.nodes)
    assert np.allclose(world.bmin, own.bmin + 0.5 * own.voxel_size, atol=0)
    out2 = tmp_path / "box_centre.gmdag"
    assert (
        main(
            ["compile", "--scene", "box", "-o", str(out2), "--resolution", "32", "--no-progress", "--sample", "centre"]
        )
        == 0
    )
    assert "voxel centres" in capsys.readouterr().out
    assert np.array_equal(load_world(out2).bmin, own.bmin) and load_world(out2).sidecar["sample"] == "centre"
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "valid" in text and "GDAG / 1" in text and "by depth" in text


def test_compile_mesh_file(tmp_path, capsys):
    from navi_nb.world.mesh_io import write_obj
    from navi_nb.world.mesh_scene import box_mesh

    m = box_mesh()
    write_obj(tmp_path / "cube.obj", m.vertices, m.faces)
    out = tmp_path / "cube.gmdag"
    assert main(["compile", str(tmp_path / "cube.obj"), "-o", str(out), "--resolution", "32", "--no-progress"]) == 0
    assert "12" in capsys.readouterr().out  # triangles
    w = load_world(out)
    assert w.sidecar["triangles"] == 12
    assert w.bmin[0] < -1.0 and w.bmax[0] > 1.0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["compile", "-o", "x.gmdag"], "either a MESH file or --scene"),
        (["compile", "--scene", "attic", "-o", "{tmp}/x.gmdag"], "unknown scene"),
        (["compile", "--scene", "box", "-o", "{tmp}/x.gmdag", "--resolution", "100"], "power of two"),
        (["compile", "--scene", "box", "-o", "{tmp}/x.txt"], "should end in .gmdag"),
        (["compile", "--scene", "box", "-o", "{tmp}/nodir/x.gmdag"], "does not exist"),
        (["compile", "{tmp}/missing.obj", "-o", "{tmp}/x.gmdag"], "does not exist"),
        (["compile", "{tmp}/garbage.obj", "-o", "{tmp}/x.gmdag"], ""),
        (["inspect", "{tmp}/missing.gmdag"], "no such file"),
        (["inspect", "{tmp}/garbage.gmdag"], "wrong magic"),
        (["inspect", "{tmp}/garbage.obj"], "a mesh, not a .gmdag world: compile it first"),
        (["scenes", "--bogus"], None),
    ],
)
def test_bad_arguments_exit_nonzero_with_a_clear_message(tmp_path, capsys, argv, message):
    (tmp_path / "garbage.obj").write_text("v 0 0 0\nf 1 2 3\n")
    (tmp_path / "garbage.gmdag").write_bytes(b"NOPE" + bytes(40))
    argv = [a.format(tmp=tmp_path) for a in argv]
    if message is None:  # argparse's own usage error
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code != 0
        return
    code = main(argv)
    err = capsys.readouterr().err.replace("\n", "")  # rich wraps long lines
    assert code != 0
    assert "error" in err and message in err
    assert "Traceback" not in err


def test_open_flat_mesh_compiles(tmp_path, capsys):
    """One triangle: an open, flat surface. Positive on both sides, semantic 1 near it."""
    (tmp_path / "tri.obj").write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n")
    out = tmp_path / "tri.gmdag"
    assert main(["compile", str(tmp_path / "tri.obj"), "-o", str(out), "--resolution", "32", "--no-progress"]) == 0
    w = load_world(out)
    from navi_nb.world.query import distance

    d, s = distance(w, np.array([[0.25, 0.25, 0.1], [0.25, 0.25, -0.1], [0.25, 0.25, 0.0]]))
    np.testing.assert_allclose(d, [0.1, 0.1, 0.0], atol=0.5 * w.voxel_size)
    assert s[2] == 1 and w.sidecar["closed"] is False


def test_inspect_reports_an_invalid_file(tmp_path, capsys):
    from navi_nb.world import gmdag

    w = gmdag.World(
        resolution=2,
        bmin=np.zeros(3, np.float32),
        voxel_size=1.0,
        nodes=np.array([int(gmdag.encode_inner(1, 1)), 0], np.uint64),
    )
    path = tmp_path / "cycle.gmdag"
    path.write_bytes(w.to_bytes())
    assert main(["inspect", str(path)]) == 1
    assert "INVALID" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, named, help_of",
    [
        (["train", "--total-steps", "inf"], "--total-steps", "navi-nb train"),
        (["train", "--total-steps", "nan"], "--total-steps", "navi-nb train"),
        (["train", "--actors", "many"], "--actors", "navi-nb train"),
        (["eval", "runs/x", "--episodes"], "--episodes", "navi-nb eval"),
        (["scenes", "--bogus"], "--bogus", "navi-nb scenes"),
        (["render", "box", "--sensor-az", "x"], "--sensor-az", "navi-nb render"),
        (["bench", "train", "--shards", "two"], "--shards", "navi-nb bench train"),
        (["frobnicate"], "frobnicate", "navi-nb"),
        ([], "COMMAND", "navi-nb"),
    ],
)
def test_a_refused_flag_is_one_line_naming_it_and_where_the_flags_are_listed(tmp_path, capsys, argv, named, help_of):
    """argparse's refusals (a value of the wrong type, an unknown flag or command) are one line, exit 2, without
    the usage block argparse prints above them, naming the flag and the help that lists the flags."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert "usage:" not in captured.err and captured.out == ""
    assert named in lines[0] and f"`{help_of} --help`" in lines[0]
