"""The decoded layout (navi_nb/world/layout.py) against the node words.

A second, plain-Python descent reads the `.gmdag` words through
``navi_nb.world.gmdag``'s decoders; the layout's descents (the integer one on
voxel index bits and the general float one) must find the same cell, leaf
distance (times the voxel scale) and semantic id at random points, including
points just outside the cube, in pruned octants and in collapsed leaves.
"""

import numpy as np
import pytest
from sense_helpers import reference_descend, slab_world, sphere_world

from navi_nb.world import gmdag
from navi_nb.world import layout as L
from navi_nb.world.field import nb_descend, nb_descend_float

WORLDS = {
    "sphere": lambda: sphere_world(32, radius=9.0, voxel_size=0.5)[0],
    "sphere_unpruned": lambda: sphere_world(16, radius=5.0, prune=False)[0],
    "slab_unsigned": lambda: slab_world(32, lo=10.2, hi=13.7, axis=1, unsigned=True),
}


@pytest.mark.parametrize("name", sorted(WORLDS))
@pytest.mark.parametrize("top_depth", [None, 0, 2])
def test_layout_descents_match_the_words(name, top_depth):
    world = WORLDS[name]()
    res = int(world.resolution)
    dscale = 1.0 / float(np.float32(world.voxel_size))
    lay = L.decode_layout(world, dscale, top_depth=top_depth)
    shift = -1
    if lay.top_code.shape[0] > 0 and res % lay.top_code.shape[0] == 0:
        shift = (res // lay.top_code.shape[0]).bit_length() - 1
    rng = np.random.default_rng(3)
    pts = rng.uniform(-0.3, res + 0.3, (600, 3))
    pts[:100] = np.floor(pts[:100]) + 0.5  # voxel centres, as the refinement reads them
    kinds = set()
    for p in pts:
        kind, dist, sem, lo, size = reference_descend(world, np.clip(p, 0.0, np.nextafter(res, 0)), dscale)
        kinds.add(kind)
        got_f = nb_descend_float(
            lay.child, lay.leaf_dist, lay.leaf_sem, lay.top_code, lay.top_level, p[0], p[1], p[2], float(res)
        )
        got_i = nb_descend(
            lay.child, lay.leaf_dist, lay.leaf_sem, lay.top_code, lay.top_level, p[0], p[1], p[2], float(res), shift
        )
        want = (kind, dist, sem, lo[0], lo[1], lo[2], size)
        assert tuple(got_f) == want, (p, got_f, want)
        assert tuple(got_i) == want, (p, got_i, want)
    assert 1 in kinds


def test_leaf_arrays_hold_every_reachable_leaf_once():
    world = WORLDS["sphere"]()
    lay = L.decode_layout(world, 2.0)
    nodes = world.nodes
    # every leaf code in the child table points at a leaf whose value is the word's, scaled
    codes = lay.child[lay.child < -1]
    ids = -codes - 2
    assert ids.max() < lay.leaf_dist.size and np.unique(ids).size == lay.leaf_dist.size
    leaves = nodes[gmdag.is_leaf(nodes)]
    dist, sem = gmdag.decode_leaf(leaves)
    want = {(float(d) * 2.0, int(s)) for d, s in zip(dist, sem)}
    got = {(float(d), int(s)) for d, s in zip(lay.leaf_dist, lay.leaf_sem)}
    assert got <= want
    assert L.top_depth_for(256) == L.TOP_DEPTH and L.top_depth_for(32) == 4 and L.top_depth_for(48) == 0
