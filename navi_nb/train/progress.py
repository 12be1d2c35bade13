"""The live training display: a rich progress bar plus the latest update's figures.

Without a terminal (or with ``--no-progress``) it prints one plain line every
few updates instead, so logs stay readable.
"""
from __future__ import annotations

import math
import time


def _fmt(v, spec=".3g"):
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def stats_line(row) -> str:
    return (f"upd {row['update']}  {row['actor_steps_per_s']:,.0f} act-steps/s  "
            f"return {_fmt(row['ep_return_mean'])}  success {_fmt(row['success_rate'], '.0%')}  "
            f"pg {_fmt(row['policy_loss'])}  v {_fmt(row['value_loss'])}  "
            f"kl {_fmt(row['approx_kl'])}  ent {_fmt(row['entropy'])}")


class TrainProgress:
    def __init__(self, console, cfg, start_update, enabled=True):
        self.console = console
        self.cfg = cfg
        self.start_update = start_update
        self.enabled = enabled and console is not None and console.is_terminal
        self.plain = console is not None and not self.enabled
        self._progress = None
        self._t0 = time.perf_counter()
        self._last_print = 0.0

    def __enter__(self):
        if self.enabled:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                       TimeRemainingColumn)

            self._progress = Progress(
                TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TextColumn("updates"),
                TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
                TextColumn("{task.fields[steps]}"), TextColumn("\n{task.fields[stats]}"),
                console=self.console, transient=False, refresh_per_second=4)
            self._progress.__enter__()
            self._task = self._progress.add_task("train", total=self.cfg.num_updates, completed=self.start_update,
                                                 steps="", stats="collecting the first rollout...")
        return self

    def note(self, text):
        if self.console is not None:
            self.console.print(f"[dim]{text}[/]")

    def advance(self, row):
        if self._progress is not None:
            self._progress.update(self._task, completed=row["update"],
                                  steps=f"{row['global_step']:,} actor-steps", stats=stats_line(row))
        elif self.plain:
            now = time.perf_counter()
            done = row["update"] - self.start_update
            if now - self._last_print >= 5.0 or row["update"] == self.cfg.num_updates or done == 1:
                self._last_print = now
                rate = (now - self._t0) / max(done, 1)
                left = rate * (self.cfg.num_updates - row["update"])
                self.console.print(f"{stats_line(row)}  [{row['global_step']:,} steps, {left:.0f} s left]")

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.__exit__(*exc)
