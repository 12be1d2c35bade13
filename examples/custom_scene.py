"""Build your own scene from analytic primitives and compile it.

    python examples/custom_scene.py [OUT_DIR]

A scene is a room (floor, walls, ceiling) with solids inside: boxes, spheres,
cylinders and capsules, each with a surface class. The analytic field is
exact in free space, so the compiled world can be checked against it.
"""

import sys
from pathlib import Path

import numpy as np

import navi_nb
from navi_nb.world import sdf
from navi_nb.world.scenes import OBSTACLE, PILLAR, make_scene

out = Path(sys.argv[1] if len(sys.argv) > 1 else "out")
out.mkdir(parents=True, exist_ok=True)

scene = make_scene(
    "gallery",
    room_min=[-5.0, 0.0, -4.0],
    room_max=[5.0, 3.0, 4.0],
    solids=[
        sdf.box(centre=[0.0, 0.5, 0.0], half=[1.5, 0.5, 0.5], cls=OBSTACLE),  # a bench
        sdf.sphere(centre=[-3.0, 1.0, 2.0], radius=0.6, cls=OBSTACLE),  # a boulder
        sdf.cylinder(a=[3.0, -1.0, -2.0], b=[3.0, 4.0, -2.0], radius=0.4, cls=PILLAR),
        sdf.capsule(a=[-3.0, 0.4, -2.5], b=[-1.0, 0.4, -2.5], radius=0.4, cls=OBSTACLE),
    ],
    description="a room with a bench, a boulder, a column and a log",
)

world = navi_nb.compile_scene(scene, resolution=128)
navi_nb.save_world(world, out / "gallery.gmdag")
print(world, f"{world.nbytes:,} bytes,", len(world.spawn_points), "spawn points")

# The compiled world agrees with the analytic field it came from.
rng = np.random.default_rng(0)
pts = rng.uniform(scene.bounds_min, scene.bounds_max, size=(20000, 3))
exact, _ = scene.evaluate(pts)
approx, _ = navi_nb.distance(world, pts)
near = np.abs(exact) < 2 * world.voxel_size
err = np.abs(approx[near] - exact[near]) / world.voxel_size
print(f"near surfaces: max |query - analytic| = {err.max():.2f} voxel over {near.sum()} points")
