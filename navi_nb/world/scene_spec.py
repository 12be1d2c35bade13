"""Scene specs: one syntax for naming a set of worlds.

A spec is a comma-separated list of items, read left to right:

=========================== ==============================================
``house``                   a built-in family, seed 0
``house:7``                 one seed
``house:0-199``             seeds 0 to 199 (inclusive)
``house:0-9,20-29``         an item of bare seeds continues the family before it
``maze:0-99,clutter:0-99``  several families
``worlds/a.gmdag``          a compiled world file
``meshes/room.obj``         a mesh file (``MESH_SUFFIXES``), compiled at the set's
                            resolution into the world cache on first use
``worlds/``                 every ``*.gmdag`` directly in a folder (sorted by name;
                            meshes in a folder are not picked up)
``worlds/*/x*.gmdag``       a glob (sorted; ``*``, ``?`` and ``[...]``): the
                            ``.gmdag`` and mesh files it matches
``@set.txt`` or ``set.txt`` a text file of specs, one or more per line; ``#``
                            starts a comment; its relative paths are relative
                            to the text file's folder
=========================== ==============================================

Only regular files (or links to them) are read as worlds, meshes and list
files: a FIFO, a device, a socket or a folder given as one is refused before
it is opened (``navi_nb.files.open_regular``). A list file is read as UTF-8
and may hold at most ``MAX_LIST_BYTES`` (16 MiB). The reader of a file item is
chosen by the suffix of the name the spec gives, so a link ``room.obj`` to a
file without a suffix is read as OBJ.

Duplicates are dropped, the first occurrence keeping its place (files are
compared by their resolved path), so the order of the worlds is the order of
their first mention.

Held-out seeds: seeds ``>= HELDOUT_SEED_START`` (1,000,000) of every family
are kept for evaluation. ``check_training_items`` refuses them unless told
otherwise, so a training set cannot contain an evaluation world by accident;
``heldout_spec(family, n)`` names the first ``n`` held-out worlds of a family.

Bad input raises :class:`SceneSpecError` naming the offending item before
anything is loaded or written: malformed items, empty ranges, unknown
families, seeds of a family without seeds, missing or invalid files, empty
folders and globs, list files that include themselves, worlds too small for an
actor, and sets whose count or estimated size would not fit in RAM
(``check_ram``).
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from navi_nb.errors import NaviError

HELDOUT_SEED_START = 1_000_000
MAX_WORLDS = 100_000  # most worlds one spec may name
MAX_SEED = 2**63 - 1
MAX_LIST_DEPTH = 8  # list files including list files
MAX_LIST_BYTES = 16 * 1024 * 1024  # largest list file read (a list of 100,000 paths is a few MiB)
RAM_FRACTION = 0.5  # a set may use at most this share of the available RAM
WORLD_SUFFIX = ".gmdag"
# Mesh files a spec may name (compared in lower case): the formats navi_nb.world.mesh_io reads itself, and
# those it reads through trimesh that hold their whole mesh in one file (not .gltf, whose buffers may lie in
# other files the cache key would not cover).
MESH_SUFFIXES = (".obj", ".stl", ".ply", ".off", ".glb")
# Estimated in-memory bytes of one compiled built-in world at resolution 128
# (the largest seeds measured are about 0.6 MB, 0.8 MB for the large families,
# which compile at 4x the resolution in a 4x wider cube: the same voxel size;
# node counts grow with the surface area, i.e. with the square of the resolution).
BUILTIN_BYTES_AT_128 = 1_000_000
WORLD_OVERHEAD_BYTES = 64 * 1024  # sidecar, spawn pool, Python objects per world
MAX_RESOLUTION = 8192  # the compiler's largest resolution (a world file's, not the set's)

_FAMILY_ITEM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?::(.*))?$")
_SEEDS = re.compile(r"^(\d+)(?:-(\d+))?$")
_GLOB_CHARS = set("*?[")


class SceneSpecError(NaviError, ValueError):
    """A scene spec (or one of its items) that cannot name a set of worlds."""


@dataclass(frozen=True)
class WorldItem:
    """One world of a set: a built-in (family, seed), a `.gmdag` file, or a mesh file (a `path` ending in one of
    MESH_SUFFIXES: compiled into the world cache, see `world_cache.mesh_entry_path`)."""

    family: str | None = None
    seed: int | None = None
    path: Path | None = None  # resolved (links followed): files are compared by it
    origin: str = ""  # the spec item that named it (for messages)
    suffix: str = ""  # the suffix of the name the spec gave, which picks the reader ("": the path's own)

    @property
    def key(self):
        return ("file", str(self.path)) if self.path is not None else (self.family, self.seed)

    @property
    def label(self) -> str:
        return str(self.path) if self.path is not None else f"{self.family}:{self.seed}"

    @property
    def builtin(self) -> bool:
        return self.path is None

    @property
    def mesh(self) -> bool:
        return self.path is not None and self.reader_suffix.lower() in MESH_SUFFIXES

    @property
    def reader_suffix(self) -> str:
        """The suffix that picks a file item's reader: that of the name given, not of a link's target."""
        return self.suffix or (self.path.suffix if self.path is not None else "")


def is_mesh_path(path) -> bool:
    """Whether a path names a mesh file a spec compiles (by its suffix, any case)."""
    return Path(path).suffix.lower() in MESH_SUFFIXES


@dataclass(frozen=True)
class _SeedRange:
    family: str
    first: int
    last: int
    origin: str
    listed_in: str = ""  # the list file whose line named it ("": the spec itself), for the count's message

    def __len__(self):
        return self.last - self.first + 1


def is_heldout(item: WorldItem) -> bool:
    """Whether a built-in item's seed lies in the held-out range (files never do)."""
    return item.builtin and item.seed >= HELDOUT_SEED_START


