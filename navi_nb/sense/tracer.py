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

import math
import numbers

import numpy as np
from numba import njit

from navi_nb.sense.backend import resolve_backend
from navi_nb.sense.checks import (
    NUDGE,
    check_out,
    check_pose_arrays,
    check_positive,
    check_sensor,
    check_steps,
    check_world,
    check_world_index,
)
from navi_nb.sense.sensor import SenseError
from navi_nb.sense.trace_math import nb_ray_start, nb_trace_ray, nb_write_ray, nb_yaw_cos_sin
from navi_nb.threads import RangeKernel
from navi_nb.world import gmdag
from navi_nb.world.world_set import WorldSet, nb_layout_views

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
GRAIN = 256
"""The fewest rays a thread is handed at once (``threads.run_ranges`` hands out
shrinking ranges: rays cost different amounts, and a shared machine can stall
one thread)."""


def keep_tally(stats, i, steps, tally):
    """The kernel's hook on each ray's step count and tally: the shipped build keeps
    neither (``navi_nb/bench/anatomy.py`` builds the kernel with one that does)."""


def write_image(i0, i1, n_dirs, depth, semantic, image):
    """Rays ``i0 .. i1 - 1`` (flattened over actors x ``n_dirs`` rays, their depth and semantic traced)
    into ``image = (dest, out, inv_log_max, sem_scale, on, with_semantic)``: with ``on``, ray r of actor a
    into row ``dest[a]`` of ``out`` (N, D) float32, column r as ``log1p(depth) * inv_log_max`` and, with
    ``with_semantic``, column R + r as ``semantic * sem_scale`` (the environment's observation)."""
    img_dest, img, inv_log_max, sem_scale, img_on, img_sem = image
    if not img_on or i1 <= i0:
        return
    a = i0 // n_dirs
    r = i0 - a * n_dirs
    for i in range(i0, i1):
        row = img_dest[a]
        img[row, r] = np.float32(math.log1p(np.float64(depth[i])) * inv_log_max)
        if img_sem:
            img[row, n_dirs + r] = np.float32(np.float64(semantic[i]) * sem_scale)
        r += 1
        if r == n_dirs:
            r = 0
            a += 1


nb_write_image = njit(inline="always", cache=True)(write_image)


def trace_span(i0, i1, worlds, poses, sensing, depth, semantic, hit, stats, image):
    """Trace rays ``i0 .. i1 - 1`` (flattened over actors x rays) of every actor, each in its own world.

    ``worlds = (child, leaf_dist, leaf_sem, top_code, top_level, iparams,
    tparams, origin32, signed)``, ``poses = (world_index, origins, yaws)``,
    ``sensing = (dirs, nudge, max_steps, refine, max_distance)``, read-only
    tuples (:func:`kernel_arguments`). child, leaf_dist, leaf_sem, top_code,
    top_level, iparams: the world set's packed layouts
    (``navi_nb/world/world_set.py``; world ``w`` is read through views,
    ``layout_views``); tparams (W, 8) float64 per world: field
    origin x, y, z (metres), inv_voxel, voxel, res, t_max and hit epsilon (in
    voxels); origin32 (W, 3) float32: the field origins as the rays start from
    them (float32, as the file's ``bmin``: Numba's ``float()`` keeps a float32
    a float32, so the origin's subtraction is a float32 one, as it always
    was); signed (W,) bool: the world holds negative distances;
    world_index (A,) int32: each actor's world. dirs (R, 3) float32
    actor-frame unit directions; origins (A, 3) float32 metres; yaws (A,)
    float32 radians; nudge in voxels; max_steps int; refine: Newton
    iterations per hit (0: none); max_distance metres. Writes depth (A*R,)
    float32 metres, semantic (A*R,) uint16, hit (A*R,) bool. stats: written
    only by the counting build (:func:`keep_tally`: (A*R, 2) int64, each ray's
    steps and tally); the shipped build takes any int64 array and leaves it
    alone. image: :func:`write_image`'s (:data:`NO_IMAGE` when off), written
    for the range's rays after them: the environment's observation written on
    the threads that traced them.

    :func:`trace_rays` runs it over the whole batch in ranges, one thread each
    (``threads.run_ranges``); each ray is computed alone, so the ranges change
    no bit. Every step of a ray is inlined here, in the one function the
    threads call: nothing big is linked into a caller and compiled again.
    """
    child, leaf_dist, leaf_sem, top_code, top_level, iparams, tparams, origin32, signed = worlds
    world_index, origins, yaws = poses
    dirs, nudge, max_steps, refine, max_distance = sensing
    n_dirs = dirs.shape[0]
    if i1 <= i0:
        return
    a = i0 // n_dirs  # one division per range; (a, r) then advance with i
    r = i0 - a * n_dirs
    # the actor's world: views of its layout and its parameters, taken again only when the world changes
    # (scalars in locals: the kernel's writes could alias the table, so loads in the loop would repeat)
    w = world_index[a]
    ch, ld, ls, tc, tl = nb_layout_views(child, leaf_dist, leaf_sem, top_code, top_level, iparams, w)
    org = origin32[w]
    inv_voxel, voxel, res, t_max, eps = tparams[w, 3], tparams[w, 4], tparams[w, 5], tparams[w, 6], tparams[w, 7]
    sgn = signed[w]
    c, s = nb_yaw_cos_sin(yaws[a])
    for i in range(i0, i1):
        ray = nb_ray_start(a, r, org, inv_voxel, dirs, origins, c, s)
        d, sem, h, steps, tally = nb_trace_ray(
            (ch, ld, ls, tc, tl, res), ray, (t_max, eps, nudge, max_steps, refine, sgn)
        )
        nb_write_ray(i, d, sem, h, voxel, max_distance, depth, semantic, hit)
        nb_keep_tally(stats, i, steps, tally)
        r += 1
        if r == n_dirs and i + 1 < i1:
            r = 0
            a += 1
            c, s = nb_yaw_cos_sin(yaws[a])
            if world_index[a] != w:
                w = world_index[a]
                ch, ld, ls, tc, tl = nb_layout_views(child, leaf_dist, leaf_sem, top_code, top_level, iparams, w)
                org = origin32[w]
                inv_voxel, voxel, res = tparams[w, 3], tparams[w, 4], tparams[w, 5]
                t_max, eps = tparams[w, 6], tparams[w, 7]
                sgn = signed[w]
    nb_write_image(i0, i1, n_dirs, depth, semantic, image)  # a loop of its own: inside theirs it slows the march


