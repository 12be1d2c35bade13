"""Compile a triangle mesh (OBJ, STL or PLY; more formats with trimesh) into a world.

    python examples/compile_mesh.py [MESH] [OUT.gmdag] [RESOLUTION]

Without MESH it uses ../shared/meshes/fandisk.obj when that folder exists,
else it writes a procedural icosphere and compiles that.
"""
import sys
from pathlib import Path

import numpy as np

import navi_nb
from navi_nb.world import mesh_io
from navi_nb.world.mesh_scene import icosphere

here = Path(__file__).resolve().parent
if len(sys.argv) > 1:
    mesh_path = Path(sys.argv[1])
else:
    mesh_path = here.parent.parent / "shared" / "meshes" / "fandisk.obj"
    if not mesh_path.exists():
        mesh_path = Path("out/icosphere.obj")
        mesh_path.parent.mkdir(parents=True, exist_ok=True)
        ball = icosphere(3)
        mesh_io.write_obj(mesh_path, ball.vertices, ball.faces)
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