def heldout_spec(family: str, count: int) -> str:
    """The spec of the first `count` held-out worlds of `family`."""
    if count < 1:
        raise SceneSpecError(f"held-out set of {family!r}: count must be >= 1, got {count}")
    return f"{family}:{HELDOUT_SEED_START}-{HELDOUT_SEED_START + count - 1}"


def check_training_items(items, allow_heldout=False):
    """Raise unless no item is held-out (or `allow_heldout`); returns items."""
    if not allow_heldout:
        for it in items:
            if is_heldout(it):
                raise SceneSpecError(
                    f"scene {it.label} (from {it.origin!r}) is held out for evaluation (seeds >= "
                    f"{HELDOUT_SEED_START:,}); train on lower seeds or allow held-out seeds explicitly"
                )
    return items


def overlap(items_a, items_b):
    """Items of `items_a` that also appear in `items_b` (by key), in order."""
    keys = {it.key for it in items_b}
    return [it for it in items_a if it.key in keys]


# --------------------------------------------------------------------------
# parsing
# --------------------------------------------------------------------------


def parse_spec(spec, base_dir=None, *, check_files=True, actor_radius=0.2) -> list:
    """The ordered, de-duplicated WorldItems a spec names (see the module doc).

    spec: a string (or a list of strings, read as if joined by commas).
    base_dir: the folder relative paths start from (default: the current one).
    check_files: open every world file's header (existence, format, size) now and
    check that an actor of `actor_radius` (metres) fits in its world; a mesh
    file must be readable (it is parsed and checked when it is compiled).
    """
    from navi_nb.world.scenes import SCENES

    pieces = _flatten(spec, Path(base_dir) if base_dir is not None else Path.cwd(), depth=0, seen_lists=())
    families = set(SCENES)
    count = 0
    for p in pieces:
        if isinstance(p, _SeedRange) and p.family not in families:
            raise SceneSpecError(
                f"scene spec item {p.origin!r}: unknown family {p.family!r}; built-in families are {', '.join(SCENES)}"
            )
        count += len(p) if isinstance(p, _SeedRange) else 1
    if count > MAX_WORLDS:
        raise SceneSpecError(
            f"scene spec names {count:,} worlds, more than the limit of {MAX_WORLDS:,}{_largest_shares(pieces)}"
        )
    items, keys = [], set()
    for p in pieces:
        if isinstance(p, _SeedRange):
            new = (WorldItem(family=p.family, seed=s, origin=p.origin) for s in range(p.first, p.last + 1))
        else:
            new = [p]
        for it in new:
            if it.key not in keys:
                keys.add(it.key)
                items.append(it)
    if not items:
        raise SceneSpecError(f"scene spec {_show(spec)!r} names no worlds")
    if check_files:
        for it in items:
            if not it.builtin:
                check_world_file(it, actor_radius)
    return items


def _show(spec):
    return spec if isinstance(spec, str) else ",".join(map(str, spec))


def _split(spec):
    if isinstance(spec, (str, os.PathLike)):
        parts = [str(spec)]
    else:
        parts = [str(s) for s in spec]
    out = []
    for part in parts:
        out += [t.strip() for t in part.split(",")]
    return out


