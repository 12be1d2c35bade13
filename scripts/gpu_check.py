"""GPU check for the sensing stage (issue 3, acceptance 6): run on a machine with a CUDA device.

    python scripts/gpu_check.py [--actors 4096] [--resolution 256] [--repeat 10]

1. compiles the ~35,000-triangle benchmark room at 256;
2. traces 64 actors x 64 x 16 rays on the CPU and on CUDA and compares them
   (depth difference, hit and semantic agreement);
3. times the CUDA tracer at ``--actors`` (4,096) actors x 64 x 16 rays from
   CuPy-resident poses (one launch per call, results left on the device),
   and Navi's canonical 4 x 256 x 48 sensor; prints rays per second and ms
   per call as JSON on the last line.

Needs CuPy and a working driver (``pip install navi-nb[cuda]``). It was
written without a GPU at hand; see docs/PERFORMANCE.md for whether it ran.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--actors", type=int, default=4096)
    p.add_argument("--resolution", type=int, default=256)
    p.add_argument("--repeat", type=int, default=10)
    args = p.parse_args()

    import numpy as np

    from navi_nb.bench.trace import free_positions
    from navi_nb.errors import NaviError
    from navi_nb.sense.backend import resolve_backend
    from navi_nb.sense.sensor import Sensor
    from navi_nb.sense.tracer import Tracer
    from navi_nb.world.compiler import compile_mesh
    from navi_nb.world.mesh_scene import benchmark_mesh_scene

    try:
        resolve_backend("cuda")
    except NaviError as exc:  # one line naming what is missing (CuPy, driver, device)
        print(f"gpu_check: {exc}", file=sys.stderr)
        return 2
    import cupy as cp
    from numba import cuda

    out = {
        "device": cuda.get_current_device().name.decode()
        if isinstance(cuda.get_current_device().name, bytes)
        else str(cuda.get_current_device().name)
    }
    t0 = time.perf_counter()
    mesh, classes = benchmark_mesh_scene()
    world = compile_mesh(mesh, args.resolution, classes=classes)
    out["compile_s"] = time.perf_counter() - t0
    lo, hi = mesh.vertices.min(axis=0) + 0.2, mesh.vertices.max(axis=0) - 0.2
    pos = free_positions(world, lo, hi, args.actors, 0)
    yaws = np.random.default_rng(1).uniform(-math.pi, math.pi, args.actors).astype(np.float32)
    sensor = Sensor(64, 16)

    # 1. agreement with the CPU on 64 actors
    cpu = Tracer(world, sensor, 30.0)
    gpu = Tracer(world, sensor, 30.0, backend="cuda", max_actors=args.actors)
    c = [np.array(a) for a in cpu.trace(pos[:64], yaws[:64])]
    t0 = time.perf_counter()
    g = gpu.trace(pos[:64], yaws[:64], to_host=True)
    out["first_cuda_call_s"] = time.perf_counter() - t0
    diff = np.abs(c[0] - g[0])
    out["cpu_vs_cuda"] = {
        "rays": int(c[0].size),
        "max_abs_depth_diff_m": float(diff.max()),
        "p99_abs_depth_diff_m": float(np.percentile(diff, 99)),
        "hit_equal": float(np.mean(c[2] == g[2])),
        "semantic_equal": float(np.mean(c[1] == g[1])),
    }

    def median_s(call):
        """Median wall seconds of ``args.repeat`` synchronised calls."""
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            call()
            cp.cuda.runtime.deviceSynchronize()
            times.append(time.perf_counter() - t0)
        return float(np.median(times))

    # 2. throughput at many actors, poses already on the device
    dpos, dyaw = cp.asarray(pos), cp.asarray(yaws)
    gpu.trace(dpos, dyaw)
    cp.cuda.runtime.deviceSynchronize()
    t = median_s(lambda: gpu.trace(dpos, dyaw))
    rays = args.actors * sensor.n_rays
    out["cuda_many"] = {"actors": args.actors, "rays": rays, "median_ms": 1e3 * t, "rays_per_s": rays / t}
    # host poses (one small upload per call)
    out["cuda_many_host_poses_median_ms"] = 1e3 * median_s(lambda: gpu.trace(pos, yaws))

    # 3. Navi's canonical sensor
    canon = Tracer(world, Sensor(256, 48), 30.0, backend="cuda", max_actors=4)
    cpos, cyaw = cp.asarray(pos[:4]), cp.asarray(yaws[:4])
    canon.trace(cpos, cyaw)
    cp.cuda.runtime.deviceSynchronize()
    out["canonical_4x256x48_median_ms"] = 1e3 * median_s(lambda: canon.trace(cpos, cyaw))
    ok = out["cpu_vs_cuda"]["max_abs_depth_diff_m"] <= 1e-4 and out["cpu_vs_cuda"]["hit_equal"] == 1.0
    out["agree"] = bool(ok)
    print(json.dumps(out))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
