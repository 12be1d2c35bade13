"""The CUDA kernel under Numba's CUDA simulator agrees with the CPU kernel.

Numba reads NUMBA_ENABLE_CUDASIM when it is imported, so the comparison runs
in a fresh subprocess with the variable set. The simulator runs one Python
thread per CUDA thread: the inputs are tiny.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import json, math, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from numba import config
assert config.ENABLE_CUDASIM, "the simulator is not enabled"
from sense_helpers import sphere_world, slab_world
from navi_nb.sense.sensor import Sensor
from navi_nb.sense.tracer import Tracer, trace
from navi_nb.sense.backend import resolve_backend

results = {"backend": resolve_backend("cuda"), "auto": resolve_backend("auto"), "cases": []}
rng = np.random.default_rng(7)
worlds = {
    "sphere": sphere_world(16, radius=1.1, voxel_size=0.25)[0],
    "slab_unsigned": slab_world(16, lo=2.1, hi=2.8, axis=2, voxel_size=0.25, unsigned=True),
}
for name, world in worlds.items():
    for sensor in (Sensor(6, 3), Sensor(4, 5, fov_up=0.4, fov_down=-0.4)):
        origins = rng.uniform(-0.5, 4.5, (3, 3)).astype(np.float32)  # some outside, some in solid
        yaws = rng.uniform(-math.pi, math.pi, 3).astype(np.float32)
        for max_steps in (0, 2, 512):
            cpu = trace(world, origins, yaws, sensor, 6.0, max_steps=max_steps)
            tracer = Tracer(world, sensor, 6.0, backend="cuda", max_steps=max_steps)
            gpu = tracer.trace(origins, yaws, to_host=True)
            # buffers reused on a second call with fewer actors
            gpu2 = tracer.trace(origins[:2], yaws[:2], to_host=True)
            out = tuple(np.full((3,) + sensor.shape, 5, dt) for dt in (np.float32, np.uint16, np.bool_))
            gpu3 = tracer.trace(origins, yaws, out=out)
            results["cases"].append({
                "world": name, "rays": int(cpu[0].size), "max_steps": max_steps,
                "max_abs_depth_diff": float(np.max(np.abs(cpu[0] - gpu[0]))),
                "semantic_equal": bool(np.array_equal(cpu[1], gpu[1])),
                "hit_equal": bool(np.array_equal(cpu[2], gpu[2])),
                "hits": int(cpu[2].sum()),
                "second_call_equal": bool(np.array_equal(gpu2[0], gpu[0][:2])),
                "out_written": bool(gpu3[0] is out[0] and np.array_equal(out[0], gpu[0])),
                "finite_in_range": bool(np.all(np.isfinite(gpu[0])) and np.all(gpu[0] >= 0) and np.all(gpu[0] <= 6.0)),
            })
# bad input on the cuda path: raised before anything is written
tracer = Tracer(worlds["sphere"], Sensor(4, 2), 3.0, backend="cuda")
errors = []
for origins, yaws in ((np.zeros((2, 2), np.float32), np.zeros(2, np.float32)),
                      (np.array([[np.nan, 0, 0]], np.float32), np.zeros(1, np.float32)),
                      (np.zeros((1, 3), np.int64), np.zeros(1, np.float32))):
    try:
        tracer.trace(origins, yaws)
        errors.append("no error")
    except Exception as exc:
        errors.append(type(exc).__name__)
results["errors"] = errors
# the image: written on the host from the copied rays, as the CPU tracer's ranges write it; refused without to_host
world, sensor = worlds["sphere"], Sensor(6, 3)
origins = rng.uniform(0.5, 3.5, (3, 3)).astype(np.float32)
yaws = rng.uniform(-math.pi, math.pi, 3).astype(np.float32)
dest = np.array([4, 0, 2], np.int64)
images = []
for backend in ("cpu", "cuda"):
    obs = np.full((5, 40), -7.0, np.float32)
    Tracer(world, sensor, 6.0, backend=backend).trace(origins, yaws, to_host=True, image=(dest, obs, 0.5, 0.25, True))
    images.append(obs)
results["image_close"] = bool(np.allclose(images[0], images[1], rtol=0, atol=1e-6) and (images[1][[1, 3]] == -7).all())
try:
    Tracer(world, sensor, 6.0, backend="cuda").trace(origins, yaws, image=(dest, images[1], 0.5, 0.25, True))
    results["image_no_host"] = "no error"
except Exception as exc:
    results["image_no_host"] = type(exc).__name__
# a numba-cuda that compiles the kernel but cannot cache it: compiled again without the cache
import navi_nb.sense.cuda_tracer as ct
real = ct.trace_rays_cuda
class Uncacheable:
    py_func = staticmethod(real.py_func)
    def __getitem__(self, launch):
        def fail(*args):
            raise RuntimeError("Cannot pickle CUDACodeLibrary with linking files")
        return fail
ct.trace_rays_cuda = Uncacheable()
origins = np.array([[2.0, 2.0, 2.0]], np.float32)
small = Tracer(worlds["sphere"], Sensor(4, 2), 3.0, backend="cuda")
fallback = small.trace(origins, np.zeros(1, np.float32), to_host=True)
cpu = trace(worlds["sphere"], origins, np.zeros(1, np.float32), Sensor(4, 2), 3.0)
results["uncached_equal"] = bool(np.array_equal(fallback[0], cpu[0]) and ct._uncached_kernel is not None)
ct.trace_rays_cuda = real
print("RESULT" + json.dumps(results))
"""


def test_cuda_simulator_matches_cpu():
    env = dict(
        os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(ROOT / "tests")],
        env=env,
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")][-1]
    res = json.loads(line[len("RESULT") :])
    assert res["backend"] == "cuda" and res["auto"] == "cpu"
    assert len(res["cases"]) == 12
    assert sum(c["hits"] for c in res["cases"]) > 0
    for case in res["cases"]:
        # the same float64 math on both targets, rounded once to float32
        assert case["max_abs_depth_diff"] <= 1e-6, case
        assert case["semantic_equal"] and case["hit_equal"], case
        assert case["second_call_equal"] and case["out_written"] and case["finite_in_range"], case
    assert res["errors"] == ["SenseError"] * 3
    assert res["uncached_equal"]
    assert res["image_close"] and res["image_no_host"] == "SenseError"
