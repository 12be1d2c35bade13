"""Per-update metrics: ``metrics.csv`` and ``metrics.jsonl`` in the run folder.

One row per PPO update, the same columns in both files, in the order of
``COLUMNS`` (documented in docs/TRAINING.md; the table there is this list).
Each row is flushed as it is written. On resume the rows after the
checkpoint's update are dropped (they belong to the part of the run that is
being redone), so a resumed run's files equal an uninterrupted run's, apart
from the timing columns.

TensorBoard event files go to ``tb/`` when ``tensorboardX`` (or
``torch.utils.tensorboard`` with ``tensorboard``) can be imported; otherwise
they are skipped and the console says so once.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from pathlib import Path

from navi_nb.files import open_append, open_regular, read_regular, write_atomic

# name, TensorBoard namespace, description
COLUMNS = [
    ("update", None, "PPO update number, 1-based"),
    ("global_step", None, "actor-steps collected so far (actors x rollout steps x updates)"),
    ("time_s", "perf", "seconds since this run (or its latest resume) started"),
    ("actor_steps_per_s", "perf", "actor-steps per second over this update, collection and learning together"),
    ("episodes", "charts", "episodes finished during this update's rollout"),
    ("return_mean", "charts", "mean return of those episodes (NaN if none finished)"),
    ("length_mean", "charts", "mean length in steps of those episodes (NaN if none)"),
    ("success_rate", "charts", "fraction of those episodes that reached the goal (point-goal; NaN if none)"),
    ("spl_mean", "charts", "mean success weighted by path length (point-goal; NaN if none)"),
    ("coverage_mean", "charts", "mean fraction of reachable visit cells covered per episode (explore; NaN otherwise)"),
    (
        "coverage_in_progress_mean",
        "charts",
        "mean coverage so far of the episodes still running at the rollout's end (explore, also when none ended; "
        "partway through, so below coverage_mean; NaN otherwise)",
    ),
    ("collisions_mean", "charts", "mean contacts per finished episode (NaN if none)"),
    ("reward_mean", "charts", "mean reward per actor-step over the rollout"),
    ("policy_loss", "losses", "clipped surrogate loss (mean over the update's minibatches)"),
    ("value_loss", "losses", "value loss (mean over minibatches)"),
    ("entropy", "losses", "policy entropy per sample (mean over minibatches)"),
    ("approx_kl", "losses", "approximate KL(old || new), mean over minibatches"),
    ("clip_frac", "losses", "fraction of samples whose ratio was clipped"),
    ("explained_var", "losses", "explained variance of the value targets by the old values"),
    ("grad_norm", "losses", "global gradient norm before clipping (mean over minibatches)"),
    ("learning_rate", "charts", "Adam learning rate used in this update"),
    ("t_collect_s", "perf", "seconds spent collecting the rollout (policy + environment + tracing)"),
    ("t_learn_s", "perf", "seconds spent in GAE and the PPO epochs"),
]
COLUMN_NAMES = [c[0] for c in COLUMNS]
INT_COLUMNS = {"update", "global_step", "episodes"}
RENAMED_COLUMNS = {"ep_return_mean": "return_mean", "ep_length_mean": "length_mean"}
"""Columns under the names that files written by earlier versions give them: the readers rename them."""


def _clean(name, value):
    if name in INT_COLUMNS:
        return int(value)
    v = float(value)
    return v


def _json_value(v):
    # JSON has no NaN; write null (documented), read back as NaN
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class MetricsLog:
    """Writes one row per update to metrics.csv, metrics.jsonl (and TensorBoard)."""

    def __init__(self, run_dir, resume_update=None, console=None, tensorboard=True):
        self.run_dir = Path(run_dir)
        self.csv_path = self.run_dir / "metrics.csv"
        self.jsonl_path = self.run_dir / "metrics.jsonl"
        if resume_update is not None:
            truncate_metrics(self.run_dir, resume_update)
        self._csv = open_append(self.csv_path, "metrics table", newline="")
        try:
            self._jsonl = open_append(self.jsonl_path, "metrics log")
        except BaseException:
            self._csv.close()
            raise
        new_csv = os.fstat(self._csv.fileno()).st_size == 0
        self._writer = csv.writer(self._csv, lineterminator="\n")
        if new_csv:
            self._writer.writerow(COLUMN_NAMES)
            self._csv.flush()
        self.tb = None
        self.tb_note = None
        if tensorboard:
            self.tb, self.tb_note = _open_tensorboard(self.run_dir / "tb")
            if console is not None and self.tb_note:
                console.print(f"[dim]{self.tb_note}[/]")

    def write(self, row: dict):
        missing = [c for c in COLUMN_NAMES if c not in row]
        extra = [k for k in row if k not in COLUMN_NAMES]
        if missing or extra:
            raise KeyError(f"metrics row: missing {missing}, unknown {extra}")
        values = [_clean(c, row[c]) for c in COLUMN_NAMES]
        self._writer.writerow([repr(v) if isinstance(v, float) else v for v in values])
        self._csv.flush()
        self._jsonl.write(json.dumps({c: _json_value(v) for c, v in zip(COLUMN_NAMES, values)}) + "\n")
        self._jsonl.flush()
        if self.tb is not None:
            step = int(row["global_step"])
            for (name, ns, _), v in zip(COLUMNS, values):
                if ns is not None and isinstance(v, float) and math.isfinite(v):
                    self.tb.add_scalar(f"{ns}/{name}", v, step)

    def close(self):
        for f in (self._csv, self._jsonl):
            try:
                f.flush()
                os.fsync(f.fileno())
            except (OSError, ValueError):
                pass
            f.close()
        if self.tb is not None:
            self.tb.close()
            self.tb = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _open_tensorboard(folder):
    """(writer or None, note or None)."""
    try:
        from tensorboardX import SummaryWriter  # type: ignore
    except ImportError:
        try:
            import tensorboard  # noqa: F401  type: ignore
            from torch.utils.tensorboard import SummaryWriter  # type: ignore
        except ImportError:
            return None, "TensorBoard event files skipped: neither tensorboardX nor tensorboard is installed"
    return SummaryWriter(str(folder)), f"TensorBoard event files: {folder}"


def truncate_metrics(run_dir, update: int):
    """Keep only rows with ``update <= update`` (and drop a torn last line); columns under earlier names
    (``RENAMED_COLUMNS``) are renamed, and CSV rows written before a column existed get it as ``nan``, so that a
    resumed run's rows go on under one header."""
    run_dir = Path(run_dir)
    csv_path, jsonl_path = run_dir / "metrics.csv", run_dir / "metrics.jsonl"
    if csv_path.exists():
        lines = read_regular(csv_path, "metrics file").decode("utf-8").splitlines(keepends=True)
        keep = []
        for i, line in enumerate(lines):
            if not line.endswith("\n"):
                break  # torn write
            if i == 0:
                keep.append(",".join(RENAMED_COLUMNS.get(c, c) for c in line.rstrip("\r\n").split(",")) + "\n")
                continue
            try:
                u = int(line.split(",", 1)[0])
            except ValueError:
                break
            if u > update:
                break
            keep.append(line)
        write_atomic(csv_path, "".join(under_current_header(keep)).encode("utf-8"))
    if jsonl_path.exists():
        keep = []
        for line in read_regular(jsonl_path, "metrics file").decode("utf-8").splitlines(keepends=True):
            if not line.endswith("\n"):
                break
            try:
                row = json.loads(line)
                u = int(row["update"])
            except (ValueError, KeyError, TypeError):
                break
            if u > update:
                break
            if any(k in RENAMED_COLUMNS for k in row):
                line = json.dumps({RENAMED_COLUMNS.get(k, k): v for k, v in row.items()}) + "\n"
            keep.append(line)
        write_atomic(jsonl_path, "".join(keep).encode("utf-8"))


