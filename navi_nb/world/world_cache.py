"""The compile cache of built-in worlds and mesh files: compiled once, loaded many times.

Layout under the cache folder (``default_cache_dir()``: ``$NAVI_NB_CACHE/worlds``,
else ``$XDG_CACHE_HOME/navi_nb/worlds``, else ``~/.cache/navi_nb/worlds``)::

    FAMILY-gG-cC/rRES/SEED.gmdag        the compiled world
    FAMILY-gG-cC/rRES/SEED.gmdag.json   its sidecar (spawn points, classes, bounds)

    mesh-cC-fF-vV/rRES-mM/SHA-EXT.gmdag  a mesh file of a spec, compiled (+ its sidecar)

G is the family's generator version (``scenes.GENERATOR_VERSION``) and C the
compiler's (``compiler.COMPILER_VERSION``): changing either starts fresh
folders, so a stale layout is never loaded. A mesh entry is keyed by the
file's content (SHA: the first 32 hex digits of its SHA-256; EXT its suffix,
which picks the reader), the resolution, the compiler's version, the format's
(F: ``gmdag.VERSION``), the mesh entries' own (V: ``MESH_ENTRY_VERSION``, raised
when reading meshes changes) and the compile options (M: the margin in voxels,
``compiler.MARGIN_VOXELS``): the compile is ``compiler.compile_mesh(path,
RES)``, the one ``navi-nb compile MESH --resolution RES`` runs, so the entry
is that command's output bit for bit (but for the sidecar's ``entry_digest``). Only
regular files are read as meshes and entries (``navi_nb.files``): an entry that is not
one (a FIFO, say) is compiled again and replaced, as a damaged one is, but for a folder in an entry
file's place, which is not the cache's to delete: compiling the entry is refused in one line naming it.
Entries are written atomically (sidecar first, then the world, each by rename), so a world file present means
a complete entry, and concurrent compilers of the same entry do not clash.

Integrity: the sidecar's first line holds its ``entry_digest`` key (:func:`entry_digest`), a SHA-256 over
the entry's name (``FOLDER/rRES/FILE``, which holds the family, seed, resolution and versions), the world
file's bytes and the sidecar's bytes but for that line. ``load_worlds`` checks it on every read,
before using anything: an entry whose digest is missing or does not match (a flipped bit, another
entry's files copied into its place, an edited sidecar) is reported on stderr once, naming it, and
compiled again; where the cache folder is read-only it is a one-line :class:`WorldCacheError` naming
the entry instead. The loaded world's sidecar is the file's without the digest key, and a checked entry
is then deep-validated as any world file.

``compile_worlds`` compiles the missing built-in and mesh worlds of a list of
:class:`~navi_nb.world.scene_spec.WorldItem` in ``jobs`` processes (spawned,
each using one Numba thread), with an optional progress bar;
``load_worlds`` compiles what is missing and loads them all (memory-mapped).
Callers choose ``jobs``, normally ``navi_nb.cores.allowed_cores().allowed``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

from navi_nb.errors import NaviError
from navi_nb.world.scene_spec import SceneSpecError, WorldItem, check_ram, check_room, check_world_file

# Raised when reading a mesh file (navi_nb.world.mesh_io) changes what it returns for some file: mesh entries
# then start in fresh folders.
MESH_ENTRY_VERSION = 1
DIGEST_CHARS = 32  # hex digits of the file's SHA-256 in a mesh entry's name
ENTRY_DIGEST_KEY = "entry_digest"  # the sidecar key of an entry's own content digest (entry_digest)
_OLD_ENTRY = "its sidecar holds no entry digest"  # an entry an older navi-nb wrote
_reported = set()  # entries whose damage this process has reported (once each)


class WorldCacheError(NaviError):
    """A cache folder that cannot be used, or a cached world that cannot be built."""


def default_cache_dir() -> Path:
    base = os.environ.get("NAVI_NB_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "navi_nb"
    )
    return Path(base) / "worlds"


def entry_path(cache_dir, family: str, seed: int, resolution: int) -> Path:
    """Where the cache keeps (family, seed) compiled at `resolution`: in ``rRES`` for the resolution its world
    file has (`resolution` times the family's ``scenes.resolution_scale``)."""
    from navi_nb.world.compiler import COMPILER_VERSION
    from navi_nb.world.scenes import GENERATOR_VERSION, resolution_scale

    folder = f"{family}-g{GENERATOR_VERSION[family]}-c{COMPILER_VERSION}"
    return Path(cache_dir) / folder / f"r{int(resolution) * resolution_scale(family)}" / f"{int(seed)}.gmdag"


class CacheEntry(NamedTuple):
    """A built-in world's entry in the cache (``entry_path``'s arguments, read back from the path)."""

    family: str
    seed: int
    resolution: int
    path: Path


_ENTRY_FOLDER = re.compile(r"([a-z]+)-g(\d+)-c(\d+)")
_ENTRY_RES = re.compile(r"r([1-9]\d*)")
_ENTRY_FILE = re.compile(r"(0|[1-9]\d*)\.gmdag")


def builtin_entries(cache_dir, resolution=None) -> list:
    """The built-in worlds' entries under `cache_dir`, the inverse of ``entry_path``: a ``CacheEntry`` for each
    ``FAMILY-gG-cC/rRES/SEED.gmdag`` name of a built-in family, at `resolution` (None: every one), of any
    generator and compiler version (an older version's folder too), in path order. Only names are read:
    whether an entry is a regular file, and what it holds, is the caller's to check; unreadable folders
    are passed over."""
    from navi_nb.world.scenes import SCENES

    root = Path(cache_dir)
    out = []
    for folder in _sorted_names(root):
        m = _ENTRY_FOLDER.fullmatch(folder)
        if m is None or m.group(1) not in SCENES:
            continue
        for res_name in _sorted_names(root / folder):
            r = _ENTRY_RES.fullmatch(res_name)
            if r is None or (resolution is not None and int(r.group(1)) != int(resolution)):
                continue
            for name in _sorted_names(root / folder / res_name):
                e = _ENTRY_FILE.fullmatch(name)
                if e is not None:
                    out.append(
                        CacheEntry(m.group(1), int(e.group(1)), int(r.group(1)), root / folder / res_name / name)
                    )
    return out


def _sorted_names(folder) -> list:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


def file_digest(path) -> str:
    """The SHA-256 (hex) of a regular file's bytes, read in blocks (``navi_nb.files.open_regular``)."""
    import hashlib

    from navi_nb.files import open_regular

    h = hashlib.sha256()
    with open_regular(path, "mesh file") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def mesh_entry_path(cache_dir, mesh_path, resolution: int, digest=None, suffix=None) -> Path:
    """Where the cache keeps the mesh file `mesh_path` compiled at `resolution` (keyed by its content:
    `digest`, its SHA-256, is computed when not given; `suffix`, the one that picks the reader, is
    `mesh_path`'s own when not given)."""
    from navi_nb.world.compiler import COMPILER_VERSION, MARGIN_VOXELS
    from navi_nb.world.gmdag import VERSION

    digest = digest or file_digest(mesh_path)
    ext = (suffix if suffix is not None else Path(mesh_path).suffix).lower().lstrip(".")
    folder = f"mesh-c{COMPILER_VERSION}-f{VERSION}-v{MESH_ENTRY_VERSION}"
    return Path(cache_dir) / folder / f"r{int(resolution)}-m{MARGIN_VOXELS}" / f"{digest[:DIGEST_CHARS]}-{ext}.gmdag"


def _check_resolution(resolution):
    if (
        isinstance(resolution, bool)
        or not isinstance(resolution, int)
        or resolution < 16
        or resolution > 8192
        or resolution & (resolution - 1)
    ):
        raise WorldCacheError(f"resolution must be a power of two in 16..8192, got {resolution!r}")


def _check_jobs(jobs):
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise WorldCacheError(f"jobs must be an integer >= 1, got {jobs!r}")


def compile_one(family: str, seed: int, resolution: int, path) -> tuple:
    """Compile one built-in world into the cache entry `path`, atomically.

    Returns (path, seconds, bytes). Runs in worker processes too.
    """
    from navi_nb.world.compiler import compile_scene

    t0 = time.perf_counter()
    world = compile_scene(family, resolution, seed)
    _write_entry(world, path)
    return str(path), time.perf_counter() - t0, world.nbytes


def compile_mesh_one(mesh_path, resolution: int, path, suffix=None) -> tuple:
    """Compile a mesh file into the cache entry `path`, atomically, exactly as ``navi-nb compile MESH
    --resolution RES`` does (``compiler.compile_mesh``; `suffix` picks the reader, default `mesh_path`'s
    own). Returns (path, seconds, bytes). Runs in worker processes too."""
    from navi_nb.world.compiler import compile_mesh
    from navi_nb.world.mesh_io import read_mesh

    t0 = time.perf_counter()
    world = compile_mesh(read_mesh(mesh_path, suffix), resolution, name=str(mesh_path))
    if not Path(path).name.startswith(file_digest(mesh_path)[:DIGEST_CHARS]):
        raise WorldCacheError(f"mesh file {mesh_path} changed while it was compiled; nothing was written")
    _write_entry(world, path)
    return str(path), time.perf_counter() - t0, world.nbytes


def entry_name(path) -> str:
    """An entry's name in the cache, ``FOLDER/rRES/FILE``: what the entry digest binds it to (another
    seed's, resolution's or version's files copied into its place do not match)."""
    return "/".join(Path(path).parts[-3:])


DIGEST_LINE = b'{\n "entry_digest": "'
"""How an entry's sidecar starts: its first key, on its own line, is the entry's digest (64 hex digits)."""


def entry_digest(world, side_bytes: bytes, name: str) -> str:
    """The SHA-256 (hex) of a cache entry: its name (:func:`entry_name`), the world file's bytes (the
    header and the node words, little-endian) and its sidecar's bytes without the digest's line."""
    h = hashlib.sha256()
    h.update(b"navi-nb world cache entry\0" + name.encode() + b"\0")
    h.update(world.header_bytes())
    h.update(np.ascontiguousarray(world.nodes, dtype="<u8").view(np.uint8))
    h.update(b"\0")
    h.update(side_bytes)
    return h.hexdigest()


def _split_digest(data: bytes):
    """``(digest, the sidecar's bytes without the digest's line)`` of a sidecar file's bytes, or None when
    it does not start with a digest line."""
    end = len(DIGEST_LINE) + 64
    if not data.startswith(DIGEST_LINE) or data[end : end + 3] != b'",\n':
        return None
    return data[len(DIGEST_LINE) : end].decode("ascii", "replace"), b"{\n" + data[end + 3 :]


def _write_entry(world, path):
    """Write a world and its sidecar (led by the entry's :func:`entry_digest`) into the cache: sidecar first,
    then the world, each by rename. A failure (a full disk) is a WorldCacheError naming the entry, not the
    temporary folder it was staged in."""
    import json

    from navi_nb.files import write_atomic
    from navi_nb.world.gmdag import save_world
    from navi_nb.world.sidecar import sidecar_path

    path = Path(path)
    side = {k: v for k, v in world.sidecar.items() if k != ENTRY_DIGEST_KEY}
    side.setdefault("sample", "centre")  # as save_world writes it: never empty, so the text starts "{\n "
    body = json.dumps(side, indent=1, sort_keys=True).encode()
    digest = entry_digest(world, body, entry_name(path))
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=path.parent))
        staged = save_world(world, tmp / path.name, sidecar=False)
        write_atomic(sidecar_path(staged), DIGEST_LINE + digest.encode() + b'",\n' + body[2:])
        try:
            os.replace(sidecar_path(staged), sidecar_path(path))  # the world file last: present means complete
            os.replace(staged, path)
        except OSError as exc:  # a folder in an entry's place, say: not ours to delete
            raise WorldCacheError(
                f"world cache entry {path}: cannot replace {exc.filename2 or path} ({exc.strerror or exc}); "
                "remove what is in its place"
            ) from None
    except OSError as exc:
        raise WorldCacheError(
            f"world cache entry {path}: cannot be written ({exc.strerror or exc}); free space there or point "
            "NAVI_NB_CACHE to another folder"
        ) from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


