"""Headline figures have one source: docs/headline.json, written by scripts/headline_figures.py.

Every figure the README and the docs quote from the quick start sits between markers
(``<!-- fig:KEY -->TEXT<!-- /fig -->``); its text must be headline.json's, headline.json's text must be its
value in the figure's format, and every figure must be quoted. The script itself runs end to end on a
tiny real run folder (a tiny training run with its evaluation, and a tiny held-out evaluation).
"""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from run_helpers import tiny_run_args

from navi_nb.cli import main

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("headline_figures", ROOT / "scripts" / "headline_figures.py")
hf = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(hf)

DOC_FILES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("NAVI_NB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def test_every_marked_figure_is_headline_json():
    data = json.loads((ROOT / "docs" / "headline.json").read_text())
    figures = data["figures"]
    assert set(figures) == set(hf.FIGURES)
    for key, fig in figures.items():
        assert fig["text"] == hf.text_of(key, fig["value"]), key
    used, problems = set(), []
    for path in DOC_FILES:
        text = path.read_text()
        found = hf.markers(text)
        # a marker the pattern does not read (a typo in it) would hold a hand-typed figure
        assert text.count("<!-- fig:") == len(found) and text.count("<!-- /fig -->") == len(found), path
        for key, inside, line in found:
            where = f"{path.relative_to(ROOT)}:{line}"
            if key not in figures:
                problems.append(f"{where}: fig:{key} is not in docs/headline.json")
            elif inside != figures[key]["text"]:
                problems.append(
                    f"{where}: fig:{key} reads {inside!r}, docs/headline.json says {figures[key]['text']!r}"
                )
            used.add(key)
    assert not problems, "\n".join(problems)
    assert used == set(figures), f"figures quoted nowhere: {sorted(set(figures) - used)}"
    assert hf.QUICKSTART_COMMAND in (ROOT / "README.md").read_text()  # the commands the figures name
    assert hf.DEFAULTS_COMMAND in (ROOT / "docs" / "PERFORMANCE.md").read_text()
    assert data["sources"]["corpus"]["commands"] == [hf.QUICKSTART_COMMAND]
    for name in ("quickstart", "heldout"):
        source = data["sources"][name]
        assert source["date"] and source["commands"] and source["machine"], name


def test_formats():
    assert [hf.percent(v) for v in (0.96, 0.765, 1.0, 0.0, 0.25)] == ["96 %", "76.5 %", "100 %", "0 %", "25 %"]
    assert hf.percent_range([0.9016, 0.9843]) == "90-98 %"
    assert [hf.sig3(v) for v in (2.0, 10.8, 60.0, 151.0, 0.125, 1234.0)] == [
        "2.00",
        "10.8",
        "60.0",
        "151",
        "0.125",
        "1,234",
    ]
    assert [hf.minutes(v) for v in (609, 59.6, 60)] == ["10 min 9 s", "1 min 0 s", "1 min 0 s"]
    assert hf.rewrite("a <!-- fig:quickstart.spl -->x<!-- /fig --> b", {"quickstart.spl": {"text": "0.50"}}, "t") == (
        "a <!-- fig:quickstart.spl -->0.50<!-- /fig --> b"
    )


def test_script_on_a_tiny_run(tmp_path, capsys):
    assert main(["train", *tiny_run_args(run_dir=str(tmp_path), name="qs")]) == 0
    run = tmp_path / "qs"
    held = tmp_path / "heldout.json"
    # a held-out evaluation in both of the corpus's families, 2 episodes each (round robin over the 2 worlds)
    heldout_argv = ["--scenes", "house:1000000,maze:1000000", "--episodes", "4", "--no-save", "--json", str(held)]
    assert main(["eval", str(run), *heldout_argv]) == 0
    doc = tmp_path / "DOC.md"
    # every figure but the long-way-round table's (its own test gives it the four families it needs)
    keys = [k for k in hf.FIGURES if not k.startswith("longway.")]
    original = "".join(f"| {k} | <!-- fig:{k} -->?<!-- /fig --> |\n" for k in keys)
    doc.write_text(original)
    out = tmp_path / "headline.json"
    argv = [str(run), "--wall-s", "75.4", "--held-out", str(held), "--out", str(out), "--docs", str(doc)]
    argv += ["--bench", str(bench_output(tmp_path / "bench.json", 2.0e6, 3.5e6, 8.0e6, 4313.4, 2861.3))]
    argv += ["--corpus", str(run), "--corpus-held-out", str(held), "--corpus-wall-s", "541"]  # a stand-in corpus run
    ablation = [x for row in hf.ABLATION_ROWS for x in ("--ablation", row, str(held))]  # stand-in rows
    argv = [argv[0], *ablation, *argv[1:]]
    assert hf.main(argv) == 0

    # independent answers: the per-episode values of the two evaluations and the run's record
    ev = json.loads((run / "eval.json").read_text())["per_episode"]
    ho = json.loads(held.read_text())["per_episode"]
    segment = json.loads((run / "run.json").read_text())["segments"][0]
    summary = segment["summary"]
    from navi_nb.cores import cpu_model

    assert segment["software"]["cpu"] == cpu_model()  # the run records its CPU; the machine line reads it
    expect = {}
    family = np.array(ho["family"])
    assert sorted(family.tolist()) == ["house", "house", "maze", "maze"]
    groups = [("quickstart", ev, None), ("heldout", ho, None)]
    groups += [(f"corpus.{f}", ho, family == f) for f in hf.FAMILIES]
    groups += [(f"ablation.{row}.{f}", ho, family == f) for row in hf.ABLATION_ROWS for f in hf.FAMILIES]
    for prefix, e, where in groups:
        pick = {k: np.asarray(e[k]) if where is None else np.asarray(e[k])[where] for k in ("success", "spl")}
        rate = np.mean(pick["success"])
        expect[f"{prefix}.success"] = f"{100 * rate:.0f} %" if (100 * rate) % 1 == 0 else f"{100 * rate:.1f} %"
        expect[f"{prefix}.spl"] = f"{np.mean(pick['spl']):.2f}"
        if not prefix.startswith("ablation."):
            distance = np.asarray(e["final_distance"]) if where is None else np.asarray(e["final_distance"])[where]
            expect[f"{prefix}.final_distance"] = f"{np.mean(distance):.2f}"
    expect["quickstart.actor_steps"] = "128"  # 4 actors x 16 steps x 2 updates
    expect["quickstart.actor_steps_per_s"] = f"{128 / summary['wall_s']:,.0f}"
    expect["quickstart.first_tick"] = f"{summary['first_tick_s']:.1f} s"
    expect["quickstart.shards"] = str(summary["shards"])
    expect["quickstart.wall"] = "1 min 15 s"
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    expect["corpus.actor_steps"] = "128"
    expect["corpus.actor_steps_per_s"] = f"{128 / last['time_s']:,.0f}"
    expect["corpus.wall"] = "9 min 1 s"
    expect["bench.trace_vs_embree_2t"] = "0.22x"  # 3.5 M / 2 threads / 8 M
    expect["bench.env_2t"] = "4,313"
    for row in hf.ABLATION_ROWS:  # each row the held-out evaluation given for it, and its run's rate
        expect[f"ablation.{row}.actor_steps_per_s"] = expect["corpus.actor_steps_per_s"]
    rows = dict(line.strip("| ").split(" | ") for line in doc.read_text().splitlines())
    data = json.loads(out.read_text())
    for key, text in expect.items():
        assert rows[key] == f"<!-- fig:{key} -->{text}<!-- /fig -->", key
    for key in keys:
        assert rows[key] == f"<!-- fig:{key} -->{data['figures'][key]['text']}<!-- /fig -->", key
    assert data["sources"]["quickstart"]["evaluation"]["episodes"] == 4
    assert data["sources"]["heldout"]["evaluation"]["scenes"] == "house:1000000,maze:1000000"
    # an evaluation written by an earlier version (spl, final_distance and their intervals under their former
    # names) gives the same figures
    from navi_nb.train.evaluate import RENAMED_RESULTS

    former = {new: old for old, new in RENAMED_RESULTS.items()}

    def earlier(value, key=""):
        if not isinstance(value, dict) or key == "per_episode":
            return value
        return {former.get(k, k): earlier(v, k) for k, v in value.items()}

    res = json.loads(held.read_text())
    old = tmp_path / "heldout_earlier.json"
    old.write_text(json.dumps(earlier(res)))
    assert "spl" in json.loads(old.read_text())["families"]["maze"] and "spl_mean" in res["families"]["maze"]
    assert hf.read_eval(old, "x") == hf.read_eval(held, "x") == res
    assert hf.heldout(old, "qs", "m")[0] == hf.heldout(held, "qs", "m")[0]

    assert "house:1000000,maze:1000000 --episodes 4" in data["sources"]["heldout"]["commands"][0]
    assert data["sources"]["heldout"]["machine"] == data["sources"]["quickstart"]["machine"]
    assert data["sources"]["quickstart"]["machine"].startswith(cpu_model() + ", ")
    assert data["sources"]["corpus"]["commands"][1].endswith("--scenes house:1000000,maze:1000000 --episodes 4")
    # the command that makes the run: its settings that differ from the defaults, as flags
    (command,) = data["sources"]["quickstart"]["commands"]
    flags = ["--scenes box", "--resolution 32", "--actors 4", "--hidden 16", "--env max_steps=20", "--name qs"]
    assert command.startswith("navi-nb train --") and all(f in command for f in flags), command
    assert "--run-dir" not in command and "--shards" not in command and "--seed" not in command

    # bad input: one line naming it, nothing written
    capsys.readouterr()
    doc.write_text(original + "<!-- fig:quickstart.nope -->1<!-- /fig -->\n")
    before = out.read_bytes()
    assert hf.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{doc}:{len(keys) + 1}: marker fig:quickstart.nope" in err, err
    assert out.read_bytes() == before and "?" in doc.read_text()
    assert hf.main(argv[:-2]) == 2  # --corpus without its wall time
    assert "go together" in capsys.readouterr().err
    assert hf.main(argv[:-4]) == 2  # --corpus without its evaluation
    assert "go together" in capsys.readouterr().err
    assert hf.main([str(tmp_path), *argv[1:]]) == 2
    assert "config.json" in capsys.readouterr().err
    one_family = json.loads(held.read_text())
    del one_family["families"]["maze"]
    (tmp_path / "houses_only.json").write_text(json.dumps(one_family))
    corpus_at = argv.index("--corpus-held-out") + 1
    assert hf.main([*argv[:corpus_at], str(tmp_path / "houses_only.json"), *argv[corpus_at + 1 :]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "houses_only.json: has no maze episodes" in err, err
    assert hf.main([argv[0], "--ablation", "gru_geodesic.maze", str(held), *argv[1:]]) == 2
    assert "not a row of the table" in capsys.readouterr().err
    assert out.read_bytes() == before
    (run / "eval.json").write_text(json.dumps(dict(json.loads((run / "eval.json").read_text()), scenes="house")))
    assert hf.main(argv) == 2
    assert "not the run's own" in capsys.readouterr().err


def test_a_resumed_run_is_read_over_its_segments(tmp_path):
    import argparse

    from navi_nb.commands.train import add_arguments, resolve_config
    from navi_nb.train.loop import Trainer

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    cfg = resolve_config(parser.parse_args(tiny_run_args(run_dir=str(tmp_path), name="two")))
    Trainer.create(cfg).train(progress=False, stop_after=1)
    Trainer.resume(tmp_path / "two").train(progress=False)
    assert main(["eval", str(tmp_path / "two"), "--episodes", "2"]) == 0
    segments = json.loads((tmp_path / "two" / "run.json").read_text())["segments"]
    assert [s["summary"]["updates"] for s in segments] == [1, 2]
    figs, source = hf.quickstart(tmp_path / "two", 10.0)
    walls = [s["summary"]["wall_s"] for s in segments]
    assert figs["quickstart.actor_steps"]["value"] == 128 and source["segments"] == 2
    assert figs["quickstart.actor_steps_per_s"]["value"] == pytest.approx(128 / sum(walls))  # 64 steps each
    assert figs["quickstart.first_tick"]["value"] == segments[0]["summary"]["first_tick_s"]  # the first start's


def bench_output(path, trace_1t, trace_2t, embree, env_2t, train_2s, cpu="Test CPU"):
    """A file shaped as ``navi-nb bench --json`` writes it, holding only what the bench figures read."""
    anatomy = {"kinds": {"steps": {"mean": 7.5}}}
    data = {
        "machine": {
            "cpu": cpu,
            "cpu_count": 2,
            "allowed_cores": 2,
            "python": "3.11.7",
            "numpy": "2.4",
            "numba": "0.68",
        },
        "trace": {
            "threads": {"1": {"rays_per_s": trace_1t}, "2": {"rays_per_s": trace_2t}},
            "embree": {
                "rays_per_s": embree,
                "depth_diff_p99_voxels": 0.459,
                "hit_agreement": 0.99991,
                "outliers": {"outliers": 155},
            },
            "anatomy": {"bench scene": anatomy, "house:0 at 128": {"kinds": {"steps": {"mean": 6.731}}}},
            "load_average_before": [1.0, 1.0, 0.5],
        },
        "env": {"main": {"1": {"actor_steps_per_s": 2446.3}, "2": {"actor_steps_per_s": env_2t}}},
        "ppo": {"nets": {n: {"shards": {"2": {"speedup_vs_1": 1.8}}} for n in ("default", "small")}},
        "train": {
            "runs": [
                {"shards": 1, "ranks": 1, "actor_steps_per_s": 1688.7},
                {"shards": 2, "ranks": 1, "actor_steps_per_s": train_2s},
            ]
        },
    }
    path.write_text(json.dumps(data))
    return path


def test_the_bench_block_is_the_median_of_runs_with_their_range(tmp_path, capsys):
    files = [
        bench_output(tmp_path / "a.json", 2.0e6, 3.5e6, 8.0e6, 4313.4, 2861.3),
        bench_output(tmp_path / "b.json", 2.5e6, 4.6e6, 6.0e6, 4100.0, 3000.0),
        bench_output(tmp_path / "c.json", 2.2e6, 4.0e6, 7.0e6, 4500.6, 2500.0),
    ]
    figs, source = hf.bench([str(f) for f in files])
    text = {k: v["text"] for k, v in figs.items()}
    assert text["bench.runs"] == "3"
    assert text["bench.machine"] == "Test CPU, 2 cores allowed of 2 reported; Python 3.11.7, NumPy 2.4, Numba 0.68"
    assert text["bench.trace_1t"] == "2.20 M (2.00 M to 2.50 M)"
    assert text["bench.embree_1t"] == "7.00 M (6.00 M to 8.00 M)"
    # per run: 2.0/8.0 = 0.25, 2.5/6.0 = 0.4167, 2.2/7.0 = 0.3143; per thread at 2: 0.21875, 0.38333, 0.28571
    assert text["bench.trace_vs_embree_1t"] == "0.31x (0.25x to 0.42x)"
    assert text["bench.trace_vs_embree_2t"] == "0.29x (0.22x to 0.38x)"
    assert text["bench.trace_scaling"] == "1.82x (1.75x to 1.84x)"  # 1.75, 1.84, 1.818
    assert text["bench.trace_hits_equal"] == "99.99 %"  # the same in every run: no range
    assert text["bench.env_2t"] == "4,313 (4,100 to 4,501)"
    assert text["bench.train_2s"] == "2,861 (2,500 to 3,000)"
    assert text["bench.steps_house"] == "6.73"
    assert source["machine"] == text["bench.machine"] and source["from"] == "a.json, b.json, c.json"
    one, _ = hf.bench([str(files[0])])
    assert one["bench.trace_1t"]["text"] == "2.00 M" and one["bench.runs"]["text"] == "1"

    # through the script: only the bench block given, the others kept from the existing headline.json
    out = tmp_path / "headline.json"
    out.write_text((ROOT / "docs" / "headline.json").read_text())
    doc = tmp_path / "DOC.md"
    doc.write_text("<!-- fig:bench.env_2t -->?<!-- /fig --> <!-- fig:quickstart.spl -->?<!-- /fig -->\n")
    assert hf.main(["--bench", *map(str, files), "--out", str(out), "--docs", str(doc)]) == 0
    kept = json.loads((ROOT / "docs" / "headline.json").read_text())["figures"]["quickstart.spl"]["text"]
    env = "<!-- fig:bench.env_2t -->4,313 (4,100 to 4,501)<!-- /fig -->"
    assert doc.read_text() == f"{env} <!-- fig:quickstart.spl -->{kept}<!-- /fig -->\n"

    # bad input: one line naming the file, nothing written
    capsys.readouterr()
    before, doc_before = out.read_bytes(), doc.read_bytes()
    other = bench_output(tmp_path / "d.json", 2.0e6, 3.5e6, 8.0e6, 4313.4, 2861.3, cpu="Another CPU")
    assert hf.main(["--bench", str(files[0]), str(other), "--out", str(out), "--docs", str(doc)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "d.json: ran on 'Another CPU" in err, err
    broken = tmp_path / "e.json"
    broken.write_text(json.dumps({"machine": {"cpu": "Test CPU"}, "trace": {}}))
    assert hf.main(["--bench", str(broken), "--out", str(out), "--docs", str(doc)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "e.json: has no trace.threads" in err, err
    assert hf.main(["--held-out", str(files[0]), "--out", str(out), "--docs", str(doc)]) == 2
    assert "needs the quick start's run folder" in capsys.readouterr().err
    assert out.read_bytes() == before and doc.read_bytes() == doc_before


def test_the_long_way_round_table_reads_each_family_and_its_long_detours(tmp_path, capsys):
    assert main(["train", *tiny_run_args(run_dir=str(tmp_path), name="lw")]) == 0
    run = tmp_path / "lw"
    files = []
    for name, scenes in (("a", "house:1000000,maze:1000000"), ("b", "rooms:1000000,bigmaze:1000000")):
        files.append(tmp_path / f"{name}.json")
        argv = ["eval", str(run), "--scenes", scenes, "--episodes", "4", "--no-save", "--json", str(files[-1])]
        assert main(argv) == 0
    groups = [[row, str(files[0]), str(files[1])] for row in hf.LONGWAY_ROWS]
    figs, sources = hf.longway(groups)

    # independent answers: each family's episodes in the per-episode records
    for path in files:
        ep = json.loads(path.read_text())["per_episode"]
        fam, success = np.array(ep["family"]), np.array(ep["success"], dtype=float)
        ratio = np.array([np.nan if r is None else r for r in ep["ratio"]], dtype=float)
        spl = np.array([np.nan if v is None else v for v in ep["spl"]], dtype=float)
        for family in dict.fromkeys(fam):
            pick = fam == family
            long = pick & (ratio >= 1.5)
            for row in hf.LONGWAY_ROWS:
                p = f"longway.{row}.{family}"
                assert figs[f"{p}.success"]["value"] == pytest.approx(success[pick].mean())
                assert figs[f"{p}.spl"]["value"] == pytest.approx(np.nanmean(spl[pick]))
                assert figs[f"{p}.detour_episodes"]["value"] == long.sum()
                want = success[long].mean() if long.any() else None
                assert figs[f"{p}.detour_success"]["value"] == (want if want is None else pytest.approx(want))
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert figs["longway.gru.actor_steps_per_s"]["value"] == pytest.approx(last["global_step"] / last["time_s"])
    assert set(figs) == {k for k in hf.FIGURES if k.startswith("longway.")}
    assert sources["map"]["commands"][2].endswith("--scenes rooms:1000000,bigmaze:1000000 --episodes 4")

    # the long-detour bin: a count and a rate, a dash where no episode is in it
    res = {"per_episode": {"family": ["rooms"] * 4 + ["maze"], "ratio": [1.2, 1.5, 2.0, None, 3.0]}}
    res["per_episode"]["success"] = [False, True, False, True, False]
    assert hf.long_detours(res, "rooms", "x") == (2, 0.5)
    assert hf.long_detours(res, "house", "x") == (0, None)
    assert hf.text_of("longway.map.rooms.detour_success", None) == "–"

    # through the script, the other blocks kept from the existing headline.json
    out = tmp_path / "headline.json"
    out.write_text((ROOT / "docs" / "headline.json").read_text())
    doc = tmp_path / "DOC.md"
    doc.write_text("<!-- fig:longway.mapgru.bigmaze.success -->?<!-- /fig -->\n")
    argv = [x for g in groups for x in ("--long-ablation", *g)] + ["--out", str(out), "--docs", str(doc)]
    assert hf.main(argv) == 0
    assert (
        doc.read_text()
        == f"<!-- fig:longway.mapgru.bigmaze.success -->{figs['longway.mapgru.bigmaze.success']['text']}<!-- /fig -->\n"
    )

    # bad input: one line naming it, nothing written
    capsys.readouterr()
    before = out.read_bytes()
    for bad, says in (
        (["--long-ablation", "lstm", str(files[0])], "--long-ablation lstm: not a row of the table"),
        (["--long-ablation", "map"], "--long-ablation map: names no evaluation file"),
        (["--long-ablation", "map", str(files[0])], "--long-ablation map: no file holds rooms episodes"),
        (["--long-ablation", "map", str(files[0]), str(files[0])], "a.json: holds house episodes, as"),
    ):
        assert hf.main([*bad, "--out", str(out), "--docs", str(doc)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err, err
    assert out.read_bytes() == before