nb_keep_tally = njit(inline="always", cache=True)(keep_tally)
nb_trace_span = njit(cache=True, nogil=True, _nrt=False)(trace_span)
NO_STATS = np.zeros((1, 2), np.int64)  # the shipped kernel's unused stats argument
NO_IMAGE = (np.zeros(1, np.int64), np.zeros((1, 1), np.float32), 0.0, 0.0, False, False)
"""The ``image`` argument of a trace that writes no observation (the types of one that does)."""


def _rays(worlds, poses, sensing, *outputs):
    return poses[1].shape[0] * sensing[0].shape[0]  # actors x rays per actor


trace_rays = RangeKernel(nb_trace_span, _rays, GRAIN)
"""The CPU kernel: :func:`trace_span` over every ray of the batch, in parallel ranges (arguments as
``trace_span``'s after ``i0, i1``)."""


def image_span(i0, i1, n_dirs, depth, semantic, image):
    nb_write_image(i0, i1, n_dirs, depth, semantic, image)


def _image_rays(n_dirs, depth, *rest):
    return depth.shape[0]


IMAGE_GRAIN = 16384
"""The fewest rays a thread is handed by :data:`write_image_rays`: about 0.25 ms of work. A helper thread's
wake-up and its handoffs of the GIL cost tens of microseconds on a busy machine, so smaller batches run in
the calling thread alone."""
write_image_rays = RangeKernel(njit(cache=True, nogil=True)(image_span), _image_rays, IMAGE_GRAIN)
""":func:`write_image` over traced rays already on the host (a CUDA trace's), in parallel ranges (arguments
as ``image_span``'s after ``i0, i1``)."""


TP_OX, TP_OY, TP_OZ, TP_INV_VOXEL, TP_VOXEL, TP_RES, TP_T_MAX, TP_EPS = range(8)


class _Settings:
    """Validated scalar settings shared by the CPU and CUDA paths, and the per-world parameters."""

    def __init__(self, world_set, max_distance, epsilon, max_steps, refine=DEFAULT_REFINE):
        self.max_distance = check_positive("max_distance", max_distance)
        if isinstance(refine, bool) or not isinstance(refine, numbers.Integral) or not 0 <= refine <= 16:
            raise SenseError(f"refine must be an integer in 0..16, got {refine!r}")
        self.refine = int(refine)
        self.epsilon = check_positive("epsilon", epsilon)
        self.max_steps = check_steps(max_steps)
        self.world_set = world_set
        self.packed = world_set.packed
        W = len(world_set)
        self.tparams = np.zeros((W, 8), np.float64)
        self.signed_per_world = np.zeros(W, np.bool_)
        for w, world in enumerate(world_set.worlds):
            voxel = float(np.float32(world.voxel_size))
            inv_voxel = 1.0 / voxel
            signed = world_is_signed(world)
            # unsigned fields sampled at cell centres never fall below ~0.87 voxel next to a
            # surface that runs along cell faces: their hits need a wider epsilon
            eps = self.epsilon if signed else max(self.epsilon, UNSIGNED_MIN_EPSILON)
            self.tparams[w, TP_OX : TP_OZ + 1] = self.packed.fparams[w, 0:3]
            self.tparams[w, TP_INV_VOXEL] = inv_voxel
            self.tparams[w, TP_VOXEL] = voxel
            self.tparams[w, TP_RES] = float(world.resolution)
            self.tparams[w, TP_T_MAX] = self.max_distance * inv_voxel
            self.tparams[w, TP_EPS] = eps
            self.signed_per_world[w] = signed
        self.origin32 = np.ascontiguousarray(self.tparams[:, TP_OX : TP_OZ + 1].astype(np.float32))
        # world 0's values, by name (a single world's settings)
        first = self.tparams[0]
        self.voxel = float(first[TP_VOXEL])
        self.inv_voxel = float(first[TP_INV_VOXEL])
        self.res = float(first[TP_RES])
        self.t_max = float(first[TP_T_MAX])
        self.hit_epsilon = float(first[TP_EPS])
        self.signed = bool(self.signed_per_world[0])
        self.bmin = self.origin32[0]
        self.layout = self.packed.layout_of(0)


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


