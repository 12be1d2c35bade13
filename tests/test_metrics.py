"""metrics.csv / metrics.jsonl: one row per update, documented columns, resume truncation."""

import csv
import json
import math

import pytest

from navi_nb.train.metrics import COLUMN_NAMES, COLUMNS, MetricsLog, read_metrics_csv, read_metrics_jsonl


def _row(update):
    row = {c: float(update) / 7.0 for c in COLUMN_NAMES}
    row.update(update=update, global_step=update * 64, episodes=update % 3)
    row["success_rate"] = float("nan") if update == 2 else 0.5
    return row


def test_one_row_per_update_in_both_files(tmp_path):
    with MetricsLog(tmp_path, tensorboard=False) as log:
        for u in range(1, 6):
            log.write(_row(u))
    with open(tmp_path / "metrics.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["update"]) for r in rows] == [1, 2, 3, 4, 5]
    assert list(rows[0].keys()) == COLUMN_NAMES
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    parsed = [json.loads(s) for s in lines]
    assert [p["update"] for p in parsed] == [1, 2, 3, 4, 5]
    assert all(list(p.keys()) == COLUMN_NAMES for p in parsed)
    # values survive exactly (floats written with repr), NaN as NaN / null
    a, b = read_metrics_csv(tmp_path / "metrics.csv"), read_metrics_jsonl(tmp_path / "metrics.jsonl")
    for ra, rb, u in zip(a, b, range(1, 6)):
        assert ra["policy_loss"] == rb["policy_loss"] == u / 7.0
        assert ra["global_step"] == rb["global_step"] == u * 64
    assert math.isnan(a[1]["success_rate"]) and parsed[1]["success_rate"] is None


def test_documented_columns_are_unique_and_described():
    assert len(set(COLUMN_NAMES)) == len(COLUMN_NAMES)
    assert all(desc for _, _, desc in COLUMNS)


def test_row_with_wrong_columns_refused(tmp_path):
    with MetricsLog(tmp_path, tensorboard=False) as log:
        bad = _row(1)
        del bad["entropy"]
        with pytest.raises(KeyError, match="entropy"):
            log.write(bad)
        with pytest.raises(KeyError, match="bogus"):
            log.write(dict(_row(1), bogus=1.0))


def test_resume_drops_rows_after_checkpoint_and_torn_line(tmp_path):
    with MetricsLog(tmp_path, tensorboard=False) as log:
        for u in range(1, 6):
            log.write(_row(u))
    with open(tmp_path / "metrics.jsonl", "a") as fh:
        fh.write('{"update": 6, "glo')  # a write torn by a kill
    with MetricsLog(tmp_path, resume_update=3, tensorboard=False) as log:
        log.write(_row(4))
    assert [r["update"] for r in read_metrics_csv(tmp_path / "metrics.csv")] == [1, 2, 3, 4]
    assert [r["update"] for r in read_metrics_jsonl(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4]


def test_files_of_earlier_versions_read_under_todays_names(tmp_path):
    """A run folder written when the mean return and length were ep_return_mean / ep_length_mean: both readers
    give today's names with the same values, and a resume rewrites the kept rows under today's header."""
    from navi_nb.train.metrics import RENAMED_COLUMNS

    with MetricsLog(tmp_path, tensorboard=False) as log:
        for u in range(1, 4):
            log.write(_row(u))
    today_csv, today_jsonl = read_metrics_csv(tmp_path / "metrics.csv"), read_metrics_jsonl(tmp_path / "metrics.jsonl")
    earlier = {new: old for old, new in RENAMED_COLUMNS.items()}
    assert set(earlier) == {"return_mean", "length_mean"} <= set(COLUMN_NAMES)
    csv_text = (tmp_path / "metrics.csv").read_text()
    header, rest = csv_text.split("\n", 1)
    (tmp_path / "metrics.csv").write_text(",".join(earlier.get(c, c) for c in header.split(",")) + "\n" + rest)
    lines = [json.loads(s) for s in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps({earlier.get(k, k): v for k, v in r.items()}) + "\n" for r in lines)
    )
    assert "ep_return_mean" in (tmp_path / "metrics.csv").read_text().split("\n", 1)[0]
    for old, new in (
        (read_metrics_csv(tmp_path / "metrics.csv"), today_csv),
        (read_metrics_jsonl(tmp_path / "metrics.jsonl"), today_jsonl),
    ):
        assert [list(r) for r in old] == [list(r) for r in new]
        assert [r["return_mean"] for r in old] == [u / 7.0 for u in range(1, 4)]
        assert all(math.isnan(a["success_rate"]) == math.isnan(b["success_rate"]) for a, b in zip(old, new))
    with MetricsLog(tmp_path, resume_update=2, tensorboard=False) as log:
        log.write(_row(3))
    assert (tmp_path / "metrics.csv").read_text().split("\n", 1)[0].split(",") == COLUMN_NAMES
    assert all(list(json.loads(s)) == COLUMN_NAMES for s in (tmp_path / "metrics.jsonl").read_text().splitlines())
    assert [r["length_mean"] for r in read_metrics_jsonl(tmp_path / "metrics.jsonl")] == [u / 7.0 for u in (1, 2, 3)]


def test_tensorboard_absent_is_said_once(tmp_path):
    log = MetricsLog(tmp_path, tensorboard=True)
    log.close()
    try:
        import tensorboardX  # noqa: F401

        assert log.tb_note.startswith("TensorBoard event files:")
    except ImportError:
        assert "skipped" in log.tb_note


def test_smooth_is_a_centred_mean_of_the_finite_values():
    from navi_nb.train.metrics import smooth, smoothing_window

    nan = float("nan")
    got = smooth([1.0, nan, 3.0, 5.0, nan, nan, nan, 8.0], 3)
    want = [1.0, 2.0, 4.0, 4.0, 5.0, nan, 8.0, 8.0]  # by hand: the mean of the finite values of i-1..i+1
    assert len(got) == len(want)
    assert all((a == b) or (a != a and b != b) for a, b in zip(got, want)), got
    assert smooth([0.0, 1.0, 0.0, 1.0, 0.0], 5) == [1 / 3, 0.5, 0.4, 0.5, 1 / 3]
    assert smooth([0.2, 0.7], 1) == [0.2, 0.7]
    assert [smoothing_window(n) for n in (0, 10, 121, 2442)] == [1, 1, 5, 99]  # 4 % of the rows, odd


def test_plot_metrics_draws_raw_and_smoothed_series_with_axes(tmp_path):
    pytest.importorskip("PIL", reason="Pillow (the image extra) is not installed")
    import numpy as np
    from PIL import Image

    from navi_nb.train.metrics import SERIES_COLOURS, plot_metrics

    nan = float("nan")
    rows = [
        dict(_row(u), global_step=4096 * u, success_rate=nan if u % 7 == 0 else (u % 5) / 5, spl_mean=0.5 + u / 400)
        for u in range(1, 101)
    ]
    out = plot_metrics(rows, tmp_path / "c.png", title="a run")
    rgb = np.asarray(Image.open(out).convert("RGB")).astype(int)
    assert rgb.shape == (360, 720, 3)
    assert (rgb < 250).any(-1).mean() > 0.02  # not blank
    faint = [tuple(int(255 - 0.3 * (255 - v)) for v in c) for c in SERIES_COLOURS[:2]]
    for colour in SERIES_COLOURS[:2] + faint:  # each column's smoothed line over its faint raw values
        assert (rgb == colour).all(-1).sum() > 100, colour
    dark = (rgb < 100).all(-1)
    assert dark[:, :60].sum() > 50 and dark[-48:, :].sum() > 100  # the y axis's labels and title; the x axis's
    small = plot_metrics(rows[:3], tmp_path / "s.png", width=320, height=160)
    assert np.asarray(Image.open(small)).shape[:2] == (160, 320)


def test_plot_metrics_title_has_a_row_of_its_own_above_the_legend(tmp_path):
    pytest.importorskip("PIL", reason="Pillow (the image extra) is not installed")
    import numpy as np
    from PIL import Image

    from navi_nb.train.metrics import plot_metrics

    rows = [dict(_row(u), global_step=4096 * u, success_rate=0.5, spl_mean=0.4) for u in range(1, 41)]

    def ink_rows(path):  # the rows above the plot's frame that hold any dark pixel
        rgb = np.asarray(Image.open(path).convert("RGB")).astype(int)
        frame = int(np.argmax((rgb[:, 200] < 60).all(-1)))  # the frame's top edge, in a column the text misses
        dark = (rgb[:frame] < 120).all(-1).any(1)
        return frame, np.flatnonzero(dark)

    frame_plain, ink_plain = ink_rows(plot_metrics(rows, tmp_path / "plain.png"))
    frame_titled, ink_titled = ink_rows(plot_metrics(rows, tmp_path / "titled.png", title="a long title " * 4))
    assert frame_titled > frame_plain  # the plot moves down to make room
    legend_rows = set(ink_plain.tolist())
    title_rows = set(ink_titled.tolist()) - {r + frame_titled - frame_plain for r in legend_rows}
    assert title_rows and max(title_rows) < min(r + frame_titled - frame_plain for r in legend_rows)
