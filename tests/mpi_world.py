"""Run by test_mpi under ``mpiexec -n R``: every rank builds the box scene's world set and maps its
layout from the layout cache in folder ARGV[1] (``WorldSet.map_layouts``; whoever comes first writes
it), steps a small environment on it, and rank 0 prints one JSON line: per rank, each packed array's
mapping (``/proc/self/smaps``: file, PSS, RSS), whether the arrays are writeable, and a hash of the
observations."""

import hashlib
import json
import sys

import numpy as np

import navi_nb  # noqa: F401  (BLAS pin)
from navi_nb.env.nav_env import NavEnv
from navi_nb.parallel import ranks
from navi_nb.sense.sensor import Sensor
from navi_nb.world.compiler import compile_scene
from navi_nb.world.layout_cache import mapping_of
from navi_nb.world.world_set import WorldSet


def main():
    comm = ranks.world()
    ws = WorldSet([compile_scene("box", resolution=32, seed=0)])
    if sys.argv[1] != "-":  # all at once: the first to link its file wins, the others map that one
        ws.map_layouts(sys.argv[1])
    env = NavEnv(ws, 4, sensor=Sensor(8, 3), task="pointgoal", seed=3, max_steps=20)
    obs, _ = env.reset()
    h = hashlib.sha256(obs.tobytes())
    rng = np.random.default_rng(0)
    for _ in range(4):
        obs = env.step(rng.standard_normal((4, env.action_dim)).astype(np.float32))[0]
        h.update(obs.tobytes())
    comm.Barrier()  # every rank holds its mapping now
    p = ws.packed
    mine = {
        "mapped": str(p.mapped) if p.mapped is not None else None,
        "note": p.map_note,
        "arrays": [mapping_of(a) for a in p.arrays[:5]],
        "writeable": [bool(a.flags.writeable) for a in p.arrays[:5]],
        "obs": h.hexdigest(),
        "bytes": int(p.nbytes),
    }
    every = comm.gather(mine, root=0)
    comm.Barrier()
    if comm.Get_rank() == 0:
        print(json.dumps(every), flush=True)


if __name__ == "__main__":
    main()
