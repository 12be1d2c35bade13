"""`navi-nb bench [NAME]`: run one benchmark, or all of them into one table.

Each benchmark is a module ``navi_nb/bench/NAME.py`` with
``add_arguments(parser)`` and ``run(args) -> dict``. A result dict may carry a
``"summary"`` list of ``[metric, value]`` rows for the combined table; other
top-level scalars are shown otherwise. The tables are laid out for 80 columns;
``--json`` keeps every figure.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

BENCHES = {
    "compile": "time and peak RAM to compile a ~35k-triangle mesh scene at 128/256/512",
    "meshfield": "points per second of the triangle distance field (the mesh compiler's hot path)",
    "trace": "rays per second of the batched sphere tracer (and Embree when installed)",
    "env": "actor-steps per second of the environment alone",
    "ppo": "PPO update samples per second at 1 and 2 shards (and PyTorch when installed)",
    "train": "end-to-end training actor-steps per second with the time split",
    "sb3": "navi_nb's trainer against Stable-Baselines3's PPO: throughput, and success at equal actor-steps",
}
ALL = ("compile", "meshfield", "trace", "env", "ppo", "train")
"""What ``bench all`` runs: every benchmark but ``sb3`` (minutes of training on each side)."""


def _module(name):
    return importlib.import_module(f"navi_nb.bench.{name}")  # every benchmark ships: an import error is a bug


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        metavar="FILE",
        nargs="?",
        const="-",
        default=None,
        help="also write the results as JSON (to FILE, or stdout with no FILE)",
    )
    sub = parser.add_subparsers(dest="bench_name", metavar="NAME")
    for name, help_ in BENCHES.items():
        p = sub.add_parser(name, help=help_, description=help_)
        _module(name).add_arguments(p)
    sub.add_parser("all", help="every benchmark but sb3 with its defaults, one table")


def _summary_rows(result):
    rows = result.get("summary")
    if rows:
        return [(str(m), str(v)) for m, v in rows]
    return [
        (k, f"{v:.4g}" if isinstance(v, float) else str(v))
        for k, v in result.items()
        if isinstance(v, (int, float, str)) and k != "machine"
    ]


def run(args) -> int:
    from rich.console import Console

    from navi_nb.bench.machine import print_machine, summary_table

    console = Console()
    names = [args.bench_name] if args.bench_name not in (None, "all") else list(ALL)
    results = {"machine": print_machine(console)}
    for name in names:
        mod = _module(name)
        if args.bench_name == name:
            bench_args = args
        else:  # defaults of that benchmark
            p = argparse.ArgumentParser()
            mod.add_arguments(p)
            bench_args = p.parse_args([])
        console.rule(f"bench {name}")
        results[name] = mod.run(bench_args) or {}
    if len(names) > 1:
        console.print(
            summary_table(
                "navi-nb bench: summary",
                None,
                sections=[(name, _summary_rows(results.get(name, {}))) for name in names],
            )
        )
    if args.json is not None:
        text = json.dumps(results, indent=1, default=str)
        if args.json == "-":
            sys.stdout.write(text + "\n")
        else:
            with open(args.json, "w") as fh:
                fh.write(text + "\n")
    return 0
