"""Held-out worlds recognised by content and geometry: a held-out world is held out under any name.

Seeds ``>= HELDOUT_SEED_START`` of every family are kept for evaluation (``scene_spec``: by family and
seed, before anything loads). A world file is the same world under another name when

- its sidecar names a built-in family and a held-out seed (``navi-nb compile house:1000003 -o x.gmdag``
  writes ``"scene": "house", "seed": 1000003``), or
- its node words are those of a held-out entry of the world cache at its resolution (a copy of a cached
  entry, its sidecar dropped or edited, its header moved): entries of the file's exact size are hashed, the
  others only listed, or
- its geometry is that of a held-out entry of the world cache at any resolution (``navi_nb.world.fingerprint``:
  the world compiled at another resolution or sample convention, a few leaves changed), or
- its geometry holds the layout of one of the reference held-out worlds whose fingerprints ship with the package
  (``REFERENCE_FILE``: the first ``REFERENCE_SEEDS`` held-out seeds of every seeded family, from their analytic
  scenes), whatever the world cache holds.

``check_training_worlds`` refuses such a world in a training set as it refuses the seed, after the worlds
are loaded and before the run writes anything. Past the reference seeds, only held-out worlds the cache holds
(compiled by an evaluation or ``navi-nb scenes --compile``, at any resolution) are known by geometry: the
seeds are unbounded, so such a world never compiled on this machine is known only by its sidecar. Evaluation
compares content and geometry with the run's own record instead (``navi_nb.train.evaluate.evaluation_set``):
a copy of a training world, or it at another resolution, is in the ``train`` split.
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
from pathlib import Path

import numpy as np

from navi_nb.files import read_regular
from navi_nb.world.scene_spec import HELDOUT_SEED_START, SceneSpecError

REFERENCE_SEEDS = 100
"""Held-out seeds per seeded family whose geometry the package ships (``REFERENCE_FILE``): the first hundred,
the evaluation sets the docs use (``heldout_spec(family, 100)`` and fewer)."""
REFERENCE_FILE = Path(__file__).resolve().parent.parent / "data" / "heldout" / "reference.json.gz"


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


def geometry_twin(fp, known) -> tuple | None:
    """``("house:1000003", resolution)`` when one of the held-out entries `known` (:func:`heldout_geometry`)
    has the geometry of the world whose fingerprint is `fp` (``fingerprint.matches``), else None."""
    from navi_nb.world.fingerprint import first_match

    entries, prints = known
    if not entries:
        return None
    k = first_match(fp, prints)
    return None if k is None else (f"{entries[k].family}:{entries[k].seed}", entries[k].resolution)


def heldout_geometry(cache_dir=None) -> tuple:
    """``(entries, fingerprints)`` of the world cache's held-out entries at every resolution (each loaded and
    deep-validated, its fingerprint from the store); entries that do not load are passed over."""
    from navi_nb.errors import NaviError
    from navi_nb.world.fingerprint import fingerprints
    from navi_nb.world.gmdag import load_world
    from navi_nb.world.world_cache import builtin_entries, default_cache_dir

    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    entries, worlds = [], []
    for entry in builtin_entries(root):
        if entry.seed < HELDOUT_SEED_START:
            continue
        try:
            worlds.append(load_world(entry.path))  # deep-validated: a damaged entry is refused, not read
        except (OSError, NaviError):
            continue
        entries.append(entry)
    # one store file per entry: an entry added to the cache later costs its own fingerprint, not all of them
    return entries, [fingerprints([w])[0] for w in worlds]


def heldout_twin(world, cache_dir=None, known=None):
    """``(label, how)`` of the held-out world `world` is under another name, or None (see the module doc).
    `known`: :func:`heldout_geometry`'s answer when already read (else read here if needed)."""
    claim = sidecar_claim(world)
    if claim is not None:
        return claim, "its sidecar names it"
    twin = cached_twin(world, cache_dir)
    if twin is not None:
        return twin, "its node words are that world's in the world cache"
    from navi_nb.world.fingerprint import fingerprints

    fp = fingerprints([world])[0]  # None for a cube too large: known by its content alone
    twin = geometry_twin(fp, known if known is not None else heldout_geometry(cache_dir))
    if twin is not None:
        return twin[0], f"its geometry is that world's, compiled at resolution {twin[1]} in the world cache"
    twin = reference_twin(fp)
    if twin is not None:
        return twin, "its geometry holds that world's layout, one of the held-out worlds the package fingerprints"
    return None


