"""Every `navi-nb bench` table reads whole at 80 columns: no cell cut short, no line past the edge."""

import io
from argparse import Namespace

import pytest
from rich.console import Console

from navi_nb.bench import compile as bench_compile
from navi_nb.bench import env as bench_env
from navi_nb.bench import trace as bench_trace
from navi_nb.bench import train as bench_train
from navi_nb.bench.machine import summary_table
from navi_nb.train.config import TrainConfig


def render(tables, width=80):
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    for t in tables:
        console.print(t)
    return console.export_text()


def check_whole(text, figures, width=80):
    lines = text.split("\n")
    assert all(len(line) <= width for line in lines), [line for line in lines if len(line) > width]
    assert "…" not in text, text
    for figure in figures:
        assert figure in text, (figure, text)


ENV_ARGS = Namespace(scenes="house", actors=4096, sensor_az=256, sensor_el=48, max_distance=10.0)
ENV_RESULT = {
    "main": {
        1: {
            "actor_steps_per_s": 3_718_512.4,
            "ms_per_step": 1101.42,
            "spread": 0.314,
            "trace_ms": 987.65,
            "rest_ms": 113.77,
            "cpu_ms_per_step": 2203.31,
            "no_trace_actor_steps_per_s": 36_001_234.0,
        },
        2: {
            "actor_steps_per_s": 7_437_024.8,
            "ms_per_step": 550.71,
            "spread": 1.5,
            "trace_ms": 493.82,
            "rest_ms": 56.89,
            "cpu_ms_per_step": 1101.65,
            "no_trace_actor_steps_per_s": 72_002_468.0,
        },
        "speedup": 2.0,
    },
    "canonical": {
        1: {"ms_per_step": 412.3, "spread": 0.05, "trace_ms": 400.1},
        2: {"ms_per_step": 20.6, "spread": 0.05, "trace_ms": 19.0},
    },
    "scaling": {
        16: {
            "us_per_actor_step": 1234.5,
            "trace_us_per_actor_step": 1200.1,
            "rest_us_per_actor_step": 34.4,
            "bytes_per_actor": 123_456,
        },
        4096: {
            "us_per_actor_step": 12.3,
            "trace_us_per_actor_step": 11.0,
            "rest_us_per_actor_step": 1.3,
            "bytes_per_actor": 9_876_543,
        },
    },
}


def test_env_tables():
    text = render(
        [
            *bench_env.main_tables(ENV_RESULT, ENV_ARGS),
            bench_env.canonical_table(ENV_RESULT),
            bench_env.scaling_table(ENV_RESULT, ENV_ARGS, 2),
        ]
    )
    check_whole(
        text,
        [
            "3,718,512",
            "7,437,025",
            "1101.42",
            "31%",
            "150%",
            "1239.50x",
            "987.65",
            "113.77",
            "2203.31",
            "72,002,468",
            "11.30x slower",
            "1.77x faster",
            "4,096",
            "9,876,543",
            "1234.5",
            "threads",
            "actor-steps/s",
            "no-trace steps/s",
        ],
    )


def test_trace_tables():
    result = {
        "scene": {"triangles": 35_123, "resolution": 512, "voxel_m": 0.0123},
        "rays": 4_194_304,
        "actors": 4096,
        "sensor": [64, 16],
        "threads": {
            1: {
                "rays_per_s": 12_345_678.0,
                "rays_per_s_best": 13_456_789.0,
                "min_s": 0.31,
                "max_s": 0.62,
                "rays_per_cpu_s": 12_999_999.0,
            },
            2: {
                "rays_per_s": 23_456_789.0,
                "rays_per_s_best": 24_567_890.0,
                "min_s": 0.17,
                "max_s": 0.2,
                "rays_per_cpu_s": 11_999_999.0,
            },
        },
        "embree": {
            "rays_per_s": 3_000_000.0,
            "rays_per_s_best": 3_100_000.0,
            "min_s": 1.3,
            "max_s": 1.4,
            "rays_per_cpu_s": 2_999_999.0,
        },
    }
    text = render(bench_trace.rate_tables(result))
    check_whole(
        text,
        [
            "navi_nb, 1 thread",
            "navi_nb, 2 threads",
            "Embree, 1 thread",
            "12,345,678",
            "13,456,789",
            "100%",
            "12,999,999",
            "23,456,789",
            "4.12x",
            "7.82x",
            "3.91x",
            "4.33x",
            "4.00x",
            "3,000,000",
            "2,999,999",
        ],
    )


