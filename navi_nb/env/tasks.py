"""Tasks: reward terms, success, the per-actor visit grid, episode counters.

Both tasks share one kernel (``score_step``), parallel over actors, that writes
each reward term per actor, their sum, the termination flags and the episode
counters. Terms, in the order they are summed:

pointgoal
    progress  ``reward_progress * (g_before - g_after)``, g the distance from the
              actor's centre to the goal (metres) along the shortest path through
              free space (``progress="geodesic"``, read from the episode's field,
              ``navi_nb/env/geodesic.py``) or the straight line (``"euclidean"``)
    success   ``+reward_success`` on the step where the straight distance
              ``d_after <= success_radius``;
              the episode then terminates
    contact   ``-penalty_contact`` on a step that touched geometry / the cube's side
    time      ``-penalty_time`` on every step
    path      ``-penalty_path`` per metre the step moved the actor (what SPL
              divides by: the time term alone favours the fastest way, which
              with the slow turn and slow sideways motion is a longer arc)
    count     as below
explore
    new_cell  ``reward_new_cell`` per visit-grid cell entered for the first time
              this episode (the spawn cell counts as visited, unrewarded)
    contact   as above
    time      as above
    count     ``reward_count / sqrt(n)``, n the episodic map's visit count of the
              cell the actor's centre is in after the step, this step's visit
              included (n >= 1; the map's count saturates at 255), read by
              ``episodic_map.visits_after``; 0 with ``reward_count`` 0 (the
              default, off: the other terms and the reward keep their bits).
              Meant for explore, taken by both tasks; needs the map

Either task is truncated when the episode reaches its step limit without
terminating: ``max_steps``, or for a point-goal episode with ``max_steps_per_metre`` on,
``min(max_steps, ceil(max_steps_base + max_steps_per_metre * l))`` with l the episode's
shortest path from spawn to goal (SPL's, below; :func:`step_limit`). Per episode
the environment reports return, length, success, SPL (``success * l / max(p, l)``, p the path length travelled, l the
shortest path from spawn to goal through the world's reachable cells,
``spawn.path_lengths``: the geodesic distance of Anderson et al.'s
definition, which is the straight-line distance when the goal is in sight),
coverage (fraction of the reachable visit-grid cells visited) and collisions
(steps with a contact).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

POINTGOAL = 0
EXPLORE = 1
TERMS = {
    "pointgoal": ("progress", "success", "contact", "time", "path", "count"),
    "explore": ("new_cell", "contact", "time", "count"),
}
TASK_CODES = {"pointgoal": POINTGOAL, "explore": EXPLORE}


def reward_coefficients(task: str, cfg) -> np.ndarray:
    """The signed coefficient of each term, in TERMS order (float64)."""
    if task == "pointgoal":
        c = (cfg.reward_progress, cfg.reward_success, -cfg.penalty_contact, -cfg.penalty_time, -cfg.penalty_path)
    else:
        c = (cfg.reward_new_cell, -cfg.penalty_contact, -cfg.penalty_time)
    c += (cfg.reward_count,)
    return np.asarray(c, dtype=np.float64)


class VisitGrid:
    """Geometry of the coarse visit grid over a world's cube (one per world, shared, not per actor).

    Per actor only the bits live in the environment state: ``nbytes`` uint8.
    """

    def __init__(self, lo, hi, cell, max_cells):
        lo = np.asarray(lo, dtype=np.float64)
        hi = np.asarray(hi, dtype=np.float64)
        ext = float(np.max(hi - lo))
        cell = float(cell)
        if ext / cell > max_cells:
            cell = ext / max_cells
        self.lo = lo
        self.cell = cell
        self.dims = np.maximum(1, np.ceil((hi - lo) / cell - 1e-9)).astype(np.int64)
        self.n_cells = int(np.prod(self.dims))
        self.nbytes = (self.n_cells + 7) // 8

    def cell_of(self, points):
        p = np.asarray(points, dtype=np.float64)
        c = np.floor((p - self.lo) / self.cell).astype(np.int64)
        c = np.clip(c, 0, self.dims - 1)
        return (c[:, 0] * self.dims[1] + c[:, 1]) * self.dims[2] + c[:, 2]


@njit(inline="always", cache=True)
def _cell_index(x, y, z, lo, inv_cell, dims):
    ix = int(math.floor((np.float64(x) - lo[0]) * inv_cell))
    iy = int(math.floor((np.float64(y) - lo[1]) * inv_cell))
    iz = int(math.floor((np.float64(z) - lo[2]) * inv_cell))
    ix = min(max(ix, 0), dims[0] - 1)
    iy = min(max(iy, 0), dims[1] - 1)
    iz = min(max(iz, 0), dims[2] - 1)
    return (ix * dims[1] + iy) * dims[2] + iz


def score_rules(coefs, cfg) -> tuple:
    """The rules :func:`score_step` takes: ``(coefs, success_radius, (max_steps, max_steps_base,
    max_steps_per_metre))``, coefs from :func:`reward_coefficients`."""
    step_rule = (int(cfg.max_steps), int(cfg.max_steps_base), float(cfg.max_steps_per_metre))
    return (coefs, float(cfg.success_radius), step_rule)


@njit(inline="always", cache=True)
def step_limit(step_rule, length):
    """An episode's step limit under ``step_rule = (max_steps, base, per_metre)``: max_steps when per_metre
    is 0 or the length unknown (NaN), else ``min(max_steps, ceil(base + per_metre * length))``, length (metres,
    float64) the episode's shortest path from spawn to goal. Computed in float64, so no value overflows before
    the cap."""
    max_steps, base, per_metre = step_rule
    if per_metre <= 0.0 or np.isnan(length):
        return max_steps
    v = math.ceil(np.float64(base) + per_metre * length)
    return max_steps if v >= max_steps else v


@njit(inline="always", cache=True)
def straight_distance(goal, pos, i):
    """Actor ``i``'s straight distance to its goal, metres (float64): the success test's, the start's
    and the euclidean progress potential's (``geodesic.progress_potential``)."""
    gx = np.float64(goal[i, 0]) - np.float64(pos[i, 0])
    gy = np.float64(goal[i, 1]) - np.float64(pos[i, 1])
    gz = np.float64(goal[i, 2]) - np.float64(pos[i, 2])
    return math.sqrt(gx * gx + gy * gy + gz * gz)


