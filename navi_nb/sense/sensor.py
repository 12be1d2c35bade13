"""Spherical ray sensors: the ray directions of one actor, computed once.

Conventions (docs/SENSING.md): ``Az`` azimuth bins over ``[0, 2*pi)`` (0 = straight
ahead, growing to the right), ``El`` elevation rows from ``fov_up`` down to
``fov_down`` inclusive (defaults: the whole sphere, ``+pi/2`` to ``-pi/2``).
Ray ``(a, e)`` in the actor frame is ``(cos e sin a, sin e, -cos e cos a)``.

In the world an actor at yaw ``psi`` turns its rays about ``y``: yaw is the
heading's azimuth and grows to the right, so actor-frame azimuth ``a`` looks
along world azimuth ``a + psi``:

    forward (0, 0, -1) -> ( sin psi, 0, -cos psi)
    right   (1, 0,  0) -> ( cos psi, 0,  sin psi)

(the same frames as ``navi_nb/env/motion.py``).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from navi_nb.errors import NaviError

HALF_PI = math.pi / 2
BUILD_BYTES_PER_RAY = 48
"""Bytes per ray a Sensor holds at the peak of its construction: three float64 direction components and
their float64 stack (the float32 directions it keeps are 12)."""
DIRECTION_BYTES_PER_RAY = 12
TRACE_BYTES_PER_RAY = 4 + 2 + 1
"""Per actor and ray, a trace's outputs: the depth (float32), the class (uint16) and the hit flag (bool)."""


class SenseError(NaviError, ValueError):
    """Bad input to the sensor or the tracer (shapes, dtypes, values)."""


def _count(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise SenseError(f"Sensor: {name} must be a positive integer, got {value!r}")
    if int(value) < 1 or int(value) > 65536:
        raise SenseError(f"Sensor: {name} must be in 1..65536, got {value}")
    return int(value)


def _angle(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise SenseError(f"Sensor: {name} must be a finite angle in radians, got {value!r}")
    value = float(value)
    if value < -HALF_PI - 1e-9 or value > HALF_PI + 1e-9:
        raise SenseError(f"Sensor: {name} = {value} is outside [-pi/2, pi/2]")
    return min(max(value, -HALF_PI), HALF_PI)


def sensor_ram_estimate(az: int, el: int, actors: int = 0) -> int:
    """A lower bound on the bytes a Sensor of ``az`` x ``el`` rays holds, traced for ``actors`` actors: the
    peak of building its directions, or the directions and the actors' trace outputs, the larger."""
    per_ray = max(BUILD_BYTES_PER_RAY, DIRECTION_BYTES_PER_RAY + int(actors) * TRACE_BYTES_PER_RAY)
    return int(az) * int(el) * per_ray


def check_sensor_ram(az: int, el: int, what: str, actors: int = 0) -> None:
    """Raise :class:`SenseError` (``what`` names the setting, e.g. ``--sensor-az 65536 --sensor-el 65536``)
    when :func:`sensor_ram_estimate` exceeds the available RAM (``navi_nb.ram``), before anything is allocated."""
    from navi_nb.ram import check_fits

    check_fits(sensor_ram_estimate(az, el, actors), what, error=SenseError)


class Sensor:
    """The rays of one actor: ``az`` azimuth bins x ``el`` elevation rows.

    ``fov_up`` / ``fov_down`` (radians, in ``[-pi/2, pi/2]``, ``fov_down <=
    fov_up``) narrow the vertical field of view to a lidar-like band; the rows
    include both limits. With ``el == 1`` the single row lies midway between
    them (0, the horizon, for the defaults).

    ``directions`` is ``(az, el, 3)`` float32 in the actor frame, unit length.
    """

    def __init__(self, az=64, el=16, fov_up=HALF_PI, fov_down=-HALF_PI):
        self.az_count = _count("az", az)
        self.el_count = _count("el", el)
        check_sensor_ram(self.az_count, self.el_count, f"Sensor: {self.az_count} x {self.el_count} rays")
        self.fov_up = _angle("fov_up", fov_up)
        self.fov_down = _angle("fov_down", fov_down)
        if self.fov_down > self.fov_up:
            raise SenseError(f"Sensor: fov_down {self.fov_down} is above fov_up {self.fov_up}")
        self.azimuths = 2.0 * np.pi * np.arange(self.az_count) / self.az_count  # float64, radians
        if self.el_count == 1:
            self.elevations = np.array([0.5 * (self.fov_up + self.fov_down)])
        else:
            self.elevations = np.linspace(self.fov_up, self.fov_down, self.el_count)
        a = self.azimuths[:, None]
        e = self.elevations[None, :]
        dirs = np.stack([np.cos(e) * np.sin(a), np.sin(e) * np.ones_like(a), -np.cos(e) * np.cos(a)], axis=-1)
        self.directions = np.ascontiguousarray(dirs, dtype=np.float32)
        self.directions.setflags(write=False)

    @property
    def n_rays(self) -> int:
        return self.az_count * self.el_count

    @property
    def shape(self) -> tuple:
        """(az, el): the per-actor shape of the ray arrays."""
        return (self.az_count, self.el_count)

    @property
    def flat_directions(self) -> np.ndarray:
        """(n_rays, 3) float32 view, in the (az, el) order of the output arrays."""
        return self.directions.reshape(self.n_rays, 3)

    def world_directions(self, yaws) -> np.ndarray:
        """(A, az, el, 3) float32 world-frame directions for yaws (A,) (for tests and pictures)."""
        yaws = np.asarray(yaws, dtype=np.float64).reshape(-1)
        c = np.cos(yaws)[:, None, None]
        s = np.sin(yaws)[:, None, None]
        d = self.directions.astype(np.float64)[None]
        x, y, z = d[..., 0], d[..., 1], d[..., 2]
        wx = x * c - z * s
        wz = x * s + z * c
        out = np.stack([wx, np.broadcast_to(y, wx.shape), wz], axis=-1)
        return out.astype(np.float32)

    def __repr__(self):
        return f"Sensor(az={self.az_count}, el={self.el_count}, fov_up={self.fov_up:.4g}, fov_down={self.fov_down:.4g})"

    def __eq__(self, other):
        return (
            isinstance(other, Sensor)
            and self.shape == other.shape
            and self.fov_up == other.fov_up
            and self.fov_down == other.fov_down
        )

    __hash__ = None