def test_compile_tables():
    run = {
        "resolution": 512,
        "triangles": 35_123,
        "voxel_m": 0.0123,
        "warm_s": 2.34,
        "first_s": 51.2,
        "peak_mb": 1234.5,
        "rss_before_mb": 234.5,
        "nodes": 12_345_678,
        "bytes": 49_382_712,
    }
    result = {"machine": {"numba_threads": 2}, "runs": [dict(run, resolution=128), run]}
    text = render(bench_compile.run_tables(result))
    check_whole(text, ["0.0123", "2.34", "51.20", "1234", "234", "12,345,678", "48,225", "3.8x", "0.4x"])


def test_train_table():
    cfg = TrainConfig()
    rows = [
        {
            "shards": s,
            "actor_steps_per_s": rate,
            "wall_s": 10.0,
            "cpu_s": 10.0 * s - 1.5 * (s - 1),  # at 2 shards 18.5 CPU-s in 10 s: one thread alone 15 % of it
            "split_s": {"tracing": 4.0, "environment": 2.5, "policy": 1.0, "ppo": 2.4, "other": 0.1},
        }
        for s, rate in ((1, 123_456.0), (2, 234_567.0))
    ]
    check_whole(
        render([bench_train.split_table(cfg, rows)]),
        [
            "123,456",
            "234,567",
            "1.90x",
            "40%",
            "25%",
            "10%",
            "24%",
            "1%",
            "steps/s",
            "speed-up",
            "other",
            "1.85",
            "15%",
        ],
    )
    older = [{k: v for k, v in r.items() if k != "cpu_s"} for r in rows]  # JSON from before CPU time was kept
    assert "CPU time" not in render([bench_train.split_table(cfg, older)])
    ranked = [dict(r, ranks=k) for r in rows for k in (1, 2)]  # under mpiexec: a ranks column too
    check_whole(render([bench_train.split_table(cfg, ranked)]), ["ranks", "policy", "other", "234,567", "1.90x"])
    assert "map" not in render([bench_train.split_table(cfg, rows)])  # no column without the episodic map
    mapped = [dict(r, split_s=dict(r["split_s"], environment=2.2, map=0.3)) for r in rows]  # a run with the map
    check_whole(render([bench_train.split_table(cfg, mapped)]), ["map", "3.0%", "22%", "policy", "234,567"])


def test_summary_table_sections():
    long = "12.3 ms/call, best 11.0, 20.1 CPU-ms (Navi GPU: 36.5 ms/step; 2.97x)"
    table = summary_table(
        "navi-nb bench: summary",
        None,
        sections=[
            ("trace", [["canonical 4 x 256 x 48, 2 threads", long], ["rays that hit", "97.1%"]]),
            ("env", [["actor-steps/s (4096 actors, 256x48, 2 thr)", "3,718,512"]]),
        ],
    )
    text = render([table])
    check_whole(text, ["trace", "env", "3,718,512", "97.1%", "36.5", "2.97x)", "(4096"])


@pytest.mark.parametrize("width", [80, 120])
def test_tables_hold_at_wider_terminals(width):
    text = render(bench_env.main_tables(ENV_RESULT, ENV_ARGS), width)
    check_whole(text, ["3,718,512", "72,002,468"], width)


def test_meshfield_rate_table_fits_80_columns():
    from navi_nb.bench.meshfield import rate_table

    rows = [
        {
            "workload": "cells@512, cap 4 voxels",
            "points": 1_234_567,
            "mpts_s_1t": 5.07,
            "mpts_s_2t": 13.67,
            "mpts_cpu_s_1t": 5.97,
        },
        {
            "workload": "uniform, cap 16 voxels",
            "points": 1_000_000,
            "mpts_s_1t": 2.52,
            "mpts_s_2t": 2.48,
            "mpts_cpu_s_1t": 2.55,
        },
    ]
    check_whole(
        render([rate_table(rows)]), ("cells@512, cap 4 voxels", "1,234,567", "5.07", "13.67", "2.70", "5.97", "0.98")
    )


def test_fuzz_outcome_table():
    from navi_nb.commands.fuzz import outcome_table
    from navi_nb.fuzz.gmdag import GMDAG_MUTATORS, LOAD_MODES
    from navi_nb.fuzz.outcomes import Report

    report = Report(target="gmdag", seed=2026, cases=123_456, jobs=2, timeout=10.0, seconds=1234.5)
    names = sorted(GMDAG_MUTATORS)
    for k in range(3000):  # every outcome, in the widest mutator and mode names
        outcome = (
            ("ok", "rejected")[k % 2] if k > 20 else ("crash", "hang", "non-finite", "traceback", "warning")[k % 5]
        )
        report.add(k, outcome, names[k % len(names)], LOAD_MODES[k % len(LOAD_MODES)], "detail")
    for _ in range(120_000):  # counts with thousands separators
        report.counts["rejected"] += 1
    title = "navi-nb fuzz --target gmdag --cases 123456 --seed 2026: 2 jobs, 1234.5 s"
    text = render([outcome_table(report, title)])
    c = report.counts
    check_whole(
        text,
        [max(names, key=len), "inspect", f"{c['ok']:,}", f"{c['rejected']:,}", "rejected", "failed", "21"]
        + [f"{o} {c[o]}" for o in ("crash", "hang", "non-finite", "traceback", "warning")]
        + ["navi-nb fuzz --target gmdag", "1234.5 s"],
    )


