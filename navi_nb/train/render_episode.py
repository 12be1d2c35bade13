"""Pictures of an evaluation episode: a map of the path, distance to the goal, depth panoramas; or an animation.

``render_episode(run, k, out)`` draws episode ``k`` of the run's last
evaluation (``RUN/eval_episodes.npz``, written by ``navi-nb eval``) into one
PNG that reads without the docs:

- a title (success or failure, steps, return, SPL, collisions; for the explore
  task the coverage at the end and after half the steps instead of success and SPL);
- the map: the world sliced at the actor's mean height, seen from above (+x
  right, -z up; free space light blue, solid dark grey, surfaces black), the
  path coloured by time (the ramp in the legend), the start (blue square), the
  goal and its success radius (green), where the episode ended (green disc:
  reached; red cross: not; for the explore task, which has no goal, a black
  ring), numbered markers where the panoramas below were
  taken, and a scale bar; a legend beside it explains each mark;
- with the episodic map on (``map_cell`` > 0), the map the actor held at the end of the episode (what it knew:
  its visits, the cells its rays saw free and occupied), rebuilt from the logged poses exactly as the
  environment built it (``episodic_map.replay_map``), drawn at the same place and scale under the first map,
  with the path on it;
- (pointgoal) distance to the goal per step: the 3-D distance (success is reached when it
  drops to the success radius, dashed) and the vertical part of it. The map
  is seen from above, so an actor can be inside the goal circle on the map yet
  still above or below the goal: the last steps inside the circle close that
  vertical gap, and the chart shows it;
- depth panoramas (azimuth across the full width, straight ahead in the
  middle; elevation down the rows) at a few steps (``steps``; default start,
  middle, end), traced again from the logged poses, with a colour key in
  metres.

An ``out`` ending in ``.gif`` (or ``gif=True``) writes an animation instead:
per frame the map with the path so far and the actor, and its depth panorama;
at most ``max_frames`` frames (steps are skipped evenly; the last is always
shown). Needs Pillow, the ``image`` extra (``pip install -e ".[image]"``).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from navi_nb.files import file_kind
from navi_nb.sense.render import (
    MISS_COLOUR,
    RenderError,
    colour_map,
    depth_scale,
    font,
    panorama,
    pillow,
    ramp,
    slice_field,
    slice_rgb,
)

# the path's colour by time: start -> end (blue, purple, red, orange); distinct from the depth colours
_TIME_STOPS = np.array([0.0, 1 / 3, 2 / 3, 1.0])
_TIME_COLOURS = np.array([[40, 70, 220], [140, 50, 190], [225, 50, 100], [245, 140, 20]], dtype=np.float64)
START_COLOUR = (40, 60, 255)
GOAL_COLOUR = (0, 150, 0)
FAIL_COLOUR = (220, 30, 30)
ACTOR_COLOUR = (220, 30, 30)
TEXT = (0, 0, 0)
GREY_TEXT = (70, 70, 70)
SCALE_BAR_COLOUR = (30, 30, 90)  # not a grey: antialiased black text makes greys
MARGIN = 14
LEGEND_WIDTH = 236
CHART_HEIGHT = 120
KEY_WIDTH = 70  # the depth colour key right of the panoramas
MIN_WIDTH = 720  # room for the chart's legend and wide enough panoramas


def time_colour(t):
    """(..., 3) uint8 path colours for times ``t`` in [0, 1] (start 0, end 1)."""
    return ramp(t, _TIME_STOPS, _TIME_COLOURS)


def _rgb(c):
    return tuple(int(v) for v in c)


def nice_length(metres):
    """The largest 1, 2 or 5 x 10^k not above ``metres`` (for a scale bar)."""
    k = math.floor(math.log10(metres))
    for m in (5, 2, 1):
        if m * 10**k <= metres:
            return m * 10**k
    return 10**k


class EpisodeData:
    """One logged episode of a run, with what drawing it needs."""

    def __init__(self, run_path, episode):
        from navi_nb.env.config import EnvConfig
        from navi_nb.sense.sensor import Sensor
        from navi_nb.train.coverage import COVERAGE_KEYS
        from navi_nb.train.evaluate import EPISODES_FILE, check_in_world, episode_world, load_episodes
        from navi_nb.train.runs import read_run_config

        run_path = Path(run_path)
        cfg = read_run_config(run_path)
        episodes_path = run_path / EPISODES_FILE
        if not episodes_path.is_file():
            if os.path.lexists(episodes_path):
                kind = "a link to nothing" if episodes_path.is_symlink() else file_kind(os.lstat(episodes_path).st_mode)
                raise RenderError(
                    f"run {run_path}: {EPISODES_FILE} is {kind}, not a regular file; remove it and run "
                    f"`navi-nb eval {run_path}`"
                )
            raise RenderError(
                f"run {run_path} has no evaluation episodes yet (no {EPISODES_FILE}): "
                f"run `navi-nb eval {run_path}` first"
            )
        eps, meta = load_episodes(run_path)
        n = eps["length"].shape[0]
        if isinstance(episode, bool) or not isinstance(episode, int) or not 0 <= episode < n:
            raise RenderError(f"episode {episode!r} does not exist: the evaluation has episodes 0..{n - 1}")
        self.run_path = run_path
        self.episode = episode
        self.world = episode_world(meta, int(eps["world"][episode]), cfg.resolution)
        check_in_world(
            run_path / EPISODES_FILE,
            {"positions": eps["positions"][:, episode], "goals": eps["goals"][episode]},
            self.world,
        )
        self.length = int(eps["length"][episode])
        self.pos = eps["positions"][: self.length + 1, episode].astype(np.float64)
        self.yaw = eps["yaws"][: self.length + 1, episode].astype(np.float64)
        self.goal = eps["goals"][episode].astype(np.float64)
        self.success = bool(eps["success"][episode])
        self.ret = float(eps["return"][episode])
        self.spl = float(eps["spl"][episode])
        self.collisions = int(eps["collisions"][episode])
        # an explore evaluation's coverage after half the steps and at the end (evaluations before it: None)
        self.coverage = {k: float(eps[k][episode]) for k in COVERAGE_KEYS} if COVERAGE_KEYS[0] in eps else None
        env = EnvConfig.from_kwargs(**cfg.env)
        self.max_distance = float(env.max_distance)
        self.success_radius = float(env.success_radius)
        self.task = cfg.task
        self.has_goal = cfg.task == "pointgoal"
        self.sensor = Sensor(az=cfg.sensor_az, el=cfg.sensor_el)
        self.env = env
        self.has_map = env.map_cell > 0
        self.dist = np.linalg.norm(self.pos - self.goal, axis=1)  # 3-D, what success tests
        self.vertical = np.abs(self.pos[:, 1] - self.goal[1])  # the part the map from above cannot show

    def depths(self, steps):
        """(depth, hit) (len(steps), Az, El) traced again from the logged poses."""
        from navi_nb.sense.tracer import trace

        steps = np.asarray(steps, dtype=np.int64)
        depth, _sem, hit = trace(
            self.world,
            self.pos[steps].astype(np.float32),
            self.yaw[steps].astype(np.float32),
            self.sensor,
            self.max_distance,
        )
        return np.asarray(depth), np.asarray(hit)

    def final_map(self):
        """``(cells (nx, nz, 2), grid)``: the episodic map the actor held at the end (visits, seen bits) and its
        :class:`~navi_nb.env.episodic_map.MapGrid`, rebuilt from the logged poses and their traced rays."""
        from navi_nb.env.episodic_map import MapGrid, replay_map
        from navi_nb.world.world_set import WorldSet

        depth, hit = self.depths(np.arange(self.length + 1))
        ws = WorldSet.of(self.world)
        pos, yaw = self.pos.astype(np.float32), self.yaw.astype(np.float32)
        cells = replay_map(ws, 0, self.sensor, self.env, pos, yaw, depth, hit)
        grid = MapGrid(ws, self.env.map_cell)
        return grid.image(cells, 0), grid


MAP_UNSEEN = (200, 200, 200)
MAP_FREE = (250, 250, 250)
MAP_OCCUPIED = (40, 40, 40)
MAP_VISITED = (60, 110, 230)


def map_rgb(cells, grid, view, shape):
    """(h, w, 3) uint8: the episodic map ``cells`` (nx, nz, 2) of ``grid`` painted over ``view``'s pixels (each
    pixel the cell under its centre): unseen grey, seen free white, seen occupied near black (over free), and
    visited cells tinted blue, more with more visits (log scale)."""
    h, w = shape
    nx, nz = cells.shape[:2]
    ix = np.floor(((np.arange(w) + 0.5) / view.scale + view.lo[0] - grid.lo[0, 0]) / grid.cell).astype(np.int64)
    iz = np.floor(((np.arange(h) + 0.5) / view.scale + view.lo[2] - grid.lo[0, 1]) / grid.cell).astype(np.int64)
    inside = ((ix >= 0) & (ix < nx))[None, :] & ((iz >= 0) & (iz < nz))[:, None]
    c = cells[np.clip(ix, 0, nx - 1)[None, :], np.clip(iz, 0, nz - 1)[:, None]]  # (h, w, 2)
    visits, seen = np.where(inside, c[..., 0], 0), np.where(inside, c[..., 1], 0)
    rgb = np.empty((h, w, 3), np.float64)
    rgb[...] = MAP_UNSEEN
    rgb[(seen & 1) > 0] = MAP_FREE
    rgb[(seen & 2) > 0] = MAP_OCCUPIED
    tint = np.where(visits > 0, 0.35 + 0.65 * np.log1p(visits) / np.log1p(255), 0.0)[..., None]
    rgb = rgb * (1 - tint) + np.array(MAP_VISITED) * tint
    return rgb.round().astype(np.uint8)


def _draw_map_panel(Image, ImageDraw, img, x, y, ep: EpisodeData, view, shape, small):
    """The episodic map at the end at ``(x, y)`` with the path on it, its key to the right; returns its height."""
    cells, grid = ep.final_map()
    panel = Image.fromarray(map_rgb(cells, grid, view, shape), "RGB")
    md = ImageDraw.Draw(panel)
    _draw_path(md, view, ep.pos, ep.length, ep.length, width=1)
    _draw_start(md, *view.px(ep.pos[0]))
    img.paste(panel, (x, y))
    draw = ImageDraw.Draw(img)
    draw.rectangle([x - 1, y - 1, x + shape[1], y + shape[0]], outline=(120, 120, 120))
    kx, ky = x + shape[1] + MARGIN, y
    draw.text((kx, ky), f"episodic map at the end ({grid.cell:g} m cells):", fill=TEXT, font=small)
    draw.text((kx, ky + 16), "what the actor knew", fill=GREY_TEXT, font=small)
    ky += 40
    for colour, text in (
        (MAP_VISITED, "visited (darker: more visits)"),
        (MAP_FREE, "seen free by its rays"),
        (MAP_OCCUPIED, "seen occupied by its rays"),
        (MAP_UNSEEN, "never seen"),
    ):
        draw.rectangle([kx + 4, ky + 2, kx + 16, ky + 14], fill=colour, outline=(0, 0, 0))
        draw.text((kx + 26, ky + 8), text, fill=TEXT, font=small, anchor="lm")
        ky += 20
    return max(shape[0], ky - y) + 14


class MapView:
    """The top-down slice around the episode, and metres -> pixels."""

    def __init__(self, ep: EpisodeData, size):
        w = ep.world
        pts = np.vstack([ep.pos, ep.goal[None]]) if ep.has_goal else ep.pos
        lo = np.maximum(pts.min(0) - 2.0, w.bmin)
        hi = np.minimum(pts.max(0) + 2.0, w.bmax)
        lo, hi = np.minimum(lo, hi - 1e-3), np.maximum(hi, lo + 1e-3)
        self.height_y = float(ep.pos[:, 1].mean())
        d, self.lo, self.scale = slice_field(w, self.height_y, size, lo, hi)
        self.rgb = slice_rgb(d, w.voxel_size)

    def px(self, p):
        return ((p[0] - self.lo[0]) * self.scale, (p[2] - self.lo[2]) * self.scale)


def _draw_start(draw, x, y, r=5):
    draw.rectangle([x - r, y - r, x + r, y + r], fill=START_COLOUR, outline=(255, 255, 255))


def _draw_goal(draw, x, y, radius_px, small=False):
    r = max(2.0, radius_px)
    draw.ellipse([x - r, y - r, x + r, y + r], outline=GOAL_COLOUR, width=2)
    k = 3 if small else 4
    draw.ellipse([x - k, y - k, x + k, y + k], fill=GOAL_COLOUR)


def _draw_end(draw, x, y, reached, r=6):
    if reached is None:  # no goal to reach (explore)
        draw.ellipse([x - r, y - r, x + r, y + r], outline=TEXT, width=3)
    elif reached:
        draw.ellipse([x - r, y - r, x + r, y + r], fill=GOAL_COLOUR, outline=(255, 255, 255), width=2)
    else:
        draw.line([(x - r, y - r), (x + r, y + r)], fill=FAIL_COLOUR, width=3)
        draw.line([(x - r, y + r), (x + r, y - r)], fill=FAIL_COLOUR, width=3)


def _draw_marker(draw, x, y, label, fnt, r=8):
    draw.ellipse([x - r, y - r, x + r, y + r], fill=(255, 255, 255), outline=TEXT, width=2)
    draw.text((x, y), label, fill=TEXT, font=fnt, anchor="mm")


def _draw_path(draw, view, pos, upto, length, width=3):
    for j in range(1, upto + 1):
        draw.line([view.px(pos[j - 1]), view.px(pos[j])], fill=_rgb(time_colour(j / max(length, 1))), width=width)


def _draw_scale_bar(draw, view, width_px, height_px, fnt):
    metres = nice_length(0.25 * width_px / view.scale)
    bar = metres * view.scale
    x0, y1 = 10, height_px - 10
    draw.rectangle([x0 - 5, y1 - 28, x0 + bar + 5, y1 + 4], fill=(255, 255, 255))
    draw.rectangle([x0, y1 - 6, x0 + bar, y1], fill=SCALE_BAR_COLOUR)
    draw.text((x0 + bar / 2, y1 - 9), f"{metres:g} m", fill=TEXT, font=fnt, anchor="mb")


def _draw_heading(draw, x, y, yaw, r):
    draw.ellipse([x - r, y - r, x + r, y + r], fill=ACTOR_COLOUR, outline=(0, 0, 0))
    draw.line([(x, y), (x + 2.5 * r * math.sin(yaw), y - 2.5 * r * math.cos(yaw))], fill=ACTOR_COLOUR, width=3)


def _panorama_image(Image, depth, hit, cmax, width, sensor):
    """A panorama stretched to ``width`` px, its height following the sensor's field of view."""
    rgb = panorama(depth, hit, cmax, 1)
    fov = abs(sensor.fov_up - sensor.fov_down) if sensor.el_count > 1 else math.radians(10)
    height = int(np.clip(round(width * fov / (2 * math.pi)), 60, 150))
    return Image.fromarray(rgb, "RGB").resize((width, height), resample=Image.NEAREST)


