"""A world file's sidecar (``PATH.gmdag.json``): reading it, checking the keys the package reads, the
sample convention it names, and its content as bytes for the world's digest (``gmdag.world_digest``).

The sidecar holds what the node words do not: the scene's name and seed, class names, spawn points,
bounds of interest, the compiler's settings and where leaves were sampled (``"sample"``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from navi_nb.errors import GmdagError
from navi_nb.files import read_regular

FLOAT32_MAX = float(np.finfo(np.float32).max)
"""The largest float32: every coordinate a world file or its sidecar gives must fit it."""

DIGEST_SKIPS = ("compiler", "entry_digest")
"""Sidecar keys :func:`world_digest` leaves out: the compile's settings and time (``"compiler"``, read only to
tell the sample convention of a file without a ``"sample"`` key, which loading resolves into ``"sample"``), and
a cache entry's own integrity digest (``world_cache``)."""


def canonical_sidecar(side) -> bytes:
    """A sidecar's content as bytes that depend on its meaning only, without the keys of
    :data:`DIGEST_SKIPS`: JSON with sorted keys and no spacing, the spawn points (most of a house's
    sidecar, and slow to write as text) as their float64 bytes when they form an (n, 3) array."""
    side = side if isinstance(side, dict) else {}
    kept = {k: v for k, v in side.items() if k not in DIGEST_SKIPS}
    points = kept.pop("spawn_points", None)
    out = json.dumps(kept, sort_keys=True, separators=(",", ":")).encode()
    if points is not None:
        try:
            arr = np.asarray(points, dtype=np.float64)
        except (TypeError, ValueError):  # ragged or not numbers: written as JSON
            arr = None
        if arr is not None and (arr.size == 0 or (arr.ndim == 2 and arr.shape[1] == 3)):
            out += b"\0spawn_points f8\0" + arr.reshape(-1, 3).tobytes()
        else:
            out += b"\0spawn_points json\0" + json.dumps(points).encode()
    return out


SAMPLE_CONVENTIONS = ("centre", "corner")
"""Where a leaf's distance was sampled: at its voxel's centre (``bmin + (i + 0.5) * voxel``) or
at its minimum corner (``bmin + i * voxel``)."""


def file_sample_convention(side: dict, source) -> str:
    """The sample convention of a file with sidecar ``side``: its ``"sample"`` key; else
    ``"centre"`` for a file navi_nb's compiler wrote before the key existed (its ``"compiler"``
    key), else ``"corner"`` (other writers sample at the voxel's minimum corner)."""
    value = side.get("sample")
    if value is None:
        return "centre" if isinstance(side.get("compiler"), dict) else "corner"
    if value not in SAMPLE_CONVENTIONS:
        raise GmdagError(source, f"sidecar key 'sample' must be one of {', '.join(SAMPLE_CONVENTIONS)}, got {value!r}")
    return value


def sidecar_path(path) -> Path:
    return Path(str(path) + ".json")


def read_sidecar(path) -> dict:
    sp = sidecar_path(path)
    if not sp.exists():
        return {}
    try:
        text = read_regular(sp, "sidecar")
    except OSError as exc:
        raise GmdagError(sp, f"cannot read sidecar ({exc.strerror or exc})") from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        raise GmdagError(sp, f"sidecar is not valid JSON ({type(exc).__name__}: {exc})".replace("\n", " ")) from None
    return check_sidecar(data, sp)


def _finite_number(x) -> bool:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    try:
        return math.isfinite(float(x))
    except OverflowError:  # a JSON integer beyond float range
        return False


def _coordinate(x) -> bool:
    """A number that is finite as float32."""
    if type(x) is float:  # what the JSON reader gives: one comparison (NaN and infinities fail it)
        return -FLOAT32_MAX <= x <= FLOAT32_MAX
    return _finite_number(x) and abs(float(x)) <= FLOAT32_MAX


def _is_point(p) -> bool:
    """A JSON [x, y, z] of numbers that are finite as float32 (how points are used). Unrolled: a house's
    sidecar holds thousands of points, checked on every load."""
    return isinstance(p, list) and len(p) == 3 and _coordinate(p[0]) and _coordinate(p[1]) and _coordinate(p[2])


def check_sidecar(data, source="<sidecar>") -> dict:
    """Check the types and shapes of the sidecar keys the package reads; return `data`.

    scene: str; seed: an integer; triangles: an integer >= 0; closed: bool; class_names: 1..65536
    strings; spawn_points: a list of finite [x, y, z]; bounds_of_interest:
    [[x, y, z], [x, y, z]] finite with min <= max; compiler: an object. Other
    keys are kept unread. Raises GmdagError naming the key.
    """
    if not isinstance(data, dict):
        raise GmdagError(source, f"sidecar must hold a JSON object, not {type(data).__name__}")

    def bad(key, want):
        got = json.dumps(data[key])
        got = got if len(got) <= 60 else got[:57] + "..."
        raise GmdagError(source, f"sidecar key {key!r} must be {want}, got {got}")

    if "scene" in data and not isinstance(data["scene"], str):
        bad("scene", "a string")
    if "seed" in data and (isinstance(data["seed"], bool) or not isinstance(data["seed"], int)):
        bad("seed", "an integer")
    if "triangles" in data and (
        isinstance(data["triangles"], bool) or not isinstance(data["triangles"], int) or data["triangles"] < 0
    ):
        bad("triangles", "an integer >= 0")
    if "closed" in data and not isinstance(data["closed"], bool):
        bad("closed", "true or false")
    if "compiler" in data and not isinstance(data["compiler"], dict):
        bad("compiler", "an object")
    if "class_names" in data:
        names = data["class_names"]
        if not (isinstance(names, list) and 1 <= len(names) <= 65536 and all(isinstance(n, str) for n in names)):
            bad("class_names", "a list of 1 to 65536 strings")
    if "spawn_points" in data:
        pts = data["spawn_points"]
        if not (isinstance(pts, list) and all(_is_point(p) for p in pts)):
            bad("spawn_points", "a list of finite [x, y, z] points")
    if "bounds_of_interest" in data:
        roi = data["bounds_of_interest"]
        if not (
            isinstance(roi, list)
            and len(roi) == 2
            and _is_point(roi[0])
            and _is_point(roi[1])
            and all(a <= b for a, b in zip(roi[0], roi[1]))
        ):
            bad("bounds_of_interest", "[[x, y, z], [x, y, z]], finite, minimum <= maximum")
    return data


SAMPLE_POSITION = {"centre": 0.5, "corner": 0.0}
"""Where voxel ``i``'s sample lies, in voxels from ``bmin + i * voxel``."""
