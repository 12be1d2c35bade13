"""Kinematics, frames and collision of NavEnv (issue 4, acceptance lines 1 and 2)."""

import math

import numpy as np
import pytest
from env_helpers import act, make_env, place, scene, scene_world

DT = 0.1


# --------------------------------------------------------------------------
# 1. kinematics and frames against hand-computed poses
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "action, expect",
    [
        ((1, 0, 0, 0), (0.0, 0.0, -0.2)),  # forward along -z at yaw 0
        ((-1, 0, 0, 0), (0.0, 0.0, 0.2)),
        ((0, 0, 1, 0), (0.1, 0.0, 0.0)),  # lateral +1 along +x (the right)
        ((0, 1, 0, 0), (0.0, 0.1, 0.0)),  # vertical +1 along +y
        ((0.5, 0, -0.5, 0), (-0.05, 0.0, -0.1)),
    ],
)
def test_translation_at_yaw_zero(action, expect):
    env = make_env("box", n=1)
    env.reset()
    place(env, [0.0, 1.5, 0.0], 0.0)
    env.step(np.asarray([action], np.float32))
    np.testing.assert_allclose(env.positions[0], np.array([0.0, 1.5, 0.0]) + expect, atol=1e-6)
    assert not env.step(act(1))[4]["contact"][0]


def test_heading_rotates_motion_and_yaw_rate():
    env = make_env("box", n=3)
    env.reset()
    yaws = np.array([0.5, -2.0, math.pi / 2], np.float32)
    place(env, np.tile([0.0, 1.5, 0.0], (3, 1)), yaws)
    a = np.array([[1, 0, 0, 0], [0, 0, 1, 0], [1, 0, 1, 1]], np.float32)
    env.step(a)
    p = env.positions.astype(np.float64)
    psi = yaws.astype(np.float64)
    fwd = np.stack([np.sin(psi), 0 * psi, -np.cos(psi)], 1)
    right = np.stack([np.cos(psi), 0 * psi, np.sin(psi)], 1)
    want = np.array([0.0, 1.5, 0.0]) + np.stack([fwd[0] * 0.2, right[1] * 0.1, fwd[2] * 0.2 + right[2] * 0.1])
    np.testing.assert_allclose(p, want, atol=1e-6)
    # yaw: turned by w * max_yaw_rate * dt, only where w != 0, wrapped to [-pi, pi)
    want_yaw = (psi + np.array([0, 0, 1]) * (math.pi / 2) * DT + math.pi) % (2 * math.pi) - math.pi
    np.testing.assert_allclose(env.yaws, want_yaw, atol=1e-6)
    # at pi/2 the actor faces +x: forward moved it along +x, its right is +z
    np.testing.assert_allclose(p[2], [0.2, 1.5, 0.1], atol=1e-6)


def test_yaw_turns_the_sensor_view_like_the_conventions():
    """Depth of azimuth bin a at yaw psi = exact distance along world azimuth a + psi."""
    from navi_nb.sense.sensor import Sensor

    sc = scene("box")
    env = make_env("box", n=4, sensor=Sensor(8, 3))  # rows: up, the horizon, down
    env.reset()
    yaws = np.array([0.0, math.pi / 2, math.pi, -math.pi / 2], np.float32)
    origin = np.array([1.0, 1.5, 0.5])
    place(env, np.tile(origin, (4, 1)), yaws)
    obs = env.step(act(4))[0]
    cfg = env.config
    depth = np.expm1(obs[:, env.obs_layout["depth"]] * math.log1p(cfg.max_distance)).reshape(4, 8, 3)
    el = env.sensor.elevations
    row = 1
    assert el[row] == 0.0
    for i, psi in enumerate(yaws.astype(np.float64)):
        for b, a in enumerate(env.sensor.azimuths[:4]):
            e = el[row]
            d = np.array([[math.cos(e) * math.sin(a + psi), math.sin(e), -math.cos(e) * math.cos(a + psi)]])
            exact = sc.raycast(origin[None, :], d, cfg.max_distance)[0]
            assert abs(depth[i, b, row] - exact) <= 0.03 + 1.5 * scene_world("box").voxel_size, (i, b)
    # yaw 0 looks at -z (wall at z=-3: 3.5 m), yaw pi/2 at +x (wall at x=4: 3 m)
    assert abs(depth[0, 0, row] - 3.5) <= 0.26
    assert abs(depth[1, 0, row] - 3.0) <= 0.26
    assert abs(depth[2, 0, row] - 2.5) <= 0.26  # yaw pi faces +z: wall at z=3
    assert abs(depth[3, 0, row] - 5.0) <= 0.26  # yaw -pi/2 faces -x: wall at x=-4


def test_velocity_observation_in_own_frame():
    env = make_env("box", n=1)
    env.reset()
    place(env, [0.0, 1.5, 0.0], 1.0)
    obs = env.step(act(1, f=0.5, v=-0.5, l=1.0))[0]
    vel = obs[0, env.obs_layout["velocity"]]
    np.testing.assert_allclose(vel, [0.5, -0.5, 1.0], atol=1e-5)  # forward, vertical, lateral / max speeds
    np.testing.assert_allclose(obs[0, env.obs_layout["prev_action"]], [0.5, -0.5, 1.0, 0.0])


# --------------------------------------------------------------------------
# 2. collision
# --------------------------------------------------------------------------


def _segment_min_sdf(sc, a, b, samples=24):
    t = np.linspace(0.0, 1.0, samples)[None, :, None]
    pts = a[:, None, :] + t * (b - a)[:, None, :]
    d, _ = sc.evaluate(pts.reshape(-1, 3))
    return d.reshape(a.shape[0], samples).min(axis=1)


