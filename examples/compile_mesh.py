"""Compile a triangle mesh (OBJ, STL or PLY; more formats with trimesh) into a world.

    python examples/compile_mesh.py [MESH] [OUT.gmdag] [RESOLUTION]

Without MESH it compiles the sample mesh fandisk.obj shipped with navi_nb.
"""

import sys
from pathlib import Path

import numpy as np

import navi_nb
from navi_nb.world.mesh_scene import sample_mesh_path

mesh_path = Path(sys.argv[1]) if len(sys.argv) > 1 else sample_mesh_path("fandisk.obj")
out = Path(sys.argv[2] if len(sys.argv) > 2 else "out/mesh.gmdag")
resolution = int(sys.argv[3]) if len(sys.argv) > 3 else 128
out.parent.mkdir(parents=True, exist_ok=True)

mesh = navi_nb.read_mesh(mesh_path)
print(f"{mesh_path}: {len(mesh.faces):,} triangles")
world = navi_nb.compile_mesh(mesh, resolution=resolution)
navi_nb.save_world(world, out)
print(world, f"{world.nbytes:,} bytes")

# Signed distance at the mesh's vertices is ~0; at the bounding-box centre, whatever it is.
d, _ = navi_nb.distance(world, mesh.vertices[:1000])
print(f"|distance| at vertices: max {np.abs(d).max() / world.voxel_size:.2f} voxel")
