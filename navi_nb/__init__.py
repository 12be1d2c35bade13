"""navi_nb: one navigation policy, many actors, a compiled 3-D world.

The public API is re-exported here lazily, so ``import navi_nb`` stays quick
and does not compile any Numba kernel until one is used.
"""

import os as _os
import time as _time

# when the interpreter first imported navi_nb (train.runs.process_age: a process that a shell exec'd in
# place of a subshell keeps the subshell's start time)
IMPORTED_AT = _time.time()

# BLAS results change with its thread count and BLAS threads inside Numba
# parallel regions oversubscribe the cores (docs/DETERMINISM.md). The pin
# must happen before NumPy is first imported to cover every BLAS library.
for _var in (
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
):
    _os.environ.setdefault(_var, "1")
# Numba's OpenMP workers spin-wait after each parallel region (GNU default:
# long); on a busy machine the spin steals the core a NumPy call or another
# process needs, and 2 threads collapse below 1. A short spin keeps the quiet-
# machine speed and recovers under load (docs/PERFORMANCE.md, PPO section).
# It changes no result bits; a value set by the user wins.
_os.environ.setdefault("GOMP_SPINCOUNT", "3000")

__version__ = "0.1.0"

# Numba keys a cached kernel on its own file only; drop the cached kernels when
# any Numba source of the package changed (navi_nb/jit_cache.py).
from navi_nb import jit_cache as _jit_cache  # noqa: E402

_jit_cache.refresh()

# name -> module that defines it
_API = {
    "GmdagError": "navi_nb.world.gmdag",
    "World": "navi_nb.world.gmdag",
    "load_world": "navi_nb.world.gmdag",
    "save_world": "navi_nb.world.gmdag",
    "validate_world": "navi_nb.world.gmdag",
    "distance": "navi_nb.world.query",
    "compile_mesh": "navi_nb.world.compiler",
    "compile_scene": "navi_nb.world.compiler",
    "compile_field": "navi_nb.world.compiler",
    "read_mesh": "navi_nb.world.mesh_io",
    "MeshError": "navi_nb.world.mesh_io",
    "SCENES": "navi_nb.world.scenes",
    "get_scene": "navi_nb.world.scenes",
    "Sensor": "navi_nb.sense.sensor",
    "trace": "navi_nb.sense.tracer",
    "Tracer": "navi_nb.sense.tracer",
    "NavEnv": "navi_nb.env.nav_env",
    "allowed_cores": "navi_nb.cores",
    "set_threads": "navi_nb.threads",
}

__all__ = sorted(_API) + ["__version__"]


def __getattr__(name):
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'navi_nb' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
