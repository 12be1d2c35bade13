"""The state ``NavEnv`` saves and restores: the spec of its arrays, copies of them (``get_state``), and a
state dict checked whole before ``set_state`` applies it (nothing changes when a check fails)."""

from __future__ import annotations

import numpy as np

from navi_nb.env.checks import check_state_ranges
from navi_nb.env.config import StateError
from navi_nb.rng_state import STATE_DTYPE, STATE_SHAPE, GeneratorStateError, generator_from_array, generator_to_array

RNG_NAMES = ("rng_spawn", "rng_goal")
"""The generators' states in a state dict (``rng_state`` arrays, one per actor block when blocked)."""
FINITE_NAMES = ("pos", "yaw", "vel", "prev_action", "goal", "goal_dist", "ep_return", "path_len", "obs")
"""The float arrays of a state dict, which must hold finite values only."""
NAN_NAMES = ("start_dist",)
"""The float arrays of a state dict that may hold NaN (an unknown shortest path) but no infinity."""


def state_spec(A, obs_dim, visit_bytes, n_blocks, map_cells=0) -> dict:
    """name -> (shape, dtype) of everything ``get_state`` saves for ``A`` actors: the per-actor arrays (each the
    environment's attribute ``_`` + its name; ``map``, the episodic maps, only with ``map_cells`` > 0), the world
    seed and the generators' states (``(n_blocks, 6)`` with actor blocks, else ``(6,)``)."""
    spec = {
        "pos": ((A, 3), np.float32),
        "yaw": ((A,), np.float32),
        "vel": ((A, 3), np.float32),
        "prev_action": ((A, 4), np.float32),
        "goal": ((A, 3), np.float32),
        "goal_dist": ((A,), np.float64),
        "start_dist": ((A,), np.float64),
        "visit": ((A, visit_bytes), np.uint8),
        "cells": ((A,), np.int32),
        "ep_return": ((A,), np.float64),
        "ep_len": ((A,), np.int32),
        "path_len": ((A,), np.float64),
        "collisions": ((A,), np.int32),
        "episodes": ((A,), np.int64),
        "obs": ((A, obs_dim), np.float32),
        "world_index": ((A,), np.int32),
        "world_seed": ((), np.uint64),
    }
    if map_cells:
        spec["map"] = ((A, map_cells, 2), np.uint8)
    rng_shape = (n_blocks,) + STATE_SHAPE if n_blocks else STATE_SHAPE
    spec.update({name: (rng_shape, STATE_DTYPE) for name in RNG_NAMES})
    return spec


def copied_state(spec, array_of, generators, blocked, has_reset) -> dict:
    """A state dict: copies of the arrays ``array_of(name)`` of ``spec``, and ``generators`` (name -> a
    generator, or a list of one per block when ``blocked``) as ``rng_state`` arrays."""
    out = {}
    for name in spec:
        if name in RNG_NAMES:
            g = generators[name]
            out[name] = np.stack([generator_to_array(b) for b in g]) if blocked else generator_to_array(g)
        else:
            out[name] = array_of(name).copy()
    out["has_reset"] = np.array(has_reset)
    return out


def checked_state(state, spec, cfg, wparams, n_cells, n_worlds, blocked):
    """``state`` (a ``get_state`` dict) checked against ``spec`` and the ranges no step leaves
    (``check_state_ranges``: ``cfg`` the EnvConfig, ``wparams`` the motion table, ``n_cells`` the visit grids'
    cell counts); returns ``(values, generators, has_reset)``: plain copies of the arrays, the generators
    (name -> generator, or a list per block when ``blocked``) and the flag. Raises StateError naming the first
    entry that does not fit."""
    if not isinstance(state, dict):
        raise StateError(f"NavEnv.set_state: expected a dict, got {type(state).__name__}")
    missing = [k for k in spec if k not in state]
    if missing:
        raise StateError(f"NavEnv.set_state: missing {', '.join(missing)}")
    for name, (shape, dtype) in spec.items():
        v = np.asarray(state[name])
        if v.shape != shape or v.dtype != np.dtype(dtype):
            raise StateError(f"NavEnv.set_state: {name} must be {np.dtype(dtype)} {shape}, got {v.dtype} {v.shape}")
    # plain arrays from here on (a masked array's mask would hide values from the checks)
    values = {name: np.array(state[name], copy=True, subok=False) for name in spec}
    for name in FINITE_NAMES:
        if not np.isfinite(values[name]).all():
            raise StateError(f"NavEnv.set_state: {name} holds non-finite values")
    for name in NAN_NAMES:
        if np.isinf(values[name]).any():
            raise StateError(f"NavEnv.set_state: {name} holds infinite values (NaN, an unknown length, is allowed)")
    wi = values["world_index"]
    if wi.size and (int(wi.min()) < 0 or int(wi.max()) >= n_worlds):
        raise StateError(f"NavEnv.set_state: world_index values must lie in [0, {n_worlds})")
    check_state_ranges(values, cfg, wparams, n_cells, n_worlds)
    if "map" in values and values["map"].size and int(values["map"][..., 1].max()) > 3:
        raise StateError("NavEnv.set_state: map holds seen flags other than free (1) and occupied (2)")
    generators = {}
    for name in RNG_NAMES:
        try:
            a = values[name]
            generators[name] = [generator_from_array(r) for r in a] if blocked else generator_from_array(a)
        except GeneratorStateError as exc:
            raise StateError(f"NavEnv.set_state: {name}: {exc}") from None
    has_reset = state.get("has_reset", True)
    if np.ndim(has_reset) != 0 or np.asarray(has_reset).dtype.kind not in "bi" or has_reset not in (0, 1):
        raise StateError(f"NavEnv.set_state: has_reset must be a boolean, got {has_reset!r}")
    return values, generators, bool(has_reset)
