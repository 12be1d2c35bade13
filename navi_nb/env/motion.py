"""Kinematics and collision: one Numba kernel, parallel over actors.

Frames (docs/ENVIRONMENT.md): y is up; at yaw 0 an actor faces -z and +x is its right.
Yaw is the heading's azimuth, growing to the right like the sensor's azimuth,
so an actor at yaw ``psi`` has

    forward = ( sin psi, 0, -cos psi)
    right   = ( cos psi, 0,  sin psi)
    up      = ( 0,       1,  0      )

A step with action ``(f, v, l, w)`` (each clipped to [-1, 1]) asks to move by
``dt * (f * max_speed * forward + v * max_vertical_speed * up
+ l * max_lateral_speed * right)`` using the heading at the start of the step,
then turns by ``w * max_yaw_rate * dt`` (yaw kept in [-pi, pi)).

Collision: the actor is a sphere of radius ``r``. Its clearance is
``s = query(centre) - r - margin`` (``margin`` absorbs the world's
quantisation, default half a voxel), where ``query`` is the actor's world's point
query (``navi_nb/world/query.py``: the interpolated field of
``navi_nb/world/field.py``, the same field the tracer's rays read). The
move is cut into sub-moves no longer than ``max(s, h_min)`` (``h_min`` is a quarter voxel), so the centre can never
skip across a wall: a sub-move longer than the clearance is impossible, and the
short ones (``h_min``) are far thinner than any wall the world resolves. After
each sub-move the clearance is checked again; if it went negative the actor is
pushed back out along the surface normal (central differences of point
queries, one voxel apart) and the rest of the move loses its component into
the surface, so the actor slides along it. Such a step reports a contact. The
centre is also kept within the world cube shrunk by the radius (touching the
cube's side is a contact too).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from navi_nb.threads import RangeKernel, run_ranges
from navi_nb.world.layout import field_origin
from navi_nb.world.query import query_point, world_arrays
from navi_nb.world.world_set import world_field


@njit(cache=True)
def _sdf(field, x, y, z):
    """The world's scalar query, metres (float64); ``field`` as ``world_arrays``
    returns it. Not inlined: the kernel calls it from nine places and one
    compiled copy keeps the JIT time short."""
    d, _sem = query_point(field, x, y, z)
    return d


@njit(inline="always", cache=True)
def _clearance(field, x, y, z, r_plus_margin):
    return _sdf(field, x, y, z) - r_plus_margin


@njit(inline="always", cache=True)
def _normal(field, x, y, z, fx, fy, fz):
    """Unit gradient of the distance field by central differences (one voxel);
    falls back to (fx, fy, fz) where the field is flat."""
    e = field[8]  # the voxel size
    gx = _sdf(field, x + e, y, z) - _sdf(field, x - e, y, z)
    gy = _sdf(field, x, y + e, z) - _sdf(field, x, y - e, z)
    gz = _sdf(field, x, y, z + e) - _sdf(field, x, y, z - e)
    n = math.sqrt(gx * gx + gy * gy + gz * gz)
    if n < 1e-12:
        return fx, fy, fz
    return gx / n, gy / n, gz / n


@njit(inline="always", cache=True)
def _keep_inside(n, r, lo, hi):
    """Clamp coordinate n to [lo, hi]; at a side, drop the remaining move r's
    component into it. Returns (n, r, whether a side was touched)."""
    if n < lo:
        return lo, (r if r > 0.0 else 0.0), True
    if n > hi:
        return hi, (r if r < 0.0 else 0.0), True
    return n, r, False


WP_MARGIN, WP_H_MIN, WP_LO, WP_HI = 0, 1, 2, 5  # columns of move_actors' per-world table (lo, hi: 3 each)


def world_motion_params(world_set, margins, radius):
    """(W, 8) float64 per world: contact margin, shortest sub-move ``h_min`` (a quarter
    voxel), and the box the centre must stay in (lo xyz, hi xyz: the field's cube
    shrunk by ``radius``)."""
    out = np.zeros((len(world_set), 8), np.float64)
    for w, world in enumerate(world_set.worlds):
        voxel = float(np.float32(world.voxel_size))
        lo, hi = field_cube(world)
        out[w, WP_MARGIN] = margins[w]
        out[w, WP_H_MIN] = 0.25 * voxel
        out[w, WP_LO : WP_LO + 3] = lo + radius
        out[w, WP_HI : WP_HI + 3] = hi - radius
    return out


def field_cube(world):
    """(lo, hi) (3,) float64 metres: the cube the world's field covers (``bmin``..``bmax``,
    half a voxel lower for a corner-sampled world, ``layout.field_origin``)."""
    lo = field_origin(world)
    shift = lo - np.asarray(world.bmin, dtype=np.float32).astype(np.float64)
    return lo, world.bmax.astype(np.float64) + shift


@njit(cache=True, nogil=True, _nrt=False)
def move_span(i0, i1, worlds, limits, pose, moves):
    """Actors ``i0 .. i1 - 1``'s step of :data:`move_actors`, each actor alone; the bundles as
    :data:`move_actors` describes them."""
    packed, wparams = worlds
    speeds, dt, radius, max_substeps = limits
    world_index, pos, yaw, vel_out = pose
    act, contact_out, moved_out = moves
    for i in range(i0, i1):
        w = world_index[i]
        field = world_field(packed, w)
        rpm = np.float64(radius) + wparams[w, WP_MARGIN]
        h_min = wparams[w, WP_H_MIN]
        lo = wparams[w, WP_LO : WP_LO + 3]
        hi = wparams[w, WP_HI : WP_HI + 3]
        psi = np.float64(yaw[i])
        s, c = math.sin(psi), math.cos(psi)
        f = np.float64(act[i, 0]) * speeds[0] * dt
        v = np.float64(act[i, 1]) * speeds[1] * dt
        l = np.float64(act[i, 2]) * speeds[2] * dt
        # requested displacement: f * forward + v * up + l * right
        rx = f * s + l * c
        ry = v
        rz = -f * c + l * s
        x0 = np.float64(pos[i, 0])
        y0 = np.float64(pos[i, 1])
        z0 = np.float64(pos[i, 2])
        x, y, z = x0, y0, z0
        contact = False
        for _sub in range(max_substeps):
            L = math.sqrt(rx * rx + ry * ry + rz * rz)
            if L < 1e-9:
                break
            clear = _clearance(field, x, y, z, rpm)
            h = clear if clear > h_min else h_min
            if h >= L:
                t = 1.0
            else:
                t = h / L
            sx, sy, sz = rx * t, ry * t, rz * t
            rx -= sx
            ry -= sy
            rz -= sz
            nx, ny, nz = x + sx, y + sy, z + sz
            # push out of the margin band along the normal (twice, for corners)
            for _push in range(2):
                c2 = _clearance(field, nx, ny, nz, rpm)
                if c2 >= 0.0:
                    break
                contact = True
                gx, gy, gz = _normal(field, nx, ny, nz, -sx / (L * t), -sy / (L * t), -sz / (L * t))
                nx -= gx * c2
                ny -= gy * c2
                nz -= gz * c2
                dn = rx * gx + ry * gy + rz * gz
                if dn < 0.0:  # drop the rest of the move's component into the surface
                    rx -= dn * gx
                    ry -= dn * gy
                    rz -= dn * gz
            # the world cube's sides
            nx, rx, hit_x = _keep_inside(nx, rx, lo[0], hi[0])
            ny, ry, hit_y = _keep_inside(ny, ry, lo[1], hi[1])
            nz, rz, hit_z = _keep_inside(nz, rz, lo[2], hi[2])
            contact = contact or hit_x or hit_y or hit_z
            x, y, z = nx, ny, nz
        dx, dy, dz = x - x0, y - y0, z - z0
        pos[i, 0] = np.float32(x)
        pos[i, 1] = np.float32(y)
        pos[i, 2] = np.float32(z)
        vel_out[i, 0] = np.float32(dx / dt)
        vel_out[i, 1] = np.float32(dy / dt)
        vel_out[i, 2] = np.float32(dz / dt)
        moved_out[i] = np.float32(math.sqrt(dx * dx + dy * dy + dz * dz))
        contact_out[i] = contact
        ny_ = psi + np.float64(act[i, 3]) * speeds[3] * dt
        ny_ = (ny_ + math.pi) % (2.0 * math.pi) - math.pi
        yaw[i] = np.float32(ny_)


def _actors(worlds, limits, pose, *rest):
    return pose[0].shape[0]


MOVE_GRAIN = 256
"""The fewest actors a thread is handed (a move costs about a quarter of a microsecond: fewer actors
move faster in the calling thread alone)."""
move_actors = RangeKernel(move_span, _actors, MOVE_GRAIN)
"""Advance every actor one step with collision, each in its own world: ``move_actors(worlds, limits,
pose, moves)``, :func:`move_span` over all actors on the threads (``threads.run_ranges``).