@pytest.mark.parametrize("name", ["box", "pillars", "house", "maze", "clutter"])
def test_random_full_speed_moves_never_enter_geometry(name):
    sc = scene(name)
    n, steps = 200, 12  # 2,400 full-speed moves per scene
    env = make_env(name, n=n, seed=3, max_steps=1000)
    env.reset()
    rng = np.random.default_rng(7)
    r = env.config.radius
    voxel = scene_world(name).voxel_size
    worst = np.inf
    for _ in range(steps):
        before = env.positions.astype(np.float64).copy()
        a = rng.choice([-1.0, 1.0], size=(n, 4)).astype(np.float32)
        env.step(a)
        after = env.positions.astype(np.float64)
        d_end, _ = sc.evaluate(after)
        worst = min(worst, d_end.min())
        # the centre never passes through solid between the two poses of a step
        assert _segment_min_sdf(sc, before, after).min() > 0.0
    # the sphere never ends inside geometry (to the world's accuracy: half a voxel)
    assert worst >= r - 0.5 * voxel, worst
    assert np.all(np.abs(env.positions) < 8.0)


def test_driven_into_a_wall_stops_at_its_radius():
    sc = scene("box")
    env = make_env("box", n=3)
    env.reset()
    # facing -z (wall at z=-3), +x at yaw pi/2 (wall x=4), and the ceiling (y=3) by vertical action
    place(env, [[0.0, 1.5, 0.0], [0.0, 1.5, 0.0], [0.0, 1.5, 0.0]], [0.0, math.pi / 2, 0.0])
    contacts = 0
    for _ in range(60):
        info = env.step(np.array([[1, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0]], np.float32))[4]
        contacts += int(info["contact"].all())
    d, _ = sc.evaluate(env.positions.astype(np.float64))
    r = env.config.radius
    voxel = scene_world("box").voxel_size
    assert np.all(np.abs(d - r) <= voxel), d  # stopped at its radius, within one voxel
    assert np.all(d >= r - 0.5 * voxel)
    assert contacts > 30  # pushing against the wall is reported as contact
    np.testing.assert_allclose(env.positions[0, [0, 1]], [0.0, 1.5], atol=1e-3)  # no drift sideways


def test_slides_along_a_wall():
    env = make_env("box", n=1)
    env.reset()
    # at the -z wall, heading 45 degrees into it: keeps moving along x, never into z
    place(env, [0.0, 1.5, -2.7], -math.pi / 4)
    x0 = float(env.positions[0, 0])
    for _ in range(5):
        info = env.step(act(1, f=1.0))[4]
    assert info["contact"][0]
    assert float(env.positions[0, 0]) < x0 - 0.3  # slid to -x (its forward-left along the wall)
    assert float(env.positions[0, 2]) > -3.0 + env.config.radius - 0.13


class _ThinWall:
    """A field: one wall 2 voxels thick at x in [0, 0.5], free elsewhere (closed cube room)."""

    def evaluate(self, points):
        p = np.asarray(points, np.float64)
        d = np.abs(p[:, 0] - 0.25) - 0.25
        return d, np.full(p.shape[0], 2, np.int32)


def test_no_tunnelling_through_a_thin_wall_at_any_speed():
    from env_helpers import small_sensor

    from navi_nb.env.nav_env import NavEnv
    from navi_nb.world.compiler import compile_field

    w = compile_field(_ThinWall(), [-4.0, -4.0, -4.0], [4.0, 4.0, 4.0], 32, cube=((-4.0, -4.0, -4.0), 8.0))
    assert w.voxel_size == pytest.approx(0.25)
    env = NavEnv(w, 4, sensor=small_sensor(), task="explore", max_speed=60.0, dt=0.1)  # 6 m per step
    env.reset()
    place(
        env,
        np.array([[-2.0, 0.0, 0.0], [-1.0, 1.0, 1.0], [3.0, 0.0, 0.0], [2.0, -1.0, 0.0]]),
        [math.pi / 2, math.pi / 2, -math.pi / 2, -math.pi / 2],
    )
    for _ in range(5):
        env.step(act(4, f=1.0))
        x = env.positions[:, 0]
        assert np.all(x[:2] <= -env.config.radius + 0.2) and np.all(x[2:] >= 0.5 + env.config.radius - 0.2)
    # pressed against the wall's faces at their radius
    np.testing.assert_allclose(x[:2], -env.config.radius, atol=0.25)
    np.testing.assert_allclose(x[2:], 0.5 + env.config.radius, atol=0.25)


def test_actors_stay_inside_the_world_cube():
    from env_helpers import small_sensor

    from navi_nb.env.nav_env import NavEnv
    from navi_nb.world.compiler import compile_field

    w = compile_field(_ThinWall(), [-4.0, -4.0, -4.0], [4.0, 4.0, 4.0], 32, cube=((-4.0, -4.0, -4.0), 8.0))
    env = NavEnv(w, 3, sensor=small_sensor(), task="explore", max_speed=30.0, max_vertical_speed=30.0)
    env.reset()
    place(env, [[-2.0, 0.0, 0.0], [-2.0, 0.0, 0.0], [-2.0, 0.0, 0.0]], [0.0, math.pi, 0.0])
    for _ in range(4):
        info = env.step(np.array([[1, 0, 0, 0], [1, 0, 0, 0], [0, -1, 0, 0]], np.float32))[4]
    r = env.config.radius
    np.testing.assert_allclose(env.positions[:, [2, 2, 1]].diagonal(), [-4 + r, 4 - r, -4 + r], atol=1e-5)
    assert info["contact"].all()
