"""`navi-nb fuzz` and the navi_nb/fuzz/ package: the fast deterministic subset of each target, the runner's
process pool, the one outcome classifier every target uses, and the command."""

from __future__ import annotations

import time

import numpy as np
import pytest

from navi_nb.errors import NaviError
from navi_nb.fuzz import cache, checkpoint, gmdag, mesh, runfolder, runner
from navi_nb.fuzz.cases import Case, Target
from navi_nb.fuzz.outcomes import FAILURES, OUTCOMES, NonFinite, classify


def _in_process(target, seed, n, tmp_path):
    from collections import Counter

    bases = runner.TARGETS[target].bases()
    counts, by_mutator, failures = Counter(), Counter(), []
    for i in range(n):
        outcome, mutator, mode, detail = runner.run_case(target, bases, seed, i, tmp_path)
        counts[outcome] += 1
        by_mutator[mutator, outcome] += 1
        if outcome in FAILURES:
            failures.append((i, outcome, mutator, mode, detail))
    assert list(tmp_path.iterdir()) == []  # each case cleans up its files
    return counts, by_mutator, failures


def test_fuzz_gmdag_subset_every_mode_and_mutator(tmp_path):
    counts, by_mutator, failures = _in_process("gmdag", 2026, 600, tmp_path)
    assert failures == []
    assert counts["ok"] > 100 and counts["rejected"] > 100
    for name in gmdag.GMDAG_MUTATORS:  # each mutator ran and none only ever broke its base beyond reading
        assert by_mutator[name, "ok"] + by_mutator[name, "rejected"] > 0, name
    assert by_mutator["truncate", "ok"] == 0 and by_mutator["trailing", "ok"] == 0


def test_fuzz_cases_are_deterministic_by_seed():
    bases = gmdag.gmdag_bases()
    a = [gmdag.make_gmdag_case(bases, 5, i) for i in range(40)]
    b = [gmdag.make_gmdag_case(bases, 5, i) for i in range(40)]
    c = [gmdag.make_gmdag_case(bases, 6, i) for i in range(40)]
    assert [(x.data, x.sidecar, x.mutator, x.mode) for x in a] == [(x.data, x.sidecar, x.mutator, x.mode) for x in b]
    assert [x.data for x in a] != [x.data for x in c]
    assert {x.mode for x in a} == set(gmdag.LOAD_MODES)
    for i, x in enumerate(a):  # the label the parent gives a dead worker's case is the case's own
        assert gmdag.gmdag_label(5, i)[2:] == (x.mutator, x.mode)


def test_fuzz_mesh_subset(tmp_path):
    counts, by_mutator, failures = _in_process("mesh", 2026, 150, tmp_path)
    assert counts["ok"] > 20 and counts["rejected"] > 20
    assert failures == []
    for name in mesh.MESH_MUTATORS:
        assert by_mutator[name, "ok"] + by_mutator[name, "rejected"] > 0, name


def _selftest_bases():
    return None


def _selftest_make(bases, seed, index):
    return Case(index, ["fine", "bad", "crash", "hang", "bug", "nan", "warn"][index % 7], "-", b"")


def _selftest_run(case, folder, rng, bases):
    import os
    import signal

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
        np.float32(3e38) * np.float32(10)  # NumPy's overflow RuntimeWarning


def _selftest_label(seed, index):
    return None, 0, ["fine", "bad", "crash", "hang", "bug", "nan", "warn"][index % 7], "-"


def test_fuzz_runner_counts_crashes_and_hangs_in_child_processes():
    target = Target(_selftest_bases, _selftest_make, _selftest_run, _selftest_label)
    report = runner.run_fuzz(target, 16, seed=0, jobs=2, timeout=1.5, batch=4)
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


# --------------------------------------------------------------------------
# the one classifier, for every target
# --------------------------------------------------------------------------


def _raiser(exc, result=None):
    """A reader that raises ``exc``, or (``exc`` None) warns, then returns ``result``."""

    def call(*args, **kwargs):
        if exc is not None:
            raise exc
        np.float32(3e38) * np.float32(10)  # NumPy's overflow RuntimeWarning
        return result

    return call


