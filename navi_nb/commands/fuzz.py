"""`navi-nb fuzz`: mutate real files, read them back, query what loads; print a table of outcomes.

    navi-nb fuzz --target gmdag --cases 100000 --seed 0 --jobs 2
    navi-nb fuzz --target mesh --cases 5000
    navi-nb fuzz --target checkpoint --cases 3000       # a tiny run's checkpoint, policy.npz, eval_episodes.npz
    navi-nb fuzz --target checkpoint --run RUN --kind policy   # that run's policy.npz only
    navi-nb fuzz --target cache --cases 100000 --jobs 2  # world cache entries, spawn pools, the layout file
    navi-nb fuzz --target run-folder --cases 280         # links, FIFOs, folders in a run folder's places
    navi-nb fuzz --target gmdag --seed 0 --case 1234     # replay one case here, with its traceback

Exit status (EXIT_STATUSES, printed by --help): 0 when no case failed; 1 when any case failed (with --case:
when that case failed); 2 on bad arguments or input; 130 when interrupted.
See docs/FUZZING.md and the navi_nb/fuzz/ package.
"""

from __future__ import annotations

EXIT_STATUSES = (
    "exit status: 0 when no case failed; 1 when any case failed (crash, hang, non-finite, traceback, "
    "wrong, refused, warning; with --case: when that case failed); 2 on bad arguments or input (a one-line "
    "error); 130 when interrupted"
)


def add_arguments(parser) -> None:
    parser.epilog = EXIT_STATUSES
    parser.add_argument(
        "--target",
        choices=("gmdag", "mesh", "checkpoint", "cache", "run-folder"),
        default="gmdag",
        help="what to fuzz: worlds, meshes, a run's checkpoint, policy.npz and eval_episodes.npz, the caches a "
        "run loads its scene set from (world cache entries and sidecars, spawn pools, the layout file; in a "
        "private temporary NAVI_NB_CACHE), or a run folder's files and folders replaced by links, FIFOs and "
        "folders under a resume, an evaluation and an episode's picture (default gmdag)",
    )
    parser.add_argument("--cases", type=int, default=10000, help="number of cases (default 10000)")
    parser.add_argument("--seed", type=int, default=0, help="seed: the same seed gives the same cases (default 0)")
    parser.add_argument("--jobs", type=int, default=0, help="worker processes (default: the usable cores)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds one case may take (default 10)")
    parser.add_argument(
        "--case",
        type=int,
        default=None,
        metavar="I",
        help="run only case I, in this process, and print its outcome and traceback",
    )
    parser.add_argument(
        "--run",
        metavar="RUN",
        default=None,
        help="with --target checkpoint: fuzz this run's files (a trained and evaluated run folder, never written) "
        "instead of a tiny run trained in a temporary folder",
    )
    parser.add_argument(
        "--kind",
        choices=("checkpoint", "policy", "episodes"),
        default=None,
        help="with --target checkpoint: fuzz only this file kind (default: case I is kind I %% 3)",
    )
    parser.add_argument("--show", type=int, default=20, metavar="N", help="print this many failures (default 20)")
    parser.add_argument("--keep", metavar="DIR", default=None, help="write the failing cases' input files to DIR")
    parser.add_argument("--json", metavar="FILE", default=None, help="also write the report as JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress display")


def _check(args):
    import math
    from pathlib import Path

    from navi_nb.errors import CliError

    if args.cases < 1 or args.cases > 100_000_000:
        raise CliError(f"--cases must be in 1..100000000, got {args.cases}")
    if args.jobs < 0 or args.jobs > 1024:
        raise CliError(f"--jobs must be in 0..1024 (0: the usable cores), got {args.jobs}")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise CliError(f"--timeout must be a positive number of seconds, got {args.timeout}")
    if args.seed < 0:
        raise CliError(f"--seed must be >= 0, got {args.seed}")
    if args.case is not None and args.case < 0:
        raise CliError(f"--case must be >= 0, got {args.case}")
    if args.show < 0:
        raise CliError(f"--show must be >= 0, got {args.show}")
    for flag, value in (("--keep", args.keep), ("--json", args.json)):
        if value is not None and not Path(value).parent.exists():
            raise CliError(f"{flag}: folder {Path(value).parent} does not exist")
    if args.target != "checkpoint":
        for flag, value in (("--run", args.run), ("--kind", args.kind)):
            if value is not None:
                raise CliError(f"{flag} goes with --target checkpoint, not --target {args.target}")
    if args.run is not None and not Path(args.run).is_dir():
        raise CliError(f"--run: {args.run} is not a run folder")


def _target(args):
    """The Target the flags name."""
    from navi_nb.fuzz import checkpoint, runner

    if args.target == "checkpoint" and (args.run is not None or args.kind is not None):
        return checkpoint.checkpoint_target(args.run, (args.kind,) if args.kind else checkpoint.KINDS)
    return runner.TARGETS[args.target]


