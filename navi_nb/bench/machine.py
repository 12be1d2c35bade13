"""What machine a benchmark ran on: every benchmark prints this first."""
from __future__ import annotations

import os
import platform


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict:
    import numba
    import numpy

    try:
        from navi_nb.parallel.cores import allowed_cores
        allowed = int(allowed_cores().allowed)
    except Exception:  # the cores module is optional here; fall back to affinity
        allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "allowed_cores": allowed,
        "numba_threads": numba.get_num_threads(),
        "numba_layer": _threading_layer(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "numba": numba.__version__,
    }


def _threading_layer() -> str:
    import numba

    try:
        return numba.threading_layer()
    except ValueError:  # no parallel region has run yet
        return "not yet initialised"


def print_machine(console=None, info=None) -> dict:
    from rich.console import Console

    console = console or Console()
    info = info or machine_info()
    console.print(f"[bold]machine[/]: {info['cpu']}, {info['cpu_count']} reported cores, "
                  f"{info['allowed_cores']} allowed, numba {info['numba']} "
                  f"({info['numba_threads']} threads), numpy {info['numpy']}, Python {info['python']}")
    return info
