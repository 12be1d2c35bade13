"""`navi-nb bench compile`: time and peak RAM to compile the ~35k-triangle mesh scene.

Each resolution runs in its own child process, so its peak RAM is its own:
the child compiles once (the first call: Numba kernels load from the cache or
compile), resets the kernel's peak-RSS counter (``/proc/self/clear_refs``),
then times the warm compile(s) and reads ``VmHWM`` (peak resident set size of the
whole process, NumPy/Numba C allocations included) and the resident size just
before the warm run. ``--cold`` also times one child with an empty Numba cache
(the full JIT compile). The built-in ``house`` scene at 256 is compiled too and
its size compared with a dense float32 grid.

Peer: a published figure for a single-threaded C++ compiler of this format on
such a scene at 512 (9 s, 550 MB, unsigned). It is quoted, not run here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CPP_REF = {"resolution": 512, "seconds": 9.0, "peak_mb": 550.0}
TARGET = {"resolution": 512, "seconds": 2.5, "peak_mb": 300.0}

_CHILD = r"""
import json, sys, time
res, repeat = int(sys.argv[1]), int(sys.argv[2])
def status(key):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    return float("nan")
t0 = time.perf_counter()
import navi_nb
from navi_nb.world.compiler import compile_mesh
from navi_nb.world.mesh_scene import benchmark_mesh_scene
mesh, classes = benchmark_mesh_scene()
t_import = time.perf_counter() - t0
t0 = time.perf_counter()
world = compile_mesh(mesh, res, classes=classes)
first = time.perf_counter() - t0
try:
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # reset VmHWM to the current RSS
    reset = True
except OSError:
    reset = False
base = status("VmRSS")
warm = []
for _ in range(repeat):
    del world
    t0 = time.perf_counter()
    world = compile_mesh(mesh, res, classes=classes)
    warm.append(time.perf_counter() - t0)
import numba
print(json.dumps({"resolution": res, "triangles": int(mesh.faces.shape[0]), "import_s": t_import,
                  "first_s": first, "warm_s": min(warm), "warm_all_s": warm, "rss_before_mb": base,
                  "peak_mb": status("VmHWM"), "peak_reset": reset, "nodes": world.node_count,
                  "bytes": world.nbytes, "voxel_m": world.voxel_size, "threads": numba.get_num_threads()}))
