"""Keep Numba's on-disk cache true to the package's sources.

Numba keys a cached kernel on its own source file only. The tracer kernel
(``sense/tracer.py``) inlines functions from ``sense/trace_math.py`` and
``world/field.py``, the learning kernels inline ``learn/blas.py`` and
``learn/mlp.py``, and so on: an edit to one of those (or a ``git pull`` into
an editable install) left the old compiled kernel in use, silently. Here, at ``import navi_nb``, a hash of
every source file that defines or imports Numba code is compared with a
stamp kept beside the cache; when it differs, every cached navi_nb kernel is
removed (they recompile on first use) and the stamp is rewritten.

The cost when nothing changed: reading and hashing those files, a few
milliseconds. Anything unexpected (an unwritable cache, a Numba whose cache
internals differ) leaves the cache as it is: this is a safety net, never a
reason to fail an import.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from navi_nb.files import read_regular

PACKAGE_DIR = Path(__file__).resolve().parent
STAMP_NAME = "navi_nb_sources.stamp"
CACHE_SUFFIXES = (".nbi", ".nbc")
JIT_MARK = re.compile(r"\bnjit\b|\bcuda\.jit\b|@jit\b|\bintrinsic\b|\boverload\b")
"""What makes a source file count: it defines compiled functions (files that
only call Numba's runtime API, such as the benchmarks, do not)."""


def numba_sources(root: Path = PACKAGE_DIR) -> list[Path]:
    """The package's .py files that define Numba-compiled functions, sorted."""
    out = []
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if path.name != "jit_cache.py" and JIT_MARK.search(text):
            out.append(path)
    return out


def sources_hash(paths, root: Path = PACKAGE_DIR) -> str:
    """SHA-256 over the files' paths (relative to ``root``) and contents."""
    h = hashlib.sha256()
    for path in paths:
        h.update(str(path.relative_to(root)).encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def cache_dir_for(path: Path):
    """The folder Numba caches ``path``'s kernels in (its own locator rules), or None."""
    from numba.core import caching

    namespace = {}
    exec(compile("def _probe():\n    pass\n", str(path), "exec"), namespace)  # a function "from" that file
    impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # renamed across versions
    for cls in impl._locator_classes:
        locator = cls.from_function(namespace["_probe"], str(path))
        if locator is not None:
            return Path(locator.get_cache_path())
    return None


def remove_cached_kernels(paths) -> int:
    """Delete the Numba cache files of the kernels defined in ``paths``; returns how many."""
    removed = 0
    for path in paths:
        folder = cache_dir_for(path)
        if folder is None or not folder.is_dir():
            continue
        prefix = path.stem + "."
        for entry in folder.iterdir():
            if entry.name.startswith(prefix) and entry.suffix in CACHE_SUFFIXES:
                try:
                    entry.unlink()
                    removed += 1
                except OSError:
                    pass
    return removed


def refresh(root: Path = PACKAGE_DIR) -> bool:
    """Drop every cached navi_nb kernel when the Numba sources changed since the
    stamp was written. Returns True when it dropped them (or found no stamp)."""
    if os.environ.get("NUMBA_DISABLE_CACHE", "0") not in ("", "0"):
        return False
    try:
        paths = numba_sources(root)
        digest = sources_hash(paths, root)
        in_tree = root / "__pycache__"
        if not os.environ.get("NUMBA_CACHE_DIR") and in_tree.is_dir() and os.access(in_tree, os.W_OK):
            folder = in_tree  # Numba's usual place: known without importing Numba
        else:
            folder = cache_dir_for(root / "__init__.py")
        if folder is None:
            return False
        stamp = folder / STAMP_NAME
        try:
            if read_regular(stamp, "kernel stamp", 4096).decode("utf-8", "replace").strip() == digest:
                return False
        except OSError:
            pass
        remove_cached_kernels(paths)
        tmp = stamp.with_name(f"{STAMP_NAME}.{os.getpid()}.tmp")
        tmp.write_text(digest + "\n")
        os.replace(tmp, stamp)
        return True
    except Exception:  # never fail an import over the cache
        return False


def cold_sources(modules) -> list[str]:
    """The modules (dotted names under ``navi_nb``) whose kernels Numba has no cached copy of: their first
    use compiles them. A module counts as cached when its cache folder holds an index (``.nbi``) for it;
    with caching disabled, every module is cold. Reads folders only: nothing is imported or compiled."""
    if os.environ.get("NUMBA_DISABLE_CACHE", "0") not in ("", "0"):
        return list(modules)
    cold = []
    for name in modules:
        path = PACKAGE_DIR.joinpath(*name.split(".")[1:]).with_suffix(".py")
        try:
            folder = cache_dir_for(path)
            cached = (
                folder is not None
                and folder.is_dir()
                and any(entry.name.startswith(path.stem + ".") and entry.suffix == ".nbi" for entry in folder.iterdir())
            )
        except Exception:  # an unexpected cache layout: say nothing rather than fail
            cached = True
        if not cached:
            cold.append(name)
    return cold
