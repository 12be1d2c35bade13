"""Training with the episodic map on: the same bits at 1 and 2 shards, an exact resume, a run's map settings
kept (a resume or an evaluation with other ones refused in one line naming both), bad map settings refused
before anything is written, and `navi-nb render` drawing the map an episode ended with."""

import numpy as np
import pytest
from run_helpers import tiny_run_args
from test_train_resume import tiny_config

from navi_nb.cli import main
from navi_nb.train import checkpoint as ck
from navi_nb.train.loop import Trainer

MAP_ENV = {"max_steps": 20, "map_cell": 0.5, "map_crop": 6, "map_band": 0.6}  # 8 x 4 rays: rows at +-0.52 rad
MAP_FLAGS = ["--env", "map_cell=0.5", "--env", "map_crop=6", "--env", "map_band=0.6"]


@pytest.fixture(autouse=True)
def _world_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("NAVI_NB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def _state_bytes(trainer):
    return {k: np.ascontiguousarray(v).tobytes() for k, v in trainer.state_arrays().items()}


def _files(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.name != ".lock")


@pytest.mark.parametrize("map_input, coarse", [("all", 0), ("memory", 0), ("memory", 2)])
def test_same_bits_at_1_and_2_shards_and_an_exact_resume(tmp_path, map_input, coarse):
    """A GRU policy over observations with the map (read by the GRU and both trunks, or by the GRU alone; with
    and without the coarse channel): 2 shards give the bytes of 1, and a run stopped after 2 updates and resumed
    ends with the bytes of the uninterrupted one (the maps are in the checkpoint)."""
    env = {**MAP_ENV, "map_coarse": coarse} if coarse else MAP_ENV
    runs = {}
    for name, shards in (("one", 1), ("two", 2)):
        cfg = tiny_config(tmp_path, memory_size=8, env=env, shards=shards, map_input=map_input)
        t = Trainer.create(cfg, run_path=tmp_path / name)
        assert t.policy.trunk_obs == (t.env.obs_layout["map"].start if map_input == "memory" else t.env.obs_dim)
        t.train(progress=False)
        columns = 6 * 6 * (4 if coarse else 3)
        assert t.update == 4 and t.env.obs_layout["map"].stop - t.env.obs_layout["map"].start == columns
        runs[name] = _state_bytes(t)
    assert runs["one"].keys() == runs["two"].keys() and "env.map" in runs["one"]
    for k in runs["one"]:
        assert runs["one"][k] == runs["two"][k], k
    assert np.frombuffer(runs["one"]["env.map"], np.uint8).any()

    part = Trainer.create(
        tiny_config(tmp_path, memory_size=8, env=env, map_input=map_input), run_path=tmp_path / "part"
    )
    part.train(progress=False, stop_after=2)
    del part
    resumed = Trainer.resume(tmp_path / "part")
    assert resumed.update == 2
    resumed.train(progress=False)
    b = _state_bytes(resumed)
    for k in runs["one"]:
        assert runs["one"][k] == b[k], k


def test_an_mlp_trains_with_the_map_and_its_settings_are_kept(tmp_path, capsys):
    """An MLP run with the map through the CLI; resuming or evaluating it with another map setting is refused in
    one line naming the run's value and the one asked for, with nothing written."""
    run = tmp_path / "mlp"
    assert main(["train", *tiny_run_args(name="mlp", run_dir=str(tmp_path), eval_episodes=0), *MAP_FLAGS]) == 0
    capsys.readouterr()
    latest = ck.latest_checkpoint(run / "checkpoints")
    assert latest is not None
    before = _files(run)
    code = main(["train", "--resume", str(run), "--env", "map_cell=1.0", "--no-progress"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and "cannot change env when resuming" in err and "env map_cell=0.5 (asked 1.0)" in err, err
    assert err.count("error:") == 1 and "Traceback" not in err
    code = main(["eval", str(run), "--episodes", "2", "--no-save", "--env", "map_crop=8"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and "eval --env map_crop=8: the run's config says map_crop=6" in err, err
    assert _files(run) == before


@pytest.mark.parametrize(
    "setting, words",
    [
        ("map_cell=0.01", "map_cell must be 0 (off) or metres in 0.05..10, got 0.01"),
        ("map_crop=100", "map_crop must be an integer in 2..64 (cells), got 100"),
        ("map_channels=1", "map_channels must be 2 or 3, got 1"),
        ("map_coarse=1", "map_coarse must be 0 (off) or an integer in 2..16 (map cells a side of a coarse cell)"),
    ],
)
def test_bad_map_settings_exit_2_writing_nothing(tmp_path, capsys, setting, words):
    args = tiny_run_args(name="bad", run_dir=str(tmp_path), eval_episodes=0)
    assert main(["train", *args, "--env", "map_cell=0.5", "--env", setting]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert words in err and err.count("error:") == 1 and "Traceback" not in err, err
    assert not (tmp_path / "bad").exists()


def test_render_draws_the_map_an_episode_ended_with(tmp_path, capsys):
    pytest.importorskip("PIL")
    from PIL import Image

    from navi_nb.train.render_episode import MAP_OCCUPIED, MAP_UNSEEN, EpisodeData

    run = tmp_path / "drawn"
    assert main(["train", *tiny_run_args(name="drawn", run_dir=str(tmp_path), eval_episodes=2), *MAP_FLAGS]) == 0
    out = tmp_path / "episode.png"
    assert main(["render", str(run), "--episode", "0", "-o", str(out)]) == 0
    capsys.readouterr()
    ep = EpisodeData(run, 0)
    cells, grid = ep.final_map()
    visits = cells[..., 0]
    assert visits.sum() == ep.length + 1  # one visit per observation of the episode, the first included
    assert (cells[..., 1] & 2).any() and (cells[..., 1] & 1).any()
    pixels = {tuple(p) for p in np.asarray(Image.open(out).convert("RGB")).reshape(-1, 3)}
    assert MAP_UNSEEN in pixels and MAP_OCCUPIED in pixels