def kernel_arguments(settings, sensor, origins, yaws, world_index):
    """The kernel's read-only bundles ``(worlds, poses, sensing)`` (:func:`trace_span`)."""
    p = settings.packed
    worlds = (
        p.child,
        p.leaf_dist,
        p.leaf_sem,
        p.top_code,
        p.top_level,
        p.iparams,
        settings.tparams,
        settings.origin32,
        settings.signed_per_world,
    )
    sensing = (sensor.flat_directions, NUDGE, settings.max_steps, settings.refine, settings.max_distance)
    return worlds, (world_index, origins, yaws), sensing


def run_cpu(settings, sensor, origins, yaws, world_index, out, kernel=trace_rays, stats=NO_STATS, image=NO_IMAGE):
    """The CPU trace of :func:`cpu_inputs`' checked inputs into ``out`` = (depth, semantic, hit) through
    ``kernel`` (``trace_rays``, or a build of the same span with other tallies: ``bench/anatomy.py``'s)."""
    depth, semantic, hit = out
    bundles = kernel_arguments(settings, sensor, origins, yaws, world_index)
    kernel(*bundles, depth.reshape(-1), semantic.reshape(-1), hit.reshape(-1), stats, image)


def check_image(image, n_actors, n_rays) -> tuple:
    """``image = (dest, out, inv_log_max, sem_scale, with_semantic)`` as the kernel's bundle (see
    :func:`trace_span`), or a SenseError naming what is wrong, before anything is traced."""
    try:
        dest, out, inv_log_max, sem_scale, with_semantic = image
    except (TypeError, ValueError):
        raise SenseError("image must be (dest, out, inv_log_max, sem_scale, with_semantic)") from None
    if not isinstance(dest, np.ndarray) or dest.dtype != np.int64 or dest.shape != (n_actors,):
        raise SenseError(f"image dest must be an int64 array of shape ({n_actors},)")
    if not isinstance(out, np.ndarray) or out.dtype != np.float32 or out.ndim != 2 or not out.flags.c_contiguous:
        raise SenseError("image out must be a C-contiguous 2-D float32 array")
    columns = n_rays * (2 if with_semantic else 1)
    if out.shape[1] < columns:
        raise SenseError(f"image out has {out.shape[1]} columns; the rays need {columns}")
    if n_actors and (int(dest.min()) < 0 or int(dest.max()) >= out.shape[0]):
        raise SenseError(f"image dest rows must lie in [0, {out.shape[0]})")
    return (np.ascontiguousarray(dest), out, float(inv_log_max), float(sem_scale), True, bool(with_semantic))


def _as_set(world):
    """A WorldSet for ``world`` (a World becomes the set of one, cached on it)."""
    if isinstance(world, WorldSet):
        return world
    return WorldSet.of(check_world(world))


def cpu_inputs(world, origins, yaws, sensor, max_distance, epsilon, max_steps, refine, world_index):
    """The CPU path's checked inputs: ``(settings, origins, yaws, world_index, output shape)``, for
    :func:`run_cpu`."""
    ws = _as_set(world)
    check_sensor(sensor)
    settings = _Settings(ws, max_distance, epsilon, max_steps, refine)
    origins, yaws = check_pose_arrays(origins, yaws)
    world_index = check_world_index(world_index, origins.shape[0], len(ws))
    return settings, origins, yaws, world_index, (origins.shape[0],) + sensor.shape


