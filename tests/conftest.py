"""Shared fixtures: compiled built-in scenes, cached for the whole session.

Other test files use ``from conftest import compiled_scene`` (pytest puts
``tests/`` on the path) or the ``house128`` fixture. Compiling a scene at 128
takes about a second; the cache makes every later use free. Callers must not
modify the returned World (copy it first).
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile

import pytest

# The suite runs on pytest-xdist's workers (setup.cfg: `-n auto`, `pytest_xdist_auto_num_workers` below). This
# module runs first in the controller, before the workers start: what it puts in the environment they inherit.
# The caches a test does not point elsewhere itself (compiled worlds, layout files, spawn pools) live in one
# folder for the session, not in the user's ~/.cache; child processes inherit it.
if not os.environ.get("NAVI_NB_CACHE"):
    _session_cache = tempfile.mkdtemp(prefix="navi_nb_test_cache_")
    os.environ["NAVI_NB_CACHE"] = _session_cache
    atexit.register(shutil.rmtree, _session_cache, True)

# The workers share the cores, each with its Numba threads (OpenMP's): a thread that waits for work sleeps
# instead of spinning on a core another worker's test needs (a warm suite took 1.6x the time with spinning)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

if "PYTEST_XDIST_WORKER" not in os.environ:
    # navi_nb's import checks the Numba cache against the sources (navi_nb/jit_cache.py) and drops stale kernels:
    # done once here, so that no worker drops what another has just compiled
    import navi_nb  # noqa: F401

MAX_WORKERS = 4
"""The most workers `-n auto` starts: a cold suite's Numba compiles are most of its time, and each worker
compiles what its own tests call first (a kernel another has cached, it loads), so more workers mostly
repeat those compiles, at about 1 GB of memory each."""


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker per core this process may use, at most MAX_WORKERS (a worker's Numba kernels run
    on its own threads, so the workers share the cores with them)."""
    from navi_nb.cores import allowed_cores

    return max(1, min(MAX_WORKERS, allowed_cores().allowed))


@functools.cache
def compiled_scene(name="house", resolution=128, seed=0):
    """The World of built-in scene `name` at `resolution` (cached; do not modify)."""
    from navi_nb.world.compiler import compile_scene

    return compile_scene(name, resolution, seed)


@functools.cache
def scene(name="house", seed=0):
    """The analytic Scene (oracle) of a built-in scene (cached)."""
    from navi_nb.world.scenes import get_scene

    return get_scene(name, seed)


@pytest.fixture(scope="session")
def house128():
    return compiled_scene("house", 128)


@pytest.fixture(scope="session")
def house64():
    return compiled_scene("house", 64)
