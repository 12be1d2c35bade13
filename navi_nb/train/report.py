"""What `navi-nb train` prints around a run (the config it starts with and the summary it ends with) and what an
evaluation prints.

A run starts with the settings that define it (scenes, task, actors, steps,
seed) and those that differ from the defaults, a dozen lines at most;
``navi-nb train --print-config`` prints every setting with its meaning.
Field docstrings are written in reST; the console shows them without markup.
"""

from __future__ import annotations

import dataclasses
import json
import re

from navi_nb.learn.ppo import PPOConfig
from navi_nb.train.config import TrainConfig, field_docs

DEFINING = ("scenes", "task", "actors", "total_steps", "seed")
"""The settings every run's header shows, changed or not."""

_LITERAL = re.compile(r"``(.+?)``|`(.+?)`")


def plain_text(doc: str) -> str:
    """A reST docstring as console text: ``literal`` and `ref` markup removed, whitespace folded."""
    return " ".join(_LITERAL.sub(lambda m: m.group(1) or m.group(2), doc).split())


def format_value(v) -> str:
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    if v is None:
        return "none"
    return "(empty)" if v == "" else str(v)


def changed_settings(cfg: TrainConfig) -> dict:
    """name -> (value, default) of the settings that differ from ``TrainConfig()``."""
    defaults = TrainConfig().to_dict()
    return {k: (v, defaults[k]) for k, v in cfg.to_dict().items() if v != defaults[k]}


def print_config(console, cfg: TrainConfig, run_path=None, full=False):
    """The run's header: the defining and the changed settings; ``full``: every setting with its meaning."""
    from rich.markup import escape
    from rich.table import Table

    title = f"training config{f' {run_path}' if run_path else ''}, hash {cfg.hash()}"
    if full:
        docs = field_docs()
        t = Table(title=escape(title))
        t.add_column("setting", no_wrap=True)
        t.add_column("value", overflow="fold")
        t.add_column("meaning", style="dim")
        ppo = {f.name for f in dataclasses.fields(PPOConfig)}
        values = cfg.to_dict()
        for k in sorted(values, key=lambda k: k in ppo):  # the run's own settings, then PPO's (as the flags)
            t.add_row(k, escape(format_value(values[k])), escape(plain_text(docs.get(k, ""))))
        console.print(t)
        return
    changed = changed_settings(cfg)
    t = Table(title=escape(title), caption="all settings: navi-nb train --print-config", caption_justify="left")
    t.add_column("setting", no_wrap=True)
    t.add_column("value", overflow="fold")
    t.add_column("default", style="dim", overflow="fold")
    values = cfg.to_dict()
    for k in DEFINING:
        shown = format_value(values[k])
        if k == "total_steps":
            shown += f" ({cfg.num_updates:,} updates of {cfg.batch_size:,} steps)"
        t.add_row(k, escape(shown), escape(format_value(changed[k][1])) if k in changed else "")
    for k, (v, default) in changed.items():
        if k not in DEFINING:
            t.add_row(k, escape(format_value(v)), escape(format_value(default)))
    console.print(t)


def print_summary(console, trainer, summary: dict):
    from rich.table import Table

    t = Table(title="training summary")
    t.add_column("")
    t.add_column("value", overflow="fold")
    for k, v in summary.items():
        t.add_row(k, f"{v:,.4g}" if isinstance(v, float) else str(v))
    console.print(t)


def print_results(console, res):
    """An evaluation's results (``evaluate``'s) as `navi-nb eval` prints them: the table of success, SPL and
    distance overall, per split, family and difficulty bin, then the return and the policy's origin."""
    from navi_nb.train.coverage import evaluation_title, print_coverage_results

    if res.get("task") == "explore":
        return print_coverage_results(console, res)
    from rich import box
    from rich.table import Table

    t = Table(
        title=evaluation_title(res, res["task"]),
        caption="(95% intervals; distance: final distance to the goal, m"
        + ("; then by scene family" if len(res["families"]) > 1 else "")
        + (
            "; then by difficulty: the shortest path in m, and it over the straight line)"
            if res.get("difficulty")
            else ")"
        ),
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
    )
    t.add_column("worlds", no_wrap=True)
    for col in ("episodes", "success", "SPL", "distance"):
        t.add_column(col, justify="right", no_wrap=True)
    groups = [("all", res)] + list(res["splits"].items())
    families = list(res["families"].items()) if len(res["families"]) > 1 else []
    # labels short enough for the first column at 80 columns: "2-4 m" (the shortest path), "1.1-1.5x" (the detour)
    bins = [(f"{k} m", g) for k, g in res.get("difficulty", {}).get("geodesic_m", {}).items()]
    bins += [(f"{k}x", g) for k, g in res.get("difficulty", {}).get("ratio", {}).items()]
    sections = {len(groups), len(groups) + len(families)} if families else {len(groups)}
    for i, (name, g) in enumerate(groups + families + bins):
        if i in sections and i < len(groups + families + bins):
            t.add_section()
        (slo, shi), (plo, phi), (dlo, dhi) = g["success_rate_ci95"], g["spl_mean_ci95"], g["final_distance_mean_ci95"]
        t.add_row(  # sized to read whole at 80 columns with a family's name in the first column
            name,
            str(g["episodes"]),
            f"{g['success_rate']:.1%} ({100 * slo:.0f}-{100 * shi:.0f}%)",
            f"{g['spl_mean']:.2f} ({plo:.2f}-{phi:.2f})",
            f"{g['final_distance_mean']:.2f} ({dlo:.2f}-{dhi:.2f})",
        )
    console.print(t)
    if "generalization_gap" in res:
        console.print(f"generalization gap (train minus held-out success): {res['generalization_gap']:+.1%}")
    console.print(
        f"return {res['return_mean']:.3f} +- {res['return_std']:.3f}, length {res['length_mean']:.1f} "
        f"steps, {res['collisions_mean']:.2f} collisions per episode; policy {res['policy']['source']} "
        f"(update {res['policy']['update']}); {res['wall_s']:.1f} s"
    )
