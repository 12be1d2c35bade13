"""The spawn pool's cache files: ``spawn/KEY.npz`` beside the world cache, one per world and setting.

A file holds a pool that :class:`navi_nb.env.spawn.SpawnSampler` computed (its cells, which listed spawn
points stay, the counts of its note) and a digest of them keyed with the file's name; KEY
(:func:`pool_cache_key`) hashes the world's content, the settings, the listed spawn points and the sources
of the code that computes the pool.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np

SPLIT_SHAPE = (3,)  # a pool file's ``split``: parts holding spawn points, their free cells, spawn points dropped
POOL_CACHE_VERSION = 3  # 2: files hold the digest of their arrays; 3: one component, and the note's counts
POOL_SOURCES = (
    "env/spawn.py",
    "env/pool_file.py",
    "env/motion.py",
    "world/field.py",
    "world/layout.py",
    "world/world_set.py",
)
"""The sources whose code decides a pool (the grid, the clearance query, the layout it reads): an edit to
any of them starts new cache files."""
_sources_digest = None


def pool_cache_key(world_digest, cube_lo, cube_hi, roi_lo, roi_hi, radius, margin, cell, spawn_points) -> str:
    """The name of a pool's cache file: a hash of the world's content (``world_digest``), the sampler's
    settings (exact float bits), the listed spawn points and the sources that compute it."""
    global _sources_digest
    if _sources_digest is None:
        from navi_nb.jit_cache import PACKAGE_DIR, sources_hash

        _sources_digest = sources_hash([PACKAGE_DIR / name for name in POOL_SOURCES])
    settings = np.concatenate(
        [np.ravel(np.asarray(v, np.float64)) for v in (cube_lo, cube_hi, roi_lo, roi_hi, radius, margin, cell)]
    )
    h = hashlib.blake2b(digest_size=20)
    h.update(json.dumps([POOL_CACHE_VERSION, _sources_digest, str(world_digest)]).encode())
    h.update(json.dumps([float(x).hex() for x in settings]).encode())
    h.update(np.ascontiguousarray(spawn_points, np.float64).reshape(-1, 3).tobytes())
    return h.hexdigest()


def default_pool_dir() -> Path:
    """``spawn/`` beside the world cache's ``worlds/`` (``NAVI_NB_CACHE`` moves both)."""
    from navi_nb.world.world_cache import default_cache_dir

    return default_cache_dir().parent / "spawn"


def pool_digest(name, reach, keep, split) -> np.ndarray:
    """(32,) uint8: the SHA-256 of a pool file's name (its :func:`pool_cache_key`, which hashes the world's
    content digest and the settings) and of its arrays' shapes and bytes."""
    reach = np.ascontiguousarray(reach, np.bool_)
    keep = np.ascontiguousarray(keep, np.bool_)
    split = np.ascontiguousarray(split, np.int64)
    h = hashlib.sha256(b"navi-nb spawn pool\0" + str(name).encode() + b"\0")
    h.update(json.dumps([reach.shape, keep.shape, split.shape]).encode())
    h.update(reach.view(np.uint8))
    h.update(keep.view(np.uint8))
    h.update(split.astype("<i8").tobytes())
    return np.frombuffer(h.digest(), np.uint8).copy()


def read_pool(path, n_cells, n_points):
    """``(reach, keep, split)`` from a pool file (``split``: :attr:`SpawnSampler.split`'s counts), or None
    when it is not to be trusted: missing or unreadable, not a pool of these sizes, arrays that do not match
    the digest stored with them, or a pool of no cell. A path that is not a regular file (a FIFO, say) is
    never opened.

    Why a digest rather than re-querying a sample of cells: the damage to catch includes one cell more or
    less, which a sample of cells finds only by luck, while a digest of the arrays finds every change
    to them. The digest is keyed with the file's name, the pool's :func:`pool_cache_key` (the world's content
    digest and the settings), so a good pool of another world or setting copied under this name fails too.
    A file without ``split`` (written before the pool was one component) is not one of this version's.
    It cannot catch a wrong pool written with its own digest (the writer is this module). A pool of no cell
    is never read back: computing it again costs a grid, while trusting it would refuse the world for good.
    """
    from navi_nb.files import open_regular

    try:
        # every failure of the zip and npz layers is "not to be trusted", never an error: zipfile raises
        # NotImplementedError (a compression method or zip version flipped), RuntimeError (the encryption
        # flag), struct.error, BadZipFile, zlib.error, EOFError, OSError; np.load raises ValueError and
        # KeyError (a missing member), and others may follow from other damage
        with open_regular(path, "spawn pool file") as fh, np.load(fh, allow_pickle=False) as f:
            reach, keep, split, stored = f["reach"], f["keep"], f["split"], f["digest"]
    except Exception:  # the one boundary where damage of any kind means "compute it again"
        return None
    if not all(isinstance(a, np.ndarray) for a in (reach, keep, split, stored)):  # a member not in .npy form is bytes
        return None
    if reach.dtype != np.bool_ or keep.dtype != np.bool_ or reach.shape != (n_cells,) or keep.shape != (n_points,):
        return None
    if stored.dtype != np.uint8 or stored.shape != (32,) or split.dtype != np.int64 or split.shape != SPLIT_SHAPE:
        return None
    if not np.array_equal(stored, pool_digest(Path(path).stem, reach, keep, split)) or not reach.any():
        return None
    return reach, keep, split


def write_pool(path, reach, keep, split=None):
    """Write a pool file atomically (a temporary file renamed over the name), with the digest of its arrays
    keyed with its name (:func:`pool_digest`); False when it cannot. ``split``: the note's counts
    (:meth:`SpawnSampler.split`), none (zeros) when not given."""
    path = Path(path)
    split = np.zeros(SPLIT_SHAPE, np.int64) if split is None else np.asarray(split, np.int64).reshape(SPLIT_SHAPE)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            digest = pool_digest(path.stem, reach, keep, split)
            np.savez_compressed(f, reach=reach, keep=keep, split=split, digest=digest)
        os.replace(tmp, path)
        return True
    except OSError:
        return False
    finally:
        Path(tmp).unlink(missing_ok=True)
