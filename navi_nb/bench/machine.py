"""What machine a benchmark ran on (printed first, once per process), and the benchmarks' summary table."""

from __future__ import annotations

import os
import platform

from navi_nb.cores import allowed_cores, cpu_model


def machine_info() -> dict:
    import numba
    import numpy

    try:
        allowed = int(allowed_cores().allowed)
    except Exception:  # an unreadable cgroup tree: fall back to affinity
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


_printed = []


def print_machine(console=None, info=None) -> dict:
    """Print the machine line (the first call in a process only: `bench all` runs every benchmark in one)."""
    from rich.console import Console

    console = console or Console()
    info = info or machine_info()
    if _printed:
        return info
    _printed.append(True)
    console.print(
        f"[bold]machine[/]: {info['cpu']}, {info['cpu_count']} reported cores, {info['allowed_cores']} allowed"
    )
    console.print(
        f"[bold]software[/]: numba {info['numba']} ({info['numba_threads']} threads), "
        f"numpy {info['numpy']}, Python {info['python']}"
    )
    return info


def summary_table(title, rows, sections=None):
    """[metric, value] rows as a two-column table: what the values say wraps at spaces, never mid-number.
    ``sections``: (heading, rows) pairs instead, each heading a bold row above its rows."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value")
    for heading, part in sections if sections is not None else [(None, rows)]:
        if heading is not None:
            table.add_row(f"[bold]{escape(heading)}[/]", "")
        for i, (m, v) in enumerate(part):
            table.add_row(escape(str(m)), escape(str(v)), end_section=i == len(part) - 1)
    return table