def under_current_header(lines: list) -> list:
    """CSV ``lines`` (header first) under ``COLUMN_NAMES``, a column the header lacks written ``nan``; lines
    whose header holds a column unknown today are kept as they are."""
    header = lines[0].rstrip("\r\n").split(",") if lines else COLUMN_NAMES
    if header == COLUMN_NAMES or not set(header) <= set(COLUMN_NAMES):
        return lines
    rows = [dict(zip(header, line.rstrip("\r\n").split(","))) for line in lines[1:]]
    return [",".join(COLUMN_NAMES) + "\n"] + [",".join(r.get(c, "nan") for c in COLUMN_NAMES) + "\n" for r in rows]


def read_metrics_csv(path) -> list:
    """Rows of metrics.csv as dicts of numbers (NaN stays NaN; earlier names renamed, ``RENAMED_COLUMNS``)."""
    with io.TextIOWrapper(open_regular(path, "metrics file"), encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return [{RENAMED_COLUMNS.get(k, k): (int(v) if k in INT_COLUMNS else float(v)) for k, v in r.items()} for r in rows]


def read_metrics_jsonl(path) -> list:
    """Rows of metrics.jsonl as dicts (null read back as NaN; earlier names renamed, ``RENAMED_COLUMNS``)."""
    out = []
    with io.TextIOWrapper(open_regular(path, "metrics file"), encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            out.append({RENAMED_COLUMNS.get(k, k): (float("nan") if v is None else v) for k, v in r.items()})
    return out


def columns_markdown() -> str:
    """The column table for docs/TRAINING.md."""
    buf = io.StringIO()
    buf.write("| column | TensorBoard tag | meaning |\n|---|---|---|\n")
    for name, ns, desc in COLUMNS:
        buf.write(f"| `{name}` | {f'`{ns}/{name}`' if ns else '(x axis)'} | {desc} |\n")
    return buf.getvalue()


SERIES_LABELS = {"success_rate": "success", "spl_mean": "SPL"}  # legend names of the usual columns
SERIES_COLOURS = [(30, 90, 200), (220, 90, 30), (40, 150, 60), (150, 60, 160)]
SMOOTHING_SHARE = 0.04  # the centred window spans this share of the rows (at least 1 row, an odd count)


def smooth(values, window: int) -> list:
    """Centred moving average: entry i is the mean of the finite values among ``values[i - h .. i + h]``
    (``h = window // 2``, the window cut at both ends), NaN where there are none. A NaN row (no episode
    finished) neither counts nor breaks the line."""
    h = max(0, int(window) // 2)
    vals = [float(v) for v in values]
    out = []
    for i in range(len(vals)):
        near = [v for v in vals[max(0, i - h) : i + h + 1] if math.isfinite(v)]
        out.append(sum(near) / len(near) if near else float("nan"))
    return out


def smoothing_window(n_rows: int) -> int:
    """The window ``plot_metrics`` smooths over: ``SMOOTHING_SHARE`` of the rows, rounded to an odd count."""
    w = max(1, int(round(n_rows * SMOOTHING_SHARE)))
    return w if w % 2 else w + 1


def _nice_step(span: float, ticks: int) -> float:
    """A step of 1, 2 or 5 times a power of ten giving about `ticks` intervals over `span`."""
    raw = span / max(1, ticks)
    power = 10.0 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    return next((m * power for m in (1, 2, 5, 10) if m * power >= raw), 10 * power)


def _steps_label(x: float) -> str:
    """Actor-steps as people write them: 0, 500k, 2M, 2.5M."""
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{unit}"
    return f"{x:.3g}"


def _font(size):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)  # Pillow >= 10.1: a scalable font
    except TypeError:
        return ImageFont.load_default()


def plot_metrics(rows, out, columns=("success_rate", "spl_mean"), width=720, height=360, title=""):
    """A line chart of ``columns`` against ``global_step`` as a PNG (Pillow only): each column's raw per-update
    values drawn faint, its centred moving average (``smooth`` over ``smoothing_window`` rows) over them;
    the x axis in actor-steps with round ticks, the y axis with ticks (0 to 1 for rates), both titled, and a
    legend naming each column (``SERIES_LABELS``). NaN rows (no episode finished) are skipped."""
    from PIL import Image, ImageDraw

    font, small = _font(max(10, height // 26)), _font(max(9, height // 30))
    img = Image.new("RGB", (width, height), "white")
    dr = ImageDraw.Draw(img)
    title_h = font.size + 10 if title else 0  # a title has a row of its own, above the legend's
    left, right, top, bottom = 62, width - 16, 36 + title_h, height - 48
    legend_y = title_h + 18
    xs = [float(r["global_step"]) for r in rows]
    x_max = max(xs) if xs and max(xs) > 0 else 1.0
    window = smoothing_window(len(rows))
    raw = {c: [float(r[c]) for r in rows] for c in columns}
    smoothed = {c: smooth(v, window) for c, v in raw.items()}
    vals = [v for s in raw.values() for v in s if math.isfinite(v)]
    lo, hi = (min(vals + [0.0]), max(vals + [1.0])) if vals else (0.0, 1.0)
    hi = hi if hi > lo else lo + 1.0

    def px(x, y):
        return left + (right - left) * x / x_max, bottom - (bottom - top) * (y - lo) / (hi - lo)

    y_step = _nice_step(hi - lo, 5)
    for k in range(math.ceil(lo / y_step - 1e-9), math.floor(hi / y_step + 1e-9) + 1):
        y = round(k * y_step, 12)
        _, py = px(0, y)
        dr.line([left, py, right, py], fill=(228, 228, 228))
        dr.line([left - 4, py, left, py], fill=(0, 0, 0))
        dr.text((left - 7, py), f"{y:.6g}", fill=(0, 0, 0), font=small, anchor="rm")
    x_step = _nice_step(x_max, 6)
    for k in range(int(x_max // x_step) + 1):
        px_x, _ = px(k * x_step, lo)
        dr.line([px_x, bottom, px_x, bottom + 4], fill=(0, 0, 0))
        dr.text((px_x, bottom + 7), _steps_label(k * x_step), fill=(0, 0, 0), font=small, anchor="mt")
    dr.rectangle([left, top, right, bottom], outline=(0, 0, 0))
    dr.text(((left + right) / 2, height - 6), "actor-steps", fill=(0, 0, 0), font=font, anchor="md")
    y_title = ", ".join("success rate" if c == "success_rate" else SERIES_LABELS.get(c, c) for c in columns)
    label = Image.new("RGB", (int(dr.textlength(y_title, font=font)) + 4, font.size + 8), "white")
    ImageDraw.Draw(label).text((2, 2), y_title, fill=(0, 0, 0), font=font)
    label = label.rotate(90, expand=True)
    img.paste(label, (4, int((top + bottom - label.height) / 2)))
    if title:
        dr.text((left, title_h / 2 + 4), title, fill=(0, 0, 0), font=font, anchor="lm")

    # legend, right-aligned above the plot: each column, then how its lines are drawn
    grey = (90, 90, 90)
    entries = [(SERIES_LABELS.get(c, c), SERIES_COLOURS[i % len(SERIES_COLOURS)], 3) for i, c in enumerate(columns)]
    entries += [("per update", _faint(grey), 1), (f"centred mean of {window} updates", grey, 3)] if window > 1 else []
    legend_x = right
    for name, col, w in reversed(entries):
        legend_x -= dr.textlength(name, font=small) + 36
        dr.line([legend_x, legend_y, legend_x + 22, legend_y], fill=col, width=w)
        dr.text((legend_x + 27, legend_y), name, fill=(0, 0, 0), font=small, anchor="lm")
    for i, c in enumerate(columns):
        col = SERIES_COLOURS[i % len(SERIES_COLOURS)]
        _polyline(dr, [px(x, v) for x, v in zip(xs, raw[c])], _faint(col), 1)
    for i, c in enumerate(columns):
        col = SERIES_COLOURS[i % len(SERIES_COLOURS)]
        _polyline(dr, [px(x, v) for x, v in zip(xs, smoothed[c])], col, 2)
    img.save(out)
    return out


def _faint(colour):
    """30 % of `colour` on white: the raw values under their smoothed line."""
    return tuple(int(255 - 0.3 * (255 - v)) for v in colour)


def _polyline(dr, points, fill, width):
    """One line through the points whose value is finite (a NaN row is skipped, as if absent)."""
    run = [p for p in points if math.isfinite(p[1])]
    if len(run) > 1:
        dr.line(run, fill=fill, width=width)