def test_ppo_tables():
    from navi_nb.bench import ppo as bench_ppo

    def shard(k, sps):
        return {
            "samples_per_s": sps,
            "spread": 0.123,
            "speedup_vs_1": sps / 57_719.0,
            "vs_torch": sps / 68_268.0,
            "gflops": 142.37,
            "pct_matmul": 71.2,
            "critical_ms_per_minibatch": 17.742 / k,
            # per CPU-second: timed at 1 shard only
            **(
                {"samples_per_cpu_s": 61_234.0, "per_core_vs_torch": 1.65, "per_core_pct_matmul": 83.4}
                if k == 1
                else {}
            ),
            **({"idle_speedup_estimate": 1.93} if k == 2 else {}),
        }

    net = {
        "obs": 1037,
        "hidden": [128, 128],
        "minibatch": 1024,
        "n_params": 1_234_567,
        "shards": {1: shard(1, 57_719.0), 2: shard(2, 1_112_729.0)},
        "torch": {
            "samples_per_s": 68_268.0,
            "spread": 0.05,
            "threads": 16,
            "samples_per_cpu_s_1t": 37_000.0,
            "gflops": 86.1,
            "pct_matmul": 43.0,
            "per_core_pct_matmul": 50.4,
        },
    }
    res = {
        "gemm": "numba-tiles",
        "matmul": {"gflops": 200.4, "gflops_per_cpu_s_1t": 98.7},
        "nets": {"default": net, "small": dict(net, torch=None)},
    }
    text = render(bench_ppo.rate_tables(res))
    check_whole(
        text,
        [
            "1037",
            "128 x 128",
            "1,024",
            "1,234,567",
            "navi 1 sh",
            "navi 2 sh",
            "torch 16 thr",
            "57,719",
            "1,112,729",
            "68,268",
            "12%",
            "19.28x",
            "16.30x",
            "142.4",
            "71%",
            "17.742",
            "8.871",
            "1.93x",
            "61,234",
            "1.65x",
            "83%",
            "37,000",
            "50%",
            "86.1",
            "43%",
            "samples/s",
            "vs 1 shard",
            "vs torch",
            "GFLOP/s",
            "% matmul",
            "critical ms",
            "idle est.",
            "samples/CPU-s",
            "numba-tiles",
            "200.4",
            "98.7",
        ],
    )
    # every row of every table names its net and who ran it
    assert text.count("torch 16 thr") == 3 and text.count("navi 1 sh") == 6 and text.count("navi 2 sh") == 4


def test_eval_table_with_families_reads_whole_at_80_columns():
    """`navi-nb eval` over several scene families: every split's and family's row whole at 80 columns."""
    from navi_nb.train.report import print_results

    def group(n, rate):
        return {
            "episodes": n,
            "success_rate": rate,
            "success_rate_ci95": (rate - 0.05, min(1.0, rate + 0.04)),
            "spl_mean": 0.53,
            "spl_mean_ci95": (0.49, 0.58),
            "final_distance_mean": 1.06,
            "final_distance_mean_ci95": (0.81, 1.36),
        }

    fams = {"house": group(100, 0.81), "maze": group(100, 0.78), "clutter": group(100, 0.97)}
    res = {
        **group(300, 0.853),
        "task": "pointgoal",
        "scenes": "house:1000000-1000099,maze:1000000-1000099,clutter:1000000-1000099",
        "worlds": 300,
        "worlds_visited": 300,
        "seed": 1000003,
        "splits": {"held-out": group(300, 0.853)},
        "families": fams,
        "return_mean": 11.0,
        "return_std": 6.6,
        "length_mean": 111.7,
        "collisions_mean": 1.85,
        "policy": {"source": "policy.npz", "update": 733},
        "wall_s": 27.5,
    }
    console = Console(width=80, record=True, file=io.StringIO(), color_system=None)
    print_results(console, res)
    text = console.export_text()
    check_whole(
        text, ["held-out", "clutter", "97.0% (92-100%)", "81.0% (76-85%)", "0.53 (0.49-0.58)", "1.06 (0.81-1.36)"]
    )
