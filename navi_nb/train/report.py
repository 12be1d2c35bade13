"""What `navi-nb train` prints around a run: the config it starts with and the summary it ends with.

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
