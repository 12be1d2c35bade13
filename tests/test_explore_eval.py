"""The explore task's evaluation: coverage after half the step limit and after all of it, the baselines,
the metrics' running-episode column, the CLI's eval and render of an explore run."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from env_helpers import scene_world
from run_helpers import tiny_run_args

from navi_nb.cli import main
from navi_nb.env.motion import field_cube
from navi_nb.env.tasks import VisitGrid
from navi_nb.train.baselines import compare, coverage_table, random_policy, wall_follower
from navi_nb.train.config import TrainConfig
from navi_nb.train.evaluate import evaluate_policy, evaluation_env, run_episodes
from navi_nb.train.intervals import bootstrap_interval
from navi_nb.train.metrics import COLUMN_NAMES, read_metrics_csv, truncate_metrics
from navi_nb.train.runs import RunError
from navi_nb.world.world_set import WorldSet


def explore_cfg(max_steps=8):
    return TrainConfig(scenes="box", task="explore", sensor_az=8, sensor_el=4, env={"max_steps": max_steps}).validate()


def still(obs):
    return np.zeros((obs.shape[0], 4), np.float32)


def test_standing_still_covers_the_spawn_cell_alone():
    cfg = explore_cfg()
    worlds = WorldSet.of(scene_world("box"))
    reachable = evaluation_env(worlds, cfg, 1, 0).reachable_cells
    assert reachable > 10  # the box's floor holds many cells: one of them is a small fraction
    res = evaluate_policy(still, worlds, cfg, episodes=5)
    ep = res["per_episode"]
    assert np.allclose(ep["coverage"], 1 / reachable) and np.allclose(ep["coverage_half"], 1 / reachable)
    assert res["coverage_mean"] == pytest.approx(1 / reachable) and res["coverage_steps"] == [4, 8]
    assert res["coverage_mean_ci95"] == pytest.approx([1 / reachable] * 2)


def test_coverage_after_half_and_all_steps_counts_the_cells_of_the_logged_path():
    """Every step's end position marks its cell (the spawn's too): the logged path, cut at max_steps // 2 and at
    max_steps, counts the same cells over the reachable ones as the episode's coverages."""
    cfg = explore_cfg(max_steps=30)
    worlds = WorldSet.of(scene_world("box"))
    env = evaluation_env(worlds, cfg, 6, 11)
    ahead = random_policy(3)  # wandering, so paths cross several cells

    def act(obs):
        a = ahead(obs)
        a[:, 0] = 1.0  # always forward: the half and the end differ
        return a

    ep, traj = run_episodes(env, act, 31)
    grid = VisitGrid(*field_cube(worlds.worlds[0]), env.config.visit_cell, env.config.visit_max_cells)
    for steps, key in ((15, "coverage_half"), (30, "coverage")):
        for a in range(6):
            cells = np.unique(grid.cell_of(traj["positions"][: steps + 1, a]))
            assert ep[key][a] == pytest.approx(cells.size / env.reachable_cells), (key, a)
    assert np.all(ep["coverage"] >= ep["coverage_half"]) and np.any(ep["coverage"] > ep["coverage_half"])


def test_explore_results_speak_of_coverage_only():
    cfg = explore_cfg()
    worlds = WorldSet.of(scene_world("box"))
    res = evaluate_policy(random_policy(1), worlds, cfg, episodes=6)
    for k in ("success_rate", "spl_mean", "final_distance_mean", "success_rate_ci95"):
        assert k not in res
    assert res["difficulty"] == {} and "final_distance" not in res["per_episode"]
    for k in ("coverage_half", "coverage"):
        v = res["per_episode"][k]
        assert res[k + "_mean"] == pytest.approx(v.mean())
        assert res[k + "_mean_ci95"] == bootstrap_interval(v)
    (family,) = worlds.families
    assert list(res["families"]) == [family] and res["families"][family]["coverage_mean"] == res["coverage_mean"]