def _flatten(spec, base, depth, seen_lists):
    """Seed ranges and file items, in order (not yet expanded or de-duplicated)."""
    from navi_nb.world.scenes import SCENES, SEEDED_FAMILIES

    tokens = _split(spec)
    out = []
    family = None  # the family bare seeds continue
    for tok in tokens:
        if not tok:
            raise SceneSpecError(f"scene spec {_show(spec)!r} has an empty item (two commas, or a comma at an end)")
        m = _FAMILY_ITEM.match(tok)
        bare = _SEEDS.match(tok)
        if bare and family is not None:
            out.append(_seed_range(family, tok, tok))
            continue
        if m and (m.group(1) in SCENES or (m.group(2) is not None and not _looks_like_path(tok))):
            family = m.group(1)
            if m.group(2) is None:
                out.append(_SeedRange(family, 0, 0, tok))
                continue
            if family in SCENES and family not in SEEDED_FAMILIES and m.group(2).strip() != "0":
                raise SceneSpecError(
                    f"scene spec item {tok!r}: {family} has a single layout (seed 0); "
                    f"seeded families are {', '.join(SEEDED_FAMILIES)}"
                )
            out.append(_seed_range(family, m.group(2).strip(), tok))
            continue
        if bare:
            raise SceneSpecError(f"scene spec item {tok!r}: seeds need a family first, e.g. house:{tok}")
        family = None
        out += _path_items(tok, base, depth, seen_lists)
    return out


def _looks_like_path(tok):
    return os.sep in tok or "/" in tok or tok.lower().endswith((WORLD_SUFFIX, ".txt", *MESH_SUFFIXES))


def _seed_range(family, text, origin):
    m = _SEEDS.match(text)
    if not m:
        raise SceneSpecError(f"scene spec item {origin!r}: seeds must be N or A-B (integers >= 0), got {text!r}")
    first = int(m.group(1))
    last = int(m.group(2)) if m.group(2) is not None else first
    if last < first:
        raise SceneSpecError(f"scene spec item {origin!r}: empty range {first}-{last} (the first seed is larger)")
    if last > MAX_SEED:
        raise SceneSpecError(f"scene spec item {origin!r}: seed {last} is larger than {MAX_SEED}")
    return _SeedRange(family, first, last, origin)


def _largest_shares(pieces) -> str:
    """The part of the count's message that says where most worlds come from: the list file or spec item that
    names the most (a list file of one-seed lines counts as one source), and the family with the most seeds."""
    sources, families = {}, {}
    for p in pieces:
        n = len(p) if isinstance(p, _SeedRange) else 1
        key = f"list file {p.listed_in}" if getattr(p, "listed_in", "") else f"item {p.origin!r}"
        sources[key] = sources.get(key, 0) + n
        if isinstance(p, _SeedRange):
            families[p.family] = families.get(p.family, 0) + n
    source = max(sources, key=sources.get)
    text = f"; the most from {source} ({sources[source]:,} worlds)"
    if families:
        family = max(families, key=families.get)
        text += f"; the family with the most seeds is {family} ({families[family]:,})"
    return text


def _path_items(tok, base, depth, seen_lists):
    is_list = tok.startswith("@")
    raw = tok[1:] if is_list else tok
    if not raw:
        raise SceneSpecError(f"scene spec item {tok!r}: '@' needs a list file")
    path = Path(os.path.expanduser(raw))
    if not path.is_absolute():
        path = base / path
    if is_list or raw.endswith(".txt"):
        return _list_file(tok, path, depth, seen_lists)
    if _GLOB_CHARS & set(raw):
        matches = sorted(
            p for p in glob.glob(str(path)) if (p.endswith(WORLD_SUFFIX) or is_mesh_path(p)) and os.path.isfile(p)
        )
        if not matches:
            raise SceneSpecError(f"scene spec item {tok!r}: no .gmdag or mesh file matches")
        return [_file_item(Path(p), tok) for p in matches]
    if path.is_dir():
        matches = sorted(p for p in path.iterdir() if p.suffix == ".gmdag" and p.is_file())
        if not matches:
            raise SceneSpecError(f"scene spec item {tok!r}: folder {path} holds no .gmdag file")
        return [_file_item(p, tok) for p in matches]
    if not path.exists():
        raise SceneSpecError(f"scene spec item {tok!r}: {path} does not exist (nor is it a built-in family)")
    if path.suffix != WORLD_SUFFIX and not is_mesh_path(path):
        raise SceneSpecError(
            f"scene spec item {tok!r}: {path} is not a .gmdag file, mesh file ({' '.join(MESH_SUFFIXES)}), "
            "folder, glob or .txt list"
        )
    return [_file_item(path, tok)]


def _file_item(path, origin):
    return WorldItem(path=Path(os.path.realpath(path)), origin=origin, suffix=Path(path).suffix)