def _replay(args, console) -> int:
    import shutil
    import tempfile
    import traceback

    from rich.markup import escape

    from navi_nb.fuzz import cases, runner
    from navi_nb.fuzz.outcomes import FAILURES

    t = _target(args)
    bases = t.bases()
    case = t.make(bases, args.seed, args.case)
    folder = tempfile.mkdtemp(prefix="navi_nb_fuzz_")
    try:
        if args.keep:
            import os

            os.makedirs(args.keep, exist_ok=True)
            console.print(f"input: {escape(cases.write_case(case, args.target, args.keep))}")
        outcome, mutator, mode, detail = runner.run_case(t, bases, args.seed, args.case, folder)
        console.print(escape(f"case {args.case}: mutator {mutator}, mode {mode}: {outcome} {detail}"), soft_wrap=True)
        if outcome == "traceback":  # run it again unguarded for the full traceback
            try:
                t.run(case, folder, __import__("numpy").random.default_rng([args.seed, args.case, 1]), bases)
            except Exception:  # noqa: BLE001  (printing it is the point)
                console.print(escape(traceback.format_exc()), soft_wrap=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 1 if outcome in FAILURES else 0


def outcome_table(report, title=None):
    """A rich Table that reads whole at 80 columns: one row per mutator (and per mode) with its ``ok`` and
    ``rejected`` counts, its failures in all, and which failures ("crash 2, hang 1"); ``--json`` has every
    count."""
    from rich.markup import escape
    from rich.table import Table

    from navi_nb.fuzz.outcomes import FAILURES

    table = Table(title=title, caption=f"failure kinds: {', '.join(FAILURES)} (--json has every count)")
    table.add_column("mutator / mode")
    for col in ("ok", "rejected", "failed"):
        table.add_column(col, justify="right")
    table.add_column("failures by kind")

    def cells(counts):
        failed = sum(counts[o] for o in FAILURES)
        kinds = ", ".join(f"{o} {counts[o]:,}" for o in FAILURES if counts[o])
        return [f"{counts[o]:,}" if counts[o] else "." for o in ("ok", "rejected")] + [
            f"{failed:,}" if failed else ".",
            kinds or ".",
        ]

    for group in (report.by_mutator, report.by_mode):
        for name, counts in sorted(group.items()):
            table.add_row(escape(name), *cells(counts))
        table.add_section()
    table.add_row("[bold]all[/]", *(f"[bold]{c}[/]" for c in cells(report.counts)))
    return table


def run(args) -> int:
    import json
    import os

    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from navi_nb.fuzz import runner

    _check(args)
    console = Console()
    if args.case is not None:
        return _replay(args, console)
    target = _target(args)
    if args.run is not None:  # refuse a folder that is no run here, in one line, before any worker starts
        target.bases()
    progress = Progress(
        TextColumn(f"fuzz {args.target}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=args.no_progress,
        transient=True,
    )
    with progress:
        task = progress.add_task("cases", total=args.cases)
        last = [0.0]

        def tick(done, total):
            import time

            now = time.monotonic()
            if now - last[0] > 0.2 or done == total:
                last[0] = now
                progress.update(task, completed=done)

        report = runner.run_fuzz(target, args.cases, args.seed, args.jobs or None, args.timeout, progress=tick)
    console.print(
        outcome_table(
            report,
            f"navi-nb fuzz --target {args.target} --cases {args.cases} "
            f"--seed {args.seed}: {report.jobs} jobs, {report.seconds:.1f} s",
        )
    )
    console.print(
        f"{report.cases:,} cases in {report.seconds:.1f} s "
        f"({report.cases / max(report.seconds, 1e-9):,.0f} cases/s), {report.jobs} worker processes, "
        f"{report.restarts} worker restarts; failures: {report.failed:,}",
        soft_wrap=True,
    )
    for index, outcome, mutator, mode, detail in report.failures[: args.show]:
        console.print(escape(f"  case {index} ({mutator}, {mode}): {outcome}: {detail}"), soft_wrap=True)
    if report.failed:
        extra = "".join(f" {flag} {value}" for flag, value in (("--run", args.run), ("--kind", args.kind)) if value)
        console.print(
            escape(f"replay one with: navi-nb fuzz --target {args.target}{extra} --seed {args.seed} --case I"),
            soft_wrap=True,
        )
    if args.keep and report.failures:
        os.makedirs(args.keep, exist_ok=True)
        paths = runner.failure_inputs(report, args.keep, target)
        console.print(f"wrote {len(paths)} failing inputs to {escape(args.keep)}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report.to_dict(), fh, indent=1)
    return 1 if report.failed else 0