def trace(
    world,
    origins,
    yaws,
    sensor,
    max_distance,
    backend="cpu",
    out=None,
    *,
    epsilon=DEFAULT_EPSILON,
    max_steps=DEFAULT_MAX_STEPS,
    refine=DEFAULT_REFINE,
    world_index=None,
):
    """Trace every actor's rays; returns ``(depth, semantic, hit)`` shaped (A, Az, El).

    world: a World or a WorldSet. origins (A, 3) metres and yaws (A,) radians, float32 or
    float64. sensor: a Sensor. max_distance: metres, finite, > 0.
    backend: "cpu", "cuda" or "auto" ("cuda" here copies the world to the GPU
    on every call: use :class:`Tracer` for repeated calls). out: optional
    (depth float32, semantic uint16, hit bool) arrays shaped (A, Az, El),
    written in place and returned. epsilon: hit epsilon in voxels. max_steps:
    cell visits per ray. refine: Newton steps sharpening each hit (0: off).
    world_index: (A,) integers, each actor's world in the set (None: all in world 0).
    """
    kind = resolve_backend(backend)
    if kind == "cuda":
        tracer = Tracer(
            world, sensor, max_distance, backend="cuda", epsilon=epsilon, max_steps=max_steps, refine=refine
        )
        return tracer.trace(
            origins, yaws, out=out, to_host=out is None or isinstance(out[0], np.ndarray), world_index=world_index
        )
    settings, origins, yaws, world_index, shape = cpu_inputs(
        world, origins, yaws, sensor, max_distance, epsilon, max_steps, refine, world_index
    )
    if out is None:
        out = (np.empty(shape, np.float32), np.empty(shape, np.uint16), np.empty(shape, np.bool_))
    else:
        out = check_out(out, shape)
    if origins.shape[0]:
        run_cpu(settings, sensor, origins, yaws, world_index, out)
    return out


class Tracer:
    """A world prepared for tracing, with output buffers reused every call.

    ``Tracer(world, sensor, max_distance, backend="cpu"|"cuda"|"auto",
    max_actors=None)``, world a World or a WorldSet; ``tracer.trace(origins, yaws,
    world_index=None)`` returns ``(depth,
    semantic, hit)`` views of buffers that the next call overwrites (copy what
    you keep). The buffers hold ``max_actors`` actors (grown on demand when
    None). On ``cuda`` the world is copied to the device once, here, and the
    results are CuPy arrays unless ``to_host=True``.
    """

    def __init__(
        self,
        world,
        sensor,
        max_distance,
        backend="cpu",
        max_actors=None,
        *,
        epsilon=DEFAULT_EPSILON,
        max_steps=DEFAULT_MAX_STEPS,
        refine=DEFAULT_REFINE,
    ):
        self.backend = resolve_backend(backend)
        self.world_set = _as_set(world)
        self.world = self.world_set.worlds[0]
        self.sensor = check_sensor(sensor)
        self.settings = _Settings(self.world_set, max_distance, epsilon, max_steps, refine)
        if max_actors is not None and (
            isinstance(max_actors, bool) or not isinstance(max_actors, numbers.Integral) or int(max_actors) < 1
        ):
            raise SenseError(f"max_actors must be a positive integer or None, got {max_actors!r}")
        self.max_actors = None if max_actors is None else int(max_actors)
        self._fixed = max_actors is not None
        if self.backend == "cuda":
            from navi_nb.sense.cuda_tracer import CudaTracer

            self._impl = CudaTracer(self.sensor, self.settings, self.max_actors or 1)
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

    def trace(self, origins, yaws, out=None, to_host=False, world_index=None, image=None):
        """``(depth, semantic, hit)`` for actors at ``origins`` (A,3) turned by ``yaws`` (A,),
        actor ``a`` in world ``world_index[a]`` of the set (None: every actor in world 0).

        ``image = (dest, out, inv_log_max, sem_scale, with_semantic)``: also write each actor's rays,
        encoded as the environment's observation encodes them, into row ``dest[a]`` of ``out``
        (:func:`write_image`): on the CPU by the threads that trace them, on CUDA on the host after the
        copy (``to_host=True`` required)."""
        if self._impl is not None:
            if image is not None:
                if not to_host:
                    raise SenseError("Tracer.trace: an image on the cuda backend needs to_host=True")
                origins, yaws = check_pose_arrays(origins, yaws)
                image = check_image(image, origins.shape[0], self.sensor.n_rays)
            out = self._impl.trace(
                origins, yaws, out=out, to_host=to_host, check_capacity=self._capacity, world_index=world_index
            )
            if image is not None:
                write_image_rays(self.sensor.n_rays, out[0].reshape(-1), out[1].reshape(-1), image)
            return out
        origins, yaws = check_pose_arrays(origins, yaws)
        world_index = check_world_index(world_index, origins.shape[0], len(self.world_set))
        image = NO_IMAGE if image is None else check_image(image, origins.shape[0], self.sensor.n_rays)
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
            run_cpu(self.settings, self.sensor, origins, yaws, world_index, out, image=image)
        return out
