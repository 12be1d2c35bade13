"""The checks of what callers hand the environment: actions before a step, a state dict before
``set_state``. Each raises its error before anything changes."""

from __future__ import annotations

import numpy as np

from navi_nb.env.config import ActionError, EnvConfigError, StateError


def check_actions(actions, A) -> np.ndarray:
    """The actions of ``A`` actors as an array, or an :class:`ActionError`; changes nothing."""
    if isinstance(actions, np.ma.MaskedArray):
        # a mask would hide NaN from the check below while the kernels read the data under it
        raise ActionError(
            "NavEnv.step: actions must be a plain array, not a masked array (fill the masked values first)"
        )
    if type(actions) is np.ndarray:
        a = actions
    else:
        try:
            a = np.asarray(actions)  # a subclass becomes the plain array its data is
        except (ValueError, TypeError) as exc:
            raise ActionError(f"NavEnv.step: actions are not an array of numbers ({exc})") from None
    if a.dtype.kind != "f":
        raise ActionError(f"NavEnv.step: actions must be floating point (float32 recommended), got dtype {a.dtype}")
    if a.shape != (A, 4):
        raise ActionError(
            f"NavEnv.step: actions must have shape ({A}, 4) (actors x forward, vertical, "
            f"lateral, yaw rate), got {a.shape}"
        )
    finite = np.isfinite(a)
    if not finite.all():
        i, j = np.argwhere(~finite)[0]
        raise ActionError(
            f"NavEnv.step: action of actor {i}, component {j} is {a[i, j]} "
            f"({int((~finite).sum())} non-finite values in all); nothing was changed"
        )
    return a


def check_state_ranges(v, cfg, wparams, n_cells, n_worlds) -> None:
    """Raise StateError for finite values no step can produce (outside the world, negative counts, ...): ``v``
    a state dict, ``cfg`` the EnvConfig, ``wparams`` the per-world motion table (``world_motion_params``),
    ``n_cells`` (W,) the visit grids' cell counts."""

    def refuse(name, what):
        raise StateError(f"NavEnv.set_state: {name} {what}")

    # each actor's bounds are its world's (world_index was checked first)
    wi = v["world_index"].astype(np.int64)
    lo, hi = wparams[wi, 2:5], wparams[wi, 5:8]
    # float32 rounding of positions clamped in float64: a small tolerance around the exact bounds
    tol = 1e-4 * max(1.0, float(np.max(wparams[:, 5:8] - wparams[:, 2:5])))
    if np.any(v["pos"] < lo - tol) or np.any(v["pos"] > hi + tol):
        where = f"{wparams[0, 2:5].tolist()}..{wparams[0, 5:8].tolist()}" if n_worlds == 1 else "of the actor's world"
        refuse("pos", f"holds positions outside the reachable cube {where}")
    cube_lo, cube_hi = lo - cfg.radius, hi + cfg.radius
    if np.any(v["goal"] < cube_lo - tol) or np.any(v["goal"] > cube_hi + tol):
        refuse("goal", "holds goals outside the world's cube")
    if np.any(np.abs(v["yaw"]) > np.float32(np.pi)):
        refuse("yaw", "holds angles outside [-pi, pi]")
    if np.any(np.abs(v["prev_action"]) > 1.0):
        refuse("prev_action", "holds actions outside [-1, 1] (actions are clipped)")
    extent = float(np.max(cube_hi - cube_lo))
    if np.any(np.abs(v["vel"]) > extent / cfg.dt):
        refuse("vel", "holds velocities no step can reach")
    for name in ("goal_dist", "start_dist", "path_len", "collisions", "episodes", "cells", "ep_len"):
        if np.any(v[name] < 0):  # elementwise: a NaN (start_dist's unknown length) hides nothing
            refuse(name, "holds negative values")
    if v["ep_len"].size and v["ep_len"].max() > cfg.max_steps:
        refuse("ep_len", f"holds episode lengths over max_steps ({cfg.max_steps})")
    if v["collisions"].size and np.any(v["collisions"] > v["ep_len"]):
        refuse("collisions", "holds more collisions than steps in the episode")
    n_cells = np.asarray(n_cells, np.int64)[wi]
    if v["cells"].size and np.any(v["cells"] > n_cells):
        refuse("cells", f"holds more visited cells than the grid has ({int(n_cells.max())})")


def check_straight_band(pools, names, dmin, dmax) -> None:
    """Refuse a straight-line goal band that some world cannot hold: no two points of its pool (``pools``,
    one (n, 3) array a world) are ``dmin`` apart when the diagonal of the pool's bounding box is shorter."""
    for pool, name in zip(pools, names):
        reach = float(np.linalg.norm(pool.max(axis=0).astype(np.float64) - pool.min(axis=0)))
        if reach < dmin:
            raise EnvConfigError(
                f"NavEnv: world {name} has no two points {dmin} m apart (its free space spans at most "
                f"{reach:.2f} m): goal band {dmin}..{dmax} m (goal_distance euclidean) cannot be met there"
            )
