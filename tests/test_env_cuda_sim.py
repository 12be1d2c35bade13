"""The environment on the cuda tracer backend (Numba's CUDA simulator) steps
exactly as on the CPU backend: same observations to float32 rounding of the
depths, same rewards, terminations and poses; its episodic map reads the
cuda trace's rays.

Numba reads NUMBA_ENABLE_CUDASIM when imported: the run is a subprocess. The
simulator runs one Python thread per ray, so the setting is tiny.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from numba import config
assert config.ENABLE_CUDASIM, "the simulator is not enabled"
from navi_nb.env.nav_env import NavEnv
from navi_nb.sense.sensor import Sensor
from navi_nb.world.compiler import compile_scene

world = compile_scene("box", 32)
envs = {b: NavEnv(world, 2, sensor=Sensor(6, 3), task="pointgoal", seed=3, backend=b) for b in ("cpu", "cuda")}
obs = {b: e.reset()[0] for b, e in envs.items()}
mapped = NavEnv(world, 2, sensor=Sensor(6, 3), seed=3, backend="cuda", map_cell=0.5, map_crop=4)  # the map too
mapped.reset()
out = {"obs_diff": [float(np.abs(obs["cpu"] - obs["cuda"]).max())], "same": []}
rng = np.random.default_rng(0)
for t in range(4):
    a = rng.uniform(-1, 1, (2, 4)).astype(np.float32)
    res = {b: e.step(a) for b, e in envs.items()}
    mapped.step(a)
    out["obs_diff"].append(float(np.abs(res["cpu"][0] - res["cuda"][0]).max()))
    out["same"].append(bool(np.allclose(res["cpu"][1], res["cuda"][1], atol=1e-5)
                            and np.array_equal(res["cpu"][2], res["cuda"][2])
                            and np.array_equal(res["cpu"][3], res["cuda"][3])
                            and np.array_equal(envs["cpu"].get_state()["pos"], envs["cuda"].get_state()["pos"])))
out["backend"] = envs["cuda"].backend
state = mapped.get_state()
out["map_visits"] = int(state["map"][..., 0].sum())
out["map_seen"] = bool((state["map"][..., 1] > 0).any() and np.isfinite(state["obs"]).all())
print("RESULT" + json.dumps(out))
"""


def test_env_on_the_cuda_backend_matches_cpu_under_the_simulator():
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
    assert res["backend"] == "cuda"
    assert len(res["same"]) == 4 and all(res["same"]), res
    # observations hold depths scaled by max_distance: float32 rounding at most
    assert max(res["obs_diff"]) <= 1e-5, res
    # the episodic map from the cuda trace's host copy: each actor's five observations visited, rays seen
    assert res["map_visits"] == 2 * 5 and res["map_seen"], res
