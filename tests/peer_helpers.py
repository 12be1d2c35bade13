"""The peers a few tests need and the package does not: PyTorch and Stable-Baselines3 (the `peers` extra).

``need_peer(module)`` is ``pytest.importorskip`` for one of them: the test skips, saying which peer it needs
and how to install it. With ``NAVI_NB_REQUIRE_PEERS=1`` (``.ci/run`` sets it) a missing peer fails the test
instead, so CI runs every peer test or fails.
"""

from __future__ import annotations

import importlib
import os

import pytest

INSTALL = "pip install -e '.[peers]'"
NAMES = {"torch": "PyTorch", "stable_baselines3": "Stable-Baselines3"}


def peers_required() -> bool:
    """Whether a missing peer is an error (``NAVI_NB_REQUIRE_PEERS=1``) rather than a skip."""
    return os.environ.get("NAVI_NB_REQUIRE_PEERS") == "1"


def need_peer(module: str):
    """The peer `module`, imported; skips the test without it (fails it when peers are required)."""
    reason = f"needs {NAMES.get(module, module)} (a peer): {INSTALL}"
    if not peers_required():
        return pytest.importorskip(module, reason=reason)
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        error = exc  # failed outside the handler: one line, not the chained ImportError
    pytest.fail(f"{reason}; NAVI_NB_REQUIRE_PEERS=1 makes a missing peer an error ({error})", pytrace=False)
