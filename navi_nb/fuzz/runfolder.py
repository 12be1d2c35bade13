"""The ``run-folder`` fuzz target: a link, a FIFO, a folder or nothing in place of each file a run folder
holds, and the commands that read and write run folders run on it, in this process.

The base is a tiny finished run (:func:`checkpoint.make_tiny_run`, in a private temporary ``NAVI_NB_CACHE``:
the user's cache is never read or written) with its newest checkpoint removed, so that ``train --resume``
trains its last update again and writes what a training run writes (a checkpoint, ``policy.npz``,
``metrics.csv``/``.jsonl``, ``run.json``). A case is one of every (entry, thing in its place, command), in a
fixed order (case ``index`` is combination ``index % len(COMBOS)``: the space is finite and small, so
``len(COMBOS)`` cases cover it all and later cases repeat it):

- the entry (:data:`ENTRIES`): each file and folder a run writes or reads, the lock files included;
- what is put in its place (:data:`SPECIALS`): a link to a copy of it outside the run (the *victim*), a
  link to nothing outside it, a FIFO, a folder holding a file, or nothing;
- the command (:data:`COMMANDS`): ``train --resume``, ``eval``, ``eval --no-save --json``,
  ``render RUN --episode 0``.

The command runs on a fresh copy of the base as ``navi-nb`` runs it. Then:

- a one-line ``NaviError`` that names the entry, with every other file of the folder as it was: ``rejected``;
  one that does not name it: a ``traceback`` (``Unnamed``);
- an end without error: ``ok`` when the command's result is the clean run's (the resumed checkpoint's
  arrays, the evaluation's episodes, the picture's bytes; for an evaluation with no regular ``policy.npz``,
  that of the newest checkpoint, as documented), else ``wrong``;
- either way, a victim changed or a link's missing target created (a writer that followed a link):
  ``wrong``; anything else as the one classifier says (a traceback; a FIFO opened for reading: a ``hang``).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import io
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from navi_nb.fuzz import checkpoint
from navi_nb.fuzz.cache import cache_folder
from navi_nb.fuzz.cases import Case, Target, bases_once
from navi_nb.fuzz.outcomes import Unnamed, WrongAnswer

CUT = "checkpoints/ckpt_00000002.npz"  # the base run's newest checkpoint, removed: resume trains it again
ENTRIES = (
    "config.json",
    "worlds.json",
    "worlds",
    "run.json",
    "metrics.csv",
    "metrics.jsonl",
    "checkpoints",
    "checkpoints/ckpt_00000001.npz",
    CUT,
    "policy.npz",
    "eval.json",
    "eval_episodes.npz",
    ".lock",
    ".lock.pid",
)
SPECIALS = ("link", "dangling", "fifo", "folder", "missing")
COMMANDS = ("resume", "eval", "eval-no-save", "render")
COMBOS = tuple((e, s, c) for e in ENTRIES for s in SPECIALS for c in COMMANDS)


def command_argv(command: str, run: Path, out: Path) -> list:
    """The ``navi-nb`` arguments of ``command`` on the run folder ``run``, its own outputs in ``out``."""
    return {
        "resume": ["train", "--resume", str(run), "--no-progress"],
        "eval": ["eval", str(run), "--episodes", "2"],
        "eval-no-save": ["eval", str(run), "--episodes", "2", "--no-save", "--json", str(out / "eval.json")],
        "render": ["render", str(run), "--episode", "0", "-o", str(out / "episode.png")],
    }[command]


def run_command(argv) -> None:
    """``navi-nb ARGV`` in this process as ``cli.main`` runs it, its output kept from the terminal, and its
    ``NaviError`` raised (not printed) for the classifier; a non-zero exit status otherwise is an error."""
    from navi_nb import cli

    args = cli.build_parser(only=argv[0]).parse_args(argv)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        status = int(importlib.import_module(cli.COMMANDS[args.command][0]).run(args) or 0)
    if status:
        raise RuntimeError(f"navi-nb {argv[0]} exited {status}: {err.getvalue()[-200:]}")


def result_of(command: str, run: Path, out: Path):
    """What ``command`` produced that the clean run's must equal: the resumed checkpoint's arrays, the
    evaluation's episodes and means, the picture's bytes (a digest each); ``WrongAnswer`` when it is not there."""
    try:
        return _result(command, run, out)
    except (OSError, ValueError, KeyError) as exc:
        raise WrongAnswer(f"{command} ended without error but left no readable result ({exc})") from None


def _result(command: str, run: Path, out: Path):
    if command == "resume":
        with np.load(run / CUT) as z:
            parts = [(k, np.asarray(z[k]).tobytes()) for k in sorted(z.files) if k != "meta.json"]
        return hashlib.sha256(repr(parts).encode()).hexdigest()
    if command == "render":
        return hashlib.sha256((out / "episode.png").read_bytes()).hexdigest()
    data = json.loads(((run if command == "eval" else out) / "eval.json").read_text())
    return json.dumps({k: data[k] for k in ("per_episode", "success_rate", "return_mean", "episodes")})


def snapshot(run: Path) -> dict:
    """Every entry of the run folder: relative path -> its kind and, for a regular file, its bytes' digest."""
    out = {}
    for folder, dirs, names in os.walk(run):
        for name in dirs + names:
            p = Path(folder) / name
            if p.is_symlink():
                out[str(p.relative_to(run))] = ("link", os.readlink(p))
            elif p.is_file():
                out[str(p.relative_to(run))] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
            elif not p.is_dir():
                out[str(p.relative_to(run))] = ("other", "")
    return out


