"""The counting build of the tracer kernel (``navi-nb bench trace``'s step anatomy)
against the production build and against step counts worked out by hand."""

import numpy as np
from sense_helpers import slab_world, sphere_world

from navi_nb.bench.anatomy import trace_counted
from navi_nb.sense.sensor import Sensor
from navi_nb.sense.trace_math import STAT_KINDS
from navi_nb.sense.tracer import trace


def _poses(n, side, seed):
    rng = np.random.default_rng(seed)
    return rng.uniform(0.5, side - 0.5, (n, 3)).astype(np.float32), rng.uniform(-3, 3, n).astype(np.float32)


def test_counting_build_gives_the_same_bits_and_consistent_counts():
    sensor = Sensor(32, 8)
    for world, side in ((sphere_world(32, radius=2.2, voxel_size=0.25)[0], 8.0), (slab_world(32, lo=12, hi=16), 32.0)):
        origins, yaws = _poses(6, side, 3)
        for refine in (0, 1):
            ref = trace(world, origins, yaws, sensor, 20.0, refine=refine)
            depth, sem, hit, steps, kinds = trace_counted(world, origins, yaws, sensor, 20.0, refine=refine)
            for a, b in zip(ref, (depth, sem, hit)):
                assert np.array_equal(a, b)
            assert set(kinds) == set(STAT_KINDS)
            total = sum(kinds[k] for k in ("pruned", "free", "sphere", "candidate", "end"))
            assert np.array_equal(total, steps)
            assert steps.min() >= 1 and steps.max() < 512
            # a ray that hits stopped at a candidate at least once; one that ended left the range
            assert np.all(kinds["candidate"][hit] >= 1)
            assert np.all(kinds["end"][~hit] == 1)
            assert np.all(kinds["end"][hit] == 0)
            # a descent happens only on a step, and the first step always descends
            assert np.all(kinds["descent"] <= steps) and np.all(kinds["descent"] >= 1)
            assert kinds["sphere"].sum() > 0 and kinds["pruned"].sum() > 0


def test_open_space_rays_take_the_expected_jumps():
    # a small sphere in the corner octant: the other seven octants of the root (16 voxels)
    # are pruned, so a ray in them jumps once per octant it crosses, then ends
    world, _ = sphere_world(32, radius=1.0, centre=np.array([3.0, 3.0, 3.0]), voxel_size=1.0)
    sensor = Sensor(4, 1, fov_up=0.0, fov_down=0.0)  # level rays: -z, +x, +z, -x at yaw 0
    origins = np.array([[24.5, 24.5, 24.5]], np.float32)
    yaws = np.zeros(1, np.float32)
    depth, _sem, hit, steps, kinds = trace_counted(world, origins, yaws, sensor, 100.0)
    assert not hit.any()
    assert kinds["pruned"].reshape(-1).tolist() == [2, 1, 1, 2]
    assert kinds["end"].reshape(-1).tolist() == [1, 1, 1, 1]
    assert steps.reshape(-1).tolist() == [3, 2, 2, 3]
    assert kinds["descent"].reshape(-1).tolist() == [2, 1, 1, 2]
    for k in ("free", "sphere", "candidate"):
        assert not kinds[k].any()
