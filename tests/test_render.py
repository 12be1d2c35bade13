"""Pictures: the PNG is written and shows what the tracer saw; clear errors otherwise."""

import math
import re
import sys

import numpy as np
import pytest
from sense_helpers import sphere_world

from navi_nb.errors import NaviError
from navi_nb.sense.render import (
    MISS_COLOUR,
    RenderError,
    colour_map,
    panorama,
    parse_pose,
    render_view,
)

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
    with pytest.raises(RenderError, match=re.escape('install the image extra: pip install -e ".[image]"')):
        render_view(world, (1, 1, 1, 0), tmp_path / "y.png")
    assert not (tmp_path / "y.png").exists()


def test_render_command(tmp_path):
    from navi_nb.cli import main

    world, centre = sphere_world(16, radius=1.0, voxel_size=0.25)
    from navi_nb.world.gmdag import save_world

    path = save_world(world, tmp_path / "ball.gmdag")
    out = tmp_path / "ball.png"
    pose = f"{centre[0]},{centre[1]},{centre[2] + 2.0},0"
    assert (
        main(
            [
                "render",
                str(path),
                "--pose",
                pose,
                "-o",
                str(out),
                "--sensor-az",
                "32",
                "--sensor-el",
                "8",
                "--size",
                "96",
            ]
        )
        == 0
    )
    assert Image.open(out).size[0] > 96
    assert main(["render", str(path), "--pose", "1,2", "-o", str(out)]) == 2
    assert main(["render", "no_such_scene", "--pose", pose, "-o", str(out)]) == 2
    assert main(["render", str(path), "-o", str(out)]) == 2  # no spawn points and no pose


def test_a_sensor_too_large_for_the_ram_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    """``render --sensor-az 65536 --sensor-el 65536`` (and the earlier ``--az/--el``) is refused before the
    Sensor allocates its 4.3 billion rays' directions (a 32 GiB MemoryError before), naming the flags; the
    estimate is the Sensor's own construction peak, and the Sensor refuses it by itself in any command."""
    from navi_nb.cli import main
    from navi_nb.sense.sensor import BUILD_BYTES_PER_RAY, SenseError, Sensor, sensor_ram_estimate

    monkeypatch.setattr("navi_nb.ram.available_ram", lambda: 64 * 2**30)  # the same on a larger machine
    out = tmp_path / "view.png"
    for flags in (["--sensor-az", "65536", "--sensor-el", "65536"], ["--az", "65536", "--el", "65536"]):
        assert main(["render", "box", "-o", str(out), *flags]) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert "--sensor-az 65536 --sensor-el 65536" in err, err
        assert "would need about 192.00 GiB of RAM, more than the 64.00 GiB available" in err, err
        assert not out.exists()
    assert sensor_ram_estimate(1000, 100) == 100_000 * BUILD_BYTES_PER_RAY == 4_800_000
    assert sensor_ram_estimate(1000, 100, actors=10) == 100_000 * (12 + 10 * 7)
    monkeypatch.setattr("navi_nb.ram.available_ram", lambda: 4_000_000)  # the 1000 x 100 sensor no longer fits
    with pytest.raises(SenseError, match=r"^Sensor: 1000 x 100 rays would need about 4\.6 MiB of RAM"):
        Sensor(1000, 100)
    assert Sensor(100, 100).n_rays == 10_000  # 480 kB fits


# --------------------------------------------------------------------------
# a trained run's episode: the picture and the animation
# --------------------------------------------------------------------------

TINY_RUN = [
    "--scenes",
    "box",
    "--resolution",
    "32",
    "--actors",
    "4",
    "--sensor-az",
    "16",
    "--sensor-el",
    "4",
    "--rollout-steps",
    "16",
    "--hidden",
    "16",
    "--update-epochs",
    "1",
    "--num-minibatches",
    "2",
    "--total-steps",
    "64",
    "--checkpoint-every",
    "1",
    "--eval-episodes",
    "3",
    "--env",
    "max_steps=20",
    "--no-progress",
]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from navi_nb.cli import main

    root = tmp_path_factory.mktemp("runs")
    mp = pytest.MonkeyPatch()
    mp.setenv("NAVI_NB_CACHE", str(root / "cache"))  # the compiled scene stays inside the test's folder
    try:
        assert main(["train", *TINY_RUN, "--run-dir", str(root), "--name", "r"]) == 0
    finally:
        mp.undo()
    return root / "r"


def _has(arr, colour):
    return bool(np.all(arr == np.asarray(colour, np.uint8), axis=-1).any())


