"""An explore run's trained policy against a random policy and a wall-follower, on the same episodes.

    python scripts/explore_baselines.py runs/explore-houses \\
        --scenes house:1000000-1000049,rooms:1000000-1000049 --episodes 200 [--json FILE]

Runs ``navi_nb.train.baselines.compare`` (each policy through ``evaluate_policy``: the episodes ``navi-nb eval``
runs, seeded the run's seed + 1,000,003 unless ``--seed``) and prints the Markdown table of coverage after half
the step limit and after all of it, with 95 % intervals, per family (docs/TRAINING.md's explore section);
``--json`` also writes every policy's figures (without the per-episode arrays).
"""

from __future__ import annotations

import argparse
import json
import sys

from navi_nb.errors import NaviError
from navi_nb.train.baselines import compare, coverage_table


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", metavar="RUN", help="an explore run folder")
    parser.add_argument("--scenes", metavar="SPEC", required=True, help="the worlds to evaluate in (held out)")
    parser.add_argument("--episodes", type=int, default=100, metavar="N", help="episodes per policy (default 100)")
    parser.add_argument("--seed", type=int, default=None, help="evaluation seed (default: the run's + 1,000,003)")
    parser.add_argument("--json", metavar="FILE", default=None, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    try:
        results = compare(args.run, args.scenes, args.episodes, args.seed)
        print(coverage_table(results))
    except NaviError as exc:
        print(f"explore_baselines: {exc}", file=sys.stderr)
        return 2
    if args.json:
        figures = {name: {k: v for k, v in res.items() if k != "per_episode"} for name, res in results.items()}
        with open(args.json, "w") as fh:
            json.dump({"run": args.run, "scenes": args.scenes, "episodes": args.episodes, **figures}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