@dataclass
class RunFolderBases:
    root: Path  # the process's private folder: cache/ (NAVI_NB_CACHE), base/ (the cut run)
    clean: dict = field(default_factory=dict)  # command -> its result on the clean base
    without_policy: dict = field(default_factory=dict)  # eval's results of the newest checkpoint (no policy.npz)

    def expected(self, case) -> str:
        """The result the case's command must give: the clean run's, but for an evaluation with no regular
        ``policy.npz``, which evaluates the newest checkpoint instead (``evaluate.load_run_policy``)."""
        if case.entry == "policy.npz" and case.special != "link" and case.mode in self.without_policy:
            return self.without_policy[case.mode]
        return self.clean[case.mode]

    @property
    def base(self) -> Path:
        return self.root / "base" / "run"


def build_bases(root) -> RunFolderBases:
    """Train and evaluate the tiny run in ``root`` (its own world cache), cut its newest checkpoint, and record
    each command's result on a clean copy."""
    bases = RunFolderBases(Path(root))
    with cache_folder(bases.root / "cache"):
        checkpoint.make_tiny_run(bases.root / "base")
        (bases.base / CUT).unlink()
        for command in COMMANDS:
            run, out = fresh_copy(bases, bases.root / "clean")
            run_command(command_argv(command, run, out))
            bases.clean[command] = result_of(command, run, out)
        for command in ("eval", "eval-no-save"):
            run, out = fresh_copy(bases, bases.root / "clean")
            (run / "policy.npz").unlink()
            run_command(command_argv(command, run, out))
            bases.without_policy[command] = result_of(command, run, out)
    return bases


_BASES = {}  # the process's RunFolderBases, made once


def run_folder_bases() -> RunFolderBases:
    """The process's base run (built the first time, in a temporary folder removed when the process ends)."""
    return bases_once(_BASES, "navi_nb_fuzz_run_folder_", build_bases)


def fresh_copy(bases, where: Path):
    """``(run, out)``: a new copy of the base run at ``where/run`` and an empty ``where/out``."""
    shutil.rmtree(where, ignore_errors=True)
    shutil.copytree(bases.base, where / "run", symlinks=True)
    (where / "out").mkdir()
    return where / "run", where / "out"


def plant(run: Path, victims: Path, entry: str, special: str) -> dict:
    """Put ``special`` in place of ``entry``; returns the victims to check afterwards: path -> snapshot
    (a copy of the entry outside the run that a link points to, or the missing target of a dangling link)."""
    path = run / entry
    victim = victims / entry.replace("/", "_")
    if path.is_dir():
        if special == "link":
            shutil.copytree(path, victim)
        shutil.rmtree(path)
    elif path.exists():
        if special == "link":
            shutil.copyfile(path, victim)
        path.unlink()
    elif special == "link":  # an entry the base run does not hold (the lock files, the cut checkpoint)
        victim.write_bytes(b"a file of the user's\n")
    if special == "link":
        path.symlink_to(victim)
    elif special == "dangling":
        path.symlink_to(victim)  # nothing there: a writer that follows the link would make it
    elif special == "fifo":
        os.mkfifo(path)
    elif special == "folder":
        path.mkdir()
        (path / "kept").write_bytes(b"a file of the user's\n")
    return {victim: victim_state(victim)}


def victim_state(path: Path):
    if not os.path.lexists(path):
        return None
    if path.is_dir():
        return snapshot(path)
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class RunFolderCase(Case):
    entry: str = ""
    special: str = ""


def run_folder_label(seed, index) -> tuple:
    """(generator, 0, mutator, command) of case ``index``: the mutator is ``SPECIAL ENTRY``."""
    entry, special, command = COMBOS[int(index) % len(COMBOS)]
    return None, 0, f"{special} {entry}", command


def make_run_folder_case(bases, seed, index) -> RunFolderCase:
    entry, special, command = COMBOS[int(index) % len(COMBOS)]
    return RunFolderCase(int(index), f"{special} {entry}", command, b"", entry=entry, special=special)


def run_run_folder_case(case: RunFolderCase, folder, rng, bases):
    from navi_nb.errors import NaviError

    work = Path(folder) / "run-folder"
    try:
        run, out = fresh_copy(bases, work)
        (work / "victims").mkdir()
        victims = plant(run, work / "victims", case.entry, case.special)
        before = {k: v for k, v in snapshot(run).items() if k != case.entry and not k.startswith(case.entry + "/")}
        error = None
        try:
            with cache_folder(bases.root / "cache"):
                run_command(command_argv(case.mode, run, out))
        except NaviError as exc:
            error = exc
        changed = [str(p.name) for p, state in victims.items() if victim_state(p) != state]
        if changed:
            raise WrongAnswer(f"{case.mode} wrote through the link in place of {case.entry} (its target changed)")
        if error is not None:
            text = str(error)
            name = Path(case.entry).name
            if "\n" not in text and name not in text:
                raise Unnamed(f"a rejection not naming {case.entry}: {type(error).__name__}: {text}")
            after = snapshot(run)
            moved = sorted(k for k, v in before.items() if after.get(k) != v)
            if moved and "\n" not in text:
                raise WrongAnswer(f"{case.mode} refused ({text}) after changing {', '.join(moved[:3])}")
            raise error
        got = result_of(case.mode, run, out)
        if got != bases.expected(case):
            raise WrongAnswer(f"{case.mode} ended without error but its result is not the clean run's")
    finally:
        shutil.rmtree(work, ignore_errors=True)


TARGET = Target(run_folder_bases, make_run_folder_case, run_run_folder_case, run_folder_label, "run-folder")
