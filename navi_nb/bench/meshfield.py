"""`MeshField.evaluate` throughput on the ~35k-triangle benchmark mesh scene.

Run: ``python -m navi_nb.bench.meshfield [--points N]`` (or
``navi-nb bench meshfield`` once the bench command lists it).

Workloads (each Morton-ordered, as a compiler's cells would be):
- ``cells@512``: the compiler's own pattern: the 8 child-cell centres of
  parent cells of a 512 grid that lie within 2 voxels of a surface point
  (sampled by area), with ``cap`` = 4 voxels;
- ``near``: surface points (by area) plus Gaussian noise of 2 voxels, no cap;
- ``uniform``: uniform in the mesh bounds, without and with a 16-voxel cap.
Each is timed at 1 and 2 Numba threads (best of 3): points per second of wall
time, and per CPU-second (process time; less sensitive to other load).
"""

from __future__ import annotations

import time

import numpy as np


def add_arguments(parser) -> None:
    parser.add_argument("--points", type=int, default=1_000_000, help="points per workload (default 1e6)")


def _morton(p, bits=10):
    q = ((p - p.min(0)) / max(np.ptp(p, 0).max(), 1e-300) * (2**bits - 1)).astype(np.int64)
    code = np.zeros(len(p), np.int64)
    for b in range(bits):
        for a in range(3):
            code |= ((q[:, a] >> b) & 1) << (3 * b + a)
    return np.argsort(code, kind="stable")


def _surface_points(mesh, n, rng):
    tri = mesh.vertices[mesh.faces]
    area = 0.5 * np.linalg.norm(np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]), axis=1)
    k = rng.choice(len(tri), n, p=area / area.sum())
    r = rng.random((n, 2))
    flip = r.sum(1) > 1
    r[flip] = 1 - r[flip]
    return tri[k, 0] + r[:, :1] * (tri[k, 1] - tri[k, 0]) + r[:, 1:] * (tri[k, 2] - tri[k, 0])


def rate_table(results):
    """Million points per second per workload, short columns that fit 80 columns."""
    from rich.table import Table

    table = Table(title="points per second (M, best of 3)")
    for col in ("workload", "points", "1 thr", "2 thr", "2/1", "1 thr CPU"):
        table.add_column(col, justify="left" if col == "workload" else "right", no_wrap=True)
    for r in results:
        table.add_row(
            r["workload"],
            f"{r['points']:,}",
            f"{r['mpts_s_1t']:.2f}",
            f"{r['mpts_s_2t']:.2f}",
            f"{r['mpts_s_2t'] / r['mpts_s_1t']:.2f}",
            f"{r['mpts_cpu_s_1t']:.2f}",
        )
    table.caption = "1 thr CPU: per CPU-second of process time at 1 thread"
    return table


def run(args) -> dict:
    import numba
    from rich.console import Console

    from navi_nb.bench.machine import print_machine
    from navi_nb.world.mesh_field import MeshField
    from navi_nb.world.mesh_scene import benchmark_mesh_scene

    console = Console()
    info = print_machine(console)
    mesh, classes = benchmark_mesh_scene()
    t0 = time.perf_counter()
    field = MeshField(mesh.vertices, mesh.faces, classes)
    build_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    n = int(args.points)
    voxel = float((field.bounds_max - field.bounds_min).max() / 512)
    # cells@512: child centres of parent cells (2 voxels) near the surface, siblings in a row
    parent = 2 * voxel
    pc = (np.floor(_surface_points(mesh, n // 8, rng) / parent) + 0.5) * parent
    pc = np.unique(pc, axis=0)
    pc = pc[_morton(pc)]
    off = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], float) * voxel / 2
    cells = (pc[:, None, :] + off[None]).reshape(-1, 3)
    near = _surface_points(mesh, n, rng) + rng.normal(0, 2 * voxel, (n, 3))
    near = near[_morton(near)]
    uniform = rng.uniform(field.bounds_min, field.bounds_max, (n, 3))
    uniform = uniform[_morton(uniform)]
    field.evaluate(near[:64])
    field.evaluate(near[:64], cap=1.0)
    work = (
        ("cells@512, cap 4 voxels", cells, 4 * voxel),
        ("near (2-voxel noise)", near, None),
        ("uniform", uniform, None),
        ("uniform, cap 16 voxels", uniform, 16 * voxel),
    )
    saved = numba.get_num_threads()
    results = []
    try:
        for name, pts, cap in work:
            row = {"workload": name, "points": int(len(pts))}
            for th in (1, 2):
                numba.set_num_threads(min(th, numba.config.NUMBA_NUM_THREADS))
                wall = cpu = float("inf")
                for _ in range(3):
                    t0, c0 = time.perf_counter(), time.process_time()
                    field.evaluate(pts, cap)
                    wall = min(wall, time.perf_counter() - t0)
                    cpu = min(cpu, time.process_time() - c0)
                row[f"mpts_s_{th}t"] = len(pts) / wall / 1e6
                row[f"mpts_cpu_s_{th}t"] = len(pts) / cpu / 1e6
            results.append(row)
    finally:
        numba.set_num_threads(saved)
    console.print(
        f"MeshField.evaluate: {mesh.faces.shape[0]:,} triangles, {field.n_closed_components} of "
        f"{field.n_components} parts closed, build {build_s:.2f} s"
    )
    console.print(rate_table(results))
    return {
        "machine": info,
        "triangles": int(mesh.faces.shape[0]),
        "closed": bool(field.closed),
        "build_s": build_s,
        "workloads": results,
        "summary": [(r["workload"] + " Mpts/s 1t/2t", f"{r['mpts_s_1t']:.2f}/{r['mpts_s_2t']:.2f}") for r in results],
    }


if __name__ == "__main__":
    import argparse

    _p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(_p)
    run(_p.parse_args())