def visit_tables(grids) -> tuple:
    """The per-world visit-grid bundle the kernels take, ``(lo, inv_cell, dims)``: lo (W,3) float64,
    inv_cell (W,) float64, dims (W,3) int64, row ``w`` the grid of world ``w`` (a list of VisitGrid)."""
    return (
        np.stack([g.lo for g in grids]).astype(np.float64),
        np.array([1.0 / g.cell for g in grids], dtype=np.float64),
        np.stack([g.dims for g in grids]).astype(np.int64),
    )


@njit(inline="always", cache=True)
def _visit_cell(grids, w, pos, i):
    """The cell of actor ``i``'s centre in world ``w``'s visit grid."""
    lo, inv_cell, dims = grids
    return _cell_index(pos[i, 0], pos[i, 1], pos[i, 2], lo[w], inv_cell[w], dims[w])


@njit(cache=True)
def start_episodes(rows, grids, pose, goals, visits, counters, prev_action):
    """Zero the episode counters of actors ``rows`` and mark their spawn cell in their world's visit
    grid. grids: :func:`visit_tables`; pose ``(world_index, pos, yaw, vel)``, goals ``(goal, goal_dist,
    start_dist)``, visits ``(visit, cells)``, counters ``(ep_return, ep_len, path_len, collisions)``:
    ``nav_env``'s per-actor bundles (:func:`score_step` names their types)."""
    world_index, pos, _yaw, vel = pose
    goal, goal_dist, start_dist = goals
    visit, cells = visits
    ep_return, ep_len, path_len, collisions = counters
    for j in range(rows.shape[0]):
        i = rows[j]
        d = straight_distance(goal, pos, i)
        goal_dist[i] = d
        start_dist[i] = d
        for b in range(visit.shape[1]):
            visit[i, b] = 0
        c = _visit_cell(grids, world_index[i], pos, i)
        visit[i, c >> 3] = np.uint8(1 << (c & 7))
        cells[i] = 1
        ep_return[i] = 0.0
        ep_len[i] = 0
        path_len[i] = 0.0
        collisions[i] = 0
        for q in range(4):
            prev_action[i, q] = 0.0
        for q in range(3):
            vel[i, q] = 0.0


