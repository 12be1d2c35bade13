"""Fuzz: mutated .gmdag files end in GmdagError or a valid load, and queries on
every valid one run without crashing (acceptance 5)."""

from __future__ import annotations

import time

import numpy as np
from conftest import compiled_scene

from navi_nb.world import gmdag
from navi_nb.world.gmdag import GmdagError, from_bytes
from navi_nb.world.query import distance

N_CASES = 6000


def _bases():
    small = compiled_scene("box", 16)
    hand = gmdag.World(
        resolution=4,
        bmin=np.zeros(3, np.float32),
        voxel_size=0.5,
        nodes=np.array(
            [
                int(gmdag.encode_inner(0b10110101, 3)),
                int(gmdag.encode_leaf(0, 1.0)),
                int(gmdag.encode_leaf(2, 0.25)),
                1,
                2,
                1,
                2,
                8,
                int(gmdag.encode_inner(0xFF, 9)),
            ]
            + [2] * 8,
            dtype=np.uint64,
        ),
    )
    return [small.to_bytes(), hand.to_bytes()]


def _mutate(data: bytes, rng) -> bytes:
    b = bytearray(data)
    words = (len(b) - 32) // 8
    kind = rng.integers(8)
    if kind == 0:  # truncation
        return bytes(b[: rng.integers(0, len(b))])
    if kind == 1:  # trailing bytes
        return bytes(b) + bytes(rng.integers(0, 256, rng.integers(1, 17), dtype=np.uint8))
    if kind == 2:  # byte flips anywhere
        for _ in range(rng.integers(1, 5)):
            i = rng.integers(len(b))
            b[i] ^= int(rng.integers(1, 256))
        return bytes(b)
    if kind == 3:  # byte flips in the header
        i = rng.integers(32)
        b[i] ^= int(rng.integers(1, 256))
        return bytes(b)
    w = np.frombuffer(bytes(b[32:]), dtype="<u8").copy()
    leaf = (w >> np.uint64(63)) != 0
    slots = np.nonzero(~leaf)[0]
    i = int(rng.integers(words))
    if kind == 4:  # out-of-range child / child_base
        w[i] = (w[i] & np.uint64(0xFFFFFFFF00000000)) | np.uint64(int(rng.integers(words, 2**32)))
    elif kind == 5 and slots.size:  # cycles: a slot or base pointing back up
        j = int(slots[rng.integers(slots.size)])
        w[j] = (w[j] & np.uint64(0xFFFFFFFF00000000)) | np.uint64(int(rng.integers(0, max(1, j + 1))))
    elif kind == 6:  # mask / kind bits
        w[i] ^= np.uint64(1) << np.uint64(int(rng.integers(32, 64)))
    else:  # node_count field
        b[28:32] = int(rng.integers(0, words + 3)).to_bytes(4, "little")
        return bytes(b)
    return bytes(b[:32]) + w.astype("<u8").tobytes()


def test_fuzz_mutated_files():
    rng = np.random.default_rng(12345)
    bases = _bases()
    pts_rng = np.random.default_rng(7)
    counts = {"error": 0, "valid": 0}
    t0 = time.perf_counter()
    for case in range(N_CASES):
        data = _mutate(bases[case % len(bases)], rng)
        try:
            world = from_bytes(data, source=f"case{case}", validate=True)
        except GmdagError as exc:
            assert str(exc).startswith(f"case{case}: ")
            counts["error"] += 1
            continue
        counts["valid"] += 1
        span = float(world.extent) if np.isfinite(world.extent) else 1.0
        pts = world.bmin.astype(np.float64) + pts_rng.uniform(-0.2, 1.2, size=(16, 3)) * span
        d, s = distance(world, pts)
        assert d.shape == (16,) and s.shape == (16,)
        assert not np.any(np.isnan(d))
    elapsed = time.perf_counter() - t0
    print(f"fuzz: {N_CASES} cases, {counts} in {elapsed:.2f} s")
    assert counts["error"] > 1000 and counts["valid"] > 100  # both outcomes well exercised
    assert elapsed < 60


# --------------------------------------------------------------------------
# navi_nb.bench.fuzz: the fast deterministic subset of `navi-nb fuzz`
# --------------------------------------------------------------------------


def _in_process(target, seed, n, tmp_path):
    from collections import Counter

    from navi_nb.bench import fuzz

    bases = fuzz.TARGETS[target].bases()
    counts, by_mutator, failures = Counter(), Counter(), []
    for i in range(n):
        outcome, mutator, mode, detail = fuzz.run_case(target, bases, seed, i, tmp_path)
        counts[outcome] += 1
        by_mutator[mutator, outcome] += 1
        if outcome in fuzz.FAILURES:
            failures.append((i, outcome, mutator, mode, detail))
    assert list(tmp_path.iterdir()) == []  # each case cleans up its files
    return counts, by_mutator, failures


