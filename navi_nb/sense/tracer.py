"""Batched sphere tracing of every actor's rays through a `.gmdag` world.

``trace(world, origins, yaws, sensor, max_distance)`` answers all rays of all
actors in one call; :class:`Tracer` keeps the prepared world (on the GPU for
``backend="cuda"``) and reusable output buffers for a training loop.

Contract (docs/SENSING.md):

* outputs ``depth`` float32 metres, ``semantic`` uint16, ``hit`` bool, each
  shaped ``(actors, Az, El)``;
* ``depth`` is always finite and within ``[0, max_distance]``; a ray that
  reaches ``max_distance``, leaves the world cube or exhausts ``max_steps``
  reports ``max_distance``, ``hit = False``, semantic 0;
* a ray starting inside solid reports depth 0, a hit;
* every input is checked before any output is written; bad input raises
  :class:`~navi_nb.sense.sensor.SenseError` (a ``NaviError``).
"""
from __future__ import annotations

import numbers

import numba
import numpy as np
from numba import njit, prange

from navi_nb.sense.backend import resolve_backend
from navi_nb.sense.checks import (NUDGE, check_out, check_pose_arrays, check_positive, check_sensor, check_steps,
                                  check_world)
from navi_nb.sense.sensor import SenseError
from navi_nb.sense.trace_math import nb_ray_start, nb_trace_ray, nb_write_ray, nb_yaw_cos_sin
from navi_nb.world import gmdag
from navi_nb.world.layout import world_layout

DEFAULT_EPSILON = 0.5
"""Hit epsilon in voxels: a near-surface leaf whose distance is below
``epsilon * voxel_size`` is a hit (half a voxel: the compiler's leaves are
exact to half a voxel near surfaces, and other writers sample at corners)."""
DEFAULT_MAX_STEPS = 512
"""Cell visits per ray before it gives up (and reports a miss)."""
DEFAULT_REFINE = 1
"""Newton steps that sharpen each hit's depth on the trilinearly interpolated
field (0 turns it off: depth = the point where the hit was found)."""
UNSIGNED_MIN_EPSILON = 1.0
"""Hit epsilon (voxels) used at least for unsigned worlds (no negative leaves)."""
TASK = 64
"""Rays per iteration of the kernel's parallel loop (consecutive rays of one
or two actors, so the actor index advances without a division per ray)."""
CHUNK = 4
"""Tasks (of TASK rays) per work chunk handed to a thread (dynamic scheduling:
rays cost different amounts, and a shared machine can stall one thread)."""



@njit(parallel=True, cache=True)
def trace_rays(child, leaf_dist, leaf_sem, top_code, top_level, res, bmin, inv_voxel, voxel, dirs, origins, yaws,
               t_max, eps, nudge, max_steps, refine, signed, max_distance, depth, semantic, hit):
    """Trace rays for all actors: parallel over actors x rays, flattened.

    child, leaf_dist, leaf_sem, top_code, top_level: the world's decoded
    layout (``navi_nb/world/layout.py``); res float (voxels per side); bmin
    (3,) float32 metres; inv_voxel / voxel floats; dirs (R, 3) float32
    actor-frame unit directions; origins (A, 3) float32 metres; yaws (A,)
    float32 radians; t_max, eps, nudge in voxels; max_steps int; refine:
    Newton iterations per hit (0: none); signed: the world holds negative
    distances; max_distance metres. Writes depth (A*R,) float32 metres,
    semantic (A*R,) uint16, hit (A*R,) bool.
    """
    n_dirs = dirs.shape[0]
    n = origins.shape[0] * n_dirs
    cs = np.empty((origins.shape[0], 2), np.float64)  # each actor's yaw cos / sin, once
    for a in range(origins.shape[0]):
        cs[a, 0], cs[a, 1] = nb_yaw_cos_sin(yaws[a])
    n_tasks = (n + TASK - 1) // TASK
    for task in prange(n_tasks):
        i0 = task * TASK
        i1 = min(i0 + TASK, n)
        a = i0 // n_dirs  # one division per task; (a, r) then advance with i
        r = i0 - a * n_dirs
        for i in range(i0, i1):
            ox, oy, oz, dx, dy, dz = nb_ray_start(a, r, bmin, inv_voxel, dirs, origins, cs[a, 0], cs[a, 1])
            d, sem, h = nb_trace_ray(child, leaf_dist, leaf_sem, top_code, top_level, res, ox, oy, oz, dx, dy, dz,
                                     t_max, eps, nudge, max_steps, refine, signed)
            nb_write_ray(i, d, sem, h, voxel, max_distance, depth, semantic, hit)
            r += 1
            if r == n_dirs:
                r = 0
                a += 1


