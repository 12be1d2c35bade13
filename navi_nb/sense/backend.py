"""Which backend runs the tracer: ``cpu`` (Numba threads), ``cuda`` or ``auto``.

``cuda`` needs three things: CuPy (the ``cuda`` extra: ``pip install -e ".[cuda]"``), a working
NVIDIA driver that Numba can talk to, and at least one device. Asking for it
without one of them raises :class:`BackendError` naming the missing piece.
Under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) ``cuda`` runs the
same kernels in Python threads (slow; for tests) and CuPy is optional.
``auto`` picks ``cuda`` when a real device is usable, else ``cpu``.
"""

from __future__ import annotations

from navi_nb.errors import NaviError

BACKENDS = ("cpu", "cuda", "auto")


class BackendError(NaviError, RuntimeError):
    """The requested backend is unknown or not usable on this machine."""


def simulator_enabled() -> bool:
    """True when Numba runs CUDA kernels in its simulator."""
    from numba import config

    return bool(getattr(config, "ENABLE_CUDASIM", 0))


def cuda_problem():
    """None when the ``cuda`` backend is usable, else a sentence saying what is missing."""
    if simulator_enabled():
        return None
    try:
        import cupy  # noqa: F401
    except Exception as exc:  # ImportError, or a CuPy that fails to load its libraries
        return (
            f"CuPy is not installed or does not load ({type(exc).__name__}: {exc}); "
            'install the cuda extra: pip install -e ".[cuda]"'
        )
    try:
        from numba import cuda
    except Exception as exc:
        return f"numba.cuda does not import ({exc})"
    try:
        driver_ok = cuda.is_available()
    except Exception as exc:
        return f"the CUDA driver is not usable ({exc})"
    if not driver_ok:
        try:
            cuda.detect()
        except Exception:
            pass
        return "no usable CUDA driver or device was found by numba.cuda (is the NVIDIA driver installed?)"
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"CuPy cannot reach the CUDA driver ({exc})"
    if count < 1:
        return "no CUDA device is visible (CUDA_VISIBLE_DEVICES?)"
    return None


def resolve_backend(name="cpu") -> str:
    """``"cpu"`` or ``"cuda"`` for a requested backend name; raises BackendError."""
    if not isinstance(name, str) or name.lower() not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}: choose one of {', '.join(BACKENDS)}")
    name = name.lower()
    if name == "cpu":
        return "cpu"
    if name == "auto":
        if simulator_enabled():
            return "cpu"  # the simulator is for tests, never an automatic choice
        return "cuda" if cuda_problem() is None else "cpu"
    problem = cuda_problem()
    if problem is not None:
        raise BackendError(f"backend 'cuda' is not usable: {problem}")
    return "cuda"