def _list_file(tok, path, depth, seen_lists):
    real = os.path.realpath(path)
    if real in seen_lists:
        raise SceneSpecError(f"scene spec item {tok!r}: list file {path} includes itself")
    if depth >= MAX_LIST_DEPTH:
        raise SceneSpecError(f"scene spec item {tok!r}: list files nested deeper than {MAX_LIST_DEPTH}")
    from navi_nb.files import read_regular

    try:
        text = read_regular(path, "list file", MAX_LIST_BYTES).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or exc
        raise SceneSpecError(f"scene spec item {tok!r}: cannot read list file {path} ({why})") from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            out += _flatten(line, Path(real).parent, depth + 1, seen_lists + (real,))
        except SceneSpecError as exc:
            raise SceneSpecError(f"{path}:{n}: {exc}") from None
    if not out:
        raise SceneSpecError(f"scene spec item {tok!r}: list file {path} names no worlds")
    # seeds named here count as this file's (a nested list file's keep theirs)
    return [replace(p, listed_in=str(path)) if isinstance(p, _SeedRange) and not p.listed_in else p for p in out]


# --------------------------------------------------------------------------
# checks before loading
# --------------------------------------------------------------------------


def check_world_file(item: WorldItem, actor_radius=0.2):
    """Header, size and room checks of a file item; returns its World header (nodes memory-mapped).

    A mesh item is only checked to be a readable file here (returns None): its room is checked on the
    compiled world (``check_room``)."""
    from navi_nb.files import open_regular
    from navi_nb.world.gmdag import load_world

    if item.mesh:
        try:
            with open_regular(item.path, "mesh file") as fh:
                fh.read(1)
        except OSError as exc:
            raise SceneSpecError(
                f"scene spec item {item.origin!r}: cannot read mesh file {item.path} ({exc.strerror or exc})"
            ) from None
        return None
    try:
        world = load_world(item.path, mmap=True, validate=False)
    except NaviError as exc:
        raise SceneSpecError(f"scene spec item {item.origin!r}: {exc}") from None
    return check_room(world, item, actor_radius)


def check_room(world, item: WorldItem, actor_radius=0.2):
    """Raise unless an actor of `actor_radius` fits in `world` (the world of `item`); returns the world."""
    extent = world.extent
    side = extent
    roi = world.sidecar.get("bounds_of_interest")
    try:
        if roi is not None:
            side = min(extent, min(float(hi) - float(lo) for lo, hi in zip(roi[0], roi[1])))
    except (TypeError, ValueError, IndexError):
        raise SceneSpecError(
            f"scene spec item {item.origin!r}: {item.path}: bad bounds_of_interest in its sidecar"
        ) from None
    need = 2.0 * actor_radius + 2.0 * world.voxel_size
    if side <= need:
        raise SceneSpecError(
            f"scene spec item {item.origin!r}: {'the world compiled from' if item.mesh else 'world'} {item.path} "
            "is too small to spawn in "
            f"({side:.3g} m across, an actor of radius {actor_radius} m needs more than "
            f"{need:.3g} m)"
        )
    return world


def estimated_bytes(item: WorldItem, resolution: int) -> int:
    """Bytes one world is expected to take in memory: a world file's size, or the built-in estimate for a
    built-in or a mesh at `resolution` (a compiled world's size grows with its surface, not its triangles).
    Raises for a built-in of a large family that cannot compile at `resolution` (4x it above 8192)."""
    if item.builtin:
        from navi_nb.world.scenes import CUBE_SIDE, resolution_scale

        scale = resolution_scale(item.family)
        if resolution * scale > MAX_RESOLUTION:
            raise SceneSpecError(
                f"scene spec item {item.origin!r}: {item.family} compiles in a {CUBE_SIDE * scale:g} m cube at "
                f"{scale}x the resolution: resolution {resolution} gives {resolution * scale}, above "
                f"{MAX_RESOLUTION} (use a resolution up to {MAX_RESOLUTION // scale})"
            )
    if item.builtin or item.mesh:
        return int(BUILTIN_BYTES_AT_128 * (resolution / 128.0) ** 2) + WORLD_OVERHEAD_BYTES
    try:
        return os.path.getsize(item.path) + WORLD_OVERHEAD_BYTES
    except OSError:
        raise SceneSpecError(f"scene spec item {item.origin!r}: cannot read {item.path}") from None


def check_ram(items, resolution, available=None) -> int:
    """Raise unless the worlds' estimated bytes fit in RAM_FRACTION of the available RAM
    (``navi_nb.ram.check_fits``, the one RAM check). Names the spec item that contributes most.
    Returns the estimate (bytes)."""
    from navi_nb.ram import check_fits, size_text

    by_origin = {}
    for it in items:
        by_origin[it.origin] = by_origin.get(it.origin, 0) + estimated_bytes(it, resolution)
    total = sum(by_origin.values())
    worst = max(by_origin, key=by_origin.get)
    check_fits(
        total,
        f"scene spec item {worst!r}: {len(items):,} worlds at resolution {resolution}",
        fraction=RAM_FRACTION,
        available=available,
        detail=f" ({size_text(by_origin[worst])} from this item)",
        error=SceneSpecError,
    )
    return total