worlds ``(packed, wparams)``, shared: the world set's packed layouts (``WorldSet.packed.arrays``) and
the (W, 8) float64 table of :func:`world_motion_params`. limits ``(speeds, dt, radius, max_substeps)``:
speeds (4,) float64 max forward, vertical, lateral speed (m/s) and yaw rate (rad/s). pose
``(world_index, pos, yaw, vel)``, per actor (``nav_env``'s bundle): world_index (A,) int32 each
actor's world; pos (A,3) float32 metres and yaw (A,) float32 radians are updated in place; vel (A,3)
float32 is written (world-frame velocity actually achieved, m/s). moves ``(act, contact, moved)``:
act (A,4) float32, already clipped to [-1, 1]; writes contact (A,) bool and moved (A,) float32
(metres travelled).
"""


@njit(cache=True, nogil=True)
def _distances(i0, i1, field, points, out):
    for i in range(i0, i1):
        out[i] = _sdf(field, points[i, 0], points[i, 1], points[i, 2])


@njit(cache=True, nogil=True)
def _distances_in(i0, i1, packed, w, points, out):
    field = world_field(packed, w)
    for i in range(i0, i1):
        out[i] = _sdf(field, points[i, 0], points[i, 1], points[i, 2])


POINTS_GRAIN = 4096  # the fewest clearance points a thread is handed at once


def clearance_distances(world, points) -> np.ndarray:
    """(N,) float64 distances (metres) at points (N,3), by the same scalar query
    the collision kernel uses (so spawn clearances and collisions agree).
    ``world``: a World, or ``(world_set, w)`` for world ``w`` of a set."""
    pts = np.ascontiguousarray(points, dtype=np.float64).reshape(-1, 3)
    out = np.empty(pts.shape[0], dtype=np.float64)
    if pts.shape[0]:
        if isinstance(world, tuple):
            world_set, w = world
            run_ranges(_distances_in, pts.shape[0], POINTS_GRAIN, world_set.packed.arrays, int(w), pts, out)
        else:
            run_ranges(_distances, pts.shape[0], POINTS_GRAIN, world_arrays(world), pts, out)
    return out