COMPILE_KERNELS = {
    "builtin": ("navi_nb.world.sdf", "navi_nb.world.compiler", "navi_nb.world.dagshare"),
    "mesh": ("navi_nb.world.mesh_field", "navi_nb.world.compiler", "navi_nb.world.dagshare"),
}
"""The modules whose kernels compiling a built-in scene or a mesh calls first (``jit_cache.cold_sources``)."""


def _kernels_cold(item) -> bool:
    from navi_nb.jit_cache import cold_sources

    return bool(cold_sources(COMPILE_KERNELS["mesh" if item.mesh else "builtin"]))


def _worker_init():
    # one Numba thread per process: the processes already fill the cores
    import numba

    numba.set_num_threads(1)


def _progress_bar(total, label):
    from rich import progress as rp
    from rich.console import Console

    return rp.Progress(
        rp.TextColumn(label),
        rp.BarColumn(),
        rp.MofNCompleteColumn(),
        rp.TimeElapsedColumn(),
        rp.TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=False,
    )


def compile_worlds(items, resolution=128, cache_dir=None, jobs=1, progress=False) -> list:
    """Make sure every built-in and mesh item has a cache entry; returns one path per item.

    items: WorldItems (world file items are passed through as their own paths).
    jobs: worker processes for the missing entries (1: compile in this process).
    progress: True for a rich progress bar on stderr, or a callable(done, total).
    Checks everything (resolution, jobs, RAM, file items; every mesh to compile is read and checked)
    before writing. A mesh that cannot be read or compiled raises SceneSpecError naming its item.
    """
    _check_resolution(resolution)
    _check_jobs(jobs)
    items = list(items)
    for it in items:
        if not isinstance(it, WorldItem):
            raise WorldCacheError(f"compile_worlds needs WorldItems (see scene_spec.parse_spec), got {it!r}")
    check_ram(items, resolution)
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    paths, missing = [], []
    for it in items:
        if it.builtin or it.mesh:
            if it.builtin:
                p = entry_path(cache_dir, it.family, it.seed, resolution)
            else:
                try:
                    p = mesh_entry_path(cache_dir, it.path, resolution, suffix=it.reader_suffix)
                except OSError as exc:
                    raise _item_error(it, f"cannot read mesh file {it.path} ({exc.strerror or exc})") from None
            if not p.is_file():
                missing.append((it, p))
            paths.append(p)
        else:
            paths.append(it.path)
    missing = list({p: (it, p) for it, p in missing}.values())  # each entry once
    if not missing:
        return paths
    _check_meshes([it for it, _ in missing if it.mesh])
    why = _not_writable(cache_dir)
    if why:
        raise WorldCacheError(f"world cache folder {cache_dir} is not writable ({why})")
    _run(missing, resolution, jobs, progress)
    return paths


