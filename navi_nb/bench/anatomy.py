"""The counting build of the tracer: each ray's steps by kind, for ``navi-nb bench trace``'s anatomy.

The shipped march (``navi_nb/sense/trace_math.py``) calls two hooks,
``tally_step`` and ``tally_cell``, that keep nothing there (they return 0 and
the compiler drops them), and the kernel (``navi_nb/sense/tracer.py``) one,
``keep_tally``, that writes nothing. This module builds the same source with
hooks that count, into a packed tally per ray (``trace_math.STAT_KINDS``
order, ``STAT_BITS`` bits each, saturating), under their own names (Numba's
cache keys compiled code on the module and qualified name, not on the
globals a build binds). Its depths are the shipped build's, bit for bit (a
test says so).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from navi_nb.sense import trace_math, tracer
from navi_nb.sense.trace_math import DESCENT, STAT_BITS, STAT_KINDS, STAT_MAX
from navi_nb.threads import RangeKernel
from navi_nb.world import field


def tally_step(tally, kind):
    """One more step of kind ``kind`` in the packed tally (a full field stays full)."""
    shift = kind * STAT_BITS
    if (tally >> shift) & STAT_MAX < STAT_MAX:
        tally += 1 << shift
    return tally


def tally_cell(tally, same_cell):
    """One more descent when the step found another cell than the step before."""
    if same_cell:
        return tally
    return tally_step(tally, DESCENT)


def keep_tally(stats, i, steps, tally):
    """Ray ``i``'s cell visits and tally into row ``i`` of ``stats``."""
    stats[i, 0] = steps
    stats[i, 1] = tally


def counted_name(decorate):
    """``decorate`` applied to a copy of the function named ``<name>_counted``."""

    def rename(func):
        new = field.retarget(func, {})
        new.__name__ = func.__name__ + "_counted"
        new.__qualname__ = func.__qualname__ + "_counted"
        return decorate(new)

    return rename


_COUNTED = trace_math.build_for(
    counted_name(njit(inline="always", cache=True)),
    counted_name(njit(cache=True, _nrt=False)),
    field_built=field.CPU,
    hooks={"tally_step": tally_step, "tally_cell": tally_cell},
)
_span_counted = counted_name(njit(cache=True, nogil=True, _nrt=False))(
    field.retarget(
        tracer.trace_span,
        {
            "nb_trace_ray": _COUNTED["trace_ray"],
            "nb_keep_tally": counted_name(njit(inline="always", cache=True))(keep_tally),
        },
    )
)
trace_rays_counted = RangeKernel(_span_counted, tracer.trace_rays.size, tracer.GRAIN)
"""The counting build of the CPU kernel (arguments as ``tracer.trace_rays``)."""


def unpack_stats(packed):
    """Packed tallies (int64 array) -> dict kind -> int64 array of counts."""
    packed = np.asarray(packed, np.int64)
    return {k: (packed >> (STAT_BITS * j)) & STAT_MAX for j, k in enumerate(STAT_KINDS)}


def trace_counted(
    world,
    origins,
    yaws,
    sensor,
    max_distance,
    *,
    epsilon=tracer.DEFAULT_EPSILON,
    max_steps=tracer.DEFAULT_MAX_STEPS,
    refine=tracer.DEFAULT_REFINE,
    world_index=None,
):
    """``tracer.trace`` on the CPU through the counting build of the kernel.

    Returns ``(depth, semantic, hit, steps, kinds)``: the first three as
    ``trace``; steps (A, Az, El) int64, each ray's cell visits; kinds a
    dict ``STAT_KINDS`` -> (A, Az, El) int64 counts (pruned, free, sphere,
    candidate and end sum to steps; descent counts the visits whose cell
    differed from the step before's).
    """
    settings, origins, yaws, world_index, shape = tracer.cpu_inputs(
        world, origins, yaws, sensor, max_distance, epsilon, max_steps, refine, world_index
    )
    out = (np.empty(shape, np.float32), np.empty(shape, np.uint16), np.empty(shape, np.bool_))
    stats = np.zeros((int(np.prod(shape)), 2), np.int64)
    if origins.shape[0]:
        tracer.run_cpu(settings, sensor, origins, yaws, world_index, out, kernel=trace_rays_counted, stats=stats)
    kinds = {k: v.reshape(shape) for k, v in unpack_stats(stats[:, 1]).items()}
    return out[0], out[1], out[2], stats[:, 0].reshape(shape), kinds