class _Settings:
    """Validated scalar settings shared by the CPU and CUDA paths."""

    def __init__(self, world, max_distance, epsilon, max_steps, refine=DEFAULT_REFINE):
        self.max_distance = check_positive("max_distance", max_distance)
        if isinstance(refine, bool) or not isinstance(refine, numbers.Integral) or not 0 <= refine <= 16:
            raise SenseError(f"refine must be an integer in 0..16, got {refine!r}")
        self.refine = int(refine)
        self.epsilon = check_positive("epsilon", epsilon)
        self.max_steps = check_steps(max_steps)
        self.voxel = float(np.float32(world.voxel_size))
        self.inv_voxel = 1.0 / self.voxel
        self.res = float(world.resolution)
        self.t_max = self.max_distance * self.inv_voxel
        self.bmin = np.ascontiguousarray(world.bmin, dtype=np.float32)
        self.signed = world_is_signed(world)
        self.layout = world_layout(world, self.inv_voxel)
        # unsigned fields sampled at cell centres never fall below ~0.87 voxel next to a
        # surface that runs along cell faces: their hits need a wider epsilon
        self.hit_epsilon = self.epsilon if self.signed else max(self.epsilon, UNSIGNED_MIN_EPSILON)


def world_is_signed(world) -> bool:
    """True when any leaf holds a negative distance (cached on the World)."""
    cached = getattr(world, "_navi_signed", None)
    if cached is not None and cached[0] is world.nodes:
        return cached[1]
    nodes = np.asarray(world.nodes)
    leaves = nodes[gmdag.is_leaf(nodes)]
    dist, _ = gmdag.decode_leaf(leaves)
    signed = bool(np.any(dist < 0))
    world._navi_signed = (world.nodes, signed)
    return signed


def _run_cpu(world, settings, sensor, origins, yaws, out):
    depth, semantic, hit = out
    lay = settings.layout
    with numba.parallel_chunksize(CHUNK):
        trace_rays(lay.child, lay.leaf_dist, lay.leaf_sem, lay.top_code, lay.top_level, settings.res,
                   settings.bmin, settings.inv_voxel, settings.voxel, sensor.flat_directions, origins, yaws,
                   settings.t_max, settings.hit_epsilon, NUDGE, settings.max_steps, settings.refine,
                   settings.signed, settings.max_distance, depth.reshape(-1), semantic.reshape(-1),
                   hit.reshape(-1))