def _draw_depth_key(Image, draw, img, x, y, height, cmax, fnt):
    bar_w = 16
    bar = colour_map(np.linspace(0, 1, height))[:, None, :].repeat(bar_w, axis=1)
    img.paste(Image.fromarray(bar, "RGB"), (x, y))
    for k in range(5):
        yy = y + round((height - 1) * k / 4)
        draw.line([(x + bar_w, yy), (x + bar_w + 4, yy)], fill=TEXT)
        draw.text((x + bar_w + 6, yy), f"{cmax * k / 4:.3g} m", fill=TEXT, font=fnt, anchor="lm")
    draw.rectangle([x, y + height + 6, x + bar_w, y + height + 16], fill=MISS_COLOUR)
    draw.text((x + bar_w + 6, y + height + 11), "no hit", fill=TEXT, font=fnt, anchor="lm")


def _draw_legend(Image, draw, img, x, y, ep: EpisodeData, view, fnt, small):
    """Explain every mark of the map; returns the legend's bottom."""
    draw.text((x, y), "map (seen from above)", fill=TEXT, font=fnt)
    y += 22
    rows = [("start", lambda cx, cy: _draw_start(draw, cx, cy))]
    if ep.has_goal:
        rows += [
            (f"goal, success radius {ep.success_radius:g} m", lambda cx, cy: _draw_goal(draw, cx, cy, 9, True)),
            (
                "end: goal reached" if ep.success else "end: goal not reached",
                lambda cx, cy: _draw_end(draw, cx, cy, ep.success),
            ),
        ]
    else:
        rows += [("end of the episode", lambda cx, cy: _draw_end(draw, cx, cy, None))]
    rows += [("panorama taken here (below)", lambda cx, cy: _draw_marker(draw, cx, cy, "1", small))]
    for text, mark in rows:
        mark(x + 10, y + 8)
        draw.text((x + 26, y + 8), text, fill=TEXT, font=small, anchor="lm")
        y += 24
    draw.text((x, y), "path, coloured by time:", fill=TEXT, font=small)
    y += 16
    ramp_w = LEGEND_WIDTH - 20
    ramp = time_colour(np.linspace(0, 1, ramp_w))[None, :, :].repeat(12, axis=0)
    img.paste(Image.fromarray(ramp, "RGB"), (x, y))
    y += 14
    draw.text((x, y), "step 0", fill=TEXT, font=small)
    draw.text((x + ramp_w, y), f"step {ep.length}", fill=TEXT, font=small, anchor="ra")
    y += 22
    swatches = [
        ((220, 232, 242), "free space (lighter: farther from walls)"),
        ((55, 55, 60), "solid"),
        ((0, 0, 0), "surface"),
    ]
    for colour, text in swatches:
        draw.rectangle([x + 4, y + 2, x + 16, y + 14], fill=colour, outline=(0, 0, 0))
        draw.text((x + 26, y + 8), text, fill=TEXT, font=small, anchor="lm")
        y += 20
    y += 4
    notes = [f"slice at height y = {view.height_y:.2f} m", "+x to the right, -z up"]
    if ep.has_goal:
        notes += ["success is 3-D: within the radius", "of the goal in height too (chart)"]
    for line in notes:
        draw.text((x, y), line, fill=GREY_TEXT, font=small)
        y += 16
    return y


