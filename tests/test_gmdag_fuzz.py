"""The ``.gmdag`` fuzz target as ``navi-nb fuzz --target gmdag`` runs it: a short run over the worker pool
(``navi_nb.fuzz.runner.run_fuzz``) ends with no failure, every base, mutator and load mode drawn, both the
``ok`` and the ``rejected`` end well exercised, and each rejection naming its input (the target checks it);
and the hand-written base is a valid world. The mutators and readers are the package's
(``navi_nb/fuzz/gmdag.py``, docs/FUZZING.md)."""

from __future__ import annotations

from collections import Counter

import numpy as np

from navi_nb.fuzz import gmdag, runner

SEED, CASES = 12345, 480


def test_a_short_gmdag_run_over_the_pool_has_no_failure():
    report = runner.run_fuzz("gmdag", cases=CASES, seed=SEED, jobs=2, timeout=60.0)
    assert report.failed == 0, report.failures
    assert report.counts["ok"] > CASES // 5 and report.counts["rejected"] > CASES // 5, report.counts
    assert set(report.by_mode) == set(gmdag.LOAD_MODES)
    assert set(report.by_mutator) == set(gmdag.GMDAG_MUTATORS)
    drawn = Counter(gmdag.gmdag_label(SEED, i)[1] for i in range(CASES))
    assert set(drawn) == set(range(gmdag.N_GMDAG_BASES)) and min(drawn.values()) > CASES // 8, drawn


def test_the_hand_written_base_is_a_valid_world_with_shared_slots():
    from navi_nb.world.gmdag import from_bytes
    from navi_nb.world.query import distance

    bases = gmdag.gmdag_bases()
    assert len(bases) == gmdag.N_GMDAG_BASES
    data, sidecar = bases[-1]
    world = from_bytes(data, source="hand", validate=True)  # the deep checks pass
    assert world.resolution == 4 and world.node_count == 17 and sidecar == {}
    slots = world.nodes[3:8].tolist() + world.nodes[9:17].tolist()
    assert Counter(slots) == {1: 2, 2: 10, 8: 1}  # leaves 1 and 2 shared by several parents
    d, _ = distance(world, np.array([[0.1, 0.1, 0.1], [1.0, 1.0, 1.0], [1.9, 1.9, 1.9]]))
    assert np.all(np.isfinite(d))