def trace(world, origins, yaws, sensor, max_distance, backend="cpu", out=None, *,
          epsilon=DEFAULT_EPSILON, max_steps=DEFAULT_MAX_STEPS, refine=DEFAULT_REFINE):
    """Trace every actor's rays; returns ``(depth, semantic, hit)`` shaped (A, Az, El).

    world: a World. origins (A, 3) metres and yaws (A,) radians, float32 or
    float64. sensor: a Sensor. max_distance: metres, finite, > 0.
    backend: "cpu", "cuda" or "auto" ("cuda" here copies the world to the GPU
    on every call: use :class:`Tracer` for repeated calls). out: optional
    (depth float32, semantic uint16, hit bool) arrays shaped (A, Az, El),
    written in place and returned. epsilon: hit epsilon in voxels. max_steps:
    cell visits per ray. refine: Newton steps sharpening each hit (0: off).
    """
    kind = resolve_backend(backend)
    if kind == "cuda":
        tracer = Tracer(world, sensor, max_distance, backend="cuda", epsilon=epsilon,
                        max_steps=max_steps, refine=refine)
        return tracer.trace(origins, yaws, out=out, to_host=out is None or isinstance(out[0], np.ndarray))
    check_world(world)
    check_sensor(sensor)
    settings = _Settings(world, max_distance, epsilon, max_steps, refine)
    origins, yaws = check_pose_arrays(origins, yaws)
    shape = (origins.shape[0],) + sensor.shape
    if out is None:
        out = (np.empty(shape, np.float32), np.empty(shape, np.uint16), np.empty(shape, np.bool_))
    else:
        out = check_out(out, shape)
    if origins.shape[0]:
        _run_cpu(world, settings, sensor, origins, yaws, out)
    return out


class Tracer:
    """A world prepared for tracing, with output buffers reused every call.

    ``Tracer(world, sensor, max_distance, backend="cpu"|"cuda"|"auto",
    max_actors=None)``; ``tracer.trace(origins, yaws)`` returns ``(depth,
    semantic, hit)`` views of buffers that the next call overwrites (copy what
    you keep). The buffers hold ``max_actors`` actors (grown on demand when
    None). On ``cuda`` the world is copied to the device once, here, and the
    results are CuPy arrays unless ``to_host=True``.
    """

    def __init__(self, world, sensor, max_distance, backend="cpu", max_actors=None, *,
                 epsilon=DEFAULT_EPSILON, max_steps=DEFAULT_MAX_STEPS, refine=DEFAULT_REFINE):
        self.backend = resolve_backend(backend)
        self.world = check_world(world)
        self.sensor = check_sensor(sensor)
        self.settings = _Settings(world, max_distance, epsilon, max_steps, refine)
        if max_actors is not None and (isinstance(max_actors, bool) or not isinstance(max_actors, numbers.Integral)
                                       or int(max_actors) < 1):
            raise SenseError(f"max_actors must be a positive integer or None, got {max_actors!r}")
        self.max_actors = None if max_actors is None else int(max_actors)
        self._fixed = max_actors is not None
        if self.backend == "cuda":
            from navi_nb.sense.cuda_tracer import CudaTracer

            self._impl = CudaTracer(world, self.sensor, self.settings, self.max_actors or 1)
        else:
            self._impl = None
            self._buffers = self._allocate(self.max_actors or 1)

    @property
    def max_distance(self) -> float:
        return self.settings.max_distance

    def _allocate(self, n):
        shape = (n,) + self.sensor.shape
        return (np.empty(shape, np.float32), np.empty(shape, np.uint16), np.empty(shape, np.bool_))

    def _capacity(self, n):
        if self.max_actors is not None and n > self.max_actors and self._fixed:
            raise SenseError(f"{n} actors exceed this Tracer's max_actors={self.max_actors}")
        return n

    def trace(self, origins, yaws, out=None, to_host=False):
        """``(depth, semantic, hit)`` for actors at ``origins`` (A,3) turned by ``yaws`` (A,)."""
        if self._impl is not None:
            return self._impl.trace(origins, yaws, out=out, to_host=to_host, check_capacity=self._capacity)
        origins, yaws = check_pose_arrays(origins, yaws)
        n = self._capacity(origins.shape[0])
        shape = (n,) + self.sensor.shape
        if out is not None:
            out = check_out(out, shape)
        else:
            if self._buffers[0].shape[0] < n:
                self._buffers = self._allocate(n)
                self.max_actors = n
            out = tuple(b[:n] for b in self._buffers)
        if n:
            _run_cpu(self.world, self.settings, self.sensor, origins, yaws, out)
        return out
