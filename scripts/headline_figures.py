"""Headline figures: read them from real run folders, write docs/headline.json, rewrite every marked figure.

    python scripts/headline_figures.py [runs/house-quickstart --wall-s 254] [--held-out heldout.json] \\
        [--corpus runs/houses-mazes --corpus-held-out runs/houses-mazes/eval.json --corpus-wall-s 1100] \\
        [--ablation ROW FILE ...] [--long-ablation ROW FILE [FILE ...] ...] [--bench bench1.json ...] \\
        [--out docs/headline.json] [--docs README.md docs/TRAINING.md ...]

The README and the docs quote real runs' figures. Each quoted figure sits between markers that Markdown
renders as nothing::

    <!-- fig:corpus.house.success -->90 %<!-- /fig -->

This script is their one source. ``quickstart.*``: the defaults in one house (``navi-nb train --name
house-quickstart``), from its run folder (``config.json``; ``run.json``: actor-steps, rate, shard count, time
to first tick; ``eval.json``: the evaluation the train command ran in its own house). ``heldout.*``: with
``--held-out``, that policy's evaluation on the held-out houses (``navi-nb eval RUN --scenes
house:1000000-1000099 --episodes 200 --no-save --json heldout.json``). ``corpus.*``: with ``--corpus``,
``--corpus-held-out`` and ``--corpus-wall-s``, the README's quick start over 200 houses and 100 mazes (its
config, its last metrics row, its held-out evaluation in houses and in mazes, per family, and the whole
command's time). ``ablation.*``: with ``--ablation ROW FILE`` (repeated), TRAINING's table, each row a
held-out evaluation in both families of a run with the quick start's worlds. ``longway.*``: with
``--long-ablation ROW FILE [FILE ...]`` (repeated), TRAINING's long-way-round table, each row one run's held-out
evaluations that together hold houses, mazes, rooms and big mazes, with each family's long-detour bin. It
writes every figure, its text and where it came from (commands, machine, date) to ``docs/headline.json``,
then replaces the text inside every marker of the docs with the figure's text. A block not given keeps its
figures from the existing ``docs/headline.json`` (they name their own run).

``bench.*``: with ``--bench FILE ...``, the ``navi-nb bench --json FILE`` outputs of runs of every benchmark on
one machine: each figure is the median over the files, with its range when there are several (the issue
lines' figures: the tracer against Embree, the environment, training, PPO's scaling).

``--wall-s`` and ``--corpus-wall-s`` are the figures no run folder holds: the wall time of each whole command,
from ``pip install`` to the evaluation table (``time`` it). ``tests/test_headline.py`` checks that every
marker's text equals ``docs/headline.json`` and that every figure there is quoted somewhere.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HEADLINE = ROOT / "docs" / "headline.json"
DOCS = ("README.md", "CONTRIBUTING.md", "docs/TRAINING.md", "docs/PERFORMANCE.md")
MARKER = re.compile(r"<!-- fig:([\w.]+) -->(.*?)<!-- /fig -->")
INSTALL = 'python3 -m venv .venv && .venv/bin/pip install -e ".[image]"'
DEFAULTS_TRAIN = "navi-nb train --name house-quickstart"
DEFAULTS_COMMAND = f"{INSTALL} && .venv/bin/{DEFAULTS_TRAIN}"
"""The defaults in one house, as docs/PERFORMANCE.md gives it (the ``quickstart.*`` figures)."""
CORPUS_TRAIN = "navi-nb train --scenes house:0-199,maze:250-349 --sensor-az 32 --sensor-el 8 --env penalty_path=0.5"
CORPUS_TRAIN += " --total-steps 10000000 --memory-size 64 --name houses-mazes"
CORPUS_TRAIN += " --eval-episodes 0"
CORPUS_EVAL = "navi-nb eval runs/houses-mazes --scenes house:1000000-1000099,maze:1000000-1000099 --episodes 400"
QUICKSTART_COMMAND = f"{INSTALL} && .venv/bin/{CORPUS_TRAIN} && .venv/bin/{CORPUS_EVAL}"
"""The README's quick start: train over 200 houses and 100 mazes, evaluate in 100 held-out houses and 100 held-out
mazes, 200 episodes each (the ``corpus.*`` figures)."""
FAMILIES = ("house", "maze")
"""The scene families every held-out evaluation of the corpus and the ablation holds, figures per family."""


class HeadlineError(Exception):
    """A run folder or file that cannot give the figures (one line, naming it)."""


# ---------------------------------------------------------------- formats
ABLATION_ROWS = ("mlp_euclidean", "mlp_geodesic", "gru_geodesic")
"""TRAINING's ablation table: the quick start's recipe with each progress reward, and with the GRU memory,
each judged in held-out houses and held-out mazes (one evaluation per row, its figures per family)."""


def percent(v):
    """A rate as a percentage, one decimal only when needed: 96 %, 76.5 %."""
    p = round(100.0 * v, 1)
    return f"{p:.0f} %" if p == int(p) else f"{p:.1f} %"


def percent_range(ci):
    return f"{100.0 * ci[0]:.0f}-{100.0 * ci[1]:.0f} %"


def two(v):
    return f"{v:.2f}"


def two_range(ci):
    return f"{ci[0]:.2f}-{ci[1]:.2f}"


def sig3(v):
    """Three significant digits: 2.00, 10.8, 60.0, 151."""
    return f"{v:,.0f}" if abs(v) >= 999.5 else format(v, "#.3g").rstrip(".")


def whole(v):
    return f"{v:,.0f}"


def seconds1(v):
    return f"{v:.1f} s"


def minutes(v):
    m, s = divmod(int(round(v)), 60)
    return f"{m} min {s} s" if m else f"{s} s"


def mrays(v):
    return f"{v / 1e6:.2f} M"


def ratio(v):
    return f"{v:.2f}x"


def percent2(v):
    return f"{100.0 * v:.2f} %"


def text(v):
    return str(v)


def percent_or_dash(v):
    """A rate as ``percent`` gives it, or a dash where no episode fell in the group (``None``)."""
    return "–" if v is None else percent(v)


def over_runs(fmt):
    """A figure measured in several benchmark runs (a list, one value per run): the median, and the range
    when the runs differ in it."""

    def format_runs(values):
        import statistics

        mid, lo, hi = fmt(statistics.median(values)), fmt(min(values)), fmt(max(values))
        return mid if lo == hi else f"{mid} ({lo} to {hi})"

    return format_runs


FORMATS = {
    "percent": percent,
    "percent_range": percent_range,
    "two": two,
    "two_range": two_range,
    "sig3": sig3,
    "whole": whole,
    "seconds1": seconds1,
    "minutes": minutes,
    "text": text,
    "percent_or_dash": percent_or_dash,
    "runs_mrays": over_runs(mrays),
    "runs_ratio": over_runs(ratio),
    "runs_two": over_runs(two),
    "runs_percent2": over_runs(percent2),
    "runs_whole": over_runs(whole),
}

EVAL_FIGURES = (
    ("success", "success_rate", "percent", "success rate"),
    ("success_ci", "success_rate_ci95", "percent_range", "its 95 % Wilson interval"),
    ("spl", "spl_mean", "two", "mean SPL"),
    ("spl_ci", "spl_mean_ci95", "two_range", "its 95 % bootstrap interval"),
    ("collisions", "collisions_mean", "sig3", "mean collisions per episode"),
)
"""(figure, key in an evaluation's results, format, what it is): the figures of an evaluation's episodes, all of
them or one scene family's (each row of the ablation table, each family)."""
EVAL_DETAIL_FIGURES = (
    ("final_distance", "final_distance_mean", "two", "mean final distance to the goal, m"),
    ("final_distance_ci", "final_distance_mean_ci95", "two_range", "its 95 % bootstrap interval"),
    ("length", "length_mean", "sig3", "mean episode length, steps"),
)
"""The figures of the quick starts' evaluations besides ``EVAL_FIGURES``."""

LONGWAY_ROWS = (
    "mlp",
    "gru",
    "map",
    "mapgru",
    "mapgru_coarse",
    "mapgru_coarse_10m",
    "mapgru_coarse_gru",
    "mapgru_coarse_gru_10m",
    "mapgru_wide_gru_10m",
    "mapgru128_coarse_gru_10m",
    "gru128_10m",
    "mapgru128_coarse_gru_10m_zen4",
    "mapgru128_far_gru_10m",
    "mapgru128_far_gru_10m_bm150",
)
"""TRAINING's long-way-round table: one recipe over houses, mazes, rooms and big mazes with the MLP, the GRU
memory, the episodic map, the map with the GRU, and a coarser, smaller map crop with the GRU, read by the GRU and
both trunks or by the GRU alone (``--map-input memory``; each also trained at the quick start's length), and a
wider crop through the GRU with three times the big mazes, and the crop through a GRU of 128 units beside that GRU
without the map; that crop through the GRU of 128 again on a CPU that rounds like the reference, and there with the
map's coarse visits channel (``map_coarse``) beside it, and that over three times the big mazes; each judged on the
same held-out episodes per family."""
LONGWAY_FAMILIES = ("house", "maze", "rooms", "bigmaze")
LONG_DETOUR_BIN = "1.5+"
"""The difficulty bin of the episodes whose shortest path is 1.5 times the straight line or more."""
LONGWAY_FIGURES = (
    ("success", "success_rate", "percent", "success rate"),
    ("success_ci", "success_rate_ci95", "percent_range", "its 95 % Wilson interval"),
    ("spl", "spl_mean", "two", "mean SPL"),
    ("spl_ci", "spl_mean_ci95", "two_range", "its 95 % bootstrap interval"),
)
"""The figures of each row and family of the long-way-round table besides the detour bin's."""

# key -> (format, what it is)
FIGURES = {
    "quickstart.success": ("percent", "success rate, deterministic evaluation in the training house"),
    "quickstart.success_ci": ("percent_range", "its 95 % Wilson interval"),
    "quickstart.spl": ("two", "mean SPL"),
    "quickstart.spl_ci": ("two_range", "its 95 % bootstrap interval"),
    "quickstart.final_distance": ("two", "mean final distance to the goal, m"),
    "quickstart.length": ("sig3", "mean episode length, steps"),
    "quickstart.collisions": ("sig3", "mean collisions per episode"),
    "quickstart.actor_steps": ("whole", "actor-steps trained"),
    "quickstart.actor_steps_per_s": ("whole", "actor-steps per second over the training updates"),
    "quickstart.shards": ("whole", "shard count at the end of training"),
    "quickstart.first_tick": ("seconds1", "time to first tick, cold start"),
    "quickstart.wall": ("minutes", "wall time of the defaults' command (one house), install to evaluation table"),
    "heldout.success": ("percent", "the defaults' single-house policy on 100 held-out houses: success rate"),
    "heldout.success_ci": ("percent_range", "its 95 % Wilson interval"),
    "heldout.spl": ("two", "mean SPL"),
    "heldout.spl_ci": ("two_range", "its 95 % bootstrap interval"),
    "heldout.final_distance": ("two", "mean final distance to the goal, m"),
    "heldout.final_distance_ci": ("two_range", "its 95 % bootstrap interval"),
    "heldout.length": ("sig3", "mean episode length, steps"),
    "heldout.collisions": ("sig3", "mean collisions per episode"),
    **{
        f"corpus.{family}.{k}": (fmt, f"the quick start's policy in 100 held-out {family}s: {what}")
        for family in FAMILIES
        for k, _, fmt, what in EVAL_FIGURES + EVAL_DETAIL_FIGURES
    },
    "corpus.actor_steps": ("whole", "actor-steps trained"),
    "corpus.train_time": ("minutes", "training wall time (the run's last metrics row)"),
    "corpus.actor_steps_per_s": ("whole", "actor-steps per second over the whole training"),
    "corpus.wall": ("minutes", "wall time of the README's quick start command, install to held-out evaluation"),
    "corpus.shards": ("whole", "shard count at the end of training"),
    "corpus.shard_switches": ("whole", "shard-count switches the re-checks made"),
    "corpus.first_tick": ("seconds1", "time to first tick, cold start"),
    **{
        f"ablation.{row}.{family}.{k}": (fmt, f"{row} in held-out {family}s: {what}")
        for row in ABLATION_ROWS
        for family in FAMILIES
        for k, _, fmt, what in EVAL_FIGURES
    },
    **{
        f"ablation.{row}.{k}": (fmt, f"{row}: {what}")
        for row in ABLATION_ROWS
        for k, fmt, what in (
            ("train_time", "minutes", "training wall time of the evaluated run"),
            ("actor_steps_per_s", "whole", "its actor-steps per second over the whole training"),
        )
    },
    **{
        f"longway.{row}.{family}.{k}": (fmt, f"{row} in held-out {family} worlds: {what}")
        for row in LONGWAY_ROWS
        for family in LONGWAY_FAMILIES
        for k, _, fmt, what in LONGWAY_FIGURES
        + (
            ("detour_success", None, "percent_or_dash", f"success rate of its episodes in the {LONG_DETOUR_BIN} bin"),
            ("detour_episodes", None, "whole", f"its episodes in the {LONG_DETOUR_BIN} bin"),
        )
    },
    **{
        f"longway.{row}.{k}": (fmt, f"{row}: {what}")
        for row in LONGWAY_ROWS
        for k, fmt, what in (
            ("train_time", "minutes", "training wall time of the evaluated run"),
            ("actor_steps_per_s", "whole", "its actor-steps per second over the whole training"),
        )
    },
    "bench.machine": ("text", "the machine the benchmarks ran on, as navi-nb bench prints it"),
    "bench.runs": ("whole", "runs of navi-nb bench the bench figures are the median of"),
    "bench.trace_1t": ("runs_mrays", "navi_nb tracer, bench scene at 256, rays/s on 1 thread"),
    "bench.trace_2t": ("runs_mrays", "the same on 2 threads"),
    "bench.embree_1t": ("runs_mrays", "Embree on the same rays and the original triangles, 1 thread"),
    "bench.trace_vs_embree_1t": ("runs_ratio", "navi_nb's rays/s on 1 thread over Embree's"),
    "bench.trace_vs_embree_2t": ("runs_ratio", "navi_nb's rays/s per thread on 2 threads over Embree's 1 thread"),
    "bench.trace_scaling": ("runs_ratio", "navi_nb's rays/s from 1 to 2 threads"),
    "bench.trace_p99_voxel": ("runs_two", "99th percentile of |depth - Embree|, voxels"),
    "bench.trace_hits_equal": ("runs_percent2", "rays whose hit flag equals Embree's"),
    "bench.trace_outliers": ("runs_whole", "rays more than 2 voxels off Embree, of 65,536"),
    "bench.steps_bench": ("runs_two", "mean steps per ray, bench scene at 256"),
    "bench.steps_house": ("runs_two", "mean steps per ray, house:0 at 128"),
    "bench.env_1t": ("runs_whole", "environment, house, 64 actors x 64 x 16 rays: actor-steps/s on 1 thread"),
    "bench.env_2t": ("runs_whole", "the same on 2 threads"),
    "bench.ppo_default_scaling": ("runs_ratio", "PPO samples/s from 1 to 2 shards, the default 2 x 128 network"),
    "bench.ppo_small_scaling": ("runs_ratio", "the same, the small 2 x 64 network"),
    "bench.train_1s": ("runs_whole", "training end to end, house, 64 actors: actor-steps/s at 1 shard"),
    "bench.train_2s": ("runs_whole", "the same at 2 shards"),
}


def held_out_families(path, what):
    """A held-out evaluation's JSON and its results per family of ``FAMILIES`` (a HeadlineError names the file
    when it holds training worlds or lacks a family)."""
    res = read_eval(path, what)
    splits = res.get("splits") or {}
    if set(splits) != {"held-out"}:
        raise HeadlineError(f"{path}: is not a held-out evaluation (its splits: {', '.join(splits) or 'none'})")
    families = res.get("families") or {}
    missing = [f for f in FAMILIES if not isinstance(families.get(f), dict)]
    if missing:
        raise HeadlineError(
            f"{path}: has no {missing[0]} episodes (the evaluation must hold each of {', '.join(FAMILIES)}; "
            f"its families: {', '.join(families) or 'none'})"
        )
    return res, {f: families[f] for f in FAMILIES}


def ablation(pairs):
    """The ablation table's rows: ``(row, eval JSON)`` pairs, each a held-out evaluation in houses and mazes
    of a run with the quick start's worlds (its training time and rate read from the run folder the evaluation
    names)."""
    figs, sources = {}, {}
    for row, path in pairs:
        if row not in ABLATION_ROWS:
            raise HeadlineError(f"--ablation {row}: not a row of the table ({', '.join(ABLATION_ROWS)})")
        res, families = held_out_families(path, "a held-out evaluation")
        run = Path(str(need(res, "run", path)))
        steps, seconds = last_metrics(run)
        for family, fres in families.items():
            figs.update(eval_figures(f"ablation.{row}.{family}", fres, path, EVAL_FIGURES))
        figs[f"ablation.{row}.train_time"] = figure(f"ablation.{row}.train_time", seconds)
        figs[f"ablation.{row}.actor_steps_per_s"] = figure(f"ablation.{row}.actor_steps_per_s", steps / seconds)
        sources[row] = run_source(run, res, path)
    return figs, sources


def run_source(run, res, path):
    """Where a table row came from: the evaluation, the run's train command, its machine and date."""
    config = read_json(run / "config.json", "the run's config")
    segments = read_json(run / "run.json", "the run's record").get("segments") or [{}]
    return {
        "from": f"{Path(path).name}: navi-nb eval of {run.name}; its metrics.jsonl",
        "machine": machine_line(segments[-1]),
        "commands": [
            train_command(config.get("config"), run / "config.json"),
            f"navi-nb eval runs/{run.name} --scenes {res.get('scenes')} --episodes {res.get('episodes')}",
        ],
        "evaluation": {"episodes": res.get("episodes"), "seed": res.get("seed"), "scenes": res.get("scenes")},
        "date": config.get("created"),
    }


def last_metrics(run):
    """The actor-steps and seconds of a run's last metrics row."""
    try:
        last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    except (OSError, IndexError, ValueError) as exc:
        raise HeadlineError(f"{run / 'metrics.jsonl'}: cannot read the last metrics row ({exc})") from None
    return need(last, "global_step", run), need(last, "time_s", run)


def long_detours(res, family, path):
    """The episodes of one family whose shortest path is ``LONG_DETOUR_BIN`` times the straight line or more,
    from the evaluation's per-episode record: their count and success rate (``None`` when there are none)."""
    ep = res.get("per_episode") or {}
    try:
        fam, ratio, success = ep["family"], ep["ratio"], ep["success"]
    except KeyError as exc:
        raise HeadlineError(f"{path}: its per_episode record has no {exc.args[0]!r}") from None
    low = float(LONG_DETOUR_BIN.rstrip("+"))
    picked = [bool(s) for f, r, s in zip(fam, ratio, success) if f == family and r is not None and r >= low]
    return len(picked), (sum(picked) / len(picked) if picked else None)


def longway(groups):
    """The long-way-round table: ``[ROW, FILE, ...]`` groups, each a row of ``LONGWAY_ROWS`` and the held-out
    evaluations (``navi-nb eval --json``) of one run that together hold every family of ``LONGWAY_FAMILIES``
    once. Per family: success, SPL, their intervals and the success in the long-detour bin with its episode
    count; per row the run's training time and rate."""
    figs, sources = {}, {}
    for group in groups:
        row, paths = group[0], group[1:]
        if row not in LONGWAY_ROWS:
            raise HeadlineError(f"--long-ablation {row}: not a row of the table ({', '.join(LONGWAY_ROWS)})")
        if not paths:
            raise HeadlineError(f"--long-ablation {row}: names no evaluation file")
        if row in sources:
            raise HeadlineError(f"--long-ablation {row}: given twice")
        run, found, evals = None, {}, []
        for path in paths:
            res = read_eval(path, "a held-out evaluation")
            splits = res.get("splits") or {}
            if set(splits) != {"held-out"}:
                raise HeadlineError(f"{path}: is not a held-out evaluation (its splits: {', '.join(splits) or 'none'})")
            this = Path(str(need(res, "run", path)))
            if run is not None and this.name != run.name:
                raise HeadlineError(f"{path}: evaluates run {this.name}, not {run.name} as the row's other files")
            run = this
            evals.append((path, res))
            for family, fres in (res.get("families") or {}).items():
                if family in found:
                    raise HeadlineError(f"{path}: holds {family} episodes, as {found[family][0]} does")
                found[family] = (path, fres)
        missing = [f for f in LONGWAY_FAMILIES if f not in found]
        if missing:
            raise HeadlineError(f"--long-ablation {row}: no file holds {missing[0]} episodes")
        for family in LONGWAY_FAMILIES:
            path, fres = found[family]
            prefix = f"longway.{row}.{family}"
            for name, key, _, _ in LONGWAY_FIGURES:
                figs[f"{prefix}.{name}"] = figure(f"{prefix}.{name}", need(fres, key, path))
            n, rate = long_detours(dict(evals)[path], family, path)
            figs[f"{prefix}.detour_episodes"] = figure(f"{prefix}.detour_episodes", n)
            figs[f"{prefix}.detour_success"] = figure(f"{prefix}.detour_success", rate)
        steps, seconds = last_metrics(run)
        figs[f"longway.{row}.train_time"] = figure(f"longway.{row}.train_time", seconds)
        figs[f"longway.{row}.actor_steps_per_s"] = figure(f"longway.{row}.actor_steps_per_s", steps / seconds)
        source = run_source(run, evals[0][1], evals[0][0])
        source["from"] = f"{', '.join(Path(p).name for p, _ in evals)}: navi-nb eval of {run.name}; its metrics.jsonl"
        source["commands"][1:] = [
            f"navi-nb eval runs/{run.name} --scenes {res.get('scenes')} --episodes {res.get('episodes')}"
            for _, res in evals
        ]
        source["evaluation"] = [
            {"episodes": res.get("episodes"), "seed": res.get("seed"), "scenes": res.get("scenes")} for _, res in evals
        ]
        sources[row] = source
    return figs, sources


def text_of(key, value):
    """The figure ``key``'s text for ``value`` (what its markers must hold)."""
    if key not in FIGURES:
        raise HeadlineError(f"unknown figure {key!r}; known: {', '.join(FIGURES)}")
    return FORMATS[FIGURES[key][0]](value)


def figure(key, value):
    return {"value": value, "text": text_of(key, value), "what": FIGURES[key][1]}


# ---------------------------------------------------------------- reading
def read_json(path, what):
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise HeadlineError(f"{path}: cannot read {what} ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise HeadlineError(f"{path}: {what} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise HeadlineError(f"{path}: {what} is not a JSON object")
    return data


def read_eval(path, what):
    """An evaluation's JSON (``eval.json`` or ``navi-nb eval --json``) with its figures under today's names,
    whichever version wrote it (``evaluate.current_names``)."""
    from navi_nb.train.evaluate import current_names

    return current_names(read_json(path, what))


def need(data, key, path):
    v = data.get(key)
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        raise HeadlineError(f"{path}: has no finite {key!r}")
    return v


def eval_figures(prefix, res, path, table=None):
    """The figures under ``prefix`` of one evaluation's results (all its episodes', or one family's): each of
    ``table`` (default ``EVAL_FIGURES + EVAL_DETAIL_FIGURES``) that ``FIGURES`` has under that prefix."""
    out = {}
    for name, key, _, _ in EVAL_FIGURES + EVAL_DETAIL_FIGURES if table is None else table:
        k = f"{prefix}.{name}"
        if k in FIGURES:  # the defaults' own evaluation has no final-distance interval
            out[k] = figure(k, need(res, key, path))
    return out


def quickstart(run, wall_s):
    """The quick start's figures and where they came from."""
    run = Path(run)
    config = read_json(run / "config.json", "the run's config")
    record = read_json(run / "run.json", "the run's record (written when a train command ends)")
    ev = read_eval(run / "eval.json", "the run's evaluation")
    segments = record.get("segments")
    if not isinstance(segments, list) or not segments:
        raise HeadlineError(f"{run / 'run.json'}: has no training segments")
    if ev.get("scenes") != ev.get("train_scenes"):
        raise HeadlineError(
            f"{run / 'eval.json'}: evaluates {ev.get('scenes')!r}, not the run's own {ev.get('train_scenes')!r}: "
            "evaluate the run again with `navi-nb eval RUN` (held-out results go to --held-out)"
        )
    sums = [need(s, "summary", run / "run.json") for s in segments]
    # each train command's actor-steps over its update seconds (a resume adds a segment)
    steps = sum(need(s, "actor_steps_per_s", run / "run.json") * need(s, "wall_s", run / "run.json") for s in sums)
    train_s = sum(s["wall_s"] for s in sums)
    last = segments[-1]
    figs = {
        **eval_figures("quickstart", ev, run / "eval.json"),
        "quickstart.actor_steps": figure("quickstart.actor_steps", need(sums[-1], "actor_steps", run / "run.json")),
        "quickstart.actor_steps_per_s": figure("quickstart.actor_steps_per_s", steps / train_s),
        "quickstart.shards": figure("quickstart.shards", need(sums[-1], "shards", run / "run.json")),
        "quickstart.first_tick": figure("quickstart.first_tick", need(sums[0], "first_tick_s", run / "run.json")),
        "quickstart.wall": figure("quickstart.wall", float(wall_s)),
    }
    command = train_command(config.get("config"), run / "config.json")
    source = {
        "from": f"run folder {run.name}: config.json, run.json, eval.json",
        "date": config.get("created"),
        "finished": last.get("finished"),
        # the whole command of docs/PERFORMANCE.md when the run is the defaults', else the train command
        "commands": [DEFAULTS_COMMAND if command == DEFAULTS_TRAIN else command],
        "machine": machine_line(last),
        "segments": len(segments),
        "evaluation": {"episodes": ev.get("episodes"), "seed": ev.get("seed"), "scenes": ev.get("scenes")},
    }
    return figs, source


def train_command(settings, where):
    """The ``navi-nb train`` command that makes a run of these settings: a flag for each that differs
    from the defaults."""
    import shlex

    from navi_nb.errors import NaviError
    from navi_nb.train.config import flag_name, from_dict
    from navi_nb.train.report import changed_settings

    try:
        cfg = from_dict(settings, str(where))
    except NaviError as exc:
        raise HeadlineError(str(exc)) from None
    parts = ["navi-nb", "train"]
    for name, (value, _default) in changed_settings(cfg).items():
        if name == "run_dir":  # where the run was kept on its machine, no part of what it is
            continue
        flag = flag_name(name)
        if isinstance(value, bool):
            parts.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, list):
            parts += [flag, ",".join(str(v) for v in value)]
        elif isinstance(value, dict):
            for k, v in value.items():
                parts += [flag, f"{k}={v}"]
        else:
            parts += [flag, str(value)]
    return shlex.join(parts)


def heldout(path, run_name, machine):
    res = read_eval(path, "the held-out evaluation")
    splits = res.get("splits") or {}
    if set(splits) != {"held-out"}:
        raise HeadlineError(f"{path}: is not a held-out evaluation (its splits: {', '.join(splits) or 'none'})")
    source = {
        "from": f"{Path(path).name}: navi-nb eval of {run_name}",
        "commands": [f"navi-nb eval runs/{run_name} --scenes {res.get('scenes')} --episodes {res.get('episodes')}"],
        "evaluation": {"episodes": res.get("episodes"), "seed": res.get("seed"), "scenes": res.get("scenes")},
        "date": time.strftime("%Y-%m-%d", time.localtime(Path(path).stat().st_mtime)),  # the file's
        "machine": machine,
    }
    return eval_figures("heldout", res, path), source


def corpus(run, path, wall_s):
    """A run over a corpus of worlds (its config and last metrics row), its held-out evaluation in each family
    of ``FAMILIES`` and the wall time of the command that trained and evaluated it."""
    run = Path(run)
    config = read_json(run / "config.json", "the run's config")
    try:
        rows = (run / "metrics.jsonl").read_text().splitlines()
        last = json.loads(rows[-1])
    except (OSError, IndexError, ValueError) as exc:
        raise HeadlineError(f"{run / 'metrics.jsonl'}: cannot read the last metrics row ({exc})") from None
    steps, seconds = need(last, "global_step", run / "metrics.jsonl"), need(last, "time_s", run / "metrics.jsonl")
    res, families = held_out_families(path, "the corpus run's held-out evaluation")
    if Path(str(res.get("run", run))).name != run.name:
        raise HeadlineError(f"{path}: evaluates run {res.get('run')!r}, not {run}")
    record = read_json(run / "run.json", "the run's record (written when a train command ends)")
    sums = [need(s, "summary", run / "run.json") for s in record.get("segments") or []]
    if not sums:
        raise HeadlineError(f"{run / 'run.json'}: has no training segments")
    figs = {}
    for family, fres in families.items():
        figs.update(eval_figures(f"corpus.{family}", fres, path))
    figs.update(
        {
            "corpus.shards": figure("corpus.shards", need(sums[-1], "shards", run / "run.json")),
            "corpus.shard_switches": figure(
                "corpus.shard_switches", sum(need(s, "shard_switches", run / "run.json") for s in sums)
            ),
            "corpus.first_tick": figure("corpus.first_tick", need(sums[0], "first_tick_s", run / "run.json")),
            "corpus.actor_steps": figure("corpus.actor_steps", steps),
            "corpus.train_time": figure("corpus.train_time", seconds),
            "corpus.actor_steps_per_s": figure("corpus.actor_steps_per_s", steps / seconds),
            "corpus.wall": figure("corpus.wall", wall_s),
        }
    )
    from navi_nb.cores import cpu_model

    commands = [
        train_command(config.get("config"), run / "config.json"),
        f"navi-nb eval runs/{run.name} --scenes {res.get('scenes')} --episodes {res.get('episodes')}",
    ]
    source = {
        "from": f"run folder {run.name}: config.json, metrics.jsonl; {Path(path).name}: navi-nb eval of it",
        "date": config.get("created"),
        "commands": commands if commands != [CORPUS_TRAIN, CORPUS_EVAL] else [QUICKSTART_COMMAND],
        "machine": f"{cpu_model()}; navi_nb {config.get('navi_nb_version', '?')}",
        "evaluation": {"episodes": res.get("episodes"), "seed": res.get("seed"), "scenes": res.get("scenes")},
    }
    return figs, source


def bench_values(data, path):
    """One ``navi-nb bench --json`` output's value of every ``bench.*`` figure but the machine and run count."""

    def number(v, what):
        if not isinstance(v, (int, float)) or not math.isfinite(v):
            raise HeadlineError(f"{path}: {what} is not a finite number")
        return v

    def at(*keys):
        v = data
        for k in keys:
            if not isinstance(v, dict) or k not in v:
                raise HeadlineError(
                    f"{path}: has no {'.'.join(keys)} (a navi-nb bench --json output of every benchmark)"
                )
            v = v[k]
        return number(v, ".".join(keys))

    def train_rate(shards):
        runs = (data.get("train") or {}).get("runs") or []
        runs = [r for r in runs if isinstance(r, dict) and r.get("shards") == shards and r.get("ranks", 1) == 1]
        if len(runs) != 1:
            raise HeadlineError(f"{path}: has no single-process training run at {shards} shard(s)")
        return number(runs[0].get("actor_steps_per_s"), f"the training run at {shards} shard(s)'s actor_steps_per_s")

    t1, t2 = at("trace", "threads", "1", "rays_per_s"), at("trace", "threads", "2", "rays_per_s")
    embree = at("trace", "embree", "rays_per_s")
    return {
        "bench.trace_1t": t1,
        "bench.trace_2t": t2,
        "bench.embree_1t": embree,
        "bench.trace_vs_embree_1t": t1 / embree,
        "bench.trace_vs_embree_2t": t2 / 2.0 / embree,
        "bench.trace_scaling": t2 / t1,
        "bench.trace_p99_voxel": at("trace", "embree", "depth_diff_p99_voxels"),
        "bench.trace_hits_equal": at("trace", "embree", "hit_agreement"),
        "bench.trace_outliers": at("trace", "embree", "outliers", "outliers"),
        "bench.steps_bench": at("trace", "anatomy", "bench scene", "kinds", "steps", "mean"),
        "bench.steps_house": at("trace", "anatomy", "house:0 at 128", "kinds", "steps", "mean"),
        "bench.env_1t": at("env", "main", "1", "actor_steps_per_s"),
        "bench.env_2t": at("env", "main", "2", "actor_steps_per_s"),
        "bench.ppo_default_scaling": at("ppo", "nets", "default", "shards", "2", "speedup_vs_1"),
        "bench.ppo_small_scaling": at("ppo", "nets", "small", "shards", "2", "speedup_vs_1"),
        "bench.train_1s": train_rate(1),
        "bench.train_2s": train_rate(2),
    }


def bench(paths):
    """The ``bench.*`` figures over one or more ``navi-nb bench --json`` outputs, all from one machine."""
    runs = [(p, read_json(p, "a navi-nb bench output")) for p in paths]
    machines = {}
    for p, data in runs:
        m = data.get("machine")
        if not isinstance(m, dict) or not m.get("cpu"):
            raise HeadlineError(f"{p}: has no machine (a navi-nb bench --json output of every benchmark)")
        machines[p] = (
            f"{m['cpu']}, {m.get('allowed_cores', '?')} cores allowed of {m.get('cpu_count', '?')} reported; "
            f"Python {m.get('python', '?')}, NumPy {m.get('numpy', '?')}, Numba {m.get('numba', '?')}"
        )
    if len(set(machines.values())) > 1:
        p = next(p for p in machines if machines[p] != machines[paths[0]])
        raise HeadlineError(f"{p}: ran on {machines[p]!r}, not {machines[paths[0]]!r}: one machine's runs only")
    values = [bench_values(data, p) for p, data in runs]
    figs = {k: figure(k, [v[k] for v in values]) for k in values[0]}
    figs["bench.machine"] = figure("bench.machine", machines[paths[0]])
    figs["bench.runs"] = figure("bench.runs", len(runs))
    source = {
        "from": ", ".join(Path(p).name for p in paths),
        "commands": ["navi-nb bench --json FILE"],
        "machine": machines[paths[0]],
        "date": time.strftime("%Y-%m-%d", time.localtime(max(Path(p).stat().st_mtime for p in paths))),
        "load_average": [(data.get("trace") or {}).get("load_average_before") for _, data in runs],
    }
    return figs, source


def machine_line(segment):
    """The CPU the run recorded (else this machine's: run this script where the run ran), its cores and the
    run's software."""
    from navi_nb.cores import cpu_model

    sw = segment.get("software") or {}
    cores = ((segment.get("shards") or {}).get("start") or {}).get("cores") or {}
    cpu = sw.get("cpu") or cpu_model()
    return (
        f"{cpu}, {cores.get('allowed', '?')} cores allowed of {cores.get('cpu_count', '?')} reported; "
        f"Python {sw.get('python', '?')}, NumPy {sw.get('numpy', '?')}, Numba {sw.get('numba', '?')}, "
        f"navi_nb {sw.get('navi_nb', '?')}"
    )


# ---------------------------------------------------------------- writing
def markers(text):
    """(key, text inside, line number) of every marker in ``text``."""
    return [(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1) for m in MARKER.finditer(text)]


def rewrite(text, figures, where):
    """``text`` with every marker's inside replaced by its figure's text."""

    def sub(m):
        key = m.group(1)
        if key not in figures:
            line = text.count("\n", 0, m.start()) + 1
            raise HeadlineError(f"{where}:{line}: marker fig:{key} names no figure of headline.json")
        return f"<!-- fig:{key} -->{figures[key]['text']}<!-- /fig -->"

    return MARKER.sub(sub, text)


def build(
    run,
    wall_s,
    held_out=None,
    old=None,
    corpus_run=None,
    corpus_held_out=None,
    corpus_wall_s=None,
    bench_files=None,
    ablation_pairs=None,
    longway_groups=None,
):
    if (run is None) != (wall_s is None):
        raise HeadlineError("the quick start's run folder and --wall-s go together")
    if held_out is not None and run is None:
        raise HeadlineError("--held-out: needs the quick start's run folder (the policy it evaluates)")
    if run is not None:
        figs, source = quickstart(run, wall_s)
    else:
        figs, source = kept("quickstart", old, "the quick start's run folder")
    sources = {"quickstart": source}
    if held_out is not None:
        hfigs, sources["heldout"] = heldout(held_out, Path(run).name, source["machine"])
    else:
        hfigs, sources["heldout"] = kept("heldout", old, "--held-out")
    if not (corpus_run is None) == (corpus_held_out is None) == (corpus_wall_s is None):
        raise HeadlineError("--corpus, --corpus-held-out and --corpus-wall-s go together")
    if corpus_run is not None:
        cfigs, sources["corpus"] = corpus(corpus_run, corpus_held_out, corpus_wall_s)
    else:
        cfigs, sources["corpus"] = kept("corpus", old, "--corpus")
    if bench_files:
        bfigs, sources["bench"] = bench(bench_files)
    else:
        bfigs, sources["bench"] = kept("bench", old, "--bench")
    afigs, sources["ablation"] = ablation(ablation_pairs or ())
    if old and "ablation" in old.get("sources", {}):  # rows not given this time keep their figures
        for row, src in old["sources"]["ablation"].items():
            if row in ABLATION_ROWS and row not in sources["ablation"]:  # a row of today's table
                sources["ablation"][row] = src
                afigs.update({k: v for k, v in old["figures"].items() if k.startswith(f"ablation.{row}.")})
    lfigs, sources["longway"] = longway(longway_groups or ())
    if old and "longway" in old.get("sources", {}):  # rows not given this time keep their figures
        for row, src in old["sources"]["longway"].items():
            if row in LONGWAY_ROWS and row not in sources["longway"]:
                sources["longway"][row] = src
                lfigs.update({k: v for k, v in old["figures"].items() if k.startswith(f"longway.{row}.")})
    return {"figures": {**figs, **hfigs, **cfigs, **bfigs, **afigs, **lfigs}, "sources": sources}


def kept(block, old, flag):
    """A block of figures not given this time: the existing headline.json's, as it is (it names its run)."""
    if not old or block not in old.get("sources", {}):
        raise HeadlineError(f"{flag}: not given and no {block} figures in the existing headline.json")
    return {k: v for k, v in old["figures"].items() if k.startswith(block + ".")}, old["sources"][block]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", nargs="?", help="the quick start's run folder (else its figures are kept)")
    p.add_argument("--wall-s", type=float, help="seconds of the defaults' command, install to eval (with the run)")
    p.add_argument("--held-out", metavar="FILE", help="JSON of the held-out evaluation (navi-nb eval ... --json)")
    p.add_argument("--corpus", metavar="RUN", help="a run trained over many worlds (navi-nb train --scenes ...)")
    p.add_argument("--corpus-held-out", metavar="FILE", help="JSON of that run's held-out evaluation")
    p.add_argument("--corpus-wall-s", type=float, help="seconds of the README's quick start, install to eval")
    p.add_argument("--bench", nargs="+", metavar="FILE", help="navi-nb bench --json outputs, one machine's runs")
    p.add_argument(
        "--ablation",
        nargs=2,
        action="append",
        metavar=("ROW", "FILE"),
        help=f"a row of TRAINING's ablation table and its held-out evaluation JSON ({', '.join(ABLATION_ROWS)})",
    )
    p.add_argument(
        "--long-ablation",
        nargs="+",
        action="append",
        metavar="ROW FILE",
        help=f"a row of TRAINING's long-way-round table ({', '.join(LONGWAY_ROWS)}) and the held-out evaluation "
        f"JSONs that hold its families ({', '.join(LONGWAY_FAMILIES)})",
    )
    p.add_argument("--out", default=str(HEADLINE), help="headline JSON to write (default docs/headline.json)")
    p.add_argument("--docs", nargs="*", default=None, help="Markdown files to rewrite (default README and docs)")
    args = p.parse_args(argv)
    try:
        out = Path(args.out)
        old = read_json(out, "the headline figures") if out.is_file() else None
        data = build(
            args.run,
            args.wall_s,
            args.held_out,
            old,
            args.corpus,
            args.corpus_held_out,
            args.corpus_wall_s,
            args.bench,
            args.ablation,
            args.long_ablation,
        )
        docs = [Path(d) for d in args.docs] if args.docs is not None else [ROOT / d for d in DOCS]
        new_texts = {d: rewrite(d.read_text(), data["figures"], d) for d in docs}  # all checked before writing
    except (HeadlineError, OSError) as exc:
        print(f"headline_figures: {exc}", file=sys.stderr)
        return 2
    out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    for d, text in new_texts.items():
        d.write_text(text)
    used = {k for text in new_texts.values() for k, _, _ in markers(text)}
    print(f"wrote {out} ({len(data['figures'])} figures); rewrote {len(docs)} file(s)")
    for k in sorted(set(data["figures"]) - used):
        print(f"note: figure {k} is quoted in none of them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
