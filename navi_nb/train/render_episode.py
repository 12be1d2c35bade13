"""Pictures of an evaluation episode: top-down trajectory and depth panoramas.

``render_episode(run, k, out)`` draws episode ``k`` of the run's last
evaluation (``RUN/eval_episodes.npz``, written by ``navi-nb eval``):

- top: the world's signed-distance slice at the actor's mean height (free
  space light, solid dark, the zero level outlined), seen from above with +x
  to the right and -z up, the trajectory as a line coloured from start (blue)
  to end (red), the spawn, the goal and its success radius;
- below: depth panoramas (azimuth across, elevation down; near is bright) at
  a few steps of the episode (``steps``; default start, middle, end), traced
  again from the logged poses.

``gif=True`` writes an animation instead: the actor's position and its
current panorama step by step. Needs Pillow (``pip install navi-nb[image]``).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from navi_nb.errors import NaviError


class RenderError(NaviError):
    """An episode that cannot be drawn (no evaluation, bad index, no Pillow)."""


def _pil():
    try:
        from PIL import Image, ImageDraw
    except ImportError:
        raise RenderError("drawing needs Pillow: pip install navi-nb[image]") from None
    return Image, ImageDraw


def distance_slice(world, lo, hi, y, size):
    """(H, W) float32 signed distances on an x-z grid at height y; row 0 is the -z edge."""
    from navi_nb.world.query import distance

    span = np.maximum(hi - lo, 1e-6)
    scale = size / max(span[0], span[2])
    w, h = max(2, int(round(span[0] * scale))), max(2, int(round(span[2] * scale)))
    xs = lo[0] + (np.arange(w) + 0.5) * span[0] / w
    zs = lo[2] + (np.arange(h) + 0.5) * span[2] / h
    gx, gz = np.meshgrid(xs, zs)
    pts = np.stack([gx.ravel(), np.full(gx.size, y), gz.ravel()], axis=1).astype(np.float32)
    d, _ = distance(world, pts)
    return d.reshape(h, w), scale


def slice_image(d, Image):
    """Grey map of a distance slice: solid dark, free space lighter with distance."""
    free = np.clip(d / 2.0, 0.0, 1.0)
    g = np.where(d < 0, 40, 150 + 100 * free).astype(np.uint8)
    edge = np.abs(d) < 0.05
    rgb = np.stack([g, g, g], axis=-1)
    rgb[edge] = (0, 0, 0)
    return Image.fromarray(rgb, "RGB")


def panorama_image(depth, max_distance, Image, scale=4):
    """(Az, El) depths -> image El rows x Az columns, near bright, misses black."""
    d = np.asarray(depth, np.float64).T  # (El, Az)
    v = 1.0 - np.clip(np.log1p(d) / np.log1p(max_distance), 0, 1)
    img = Image.fromarray((255 * v).astype(np.uint8), "L").convert("RGB")
    return img.resize((img.width * scale, img.height * scale), resample=0)


def _colour(t):
    return (int(40 + 215 * t), 60, int(255 - 215 * t))


def render_episode(run_path, episode, out, steps=None, gif=False, size=480):
    """Draw episode ``episode`` of ``run_path``'s last evaluation into ``out``; returns the path."""
    from navi_nb.train.evaluate import load_episodes
    from navi_nb.train.runs import WORLD_FILE, read_run_config
    from navi_nb.sense.sensor import Sensor
    from navi_nb.sense.tracer import trace
    from navi_nb.world.gmdag import load_world

    Image, ImageDraw = _pil()
    run_path = Path(run_path)
    cfg = read_run_config(run_path)
    if not (run_path / "eval_episodes.npz").is_file():
        raise RenderError(f"run {run_path} has no evaluation episodes yet: run `navi-nb eval {run_path}` first")
    eps, _meta = load_episodes(run_path)
    n = eps["length"].shape[0]
    if not isinstance(episode, int) or not 0 <= episode < n:
        raise RenderError(f"episode {episode!r} does not exist: the evaluation has episodes 0..{n - 1}")
    world = load_world(run_path / WORLD_FILE)
    length = int(eps["length"][episode])
    pos = eps["positions"][: length + 1, episode].astype(np.float64)
    yaw = eps["yaws"][: length + 1, episode]
    goal = eps["goals"][episode].astype(np.float64)
    max_distance = float(cfg.env.get("max_distance", 10.0))
    success_radius = float(cfg.env.get("success_radius", 0.5))

    pts = np.vstack([pos, goal[None]])
    lo = np.minimum(pts.min(0) - 2.0, world.bmax)
    hi = np.maximum(pts.max(0) + 2.0, world.bmin)
    lo, hi = np.maximum(lo, world.bmin), np.minimum(hi, world.bmax)
    d, scale = distance_slice(world, lo, hi, float(pos[:, 1].mean()), size)

    def px(p):
        return ((p[0] - lo[0]) * scale, (p[2] - lo[2]) * scale)

    base = slice_image(d, Image)
    draw = ImageDraw.Draw(base)
    r = success_radius * scale
    gx, gy = px(goal)
    draw.ellipse([gx - r, gy - r, gx + r, gy + r], outline=(0, 160, 0), width=2)
    draw.ellipse([gx - 3, gy - 3, gx + 3, gy + 3], fill=(0, 160, 0))
    sx, sy = px(pos[0])
    draw.rectangle([sx - 3, sy - 3, sx + 3, sy + 3], fill=(40, 60, 255))
    sensor = Sensor(az=cfg.sensor_az, el=cfg.sensor_el)
    ok = bool(eps["success"][episode])

    def panorama(i):
        depth, _s, _h = trace(world, pos[i:i + 1].astype(np.float32), yaw[i:i + 1].astype(np.float32), sensor,
                              max_distance)
        return panorama_image(depth[0], max_distance, Image)

    out = Path(out)
    if gif:
        frames = []
        stride = max(1, length // 60)
        for i in range(0, length + 1, stride):
            top = base.copy()
            dr = ImageDraw.Draw(top)
            for j in range(1, i + 1):
                dr.line([px(pos[j - 1]), px(pos[j])], fill=_colour(j / max(length, 1)), width=2)
            cx, cy = px(pos[i])
            dr.ellipse([cx - 4, cy - 4, cx + 4, cy + 4], outline=(255, 0, 0), width=2)
            pano = panorama(i)
            frame = Image.new("RGB", (max(top.width, pano.width), top.height + pano.height + 4), "white")
            frame.paste(top, (0, 0))
            frame.paste(pano, (0, top.height + 4))
            frames.append(frame)
        frames[0].save(out, save_all=True, append_images=frames[1:], duration=80, loop=0)
        return out

    for j in range(1, length + 1):
        draw.line([px(pos[j - 1]), px(pos[j])], fill=_colour(j / max(length, 1)), width=2)
    steps = sorted({0, length // 2, length}) if steps is None else [int(s) for s in steps]
    bad = [s for s in steps if not 0 <= s <= length]
    if bad:
        raise RenderError(f"steps {bad} are outside episode {episode} (0..{length})")
    panos = [panorama(s) for s in steps]
    width = max(base.width, max(p.width for p in panos))
    height = base.height + 20 + sum(p.height + 16 for p in panos)
    img = Image.new("RGB", (width, height), "white")
    img.paste(base, (0, 0))
    dr = ImageDraw.Draw(img)
    dr.text((4, base.height + 3), f"episode {episode}: {'success' if ok else 'failure'}, {length} steps, "
                                  f"return {float(eps['return'][episode]):.2f}", fill=(0, 0, 0))
    y = base.height + 20
    for s, p in zip(steps, panos):
        dr.text((4, y), f"depth panorama at step {s}", fill=(0, 0, 0))
        img.paste(p, (0, y + 14))
        y += p.height + 16
    img.save(out)
    return out
