"""Baselines for the explore task: what a trained policy's coverage is measured against.

Two acting functions with the interface of ``evaluate.run_episodes`` (observations (N, obs_dim) ->
actions (N, 4) float32: forward, vertical, lateral, yaw rate, each in [-1, 1]), and ``compare``, which runs
a run's trained policy and both baselines through ``evaluate.evaluate_policy`` on the same episodes:

- ``random_policy``: uniform actions, from a generator seeded again at every ``reset()``;
- ``wall_follower``: the right- (or left-) hand rule over the depth observation's horizontal ring: keep a
  wall on one side at about ``distance`` metres, turn away from a wall ahead, turn toward the side when
  the wall there falls away, while climbing and sinking in turn (the reachable cells lie at several
  heights). Deterministic; it reads only the depth columns, so it runs on either task.
"""

from __future__ import annotations

import numpy as np

from navi_nb.train.coverage import COVERAGE_KEYS, coverage_cell
from navi_nb.train.evaluate import evaluate_policy, evaluation_set, load_run_policy, mean_action
from navi_nb.train.runs import RunError, read_run_config

BASELINES = ("random", "wall-follower")
RING_HALF_WIDTH = np.pi / 6  # elevation rows within 30 degrees of the horizon make the ring
SECTOR_HALF_WIDTH = np.pi / 8  # the azimuths "ahead" and "beside" span 45 degrees each


def random_policy(seed=0):
    """Uniform actions in [-1, 1]^4; ``reset()`` seeds the generator again, so each evaluation draws the same."""
    state = {}

    def act(obs):
        rng = state.setdefault("rng", np.random.default_rng(seed))
        return rng.uniform(-1.0, 1.0, size=(obs.shape[0], 4)).astype(np.float32)

    act.reset = state.clear
    return act


def wall_follower(sensor, max_distance, side="right", distance=0.6, climb_steps=30):
    """The wall-following rule over the depth rays of ``sensor`` (observation depth: ``log1p(d) /
    log1p(max_distance)``, azimuth-major, azimuth 0 ahead and growing to the right). The reachable cells
    lie at several heights, so it also climbs and sinks at full vertical speed, turning every
    ``climb_steps`` calls (0: it keeps its height); ``reset()`` starts that count again."""
    if side not in ("right", "left"):
        raise RunError(f"wall_follower: side must be 'right' or 'left', got {side!r}")
    if not (np.isfinite(distance) and distance > 0):
        raise RunError(f"wall_follower: distance must be a positive number of metres, got {distance!r}")
    if isinstance(climb_steps, bool) or not isinstance(climb_steps, int) or climb_steps < 0:
        raise RunError(f"wall_follower: climb_steps must be a count of steps, got {climb_steps!r}")
    az, el = sensor.az_count, sensor.el_count
    ring = np.flatnonzero(np.abs(sensor.elevations) <= RING_HALF_WIDTH)
    ring = ring if ring.size else np.array([int(np.argmin(np.abs(sensor.elevations)))])
    sign = 1.0 if side == "right" else -1.0  # yaw rate > 0 turns right

    def sector(centre):  # the azimuth bins within SECTOR_HALF_WIDTH of ``centre`` (at least the nearest)
        gap = np.abs((sensor.azimuths - centre + np.pi) % (2 * np.pi) - np.pi)
        return np.flatnonzero(gap <= max(SECTOR_HALF_WIDTH, gap.min()))

    ahead, beside = sector(0.0), sector(sign * np.pi / 2)
    scale = np.log1p(max_distance)
    calls = [0]

    def act(obs):
        depth = np.asarray(obs)[:, : az * el].reshape(-1, az, el)[:, :, ring].min(axis=2)
        metres = np.expm1(depth.astype(np.float64) * scale)
        front, flank = metres[:, ahead].min(axis=1), metres[:, beside].min(axis=1)
        blocked, lost = front < 1.5 * distance, flank > 2.0 * distance
        actions = np.zeros((obs.shape[0], 4), np.float32)
        actions[:, 0] = np.where(blocked, 0.0, np.where(lost, 0.5, 1.0))
        follow = sign * np.clip((flank - distance) / distance, -1.0, 1.0) * 0.5  # steer to hold the distance
        actions[:, 3] = np.where(blocked, -sign, np.where(lost, 0.5 * sign, follow))
        if climb_steps:
            actions[:, 1] = 1.0 if calls[0] // climb_steps % 2 == 0 else -1.0
        calls[0] += 1
        return actions

    act.reset = lambda: calls.__setitem__(0, 0)
    return act


def compare(run_path, scenes, episodes=100, seed=None):
    """The trained policy of ``run_path`` (its mean action), ``random_policy`` and ``wall_follower`` on the
    same ``episodes`` episodes in the worlds of ``scenes`` (a spec; worlds the run trained in are refused):
    name -> ``evaluate_policy``'s results."""
    from navi_nb.env.config import EnvConfig
    from navi_nb.sense.sensor import Sensor

    cfg = read_run_config(run_path)
    if cfg.task != "explore":
        raise RunError(f"run {run_path} trained the {cfg.task} task; the baselines are compared on explore runs")
    world_set, _split = evaluation_set(run_path, cfg, scenes)
    policy, _origin = load_run_policy(run_path, cfg)
    max_distance = EnvConfig.from_kwargs(**cfg.env).max_distance
    acts = {
        "trained": mean_action(policy),
        "random": random_policy(),
        "wall-follower": wall_follower(Sensor(az=cfg.sensor_az, el=cfg.sensor_el), max_distance),
    }
    return {name: evaluate_policy(act, world_set, cfg, episodes, seed) for name, act in acts.items()}


def coverage_table(results) -> str:
    """``compare``'s results of an explore run as a Markdown table: per family, each policy's coverage after
    half the steps and after all of them, with 95 % intervals."""
    half, full = next(iter(results.values()))["coverage_steps"]
    lines = [
        f"| family | policy | episodes | coverage after {half} steps | coverage after {full} steps |",
        "|---|---|---|---|---|",
    ]
    for family in next(iter(results.values()))["families"]:
        for name, res in results.items():
            g = res["families"][family]
            cells = " | ".join(coverage_cell(g, k) for k in COVERAGE_KEYS)
            lines.append(f"| {family} | {name} | {g['episodes']} | {cells} |")
    return "\n".join(lines)
