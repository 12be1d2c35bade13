"""TrainConfig: defaults, file + flag layering, validation, hash."""

import argparse
import json

import numpy as np
import pytest

from navi_nb.commands import train as train_cmd
from navi_nb.train.config import (
    FIELD_NAMES,
    RESULT_FIELDS,
    ConfigError,
    TrainConfig,
    field_docs,
    from_dict,
    read_config_file,
)


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
    assert a.scenes == "house" and a.task == "pointgoal" and a.actors == 64
    assert a.num_updates * a.batch_size >= a.total_steps
    # run bookkeeping does not change the hash; results settings do
    b.shards, b.name, b.checkpoint_every = 2, "x", 3
    assert b.hash() == a.hash()
    b.seed = 1
    assert b.hash() != a.hash()
    assert "shards" not in RESULT_FIELDS and "seed" in RESULT_FIELDS
    # a setting at its default of 0 stays out of the hash (runs written before it existed resume)
    assert "log_std_init" not in a.result_dict() and "memory_size" not in a.result_dict()
    assert "map_input" not in a.result_dict()
    b.seed, b.log_std_init = 0, -1.0
    assert b.hash() != a.hash()


def test_log_std_init_reaches_the_policy():
    from navi_nb.train.runs import make_policy

    cfg = from_dict({"log_std_init": -1.0, "hidden": [8]})
    assert np.all(make_policy(cfg, obs_dim=5).p["log_std"] == np.float32(-1.0))


def test_map_input_memory_keeps_the_crop_from_the_trunks():
    """With map_input memory the GRU reads the whole observation and the trunks all of it but the map's crop
    (its last columns): their first layers are that much narrower, the GRU's input is not."""
    from navi_nb.train.runs import make_policy

    env = {"map_cell": 1.0, "map_crop": 4, "map_channels": 2}  # a crop of 32 columns
    both = from_dict({"hidden": [8], "memory_size": 3, "env": env, "sensor_az": 4, "sensor_el": 2})
    gru_only = from_dict({**both.to_dict(), "map_input": "memory"})
    obs_dim = both.obs_dim()
    a, b = make_policy(both, obs_dim), make_policy(gru_only, obs_dim)
    assert (a.trunk_obs, b.trunk_obs) == (obs_dim, obs_dim - 32)
    assert a.p["pi.0.W"].shape == (obs_dim + 3, 8) and b.p["pi.0.W"].shape == (obs_dim - 32 + 3, 8)
    assert b.p["v.0.W"].shape == b.p["pi.0.W"].shape and a.p["gru.W_ih"].shape == b.p["gru.W_ih"].shape
    assert gru_only.hash() != both.hash() and gru_only.result_dict()["map_input"] == "memory"


