"""`navi-nb train` / `eval` / `info` from the command line, and their bad-input paths.

Every bad input gives a clear one-line message, a non-zero exit, and leaves
the run folder exactly as it was (names and bytes of every file).
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from run_helpers import tiny_run_args

from navi_nb.cli import main
from navi_nb.env.config import EPISODE_SETTINGS, EnvConfig
from navi_nb.train import checkpoint as ck
from navi_nb.train import evaluate
from navi_nb.train.metrics import read_metrics_csv, read_metrics_jsonl

TINY = tiny_run_args()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny finished run (2 updates, evaluated on 4 episodes), copied by the tests that damage it."""
    root = tmp_path_factory.mktemp("runs")
    mp = pytest.MonkeyPatch()
    mp.setenv("NAVI_NB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))  # _cache's: its world stays compiled
    assert main(["train", *TINY, "--run-dir", str(root), "--name", "r"]) == 0
    mp.undo()
    return root / "r"


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("NAVI_NB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def snapshot(folder: Path):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def copy_run(trained, tmp_path, name="run"):
    dst = tmp_path / name
    shutil.copytree(trained, dst)
    return dst


def fails_cleanly(argv, capsys, match, folder=None):
    before = snapshot(folder) if folder is not None and folder.exists() else None
    code = main(argv)
    err = " ".join(capsys.readouterr().err.split())  # rich wraps long lines at the terminal width
    assert code == 2, (code, err)
    assert err.startswith("error:") and err.count("error:") == 1 and match in err, err
    assert "Traceback" not in err
    if before is not None:
        assert snapshot(folder) == before, "run folder changed"
    return err


def test_run_folder_layout_and_metrics(trained):
    names = set(snapshot(trained))
    for required in (
        "config.json",
        "worlds.json",
        "metrics.csv",
        "metrics.jsonl",
        "policy.npz",
        "eval.json",
        "eval_episodes.npz",
        "checkpoints/ckpt_00000002.npz",
    ):
        assert required in names, names
    cfg = json.loads((trained / "config.json").read_text())
    assert cfg["config"]["actors"] == 4 and len(cfg["config_hash"]) == 16
    rows = read_metrics_csv(trained / "metrics.csv")
    assert [r["update"] for r in rows] == [1, 2]
    assert [r["update"] for r in read_metrics_jsonl(trained / "metrics.jsonl")] == [1, 2]
    ev = json.loads((trained / "eval.json").read_text())
    assert ev["episodes"] == 4 and 0.0 <= ev["success_rate"] <= 1.0
    assert len(ev["per_episode"]["success"]) == 4
    assert ev["success_rate"] == sum(ev["per_episode"]["success"]) / 4


def test_eval_command_json(trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path)
    assert main(["eval", str(run), "--episodes", "3", "--json", "--no-save"]) == 0
    out = capsys.readouterr().out
    res = json.loads(out[out.index("{") :])
    assert res["episodes"] == 3 and res["deterministic"] is True
    # deterministic: the same seed gives the same episodes
    assert main(["eval", str(run), "--episodes", "3", "--json", "--no-save"]) == 0
    out2 = capsys.readouterr().out
    assert json.loads(out2[out2.index("{") :])["per_episode"] == res["per_episode"]


READ_POLICY = """
import sys
import numpy as np
from navi_nb.train.evaluate import load_run_policy
from navi_nb.train.runs import read_run_config
run = sys.argv[1]
cfg = read_run_config(run)
for source in ("final", "checkpoint"):
    policy, origin = load_run_policy(run, cfg, source)
    np.save(f"{sys.argv[2]}/{source}.npy", policy.params)
    print(source, origin["source"], origin["update"])
builders = ("navi_nb.train.loop", "navi_nb.env.nav_env", "navi_nb.sense.tracer")
print("loaded", sorted(m for m in sys.modules if m in builders))
"""


def test_reading_a_runs_policy_builds_no_trainer_or_environment(trained, tmp_path):
    """eval's policy comes from the checkpoint and the config alone: neither the trainer's module nor an
    environment (nor the tracer) is imported; the weights are the files' own (read here with NumPy)."""
    out = subprocess.run(
        [sys.executable, "-c", READ_POLICY, str(trained), str(tmp_path)], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[-2] == "loaded []", out
    latest = ck.latest_checkpoint(trained / "checkpoints")
    assert out[1] == f"checkpoint {latest} 2", out
    with np.load(trained / "policy.npz") as final, np.load(latest) as newest:
        assert np.array_equal(np.load(tmp_path / "final.npy"), final["policy.params"])
        assert np.array_equal(np.load(tmp_path / "checkpoint.npy"), newest["ppo.params"])
        assert np.array_equal(final["policy.params"], newest["ppo.params"])  # the last update is both


def test_unknown_flag(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", "--actorz", "3"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --actorz" in capsys.readouterr().err


def test_unknown_scene_creates_nothing(tmp_path, capsys):
    fails_cleanly(["train", "--scenes", "castle", "--run-dir", str(tmp_path / "runs")], capsys, "'castle'")
    assert not (tmp_path / "runs").exists()
    fails_cleanly(
        ["train", "--scenes", str(tmp_path / "nope.gmdag"), "--run-dir", str(tmp_path / "runs")],
        capsys,
        "does not exist",
    )


def test_bad_values_and_config(tmp_path, capsys):
    fails_cleanly(["train", "--actors", "0", "--run-dir", str(tmp_path)], capsys, "actors")
    bad = tmp_path / "c.toml"
    bad.write_text("actors = [")
    fails_cleanly(["train", "--config", str(bad)], capsys, "not valid TOML")


@pytest.mark.parametrize(
    "command",
    [["train"], ["train", "--resume", "RUN"], ["eval", "RUN"], ["bench", "train"]],
    ids=["train", "resume", "eval", "bench-train"],
)
@pytest.mark.parametrize(
    "given,words",
    [
        ("max_steps", "--env 'max_steps': expected KEY=VALUE"),
        ("=3", "--env '=3': expected KEY=VALUE"),
        ("max_stepz=30", "--env max_stepz=30: max_stepz is not an environment setting; known: contact_margin, dt,"),
        ("max_steps=abc", "--env max_steps=abc: max_steps takes a whole number, got 'abc'"),
        ("max_steps=1.5", "--env max_steps=1.5: max_steps takes a whole number, got '1.5'"),
        ("goal_max_distance=far", "--env goal_max_distance=far: goal_max_distance takes a number, got 'far'"),
        ("semantic_obs=1", "--env semantic_obs=1: semantic_obs takes true or false, got '1'"),
        ("spawn=3", "--env spawn=3: spawn takes a word, got '3'"),
    ],
)
def test_a_malformed_env_flag_is_one_line_in_every_command(command, given, words, tmp_path, capsys):
    """``--env`` without ``=``, with an unknown setting or a value of the wrong type: one line naming the flag and
    what is wrong, exit 2, no usage block, nothing created; the same in every command that takes the flag."""
    runs = tmp_path / "runs"
    argv = [str(runs / "r") if a == "RUN" else a for a in command]
    argv += ["--env", given] + (["--run-dir", str(runs)] if argv == ["train"] else [])
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = " ".join(captured.err.split())
    assert err.startswith("error: ") and err.count("error:") == 1 and words in err, err
    assert "usage:" not in captured.err and "Traceback" not in captured.err and captured.out == ""
    assert not runs.exists()


def test_existing_name_refused(trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path)
    fails_cleanly(["train", *TINY, "--run-dir", str(tmp_path), "--name", "run"], capsys, "already exists", run)


def test_missing_run_folder(tmp_path, capsys):
    fails_cleanly(["train", "--resume", str(tmp_path / "nope")], capsys, "does not exist")
    fails_cleanly(["eval", str(tmp_path / "nope")], capsys, "does not exist")


def test_corrupt_config_json(trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path)
    (run / "config.json").write_text("{not json")
    fails_cleanly(["train", "--resume", str(run)], capsys, "not valid JSON", run)
    fails_cleanly(["eval", str(run)], capsys, "not valid JSON", run)
    data = json.loads((trained / "config.json").read_text())
    data["config"]["actors"] = 8  # edited by hand: the hash no longer matches
    (run / "config.json").write_text(json.dumps(data))
    fails_cleanly(["train", "--resume", str(run)], capsys, "was edited", run)


def test_corrupt_checkpoint(trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path)
    latest = ck.latest_checkpoint(run / "checkpoints")
    latest.write_bytes(latest.read_bytes()[:-100])
    fails_cleanly(["train", "--resume", str(run), "--total-steps", "128"], capsys, "checkpoint", run)
    for p in (run / "checkpoints").iterdir():
        p.unlink()
    fails_cleanly(["train", "--resume", str(run)], capsys, "no checkpoint", run)


def test_checkpoint_from_another_config(trained, tmp_path, capsys):
    other = tmp_path / "other"
    assert (
        main(["train", *TINY, "--seed", "5", "--eval-episodes", "0", "--run-dir", str(tmp_path), "--name", "other"])
        == 0
    )
    capsys.readouterr()
    run = copy_run(trained, tmp_path)
    for p in (run / "checkpoints").iterdir():
        p.unlink()
    src = ck.latest_checkpoint(other / "checkpoints")
    shutil.copy(src, run / "checkpoints" / src.name)
    fails_cleanly(["train", "--resume", str(run)], capsys, "another configuration", run)
    # changing a result setting on resume is refused too
    fails_cleanly(["train", "--resume", str(other), "--seed", "1"], capsys, "cannot change seed", other)
    # --name and --run-dir place a new run; a resumed run stays where it is
    fails_cleanly(["train", "--resume", str(other), "--name", "moved"], capsys, "--name name a new run", other)
    fails_cleanly(["train", "--resume", str(other), "--run-dir", str(tmp_path / "x")], capsys, "stays in", other)
    # --print-config with --resume shows the run's own config and trains nothing
    before = snapshot(other)
    assert main(["train", "--resume", str(other), "--print-config"]) == 0
    assert "hash" in capsys.readouterr().out and snapshot(other) == before
    # naming the run's own folder again is not a change
    assert (
        main(
            [
                "train",
                "--resume",
                str(other),
                "--name",
                "other",
                "--run-dir",
                str(tmp_path),
                "--no-progress",
                "--eval-episodes",
                "0",
            ]
        )
        == 0
    )


def test_resume_of_finished_run_is_a_no_op(trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path)
    before = (run / "metrics.csv").read_bytes(), (run / "metrics.jsonl").read_bytes()
    assert main(["train", "--resume", str(run), "--no-progress", "--eval-episodes", "0"]) == 0
    assert "already complete" in " ".join(capsys.readouterr().out.split())
    assert ((run / "metrics.csv").read_bytes(), (run / "metrics.jsonl").read_bytes()) == before


def test_resume_takes_env_values_the_run_already_has_and_refuses_a_changed_one(trained, tmp_path, capsys):
    """``--resume --env K=V`` repeating the run's own values (max_steps=20 its config names, spawn=free and
    goal_max_distance=8 the defaults it leaves unnamed) is no change; one changed value is refused in one line
    naming that setting, the run's value and the one given, and the folder is left as it was."""
    from navi_nb.train.runs import env_changes

    run = copy_run(trained, tmp_path)
    config_before = (run / "config.json").read_bytes()
    same = ["--env", "max_steps=20", "--env", "spawn=free", "--env", "goal_max_distance=8.0"]
    assert main(["train", "--resume", str(run), *same, "--no-progress", "--eval-episodes", "0"]) == 0
    assert "already complete" in " ".join(capsys.readouterr().out.split())
    assert (run / "config.json").read_bytes() == config_before  # the run's env table as it was: {"max_steps": 20}
    assert json.loads(config_before)["config"]["env"] == {"max_steps": 20}
    changed = ["--env", "max_steps=20", "--env", "success_radius=0.7"]
    err = fails_cleanly(["train", "--resume", str(run), *changed], capsys, "env success_radius=0.5 (asked 0.7)", run)
    assert "cannot change env" in err and "max_steps" not in err
    # a number is not the boolean it equals (semantic_obs is False by default): --env's reader refuses it first,
    # and the comparison itself tells them apart
    as_number = ["train", "--resume", str(run), "--env", "semantic_obs=0"]
    fails_cleanly(as_number, capsys, "semantic_obs takes true or false, got '0'", run)
    assert env_changes({"max_steps": 20}, {"semantic_obs": 0, "max_steps": 20.0}) == {"semantic_obs": False}


def test_info_command(capsys):
    assert main(["info", "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["backends"]["cpu"]["available"] is True
    assert facts["backends"]["cuda"]["available"] or facts["backends"]["cuda"]["why_not"]
    assert facts["numba"]["threading_layer"] and facts["cores"]["os_cpu_count"] >= 1


def test_render_episode_draws_trajectory(trained, tmp_path):
    pytest.importorskip("PIL", reason="Pillow (the image extra) is not installed")
    from PIL import Image

    from navi_nb.train.evaluate import load_episodes
    from navi_nb.train.render_episode import RenderError, render_episode

    eps, meta = load_episodes(trained)
    assert eps["positions"].shape[1] == 4 and meta["episodes"] == 4
    out = render_episode(trained, 1, tmp_path / "ep.png")
    img = Image.open(out)
    assert img.width >= 100 and img.height >= 100
    # the start marker (blue square) is drawn
    rgb = np.asarray(img.convert("RGB"))
    assert ((rgb[..., 0] == 40) & (rgb[..., 1] == 60) & (rgb[..., 2] == 255)).any()
    gif = render_episode(trained, 0, tmp_path / "ep.gif", gif=True)
    assert Image.open(gif).n_frames >= 2
    with pytest.raises(RenderError, match="does not exist"):
        render_episode(trained, 4, tmp_path / "x.png")


# ---------------------------------------------------------------------- console output
def test_integer_flags_take_exact_float_notation(capsys):
    from navi_nb.cli import build_parser

    args = build_parser().parse_args(["train", "--total-steps", "1e6", "--actors", "1_024", "--hidden", "1.28e2,64"])
    assert (args.total_steps, args.actors, args.hidden) == (1_000_000, 1024, [128, 64])
    assert type(args.total_steps) is int
    for bad in ("1.5e0", "1e-3", "inf", "nan", "lots"):
        with pytest.raises(SystemExit) as exc:
            build_parser().parse_args(["train", "--total-steps", bad])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert f"argument --total-steps: expected a whole number such as 1000000 or 1e6, got '{bad}'" in err


def test_bad_setting_message_has_one_prefix(capsys):
    assert main(["train", "--actors", "0", "--print-config"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines()[-1].endswith("settings: actors must be an integer >= 1, got 0")
    assert "config: actors" not in err


def test_run_header_shows_defining_and_changed_settings_only():
    import io

    from rich.console import Console

    from navi_nb.train.config import TrainConfig, field_docs
    from navi_nb.train.report import print_config

    cfg = TrainConfig(scenes="box", actors=8, total_steps=4096, hidden=[64, 64], name="t1")
    out = io.StringIO()
    print_config(Console(width=80, file=out, color_system=None), cfg, "runs/t1")
    text = out.getvalue()
    rows = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in text.splitlines()
        if line.startswith("│") and line.split("│")[1].strip()
    }
    assert rows == {
        "scenes": "box",
        "task": "pointgoal",
        "actors": "8",
        "total_steps": "4096 (8 updates of 512 steps)",
        "seed": "0",
        "hidden": "[64, 64]",
        "name": "t1",
    }
    assert "navi-nb train --print-config" in text and "runs/t1" in text and cfg.hash() in text
    full = io.StringIO()
    print_config(Console(width=200, file=full, color_system=None), cfg, full=True)
    text = full.getvalue()
    assert "``" not in text and "The worlds to train in: a scene spec such as house, house:0-199" in text
    assert all(f"│ {name} " in text for name in field_docs())


def test_cold_kernel_notice(tmp_path, monkeypatch):
    import io
    import os

    from rich.console import Console

    from navi_nb import cores, jit_cache
    from navi_nb.commands.train import COLD_COMPILE_CPU_S, TRAIN_KERNELS, announce_cold_kernels

    def notice():
        out = io.StringIO()
        said = announce_cold_kernels(Console(file=out, width=80))
        return said, out.getvalue()

    allowed = cores.allowed_cores(affinity=[0, 1])  # two cores, as on the reference machine
    monkeypatch.setattr(cores, "allowed_cores", lambda: allowed)
    monkeypatch.setattr(jit_cache, "cache_dir_for", lambda path: tmp_path)  # an empty cache
    monkeypatch.setattr("os.getloadavg", lambda: (0.5, 0.5, 0.5))  # an idle machine
    assert jit_cache.cold_sources(TRAIN_KERNELS) == list(TRAIN_KERNELS)
    assert round(sum(COLD_COMPILE_CPU_S[k] for k in TRAIN_KERNELS), 1) == 66.7
    # all cold on two cores: 66.7 CPU-s over two cores, 33.35 s (more than the largest module, 28.2 s),
    # plus 4 s of imports, packing the worlds and building the environment: 37.35 s
    assert notice() == (True, "compiling kernels, first run only: ~40 s (an estimate; cached afterwards)\n")
    monkeypatch.setattr("os.getloadavg", lambda: (4.0 * os.cpu_count(),) * 3)  # four jobs per core
    assert "~150 s" in notice()[1]  # 4 x 37.35 s
    monkeypatch.setattr("os.getloadavg", lambda: (0.5, 0.5, 0.5))
    for name in TRAIN_KERNELS:  # every kernel's index in the cache but the tracer's
        (tmp_path / f"{name.rsplit('.', 1)[1]}.kernel-42.py311.nbi").write_bytes(b"")
    (tmp_path / "tracer.kernel-42.py311.nbi").unlink()
    assert jit_cache.cold_sources(TRAIN_KERNELS) == ["navi_nb.sense.tracer"]
    assert "~10 s" in notice()[1]  # the tracer alone: 8.2 s on one core, plus 4 s (12.2 s)
    (tmp_path / "tracer.kernel-42.py311.nbi").write_bytes(b"")
    assert notice() == (False, "")


def test_the_cold_compile_estimate_counts_a_grus_and_a_maps_kernels_when_the_run_has_them(tmp_path, monkeypatch):
    """A run with memory adds the GRU's 24.9 CPU-s to an all-cold estimate (39.9 where the minibatch passes
    are cached without it: their memory signatures compile anyway); a run with the map adds its 3.8; a run
    with neither counts neither, and a cache holding only the plain run's kernels is cold for both."""
    import io

    from rich.console import Console

    from navi_nb import cores, jit_cache
    from navi_nb.commands.train import TRAIN_KERNELS, announce_cold_kernels, cold_compile_estimate, train_kernels
    from navi_nb.train.config import TrainConfig

    def notice(cfg):
        out = io.StringIO()
        announce_cold_kernels(Console(file=out, width=80), cfg)
        return out.getvalue()

    plain, memory, mapped = TrainConfig(), TrainConfig(memory_size=64), TrainConfig(env={"map_cell": 0.5})
    gru, mem_pass, map_ = "navi_nb.learn.gru", "navi_nb.learn.memory_pass", "navi_nb.env.episodic_map"
    assert train_kernels(plain) == train_kernels() == TRAIN_KERNELS
    assert train_kernels(memory) == TRAIN_KERNELS + (gru, mem_pass)
    assert train_kernels(mapped) == TRAIN_KERNELS + (map_,)
    assert train_kernels(TrainConfig(memory_size=8, env={"map_cell": 1.0})) == TRAIN_KERNELS + (map_, gru, mem_pass)
    assert train_kernels(TrainConfig(env={"map_cell": 0})) == TRAIN_KERNELS  # map_cell 0: the map is off
    # two cores, all cold: (66.7 + 24.9) / 2 = 45.8 s (more than the largest module, 28.2 s), + 4 s: 49.8 s
    assert cold_compile_estimate(list(train_kernels(memory)), 2) == pytest.approx(49.8)
    assert cold_compile_estimate(list(train_kernels(mapped)), 2) == pytest.approx((66.7 + 3.8) / 2 + 4)
    # the plain kernels cached: the GRU's 39.9 s on one core, + 4 s; the map's 3.8 s, + 4 s
    assert cold_compile_estimate([gru, mem_pass], 2) == pytest.approx(43.9)
    assert cold_compile_estimate([map_], 2) == pytest.approx(7.8)

    allowed = cores.allowed_cores(affinity=[0, 1])
    monkeypatch.setattr(cores, "allowed_cores", lambda: allowed)
    monkeypatch.setattr(jit_cache, "cache_dir_for", lambda path: tmp_path)
    monkeypatch.setattr("os.getloadavg", lambda: (0.5, 0.5, 0.5))
    for name in TRAIN_KERNELS:  # the cache a run without memory or map leaves
        (tmp_path / f"{name.rsplit('.', 1)[1]}.kernel-42.py311.nbi").write_bytes(b"")
    assert notice(plain) == ""
    assert notice(memory) == "compiling kernels, first run only: ~40 s (an estimate; cached afterwards)\n"
    assert notice(mapped) == "compiling kernels, first run only: ~10 s (an estimate; cached afterwards)\n"


def test_a_trained_run_leaves_every_training_kernel_cached(trained):
    from navi_nb.commands.train import TRAIN_KERNELS
    from navi_nb.jit_cache import cold_sources

    assert cold_sources(TRAIN_KERNELS) == []


def test_eval_reports_success_and_spl_per_difficulty_bin(trained, tmp_path, capsys):
    """Every episode falls in one bin of each kind, and each bin's figures are those of its episodes."""
    run = copy_run(trained, tmp_path)
    assert main(["eval", str(run), "--episodes", "12", "--json", "--no-save"]) == 0
    out = capsys.readouterr().out
    res = json.loads(out[out.index("{") :])
    per = res["per_episode"]
    geo, ratio = np.array(per["geodesic"]), np.array(per["ratio"])
    assert len(geo) == len(ratio) == 12 and np.all(ratio >= 1.0 - 1e-9) and np.all(geo > 0)
    spl, succ = np.array(per["spl"]), np.array(per["success"])
    for key, values, bins in (("geodesic_m", geo, evaluate.DISTANCE_BINS), ("ratio", ratio, evaluate.RATIO_BINS)):
        groups = res["difficulty"][key]
        assert sum(g["episodes"] for g in groups.values()) == 12
        for k, (lo, hi) in enumerate(bins):
            rows = (values < hi) & ((values >= lo) if k else True)
            label = evaluate.bin_label(lo, hi)
            if not rows.any():
                assert label not in groups
                continue
            assert groups[label]["episodes"] == int(rows.sum())
            assert groups[label]["success_rate"] == pytest.approx(succ[rows].mean())
            assert groups[label]["spl_mean"] == pytest.approx(spl[rows].mean())


def test_eval_env_sets_episode_settings_and_refuses_others(trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path)
    before = sorted(p.name for p in run.iterdir())
    assert main(["eval", str(run), "--episodes", "4", "--no-save", "--env", "max_speed=9"]) == 2
    err = capsys.readouterr().err
    assert "eval --env max_speed=9: the run's config says max_speed=2.0; only the episode settings" in err
    assert len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in run.iterdir()) == before
    assert main(["eval", str(run), "--episodes", "4", "--json", "--no-save", "--env", "max_steps=3"]) == 0
    out = capsys.readouterr().out
    res = json.loads(out[out.index("{") :])
    assert res["env_overrides"] == {"max_steps": 3} and max(res["per_episode"]["length"]) <= 3
    # the episode settings that make its figures incomparable with a default draw are named
    assert res["episode_settings"] == {**run_episode_settings(run), "max_steps": 3}
    assert main(["eval", str(run), "--episodes", "4", "--no-save", "--env", "max_steps=3"]) == 0
    assert "max_steps=3" in capsys.readouterr().out


def run_episode_settings(run):
    """The run's own episode settings that differ from EnvConfig's defaults, read from its config.json."""
    env = json.loads((run / "config.json").read_text())["config"]["env"]
    return {k: v for k, v in env.items() if k in EPISODE_SETTINGS and v != getattr(EnvConfig(), k)}


def test_no_progress_draws_no_compile_bar(tmp_path, monkeypatch, capsys):
    """`--no-progress` means plain lines: the worlds compiled into an empty cache draw no bar either."""
    monkeypatch.setenv("NAVI_NB_CACHE", str(tmp_path / "empty-cache"))
    argv = ["train", *tiny_run_args(total_steps=64, eval_episodes=0), "--run-dir", str(tmp_path), "--name", "q"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "compiling" not in err, err
    assert any((tmp_path / "empty-cache").rglob("*.gmdag")), "the world was not compiled into the empty cache"
