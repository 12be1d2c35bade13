"""GPU check for the sensing stage: run on a machine with a CUDA device.

    python scripts/gpu_check.py [--actors 4096] [--resolution 256] [--repeat 10] [--worlds 64]

1. compiles the ~35,000-triangle benchmark room at 256;
2. traces 64 actors x 64 x 16 rays on the CPU and on CUDA and compares them
   (depth difference, hit and semantic agreement);
3. times the CUDA tracer at ``--actors`` (4,096) actors x 64 x 16 rays from
   CuPy-resident poses (one launch per call, results left on the device),
   and Navi's canonical 4 x 256 x 48 sensor; prints rays per second and ms
   per call;
4. traces 64 actors, each in its own world of house:0-63 (at 128), on the
   CPU and on CUDA, compares them, and times the CUDA tracer at ``--actors``
   actors spread over those worlds against the same count in one world;
5. steps the environment (64 actors, house) on both backends and compares
   rewards, terminations and poses step by step.

Prints everything as JSON on the last line.

Needs CuPy and a working driver (the ``cuda`` extra: ``pip install -e ".[cuda]"``); under
``NUMBA_ENABLE_CUDASIM=1`` it runs on Numba's simulator (small settings) as a
smoke test. docs/PERFORMANCE.md ("On a GPU") has its figures on an NVIDIA
H200.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def agreement(cpu, gpu) -> dict:
    """How the CUDA tracer's (depth, semantic, hit) agree with the CPU's on the same rays."""
    diff = np.abs(cpu[0] - gpu[0])
    return {
        "rays": int(cpu[0].size),
        "max_abs_depth_diff_m": float(diff.max()),
        "p99_abs_depth_diff_m": float(np.percentile(diff, 99)),
        "hit_equal": float(np.mean(cpu[2] == gpu[2])),
        "semantic_equal": float(np.mean(cpu[1] == gpu[1])),
    }


def agrees(a: dict) -> bool:
    """The same hits, depths within 0.1 mm (the GPU contracts multiply-adds; the CPU does not)."""
    return a["max_abs_depth_diff_m"] <= 1e-4 and a["hit_equal"] == 1.0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--actors", type=int, default=4096)
    p.add_argument("--resolution", type=int, default=256)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--worlds", type=int, default=64, help="worlds in the world-set check")
    p.add_argument("--sensor-az", type=int, default=64, help="sensor azimuth bins")
    p.add_argument("--sensor-el", type=int, default=16, help="sensor elevation rows")
    p.add_argument("--env-steps", type=int, default=50, help="environment steps compared")
    args = p.parse_args()

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
    from numba import config, cuda

    if config.ENABLE_CUDASIM:  # Numba's simulator (a smoke test of this script): NumPy stands in for CuPy
        import types

        cp = types.SimpleNamespace(
            asarray=np.asarray, cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(deviceSynchronize=lambda: 0))
        )
        out = {"device": "Numba CUDA simulator"}
    else:
        import cupy as cp

        name = cuda.get_current_device().name
        out = {"device": name.decode() if isinstance(name, bytes) else str(name)}
    t0 = time.perf_counter()
    mesh, classes = benchmark_mesh_scene()
    world = compile_mesh(mesh, args.resolution, classes=classes)
    out["compile_s"] = time.perf_counter() - t0
    lo, hi = mesh.vertices.min(axis=0) + 0.2, mesh.vertices.max(axis=0) - 0.2
    pos = free_positions(world, lo, hi, args.actors, 0)
    yaws = np.random.default_rng(1).uniform(-math.pi, math.pi, args.actors).astype(np.float32)
    sensor = Sensor(args.sensor_az, args.sensor_el)

    # 1. agreement with the CPU on 64 actors
    cpu = Tracer(world, sensor, 30.0)
    gpu = Tracer(world, sensor, 30.0, backend="cuda", max_actors=args.actors)
    c = [np.array(a) for a in cpu.trace(pos[:64], yaws[:64])]
    t0 = time.perf_counter()
    g = gpu.trace(pos[:64], yaws[:64], to_host=True)
    out["first_cuda_call_s"] = time.perf_counter() - t0
    out["cpu_vs_cuda"] = agreement(c, g)

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
    ok = agrees(out["cpu_vs_cuda"])

    # 4. a world set: every actor in its own world, one launch
    from navi_nb.bench.trace import WORLD_SET_RESOLUTION, world_set_rays
    from navi_nb.world.scene_spec import parse_spec
    from navi_nb.world.world_cache import load_worlds
    from navi_nb.world.world_set import WorldSet

    t0 = time.perf_counter()
    items = parse_spec(f"house:0-{args.worlds - 1}")
    worlds = load_worlds(items, WORLD_SET_RESOLUTION, jobs=min(8, os.cpu_count() or 1))
    out["world_set_compile_s"] = time.perf_counter() - t0
    many, one = WorldSet(worlds, items=items), WorldSet.of(worlds[0])
    o_many, y_many = world_set_rays(many, args.actors, 5)
    o_one, y_one = world_set_rays(one, args.actors, 5)
    wi = (np.arange(args.actors) % args.worlds).astype(np.int32)
    n = min(64, args.actors)
    c = [np.array(a) for a in Tracer(many, sensor, 30.0).trace(o_many[:n], y_many[:n], world_index=wi[:n])]
    g_many = Tracer(many, sensor, 30.0, backend="cuda", max_actors=args.actors)
    g = g_many.trace(o_many[:n], y_many[:n], to_host=True, world_index=wi[:n])
    out["world_set_cpu_vs_cuda"] = {"worlds": args.worlds, **agreement(c, g)}
    g_one = Tracer(one, sensor, 30.0, backend="cuda", max_actors=args.actors)
    d_many, d_ymany, d_wi = cp.asarray(o_many), cp.asarray(y_many), cp.asarray(wi)
    d_one, d_yone = cp.asarray(o_one), cp.asarray(y_one)
    g_many.trace(d_many, d_ymany, world_index=d_wi)
    g_one.trace(d_one, d_yone)
    t_many = median_s(lambda: g_many.trace(d_many, d_ymany, world_index=d_wi))
    t_one = median_s(lambda: g_one.trace(d_one, d_yone))
    out["world_set_cuda"] = {
        "actors": args.actors,
        "one_world_rays_per_s": rays / t_one,
        "many_worlds_rays_per_s": rays / t_many,
        "ratio": t_one / t_many,
    }
    ok = ok and agrees(out["world_set_cpu_vs_cuda"])

    # 5. the environment on both backends
    from navi_nb.env.nav_env import NavEnv
    from navi_nb.world.compiler import compile_scene

    house = compile_scene("house", 128)
    envs = {b: NavEnv(house, 64, sensor=sensor, seed=3, backend=b) for b in ("cpu", "cuda")}
    obs = {b: e.reset()[0] for b, e in envs.items()}
    obs_diff, same = [float(np.abs(obs["cpu"] - obs["cuda"]).max())], 0
    rng = np.random.default_rng(0)
    for _ in range(args.env_steps):
        a = rng.uniform(-1, 1, (64, 4)).astype(np.float32)
        res = {b: e.step(a) for b, e in envs.items()}
        obs_diff.append(float(np.abs(res["cpu"][0] - res["cuda"][0]).max()))
        same += bool(
            np.allclose(res["cpu"][1], res["cuda"][1], atol=1e-5)
            and np.array_equal(res["cpu"][2], res["cuda"][2])
            and np.array_equal(res["cpu"][3], res["cuda"][3])
            and np.array_equal(envs["cpu"].get_state()["pos"], envs["cuda"].get_state()["pos"])
        )
    out["env_cpu_vs_cuda"] = {"steps": args.env_steps, "steps_same": same, "max_obs_diff": max(obs_diff)}
    ok = ok and same == args.env_steps
    out["agree"] = bool(ok)
    print(json.dumps(out))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
