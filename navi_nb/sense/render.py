"""Pictures of what an actor sees: a depth panorama and a top-down slice.

``render_view(world, pose, out)`` writes one PNG with

- top: the depth panorama at the pose (azimuth across from -180 to +180
  degrees with straight ahead in the middle, elevation down the rows from up
  to down), colour-mapped from near (yellow) to far (dark blue) up to the
  farthest hit; rays that hit nothing within ``max_distance`` are grey; a
  colour bar with ticks in metres;
- bottom: the world's signed-distance field sliced at the actor's height,
  seen from above (+x to the right, -z up): free space light (lighter with
  distance), solid dark, surfaces outlined; the actor as a red disc with its
  heading, the hit points of its rays within 25 degrees of level as dots in
  the panorama's colours (the horizontal row of rays drawn as faint lines).

Needs Pillow, the ``image`` extra (``pip install -e ".[image]"`` in the clone);
without it a NaviError names the extra.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from navi_nb.errors import NaviError

# colour map: (position, RGB) control points, near -> far (a viridis-like ramp)
_STOPS = np.array([0.0, 0.25, 0.5, 0.75, 1.0])
_COLOURS = np.array([[253, 231, 37], [94, 201, 98], [33, 145, 140], [59, 82, 139], [68, 1, 84]], dtype=np.float64)
MISS_COLOUR = (110, 110, 110)


class RenderError(NaviError):
    """A picture that cannot be drawn: no Pillow, a bad pose, an unwritable file, or (for
    ``navi_nb.train.render_episode``) a run without evaluation episodes or an episode it does not have."""


def pillow():
    """(Image, ImageDraw, ImageFont) from Pillow, or a RenderError naming the extra."""
    try:
        from PIL import Image, ImageDraw, ImageFont
    except ImportError:
        raise RenderError('pictures need Pillow: install the image extra: pip install -e ".[image]"') from None
    return Image, ImageDraw, ImageFont


def ramp(t, stops, colours):
    """(..., 3) uint8 colours for values ``t`` in [0, 1] (clipped), linear between the control points
    ``stops`` (increasing, from 0 to 1) and their RGB ``colours`` (one row per stop)."""
    t = np.clip(np.asarray(t, dtype=np.float64), 0.0, 1.0)
    out = np.empty(t.shape + (3,), dtype=np.float64)
    for c in range(3):
        out[..., c] = np.interp(t, stops, colours[:, c])
    return out.round().astype(np.uint8)


def colour_map(t):
    """(..., 3) uint8 depth colours for values ``t`` in [0, 1] (clipped), near = 0."""
    return ramp(t, _STOPS, _COLOURS)


def depth_scale(depth, hit, max_distance):
    """The depth colours' far end: the farthest hit rounded up to a metre (near rooms keep their contrast),
    at most ``max_distance``."""
    top = float(depth[hit].max()) if hit.any() else max_distance
    return min(max_distance, float(math.ceil(top))) if top > 0 else max_distance


def parse_pose(text):
    """``"X,Y,Z,YAW"`` (metres, radians) -> float64 array (4,), or RenderError."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        vals = np.array([float(p) for p in parts], dtype=np.float64)
    except ValueError:
        raise RenderError(f"--pose must be four numbers X,Y,Z,YAW, got {text!r}") from None
    if vals.shape != (4,) or not np.all(np.isfinite(vals)):
        raise RenderError(f"--pose must be four finite numbers X,Y,Z,YAW, got {text!r}")
    return vals


def font(ImageFont, size=12):
    """Pillow's default font at ``size`` px (a fixed-size bitmap font on Pillow < 10.1)."""
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1
        return ImageFont.load_default()