def test_fuzz_gmdag_subset_every_mode_and_mutator(tmp_path):
    from navi_nb.bench import fuzz

    counts, by_mutator, failures = _in_process("gmdag", 2026, 600, tmp_path)
    assert failures == []
    assert counts["ok"] > 100 and counts["rejected"] > 100
    for name in fuzz.GMDAG_MUTATORS:  # each mutator ran and none only ever broke its base beyond reading
        assert by_mutator[name, "ok"] + by_mutator[name, "rejected"] > 0, name
    assert by_mutator["truncate", "ok"] == 0 and by_mutator["trailing", "ok"] == 0


def test_fuzz_cases_are_deterministic_by_seed():
    from navi_nb.bench import fuzz

    bases = fuzz.gmdag_bases()
    a = [fuzz.make_gmdag_case(bases, 5, i) for i in range(40)]
    b = [fuzz.make_gmdag_case(bases, 5, i) for i in range(40)]
    c = [fuzz.make_gmdag_case(bases, 6, i) for i in range(40)]
    assert [(x.data, x.sidecar, x.mutator, x.mode) for x in a] == [(x.data, x.sidecar, x.mutator, x.mode) for x in b]
    assert [x.data for x in a] != [x.data for x in c]
    assert {x.mode for x in a} == set(fuzz.LOAD_MODES)
    for i, x in enumerate(a):  # the label the parent gives a dead worker's case is the case's own
        assert fuzz.gmdag_label(5, i)[2:] == (x.mutator, x.mode)


def test_fuzz_mesh_subset(tmp_path):
    from navi_nb.bench import fuzz

    counts, by_mutator, failures = _in_process("mesh", 2026, 150, tmp_path)
    assert counts["ok"] > 20 and counts["rejected"] > 20
    assert failures == []
    for name in fuzz.MESH_MUTATORS:
        assert by_mutator[name, "ok"] + by_mutator[name, "rejected"] > 0, name


def _selftest_bases():
    return None


def _selftest_make(bases, seed, index):
    from navi_nb.bench.fuzz import Case

    return Case(index, ["fine", "bad", "crash", "hang", "bug", "nan", "warn"][index % 7], "-", b"")


def _selftest_run(case, folder, rng):
    import os
    import signal

    from navi_nb.bench.fuzz import NonFinite
    from navi_nb.errors import NaviError

    if case.mutator == "bad":
        raise NaviError("case: refused")
    if case.mutator == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if case.mutator == "hang":
        time.sleep(60)
    if case.mutator == "bug":
        raise IndexError("oops")
    if case.mutator == "nan":
        raise NonFinite("distance nan")
    if case.mutator == "warn":
        import numpy as np

        np.float32(3e38) * np.float32(10)  # NumPy's overflow RuntimeWarning


def _selftest_label(seed, index):
    return None, 0, ["fine", "bad", "crash", "hang", "bug", "nan", "warn"][index % 7], "-"


def test_fuzz_runner_counts_crashes_and_hangs_in_child_processes():
    from navi_nb.bench import fuzz

    target = fuzz.Target(_selftest_bases, _selftest_make, _selftest_run, _selftest_label)
    report = fuzz.run_fuzz(target, 16, seed=0, jobs=2, timeout=1.5, batch=4)
    # cases 0..15: fine x3 (0, 7, 14), bad x3 (1, 8, 15), crash x2, hang x2, bug x2, nan x2, warn x2
    assert dict(report.counts) == {
        "ok": 3,
        "rejected": 3,
        "crash": 2,
        "hang": 2,
        "traceback": 2,
        "non-finite": 2,
        "warning": 2,
    }
    assert report.restarts == 4
    assert sorted(f[0] for f in report.failures if f[1] == "crash") == [2, 9]
    assert sorted(f[0] for f in report.failures if f[1] == "hang") == [3, 10]
    assert all("RuntimeWarning" in f[4] for f in report.failures if f[1] == "warning")
    assert all("signal 11" in f[4] for f in report.failures if f[1] == "crash")
    assert report.by_mutator["crash"]["crash"] == 2 and report.by_mutator["bug"]["traceback"] == 2


def test_fuzz_command_prints_the_outcome_table(tmp_path, capsys):
    import json

    from navi_nb.cli import main

    out = tmp_path / "r.json"
    assert (
        main(
            [
                "fuzz",
                "--target",
                "gmdag",
                "--cases",
                "80",
                "--seed",
                "3",
                "--jobs",
                "1",
                "--no-progress",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    for word in ("ok", "rejected", "crash", "hang", "non-finite", "traceback", "warning", "leaf-half", "mmap", "all"):
        assert word in text
    r = json.loads(out.read_text())
    assert r["cases"] == 80 and sum(r["counts"].values()) == 80 and r["counts"]["crash"] == 0
    assert main(["fuzz", "--cases", "0"]) == 2
