"""The worlds of a ``NavEnv``: the constructor's world argument checked, the world each episode runs in
(``EnvConfig.world_schedule``), and what each world of a set gives its actors (voxel size, contact margin,
spawn sampler)."""

from __future__ import annotations

import numbers
from pathlib import Path

import numpy as np

from navi_nb.env.config import TASKS, EnvConfig, EnvConfigError
from navi_nb.env.motion import clearance_distances, field_cube
from navi_nb.env.spawn import SpawnSampler, region_of_interest
from navi_nb.world import gmdag
from navi_nb.world.world_set import WorldSet

_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix64(x):
    """splitmix64's finaliser over a uint64 array (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * _MIX1
    x = (x ^ (x >> np.uint64(27))) * _MIX2
    return x ^ (x >> np.uint64(31))


def scheduled_worlds(schedule, n_worlds, seed, actors, episodes) -> np.ndarray:
    """(n,) int32: the world of episode ``episodes[j]`` of actor ``actors[j]`` (see
    ``EnvConfig.world_schedule``); a pure function of its arguments."""
    a = np.asarray(actors, dtype=np.int64)
    k = np.asarray(episodes, dtype=np.int64)
    if schedule == "round_robin":
        return ((a + k) % n_worlds).astype(np.int32)
    with np.errstate(over="ignore"):
        h = _mix64(np.uint64(seed) * _GOLDEN + _mix64(a.astype(np.uint64) + np.uint64(1)))
        h = _mix64(h ^ (k.astype(np.uint64) * _GOLDEN))
    return (h % np.uint64(n_worlds)).astype(np.int32)


def checked_world(world, n_actors, task, seed, actor_block, first_block):
    """``world`` loaded when it is a path, or an EnvConfigError naming the first argument that is wrong."""
    if isinstance(world, (str, Path)):
        world = gmdag.load_world(world)
    if not isinstance(world, (gmdag.World, WorldSet)):
        raise EnvConfigError(f"NavEnv: world must be a World, a WorldSet or a .gmdag path, got {type(world).__name__}")
    if isinstance(n_actors, bool) or not isinstance(n_actors, numbers.Integral) or n_actors < 1:
        raise EnvConfigError(f"NavEnv: n_actors must be a positive integer, got {n_actors!r}")
    if task not in TASKS:
        raise EnvConfigError(f"NavEnv: task must be one of {', '.join(TASKS)}, got {task!r}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise EnvConfigError(f"NavEnv: seed must be a non-negative integer, got {seed!r}")
    for name, v in (("actor_block", actor_block), ("first_block", first_block)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
            raise EnvConfigError(f"NavEnv: {name} must be a non-negative integer, got {v!r}")
    block = min(int(actor_block), int(n_actors)) if actor_block else 0
    if block and n_actors % block:
        raise EnvConfigError(f"NavEnv: n_actors ({n_actors}) must be a multiple of actor_block ({actor_block})")
    return world


def world_voxel(world) -> float:
    """A world's voxel size as the kernels read it (float32 bits)."""
    return float(np.float32(world.voxel_size))


def contact_margin(cfg: EnvConfig, voxel: float) -> float:
    """The contact margin in a world of voxel size ``voxel``: the setting, or half a voxel where it is negative."""
    return cfg.contact_margin if cfg.contact_margin >= 0 else 0.5 * voxel


def world_spawner(world_set, w, cfg: EnvConfig, voxel, margin, pool_dir) -> SpawnSampler:
    """World ``w``'s spawn sampler as every environment over ``world_set`` builds it: its pool read from the
    pool cache in ``pool_dir`` (``pool_file.default_pool_dir()``), or computed and written there."""
    wd = world_set.worlds[w]
    cube_lo, cube_hi = field_cube(wd)
    roi = region_of_interest(wd)
    roi_lo, roi_hi = roi if roi is not None else (cube_lo, cube_hi)
    spawn_cell = cfg.spawn_cell if cfg.spawn_cell > 0 else max(cfg.radius, voxel)

    def distance_fn(points):
        return clearance_distances((world_set, w), points)

    try:
        return SpawnSampler(
            distance_fn,
            (cube_lo, cube_hi),
            (roi_lo, roi_hi),
            cfg.radius,
            margin,
            spawn_cell,
            wd.spawn_points,
            cfg.spawn,
            cache_dir=pool_dir,
            world_digest=gmdag.world_digest(wd),
        )
    except EnvConfigError as exc:  # which world of a large set: the spawn message alone does not say
        raise EnvConfigError(f"world {world_set.names[w]} ({w + 1} of {len(world_set)}): {exc}") from None
