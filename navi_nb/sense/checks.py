"""Checks shared by the tracer's CPU and CUDA paths (``tracer.py``, ``cuda_tracer.py``).

Every input is checked here before anything is written; bad input raises
:class:`~navi_nb.sense.sensor.SenseError` (a ``NaviError``) naming the argument.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from navi_nb.sense.sensor import SenseError, Sensor
from navi_nb.world import gmdag

NUDGE = 1.0e-4
"""Voxels pushed past a cell's exit so the next lookup lands in the next cell."""


def check_world(world):
    """A World with a sane node array; deep-validated once (sets ``deep_checked``)."""
    if not isinstance(world, gmdag.World):
        raise SenseError(f"world must be a navi_nb World (from load_world or a compiler), got {type(world).__name__}")
    nodes = world.nodes
    if not isinstance(nodes, np.ndarray) or nodes.ndim != 1 or nodes.dtype != np.uint64:
        raise SenseError(f"{world.source}: world.nodes must be a 1-D uint64 array")
    if not world.deep_checked:
        gmdag.validate_world(world)  # raises GmdagError (a NaviError) naming the rule
    return world


def check_sensor(sensor):
    if not isinstance(sensor, Sensor):
        raise SenseError(f"sensor must be a navi_nb Sensor, got {type(sensor).__name__}")
    return sensor


def check_positive(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise SenseError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value <= 0.0:
        raise SenseError(f"{name} must be finite and > 0, got {value}")
    return value


def check_steps(value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 0:
        raise SenseError(f"max_steps must be an integer >= 0, got {value!r}")
    return int(value)


def check_pose_arrays(origins, yaws, xp=np):
    """(origins (A,3) float32 contiguous, yaws (A,) float32 contiguous), or SenseError.

    float32 and float64 (rounded to float32) are accepted; integer, bool,
    complex and object arrays are not. ``xp`` is numpy or cupy.
    """
    origins = xp.asarray(origins)
    yaws = xp.asarray(yaws)
    for name, arr in (("origins", origins), ("yaws", yaws)):
        if arr.dtype.kind != "f":
            raise SenseError(f"{name} must be a float32 or float64 array, got dtype {arr.dtype}")
    if origins.ndim != 2 or origins.shape[1] != 3:
        raise SenseError(f"origins must be shaped (actors, 3), got {tuple(origins.shape)}")
    if yaws.ndim != 1 or yaws.shape[0] != origins.shape[0]:
        raise SenseError(f"yaws must be shaped ({origins.shape[0]},) to match origins, got {tuple(yaws.shape)}")
    origins = xp.ascontiguousarray(origins, dtype=np.float32)
    yaws = xp.ascontiguousarray(yaws, dtype=np.float32)
    if not bool(xp.isfinite(origins).all()):
        bad = int(xp.argwhere(~xp.isfinite(origins).all(axis=1))[0, 0])
        raise SenseError(f"origins must be finite: actor {bad} has {origins[bad].tolist()} (after rounding to float32)")
    if not bool(xp.isfinite(yaws).all()):
        bad = int(xp.argwhere(~xp.isfinite(yaws))[0, 0])
        raise SenseError(f"yaws must be finite: actor {bad} has {float(yaws[bad])}")
    return origins, yaws


def check_out(out, shape, xp=np):
    """Caller-provided (depth, semantic, hit) buffers of the right shape and dtype."""
    if not isinstance(out, (tuple, list)) or len(out) != 3:
        raise SenseError("out must be a tuple (depth, semantic, hit)")
    for name, arr, dtype in zip(("depth", "semantic", "hit"), out, (np.float32, np.uint16, np.bool_)):
        if not isinstance(arr, xp.ndarray):
            raise SenseError(f"out {name} must be a {xp.__name__} array, got {type(arr).__name__}")
        if tuple(arr.shape) != tuple(shape):
            raise SenseError(f"out {name} must be shaped {tuple(shape)}, got {tuple(arr.shape)}")
        if arr.dtype != dtype:
            raise SenseError(f"out {name} must have dtype {np.dtype(dtype)}, got {arr.dtype}")
        if not arr.flags.c_contiguous:
            raise SenseError(f"out {name} must be C-contiguous")
        if xp is np and not arr.flags.writeable:
            raise SenseError(f"out {name} is read-only")
    return tuple(out)


def check_world_index(world_index, n_actors, n_worlds, xp=np):
    """(A,) int32 world indices in ``[0, n_worlds)`` (None: every actor in world 0)."""
    if world_index is None:
        return xp.zeros(n_actors, dtype=np.int32)
    wi = xp.asarray(world_index)
    if wi.shape != (n_actors,):
        raise SenseError(f"world_index must be shaped ({n_actors},), got {tuple(wi.shape)}")
    if wi.dtype.kind not in "iu":
        raise SenseError(f"world_index must hold integers, got dtype {wi.dtype}")
    if n_actors and (int(wi.min()) < 0 or int(wi.max()) >= n_worlds):
        raise SenseError(f"world_index values must lie in [0, {n_worlds}), got {int(wi.min())}..{int(wi.max())}")
    return xp.ascontiguousarray(wi, dtype=np.int32)
