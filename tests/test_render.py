"""Pictures: the PNG is written and shows what the tracer saw; clear errors otherwise."""
import math
import sys

import numpy as np
import pytest

from navi_nb.errors import NaviError
from navi_nb.sense.render import RenderError, colour_map, panorama, parse_pose, render_view
from sense_helpers import sphere_world

Image = pytest.importorskip("PIL.Image", reason="pictures need Pillow (the image extra)")


def test_render_view_writes_a_png_that_matches_the_trace(tmp_path):
    world, centre = sphere_world(32, radius=1.5, voxel_size=0.25)
    pose = (centre[0], centre[1], centre[2] + 3.0, 0.0)  # 3 m behind (+z) the centre, facing it
    out = tmp_path / "view.png"
    stats = render_view(world, pose, out, max_distance=10.0, slice_size=128)
    img = Image.open(out)
    assert img.size == (stats["width"], stats["height"]) and img.mode == "RGB"
    # straight ahead hits the sphere's near side, 1.5 m away
    assert stats["hit_fraction"] > 0 and abs(stats["depth_min"] - 1.5) < 0.3
    arr = np.asarray(img)
    assert arr.std() > 10  # not blank


def test_colour_map_and_panorama_layout():
    c = colour_map(np.array([0.0, 1.0, 2.0, -1.0]))
    assert c.dtype == np.uint8 and c.shape == (4, 3)
    assert np.array_equal(c[1], c[2]) and np.array_equal(c[0], c[3])  # clipped
    depth = np.zeros((4, 2), np.float32)
    depth[0] = 1.0  # straight ahead
    hit = np.ones((4, 2), bool)
    hit[2, 1] = False
    p = panorama(depth, hit, 2.0, 1)
    assert p.shape == (2, 4, 3)
    assert np.array_equal(p[0, 2], colour_map(0.5))  # straight ahead in the middle column
    assert tuple(p[1, 0]) == (110, 110, 110)  # the miss (azimuth 180) at the left edge


def test_bad_pose_and_missing_pillow(tmp_path, monkeypatch):
    assert np.allclose(parse_pose("1, 2,3,0.5"), [1, 2, 3, 0.5])
    for bad in ("1,2,3", "a,b,c,d", "1,2,3,nan"):
        with pytest.raises(RenderError, match="pose"):
            parse_pose(bad)
    world, _ = sphere_world(8, radius=1.0)
    with pytest.raises(NaviError):
        render_view(world, (0, 0, math.inf, 0), tmp_path / "x.png")
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(RenderError, match=r"navi-nb\[image\]"):
        render_view(world, (1, 1, 1, 0), tmp_path / "y.png")
    assert not (tmp_path / "y.png").exists()


def test_render_command(tmp_path):
    from navi_nb.cli import main

    world, centre = sphere_world(16, radius=1.0, voxel_size=0.25)
    from navi_nb.world.gmdag import save_world

    path = save_world(world, tmp_path / "ball.gmdag")
    out = tmp_path / "ball.png"
    pose = f"{centre[0]},{centre[1]},{centre[2] + 2.0},0"
    assert main(["render", str(path), "--pose", pose, "-o", str(out), "--az", "32", "--el", "8",
                 "--size", "96"]) == 0
    assert Image.open(out).size[0] > 96
    assert main(["render", str(path), "--pose", "1,2", "-o", str(out)]) == 2
    assert main(["render", "no_such_scene", "--pose", pose, "-o", str(out)]) == 2
    assert main(["render", str(path), "-o", str(out)]) == 2  # no spawn points and no pose