def test_baselines_are_deterministic():
    cfg = explore_cfg()
    worlds = WorldSet.of(scene_world("box"))
    sensor = evaluation_env(worlds, cfg, 1, 0).sensor
    for make in (lambda: random_policy(7), lambda: wall_follower(sensor, 20.0)):
        act = make()
        first, again = (evaluate_policy(act, worlds, cfg, episodes=4)["per_episode"] for _ in range(2))
        fresh = evaluate_policy(make(), worlds, cfg, episodes=4)["per_episode"]
        for k in ("coverage", "coverage_half", "return"):
            assert np.array_equal(first[k], again[k]) and np.array_equal(first[k], fresh[k]), k


def test_wall_follower_keeps_the_wall_on_its_side():
    """Hand-made depth rings (8 azimuths x 1 elevation at the horizon): a wall ahead turns it away at full rate,
    a wall beside at the distance goes straight, no wall beside turns it toward that side."""
    from navi_nb.sense.sensor import Sensor

    sensor = Sensor(az=8, el=1, fov_up=0.0, fov_down=0.0)
    max_distance = 20.0

    def obs(metres):  # depth per azimuth (0 ahead, 2 right, 4 behind, 6 left) -> the observation's columns
        depth = np.log1p(np.asarray(metres, np.float64)) / np.log1p(max_distance)
        return np.concatenate([depth, np.zeros(7)])[None].astype(np.float32)

    right = wall_follower(sensor, max_distance, "right", distance=0.6)
    wall_ahead = right(obs([0.5, 5, 0.6, 5, 5, 5, 5, 5]))[0]
    assert wall_ahead[0] == 0.0 and wall_ahead[3] == -1.0  # stop and turn left, away from the wall
    along = right(obs([5, 5, 0.6, 5, 5, 5, 5, 5]))[0]
    assert along[0] == 1.0 and along[3] == pytest.approx(0.0, abs=1e-6)
    lost = right(obs([5, 5, 5, 5, 5, 5, 5, 5]))[0]
    assert lost[0] == 0.5 and lost[3] == 0.5  # the wall fell away: turn right to find it
    left = wall_follower(sensor, max_distance, "left", distance=0.6)
    assert left(obs([5, 5, 0.6, 5, 5, 5, 5, 5]))[0][3] == -0.5  # no wall on the left: turn left
    with pytest.raises(RunError, match="side must be 'right' or 'left'"):
        wall_follower(sensor, max_distance, "up")
    climbing = wall_follower(sensor, max_distance, climb_steps=2)  # up two calls, down two, up again
    assert [climbing(obs([5] * 8))[0][1] for _ in range(5)] == [1.0, 1.0, -1.0, -1.0, 1.0]
    climbing.reset()
    assert climbing(obs([5] * 8))[0][1] == 1.0
    assert wall_follower(sensor, max_distance, climb_steps=0)(obs([5] * 8))[0][1] == 0.0
    with pytest.raises(RunError, match="climb_steps must be a count of steps"):
        wall_follower(sensor, max_distance, climb_steps=-1)


@pytest.fixture(scope="module")
def explore_run(tmp_path_factory):
    """The tiny explore run; what `train` printed is kept beside it (``x.stdout``)."""
    import contextlib
    import io

    root = tmp_path_factory.mktemp("explore")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["train", *tiny_run_args(task="explore"), "--run-dir", str(root), "--name", "x"]) == 0
    (root / "x.stdout").write_text(out.getvalue())
    return root / "x"


def test_an_explore_runs_summary_gives_the_last_updates_coverage_not_success(explore_run):
    """The end-of-training summary (printed, and in run.json) of an explore run: the mean over the last 10
    updates of coverage_mean (finite updates only: the first of 16 steps ends no 20-step episode) and of
    coverage_in_progress_mean, as the metrics file has them; no success rate."""
    rows = read_metrics_csv(explore_run / "metrics.csv")[-10:]
    ended = [r["coverage_mean"] for r in rows if np.isfinite(r["coverage_mean"])]
    assert len(rows) == 2 and len(ended) == 1  # 128 actor-steps of 4 x 16: two updates, the second ends some
    want = {
        "coverage_mean_last10": sum(ended) / len(ended),
        "coverage_in_progress_mean_last10": sum(r["coverage_in_progress_mean"] for r in rows) / len(rows),
    }
    summary = json.loads((explore_run / "run.json").read_text())["segments"][-1]["summary"]
    assert "success_rate_last10" not in summary
    for key, value in want.items():
        assert 0 < value <= 1 and summary[key] == pytest.approx(value, rel=1e-6), (key, summary[key], value)
    printed = (explore_run.parent / "x.stdout").read_text()
    table = printed[printed.index("training summary") :]
    assert "success_rate_last10" not in table
    for key in want:  # a row of the table: the name, then the value as the table writes a float
        assert re.search(rf"│ {key} +│ {re.escape(f'{summary[key]:,.4g}')} +│", table), table


