"""`navi-nb train`: train a navigation policy with PPO over many actors.

Settings come from the defaults (``navi_nb.train.config.TrainConfig``), then
``--config FILE`` (TOML or JSON), then the flags given, each overriding the
one before. ``--resume runs/NAME`` continues a run from its newest checkpoint
with the run's own saved config; only bookkeeping flags (shards, checkpoint
cadence, evaluation episodes) may change on resume.
"""
from __future__ import annotations

import argparse

HELP = "train a navigation policy with PPO over many actors"

# flag dest -> TrainConfig field (flags default to None: "not given")
_FLAG_FIELDS = {
    "scene": "scene", "resolution": "resolution", "task": "task", "actors": "actors",
    "backend": "backend", "total_steps": "total_steps", "seed": "seed", "shards": "shards",
    "activation": "activation", "rollout_steps": "rollout_steps", "epochs": "epochs",
    "minibatches": "minibatches", "lr": "learning_rate", "gamma": "gamma", "gae_lambda": "gae_lambda",
    "clip_coef": "clip_coef", "ent_coef": "ent_coef", "vf_coef": "vf_coef",
    "max_grad_norm": "max_grad_norm", "target_kl": "target_kl", "adam_eps": "adam_eps",
    "run_dir": "run_dir", "name": "name", "checkpoint_every": "checkpoint_every",
    "keep_checkpoints": "keep_checkpoints", "eval_episodes": "eval_episodes",
    "anneal_lr": "anneal_lr", "clip_vloss": "clip_vloss",
}


def _sensor(text):
    try:
        az, el = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"sensor must look like 64x16 (azimuth x elevation), got {text!r}")
    if az < 1 or el < 1:
        raise argparse.ArgumentTypeError(f"sensor sizes must be >= 1, got {text!r}")
    return az, el


def _hidden(text):
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"hidden must be comma-separated sizes like 128,128, got {text!r}")
    if not sizes:
        raise argparse.ArgumentTypeError("hidden needs at least one layer size")
    return sizes


def _env_setting(text):
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--env expects KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    import json
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = value  # a bare string such as spawn=points
    return key.strip(), parsed


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("run")
    g.add_argument("--config", metavar="FILE", help="TOML or JSON file of settings (flags override it)")
    g.add_argument("--resume", metavar="RUN", help="continue runs/NAME from its newest checkpoint")
    g.add_argument("--run-dir", metavar="DIR", help="folder holding runs (default: runs)")
    g.add_argument("--name", help="run name (default: SCENE-TASK-sSEED, numbered if taken)")
    g.add_argument("--checkpoint-every", type=int, metavar="N", help="checkpoint every N updates (default 10)")
    g.add_argument("--keep-checkpoints", type=int, metavar="N", help="keep the newest N checkpoints (0: all)")
    g.add_argument("--eval-episodes", type=int, metavar="N",
                   help="deterministic evaluation episodes at the end (default 100; 0: skip)")
    g.add_argument("--no-progress", action="store_true", help="plain log lines instead of the live display")
    g.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    g = p.add_argument_group("world and task")
    g.add_argument("--scene", help="built-in scene name (see `navi-nb scenes`) or a .gmdag file (default house)")
    g.add_argument("--resolution", type=int, help="voxels per side when compiling a built-in scene (default 128)")
    g.add_argument("--task", choices=("pointgoal", "explore"), help="task (default pointgoal)")
    g.add_argument("--actors", type=int, help="actors stepping together (default 64)")
    g.add_argument("--sensor", type=_sensor, metavar="AZxEL", help="sensor rays, azimuth x elevation (default 64x16)")
    g.add_argument("--backend", choices=("cpu", "cuda", "auto"), help="ray tracing backend (default cpu)")
    g.add_argument("--env", type=_env_setting, action="append", metavar="KEY=VALUE",
                   help="an environment setting (repeatable), e.g. --env max_steps=300")
    g = p.add_argument_group("schedule")
    g.add_argument("--total-steps", type=int, metavar="N", help="actor-steps to train for")
    g.add_argument("--seed", type=int, help="random seed (default 0)")
    g.add_argument("--shards", type=int, metavar="N",
                   help="learner shards (default: calibrate; NAVI_NB_SHARDS also sets it)")
    g = p.add_argument_group("network and PPO")
    g.add_argument("--hidden", type=_hidden, metavar="H1,H2", help="hidden layer sizes (default 128,128)")
    g.add_argument("--activation", choices=("tanh", "relu"), help="hidden activation (default tanh)")
    g.add_argument("--rollout-steps", type=int, metavar="N", help="steps per actor per update")
    g.add_argument("--epochs", type=int, metavar="N", help="PPO epochs per update")
    g.add_argument("--minibatches", type=int, metavar="N", help="minibatches per epoch")
    g.add_argument("--lr", type=float, metavar="X", help="Adam learning rate")
    g.add_argument("--anneal-lr", dest="anneal_lr", action="store_true", default=None,
                   help="anneal the learning rate linearly to 0 (default)")
    g.add_argument("--no-anneal-lr", dest="anneal_lr", action="store_false", help="keep the learning rate fixed")
    g.add_argument("--clip-vloss", dest="clip_vloss", action="store_true", default=None,
                   help="clip the value loss (default)")
    g.add_argument("--no-clip-vloss", dest="clip_vloss", action="store_false", help="plain value loss")
    g.add_argument("--gamma", type=float, help="discount (default 0.99)")
    g.add_argument("--gae-lambda", type=float, help="GAE lambda (default 0.95)")
    g.add_argument("--clip-coef", type=float, help="PPO ratio clip (default 0.2)")
    g.add_argument("--ent-coef", type=float, help="entropy coefficient")
    g.add_argument("--vf-coef", type=float, help="value loss coefficient (default 0.5)")
    g.add_argument("--max-grad-norm", type=float, help="gradient norm clip (default 0.5)")
    g.add_argument("--target-kl", type=float, help="early-stop KL per update (default 0: off)")
    g.add_argument("--adam-eps", type=float, help="Adam epsilon (default 1e-5)")


