"""Held-out worlds recognised by content: a held-out world is held out under any name.

Seeds ``>= HELDOUT_SEED_START`` of every family are kept for evaluation (``scene_spec``: by family and
seed, before anything loads). A world file is the same world under another name when

- its sidecar names a built-in family and a held-out seed (``navi-nb compile house:1000003 -o x.gmdag``
  writes ``"scene": "house", "seed": 1000003``), or
- its node words are those of a held-out entry of the world cache at its resolution (a copy of a cached
  entry, its sidecar dropped or edited, its header moved): entries of the file's exact size are hashed, the
  others only listed.

``check_training_worlds`` refuses such a world in a training set as it refuses the seed, after the worlds
are loaded and before the run writes anything. Evaluation compares content with the run's own record
instead (``navi_nb.train.evaluate.evaluation_set``): a copy of a training world is in the ``train`` split.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import numpy as np

from navi_nb.files import read_regular
from navi_nb.world.scene_spec import HELDOUT_SEED_START, SceneSpecError


def sidecar_claim(world):
    """``"house:1000003"`` when the world's sidecar names a built-in family and a held-out seed, else None."""
    from navi_nb.world.scenes import SCENES

    side = world.sidecar if isinstance(world.sidecar, dict) else {}
    family, seed = side.get("scene"), side.get("seed")
    if family in SCENES and isinstance(seed, int) and not isinstance(seed, bool) and seed >= HELDOUT_SEED_START:
        return f"{family}:{seed}"
    return None


def cached_twin(world, cache_dir=None):
    """``"house:1000003"`` when a held-out entry of the world cache, at the world's resolution, holds the world's
    node words (its exact geometry, wherever its header puts it), else None. Unreadable folders and entries are
    passed over."""
    from navi_nb.world.world_cache import builtin_entries, default_cache_dir

    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    header = len(world.header_bytes())
    size = header + 8 * int(world.node_count)
    digest = None
    for entry in builtin_entries(root, world.resolution):
        if entry.seed < HELDOUT_SEED_START:
            continue
        try:
            st = os.lstat(entry.path)
            if not stat.S_ISREG(st.st_mode) or st.st_size != size:
                continue
            data = read_regular(entry.path, "world cache entry")
        except OSError:
            continue
        if digest is None:
            digest = hashlib.sha256(np.ascontiguousarray(world.nodes, dtype="<u8").view(np.uint8)).digest()
        if hashlib.sha256(memoryview(data)[header:]).digest() == digest:
            return f"{entry.family}:{entry.seed}"
    return None


def heldout_twin(world, cache_dir=None):
    """``(label, how)`` of the held-out world `world` is under another name, or None (see the module doc)."""
    claim = sidecar_claim(world)
    if claim is not None:
        return claim, "its sidecar names it"
    twin = cached_twin(world, cache_dir)
    if twin is not None:
        return twin, "its node words are that world's in the world cache"
    return None


def check_training_worlds(items, worlds, allow_heldout=False, cache_dir=None):
    """Raise SceneSpecError naming the first file item whose world is a held-out world (unless
    `allow_heldout`); built-in items were checked by seed (``scene_spec.check_training_items``)."""
    if allow_heldout:
        return
    for item, world in zip(items, worlds):
        if item.builtin:
            continue
        twin = heldout_twin(world, cache_dir)
        if twin is not None:
            raise SceneSpecError(
                f"scene {item.label} (from {item.origin!r}) is held-out world {twin[0]} ({twin[1]}); held-out "
                f"worlds (seeds >= {HELDOUT_SEED_START:,}) are kept for evaluation under any name: train on "
                "other worlds or allow held-out seeds explicitly"
            )
