"""The tracer on CUDA: one ``numba.cuda`` kernel launch per call for all actors.

The kernel runs the very functions the CPU kernel inlines
(``navi_nb/sense/trace_math.py`` and the field it reads,
``navi_nb/world/field.py``, built here with ``cuda.jit(device=True)``), one
CUDA thread per (actor, ray), each in its actor's world. :class:`CudaTracer`
copies the world set's packed layouts (``navi_nb/world/world_set.py``: child
codes, leaf distances and semantics, the dense top tables, the per-world
parameters) and the sensor's directions to the device once, keeps the
output buffers there (CuPy arrays), and per call only moves the poses (or
uses them in place when they are already CuPy arrays).

Without CuPy, under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, the
tests), Numba's own device arrays stand in for CuPy's.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from navi_nb.sense import trace_math
from navi_nb.sense.backend import simulator_enabled
from navi_nb.sense.checks import NUDGE, check_out, check_pose_arrays, check_world_index
from navi_nb.sense.sensor import SenseError
from navi_nb.world.world_set import layout_views

THREADS_PER_BLOCK = 128

_DEV = trace_math.build_for(cuda.jit(device=True))
cu_trace_one = _DEV["trace_one"]
cu_yaw_cos_sin = _DEV["yaw_cos_sin"]


cu_layout_views = cuda.jit(device=True)(layout_views)


@cuda.jit(cache=True)
def trace_rays_cuda(worlds, poses, sensing, depth, semantic, hit):
    """One thread per ray of the flattened (actor, ray) batch, in its actor's world; the bundles as
    ``tracer.trace_span``'s (tuples of device arrays and numbers: numba-cuda passes a tuple's members
    as it passes arguments)."""
    child, leaf_dist, leaf_sem, top_code, top_level, iparams, tparams, origin32, signed = worlds
    world_index, origins, yaws = poses
    dirs, nudge, max_steps, refine, max_distance = sensing
    i = cuda.grid(1)
    if i < origins.shape[0] * dirs.shape[0]:
        a = i // dirs.shape[0]
        w = world_index[a]
        ch, ld, ls, tc, tl = cu_layout_views(child, leaf_dist, leaf_sem, top_code, top_level, iparams, w)
        c, s = cu_yaw_cos_sin(yaws[a])
        cu_trace_one(
            i,
            a,
            i - a * dirs.shape[0],
            (ch, ld, ls, tc, tl, tparams[w, 5]),
            (origin32[w], tparams[w, 3], tparams[w, 4], dirs, origins, c, s),
            (tparams[w, 6], tparams[w, 7], nudge, max_steps, refine, signed[w]),
            max_distance,
            depth,
            semantic,
            hit,
        )


def _cupy():
    try:
        import cupy
    except Exception:
        return None
    return cupy


_uncached_kernel = None


def _launch(blocks, *args):
    """Launch ``trace_rays_cuda`` over ``blocks`` blocks. Some numba-cuda builds compile the kernel but
    cannot write it to the on-disk cache ("Cannot pickle CUDACodeLibrary with linking files", raised
    before anything runs): the kernel is then compiled once more without the cache for this process."""
    global _uncached_kernel
    kernel = _uncached_kernel or trace_rays_cuda
    try:
        kernel[blocks, THREADS_PER_BLOCK](*args)
    except RuntimeError as exc:
        if _uncached_kernel is not None or "pickle" not in str(exc):
            raise
        _uncached_kernel = cuda.jit(trace_rays_cuda.py_func)
        _uncached_kernel[blocks, THREADS_PER_BLOCK](*args)


class CudaTracer:
    """Device-resident world and buffers; use through ``Tracer(..., backend="cuda")``."""

    def __init__(self, sensor, settings, max_actors):
        self.sensor = sensor
        self.settings = settings
        self.cp = _cupy()
        if self.cp is None and not simulator_enabled():
            raise SenseError('the cuda backend needs CuPy; install the cuda extra: pip install -e ".[cuda]"')
        p = settings.packed  # the world set's packed layouts (navi_nb/world/world_set.py), copied once
        self.layout = tuple(
            self._to_device(a)
            for a in (
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
        )
        self.n_worlds = p.iparams.shape[0]
        self.dirs = self._to_device(np.ascontiguousarray(sensor.flat_directions))
        self.capacity = 0
        self._grow(max_actors)

    # -- device memory helpers (CuPy, or Numba device arrays in the simulator) --
    def _to_device(self, arr):
        if self.cp is not None:
            return self.cp.asarray(arr)
        return cuda.to_device(arr)

    def _empty(self, shape, dtype):
        if self.cp is not None:
            return self.cp.empty(shape, dtype=dtype)
        return cuda.device_array(shape, dtype=dtype)

    def _grow(self, n):
        shape = (n,) + self.sensor.shape
        self.buffers = (self._empty(shape, np.float32), self._empty(shape, np.uint16), self._empty(shape, np.bool_))
        self.origins = self._empty((n, 3), np.float32)
        self.yaws = self._empty((n,), np.float32)
        self.capacity = n

    def _is_device(self, arr):
        if self.cp is not None and isinstance(arr, self.cp.ndarray):
            return True
        return (not isinstance(arr, np.ndarray)) and hasattr(arr, "copy_to_host")

    def _poses(self, origins, yaws):
        """Validated device copies (or views) of the poses."""
        if self.cp is not None and (isinstance(origins, self.cp.ndarray) or isinstance(yaws, self.cp.ndarray)):
            return check_pose_arrays(self.cp.asarray(origins), self.cp.asarray(yaws), xp=self.cp)
        if self._is_device(origins) or self._is_device(yaws):  # simulator / Numba device arrays
            origins = origins.copy_to_host() if self._is_device(origins) else origins
            yaws = yaws.copy_to_host() if self._is_device(yaws) else yaws
        o, y = check_pose_arrays(origins, yaws)
        n = o.shape[0]
        if n > self.capacity:
            self._grow(n)
        if self.cp is not None:
            self.origins[:n].set(o)
            self.yaws[:n].set(y)
            return self.origins[:n], self.yaws[:n]
        return cuda.to_device(o), cuda.to_device(y)

    def _world_index(self, world_index, n):
        """Validated device copy of the actors' world indices."""
        if self.cp is not None and isinstance(world_index, self.cp.ndarray):
            return check_world_index(world_index, n, self.n_worlds, xp=self.cp)
        if world_index is not None and self._is_device(world_index):
            world_index = world_index.copy_to_host()
        return self._to_device(check_world_index(world_index, n, self.n_worlds))

    def trace(self, origins, yaws, out=None, to_host=False, check_capacity=None, world_index=None):
        o, y = self._poses(origins, yaws)
        n = int(o.shape[0])
        if check_capacity is not None:
            check_capacity(n)
        wi = self._world_index(world_index, n)
        if n > self.capacity:
            self._grow(n)
        shape = (n,) + self.sensor.shape
        host_out = None
        if out is not None:
            if isinstance(out[0], np.ndarray):
                host_out = check_out(out, shape)
                out = None
            elif self.cp is not None:
                out = check_out(out, shape, xp=self.cp)
            else:
                raise SenseError("out must be NumPy arrays (or CuPy arrays on a CUDA device)")
        if out is None:
            out = tuple(b[:n] for b in self.buffers)
        if n:
            s = self.settings
            flat = tuple(b.reshape(-1) for b in out)
            total = n * self.sensor.n_rays
            blocks = (total + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK
            sensing = (self.dirs, NUDGE, s.max_steps, s.refine, s.max_distance)
            _launch(blocks, self.layout, (wi, o, y), sensing, flat[0], flat[1], flat[2])
        if host_out is not None:
            for dst, src in zip(host_out, out):
                dst[...] = self._host(src)
            return host_out
        if to_host:
            return tuple(self._host(b) for b in out)
        return out

    def _host(self, arr):
        if self.cp is not None:
            return self.cp.asnumpy(arr)
        return arr.copy_to_host()