def test_file_then_flags_override(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text('scenes = "box"\nactors = 8\nseed = 3\nhidden = [32, 32]\n[env]\nmax_steps = 100\n')
    cfg = train_cmd.resolve_config(_args(["--config", str(toml), "--actors", "16", "--env", "dt=0.05"]))
    assert (cfg.scenes, cfg.actors, cfg.seed, cfg.hidden) == ("box", 16, 3, [32, 32])
    assert cfg.env == {"max_steps": 100, "dt": 0.05}
    js = tmp_path / "c.json"
    js.write_text(json.dumps({"task": "explore", "lr": 1}))
    with pytest.raises(ConfigError, match="unknown setting.*lr"):
        train_cmd.resolve_config(_args(["--config", str(js)]))
    js.write_text(json.dumps({"task": "explore", "learning_rate": 1}))
    cfg = train_cmd.resolve_config(
        _args(["--config", str(js), "--sensor-az", "32", "--sensor-el", "8", "--hidden", "16"])
    )
    assert (cfg.task, cfg.learning_rate, cfg.sensor_az, cfg.sensor_el, cfg.hidden) == ("explore", 1.0, 32, 8, [16])


@pytest.mark.parametrize(
    "data, match",
    [
        ({"actors": 0}, "actors"),
        ({"actors": 2.5}, "actors"),
        ({"task": "fly"}, "task"),
        ({"hidden": []}, "hidden"),
        ({"learning_rate": -1.0}, "learning_rate"),
        ({"gamma": 1.5}, "gamma"),
        ({"actors": 3, "rollout_steps": 3, "num_minibatches": 4}, "minibatches"),
        ({"name": "a/b"}, "name"),
        ({"anneal_lr": 1}, "anneal_lr"),
        ({"target_kl": float("nan")}, "target_kl"),
        ({"target_kl": 0.0}, "target_kl"),
        ({"grad_mode": "rows"}, "grad_mode"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"log_std_init": 3.0}, "log_std_init"),
        ({"log_std_init": float("inf")}, "log_std_init"),
        ({"map_input": "trunks"}, "map_input must be one of all, memory"),
        ({"map_input": "memory", "env": {"map_cell": 1.0}}, "map_input memory needs a memory"),
        ({"map_input": "memory", "memory_size": 8}, "map_input memory needs the episodic map"),
        ({"epochs": 2}, "epochs is now update_epochs"),
        ({"minibatches": 2}, "minibatches is now num_minibatches"),
    ],
)
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
    for argv in (
        ["--sensor-az", "64x16"],
        ["--hidden", "a,b"],
        ["--task", "fly"],
        ["--target-kl", "x"],
        ["--anneal-lr", "1"],
        ["--epochs", "2"],
    ):
        with pytest.raises(SystemExit):
            _args(argv)
    # --env's reader says what is wrong itself (one line, printed by navi_nb.cli.main), not argparse's usage
    from navi_nb.errors import CliError

    with pytest.raises(CliError, match="--env 'novalue': expected KEY=VALUE"):
        _args(["--env", "novalue"])


def test_flags_are_generated_from_the_fields():
    """One flag per field, named as the field; help is the docstring's first sentence plus the default;
    booleans are --x / --no-x; a flag not given leaves the file's value; target_kl's "off" is none."""
    import dataclasses

    from navi_nb.learn.ppo import PPOConfig
    from navi_nb.train.config import first_sentence

    p = argparse.ArgumentParser()
    train_cmd.add_arguments(p)
    by_dest = {a.dest: a for a in p._actions}
    docs = field_docs()
    for f in dataclasses.fields(TrainConfig):
        action = by_dest[f.name]
        assert action.option_strings[0] == "--" + f.name.replace("_", "-")
        assert action.help.startswith(first_sentence(docs[f.name])) and action.default is None
    assert by_dest["anneal_lr"].option_strings == ["--anneal-lr", "--no-anneal-lr"]
    assert by_dest["task"].choices == ("pointgoal", "explore")
    assert "(default 4)" in by_dest["update_epochs"].help and "(default none)" in by_dest["target_kl"].help
    # PPO's settings are PPOConfig's own fields, the same names and defaults
    for f in dataclasses.fields(PPOConfig):
        assert getattr(TrainConfig(), f.name) == getattr(PPOConfig(), f.name), f.name
    assert PPOConfig.of(TrainConfig(update_epochs=7)).update_epochs == 7
    assert first_sentence("Samples per chunk, the unit. Fixed, more.") == "Samples per chunk, the unit"
    assert first_sentence("Settings, e.g. max_steps=300 (see docs).") == "Settings, e.g. max_steps=300 (see docs)"


def test_flags_override_the_file_only_when_given(tmp_path):
    js = tmp_path / "c.json"
    js.write_text(json.dumps({"target_kl": 0.02, "anneal_lr": False, "update_epochs": 2}))
    cfg = train_cmd.resolve_config(_args(["--config", str(js)]))
    assert (cfg.target_kl, cfg.anneal_lr, cfg.update_epochs) == (0.02, False, 2)
    cfg = train_cmd.resolve_config(
        _args(["--config", str(js), "--target-kl", "none", "--anneal-lr", "--update-epochs", "3", "--no-clip-vloss"])
    )
    assert (cfg.target_kl, cfg.anneal_lr, cfg.update_epochs, cfg.clip_vloss) == (None, True, 3, False)
    cfg = train_cmd.resolve_config(_args(["--target-kl", "0.05"]))
    assert cfg.target_kl == 0.05 and TrainConfig().target_kl is None