def _draw_chart(draw, x, y, w, h, ep: EpisodeData, steps, fnt):
    """Distance to the goal per step: 3-D (solid), vertical (thin), success radius (dashed)."""
    n = ep.length
    top = max(float(ep.dist.max()), ep.success_radius) * 1.05
    left, bottom = x + 44, y + h - 16
    right, upper = x + w - 8, y + 32
    draw.text((x, y), "distance to the goal per step", fill=TEXT, font=fnt)
    lx = x + 200
    for colour, text in (
        ((200, 60, 120), "3-D distance (colour: time)"),
        ((120, 150, 200), "height gap"),
        (GOAL_COLOUR, f"success radius {ep.success_radius:g} m"),
    ):
        draw.line([(lx, y + 7), (lx + 16, y + 7)], fill=colour, width=3)
        draw.text((lx + 20, y + 7), text, fill=TEXT, font=fnt, anchor="lm")
        lx += 20 + int(draw.textlength(text, font=fnt)) + 18

    def cx(i):
        return left + (right - left) * i / max(n, 1)

    def cy(v):
        return bottom - (bottom - upper) * v / top

    draw.rectangle([left, upper, right, bottom], outline=(150, 150, 150))
    for k in range(3):
        v = top * k / 2
        draw.text((left - 4, cy(v)), f"{v:.2g} m", fill=GREY_TEXT, font=fnt, anchor="rm")
    draw.text((left, bottom + 2), "0", fill=GREY_TEXT, font=fnt)
    draw.text((right, bottom + 2), f"step {n}", fill=GREY_TEXT, font=fnt, anchor="ra")
    xr = left
    while xr < right:  # the success radius, dashed
        draw.line([(xr, cy(ep.success_radius)), (min(xr + 6, right), cy(ep.success_radius))], fill=GOAL_COLOUR, width=2)
        xr += 11
    for s, label in zip(steps, range(1, len(steps) + 1)):
        draw.line([(cx(s), upper), (cx(s), bottom)], fill=(205, 205, 205))
        draw.text((cx(s), upper - 1), f"({label})", fill=GREY_TEXT, font=fnt, anchor="mb")
    draw.line([(cx(i), cy(ep.vertical[i])) for i in range(n + 1)], fill=(120, 150, 200), width=1)
    for i in range(1, n + 1):
        draw.line(
            [(cx(i - 1), cy(ep.dist[i - 1])), (cx(i), cy(ep.dist[i]))], fill=_rgb(time_colour(i / max(n, 1))), width=3
        )
    if ep.success:
        draw.ellipse([cx(n) - 4, cy(ep.dist[n]) - 4, cx(n) + 4, cy(ep.dist[n]) + 4], fill=GOAL_COLOUR)
        draw.text((cx(n) - 6, cy(ep.dist[n]) - 4), "reached", fill=GOAL_COLOUR, font=fnt, anchor="rb")


