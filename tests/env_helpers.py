"""Shared helpers for the environment tests: small compiled worlds, cached per process."""

from __future__ import annotations

import functools

import numpy as np

from navi_nb.sense.sensor import Sensor

RES = 64  # 16 m cube / 64 = 0.25 m voxels: small and fast, walls 0.4 m thick stay >= 1.6 voxels


@functools.cache
def scene_world(name, resolution=RES):
    from navi_nb.world.compiler import compile_scene

    return compile_scene(name, resolution)


@functools.cache
def scene(name):
    from navi_nb.world.scenes import get_scene

    return get_scene(name)


def small_sensor():
    return Sensor(8, 4)


def make_env(name="box", n=4, task="pointgoal", seed=0, sensor=None, **kw):
    from navi_nb.env.nav_env import NavEnv

    return NavEnv(scene_world(name), n, sensor=sensor or small_sensor(), task=task, seed=seed, **kw)


def place(env, pos, yaw, goal=None):
    """Put actors at known poses (and goals) through set_state, keeping everything else."""
    st = env.get_state()
    st["pos"][...] = np.asarray(pos, np.float32).reshape(-1, 3)
    st["yaw"][...] = np.asarray(yaw, np.float32).reshape(-1)
    if goal is not None:
        st["goal"][...] = np.asarray(goal, np.float32).reshape(-1, 3)
        st["goal_dist"][...] = np.linalg.norm(st["goal"].astype(np.float64) - st["pos"].astype(np.float64), axis=1)
        st["start_dist"][...] = st["goal_dist"]
    st["vel"][...] = 0.0
    st["prev_action"][...] = 0.0
    # the visit grid: only the placed cell visited, as at a spawn
    cells = env._grid.cell_of(st["pos"])
    st["visit"][...] = 0
    st["visit"][np.arange(len(cells)), cells >> 3] = (1 << (cells & 7)).astype(np.uint8)
    st["cells"][...] = 1
    env.set_state(st)


def act(n, f=0.0, v=0.0, l=0.0, w=0.0):
    a = np.zeros((n, 4), np.float32)
    a[:, 0], a[:, 1], a[:, 2], a[:, 3] = f, v, l, w
    return a


def snapshot(env):
    return {k: np.array(v, copy=True) for k, v in env.get_state().items()}


def states_equal(a, b):
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def record_kernel(monkeypatch, module, name):
    """Put a recorder in place of the kernel ``module.name``: every call's and every ``compile``'s argument
    types land in the two sets it returns, ``(called, compiled)``, and the real kernel still runs."""
    from numba import typeof

    real, called, compiled = getattr(module, name), set(), set()

    class Recording:
        def __call__(self, *args):
            called.add(tuple(typeof(a) for a in args))
            return real(*args)

        def compile(self, sig):
            compiled.add(tuple(sig))
            return real.compile(sig)

    monkeypatch.setattr(module, name, Recording())
    return called, compiled
