"""Quick start: compile a built-in scene, trace one actor's rays, draw what it sees.

    python examples/quickstart.py [OUT_DIR]

Writes OUT_DIR/house.gmdag and OUT_DIR/view.png (needs Pillow: pip install -e ".[image]").
"""

import sys
from pathlib import Path

import numpy as np

import navi_nb

out = Path(sys.argv[1] if len(sys.argv) > 1 else "out")
out.mkdir(parents=True, exist_ok=True)

# 1. Compile the default scene into a .gmdag world (once; then load it anywhere).
world = navi_nb.compile_scene("house", resolution=128)
navi_nb.save_world(world, out / "house.gmdag")
world = navi_nb.load_world(out / "house.gmdag")  # deep-validated on load
print(world)

# 2. Point queries: signed distance (metres, negative inside solid) and surface class.
spawn = world.spawn_points[:3]
dist, sem = navi_nb.distance(world, spawn)
print("clearance at the first spawn points:", np.round(dist, 3), "classes:", sem)

# 3. Trace every actor's rays in one batched call: depth, semantic class, hit flag.
sensor = navi_nb.Sensor(64, 16)
yaws = np.array([0.0, np.pi / 2, np.pi], dtype=np.float32)
depth, semantic, hit = navi_nb.trace(world, spawn, yaws, sensor, max_distance=20.0)
print(f"depth {depth.shape}: mean {depth.mean():.2f} m, {hit.mean():.0%} of rays hit a surface")
names = world.class_names
seen = {names[c]: int((semantic == c).sum()) for c in np.unique(semantic[hit])}
print("rays per surface class:", seen)

# 4. A picture: the depth panorama and a top-down slice of the distance field.
try:
    from navi_nb.sense.render import render_view

    x, y, z = (float(v) for v in spawn[0])
    render_view(world, (x, y, z, 0.0), out / "view.png")
    print("wrote", out / "view.png")
except navi_nb.errors.NaviError as exc:  # Pillow missing: the message names the extra
    print("no picture:", exc)
