"""`bench train` runs the real trainer loop and accounts for its time."""

import pytest

from navi_nb.bench.train import measure
from navi_nb.fuzz.checkpoint import tiny_config


@pytest.fixture(autouse=True)
def _world_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("NAVI_NB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def test_bench_train_measures_and_splits_time(tmp_path):
    cfg = tiny_config(tmp_path, total_steps=4096)  # 16 steps an update, 20 at most an episode
    rows = measure(cfg, [1, 2], updates=2)
    assert [r["shards"] for r in rows] == [1, 2]
    for r in rows:
        # steady state: warmed up until every actor had finished an episode (16 steps an update, 20 at most
        # an episode: two updates at least), and episodes end in the timed updates too
        assert r["warmup_updates"] >= 2 and r["actors_without_an_episode"] == 0, r
        assert r["episodes"] >= cfg.actors, r  # 32 steps each, 20 at most an episode
        assert r["actor_steps"] == 2 * cfg.batch_size
        assert r["actor_steps_per_s"] == pytest.approx(r["actor_steps"] / r["wall_s"])
        split = r["split_s"]
        assert all(split[k] > 0 for k in ("tracing", "environment", "policy", "ppo"))
        # the parts add up to the wall time ("other" is the loop's own bookkeeping; how large it is
        # depends on the machine's load, so only its sign is a property of the code)
        assert sum(split.values()) == pytest.approx(r["wall_s"])
        assert split["other"] >= 0


def test_bench_env_runs_end_to_end(capsys):
    """`navi-nb bench env` on a tiny setting: every figure, with the environment's own work timed against a
    replayed trace, comes out finite and positive."""
    import json

    from navi_nb.cli import main

    argv = ["bench", "--json", "-", "env", "--scenes", "box", "--resolution", "32", "--actors", "4"]
    argv += ["--sensor-az", "8", "--sensor-el", "4", "--threads", "1", "--seconds", "0.05", "--repeats", "1"]
    argv += ["--scaling", "", "--no-canonical"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Traceback" not in out
    data = json.loads(out[out.index("{") :])
    row = data["env"]["main"]["1"]
    assert row["actor_steps_per_s"] > 0 and row["trace_ms"] > 0 and row["rest_ms"] > 0, row
    # the replayed trace's rate is a figure of its own (which of two 0.05 s timings is faster is no test)
    assert 0 < row["no_trace_actor_steps_per_s"] < float("inf"), row


def test_bench_train_warmup_count_and_bad_value(tmp_path, capsys):
    from navi_nb.cli import main

    cfg = tiny_config(tmp_path, total_steps=4096, env={"max_steps": 200})
    (row,) = measure(cfg, [1], updates=1, warmup="1")
    assert row["warmup_updates"] == 1 and row["actors_without_an_episode"] == 4  # 16 of 200 steps: none done
    assert main(["bench", "train", "--scenes", "box", "--resolution", "32", "--warmup", "zero"]) == 2
    err = capsys.readouterr().err
    assert "--warmup 'zero': a count of updates (>= 1) or auto" in err and "Traceback" not in err


def test_phase_speedups_are_seconds_per_actor_step_fewest_over_most_shards():
    from navi_nb.bench.train import phase_speedups

    def row(shards, steps, tracing, environment, fields, policy, ppo):
        split = dict(tracing=tracing, environment=environment, fields=fields, policy=policy, ppo=ppo)
        return {"shards": shards, "ranks": 1, "actor_steps": steps, "split_s": split}

    # 2 shards ran twice the steps: trace and PPO took as long (2x faster), env twice as long (no faster)
    rows = [row(1, 100, 2.0, 1.0, 0.5, 0.5, 1.0), row(2, 200, 2.0, 2.0, 1.0, 0.25, 1.0)]
    assert phase_speedups(rows) == {"shards": [1, 2], "trace": 2.0, "env": 1.0, "policy": 4.0, "PPO": 2.0}
    assert phase_speedups(rows[:1]) == {}


def test_serial_share_is_amdahls_from_the_fewest_and_most_shards():
    from navi_nb.bench.train import serial_share

    def row(shards, rate):
        return {"shards": shards, "ranks": 1, "actor_steps_per_s": rate}

    # 1 s of work a step at 1 shard; a quarter serial: 0.25 + 0.75 / 2 = 0.625 s at 2, the serial 0.25 of it
    assert abs(serial_share([row(1, 1.0), row(2, 1.0 / 0.625)]) - 0.25 / 0.625) < 1e-12
    assert serial_share([row(1, 1.0), row(2, 2.0)]) == 0.0  # perfect scaling
    assert serial_share([row(1, 1.0), row(2, 2.5)]) == 0.0  # faster than linear (noise): clamped
    assert serial_share([row(1, 1.0), row(2, 0.5)]) == 1.0  # slower with more threads: all serial, clamped
    assert abs(serial_share([row(1, 1.0), row(4, 1.0 / 0.4375)]) - 0.25 / 0.4375) < 1e-12  # 0.25 + 0.75 / 4
    assert serial_share([row(2, 1.0)]) is None


def test_cpu_serial_share_is_the_wall_time_one_thread_works_alone_by_cpu_time():
    from navi_nb.bench.train import cpu_serial_share

    def row(shards, wall, cpu, ranks=1):
        return {"shards": shards, "ranks": ranks, "wall_s": wall, "cpu_s": cpu}

    # 10 s of wall at 2 threads, 2 s of it one thread alone: 2 x 8 + 1 x 2 = 18 CPU-s
    assert abs(cpu_serial_share(row(2, 10.0, 18.0)) - 0.2) < 1e-12
    # 4 threads, a quarter of the wall one thread alone: 0.25 x 1 + 0.75 x 4 = 3.25 CPU-s a second
    assert abs(cpu_serial_share(row(4, 1.0, 3.25)) - 0.25) < 1e-12
    assert cpu_serial_share(row(2, 1.0, 2.0)) == 0.0  # both threads busy throughout
    assert cpu_serial_share(row(2, 1.0, 2.3)) == 0.0  # more CPU than two threads (another thread spun): clamped
    assert cpu_serial_share(row(2, 1.0, 0.5)) == 1.0  # less than one thread (the machine took the core): clamped
    assert cpu_serial_share(row(1, 1.0, 1.0)) is None  # one thread: nothing to compare
    assert cpu_serial_share(row(2, 1.0, 1.5, ranks=2)) is None  # one rank's CPU time of several processes


def test_memory_ratios_are_each_size_over_the_first_at_the_same_placement(tmp_path, capsys):
    from navi_nb.bench.train import memory_ratios
    from navi_nb.cli import main

    rows = [
        {"ranks": 1, "shards": 1, "memory_size": 0, "actor_steps_per_s": 1000.0},
        {"ranks": 1, "shards": 2, "memory_size": 0, "actor_steps_per_s": 1600.0},
        {"ranks": 1, "shards": 1, "memory_size": 64, "actor_steps_per_s": 800.0},
        {"ranks": 1, "shards": 2, "memory_size": 64, "actor_steps_per_s": 1200.0},
    ]
    assert memory_ratios(rows) == {(0, 64, "1 rank(s) x 1 shard(s)"): 0.8, (0, 64, "1 rank(s) x 2 shard(s)"): 0.75}
    assert memory_ratios(rows[:2]) == {}
    # a real run of the policy with memory: the trainer loop with the GRU's stages, timed the same way
    (row,) = measure(tiny_config(tmp_path, total_steps=4096, memory_size=8), [1], updates=1, warmup="1")
    assert row["actor_steps_per_s"] > 0 and row["split_s"]["ppo"] > 0
    assert main(["bench", "train", "--scenes", "box", "--resolution", "32", "--memory-size", "0,x"]) == 2
    err = capsys.readouterr().err
    assert "--memory-size '0,x'" in err and "Traceback" not in err
    assert main(["bench", "train", "--scenes", "box", "--resolution", "32", "--memory-size", "-3"]) == 2
    err = capsys.readouterr().err
    assert "memory_size must be an integer >= 0" in err and "Traceback" not in err


def test_bench_train_from_a_run_times_its_own_updates_and_writes_nothing(tmp_path, capsys):
    """`--from-run RUN` times the run's settings from its newest checkpoint, each shard count from the same
    state (the same episodes end in both rows: the shard count changes no bit), and leaves RUN as it was;
    flags it takes the place of are refused in one line."""
    import json

    from run_helpers import tiny_run_args

    from navi_nb.cli import main

    assert main(["train", *tiny_run_args(memory_size=4), "--run-dir", str(tmp_path), "--name", "r"]) == 0
    run = tmp_path / "r"
    before = {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}
    capsys.readouterr()
    argv = ["bench", "--json", "-", "train", "--from-run", str(run), "--shards", "1,2", "--updates", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    data = json.loads(out[out.index("\n{") + 1 :])["train"]
    rows = data["runs"]
    assert [r["shards"] for r in rows] == [1, 2] and all(r["memory_size"] == 4 for r in rows)
    assert rows[0]["episodes"] == rows[1]["episodes"] > 0
    assert data["setting"]["from_run"] == str(run)
    assert {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()} == before
    assert main(["bench", "train", "--from-run", str(run), "--actors", "8"]) == 2
    err = capsys.readouterr().err
    assert "the run's settings are timed; leave out --actors" in err and "Traceback" not in err
    assert main(["bench", "train", "--from-run", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "Traceback" not in err


def test_bench_train_timed_updates_default_and_bad_value(capsys):
    """Without ``--updates`` a new run's measurement times 3 updates and ``--from-run`` 48 (a late update lasts
    a few tenths of a second); a count below 1 is one line, before anything is loaded or compiled."""
    from argparse import Namespace

    from navi_nb.bench.train import timing_args
    from navi_nb.cli import main

    def given(updates):
        return Namespace(shards=[1, 2], warmup="auto", updates=updates)

    assert timing_args(given(None)) == ([1, 2], "auto", 3)
    assert timing_args(given(None), 48) == ([1, 2], "auto", 48)
    assert timing_args(given(5), 48) == ([1, 2], "auto", 5)
    assert main(["bench", "train", "--scenes", "box", "--resolution", "32", "--updates", "0"]) == 2
    err = capsys.readouterr().err
    assert "bench train --updates 0: a count of timed updates (>= 1)" in err and "Traceback" not in err


def test_a_trainers_cores_busy_is_cpu_seconds_per_wall_second_after_the_first_update(tmp_path, monkeypatch):
    """The trainer's summary counts the process's CPU-seconds per wall second of collecting and learning,
    leaving out the first update (it waits for the learning kernels and picks the shard count)."""
    import math
    import time

    import numba

    from navi_nb.cores import allowed_cores
    from navi_nb.train.loop import Trainer

    cfg = tiny_config(tmp_path, total_steps=4096)
    with_threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        tr = Trainer.create(cfg)
        first = tr.train(progress=False, stop_after=1)
        assert math.isnan(first["cores_busy"])  # only the first update ran
        # a call's first update waits before learning (a resumed call's too): left out of the figure.
        # Numba runs one thread here, but the process has others (the thread pool's workers spin a little
        # after a parallel region of an earlier test, writers, the interpreter): over these ~16 ms its CPU
        # clock has read up to 1.09x the wall's. What always holds is the machine's bound: no more
        # CPU-seconds per wall second than the cores the process may use.
        second = Trainer.from_checkpoint(tmp_path / "run").train(progress=False, stop_after=3)
        assert 0.0 < second["cores_busy"] <= allowed_cores().allowed * 1.02, second
        # the figure is the CPU clock over the wall clock: a CPU clock made to run 1.5x the wall's reads 1.5
        # (1.5x the wall clock's last reading, which the trainer takes just before: no time passes between
        # the two readings, so a loaded machine's scheduling cannot move the ratio of a few-ms update)
        read_wall, last_wall = time.perf_counter, [0.0]

        def wall_clock():
            last_wall[0] = read_wall()
            return last_wall[0]

        monkeypatch.setattr(time, "perf_counter", wall_clock)
        monkeypatch.setattr(time, "process_time", lambda: 1.5 * last_wall[0])
        third = Trainer.from_checkpoint(tmp_path / "run").train(progress=False, stop_after=2)
    finally:
        numba.set_num_threads(with_threads)
    assert abs(third["cores_busy"] - 1.5) < 1e-3, third


def test_bench_train_takes_trains_env_flags_into_the_timed_environment(tmp_path, capsys):
    """``bench train --env KEY=VALUE`` as ``train --env``: with max_steps=8 every actor ends an episode at least
    every 8 steps, so the timed update's 64 steps of 4 actors end at least 4 * 64 / 8 = 32 episodes (the
    default 500-step limit ends hardly any); the setting is in the JSON. With --from-run it is refused."""
    import json

    from navi_nb.cli import main

    argv = ["bench", "--json", "-", "train", "--scenes", "box", "--resolution", "32", "--actors", "4"]
    argv += ["--sensor-az", "8", "--sensor-el", "4", "--shards", "1", "--updates", "1", "--warmup", "1"]
    assert main([*argv, "--env", "max_steps=8", "--env", "spawn=free"]) == 0
    out = capsys.readouterr().out
    data = json.loads(out[out.index("\n{") + 1 :])["train"]
    assert data["setting"]["env"] == {"max_steps": 8, "spawn": "free"}
    (row,) = data["runs"]
    assert row["actor_steps"] == 4 * 64 and row["episodes"] >= 32, row
    assert main(["bench", "train", "--from-run", str(tmp_path / "none"), "--env", "max_steps=8"]) == 2
    err = capsys.readouterr().err
    assert "the run's settings are timed; leave out --env" in err and "Traceback" not in err
    assert main([*argv, "--env", "max_steps=0"]) == 2  # checked as train checks it, before anything runs
    err = " ".join(capsys.readouterr().err.split())
    assert "max_steps must be an integer >= 1, got 0" in err and "Traceback" not in err


def test_bench_train_map_input_times_the_map_read_by_the_gru_alone(tmp_path, capsys):
    """``--map-input memory`` as train's: the runs with a memory build the policy whose trunks skip the map's
    crop (the setting is in the title and the JSON); without the map it is refused as train refuses it, and
    with --from-run (the run's own setting is timed)."""
    import json

    from navi_nb.cli import main

    argv = ["bench", "--json", "-", "train", "--scenes", "box", "--resolution", "32", "--actors", "4"]
    argv += ["--sensor-az", "8", "--sensor-el", "4", "--shards", "1", "--updates", "1", "--warmup", "1"]
    argv += ["--memory-size", "4", "--map-input", "memory"]
    assert main([*argv, "--env", "map_cell=0.5", "--env", "map_crop=4", "--env", "map_band=0.6"]) == 0
    out = capsys.readouterr().out
    assert "map_input=memory" in " ".join(out.split())
    data = json.loads(out[out.index("\n{") + 1 :])["train"]
    assert data["setting"]["map_input"] == "memory" and data["runs"][0]["actor_steps"] == 4 * 64
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "map_input memory needs the episodic map" in err and "Traceback" not in err
    assert main(["bench", "train", "--from-run", str(tmp_path / "none"), "--map-input", "memory"]) == 2
    err = capsys.readouterr().err
    assert "the run's settings are timed; leave out --map-input" in err and "Traceback" not in err