def test_explore_run_eval_reports_coverage(explore_run, capsys):
    capsys.readouterr()
    assert main(["eval", str(explore_run), "--episodes", "6"]) == 0
    out = capsys.readouterr().out
    assert "coverage @10" in out and "coverage @20" in out and "success" not in out
    res = json.loads((explore_run / "eval.json").read_text())
    assert res["task"] == "explore" and res["coverage_steps"] == [10, 20] and "difficulty" not in res
    for group in (res, res["splits"]["train"], res["families"]["box"]):
        assert {"coverage_half_mean", "coverage_half_mean_ci95", "coverage_mean", "coverage_mean_ci95"} <= set(group)
        assert not {"success_rate", "spl_mean", "final_distance_mean"} & set(group)
    per = res["per_episode"]
    assert not {"success", "spl", "final_distance", "geodesic"} & set(per)
    assert res["coverage_mean"] == pytest.approx(np.mean(per["coverage"]))
    assert all(0 < h <= c <= 1 for h, c in zip(per["coverage_half"], per["coverage"]))


def test_explore_render_names_coverage(explore_run, tmp_path):
    pytest.importorskip("PIL")
    from navi_nb.train.render_episode import EpisodeData, _title

    assert main(["eval", str(explore_run), "--episodes", "3"]) == 0
    res = json.loads((explore_run / "eval.json").read_text())
    ep = EpisodeData(explore_run, 1)
    first, _second = _title(ep)
    full, half = res["per_episode"]["coverage"][1], res["per_episode"]["coverage_half"][1]
    assert f"explored {full:.0%} of the reachable cells (after 10 steps {half:.0%})" in first
    assert main(["render", str(explore_run), "--episode", "1", "--output", str(tmp_path / "e.png")]) == 0


def test_explore_metrics_have_a_coverage_in_every_update(explore_run):
    """With 16-step rollouts and 20-step episodes the first update ends none: coverage_mean is NaN there, the
    running episodes' coverage is not."""
    rows = read_metrics_csv(explore_run / "metrics.csv")
    assert rows[0]["episodes"] == 0 and np.isnan(rows[0]["coverage_mean"])
    assert all(0 < r["coverage_in_progress_mean"] <= 1 for r in rows)


def test_resume_writes_rows_from_before_the_column_under_todays_header(tmp_path):
    old = [c for c in COLUMN_NAMES if c != "coverage_in_progress_mean"]
    rows = [",".join(str(u) if c in ("update", "global_step", "episodes") else "0.5" for c in old) for u in (1, 2)]
    (tmp_path / "metrics.csv").write_text("\n".join([",".join(old), *rows]) + "\n")
    truncate_metrics(tmp_path, 1)
    (row,) = read_metrics_csv(tmp_path / "metrics.csv")
    assert list(row) == COLUMN_NAMES and np.isnan(row["coverage_in_progress_mean"]) and row["return_mean"] == 0.5


def test_compare_puts_the_trained_policy_beside_both_baselines(explore_run):
    results = compare(explore_run, "pillars:1000000", episodes=2)
    assert list(results) == ["trained", "random", "wall-follower"]
    assert all(r["per_episode"]["world"].tolist() == [0, 0] for r in results.values())
    table = coverage_table(results).splitlines()
    assert table[0] == "| family | policy | episodes | coverage after 10 steps | coverage after 20 steps |"
    assert [line.split(" | ")[1] for line in table[2:]] == ["trained", "random", "wall-follower"]
