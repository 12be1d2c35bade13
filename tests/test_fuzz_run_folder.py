"""The ``run-folder`` fuzz target: links, FIFOs, folders or nothing in place of each entry of a tiny finished run,
under ``train --resume``, ``eval``, ``eval --no-save`` and ``render RUN --episode 0`` run in this process."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from navi_nb.fuzz import runfolder, runner
from navi_nb.fuzz.outcomes import FAILURES


@pytest.fixture(scope="module")
def bases():
    return runner.TARGETS["run-folder"].bases()


def test_cases_cover_every_entry_special_and_command():
    """Case i is combination i % len(COMBOS); the label the parent gives a dead worker's case is the case's."""
    assert (
        set(runfolder.COMBOS) == set(itertools.product(runfolder.ENTRIES, runfolder.SPECIALS, runfolder.COMMANDS))
        and len(runfolder.COMBOS) == 14 * 5 * 4
    )
    for entry in ("config.json", "worlds.json", "run.json", "metrics.csv", "metrics.jsonl", "policy.npz"):
        assert entry in runfolder.ENTRIES
    assert {".lock", ".lock.pid", "eval.json", "eval_episodes.npz", "checkpoints"} < set(runfolder.ENTRIES)
    for i in (0, 7, 279, 280, 100_007):
        case = runfolder.make_run_folder_case(None, 0, i)
        assert runfolder.run_folder_label(0, i)[2:] == (case.mutator, case.mode)
        assert (case.entry, case.special, case.mode) == runfolder.COMBOS[i % 280]


def test_the_clean_results_are_the_commands_own(bases):
    """The base is a finished run cut back by one checkpoint: resume trains it again, to the bits it had."""
    assert not (bases.base / runfolder.CUT).exists() and (bases.base / "policy.npz").is_file()
    assert set(bases.clean) == set(runfolder.COMMANDS)
    assert bases.without_policy["eval"] != bases.clean["eval"]  # the newest checkpoint is another policy


CLEAN_ENTRIES = (
    "config.json",
    "worlds.json",
    "worlds",
    "checkpoints/ckpt_00000001.npz",
    runfolder.CUT,
    "eval.json",
    ".lock",
    ".lock.pid",
)


def test_links_fifos_and_folders_end_in_a_refusal_or_the_clean_result(bases, tmp_path):
    """Every special in place of each of these entries, under one command each (cycling over the four): a
    one-line refusal naming the entry with nothing else changed, or the clean run's result with every link's
    target untouched."""
    from collections import Counter

    cases = [
        runfolder.COMBOS.index((e, s, runfolder.COMMANDS[(i + j) % 4]))
        for i, e in enumerate(CLEAN_ENTRIES)
        for j, s in enumerate(runfolder.SPECIALS)
    ]
    results = [(i, *runner.run_case("run-folder", bases, 0, i, str(tmp_path))) for i in cases]
    failures = [r for r in results if r[1] in FAILURES]
    assert not failures, failures[:3]
    seen = Counter(r[1] for r in results)
    assert seen["ok"] > 5 and seen["rejected"] > 5, seen
    assert list(tmp_path.iterdir()) == []  # each case removes what it made


def test_a_writer_that_follows_a_link_is_wrong(bases, tmp_path, monkeypatch):
    """The target sees a writer that writes through a link planted in a run folder: eval.json written through
    the link changes the file it points to."""
    i = runfolder.COMBOS.index(("eval.json", "link", "eval"))
    assert runner.run_case("run-folder", bases, 0, i, str(tmp_path))[0] == "rejected"  # refused before writing
    # without that check the link is replaced by the atomic write ("ok"); a writer that follows it is "wrong"
    monkeypatch.setattr("navi_nb.train.evaluate.check_run_entries", lambda *args, **kwargs: None)
    assert runner.run_case("run-folder", bases, 0, i, str(tmp_path))[0] == "ok"
    monkeypatch.setattr("navi_nb.train.runs.write_atomic", lambda path, data: Path(path).write_bytes(data))
    outcome, _mutator, _mode, detail = runner.run_case("run-folder", bases, 0, i, str(tmp_path))
    assert outcome == "wrong" and "wrote through the link in place of eval.json" in detail, detail


def test_a_refusal_that_does_not_name_the_entry_is_a_failure(bases, tmp_path, monkeypatch):
    from navi_nb.errors import NaviError

    def refuse(*args, **kwargs):
        raise NaviError("something is wrong")

    monkeypatch.setattr(runfolder, "run_command", refuse)  # a command whose refusal names nothing
    i = runfolder.COMBOS.index(("config.json", "fifo", "eval-no-save"))
    outcome, _mutator, _mode, detail = runner.run_case("run-folder", bases, 0, i, str(tmp_path))
    assert outcome == "traceback" and detail.startswith("a rejection not naming config.json"), detail