"""


def add_arguments(parser) -> None:
    parser.add_argument(
        "--resolutions", default="128,256,512", help="comma-separated powers of two (default 128,256,512)"
    )
    parser.add_argument("--repeat", type=int, default=2, help="warm compiles per resolution; the fastest counts")
    parser.add_argument(
        "--cold", action="store_true", help="also time a first call with an empty Numba cache (the full JIT compile)"
    )
    parser.add_argument("--no-house", action="store_true", help="skip the house-at-256 compression figure")


def _child(res, repeat, env):
    root = str(Path(__file__).resolve().parents[2])
    env = dict(env)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(res), str(repeat)], capture_output=True, text=True, env=env, cwd=root
    )
    if out.returncode != 0:
        raise RuntimeError(f"compile benchmark child at {res} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_tables(result) -> list:
    """At 80 columns: time and peak RAM per resolution, then the sizes and the C++ reference."""
    from rich.table import Table

    runs = result["runs"]
    timing = Table(
        title=f"compile: mesh scene ({runs[0]['triangles']:,} triangles), "
        f"{result['machine']['numba_threads']} Numba threads"
    )
    for col in ("res", "voxel m", "warm s", "1st call s", "peak MB", "base MB"):
        timing.add_column(col, justify="right", no_wrap=True)
    sizes = Table(
        title=f"compile: sizes; C++ at {CPP_REF['resolution']}: {CPP_REF['seconds']} s, "
        f"{CPP_REF['peak_mb']:.0f} MB (quoted)"
    )
    for col in ("res", "words", "file KB", "C++ time / ours", "C++ MB / ours"):
        sizes.add_column(col, justify="right", no_wrap=True)
    for r in runs:
        timing.add_row(
            str(r["resolution"]),
            f"{r['voxel_m']:.4f}",
            f"{r['warm_s']:.2f}",
            f"{r['first_s']:.2f}",
            f"{r['peak_mb']:.0f}",
            f"{r['rss_before_mb']:.0f}",
        )
        ref = r["resolution"] == CPP_REF["resolution"]
        sizes.add_row(
            str(r["resolution"]),
            f"{r['nodes']:,}",
            f"{r['bytes'] / 1024:,.0f}",
            f"{CPP_REF['seconds'] / r['warm_s']:.1f}x" if ref else "-",
            f"{CPP_REF['peak_mb'] / r['peak_mb']:.1f}x" if ref else "-",
        )
    return [timing, sizes]


def run(args) -> dict:
    from rich.console import Console

    from navi_nb.bench.machine import machine_info

    console = Console()
    try:
        resolutions = [int(r) for r in str(args.resolutions).split(",") if r.strip()]
    except ValueError:
        resolutions = []
    if not resolutions or any(r < 16 or r & (r - 1) for r in resolutions) or args.repeat < 1:
        from navi_nb.errors import CliError

        raise CliError(
            f"--resolutions must be powers of two >= 16 and --repeat >= 1, got {args.resolutions!r}, {args.repeat}"
        )
    result = {"machine": machine_info(), "load_avg_before": os.getloadavg(), "runs": []}
    for res in resolutions:
        with console.status(f"compiling the mesh scene at {res} in a child process"):
            result["runs"].append(_child(res, args.repeat, os.environ))
    if args.cold:
        with tempfile.TemporaryDirectory() as cache, console.status("cold JIT run at 128"):
            env = dict(os.environ, NUMBA_CACHE_DIR=cache)
            cold = _child(128, 1, env)
            result["cold_first_s"] = cold["first_s"]
            result["cold_jit_s"] = cold["first_s"] - cold["warm_s"]
    result["load_avg_after"] = os.getloadavg()

    summary = [
        [f"mesh scene @{r['resolution']} warm s / peak MB", f"{r['warm_s']:.2f} / {r['peak_mb']:.0f}"]
        for r in result["runs"]
    ]
    for table in run_tables(result):
        console.print(table)
    console.print(
        "peak MB: the whole process during the warm run (VmHWM after a reset); base MB: its "
        "resident size just before (Python, NumPy, Numba, the mesh). 1st call: kernels loaded "
        "from the Numba cache, or compiled when the cache is stale."
    )
    if "cold_jit_s" in result:
        console.print(
            f"cold start (empty Numba cache) at 128: first call {result['cold_first_s']:.1f} s, "
            f"of which JIT ~{result['cold_jit_s']:.1f} s"
        )
        summary.append(["cold JIT s", f"{result['cold_jit_s']:.1f}"])
    console.print(
        f"targets at {TARGET['resolution']}: <= {TARGET['seconds']} s and <= {TARGET['peak_mb']:.0f} MB "
        f"peak; C++ reference (quoted, not run here): {CPP_REF['seconds']} s, "
        f"{CPP_REF['peak_mb']:.0f} MB. Load average before/after: "
        f"{result['load_avg_before'][0]:.1f} / {result['load_avg_after'][0]:.1f} "
        f"(a shared machine: high load inflates times)"
    )

    if not args.no_house:
        from navi_nb.world.compiler import compile_scene

        compile_scene("house", 64)
        t0 = time.perf_counter()
        house = compile_scene("house", 256)
        secs = time.perf_counter() - t0
        dense = 4 * 256**3
        result["house256"] = {
            "bytes": house.nbytes,
            "dense_bytes": dense,
            "ratio": dense / house.nbytes,
            "nodes": house.node_count,
            "seconds": secs,
        }
        console.print(
            f"house @ 256: {house.nbytes:,} bytes vs dense float32 {dense:,} bytes: "
            f"[bold]{dense / house.nbytes:.0f}x smaller[/] ({house.node_count:,} words, {secs:.2f} s)"
        )
        summary.append(["house @256 ratio to dense float32", f"{dense / house.nbytes:.0f}x"])
    result["summary"] = summary
    return result
