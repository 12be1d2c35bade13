"""The observation: one flat float32 vector per actor, and its layout.

Layout (in this order; ``R = Az * El`` rays, flattened azimuth-major, i.e.
ray ``(a, e)`` sits at ``a * El + e``, the order of the tracer's
``(actors, Az, El)`` arrays):

    depth       R   log1p(d) / log1p(max_distance), in [0, 1]; a miss reads 1
    semantic    R   (only with ``semantic_obs``) class id / (classes - 1), 0 on a miss
    prev_action 4   the clipped action of the previous step (0 after a reset)
    velocity    3   achieved velocity in the actor's frame, each divided by its
                    max speed: (forward, vertical, lateral), so +1 is full speed
                    ahead / up / right
    goal        4   (only for ``pointgoal``) distance / goal_scale,
                    sin(bearing), cos(bearing), (goal y - actor y) / goal_scale;
                    bearing is the goal's horizontal angle from the heading,
                    positive to the right (the sensor's azimuth sense)
    map         C*S*S (only with ``map_cell`` > 0) the episodic map's egocentric crop, C channels of S x S
                cells (``navi_nb/env/episodic_map.py``)
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


def obs_layout(n_rays: int, semantic: bool, goal: bool, map_size: int = 0) -> dict:
    """Name -> slice of the flat observation (``map_size``: the map's columns, 0 without a map)."""
    layout = {}
    at = 0
    for name, size, on in (
        ("depth", n_rays, True),
        ("semantic", n_rays, semantic),
        ("prev_action", 4, True),
        ("velocity", 3, True),
        ("goal", 4, goal),
        ("map", map_size, map_size > 0),
    ):
        if on:
            layout[name] = slice(at, at + size)
            at += size
    return layout


def obs_size(layout: dict) -> int:
    return max(s.stop for s in layout.values())


@njit(cache=True, nogil=True)
def write_tail(actors, dest, scales, pose, goals, prev_action, ray_columns, use_goal, out):
    """Write the columns after the rays (previous action, velocity, goal) of actor ``actors[j]`` into row
    ``dest[j]`` of ``out``, for every j, from the actors' state as it is now.

    scales ``(inv_log_max, sem_scale, inv_speeds, inv_goal_scale)``: inv_speeds (3,) float64 = 1 / (max
    forward, vertical, lateral speed). pose ``(world_index, pos, yaw, vel)`` and goals ``(goal,
    goal_dist, start_dist)``: ``nav_env``'s per-actor bundles (pos, goal (A,3), yaw (A,), vel (A,3)
    world-frame m/s, all float32). prev_action (A,4) float32. ray_columns: the columns the rays take
    (R, or 2R with semantic). out (N, D) float32.
    """
    _inv_log_max, _sem_scale, inv_speeds, inv_goal_scale = scales
    _world_index, pos, yaw, vel = pose
    goal = goals[0]
    for j in range(actors.shape[0]):
        i = actors[j]
        row = dest[j]
        o = ray_columns
        for q in range(4):
            out[row, o + q] = prev_action[i, q]
        o += 4
        psi = np.float64(yaw[i])
        s, c = math.sin(psi), math.cos(psi)
        vx = np.float64(vel[i, 0])
        vy = np.float64(vel[i, 1])
        vz = np.float64(vel[i, 2])
        out[row, o] = np.float32((vx * s - vz * c) * inv_speeds[0])  # forward
        out[row, o + 1] = np.float32(vy * inv_speeds[1])  # vertical
        out[row, o + 2] = np.float32((vx * c + vz * s) * inv_speeds[2])  # lateral (right)
        o += 3
        if use_goal:
            gx = np.float64(goal[i, 0]) - np.float64(pos[i, 0])
            gy = np.float64(goal[i, 1]) - np.float64(pos[i, 1])
            gz = np.float64(goal[i, 2]) - np.float64(pos[i, 2])
            gf = gx * s - gz * c
            gr = gx * c + gz * s
            h = math.sqrt(gf * gf + gr * gr)
            d = math.sqrt(gx * gx + gy * gy + gz * gz)
            out[row, o] = np.float32(d * inv_goal_scale)
            if h > 1e-9:
                out[row, o + 1] = np.float32(gr / h)
                out[row, o + 2] = np.float32(gf / h)
            else:
                out[row, o + 1] = np.float32(0.0)
                out[row, o + 2] = np.float32(1.0)
            out[row, o + 3] = np.float32(gy * inv_goal_scale)