def reference_spec() -> dict:
    """What the reference file holds: the fingerprint lattice and, per seeded family, its generator version and
    the seeds (``REFERENCE_SEEDS`` from ``HELDOUT_SEED_START``). A file whose spec differs is out of date."""
    from navi_nb.world.fingerprint import CELL, FINGERPRINT_VERSION, MARGIN, SAMPLE_AT, SCENE_PAD
    from navi_nb.world.scenes import GENERATOR_VERSION, SEEDED_FAMILIES

    return {
        "lattice": [FINGERPRINT_VERSION, CELL, SAMPLE_AT, MARGIN, SCENE_PAD],
        "seeds": [HELDOUT_SEED_START, REFERENCE_SEEDS],
        "generators": {family: GENERATOR_VERSION[family] for family in SEEDED_FAMILIES},
    }


def reference_labels() -> list:
    """``"house:1000000"``, ...: the held-out worlds the reference file fingerprints, in its order."""
    spec = reference_spec()
    start, count = spec["seeds"]
    return [f"{family}:{seed}" for family in spec["generators"] for seed in range(start, start + count)]


def build_reference() -> bytes:
    """The reference file's bytes (gzip of one JSON object: ``reference_spec()`` and a record per label),
    each world's fingerprint from its analytic scene (``fingerprint.scene_fingerprint``); deterministic.
    ``scripts/heldout_reference.py`` writes them to ``REFERENCE_FILE``."""
    import gzip
    import json

    from navi_nb.world.fingerprint import scene_fingerprint
    from navi_nb.world.scenes import get_scene

    records = {}
    for label in reference_labels():
        family, seed = label.split(":")
        records[label] = scene_fingerprint(get_scene(family, int(seed))).to_record()
    body = json.dumps({**reference_spec(), "records": records}, sort_keys=True, separators=(",", ":"))
    return gzip.compress(body.encode(), 9, mtime=0)


@functools.cache
def reference_geometry() -> tuple:
    """``(labels, fingerprints, packed)`` of the reference file: the first ``REFERENCE_SEEDS`` held-out worlds of
    every seeded family, known by geometry on any machine, whatever its world cache holds (``packed``: the
    fingerprints as ``fingerprint.first_within`` reads them). SceneSpecError naming
    the file when it is missing, damaged or out of date (a broken install: reinstall the package)."""
    import gzip
    import json

    from navi_nb.world.fingerprint import FingerprintError, from_record, pack_parts

    where = f"held-out reference file {REFERENCE_FILE}"
    try:
        stored = json.loads(gzip.decompress(read_regular(REFERENCE_FILE, "held-out reference file", 1 << 24)))
    except (OSError, ValueError, EOFError) as exc:
        raise SceneSpecError(f"{where} cannot be read ({exc}); reinstall navi-nb") from None
    if not isinstance(stored, dict) or {k: stored.get(k) for k in reference_spec()} != reference_spec():
        raise SceneSpecError(f"{where} is not this version's (its lattice, seeds or generators differ); reinstall")
    labels, records = reference_labels(), stored.get("records")
    if not isinstance(records, dict) or sorted(records) != sorted(labels):
        raise SceneSpecError(f"{where} does not hold the records of {labels[0]} ... {labels[-1]}; reinstall")
    try:
        prints = [from_record(records[label], f"{where}, {label}") for label in labels]
    except FingerprintError as exc:
        raise SceneSpecError(f"{exc}; reinstall navi-nb") from None
    return labels, prints, pack_parts(prints)


def reference_twin(fp):
    """The label of the reference held-out world (:func:`reference_geometry`) whose layout the world with
    fingerprint `fp` holds (``fingerprint.difference_within``), or None (also for `fp` None: no fingerprint)."""
    from navi_nb.world.fingerprint import first_within

    if fp is None:
        return None
    labels, _prints, packed = reference_geometry()
    k = first_within(fp, packed)
    return None if k is None else labels[k]


def check_training_worlds(items, worlds, allow_heldout=False, cache_dir=None):
    """Raise SceneSpecError naming the first file item whose world is a held-out world (unless
    `allow_heldout`); built-in items were checked by seed (``scene_spec.check_training_items``)."""
    if allow_heldout:
        return
    known = None  # the held-out entries' geometry, read once for every file item
    for item, world in zip(items, worlds):
        if item.builtin:
            continue
        if known is None:
            known = heldout_geometry(cache_dir)
        twin = heldout_twin(world, cache_dir, known)
        if twin is not None:
            raise SceneSpecError(
                f"scene {item.label} (from {item.origin!r}) is held-out world {twin[0]} ({twin[1]}); held-out "
                f"worlds (seeds >= {HELDOUT_SEED_START:,}) are kept for evaluation under any name: train on "
                "other worlds or allow held-out seeds explicitly"
            )
