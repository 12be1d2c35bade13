"""`navi-nb eval RUN --episodes N [--scenes SPEC]`: deterministic (mean-action) evaluation on fresh seeds.

Evaluates in the run's own worlds, or in the worlds of ``--scenes SPEC``
(e.g. ``house:1000000-1000099``, the first hundred held-out houses), and
reports success, SPL and the final distance to the goal with 95 % intervals,
overall, per split (``train``: worlds the run trained in; ``held-out``: the
others) and per family. Worlds of SPEC that the run trained in are refused
unless ``--allow-overlap`` is given.
"""

from __future__ import annotations

from rich.markup import escape

from navi_nb.commands.flags import add_env
from navi_nb.env.config import EPISODE_SETTINGS


def add_arguments(parser) -> None:
    parser.add_argument("run", metavar="RUN", help="run folder, e.g. runs/house-pointgoal-s0")
    parser.add_argument("--episodes", type=int, default=100, metavar="N", help="episodes (default 100)")
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="evaluation seed (default: the run's seed + 1,000,003, never used in training)",
    )
    parser.add_argument(
        "--scenes",
        metavar="SPEC",
        default=None,
        help="evaluate in these worlds, a scene spec (default: the run's own set)",
    )
    parser.add_argument(
        "--allow-overlap",
        action="store_true",
        help="allow worlds of --scenes that the run trained in (reported as the train split)",
    )
    parser.add_argument(
        "--policy",
        choices=("auto", "final", "latest"),
        default="auto",
        help="final policy.npz, the newest checkpoint, or auto (final if present)",
    )
    parser.add_argument(
        "--json",
        metavar="FILE",
        nargs="?",
        const="-",
        default=None,
        help="also write the results as JSON (to FILE, or stdout with no FILE)",
    )
    parser.add_argument("--no-save", action="store_true", help="do not write eval.json / eval_episodes.npz")
    add_env(
        parser, "an episode setting to evaluate with instead of the run's (repeatable): " + ", ".join(EPISODE_SETTINGS)
    )


def run(args) -> int:
    from navi_nb.train.runs import RunError, os_error

    try:
        return _run(args)
    except OSError as exc:  # a full disk, a read-only folder: one line, not a traceback
        raise os_error(exc, "eval") from None
    except MemoryError:  # the size checks are lower bounds; what they let through may still not fit
        raise RunError("eval: ran out of RAM; use fewer episodes") from None


def _run(args) -> int:
    from rich.console import Console

    from navi_nb.train.evaluate import evaluate, results_json
    from navi_nb.train.report import print_results

    console = Console(stderr=args.json == "-")
    res = evaluate(
        args.run,
        episodes=args.episodes,
        seed=args.seed,
        source=args.policy,
        save=not args.no_save,
        console=console,
        scenes=args.scenes,
        allow_overlap=args.allow_overlap,
        env=dict(args.env or ()),
    )
    print_results(console, res)
    if not args.no_save:
        console.print(f"[dim]saved {escape(str(args.run))}/eval.json and eval_episodes.npz[/]")
    if args.json == "-":
        print(results_json(res))
    elif args.json:
        with open(args.json, "w") as fh:
            fh.write(results_json(res) + "\n")
    return 0