def overrides_from_args(args) -> dict:
    """The settings the flags give (only those actually given)."""
    out = {}
    for dest, fld in _FLAG_FIELDS.items():
        v = getattr(args, dest, None)
        if v is not None:
            out[fld] = v
    if getattr(args, "sensor", None) is not None:
        out["sensor_az"], out["sensor_el"] = args.sensor
    if getattr(args, "hidden", None) is not None:
        out["hidden"] = list(args.hidden)
    if getattr(args, "env", None):
        out["env"] = dict(args.env)
    return out


def resolve_config(args):
    """Defaults <- --config file <- flags, validated (raises ConfigError)."""
    from navi_nb.train.config import from_dict, read_config_file

    data = {}
    if args.config:
        data.update(read_config_file(args.config))
    flags = overrides_from_args(args)
    env = dict(data.get("env") or {}) if isinstance(data.get("env", {}), dict) else data.get("env")
    data.update(flags)
    if "env" in flags and isinstance(env, dict):
        env.update(flags["env"])
        data["env"] = env
    return from_dict(data, source=f"config file {args.config}" if args.config else "settings")


def run(args) -> int:
    from rich.console import Console

    from navi_nb.train.loop import Trainer, print_config, print_summary

    console = Console()
    if args.resume:
        if args.config:
            from navi_nb.errors import CliError
            raise CliError("--resume uses the run's own config.json; --config cannot be combined with it")
        trainer = Trainer.resume(args.resume, overrides_from_args(args), console=console)
    else:
        cfg = resolve_config(args)
        if args.print_config:
            print_config(console, cfg)
            return 0
        trainer = Trainer.create(cfg, console=console)
    summary = trainer.train(progress=not args.no_progress)
    print_summary(console, trainer, summary)
    cfg = trainer.cfg
    if cfg.eval_episodes and trainer.update >= cfg.num_updates:
        from navi_nb.train.evaluate import evaluate, print_results

        console.rule(f"evaluation: {cfg.eval_episodes} episodes, mean action, fresh seeds")
        print_results(console, evaluate(trainer.run_path, episodes=cfg.eval_episodes))
    console.print(f"run folder: [bold]{trainer.run_path}[/]")
    return 0