FAULTS = {  # what a reader does -> the outcome every target must give it
    "one-line NaviError": (NaviError("refused"), "rejected"),
    "NaviError over lines": (NaviError("a\nb"), "traceback"),
    "NonFinite": (NonFinite("distance nan"), "non-finite"),
    "IndexError": (IndexError("a reader bug"), "traceback"),
    "ok with a warning": (None, "warning"),
}


class _StubFuzzer:
    """Stands for checkpoint.Fuzzer: mutate gives one case's bytes, load_bytes is the reader patched below."""

    def mutate(self, kind, index, seed):
        return "stub", b"PK"

    def load_bytes(self, kind, data):
        return {}


def _patch_reader(name, monkeypatch, exc):
    """Make the reader that target ``name``'s cases run raise ``exc`` (or warn, then answer as a good file
    would); the bases to run its cases with."""
    from navi_nb.world.compiler import compile_scene

    if name == "gmdag":
        monkeypatch.setattr(gmdag, "load_gmdag_case", _raiser(exc, compile_scene("box", 16)))
        return gmdag.gmdag_bases()
    if name == "mesh":
        import navi_nb.world.compiler as compiler

        monkeypatch.setattr(compiler, "compile_mesh", _raiser(exc, compile_scene("box", 16)))
        return mesh.mesh_bases()
    if name == "cache":
        bases = cache.cache_bases()
        monkeypatch.setattr(cache, "load_from_caches", _raiser(exc, bases.clean))
        return bases
    if name == "run-folder":  # the command raises or warns; its result then is the clean one
        bases = runfolder.run_folder_bases()
        monkeypatch.setattr(runfolder, "run_command", _raiser(exc))
        monkeypatch.setattr(runfolder, "result_of", lambda command, run, out: bases.clean[command])
        return bases
    stub = _StubFuzzer()
    monkeypatch.setattr(stub, "load_bytes", _raiser(exc, {}))
    return stub


def test_every_target_has_its_cases_classified_by_the_one_classifier(tmp_path, monkeypatch):
    """The same fault in any target's reader is the same outcome, and the one ``classify`` gives it; but for
    the cache target a one-line refusal is ``refused`` (its cache is writable: a damaged file is rebuilt), and
    for the gmdag and run-folder targets one that does not name the case's input is a ``traceback``
    (``Unnamed``)."""
    assert set(runner.TARGETS) == {"gmdag", "mesh", "checkpoint", "cache", "run-folder"}
    for module in (gmdag, mesh, checkpoint, cache, runfolder, runner):  # one vocabulary: no target keeps its own
        assert not hasattr(module, "OUTCOMES") and not hasattr(module, "FAILURES"), module.__name__
    assert set(FAILURES) < set(OUTCOMES)
    for what, (exc, expected) in FAULTS.items():
        assert classify(_raiser(exc))[0] == expected, what
        for name in runner.TARGETS:
            with monkeypatch.context() as m:
                bases = _patch_reader(name, m, exc)
                outcome, _mutator, _mode, detail = runner.run_case(name, bases, 0, 1, str(tmp_path))
            want = "refused" if name == "cache" and expected == "rejected" else expected
            if name in ("gmdag", "run-folder") and expected == "rejected":
                assert outcome == "traceback" and detail.startswith("a rejection not naming "), detail
                continue
            assert outcome == want, (name, what, outcome, detail)
            if exc is not None:
                assert detail.startswith(classify(_raiser(exc))[1].split(" at ")[0]), (name, what, detail)
    for index in (0, 1):  # the same rejection naming the gmdag case's input (bytes: caseN; else its file)
        case = gmdag.make_gmdag_case(gmdag.gmdag_bases(), 0, index)
        named = NaviError(f"{gmdag.gmdag_case_source(case, str(tmp_path))}: refused")
        with monkeypatch.context() as m:
            bases = _patch_reader("gmdag", m, named)
            assert runner.run_case("gmdag", bases, 0, index, str(tmp_path))[0] == "rejected", (index, str(named))
    assert list(tmp_path.iterdir()) == []


