"""The live training display, laid out for an 80-column terminal first.

Line one always shows the bar, the update count, the actor-steps, the rate and
the time left; line two starts with the success rate (explore: the coverage of the episodes that ended and
of those running) and the mean return; the
losses, KL and entropy follow, whole fields moved to the next line where the
terminal is narrow (no figure is ever cut).

Without a terminal (or with ``--no-progress``) it prints one plain line every
few seconds instead, so logs stay readable and greppable.
"""

from __future__ import annotations

import math
import time

BAR_MIN, BAR_MAX = 10, 40
SEP = "  "


def _fmt(v, spec=".3g"):
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def clock(seconds) -> str:
    """``h:mm:ss`` (``-:--:--`` when unknown)."""
    if seconds is None or not math.isfinite(seconds):
        return "-:--:--"
    s = max(0, round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def key_fields(row, total_updates, seconds_left) -> list[str]:
    """What line one shows besides the bar: update, actor-steps, rate, time left."""
    return [
        f"upd {row['update']:,}/{total_updates:,}",
        f"{row['global_step']:,} steps",
        f"{row['actor_steps_per_s']:,.0f} steps/s",
        f"ETA {clock(seconds_left)}",
    ]


def stat_fields(row, elapsed=None) -> list[str]:
    """Success (explore: the coverage of the episodes ended and of those running) and return first, then the
    learning figures."""
    running = row.get("coverage_in_progress_mean", math.nan)  # finite for explore runs alone
    out = [
        f"coverage {_fmt(row['coverage_mean'], '.0%')} running {_fmt(running, '.0%')}"
        if math.isfinite(running)
        else f"success {_fmt(row['success_rate'], '.0%')}",
        f"return {_fmt(row['return_mean'])}",
        f"len {_fmt(row.get('length_mean'), '.0f')}",
        f"pg {_fmt(row['policy_loss'])}",
        f"v {_fmt(row['value_loss'])}",
        f"kl {_fmt(row['approx_kl'])}",
        f"ent {_fmt(row['entropy'])}",
    ]
    if elapsed is not None:
        out.append(f"elapsed {clock(elapsed)}")
    return out


def stats_line(row) -> str:
    """One plain line of every figure (the log form)."""
    return SEP.join(
        [
            f"upd {row['update']:,}",
            f"{row['global_step']:,} steps",
            f"{row['actor_steps_per_s']:,.0f} steps/s",
            *stat_fields(row),
        ]
    )


def pack(fields, width) -> list[str]:
    """Whole fields joined by two spaces, a new line wherever the next one would pass ``width``."""
    lines, cur = [], ""
    for f in fields:
        if cur and len(cur) + len(SEP) + len(f) > width:
            lines.append(cur)
            cur = f
        else:
            cur = f"{cur}{SEP}{f}" if cur else f
    if cur:
        lines.append(cur)
    return lines


class TrainDisplay:
    """A rich renderable of the run's state, laid out anew for the width it is drawn at."""

    def __init__(self, total_updates, start_update, clock_fn=time.perf_counter):
        self.total = total_updates
        self.start_update = start_update
        self.clock = clock_fn
        self.t0 = clock_fn()
        self.t_first = self.t_last = None  # when the first / latest update of this display finished
        self.row = None

    def update(self, row):
        now = self.clock()
        if self.t_first is None:
            self.t_first = now
        self.t_last = now
        self.row = row

    def seconds_left(self):
        """From the pace of the updates after the first (which carries compiling and warm-up)."""
        if self.row is None:
            return None
        done = self.row["update"] - self.start_update
        if done >= 2:
            per = (self.t_last - self.t_first) / (done - 1)
        else:
            per = self.t_last - self.t0
        left = per * (self.total - self.row["update"]) - (self.clock() - self.t_last)
        return max(left, 0.0)

    def lines(self, width):
        """(bar width, completed fraction, line-one text, the other lines) for ``width`` columns."""
        if self.row is None:
            key = [f"upd {self.start_update:,}/{self.total:,}", "collecting the first rollout..."]
            rest = []
            done = self.start_update
        else:
            key = key_fields(self.row, self.total, self.seconds_left())
            rest = stat_fields(self.row, self.clock() - self.t0)
            done = self.row["update"]
        frac = done / self.total if self.total else 1.0
        text = SEP.join(key)
        room = width - len(text) - 1
        if room >= BAR_MIN:
            return min(room, BAR_MAX), frac, text, pack(rest, width)
        # narrower than the key fields and a short bar: the bar gets a line of its own
        return min(width, BAR_MAX), frac, None, pack(key, width) + pack(rest, width)

    def __rich_console__(self, console, options):
        from rich.text import Text

        bar_width, frac, first, others = self.lines(options.max_width)
        filled = min(bar_width, int(round(frac * bar_width)))
        bar = Text("━" * filled, style="green")
        bar.append("━" * (bar_width - filled), style="grey23")
        if first is not None:
            bar.append(" " + first)
        yield bar
        for line in others:
            yield Text(line, no_wrap=True)


class TrainProgress:
    """The display as a context manager: live on a terminal, plain lines otherwise."""

    def __init__(self, console, cfg, start_update, enabled=True):
        self.console = console
        self.cfg = cfg
        self.start_update = start_update
        self.enabled = enabled and console is not None and console.is_terminal
        self.plain = console is not None and not self.enabled
        self.display = TrainDisplay(cfg.num_updates, start_update)
        self._live = None
        self._last_print = 0.0

    def __enter__(self):
        if self.enabled:
            from rich.live import Live

            self._live = Live(self.display, console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def note(self, text):
        if self.console is not None:
            from rich.markup import escape

            self.console.print(f"[dim]{escape(text)}[/]")

    def advance(self, row):
        self.display.update(row)
        if self._live is not None:
            self._live.refresh()
        elif self.plain:
            now = time.perf_counter()
            done = row["update"] - self.start_update
            if now - self._last_print >= 5.0 or row["update"] == self.cfg.num_updates or done == 1:
                self._last_print = now
                eta = f"ETA {clock(self.display.seconds_left())}"
                if self.console.is_terminal:  # --no-progress on a terminal: whole fields per line, as live
                    fields = [
                        f"upd {row['update']:,}/{self.cfg.num_updates:,}",
                        f"{row['global_step']:,} steps",
                        f"{row['actor_steps_per_s']:,.0f} steps/s",
                        eta,
                        *stat_fields(row),
                    ]
                    text = "\n".join(pack(fields, self.console.width))
                else:  # a log: one line per print, never broken
                    text = f"{stats_line(row)}  {eta}"
                self.console.print(text, soft_wrap=True, markup=False, highlight=False)

    def __exit__(self, *exc):
        if self._live is not None:
            self._live.__exit__(*exc)
