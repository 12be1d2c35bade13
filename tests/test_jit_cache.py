"""navi_nb.jit_cache: cached kernels are dropped when a Numba source changes.

Numba keys a cached kernel on its own file only; a kernel that inlines code
from another file kept running the old code after that file changed."""

import os
import subprocess
import sys
import textwrap

import numba

from navi_nb import jit_cache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _package(tmp_path, dep_value):
    pkg = tmp_path / "pkg"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "dep.py").write_text(
        textwrap.dedent(f"""
        from numba import njit

        @njit(inline="always")
        def value():
            return {dep_value}
    """)
    )
    (pkg / "kernel.py").write_text(
        textwrap.dedent("""
        from numba import njit
        from pkg.dep import value

        @njit(cache=True)
        def answer():
            return value()
    """)
    )
    (pkg / "plain.py").write_text("X = 1  # no compiled code here\n")
    return pkg


def _answer(tmp_path, refresh):
    code = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r}); sys.path.insert(0, {ROOT!r}); "
        "from pathlib import Path; from navi_nb import jit_cache; "
        + (f"jit_cache.refresh(Path({str(tmp_path / 'pkg')!r})); " if refresh else "")
        + "from pkg.kernel import answer; print(answer())"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "NUMBA_DISABLE_CACHE")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.split()[-1])


def test_a_changed_dependency_recompiles_the_cached_kernel(tmp_path):
    _package(tmp_path, 1)
    assert _answer(tmp_path, refresh=True) == 1
    _package(tmp_path, 2)  # only the inlined helper's file changes
    assert _answer(tmp_path, refresh=False) == 1  # Numba alone: the stale kernel from its cache
    assert _answer(tmp_path, refresh=True) == 2  # with the stamp check: recompiled


def test_refresh_removes_only_cached_kernels_and_writes_a_stamp(tmp_path, monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.delenv("NUMBA_DISABLE_CACHE", raising=False)
    monkeypatch.setattr(numba.config, "CACHE_DIR", "")
    pkg = _package(tmp_path, 1)
    cache = pkg / "__pycache__"
    cache.mkdir()
    stale = [cache / "kernel.answer-5.py311.nbi", cache / "kernel.answer-5.py311.1.nbc"]
    kept = [cache / "kernel.cpython-311.pyc", cache / "plain.other-1.py311.nbi"]
    for f in stale + kept:
        f.write_bytes(b"x")
    sources = [p.name for p in jit_cache.numba_sources(pkg)]
    assert sources == ["dep.py", "kernel.py"]
    assert jit_cache.refresh(pkg) is True  # no stamp yet: drop and stamp
    assert not any(f.exists() for f in stale) and all(f.exists() for f in kept)
    assert (cache / jit_cache.STAMP_NAME).read_text().strip() == jit_cache.sources_hash(
        jit_cache.numba_sources(pkg), pkg
    )
    stale[0].write_bytes(b"x")
    assert jit_cache.refresh(pkg) is False  # nothing changed: the cache stays
    assert stale[0].exists()
    (pkg / "plain.py").write_text("X = 2\n")  # not a Numba source: still nothing to do
    assert jit_cache.refresh(pkg) is False
    (pkg / "dep.py").write_text((pkg / "dep.py").read_text().replace("return 1", "return 3"))
    assert jit_cache.refresh(pkg) is True
    assert not stale[0].exists()


def test_refresh_never_raises(tmp_path, monkeypatch):
    monkeypatch.setattr(jit_cache, "sources_hash", lambda *a: 1 / 0)
    assert jit_cache.refresh(tmp_path) is False


def test_disabled_cache_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_DISABLE_CACHE", "1")
    pkg = _package(tmp_path, 1)
    assert jit_cache.refresh(pkg) is False
    assert not (pkg / "__pycache__" / jit_cache.STAMP_NAME).exists()
