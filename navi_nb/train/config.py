"""The trainer's settings: one dataclass whose fields document themselves.

A config comes from the defaults, then a TOML or JSON file (``--config``),
then command-line flags, each overriding the one before. The resolved config
is written to ``runs/NAME/config.json``; its hash (of the fields that change
results, ``RESULT_FIELDS``) is stored in every checkpoint, so a checkpoint
from another configuration is refused on resume.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from navi_nb.train.checkpoint import config_hash
from navi_nb.errors import NaviError


class ConfigError(NaviError, ValueError):
    """A bad training setting or config file."""


@dataclass
class TrainConfig:
    # --- world, task, sensor -----------------------------------------------
    scene: str = "house"
    """Built-in scene name (``navi-nb scenes``) or a path to a ``.gmdag`` file."""
    resolution: int = 128
    """Voxels per side when compiling a built-in scene."""
    task: str = "pointgoal"
    """``pointgoal`` (reach a sampled goal) or ``explore`` (visit new cells)."""
    actors: int = 64
    """Actors stepping together; each PPO update sees ``actors * rollout_steps`` samples."""
    sensor_az: int = 64
    """Azimuth bins of the spherical depth sensor (over 360 degrees)."""
    sensor_el: int = 16
    """Elevation rows of the sensor (from straight up to straight down)."""
    backend: str = "cpu"
    """Ray tracing backend: ``cpu``, ``cuda`` or ``auto``."""
    env: dict = field(default_factory=dict)
    """Environment settings passed to NavEnv (see docs: max_steps, rewards, speeds, ...)."""

    # --- schedule and seed -------------------------------------------------
    total_steps: int = 1_000_000
    """Actor-steps to train for (rounded up to whole updates)."""
    seed: int = 0
    """Seeds the environment, the policy initialisation and the PPO shuffles."""

    # --- network -----------------------------------------------------------
    hidden: list = field(default_factory=lambda: [128, 128])
    """Hidden layer sizes of the policy and of the value trunk."""
    activation: str = "tanh"
    """Hidden activation: ``tanh`` or ``relu``."""

    # --- PPO ---------------------------------------------------------------
    rollout_steps: int = 64
    """Steps each actor takes per rollout (per update)."""
    epochs: int = 4
    """Passes over the rollout per update."""
    minibatches: int = 4
    """Minibatches per epoch (the rollout's samples are split evenly)."""
    learning_rate: float = 3e-4
    """Adam step size at the start."""
    anneal_lr: bool = True
    """Anneal the learning rate linearly to 0 over ``total_steps``."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    clip_coef: float = 0.2
    """PPO ratio clip."""
    clip_vloss: bool = True
    """Clip the value loss around the old values."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    target_kl: float = 0.0
    """Stop an update's epochs early when approx KL exceeds this (0: never)."""
    adam_eps: float = 1e-5
    """Adam epsilon."""

    # --- run bookkeeping (not part of the config hash) ----------------------
    shards: int = 0
    """Learner shards (0: calibrate at start; NAVI_NB_SHARDS overrides). Results do not depend on it."""
    run_dir: str = "runs"
    """Folder that holds runs."""
    name: str = ""
    """Run name (folder ``run_dir/name``); empty: ``SCENE-TASK-sSEED`` plus a number if taken."""
    checkpoint_every: int = 10
    """Write a checkpoint every this many updates (and always at the end)."""
    keep_checkpoints: int = 3
    """Keep this many newest checkpoints (0: all)."""
    eval_episodes: int = 100
    """Episodes for the evaluation run at the end of training (0: none)."""

    # ------------------------------------------------------------------------
    def validate(self) -> "TrainConfig":
        def check(cond, msg):
            if not cond:
                raise ConfigError(f"config: {msg}")

        def is_int(v):
            return isinstance(v, int) and not isinstance(v, bool)

        def is_num(v):
            return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

        check(isinstance(self.scene, str) and self.scene, "scene must be a non-empty string")
        for name, lo in (("resolution", 8), ("actors", 1), ("sensor_az", 1), ("sensor_el", 1),
                         ("total_steps", 1), ("rollout_steps", 1), ("epochs", 1), ("minibatches", 1),
                         ("checkpoint_every", 1), ("seed", 0), ("shards", 0), ("keep_checkpoints", 0),
                         ("eval_episodes", 0)):
            v = getattr(self, name)
            check(is_int(v) and v >= lo, f"{name} must be an integer >= {lo}, got {v!r}")
        check(self.seed < 2**63, f"seed must be < 2**63, got {self.seed}")
        check(self.task in ("pointgoal", "explore"), f"task must be 'pointgoal' or 'explore', got {self.task!r}")
        check(self.backend in ("cpu", "cuda", "auto"), f"backend must be cpu, cuda or auto, got {self.backend!r}")
        check(self.activation in ("tanh", "relu"), f"activation must be tanh or relu, got {self.activation!r}")
        check(isinstance(self.hidden, (list, tuple)) and len(self.hidden) >= 1
              and all(is_int(h) and 1 <= h <= 4096 for h in self.hidden),
              f"hidden must be a list of layer sizes in 1..4096, got {self.hidden!r}")
        self.hidden = [int(h) for h in self.hidden]
        for name in ("learning_rate", "gamma", "gae_lambda", "clip_coef", "vf_coef", "max_grad_norm", "adam_eps"):
            v = getattr(self, name)
            check(is_num(v) and v > 0, f"{name} must be a finite number > 0, got {v!r}")
        for name in ("ent_coef", "target_kl"):
            v = getattr(self, name)
            check(is_num(v) and v >= 0, f"{name} must be a finite number >= 0, got {v!r}")
        check(self.gamma <= 1 and self.gae_lambda <= 1, "gamma and gae_lambda must be <= 1")
        for name in ("anneal_lr", "clip_vloss"):
            check(isinstance(getattr(self, name), bool), f"{name} must be true or false")
        check(isinstance(self.env, dict), "env must be a table of environment settings")
        batch = self.actors * self.rollout_steps
        check(batch % self.minibatches == 0,
              f"actors * rollout_steps ({batch}) must divide into {self.minibatches} minibatches")
        check(isinstance(self.run_dir, str) and self.run_dir, "run_dir must be a non-empty string")
        check(isinstance(self.name, str) and "/" not in self.name and self.name not in (".", ".."),
              f"name must be a plain folder name, got {self.name!r}")
        return self

    @property
    def batch_size(self) -> int:
        return self.actors * self.rollout_steps

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.minibatches

    @property
    def num_updates(self) -> int:
        return -(-self.total_steps // self.batch_size)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def result_dict(self) -> dict:
        """The fields that change results (what the hash covers)."""
        d = self.to_dict()
        return {k: d[k] for k in RESULT_FIELDS}

    def hash(self) -> str:
        return config_hash(self.result_dict())


RUN_FIELDS = ("shards", "run_dir", "name", "checkpoint_every", "keep_checkpoints", "eval_episodes")
RESULT_FIELDS = tuple(f.name for f in dataclasses.fields(TrainConfig) if f.name not in RUN_FIELDS)
FIELD_NAMES = tuple(f.name for f in dataclasses.fields(TrainConfig))


def field_docs() -> dict:
    """name -> the docstring written under the field (parsed from this file's source)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(TrainConfig))
    body = tree.body[0].body
    docs = {}
    for a, b in zip(body, body[1:]):
        if isinstance(a, ast.AnnAssign) and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant):
            docs[a.target.id] = " ".join(str(b.value.value).split())
    return docs


def from_dict(data: dict, source="config") -> TrainConfig:
    """A TrainConfig from a dict; unknown keys are an error naming them."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a table/object of settings")
    unknown = sorted(set(data) - set(FIELD_NAMES))
    if unknown:
        raise ConfigError(f"{source}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(FIELD_NAMES)}")
    cfg = TrainConfig()
    for k, v in data.items():
        if k == "hidden" and isinstance(v, tuple):
            v = list(v)
        if isinstance(getattr(cfg, k), float) and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        setattr(cfg, k, v)
    try:
        return cfg.validate()
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def read_config_file(path) -> dict:
    """Read a TOML (``.toml``) or JSON file of settings into a dict."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot read ({exc.strerror or exc})") from exc
    if path.suffix.lower() == ".toml":
        try:
            import tomllib  # Python 3.11+
        except ImportError:
            try:
                import tomli as tomllib  # type: ignore
            except ImportError:
                raise ConfigError(f"config file {path}: reading TOML needs Python 3.11+ or the 'tomli' "
                                  "package; use a .json config instead") from None
        try:
            data = tomllib.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"config file {path}: not valid TOML ({exc})") from exc
    elif path.suffix.lower() == ".json":
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ConfigError(f"config file {path}: not valid JSON ({exc})") from exc
    else:
        raise ConfigError(f"config file {path}: expected a .toml or .json file")
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a table/object of settings at the top")
    return data
