"""The ``cache`` fuzz target: the files of the caches a run reads under ``$NAVI_NB_CACHE`` damaged one at a
time, and the run's scene set loaded again from them the way a run loads it.

The bases are a clean cache built once per process in a private temporary folder (``NAVI_NB_CACHE`` set
there only while the cache is built or read, then as it was: the user's cache is never read or written)
for the tiny run's scene set (:data:`SCENES` at :func:`checkpoint.tiny_config`'s resolution): its world
cache entries (``worlds/FAMILY-gG-cC/rRES/SEED.gmdag`` and the sidecar ``SEED.gmdag.json`` led by its
``entry_digest``), their spawn pools (``spawn/KEY.npz``) and the set's layout file
(``layouts/KEY.layout``), and the *clean record*: what loading them gives, every world's ``world_digest``,
every spawn sampler's pool (its cells, kept spawn points, centres) and the packed layout arrays.

A case is a pure function of ``(seed, index)``: its file kind is ``index % 4`` (:data:`KINDS`: a world's
node file, its sidecar, a spawn pool, the layout file), its own generator picks which file of that kind
and one named mutator that knows the format (:data:`MUTATORS`), and the mutated file is put into a
scratch copy of the clean cache (the other files hard-linked: every writer of these caches replaces a file
by rename, never writes into one; the copy is kept between cases and put back after each). The set is
then loaded as a run loads it: ``runs.load_scene_set`` (``world_cache.load_worlds``, then
``WorldSet.map_layouts``) and each world's spawn sampler (``worlds.world_spawner``, what ``NavEnv``
builds), and what loaded is compared with the clean record:

- equal: ``ok`` (the damage was found and the file rebuilt, or it changed nothing a run reads);
- different: ``wrong``, a failure, whether or not a rebuild was reported (a rebuild compiles, decodes or
  queries exactly what the clean cache holds, so a rebuilt file loads equal);
- a one-line NaviError: ``refused``, a failure (the cache is writable, so a damaged file is rebuilt, never
  refused), but for a folder in place of a world cache file (:data:`REFUSED_BY_DESIGN`), which is
  ``rejected``: the cache does not delete a folder it did not make, it names it in one line;
- anything else as the one classifier says (a traceback, a hang, a crash are failures).

Equal loaded content means equal policy bits: training is deterministic given its configuration and the
loaded worlds, spawn pools and layout, which are all it reads from these caches
(``tests/test_fuzz_cache.py`` trains a tiny run over a damaged-and-recovered cache and over the clean one
and compares the policy's bits).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from navi_nb.fuzz import checkpoint
from navi_nb.fuzz.cases import Case, Target, bases_once, case_rng
from navi_nb.fuzz.outcomes import Refused, WrongAnswer

KINDS = ("world", "sidecar", "pool", "layout")
SCENES = "box,pillars"  # two small built-in worlds: the smallest set with two entries, pools of each
OTHER_SCENES = "box"  # another set, whose layout file a layout case may be given instead
N_FILES = {"world": 2, "sidecar": 2, "pool": 2, "layout": 1}  # files of each kind in the clean cache
SPECIALS = ("fifo", "directory", "dev-zero", "other-file", "dangling", "missing")
REFUSED_BY_DESIGN = {("world", "directory"), ("sidecar", "directory")}
"""(kind, special) of a case whose one-line refusal is the documented end (see the module)."""


@contextlib.contextmanager
def cache_folder(path):
    """``NAVI_NB_CACHE`` set to ``path`` for the block, then as it was (unset if it was unset)."""
    old = os.environ.get("NAVI_NB_CACHE")
    os.environ["NAVI_NB_CACHE"] = str(path)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("NAVI_NB_CACHE", None)
        else:
            os.environ["NAVI_NB_CACHE"] = old


# --------------------------------------------------------------------------
# what a run reads from the caches
# --------------------------------------------------------------------------


def load_from_caches(items, resolution, env_cfg) -> dict:
    """The set ``items`` loaded from the caches under ``$NAVI_NB_CACHE`` as a run loads it (building what is
    missing or damaged): ``{"worlds": [world_digest, ...], "pools": [(reach, spawn_points, pool), ...],
    "layout": the packed arrays, "pool_files": [...], "layout_file": ...}``."""
    from navi_nb.env.pool_file import default_pool_dir
    from navi_nb.env.worlds import contact_margin, world_spawner, world_voxel
    from navi_nb.train.runs import load_scene_set
    from navi_nb.world.gmdag import world_digest

    world_set = load_scene_set(items, resolution)
    pool_dir = default_pool_dir()
    pools, pool_files = [], []
    for w, world in enumerate(world_set.worlds):
        voxel = world_voxel(world)
        spawner = world_spawner(world_set, w, env_cfg, voxel, contact_margin(env_cfg, voxel), pool_dir)
        pools.append((spawner.reach, spawner.spawn_points, spawner.pool))
        pool_files.append(spawner.cache_path)
    return {
        "worlds": [world_digest(w) for w in world_set.worlds],
        "pools": pools,
        "layout": world_set.packed.arrays,
        "pool_files": pool_files,
        "layout_file": world_set.packed.mapped,
    }


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def differences(clean, loaded) -> list:
    """What a run reads that ``loaded`` holds otherwise than ``clean`` (names; empty when equal, bit for bit)."""
    out = [f"world {w}" for w, (a, b) in enumerate(zip(clean["worlds"], loaded["worlds"])) if a != b]
    if len(clean["worlds"]) != len(loaded["worlds"]):
        out.append("the number of worlds")
    for w, (a, b) in enumerate(zip(clean["pools"], loaded["pools"])):
        out += [f"world {w}'s spawn {what}" for what, x, y in zip(("cells", "points", "pool"), a, b) if not _same(x, y)]
    names = ("child", "leaf_dist", "leaf_sem", "top_code", "top_level", "iparams", "fparams")
    out += [f"layout {n}" for n, a, b in zip(names, clean["layout"], loaded["layout"]) if not _same(a, b)]
    return out


# --------------------------------------------------------------------------
# the clean cache
# --------------------------------------------------------------------------


@dataclass
class CacheBases:
    """A clean cache and what loading it gives; made once per process (:func:`cache_bases`)."""

    root: Path  # the process's private folder: clean/ (the cache), other/ (another set's layout)
    items: list
    resolution: int
    env_cfg: object  # the run's EnvConfig (the spawn samplers' settings)
    files: dict = field(default_factory=dict)  # kind -> [path relative to the cache, ...], in world order
    originals: dict = field(default_factory=dict)  # relative path -> bytes of the clean file
    stats: dict = field(default_factory=dict)  # relative path -> (size, mtime_ns, inode) of the clean file
    folders: list = field(default_factory=list)  # the cache's folders, relative, parents first
    other_layout: str = ""  # another set's layout file, relative (copied into every scratch cache)
    clean: dict = field(default_factory=dict)  # load_from_caches over the clean cache

    @property
    def cache(self) -> Path:
        return self.root / "clean"

    def check_clean(self):
        """Raise if a clean file changed (a loader wrote into a file instead of replacing it: through the
        scratch copy's hard link it would have damaged the base of every later case)."""
        for rel, stat in self.stats.items():
            st = os.stat(self.cache / rel)
            if (st.st_size, st.st_mtime_ns, st.st_ino) != stat:
                raise WrongAnswer(f"a loader wrote into the cache file {rel} in place (its hard link changed)")


def build_bases(root) -> CacheBases:
    """Build the clean cache of :data:`SCENES` in ``root/clean`` and record what loading it gives."""
    from navi_nb.env.config import EnvConfig
    from navi_nb.train.runs import resolve_scenes
    from navi_nb.world.world_cache import entry_path, load_worlds
    from navi_nb.world.world_set import WorldSet

    root = Path(root)
    cfg = checkpoint.tiny_config(root, SCENES)
    items = resolve_scenes(SCENES, cfg)
    bases = CacheBases(root, items, cfg.resolution, EnvConfig.from_kwargs(**cfg.env))
    with cache_folder(root / "other"):  # another set's layout, for the layout cases that swap files
        other = load_worlds(resolve_scenes(OTHER_SCENES, cfg), cfg.resolution)
        other_layout = WorldSet(other).map_layouts().mapped
    with cache_folder(bases.cache):
        load_worlds(items, cfg.resolution)  # compiled here, in this process (a run would use its cores)
        load_from_caches(items, cfg.resolution, bases.env_cfg)  # the pools and the layout written
        bases.clean = load_from_caches(items, cfg.resolution, bases.env_cfg)  # all read from the files
        worlds = [entry_path(bases.cache / "worlds", it.family, it.seed, cfg.resolution) for it in items]
    bases.clean["layout"] = tuple(np.array(a) for a in bases.clean["layout"])  # copies: the maps close
    bases.files = {
        "world": [p.relative_to(bases.cache) for p in worlds],
        "sidecar": [Path(f"{p.relative_to(bases.cache)}.json") for p in worlds],
        "pool": [Path(p).relative_to(bases.cache) for p in bases.clean["pool_files"]],
        "layout": [Path(bases.clean["layout_file"]).relative_to(bases.cache)],
    }
    bases.other_layout = f"layouts/{Path(other_layout).name}"
    shutil.copyfile(other_layout, bases.cache / bases.other_layout)
    for folder, dirs, names in os.walk(bases.cache):
        rel = Path(folder).relative_to(bases.cache)
        bases.folders += [rel / d for d in sorted(dirs)]
        for name in names:
            data = (bases.cache / rel / name).read_bytes()
            bases.originals[rel / name] = data
            st = os.stat(bases.cache / rel / name)
            bases.stats[rel / name] = (st.st_size, st.st_mtime_ns, st.st_ino)
    listed = {p for paths in bases.files.values() for p in paths} | {Path(bases.other_layout)}
    if set(bases.originals) != listed or {k: len(v) for k, v in bases.files.items()} != N_FILES:
        raise RuntimeError(f"the clean cache holds other files than expected: {sorted(map(str, bases.originals))}")
    return bases


_BASES = {}  # the process's CacheBases, made once


def cache_bases() -> CacheBases:
    """The process's clean cache (built the first time, in a temporary folder removed when the process ends)."""
    return bases_once(_BASES, "navi_nb_fuzz_cache_", build_bases)


# --------------------------------------------------------------------------
# mutators: (rng, raw bytes, the other file of the kind's bytes) -> bytes of the new file
# --------------------------------------------------------------------------


def m_bit_flips(rng, raw, other):
    out = bytearray(raw)
    for _ in range(int(rng.integers(1, 9))):
        out[int(rng.integers(len(out)))] ^= 1 << int(rng.integers(8))
    return bytes(out)


def m_truncate(rng, raw, other):
    return raw[: int(rng.integers(len(raw)))]


def m_extend(rng, raw, other):
    n = int(rng.integers(1, 65))
    return raw + (bytes(n) if rng.random() < 0.5 else rng.integers(0, 256, n, dtype=np.uint8).tobytes())


def m_zero_fill(rng, raw, other):
    """The whole file, or a run of it, zeroed (what a crash before the data reached the disk leaves)."""
    if rng.random() < 0.3:
        return bytes(len(raw))
    a = int(rng.integers(len(raw)))
    b = min(len(raw), a + int(rng.integers(1, 4097)))
    return raw[:a] + bytes(b - a) + raw[b:]


def m_swap(rng, raw, other):
    """The same kind of file of another entry (world, pool) or set (layout) in its place."""
    return other


# ---- world node files (.gmdag): header fields and node words (navi_nb/world/gmdag.py's layout)

_GMDAG_FIELDS = ((4, "<I"), (8, "<I"), (12, "<f"), (16, "<f"), (20, "<f"), (24, "<f"), (28, "<I"))
"""(offset, format) of the header fields after the magic: version, resolution, bmin x y z, voxel size, node count."""


def m_gmdag_header(rng, raw, other):
    out = bytearray(raw)
    off, fmt = _GMDAG_FIELDS[int(rng.integers(len(_GMDAG_FIELDS)))]
    if rng.random() < 0.15:
        out[0:4] = b"GMDX"
    elif fmt == "<I":
        (v,) = struct.unpack_from(fmt, out, off)
        choices = [0, 1, v - 1, v + 1, 2 * v, 0xFFFFFFFF, 16, 64]
        struct.pack_into(fmt, out, off, int(choices[int(rng.integers(len(choices)))]) & 0xFFFFFFFF)
    else:
        (v,) = struct.unpack_from(fmt, out, off)
        choices = [float("nan"), float("inf"), -v, v * 2, v + 1e-3, 0.0, 3.4e38, np.nextafter(np.float32(v), 1e9)]
        struct.pack_into(fmt, out, off, float(choices[int(rng.integers(len(choices)))]))
    return bytes(out)


def m_gmdag_node(rng, raw, other):
    """One node word (8 bytes after the 32-byte header) changed: a bit, a copy of another word, or zero."""
    n = (len(raw) - 32) // 8
    if n <= 0:
        return raw
    out = bytearray(raw)
    k = 32 + 8 * int(rng.integers(n))
    how = int(rng.integers(3))
    if how == 0:
        out[k + int(rng.integers(8))] ^= 1 << int(rng.integers(8))
    elif how == 1:
        j = 32 + 8 * int(rng.integers(n))
        out[k : k + 8] = raw[j : j + 8]
    else:
        out[k : k + 8] = bytes(8)
    return bytes(out)


# ---- sidecars (.gmdag.json): JSON edits under the entry's own digest line


def _sidecar_bytes(side: dict) -> bytes:
    """A sidecar as the world cache writes one (``world_cache._write_entry``): the digest's line first."""
    digest = side.get("entry_digest")
    body = json.dumps({k: v for k, v in side.items() if k != "entry_digest"}, indent=1, sort_keys=True).encode()
    if not isinstance(digest, str):
        return body
    return b'{\n "entry_digest": "' + digest.encode() + b'",\n' + body[2:]


def m_sidecar_edit(rng, raw, other):
    """One value a run reads changed (the ``sample`` key, a spawn point, the bounds of interest, a class
    name, the scene or seed, the compiler's record), the digest's line kept."""
    side = json.loads(raw)
    k = int(rng.integers(8))
    if k == 0:
        side["sample"] = ["corner", "centre", None, 1][int(rng.integers(4))]
    elif k == 1 and side.get("spawn_points"):
        p = side["spawn_points"][int(rng.integers(len(side["spawn_points"])))]
        p[int(rng.integers(3))] += [0.25, -0.25, 1e-7, 100.0][int(rng.integers(4))]
    elif k == 2 and side.get("spawn_points"):
        del side["spawn_points"][int(rng.integers(len(side["spawn_points"])))]
    elif k == 3 and side.get("bounds_of_interest"):
        side["bounds_of_interest"][int(rng.integers(2))][int(rng.integers(3))] += 0.5
    elif k == 4 and side.get("class_names"):
        side["class_names"][int(rng.integers(len(side["class_names"])))] = "wall"
    elif k == 5:
        side["seed"] = int(side.get("seed", 0)) + 1
    elif k == 6:
        side.setdefault("compiler", {})["resolution"] = 64
    else:
        del side[sorted(side)[int(rng.integers(len(side)))]]
    return _sidecar_bytes(side)


def m_sidecar_digest(rng, raw, other):
    """The digest's line damaged: another digest (the other entry's, zeros, one digit changed), none, or
    the same content spaced or ordered otherwise."""
    side = json.loads(raw)
    k = int(rng.integers(5))
    if k == 0:
        side["entry_digest"] = json.loads(other).get("entry_digest")
    elif k == 1:
        side["entry_digest"] = "0" * 64
    elif k == 2:
        d = side["entry_digest"]
        i = int(rng.integers(len(d)))
        side["entry_digest"] = d[:i] + ("0" if d[i] != "0" else "1") + d[i + 1 :]
    elif k == 3:
        del side["entry_digest"]
    else:
        return json.dumps(side, indent=int(rng.integers(0, 3)), sort_keys=True).encode()  # the digest not first
    return _sidecar_bytes(side)


# ---- spawn pools (.npz): zip fields and members, .npy headers (the checkpoint target's npz mutators)

_ZIP_FIELDS = {  # signature -> [(field name, offset, struct format)]
    b"PK\x03\x04": [
        ("version", 4, "<H"),
        ("flags", 6, "<H"),
        ("method", 8, "<H"),
        ("crc", 14, "<I"),
        ("csize", 18, "<I"),
        ("usize", 22, "<I"),
        ("name length", 26, "<H"),
        ("extra length", 28, "<H"),
    ],
    b"PK\x01\x02": [
        ("version", 6, "<H"),
        ("flags", 8, "<H"),
        ("method", 10, "<H"),
        ("crc", 16, "<I"),
        ("csize", 20, "<I"),
        ("usize", 24, "<I"),
        ("name length", 28, "<H"),
        ("extra length", 30, "<H"),
        ("offset", 42, "<I"),
    ],
    b"PK\x05\x06": [("entries", 10, "<H"), ("cd size", 12, "<I"), ("cd offset", 16, "<I"), ("comment", 20, "<H")],
}
_ZIP_VALUES = {
    "version": [0, 20, 45, 63, 99, 0xFFFF],
    "flags": [1, 8, 0x40, 0x800, 0xFFFF],  # encrypted, data descriptor, strong encryption, UTF-8, all
    "method": [0, 1, 8, 9, 12, 14, 93, 99, 0xFFFF],  # stored, shrunk, deflate, deflate64, bzip2, lzma, zstd, AES
}


def m_zip_field(rng, raw, other):
    """One field of a local header, a central-directory entry or the end record set to another value: the
    method, version, flags, CRC, sizes, name and extra lengths, offsets, the entry count."""
    out = bytearray(raw)
    starts = [(k, sig) for sig in _ZIP_FIELDS for k in range(len(out) - 22) if out[k : k + 4] == sig]
    if not starts:
        return raw
    k, sig = starts[int(rng.integers(len(starts)))]
    name, off, fmt = _ZIP_FIELDS[sig][int(rng.integers(len(_ZIP_FIELDS[sig])))]
    if k + off + struct.calcsize(fmt) > len(out):
        return raw
    (v,) = struct.unpack_from(fmt, out, k + off)
    top = 0xFFFF if fmt == "<H" else 0xFFFFFFFF
    choices = _ZIP_VALUES.get(name, [0, 1, v - 1, v + 1, top, int(rng.integers(0, top + 1))])
    struct.pack_into(fmt, out, k + off, int(choices[int(rng.integers(len(choices)))]) & top)
    return bytes(out)


_NPZ_MEMBERS = ("drop_member", "duplicate_member", "rename_member", "truncate_member", "extend_member", "deflate")
_NPY_HEADERS = ("bad_header", "header_field", "header_version")


def _checkpoint_mutator(names, rng, raw):
    name = names[int(rng.integers(len(names)))]
    return checkpoint.MUTATORS[name](rng, checkpoint.read_members(raw), raw)


def m_npz_member(rng, raw, other):
    """A member dropped, duplicated, renamed, truncated or extended, or every member deflated (``checkpoint``)."""
    return _checkpoint_mutator(_NPZ_MEMBERS, rng, raw)


def m_npy_header(rng, raw, other):
    """A member's ``.npy`` header unparsable, of another dtype, order or shape, or another version."""
    return _checkpoint_mutator(_NPY_HEADERS, rng, raw)


def m_npz_values(rng, raw, other):
    """Values of a member changed (a cell more or less, a kept spawn point dropped, the digest's bytes)."""
    return _checkpoint_mutator(("values",), rng, raw)


# ---- the layout file: its JSON header and payload (navi_nb/world/layout_cache.py's layout)

_LAYOUT_DTYPES = ["<i4", "<u4", ">i4", "<f4", "<i8", "<u1", "<i2", "|b1", "<f8"]


def _split_layout(raw):
    n = int.from_bytes(raw[8:16], "little")
    return json.loads(raw[16 : 16 + n]), raw[16 + n :]


def _join_layout(header, payload, magic=b"NAVILAY1"):
    head = json.dumps(header).encode()
    head += b" " * (-(16 + len(head)) % 64)
    return magic + len(head).to_bytes(8, "little") + head + payload


def m_layout_header(rng, raw, other):
    """One header value changed, the payload kept: an array's dtype, shape, offset or name, an array
    dropped, the key, the payload size, the digest, the header length, the magic."""
    header, payload = _split_layout(raw)
    arrays = header["arrays"]
    e = arrays[int(rng.integers(len(arrays)))]
    k = int(rng.integers(10))
    if k == 0:
        e["dtype"] = _LAYOUT_DTYPES[int(rng.integers(len(_LAYOUT_DTYPES)))]
    elif k == 1:
        shape = e["shape"] or [1]
        shape[int(rng.integers(len(shape)))] += [-1, 1, -(10**6), 2**40][int(rng.integers(4))]
        e["shape"] = shape
    elif k == 2:
        e["shape"] = [[], [0], [1, 1] + e["shape"], list(reversed(e["shape"]))][int(rng.integers(4))]
    elif k == 3:
        e["offset"] += [64, -64, 1, 10**9, -(10**9)][int(rng.integers(5))]
    elif k == 4:
        e["name"] = arrays[int(rng.integers(len(arrays)))]["name"]
    elif k == 5:
        arrays.remove(e)
    elif k == 6:
        header["key"] = [None, "", 1, header["key"][::-1]][int(rng.integers(4))]
    elif k == 7:
        header["payload"] = [0, header["payload"] - 64, header["payload"] + 64, "x", -1][int(rng.integers(5))]
    elif k == 8:
        header["digest"] = [None, "0" * 40, header["digest"][::-1]][int(rng.integers(3))]
    else:
        out = bytearray(raw)
        if rng.random() < 0.5:
            out[8:16] = int(rng.integers(0, 1 << 62)).to_bytes(8, "little")  # a header length that lies
        else:
            out[0:8] = b"NAVILAY2"  # another format's magic
        return bytes(out)
    return _join_layout(header, payload)


def m_layout_payload(rng, raw, other):
    """Values of one array changed in the payload (the header, its digest included, kept)."""
    header, payload = _split_layout(raw)
    e = header["arrays"][int(rng.integers(len(header["arrays"])))]
    size = np.dtype(e["dtype"]).itemsize * int(np.prod(e["shape"], dtype=np.int64))
    if size == 0:
        return raw
    out = bytearray(payload)
    for _ in range(int(rng.integers(1, 5))):
        out[e["offset"] + int(rng.integers(size))] ^= 1 << int(rng.integers(8))
    return raw[: len(raw) - len(payload)] + bytes(out)


COMMON = {"bit-flips": m_bit_flips, "truncate": m_truncate, "extend": m_extend, "zero-fill": m_zero_fill}
MUTATORS = {
    "world": {**COMMON, "swap": m_swap, "gmdag-header": m_gmdag_header, "gmdag-node": m_gmdag_node},
    "sidecar": {**COMMON, "swap": m_swap, "sidecar-edit": m_sidecar_edit, "sidecar-digest": m_sidecar_digest},
    "pool": {
        **COMMON,
        "swap": m_swap,
        "zip-field": m_zip_field,
        "npz-member": m_npz_member,
        "npy-header": m_npy_header,
        "npz-values": m_npz_values,
    },
    "layout": {**COMMON, "swap": m_swap, "layout-header": m_layout_header, "layout-payload": m_layout_payload},
}
"""Per file kind, mutator name -> function; beside them every kind has ``special`` (no bytes: a FIFO, a
folder, a link to ``/dev/zero``, to another file or to nothing, or no file, in its place) and the world
and sidecar kinds ``swap-entry`` (both files of the other entry in place of the entry's)."""


def mutator_names(kind) -> list:
    return sorted([*MUTATORS[kind], "special"] + (["swap-entry"] if kind in ("world", "sidecar") else []))


# --------------------------------------------------------------------------
# cases
# --------------------------------------------------------------------------


@dataclass
class CacheCase(Case):
    path: str = ""  # the damaged file, relative to the cache folder
    special: str | None = None  # what is in its place when no bytes are (SPECIALS), else None
    also: dict = field(default_factory=dict)  # other files replaced with it: relative path -> bytes


def cache_label(seed, index) -> tuple:
    """(generator, file number, mutator, file kind) of case ``index``, without building any file."""
    kind = KINDS[index % len(KINDS)]
    rng = case_rng(seed, index)
    base = int(rng.integers(N_FILES[kind]))
    names = mutator_names(kind)
    return rng, base, names[int(rng.integers(len(names)))], kind


def _other(bases, kind, base) -> Path:
    """The file a swap puts in place of file ``base`` of ``kind``: the other entry's, or the other set's layout."""
    if kind == "layout":
        return Path(bases.other_layout)
    return bases.files[kind][1 - base]


def make_cache_case(bases, seed, index) -> CacheCase:
    rng, base, name, kind = cache_label(seed, index)
    rel = bases.files[kind][base]
    raw, other = bases.originals[rel], bases.originals[_other(bases, kind, base)]
    case = CacheCase(index, name, kind, b"", path=str(rel))
    if name == "special":
        case.special = SPECIALS[int(rng.integers(len(SPECIALS)))]
    elif name == "swap-entry":  # the other entry's node file and sidecar, both, under this entry's names
        mine = [bases.files["world"][base], bases.files["sidecar"][base]]
        theirs = [bases.files["world"][1 - base], bases.files["sidecar"][1 - base]]
        case.data = bases.originals[theirs[mine.index(rel)]]
        case.also = {str(m): bases.originals[t] for m, t in zip(mine, theirs) if m != rel}
    else:
        case.data = MUTATORS[kind][name](rng, raw, other)
    return case


def scratch_cache(bases, case) -> Path:
    """The process's scratch copy of the clean cache (``root/scratch``, hard links, made once and put back
    after every case by :func:`restore_scratch`) with the case's damage in it."""
    scratch = bases.root / "scratch"
    if not scratch.exists():
        scratch.mkdir()
        for rel in bases.folders:
            (scratch / rel).mkdir()
        for rel in bases.originals:
            os.link(bases.cache / rel, scratch / rel)
    for rel in (case.path, *case.also):
        os.unlink(scratch / rel)
    for rel, data in case.also.items():
        (scratch / rel).write_bytes(data)
    target = scratch / case.path
    if case.special is None:
        target.write_bytes(case.data)
    elif case.special == "fifo":
        os.mkfifo(target)
    elif case.special == "directory":
        target.mkdir()
        (target / "kept").write_bytes(b"a file of the user's")
    elif case.special == "dev-zero":
        target.symlink_to("/dev/zero")
    elif case.special == "other-file":
        target.symlink_to(scratch / _other(bases, case.mode, bases.files[case.mode].index(Path(case.path))))
    elif case.special == "dangling":
        target.symlink_to(scratch / "no-such-file")
    # "missing": no file at all
    return scratch


def restore_scratch(bases):
    """Put the scratch cache back as the clean one: whatever a case left in it that is not a clean file's
    hard link (the damage, a rebuilt file, a FIFO, a folder, a link) is removed and the clean file linked in
    again. Cheaper than a new copy: a case changes one or two files."""
    scratch = bases.root / "scratch"
    try:
        for rel in (Path("."), *bases.folders):
            with os.scandir(scratch / rel) as entries:
                for e in entries:
                    r = rel / e.name
                    if e.is_dir(follow_symlinks=False):
                        if r not in bases.folders:
                            shutil.rmtree(e.path)
                    elif r not in bases.stats or e.inode() != bases.stats[r][2]:
                        os.unlink(e.path)
        for rel in bases.stats:
            if not os.path.lexists(scratch / rel):
                os.link(bases.cache / rel, scratch / rel)
    except OSError:  # start the next case from a new copy
        shutil.rmtree(scratch, ignore_errors=True)
        raise


def run_cache_case(case: CacheCase, folder, rng, bases):
    from navi_nb.errors import NaviError

    try:
        scratch = scratch_cache(bases, case)
        # stderr kept from the worker's terminal: the world cache reports each rebuilt entry there
        with cache_folder(scratch), contextlib.redirect_stderr(io.StringIO()):
            try:
                loaded = load_from_caches(bases.items, bases.resolution, bases.env_cfg)
            except NaviError as exc:
                if (case.mode, case.special) in REFUSED_BY_DESIGN or "\n" in str(exc):
                    raise
                raise Refused(f"{type(exc).__name__}: {exc}") from None
        wrong = differences(bases.clean, loaded)
        if wrong:
            raise WrongAnswer(f"loaded {', '.join(wrong)} unlike the clean cache")
    finally:
        restore_scratch(bases)
        bases.check_clean()


TARGET = Target(cache_bases, make_cache_case, run_cache_case, cache_label, "cache")