def _not_writable(folder):
    """Why files cannot be written into `folder` (made when missing), or None when they can."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-"):
            pass
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _item_error(it, why) -> NaviError:
    """The one-line error of an item that cannot be compiled: a mesh's names the spec item and the file."""
    why = str(why)
    if it.mesh:
        where = "" if str(it.path) in why else f"{it.path}: "
        return SceneSpecError(f"scene spec item {it.origin!r}: {where}{why}")
    return WorldCacheError(f"scene {it.label}: {why}")


def _check_meshes(items):
    """Read every mesh to compile (parse errors, empty meshes, indices, non-finite vertices) before anything is
    written; what only the compile finds (every face degenerate) is reported by `_run` the same way."""
    from navi_nb.world.mesh_io import read_mesh

    for it in items:
        try:
            read_mesh(it.path, it.reader_suffix)
        except NaviError as exc:
            raise _item_error(it, exc) from None


def _compile_call(it, resolution, p):
    """The function and arguments that compile one missing entry (picklable for worker processes)."""
    if it.mesh:
        return compile_mesh_one, (str(it.path), resolution, str(p), it.reader_suffix)
    return compile_one, (it.family, it.seed, resolution, str(p))


def _run(missing, resolution, jobs, progress):
    total = len(missing)
    bar = task = None
    if progress is True:
        bar = _progress_bar(total, f"compiling {total} world{'s' * (total != 1)} at {resolution}")
        bar.start()
        task = bar.add_task("", total=total)

    def tick(done):
        if bar is not None:
            bar.update(task, completed=done)
        elif callable(progress):
            progress(done, total)

    try:
        done = 0
        if jobs == 1 or total == 1:
            for it, p in missing:
                fn, args = _compile_call(it, resolution, p)
                try:
                    fn(*args)
                except NaviError as exc:
                    raise _item_error(it, exc) from None
                except MemoryError:
                    raise _item_error(it, _out_of_ram_words(resolution)) from None
                done += 1
                tick(done)
            return
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed
        from concurrent.futures.process import BrokenProcessPool

        ctx = multiprocessing.get_context("spawn")  # safe beside Numba's threads; no forked locks
        calls = [(it, *_compile_call(it, resolution, p)) for it, p in missing]
        # kernels not yet in Numba's cache: the first world alone compiles them, and the processes started
        # for the rest load them (each compiling them too would cost every process about 5 CPU-seconds)
        batches = [calls[:1], calls[1:]] if _kernels_cold(missing[0][0]) else [calls]
        with ProcessPoolExecutor(max_workers=min(jobs, total), mp_context=ctx, initializer=_worker_init) as pool:
            for batch in batches:
                futures = {pool.submit(fn, *args): it for it, fn, args in batch}
                for f in as_completed(futures):
                    try:
                        f.result()
                    except NaviError as exc:
                        raise _item_error(futures[f], exc) from None
                    except BrokenProcessPool:
                        raise _item_error(futures[f], _died_words()) from None
                    except MemoryError:  # raised in the process and passed back, not a process killed
                        raise _item_error(futures[f], _out_of_ram_words(resolution)) from None
                    done += 1
                    tick(done)
    finally:
        if bar is not None:
            bar.stop()


