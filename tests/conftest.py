"""Shared fixtures: compiled built-in scenes, cached for the whole session.

Other test files use ``from conftest import compiled_scene`` (pytest puts
``tests/`` on the path) or the ``house128`` fixture. Compiling a scene at 128
takes about a second; the cache makes every later use free. Callers must not
modify the returned World (copy it first).
"""

from __future__ import annotations

import functools

import pytest


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
