"""TrainConfig: defaults, file + flag layering, validation, hash."""
import argparse
import json

import pytest

from navi_nb.commands import train as train_cmd
from navi_nb.train.config import (FIELD_NAMES, RESULT_FIELDS, ConfigError, TrainConfig, field_docs, from_dict,
                                  read_config_file)


def _args(argv):
    p = argparse.ArgumentParser()
    train_cmd.add_arguments(p)
    return p.parse_args(argv)


def test_every_field_is_documented():
    docs = field_docs()
    assert set(docs) == set(FIELD_NAMES)
    assert all(len(d) > 10 for d in docs.values())


def test_defaults_are_valid_and_hash_is_stable():
    a, b = TrainConfig().validate(), TrainConfig().validate()
    assert a.hash() == b.hash() and len(a.hash()) == 16
    assert a.scene == "house" and a.task == "pointgoal" and a.actors == 64
    assert a.num_updates * a.batch_size >= a.total_steps
    # run bookkeeping does not change the hash; results settings do
    b.shards, b.name, b.checkpoint_every = 2, "x", 3
    assert b.hash() == a.hash()
    b.seed = 1
    assert b.hash() != a.hash()
    assert "shards" not in RESULT_FIELDS and "seed" in RESULT_FIELDS


def test_file_then_flags_override(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text('scene = "box"\nactors = 8\nseed = 3\nhidden = [32, 32]\n[env]\nmax_steps = 100\n')
    cfg = train_cmd.resolve_config(_args(["--config", str(toml), "--actors", "16", "--env", "dt=0.05"]))
    assert (cfg.scene, cfg.actors, cfg.seed, cfg.hidden) == ("box", 16, 3, [32, 32])
    assert cfg.env == {"max_steps": 100, "dt": 0.05}
    js = tmp_path / "c.json"
    js.write_text(json.dumps({"task": "explore", "lr": 1}))
    with pytest.raises(ConfigError, match="unknown setting.*lr"):
        train_cmd.resolve_config(_args(["--config", str(js)]))
    js.write_text(json.dumps({"task": "explore", "learning_rate": 1}))
    cfg = train_cmd.resolve_config(_args(["--config", str(js), "--sensor", "32x8", "--hidden", "16"]))
    assert (cfg.task, cfg.learning_rate, cfg.sensor_az, cfg.sensor_el, cfg.hidden) == ("explore", 1.0, 32, 8, [16])


@pytest.mark.parametrize("data, match", [
    ({"actors": 0}, "actors"), ({"actors": 2.5}, "actors"), ({"task": "fly"}, "task"),
    ({"hidden": []}, "hidden"), ({"learning_rate": -1.0}, "learning_rate"), ({"gamma": 1.5}, "gamma"),
    ({"actors": 3, "rollout_steps": 3, "minibatches": 4}, "minibatches"), ({"name": "a/b"}, "name"),
    ({"anneal_lr": 1}, "anneal_lr"), ({"target_kl": float("nan")}, "target_kl"),
])
def test_bad_values_refused(data, match):
    with pytest.raises(ConfigError, match=match):
        from_dict(data)


def test_bad_config_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        read_config_file(tmp_path / "missing.toml")
    p = tmp_path / "bad.toml"
    p.write_text("actors = = 3")
    with pytest.raises(ConfigError, match="not valid TOML"):
        read_config_file(p)
    p = tmp_path / "bad.json"
    p.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="table/object"):
        read_config_file(p)
    p = tmp_path / "c.yaml"
    p.write_text("a: 1")
    with pytest.raises(ConfigError, match=".toml or .json"):
        read_config_file(p)


def test_flag_parsing_errors():
    for argv in (["--sensor", "64"], ["--hidden", "a,b"], ["--env", "novalue"], ["--task", "fly"]):
        with pytest.raises(SystemExit):
            _args(argv)