def _out_of_ram_words(resolution: int) -> str:
    """Why a compile that raised MemoryError stopped (the RAM checks before it are lower bounds)."""
    return (
        f"compiling it at resolution {resolution} ran out of RAM (the size checks are lower bounds): a lower "
        "resolution needs less; entries finished so far are kept"
    )


def _died_words() -> str:
    """Why a compile process may have died: RAM, a kill, or (when ``__main__`` is a script file) the script's
    own code, which every spawned process imports and which runs again there unless guarded."""
    import sys

    main = sys.modules.get("__main__")
    script = getattr(main, "__file__", None) if getattr(main, "__spec__", None) is None else None
    if getattr(getattr(main, "main", None), "__module__", "") == "navi_nb.cli":
        script = None  # the `navi-nb` console script: guarded
    why = "out of RAM or killed"
    if script:
        why += f', or {script} starts it unguarded: put its code under `if __name__ == "__main__":`'
    return f"a compile process died ({why}); entries finished so far are kept"


def load_worlds(
    items, resolution=128, cache_dir=None, jobs=1, progress=False, *, mmap=True, validate=True, actor_radius=0.2
) -> list:
    """Worlds for `items`, in order: built-ins and meshes from the cache (compiling what is missing), world
    files as they are.

    mmap: memory-map the files (the nodes stay in the page cache, shared by
    processes). validate: deep-check every world. A cache entry's digest
    (:func:`entry_digest`) is checked whatever `validate` says; an entry that
    fails it or the deep check is reported once and compiled again (in a
    read-only cache: a WorldCacheError naming it). actor_radius: file and mesh
    worlds must have room for an actor this large (metres).
    """
    from navi_nb.world.gmdag import load_world

    items = list(items)
    for it in items:
        if isinstance(it, WorldItem) and not it.builtin:
            check_world_file(it, actor_radius)  # a mesh: readable (its room is checked once compiled)
    paths = compile_worlds(items, resolution, cache_dir, jobs, progress)
    worlds = []
    for it, p in zip(items, paths):
        if not (it.builtin or it.mesh):
            try:
                w = load_world(p, mmap=mmap, validate=validate)
            except NaviError as exc:
                raise SceneSpecError(f"scene spec item {it.origin!r}: {exc}") from None
        else:
            w, why = read_entry(p, mmap=mmap, validate=validate)
            if w is None:
                no = _not_writable(Path(p).parent)
                if no:
                    raise WorldCacheError(
                        f"world cache entry {p}: {why}; the cache is read-only ({no}), so it cannot be compiled "
                        "again: delete the entry where the cache can be written, or use another NAVI_NB_CACHE"
                    )
                _report(p, why)
                fn, args = _compile_call(it, resolution, p)
                try:
                    fn(*args)  # a damaged entry is rebuilt once
                except NaviError as exc:
                    raise _item_error(it, exc) from None
                w, why = read_entry(p, mmap=mmap, validate=validate)
                if w is None:
                    raise WorldCacheError(f"world cache entry {p}: {why} right after compiling it again")
        if it.builtin:
            w.source = f"<scene {it.family}:{it.seed} @ {resolution}>"
        elif it.mesh:
            check_room(w, it, actor_radius)
            w.source = f"<mesh {it.path} @ {resolution}>"
        worlds.append(w)
    return worlds