def test_episode_picture_reads_without_the_docs(tiny_run, tmp_path):
    from navi_nb.train import render_episode as re_
    from navi_nb.train.evaluate import load_episodes

    eps, _ = load_episodes(tiny_run)
    length = int(eps["length"][1])
    out = re_.render_episode(tiny_run, 1, tmp_path / "ep.png", size=300)
    img = Image.open(out)
    assert img.format == "PNG" and img.mode == "RGB"
    # the map (its longer side 300 px) and the legend beside it, margins on both sides and between
    mh, mw = re_.MapView(re_.EpisodeData(tiny_run, 1), 300).rgb.shape[:2]
    assert max(mh, mw) == 300
    assert img.width == max(re_.MIN_WIDTH, 3 * re_.MARGIN + mw + re_.LEGEND_WIDTH) and img.height > 300 + mh
    arr = np.asarray(img)
    white = np.all(arr == 255, axis=-1)
    # the panoramas (the lowest rows) span the width: both halves are drawn, not left blank
    band = white[-img.height // 5 :, re_.MARGIN : img.width - re_.MARGIN - re_.KEY_WIDTH]
    half = band.shape[1] // 2
    assert band[:, :half].mean() < 0.6 and band[:, half:].mean() < 0.6
    # the marks and their keys, by their exact colours
    for colour in (
        re_.START_COLOUR,
        re_.GOAL_COLOUR,
        re_.SCALE_BAR_COLOUR,
        MISS_COLOUR,
        re_.time_colour(0.0),
        re_.time_colour(1.0),
        colour_map(0.0),
        colour_map(1.0),
    ):
        assert _has(arr, colour), colour
    # the scale bar: a solid bar of its colour inside the map, bottom left
    top = re_.MARGIN + 40
    map_area = arr[top : top + mh, re_.MARGIN : re_.MARGIN + mw]
    bar = np.all(map_area == np.asarray(re_.SCALE_BAR_COLOUR, np.uint8), axis=-1)
    ys, xs = np.nonzero(bar)
    assert ys.size and ys.min() > mh - 30 and xs.min() < 20 and xs.max() - xs.min() > 10
    # the legend's time ramp runs from the start colour to the end colour, left to right, beside the map
    ramp = np.all(arr[:, re_.MARGIN + mw :] == re_.time_colour(0.0), axis=-1)
    assert ramp.any()
    assert re_.nice_length(7.3) == 5 and re_.nice_length(0.31) == pytest.approx(0.2)
    assert re_.nice_length(1.0) == 1
    with pytest.raises(re_.RenderError, match="outside episode"):
        re_.render_episode(tiny_run, 1, tmp_path / "x.png", steps=[length + 1])
    with pytest.raises(re_.RenderError, match="does not exist"):
        re_.render_episode(tiny_run, 3, tmp_path / "x.png")
    assert re_.RenderError is RenderError  # one error class for every picture, caught the same way


def test_episode_animation(tiny_run, tmp_path):
    from navi_nb.cli import main
    from navi_nb.train import render_episode as re_
    from navi_nb.train.evaluate import load_episodes

    eps, _ = load_episodes(tiny_run)
    length = int(eps["length"][0])
    gif = Image.open(re_.render_episode(tiny_run, 0, tmp_path / "ep.gif"))
    assert gif.format == "GIF" and gif.n_frames == min(length + 1, 90)
    assert gif.width <= 400 + 2 * re_.MARGIN and gif.height <= 1000
    few = Image.open(re_.render_episode(tiny_run, 0, tmp_path / "few.gif", max_frames=4))
    assert few.n_frames == min(length + 1, 4)
    # the CLI: -o NAME.gif writes the animation; --gif does too, renaming the output
    assert main(["render", str(tiny_run), "--episode", "0", "-o", str(tmp_path / "cli.gif")]) == 0
    assert Image.open(tmp_path / "cli.gif").n_frames == gif.n_frames
    assert main(["render", str(tiny_run), "--episode", "0", "--gif", "-o", str(tmp_path / "flag.png")]) == 0
    assert Image.open(tmp_path / "flag.gif").format == "GIF" and not (tmp_path / "flag.png").exists()
    assert main(["render", str(tiny_run), "--episode", "9", "-o", str(tmp_path / "bad.gif")]) == 2


def test_explore_episode_has_no_goal_marks(tmp_path_factory, tmp_path):
    from navi_nb.cli import main
    from navi_nb.train import render_episode as re_

    root = tmp_path_factory.mktemp("explore_runs")
    argv = [a if a != "pointgoal" else "explore" for a in TINY_RUN] + ["--task", "explore"]
    mp = pytest.MonkeyPatch()
    mp.setenv("NAVI_NB_CACHE", str(root / "cache"))
    try:
        assert main(["train", *argv, "--run-dir", str(root), "--name", "x"]) == 0
    finally:
        mp.undo()
    arr = np.asarray(Image.open(re_.render_episode(root / "x", 0, tmp_path / "x.png")).convert("RGB"))
    # explore has no goal: no goal circle, no success chart; the path, start and scale bar are drawn
    assert not _has(arr, re_.GOAL_COLOUR)
    assert _has(arr, re_.START_COLOUR) and _has(arr, re_.SCALE_BAR_COLOUR) and _has(arr, re_.time_colour(1.0))
    assert Image.open(re_.render_episode(root / "x", 0, tmp_path / "x.gif", max_frames=3)).n_frames == 3
