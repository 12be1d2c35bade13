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

# The caches a test does not point elsewhere itself (compiled worlds, layout files, spawn pools) live in one
# folder for the session, not in the user's ~/.cache; child processes inherit it.
if not os.environ.get("NAVI_NB_CACHE"):
    _session_cache = tempfile.mkdtemp(prefix="navi_nb_test_cache_")
    os.environ["NAVI_NB_CACHE"] = _session_cache
    atexit.register(shutil.rmtree, _session_cache, True)


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
