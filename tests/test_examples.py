"""The quick examples run as written (each in its own process, like a user)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from peer_helpers import need_peer

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def run_example(name, *args, cwd):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_quickstart(tmp_path):
    out = run_example("quickstart.py", tmp_path, cwd=tmp_path)
    assert (tmp_path / "house.gmdag").stat().st_size > 32
    assert (tmp_path / "view.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "100% of rays hit" in out  # a closed house: every ray ends on a surface


def test_custom_scene(tmp_path):
    out = run_example("custom_scene.py", tmp_path, cwd=tmp_path)
    err = float(out.split("max |query - analytic| = ")[1].split()[0])
    assert err <= 0.5  # the compiler's accuracy bound near surfaces, in voxels


def test_compile_mesh(tmp_path):
    from navi_nb.world import mesh_io
    from navi_nb.world.mesh_scene import icosphere

    ball = icosphere(3)
    mesh_io.write_obj(tmp_path / "ball.obj", ball.vertices, ball.faces)
    out = run_example("compile_mesh.py", tmp_path / "ball.obj", tmp_path / "ball.gmdag", 64, cwd=tmp_path)
    assert (tmp_path / "ball.gmdag").exists()
    assert float(out.split("max ")[-1].split()[0]) <= 0.5


def test_gym_adapter(tmp_path):
    pytest.importorskip("gymnasium", reason="the gym example needs the gym extra")
    out = run_example("gym_adapter.py", cwd=tmp_path)
    assert "single observation space" in out


def test_sb3_ppo_house(tmp_path):
    need_peer("torch")
    need_peer("stable_baselines3")
    # tiny: two PPO updates of 4 actors, 4 evaluation episodes (the example's defaults train 1M steps)
    args = ("--steps", 256, "--actors", 4, "--sensor-az", 8, "--sensor-el", 4, "--resolution", 64, "--episodes", 4)
    args += ("--threads", 1)
    out = run_example("sb3_ppo_house.py", *args, cwd=tmp_path)
    assert "training SB3 PPO: 1 updates of 256 actor-steps" in out
    assert "trained 256 actor-steps" in out and "evaluation (4 episodes, seed 1000003): success" in out


def test_memory_api(tmp_path):
    out = run_example("memory_api.py", tmp_path / "run", 16 * 32 * 2, cwd=tmp_path)
    assert "policy with a memory of 32 units" in out
    assert "episodes ended in 200 steps of 16 actors" in out