def panorama(depth, hit, max_distance, scale):
    """(H, W, 3) uint8 panorama of one actor's (Az, El) depths, straight ahead centred."""
    az = depth.shape[0]
    order = np.roll(np.arange(az), az // 2)  # column 0 = azimuth -180 degrees
    d = depth[order].T  # (El, Az): rows from up to down
    h = hit[order].T
    rgb = colour_map(d / max_distance)
    rgb[~h] = MISS_COLOUR
    return np.repeat(np.repeat(rgb, scale, axis=0), scale, axis=1)


def slice_field(world, y, size, lo=None, hi=None):
    """(H, W) signed distances at height ``y`` on an x-z grid, with the grid's bounds and scale."""
    from navi_nb.world.query import distance

    if lo is None or hi is None:
        lo = np.asarray(world.bmin, dtype=np.float64)
        hi = np.asarray(world.bmax, dtype=np.float64)
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    span = np.maximum(hi - lo, 1e-6)
    scale = size / max(span[0], span[2])  # pixels per metre
    w = max(2, int(round(span[0] * scale)))
    h = max(2, int(round(span[2] * scale)))
    xs = lo[0] + (np.arange(w) + 0.5) / scale
    zs = lo[2] + (np.arange(h) + 0.5) / scale
    gx, gz = np.meshgrid(xs, zs)
    pts = np.stack([gx.ravel(), np.full(gx.size, y), gz.ravel()], axis=1).astype(np.float32)
    d, _ = distance(world, pts)
    return d.reshape(h, w), lo, scale


def slice_rgb(d, voxel):
    """Free space light blue (lighter far from surfaces), solid dark, surfaces outlined."""
    free = np.clip(d / 3.0, 0.0, 1.0)[..., None]
    light = np.array([205, 220, 235]) * (1 - free) + np.array([250, 252, 255]) * free
    rgb = np.where(d[..., None] < 0, np.array([55, 55, 60]), light)
    rgb[np.abs(d) < 0.6 * voxel] = (0, 0, 0)
    return rgb.astype(np.uint8)


def render_view(world, pose, out, *, sensor=None, max_distance=20.0, title=None, slice_size=520, backend="cpu"):
    """Trace the rays of an actor at ``pose`` (x, y, z, yaw) and draw them to ``out`` (PNG).

    Returns a dict with the path, the depth statistics and the image size.
    """
    from navi_nb.sense.sensor import Sensor
    from navi_nb.sense.tracer import trace

    Image, ImageDraw, ImageFont = pillow()
    pose = np.asarray(pose, dtype=np.float64).reshape(-1)
    if pose.shape != (4,) or not np.all(np.isfinite(pose)):
        raise RenderError(f"pose must be four finite numbers x, y, z, yaw, got {pose.tolist()}")
    sensor = sensor or Sensor(256, 48)
    origin = pose[None, :3].astype(np.float32)
    yaw = pose[None, 3].astype(np.float32)
    depth, sem, hit = trace(world, origin, yaw, sensor, max_distance, backend=backend)
    depth, hit = np.asarray(depth)[0], np.asarray(hit)[0]

    big = font(ImageFont, 13)
    small = font(ImageFont, 11)
    scale = max(1, int(round(slice_size / sensor.az_count)))
    cmax = depth_scale(depth, hit, max_distance)
    pano = panorama(depth, hit, cmax, scale)
    if pano.shape[0] < 120:  # stretch the rows of short sensors so the picture reads
        rep = int(math.ceil(120 / pano.shape[0]))
        pano = np.repeat(pano, rep, axis=0)
    ph, pw = pano.shape[:2]
    d, lo, pscale = slice_field(world, float(pose[1]), slice_size, *_bounds_of_interest(world))
    sl = slice_rgb(d, world.voxel_size)
    sh, sw = sl.shape[:2]
    margin, bar_w = 14, 18
    width = max(pw, sw) + 2 * margin + bar_w + 60
    height = margin + 22 + ph + 28 + 22 + sh + margin + 18
    img = Image.new("RGB", (width, height), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    y0 = margin
    draw.text((margin, y0), title or "depth panorama", fill=(0, 0, 0), font=big)
    y0 += 22
    img.paste(Image.fromarray(pano, "RGB"), (margin, y0))
    # axis labels under the panorama
    for frac, label in ((0.0, "-180"), (0.25, "-90 (left)"), (0.5, "0 ahead"), (0.75, "+90 (right)")):
        draw.text((margin + int(frac * pw) + 2, y0 + ph + 2), label, fill=(60, 60, 60), font=small)
    _draw_colour_bar(img, draw, (margin + pw + 14, y0), ph, bar_w, cmax, small)

    y1 = y0 + ph + 28
    draw.text(
        (margin, y1),
        f"slice at y = {pose[1]:.2f} m from above (+x right, -z up); red: actor; dots: hits within 25 deg of level",
        fill=(0, 0, 0),
        font=small,
    )
    y1 += 22
    slice_img = Image.fromarray(sl, "RGB")
    sdraw = ImageDraw.Draw(slice_img)

    _draw_slice_rays(sdraw, sensor, pose, yaw, depth, hit, cmax, lo, pscale)
    img.paste(slice_img, (margin, y1))
    stats = {
        "rays": int(depth.size),
        "hit_fraction": float(hit.mean()),
        "depth_min": float(depth.min()),
        "depth_median": float(np.median(depth)),
        "depth_max": float(depth.max()),
    }
    draw.text(
        (margin, y1 + sh + 4),
        f"{sensor.az_count}x{sensor.el_count} rays, max distance {max_distance:g} m, "
        f"{100 * stats['hit_fraction']:.1f}% hit, voxel {world.voxel_size:.3g} m",
        fill=(60, 60, 60),
        font=small,
    )
    out = Path(out)
    try:
        img.save(out)
    except (OSError, ValueError) as exc:
        raise RenderError(f"cannot write {out}: {exc}") from exc
    stats.update(path=str(out), width=width, height=height)
    return stats


def _draw_colour_bar(img, draw, at, ph, bar_w, cmax, font_):
    """The depth colour bar (height ph) at ``at`` with its metre labels and the no-hit swatch."""
    bx, y0 = at
    Image = pillow()[0]
    bar = colour_map(np.linspace(0, 1, ph))[:, None, :].repeat(bar_w, axis=1)
    img.paste(Image.fromarray(bar, "RGB"), (bx, y0))
    for k in range(5):
        v = cmax * k / 4
        yy = y0 + int(round((ph - 1) * k / 4))
        draw.line([(bx + bar_w, yy), (bx + bar_w + 4, yy)], fill=(0, 0, 0))
        draw.text((bx + bar_w + 6, yy - 6), f"{v:.3g} m", fill=(0, 0, 0), font=font_)
    draw.rectangle([bx, y0 + ph + 4, bx + bar_w, y0 + ph + 14], fill=MISS_COLOUR)
    draw.text((bx + bar_w + 6, y0 + ph + 2), "no hit", fill=(0, 0, 0), font=font_)


def _draw_slice_rays(sdraw, sensor, pose, yaw, depth, hit, cmax, lo, pscale):
    """The actor, its heading and its rays on the top-down slice (lo, pscale: slice origin, pixels per metre)."""

    def to_px(x, z):
        return ((x - lo[0]) * pscale, (z - lo[2]) * pscale)

    dirs = sensor.world_directions(yaw)[0].astype(np.float64)
    ends = pose[:3] + depth[..., None].astype(np.float64) * dirs
    cols = colour_map(depth / cmax)
    near_level = np.abs(sensor.elevations) <= math.radians(25)  # dots of rays near the horizontal
    ax, az_ = to_px(pose[0], pose[2])
    horizon = int(np.argmin(np.abs(sensor.elevations)))
    for i in range(sensor.az_count):  # the horizontal row as faint lines
        ex, ez = to_px(ends[i, horizon, 0], ends[i, horizon, 2])
        sdraw.line([(ax, az_), (ex, ez)], fill=(235, 170, 170) if hit[i, horizon] else (210, 210, 210))
    for i in range(sensor.az_count):
        for j in range(sensor.el_count):
            if hit[i, j] and near_level[j]:
                ex, ez = to_px(ends[i, j, 0], ends[i, j, 2])
                c = tuple(int(v) for v in cols[i, j])
                sdraw.ellipse([ex - 1.5, ez - 1.5, ex + 1.5, ez + 1.5], fill=c)
    r = max(4.0, 0.25 * pscale)
    sdraw.ellipse([ax - r, az_ - r, ax + r, az_ + r], fill=(220, 30, 30), outline=(0, 0, 0))
    fx, fz = math.sin(pose[3]), -math.cos(pose[3])
    sdraw.line([(ax, az_), (ax + 3 * r * fx, az_ + 3 * r * fz)], fill=(220, 30, 30), width=3)


def _bounds_of_interest(world):
    """The sidecar's region of interest (x-z view of the slice), else the whole cube."""
    roi = world.sidecar.get("bounds_of_interest") if isinstance(world.sidecar, dict) else None
    if roi and len(roi) == 2:
        lo = np.asarray(roi[0], dtype=np.float64)
        hi = np.asarray(roi[1], dtype=np.float64)
        pad = 0.5
        return np.maximum(lo - pad, world.bmin), np.minimum(hi + pad, world.bmax)
    return None, None
