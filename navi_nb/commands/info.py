"""`navi-nb info`: versions, backends (and why not), cores, Numba threading and caches."""

from __future__ import annotations

import importlib
import os
import platform
import sys

OPTIONAL = ("cupy", "gymnasium", "trimesh", "PIL", "embreex", "tensorboardX", "tensorboard", "torch", "scipy", "tomli")


def add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print the facts as JSON instead of tables")


def _version(mod_name):
    from importlib import metadata
    from importlib.util import find_spec

    if find_spec(mod_name) is None:
        return None
    dist = {"PIL": "pillow"}.get(mod_name, mod_name)
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        try:
            return getattr(importlib.import_module(mod_name), "__version__", "installed")
        except Exception as exc:  # a broken optional install is a fact to report
            return f"broken ({type(exc).__name__})"


def gather() -> dict:
    import numba
    import numpy as np

    import navi_nb

    facts = {
        "versions": {
            "navi_nb": navi_nb.__version__,
            "python": platform.python_version(),
            "numpy": np.__version__,
            "numba": numba.__version__,
            "rich": _version("rich"),
        },
        "optional": {name: _version(name) for name in OPTIONAL},
        "platform": platform.platform(),
        "executable": sys.executable,
    }
    # backends
    backends = {"cpu": {"available": True, "why_not": None}}
    from navi_nb.sense.backend import cuda_problem

    problem = cuda_problem()
    backends["cuda"] = {"available": problem is None, "why_not": problem}
    facts["backends"] = backends
    # cores
    cores = {"os_cpu_count": os.cpu_count()}
    from navi_nb.cores import allowed_cores

    for k, v in allowed_cores().as_dict().items():
        cores[k] = sorted(v) if isinstance(v, (set, frozenset, tuple, list)) else v
    facts["cores"] = cores
    # numba threading and caches
    from numba import config as nconfig

    try:
        from numba.np.ufunc import parallel as _par

        _par._launch_threads()
        layer = numba.threading_layer()
    except Exception as exc:  # no threading layer can be loaded
        layer = f"unavailable ({exc})"
    facts["numba"] = {
        "threading_layer": layer,
        "num_threads": numba.config.NUMBA_NUM_THREADS,
        "default_num_threads": numba.config.NUMBA_DEFAULT_NUM_THREADS,
        "cache_dir": nconfig.CACHE_DIR or "(beside each module, in __pycache__)",
        "cuda_simulator": bool(getattr(nconfig, "ENABLE_CUDASIM", 0)),
    }
    facts["blas_threads"] = {
        v: os.environ.get(v) for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    }
    facts["world_cache_dir"] = str(world_cache_dir())
    return facts


def world_cache_dir():
    from navi_nb.world.world_cache import default_cache_dir

    return default_cache_dir()


def run(args) -> int:
    facts = gather()
    if args.json:
        import json

        print(json.dumps(facts, indent=1, default=str))
        return 0
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    t = Table(title="versions")
    t.add_column("package")
    t.add_column("version")
    for k, v in facts["versions"].items():
        t.add_row(k, str(v))
    for k, v in facts["optional"].items():
        t.add_row(f"{k} (optional)", v or "[dim]not installed[/]")
    console.print(t)
    t = Table(title="backends")
    for c in ("backend", "available", "why not"):
        t.add_column(c)
    for k, v in facts["backends"].items():
        t.add_row(k, "yes" if v["available"] else "no", escape(v["why_not"] or ""))
    console.print(t)
    t = Table(title="cores, threads, caches")
    t.add_column("fact")
    t.add_column("value", overflow="fold")
    for k, v in facts["cores"].items():
        t.add_row(f"cores: {k}", escape(str(v)))
    for k, v in facts["numba"].items():
        t.add_row(f"numba: {k}", str(v))
    for k, v in facts["blas_threads"].items():
        t.add_row(k, str(v))
    t.add_row("compiled-world cache", facts["world_cache_dir"])
    t.add_row("platform", facts["platform"])
    t.add_row("python", facts["executable"])
    console.print(t)
    return 0