def read_entry(path, *, mmap=True, validate=True):
    """``(world, None)``: the cache entry at `path` loaded, its :func:`entry_digest` checked (and dropped from
    its sidecar) and, with `validate`, deep-checked; or ``(None, why)`` when it cannot be trusted. The
    sidecar is read once: the bytes checked are the bytes parsed."""
    import json

    from navi_nb.files import read_regular
    from navi_nb.world.gmdag import load_world, validate_world
    from navi_nb.world.sidecar import check_sidecar, sidecar_path

    sp = sidecar_path(path)
    try:
        data = read_regular(sp, "sidecar")  # a FIFO or device in its place is refused, never waited on
        side = check_sidecar(json.loads(data), sp)
        w = load_world(path, mmap=mmap, validate=False, side=side)  # header and sizes
    except (OSError, ValueError, RecursionError) as exc:  # GmdagError is a ValueError
        return None, f"unreadable ({type(exc).__name__}: {exc})".replace("\n", " ")
    split = _split_digest(data)
    has_digest = isinstance(side.pop(ENTRY_DIGEST_KEY, None), str)
    if not has_digest:
        return None, _OLD_ENTRY
    if split is None:  # navi-nb writes the digest as the first line: a sidecar written again by another hand
        return None, "its sidecar was edited (its entry digest is no longer its first line)"
    if split[0] != entry_digest(w, split[1], entry_name(path)):
        return None, "its content does not match its digest (damaged, edited, or another entry's files)"
    if validate:
        try:
            validate_world(w)
        except NaviError as exc:
            return None, f"invalid ({exc})"
    return w, None


def _report(path, why):
    """One line on stderr, once per entry and process, naming a cache entry that is compiled again; entries
    an older navi-nb wrote (no entry digest: not damage) share one line per process, naming the first."""
    key = _OLD_ENTRY if why == _OLD_ENTRY else str(path)
    if key in _reported:
        return
    _reported.add(key)
    if why == _OLD_ENTRY:
        print(
            f"navi-nb: world cache entries without an entry digest (written by an older navi-nb, or edited by "
            f"hand; the first: {path}) are compiled again",
            file=sys.stderr,
            flush=True,
        )
        return
    print(f"navi-nb: world cache entry {path}: {why}; compiling it again", file=sys.stderr, flush=True)