def test_checkpoint_target_cycles_kinds_or_keeps_one():
    """Case i of the checkpoint target is kind i % 3, kind-case i // 3; with one kind, case i is that kind's i."""
    both = checkpoint.checkpoint_target()
    policy = checkpoint.checkpoint_target(kinds=("policy",))
    for i in range(9):
        _rng, _base, name, kind = both.label(4, i)
        assert kind == checkpoint.KINDS[i % 3]
        assert name == checkpoint.case_mutator(4, kind, i // 3)[1]
        assert policy.label(4, i)[2:] == (checkpoint.case_mutator(4, "policy", i)[1], "policy")
    with pytest.raises(ValueError):
        checkpoint.checkpoint_target(kinds=("weights",))


def test_checkpoint_target_mutates_a_recurrent_runs_memory(tmp_path, monkeypatch):
    """The checkpoint target's run has a GRU memory, so its checkpoints hold ``memory.h`` and ``memory.start``;
    ``memory_state`` damages them: a state within [-1, 1] and 8 float32 ulps loads, one ulp more, NaN or another
    dtype or shape is one line; a reader that let such a state through would be a failure."""
    from navi_nb.fuzz.checkpoint import MEMORY_SIZE, read_members, write_members

    fuzzer = runner.TARGETS["checkpoint"].bases()
    assert fuzzer._ctx["cfg"].memory_size == MEMORY_SIZE > 0
    members = read_members(fuzzer.originals["checkpoint"])
    names = [n for n, _ in members]
    assert {"memory.h.npy", "memory.start.npy"} <= set(names)

    def with_h(value):
        h = np.full((fuzzer._ctx["cfg"].actors, MEMORY_SIZE), value, np.float32)
        buf = __import__("io").BytesIO()
        np.save(buf, h)
        return write_members([(n, buf.getvalue() if n == "memory.h.npy" else b) for n, b in members])

    ulp = 2.0**-23
    loaded = fuzzer.load_bytes("checkpoint", with_h(np.float32(-(1 + 8 * ulp))))
    assert np.all(loaded["memory.h"] == np.float32(-(1 + 8 * ulp)))
    for bad in (np.float32(1 + 9 * ulp), 1.5, np.nan):
        with pytest.raises(NaviError, match="memory state h"):
            fuzzer.load_bytes("checkpoint", with_h(bad))
    # the mutator's own cases: both ends, no failure, the rejections about the memory members
    results = [
        runner.run_case("checkpoint", fuzzer, 0, i, str(tmp_path))
        for i in range(0, 9000, 3)
        if checkpoint.checkpoint_label(0, i)[2] == "memory_state"
    ][:60]
    outcomes = [r[0] for r in results]
    assert len(results) == 60 and "ok" in outcomes and "rejected" in outcomes, outcomes
    assert not set(outcomes) & set(FAILURES), [r for r in results if r[0] in FAILURES][:3]
    assert all("memory" in r[3] for r in results if r[0] == "rejected"), [r[3] for r in results][:5]
    # a restore that checked nothing would show: the loaded state is one no GRU can hold
    from navi_nb.learn.policy import PolicyMemory

    def unchecked(self, state):
        self.h[...] = np.asarray(state["h"], dtype=self.h.dtype)

    monkeypatch.setattr(PolicyMemory, "set_state", unchecked)
    case = checkpoint.Case(0, "memory_state", "checkpoint", with_h(1.5))
    outcome, detail = classify(lambda: checkpoint.run_checkpoint_case(case, str(tmp_path), None, fuzzer))
    assert outcome == "non-finite" and "memory.h" in detail, detail


@pytest.mark.parametrize(
    "argv",
    [
        ["--target", "gmdag", "--run", "."],
        ["--target", "mesh", "--kind", "policy"],
        ["--target", "cache", "--run", "."],
        ["--target", "checkpoint", "--run", "no/such/run"],
        ["--show", "-1"],
    ],
)
def test_fuzz_command_refuses_flags_that_do_not_fit(argv, capsys):
    from navi_nb.cli import main

    assert main(["fuzz", *argv]) == 2
    assert "error:" in capsys.readouterr().err


def test_fuzz_command_refuses_a_folder_that_is_no_run(tmp_path, capsys):
    from navi_nb.cli import main

    assert main(["fuzz", "--target", "checkpoint", "--run", str(tmp_path), "--cases", "3", "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "Traceback" not in err


def test_fuzz_help_documents_every_exit_status(capsys):
    from navi_nb.cli import main

    with pytest.raises(SystemExit):
        main(["fuzz", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for status in ("exit status: 0", "1 when any case failed", "2 on bad arguments", "130 when interrupted"):
        assert status in text, status
