"""The ``cache`` fuzz target (navi_nb/fuzz/cache.py): a short run without failure that leaves the user's cache
alone, every mutator and special file of every file kind exercised, a case replayed by its index, and the
claim the target rests on: a damaged cache that loads equal to the clean one trains the same policy bits."""

from __future__ import annotations

import os

import numpy as np
import pytest

from navi_nb.fuzz import cache, runner
from navi_nb.fuzz.outcomes import FAILURES


@pytest.fixture
def users_cache(tmp_path, monkeypatch):
    """NAVI_NB_CACHE set to a folder the target must never make or write."""
    path = tmp_path / "users-cache"
    monkeypatch.setenv("NAVI_NB_CACHE", str(path))
    return path


def test_fuzz_cache_short_run_has_no_failure_and_leaves_the_users_cache_alone(tmp_path, users_cache):
    import json

    from navi_nb.cli import main

    out = tmp_path / "r.json"
    argv = ["fuzz", "--target", "cache", "--cases", "40", "--seed", "7", "--jobs", "1", "--no-progress"]
    assert main([*argv, "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["cases"] == 40 and r["counts"]["ok"] >= 30 and sum(r["counts"][o] for o in FAILURES) == 0
    assert set(r["by_mode"]) == set(cache.KINDS)
    assert not users_cache.exists() and os.environ["NAVI_NB_CACHE"] == str(users_cache)


def _first_cases(seed, n=3000):
    """The first case index of every (kind, mutator) and of every (kind, special file), from the labels
    (and, for a special, the case), so each is run once."""
    bases = cache.cache_bases()
    first = {}
    for i in range(n):
        _rng, _base, name, kind = cache.cache_label(seed, i)
        key = (kind, name)
        if name == "special":
            key = (kind, cache.make_cache_case(bases, seed, i).special)
        first.setdefault(key, i)
    return first


def test_every_mutator_and_special_file_of_every_kind_is_recovered_from(tmp_path, users_cache):
    """One case of each (kind, mutator) and (kind, special file): each ends ok, but a folder in a world
    cache file's place, which is refused in one line by design (and kept)."""
    bases = cache.cache_bases()
    first = _first_cases(11)
    want = {(k, m) for k in cache.KINDS for m in cache.mutator_names(k) if m != "special"}
    want |= {(k, s) for k in cache.KINDS for s in cache.SPECIALS}
    assert set(first) == want
    for (kind, name), index in sorted(first.items()):
        outcome, _mutator, mode, detail = runner.run_case("cache", bases, 11, index, tmp_path)
        expected = "rejected" if (kind, name) in cache.REFUSED_BY_DESIGN else "ok"
        assert (mode, outcome) == (kind, expected), (name, index, detail)
    assert list(tmp_path.iterdir()) == []  # nothing left in the case folder, no user's cache made


def test_a_cache_case_replays_by_index(tmp_path, users_cache, capsys):
    """The same (seed, index) is the same damage and the same outcome, in-process and by ``--case``; the
    label the runner gives a dead worker's case is the case's own."""
    from navi_nb.cli import main

    bases = cache.cache_bases()
    index = _first_cases(3)["layout", "layout-header"]
    a, b = cache.make_cache_case(bases, 3, index), cache.make_cache_case(bases, 3, index)
    assert (a.data, a.path, a.special, a.mutator, a.mode) == (b.data, b.path, b.special, b.mutator, b.mode)
    assert cache.cache_label(3, index)[2:] == (a.mutator, a.mode) == ("layout-header", "layout")
    assert a.data != bases.originals[cache.Path(a.path)]
    outcome = runner.run_case("cache", bases, 3, index, tmp_path)
    assert outcome == runner.run_case("cache", bases, 3, index, tmp_path) and outcome[0] == "ok"
    assert main(["fuzz", "--target", "cache", "--seed", "3", "--case", str(index)]) == 0
    assert f"case {index}: mutator layout-header, mode layout: ok" in capsys.readouterr().out
    assert not users_cache.exists()


def _train(root, name):
    """The state arrays of the tiny run over the cache target's scene set, trained in ``root/name`` with the
    cache now under NAVI_NB_CACHE."""
    from navi_nb.fuzz.checkpoint import tiny_config
    from navi_nb.train.loop import Trainer

    trainer = Trainer.create(tiny_config(root, cache.SCENES, name))
    try:
        trainer.train(progress=False)
        return trainer.state_arrays()
    finally:
        trainer.close()


def test_a_damaged_cache_that_loads_equal_trains_the_same_policy_bits(tmp_path, monkeypatch):
    """Equal loaded content means equal bits: a tiny run over a scratch cache with one file of each kind
    damaged (each a case the target found ok) ends in the same state, bit for bit, as over the clean cache."""
    import shutil

    bases = cache.cache_bases()
    want = [("world", "gmdag-node"), ("sidecar", "sidecar-edit"), ("pool", "npz-values"), ("layout", "swap")]
    damage = {}
    for i in range(400):  # the first case of each that changes its file
        case = cache.make_cache_case(bases, 5, i)
        if (case.mode, case.mutator) in want and case.data != bases.originals[cache.Path(case.path)]:
            damage.setdefault(case.mode, case)
    assert sorted(damage) == sorted(k for k, _ in want)
    for case in damage.values():
        assert runner.run_case("cache", bases, 5, case.index, tmp_path)[0] == "ok"
    damaged = tmp_path / "damaged-cache"
    shutil.copytree(bases.cache, damaged)
    for case in damage.values():
        (damaged / case.path).write_bytes(case.data)
    monkeypatch.setenv("NAVI_NB_CACHE", str(damaged))
    after_damage = _train(tmp_path / "runs", "damaged")
    for case in damage.values():  # every damaged file was found and rebuilt
        assert (damaged / case.path).read_bytes() != case.data, case.path
    clean = tmp_path / "clean-cache"
    shutil.copytree(bases.cache, clean)
    monkeypatch.setenv("NAVI_NB_CACHE", str(clean))
    bits = _train(tmp_path / "runs", "clean")
    assert sorted(after_damage) == sorted(bits)
    for key, value in bits.items():
        got = np.asarray(after_damage[key])
        assert got.dtype == value.dtype and got.shape == value.shape and got.tobytes() == value.tobytes(), key