@njit(cache=True)
def score_step(task, rules, grids, pose, goals, potential, moves, visits, counters, outcome, count_visits):
    """Rewards, flags and counters for one step of every actor.

    task: POINTGOAL or EXPLORE. rules ``(coefs, success_radius, step_rule)`` (:func:`score_rules`): coefs
    (T,) float64 the signed coefficients (:func:`reward_coefficients`); step_rule the step limit's
    (:func:`step_limit`), per-metre for a point-goal episode from its ``start_dist``, which must then hold
    the episode's shortest path (``NavEnv`` settles it before scoring). grids: :func:`visit_tables`. The per-actor
    bundles (``nav_env``): pose ``(world_index, pos, yaw, vel)``, world_index (A,) int32 each
    actor's world, pos (A,3) float32 after the move; goals ``(goal, goal_dist, start_dist)``, goal
    (A,3) float32, goal_dist (A,) float64 the progress potential before the move
    (``geodesic.progress_potential``: the geodesic or straight distance to the goal), updated to
    ``potential`` (A,) float64, its value after the move; moves ``(act, contact, moved)``, contact
    (A,) bool, moved (A,) float32 metres; visits ``(visit, cells)``, visit (A,B) uint8 bits, cells
    (A,) int32 visited count. Writes outcome ``(terms, reward, terminated, truncated, success)``:
    terms (T,A) float32, reward (A,) float32, the flags (A,) bool; adds to counters ``(ep_return,
    ep_len, path_len, collisions)``: float64, int32, float64, int32. count_visits (A,) int32: the count
    term's n (``episodic_map.visits_after``), 0 where the count bonus is off (the term 0, not summed).
    """
    coefs, success_radius, step_rule = rules
    max_steps = step_rule[0]
    world_index, pos, _yaw, _vel = pose
    goal, goal_dist, start_dist = goals
    _act, contact, moved = moves
    visit, cells = visits
    ep_return, ep_len, path_len, collisions = counters
    terms, reward, terminated, truncated, success = outcome
    n = pos.shape[0]
    for i in range(n):
        ok = False
        total = 0.0
        limit = max_steps
        if task == 0:
            limit = step_limit(step_rule, start_dist[i])
            d = straight_distance(goal, pos, i)
            t0 = coefs[0] * (goal_dist[i] - potential[i])
            goal_dist[i] = potential[i]
            ok = d <= success_radius
            t1 = coefs[1] if ok else 0.0
            t2 = coefs[2] if contact[i] else 0.0
            t3 = coefs[3]
            t4 = coefs[4] * np.float64(moved[i])
            terms[0, i] = np.float32(t0)
            terms[1, i] = np.float32(t1)
            terms[2, i] = np.float32(t2)
            terms[3, i] = np.float32(t3)
            terms[4, i] = np.float32(t4)
            total = t0 + t1 + t2 + t3 + t4
        else:
            c = _visit_cell(grids, world_index[i], pos, i)
            bit = np.uint8(1 << (c & 7))
            new = (visit[i, c >> 3] & bit) == 0
            if new:
                visit[i, c >> 3] |= bit
                cells[i] += 1
            t0 = coefs[0] if new else 0.0
            t1 = coefs[1] if contact[i] else 0.0
            t2 = coefs[2]
            terms[0, i] = np.float32(t0)
            terms[1, i] = np.float32(t1)
            terms[2, i] = np.float32(t2)
            total = t0 + t1 + t2
        last = coefs.shape[0] - 1
        tc = 0.0
        if count_visits[i] > 0:  # (off: not summed, so the sum keeps its bits even where it is -0.0)
            tc = coefs[last] / math.sqrt(np.float64(count_visits[i]))
            total += tc
        terms[last, i] = np.float32(tc)
        reward[i] = np.float32(total)
        success[i] = ok
        ep_return[i] += np.float64(np.float32(total))
        ep_len[i] += 1
        path_len[i] += np.float64(moved[i])
        if contact[i]:
            collisions[i] += 1
        terminated[i] = ok
        truncated[i] = (not ok) and ep_len[i] >= limit
