"""The compile cache of built-in worlds: compiled once, loaded many times.

Layout under the cache folder (``default_cache_dir()``: ``$NAVI_NB_CACHE/worlds``,
else ``$XDG_CACHE_HOME/navi_nb/worlds``, else ``~/.cache/navi_nb/worlds``)::

    FAMILY-gG-cC/rRES/SEED.gmdag        the compiled world
    FAMILY-gG-cC/rRES/SEED.gmdag.json   its sidecar (spawn points, classes, bounds)

G is the family's generator version (``scenes.GENERATOR_VERSION``) and C the
compiler's (``compiler.COMPILER_VERSION``): changing either starts fresh
folders, so a stale layout is never loaded. Entries are written atomically
(sidecar first, then the world, each by rename), so a world file present means
a complete entry, and concurrent compilers of the same entry do not clash.

``compile_worlds`` compiles the missing built-in worlds of a list of
:class:`~navi_nb.world.scene_spec.WorldItem` in ``jobs`` processes (spawned,
each using one Numba thread), with an optional progress bar;
``load_worlds`` compiles what is missing and loads them all (memory-mapped).
Callers choose ``jobs``, normally ``navi_nb.parallel.cores.allowed_cores().allowed``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from navi_nb.errors import NaviError
from navi_nb.world.scene_spec import SceneSpecError, WorldItem, check_memory, check_world_file


class WorldCacheError(NaviError):
    """A cache folder that cannot be used, or a cached world that cannot be built."""


def default_cache_dir() -> Path:
    base = os.environ.get("NAVI_NB_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "navi_nb"
    )
    return Path(base) / "worlds"


def entry_path(cache_dir, family: str, seed: int, resolution: int) -> Path:
    """Where the cache keeps (family, seed) compiled at `resolution`."""
    from navi_nb.world.compiler import COMPILER_VERSION
    from navi_nb.world.scenes import GENERATOR_VERSION

    folder = f"{family}-g{GENERATOR_VERSION[family]}-c{COMPILER_VERSION}"
    return Path(cache_dir) / folder / f"r{int(resolution)}" / f"{int(seed)}.gmdag"


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
    from navi_nb.world.gmdag import save_world, sidecar_path

    t0 = time.perf_counter()
    path = Path(path)
    world = compile_scene(family, resolution, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=path.parent))
    try:
        staged = save_world(world, tmp / path.name)
        os.replace(sidecar_path(staged), sidecar_path(path))  # the world file last: present means complete
        os.replace(staged, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(path), time.perf_counter() - t0, world.nbytes


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
    """Make sure every built-in item has a cache entry; returns one path per item.

    items: WorldItems (file items are passed through as their own paths).
    jobs: worker processes for the missing entries (1: compile in this process).
    progress: True for a rich progress bar on stderr, or a callable(done, total).
    Checks everything (resolution, jobs, memory, file items) before writing.
    """
    _check_resolution(resolution)
    _check_jobs(jobs)
    items = list(items)
    for it in items:
        if not isinstance(it, WorldItem):
            raise WorldCacheError(f"compile_worlds needs WorldItems (see scene_spec.parse_spec), got {it!r}")
    check_memory(items, resolution)
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    paths, missing = [], []
    for it in items:
        if it.builtin:
            p = entry_path(cache_dir, it.family, it.seed, resolution)
            if not p.is_file():
                missing.append((it, p))
            paths.append(p)
        else:
            paths.append(it.path)
    missing = list({p: (it, p) for it, p in missing}.values())  # each entry once
    if not missing:
        return paths
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=cache_dir, prefix=".probe-"):
            pass
    except OSError as exc:
        raise WorldCacheError(f"world cache folder {cache_dir} is not writable ({exc.strerror or exc})") from None
    _run(missing, resolution, jobs, progress)
    return paths


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
                compile_one(it.family, it.seed, resolution, p)
                done += 1
                tick(done)
            return
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed
        from concurrent.futures.process import BrokenProcessPool

        ctx = multiprocessing.get_context("spawn")  # safe beside Numba's threads; no forked locks
        with ProcessPoolExecutor(max_workers=min(jobs, total), mp_context=ctx, initializer=_worker_init) as pool:
            futures = {pool.submit(compile_one, it.family, it.seed, resolution, str(p)): it for it, p in missing}
            for f in as_completed(futures):
                try:
                    f.result()
                except NaviError as exc:
                    raise WorldCacheError(f"scene {futures[f].label}: {exc}") from None
                except BrokenProcessPool:
                    raise WorldCacheError(
                        f"scene {futures[f].label}: a compile process died (out of memory?); "
                        "entries finished so far are kept"
                    ) from None
                done += 1
                tick(done)
    finally:
        if bar is not None:
            bar.stop()


def load_worlds(
    items, resolution=128, cache_dir=None, jobs=1, progress=False, *, mmap=True, validate=True, actor_radius=0.2
) -> list:
    """Worlds for `items`, in order: built-ins from the cache (compiling what is missing), files as they are.

    mmap: memory-map the files (the nodes stay in the page cache, shared by
    processes). validate: deep-check every world (cache entries once more
    are cheap to check; a damaged entry is compiled again). actor_radius:
    file worlds must have room for an actor this large (metres).
    """
    from navi_nb.world.gmdag import load_world

    items = list(items)
    for it in items:
        if isinstance(it, WorldItem) and not it.builtin:
            check_world_file(it, actor_radius)
    paths = compile_worlds(items, resolution, cache_dir, jobs, progress)
    worlds = []
    for it, p in zip(items, paths):
        try:
            w = load_world(p, mmap=mmap, validate=validate)
        except NaviError as exc:
            if not it.builtin:
                raise SceneSpecError(f"scene spec item {it.origin!r}: {exc}") from None
            compile_one(it.family, it.seed, resolution, p)  # a damaged entry is rebuilt once
            w = load_world(p, mmap=mmap, validate=validate)
        if it.builtin:
            w.source = f"<scene {it.family}:{it.seed} @ {resolution}>"
        worlds.append(w)
    return worlds
