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
    ("ep_return_mean", "charts", "mean return of those episodes (NaN if none finished)"),
    ("ep_length_mean", "charts", "mean length in steps of those episodes (NaN if none)"),
    ("success_rate", "charts", "fraction of those episodes that reached the goal (point-goal; NaN if none)"),
    ("spl_mean", "charts", "mean success weighted by path length (point-goal; NaN if none)"),
    ("coverage_mean", "charts", "mean cells visited per episode (explore; NaN otherwise)"),
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
    """Keep only rows with ``update <= update`` (and drop a torn last line)."""
    run_dir = Path(run_dir)
    csv_path, jsonl_path = run_dir / "metrics.csv", run_dir / "metrics.jsonl"
    if csv_path.exists():
        lines = read_regular(csv_path, "metrics file").decode("utf-8").splitlines(keepends=True)
        keep = []
        for i, line in enumerate(lines):
            if not line.endswith("\n"):
                break  # torn write
            if i == 0:
                keep.append(line)
                continue
            try:
                u = int(line.split(",", 1)[0])
            except ValueError:
                break
            if u > update:
                break
            keep.append(line)
        write_atomic(csv_path, "".join(keep).encode("utf-8"))
    if jsonl_path.exists():
        keep = []
        for line in read_regular(jsonl_path, "metrics file").decode("utf-8").splitlines(keepends=True):
            if not line.endswith("\n"):
                break
            try:
                u = int(json.loads(line)["update"])
            except (ValueError, KeyError, TypeError):
                break
            if u > update:
                break
            keep.append(line)
        write_atomic(jsonl_path, "".join(keep).encode("utf-8"))


def read_metrics_csv(path) -> list:
    """Rows of metrics.csv as dicts of numbers (NaN stays NaN)."""
    with io.TextIOWrapper(open_regular(path, "metrics file"), encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return [{k: (int(v) if k in INT_COLUMNS else float(v)) for k, v in r.items()} for r in rows]


def read_metrics_jsonl(path) -> list:
    """Rows of metrics.jsonl as dicts (null read back as NaN)."""
    out = []
    with io.TextIOWrapper(open_regular(path, "metrics file"), encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            out.append({k: (float("nan") if v is None else v) for k, v in r.items()})
    return out


def columns_markdown() -> str:
    """The column table for docs/TRAINING.md."""
    buf = io.StringIO()
    buf.write("| column | TensorBoard tag | meaning |\n|---|---|---|\n")
    for name, ns, desc in COLUMNS:
        buf.write(f"| `{name}` | {f'`{ns}/{name}`' if ns else '(x axis)'} | {desc} |\n")
    return buf.getvalue()


def plot_metrics(rows, out, columns=("success_rate", "spl_mean"), width=640, height=320, title=""):
    """A small line chart of ``columns`` against ``global_step`` (PNG via Pillow); NaN rows skipped."""
    from PIL import Image, ImageDraw

    colours = [(30, 90, 200), (220, 90, 30), (40, 150, 60), (150, 60, 160)]
    img = Image.new("RGB", (width, height), "white")
    dr = ImageDraw.Draw(img)
    left, right, top, bottom = 48, width - 12, 24, height - 30
    xs = [r["global_step"] for r in rows]
    x_max = max(xs) if xs else 1
    series = {c: [(r["global_step"], r[c]) for r in rows if math.isfinite(r[c])] for c in columns}
    vals = [v for s in series.values() for _, v in s]
    lo, hi = (min(vals + [0.0]), max(vals + [1.0])) if vals else (0.0, 1.0)
    hi = hi if hi > lo else lo + 1.0

    def px(x, y):
        return left + (right - left) * x / x_max, bottom - (bottom - top) * (y - lo) / (hi - lo)

    dr.rectangle([left, top, right, bottom], outline=(0, 0, 0))
    for k in range(5):
        y = lo + (hi - lo) * k / 4
        _, py = px(0, y)
        dr.line([left, py, right, py], fill=(225, 225, 225))
        dr.text((4, py - 6), f"{y:.2f}", fill=(0, 0, 0))
    dr.text((left, bottom + 8), "0", fill=(0, 0, 0))
    dr.text((right - 90, bottom + 8), f"{x_max:,} actor-steps", fill=(0, 0, 0))
    dr.text((left + 4, 4), title, fill=(0, 0, 0))
    for i, (name, pts) in enumerate(series.items()):
        col = colours[i % len(colours)]
        if len(pts) > 1:
            dr.line([px(x, y) for x, y in pts], fill=col, width=2)
        dr.text((right - 130 * (len(series) - i), 4), name, fill=col)
    img.save(out)
    return out
