"""Sensor geometry against the conventions of docs/ARCHITECTURE.md ("Conventions") and docs/SENSING.md,
computed by hand."""

import math

import numpy as np
import pytest

from navi_nb.errors import NaviError
from navi_nb.sense.sensor import SenseError, Sensor


def test_default_shape_and_units():
    s = Sensor()
    assert s.shape == (64, 16) and s.n_rays == 1024
    assert s.directions.shape == (64, 16, 3) and s.directions.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(s.directions, axis=-1), 1.0, atol=1e-6)
    assert not s.directions.flags.writeable


def test_hand_computed_rays():
    s = Sensor(4, 3)  # azimuths 0, 90, 180, 270 degrees; elevations +90, 0, -90
    d = s.directions
    np.testing.assert_allclose(d[0, 1], [0, 0, -1], atol=1e-7)  # straight ahead: -z
    np.testing.assert_allclose(d[1, 1], [1, 0, 0], atol=1e-7)  # azimuth grows to the right: +x
    np.testing.assert_allclose(d[2, 1], [0, 0, 1], atol=1e-7)  # behind
    np.testing.assert_allclose(d[3, 1], [-1, 0, 0], atol=1e-7)  # left
    np.testing.assert_allclose(d[0, 0], [0, 1, 0], atol=1e-7)  # top row looks up
    np.testing.assert_allclose(d[2, 2], [0, -1, 0], atol=1e-7)  # bottom row looks down
    # the formula (cos e sin a, sin e, -cos e cos a) at a generic bin
    s = Sensor(7, 5)
    a, e = 2 * math.pi * 3 / 7, math.pi / 2 - 2 * math.pi / 4
    np.testing.assert_allclose(
        s.directions[3, 2], [math.cos(e) * math.sin(a), math.sin(e), -math.cos(e) * math.cos(a)], atol=1e-6
    )


def test_canonical_and_lidar_band():
    s = Sensor(256, 48)
    assert s.directions.shape == (256, 48, 3)
    assert s.azimuths[-1] < 2 * math.pi and s.azimuths[0] == 0.0
    band = Sensor(32, 5, fov_up=math.radians(15), fov_down=math.radians(-15))
    np.testing.assert_allclose(band.elevations, np.radians([15, 7.5, 0, -7.5, -15]))
    np.testing.assert_allclose(band.directions[:, 0, 1], math.sin(math.radians(15)), rtol=1e-6)
    one = Sensor(8, 1)
    assert one.elevations[0] == 0.0


def test_world_directions_follow_yaw():
    s = Sensor(4, 3)
    w = s.world_directions([0.0, math.pi / 2, -0.3])
    np.testing.assert_allclose(w[0], s.directions, atol=1e-7)
    # yaw grows to the right: at +90 degrees the actor faces +x, its right is +z
    np.testing.assert_allclose(w[1, 0, 1], [1, 0, 0], atol=1e-6)
    np.testing.assert_allclose(w[1, 1, 1], [0, 0, 1], atol=1e-6)
    # world azimuth = actor azimuth + yaw
    a = s.azimuths[1] - 0.3
    np.testing.assert_allclose(w[2, 1, 1], [math.sin(a), 0, -math.cos(a)], atol=1e-6)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(az=0),
        dict(el=0),
        dict(az=2.5),
        dict(az=True),
        dict(fov_up=2.0),
        dict(fov_down=float("nan")),
        dict(fov_up=-0.5, fov_down=0.5),
        dict(az="64"),
    ],
)
def test_bad_sensor(kwargs):
    with pytest.raises(SenseError) as info:
        Sensor(**kwargs)
    assert isinstance(info.value, NaviError)
    assert "Sensor" in str(info.value)