def _title(ep: EpisodeData):
    """Two lines: the outcome, then the episode's numbers."""
    outcome = "reached the goal" if ep.success else "did not reach the goal"
    if not ep.has_goal:
        outcome = "explored"
    spl = f"SPL {ep.spl:.2f}   " if ep.has_goal else ""
    if ep.coverage is not None and not ep.has_goal:  # what an explore episode scores, after half its steps and all
        half, full = ep.length // 2, ep.coverage["coverage"]
        outcome += f" {full:.0%} of the reachable cells (after {half} steps {ep.coverage['coverage_half']:.0%})"
    return (
        f"episode {ep.episode} of run {ep.run_path.name}: {outcome} in {ep.length} steps",
        f"return {ep.ret:.2f}   {spl}{ep.collisions} of {ep.length} steps touching a wall",
    )


def render_episode(run_path, episode, out, steps=None, gif=None, size=480, max_frames=90):
    """Draw episode ``episode`` of ``run_path``'s last evaluation into ``out``; returns the path.

    ``gif``: None decides by the suffix of ``out`` (``.gif``: an animation).
    """
    Image, ImageDraw, ImageFont = pillow()
    out = Path(out)
    if gif is None:
        gif = out.suffix.lower() == ".gif"
    if isinstance(size, bool) or not isinstance(size, int) or not 64 <= size <= 4096:
        raise RenderError(f"size must be an integer in 64..4096, got {size!r}")
    if isinstance(max_frames, bool) or not isinstance(max_frames, int) or max_frames < 2:
        raise RenderError(f"max_frames must be an integer >= 2, got {max_frames!r}")
    ep = EpisodeData(run_path, episode)
    if steps is None:
        steps = sorted({0, ep.length // 2, ep.length})
    else:
        steps = [int(s) for s in steps]
        bad = [s for s in steps if not 0 <= s <= ep.length]
        if bad:
            raise RenderError(f"steps {bad} are outside episode {episode} (0..{ep.length})")
    if gif:
        img = _animation(Image, ImageDraw, ImageFont, ep, min(size, 400), max_frames)
        frames = img
        durations = [110] * (len(frames) - 1) + [2000]  # hold the last frame
        try:
            frames[0].save(out, save_all=True, append_images=frames[1:], duration=durations, loop=0)
        except (OSError, ValueError) as exc:
            raise RenderError(f"cannot write {out}: {exc}") from exc
        return out
    img = _picture(Image, ImageDraw, ImageFont, ep, size, steps)
    try:
        img.save(out)
    except (OSError, ValueError) as exc:
        raise RenderError(f"cannot write {out}: {exc}") from exc
    return out


def _picture(Image, ImageDraw, ImageFont, ep: EpisodeData, size, steps):
    title_f, fnt, small = font(ImageFont, 15), font(ImageFont, 13), font(ImageFont, 11)
    view = MapView(ep, size)
    mh, mw = view.rgb.shape[:2]
    width = max(MIN_WIDTH, MARGIN + mw + MARGIN + LEGEND_WIDTH + MARGIN)
    content = width - 2 * MARGIN
    depth, hit = ep.depths(steps)
    cmax = depth_scale(depth, hit, ep.max_distance)
    pano_w = content - KEY_WIDTH
    panos = [_panorama_image(Image, depth[k], hit[k], cmax, pano_w, ep.sensor) for k in range(len(steps))]
    pano_block = sum(p.height + 22 for p in panos) + 18
    map_block = max(mh, 330)
    chart_h = CHART_HEIGHT + 14 if ep.has_goal else 0
    map_panel = max(mh, 136) + 14 if ep.has_map else 0
    height = MARGIN + 40 + map_block + 14 + map_panel + chart_h + 20 + pano_block + MARGIN
    img = Image.new("RGB", (width, height), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    y = MARGIN
    first, second = _title(ep)
    draw.text((MARGIN, y), first, fill=TEXT, font=title_f)
    draw.text((MARGIN, y + 20), second, fill=GREY_TEXT, font=small)
    y += 40

    # the map, with its marks, then the legend beside it
    map_img = Image.fromarray(view.rgb, "RGB")
    md = ImageDraw.Draw(map_img)
    if ep.has_goal:
        _draw_goal(md, *view.px(ep.goal), ep.success_radius * view.scale)
    _draw_path(md, view, ep.pos, ep.length, ep.length)
    _draw_start(md, *view.px(ep.pos[0]))
    _draw_end(md, *view.px(ep.pos[ep.length]), ep.success if ep.has_goal else None)
    for k, s in enumerate(steps):
        mx, my = view.px(ep.pos[s])
        ox, oy = ((12, -12), (-12, -12), (12, 12), (-12, 12))[k % 4]  # beside the point; fanned out if they meet
        md.line([(mx, my), (mx + ox / 2, my + oy / 2)], fill=TEXT)
        _draw_marker(md, mx + ox, my + oy, str(k + 1), small)
    _draw_scale_bar(md, view, mw, mh, small)
    img.paste(map_img, (MARGIN, y))
    draw.rectangle([MARGIN - 1, y - 1, MARGIN + mw, y + mh], outline=(120, 120, 120))
    _draw_legend(Image, draw, img, MARGIN + mw + MARGIN, y, ep, view, fnt, small)
    y += map_block + 14
    if ep.has_map:
        y += _draw_map_panel(Image, ImageDraw, img, MARGIN, y, ep, view, (mh, mw), small)

    if ep.has_goal:
        _draw_chart(draw, MARGIN, y, content, CHART_HEIGHT, ep, steps, small)
    y += chart_h

    draw.text(
        (MARGIN, y),
        f"depth panoramas: all around the actor ({ep.sensor.az_count} x {ep.sensor.el_count} "
        "rays; rows from up to down), near yellow, far dark blue",
        fill=TEXT,
        font=fnt,
    )
    y += 20
    key_top = y + 16
    for k, (s, p) in enumerate(zip(steps, panos)):
        where = f": {ep.dist[s]:.2f} m from the goal" if ep.has_goal else ""
        draw.text((MARGIN, y), f"({k + 1}) step {s}{where}", fill=TEXT, font=small)
        img.paste(p, (MARGIN, y + 14))
        y += p.height + 22
    for frac, label, anchor in (
        (0.0, "behind", "la"),
        (0.25, "left", "ma"),
        (0.5, "ahead", "ma"),
        (0.75, "right", "ma"),
        (1.0, "behind", "ra"),
    ):
        draw.text((MARGIN + frac * pano_w, y - 8), label, fill=GREY_TEXT, font=small, anchor=anchor)
    key_h = max(60, y - 8 - key_top - 28)
    _draw_depth_key(Image, draw, img, MARGIN + pano_w + 10, key_top, key_h, cmax, small)
    return img


def _animation(Image, ImageDraw, ImageFont, ep: EpisodeData, size, max_frames):
    """Frames: the map with the path so far and the actor, its depth panorama below."""
    fnt, small = font(ImageFont, 13), font(ImageFont, 11)
    n = ep.length
    count = min(n + 1, max_frames)
    frame_steps = np.unique(np.round(np.linspace(0, n, count)).astype(np.int64))
    view = MapView(ep, size)
    mh, mw = view.rgb.shape[:2]
    width = max(mw, 360) + 2 * MARGIN
    depth, hit = ep.depths(frame_steps)
    cmax = depth_scale(depth, hit, ep.max_distance)
    base = Image.fromarray(view.rgb, "RGB")
    bd = ImageDraw.Draw(base)
    if ep.has_goal:
        _draw_goal(bd, *view.px(ep.goal), ep.success_radius * view.scale)
    _draw_start(bd, *view.px(ep.pos[0]))
    _draw_scale_bar(bd, view, mw, mh, small)
    key = colour_map(np.linspace(0, 1, width - 2 * MARGIN))[None, :, :].repeat(8, axis=0)
    key_img = Image.fromarray(key, "RGB")
    frames = []
    for k, s in enumerate(frame_steps):
        pano = _panorama_image(Image, depth[k], hit[k], cmax, width - 2 * MARGIN, ep.sensor)
        height = MARGIN + 20 + mh + 28 + pano.height + 40 + MARGIN
        frame = Image.new("RGB", (width, height), (255, 255, 255))
        draw = ImageDraw.Draw(frame)
        state = ""
        if s == n:
            state = " - goal reached" if ep.success and ep.has_goal else " - episode over"
        where = f": {ep.dist[s]:.2f} m to the goal" if ep.has_goal else ""
        draw.text((MARGIN, MARGIN), f"episode {ep.episode}, step {s}/{n}{where}{state}", fill=TEXT, font=fnt)
        m = base.copy()
        md = ImageDraw.Draw(m)
        _draw_path(md, view, ep.pos, int(s), n)
        ax, ay = view.px(ep.pos[s])
        _draw_heading(md, ax, ay, ep.yaw[s], max(4.0, 0.2 * view.scale))
        if s == n:
            _draw_end(md, ax, ay, ep.success if ep.has_goal else None)
        frame.paste(m, (MARGIN, MARGIN + 20))
        y = MARGIN + 20 + mh + 4
        lx = MARGIN
        for mark, text in (
            (lambda d, cx, cy: _draw_start(d, cx, cy, 4), "start"),
            (lambda d, cx, cy: _draw_goal(d, cx, cy, 6, True), "goal" if ep.has_goal else None),
            (lambda d, cx, cy: _draw_heading(d, cx, cy, 0.5 * math.pi, 4), "actor, heading"),
            (None, "path: blue = start"),
        ):
            if text is None:
                continue
            if mark is not None:
                mark(draw, lx + 6, y + 8)
                lx += 18
            draw.text((lx, y + 8), text, fill=TEXT, font=small, anchor="lm")
            lx += int(draw.textlength(text, font=small)) + 14
        y += 24
        frame.paste(pano, (MARGIN, y))
        y += pano.height + 4
        frame.paste(key_img, (MARGIN, y))
        draw.text((MARGIN, y + 10), "depth: 0 m", fill=TEXT, font=small)
        draw.text((width - MARGIN, y + 10), f"{cmax:.3g} m", fill=TEXT, font=small, anchor="ra")
        draw.text((width / 2, y + 10), "panorama: ahead in the middle", fill=GREY_TEXT, font=small, anchor="ma")
        frames.append(frame)
    return frames
