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

from navi_nb.env.config import EnvConfig, EnvConfigError
from navi_nb.env.footprint import actor_bytes
from navi_nb.errors import CliError, NaviError
from navi_nb.learn.policy import MAX_MEMORY
from navi_nb.learn.ppo import PPOConfig, PPOConfigError
from navi_nb.train.checkpoint import config_hash

MAX_CONFIG_BYTES = 1 << 20  # a config file or a run's config.json larger than this is refused unread


class ConfigError(NaviError, ValueError):
    """A bad training setting or config file."""


def _choices(*names):
    return field(default=names[0], metadata={"choices": names})


@dataclass
class TrainConfig(PPOConfig):
    """Everything a training run reads: PPO's settings (inherited from ``PPOConfig``) and these."""

    # --- world, task, sensor -----------------------------------------------
    scenes: str = field(default="house", metadata={"metavar": "SPEC"})
    """The worlds to train in: a scene spec such as ``house``, ``house:0-199``, ``maze:0-99,clutter:0-99``,
    ``a.gmdag`` or a mesh file ``room.obj`` (docs/WORLDS.md). Each actor moves to a world of the set at every
    reset."""
    allow_heldout: bool = False
    """Allow held-out seeds (>= 1,000,000, kept for evaluation) in the training set."""
    resolution: int = 128
    """Voxels per side when compiling a built-in scene or a mesh file of the set (a power of two, 16 to 8192)."""
    task: str = _choices("pointgoal", "explore")
    """The task: ``pointgoal`` (reach a sampled goal) or ``explore`` (visit new cells)."""
    actors: int = 64
    """Actors stepping together; each PPO update sees ``actors * rollout_steps`` samples."""
    sensor_az: int = 64
    """Azimuth bins of the spherical depth sensor (over 360 degrees)."""
    sensor_el: int = 16
    """Elevation rows of the sensor (from straight up to straight down)."""
    backend: str = _choices("cpu", "cuda", "auto")
    """Ray tracing backend."""
    env: dict = field(default_factory=dict)
    """Environment settings passed to NavEnv, e.g. max_steps=300 (docs/ENVIRONMENT.md lists them)."""

    # --- schedule and seed -------------------------------------------------
    total_steps: int = 1_000_000
    """Actor-steps to train for (rounded up to whole updates)."""
    seed: int = 0
    """Seeds the environment, the policy initialisation and the PPO shuffles."""

    # --- network -----------------------------------------------------------
    hidden: list = field(default_factory=lambda: [128, 128])
    """Hidden layer sizes of the policy and of the value trunk."""
    activation: str = _choices("tanh", "relu")
    """Hidden activation."""
    memory_size: int = 0
    """Units of the policy's GRU memory, read by both trunks beside the observation (0: none, the plain MLP);
    PPO then learns from whole actor sequences, so a block's actors must split evenly into the minibatches."""
    map_input: str = _choices("all", "memory")
    """What reads the episodic map's crop (``--env map_cell=...``): ``all`` (the GRU memory and both trunks)
    or ``memory`` (the GRU alone, needs ``memory_size`` > 0; the trunks see the map through the GRU's state,
    and the learner makes fewer than half the products on the crop's columns that it makes with ``all``)."""
    log_std_init: float = 0.0
    """The policy's initial log standard deviation of its Gaussian actions (one learnt number per action
    dimension): the exploration noise training starts from (0: a standard deviation of 1 on actions in -1..1)."""
    rollout_steps: int = 64
    """Steps each actor takes per rollout (per update)."""

    # --- run bookkeeping (not part of the config hash) ----------------------
    shards: int = 0
    """Learner shards (0: NAVI_NB_SHARDS if set, else calibrate at start; a count here wins over it). Results do not
    depend on it."""
    shard_recheck: float = 0.03
    """Share of the training time spent re-timing the shard counts to switch to a faster one (0: off). A
    re-check follows an update once this share of the training seconds since the last one covers what the
    last one cost (a large value such as 1000: after every update); each re-check that keeps the count halves
    the share the next one waits for, down to an eighth, and a switch restores it; an explicit ``shards`` count
    is never re-checked."""
    run_dir: str = "runs"
    """Folder that holds runs."""
    name: str = ""
    """Run name (folder ``run_dir/name``); empty: ``SET-TASK-sSEED`` (``house``, ``house200``,
    ``house+maze200``) plus a number if taken."""
    checkpoint_every: int = 10
    """Write a checkpoint every this many updates (and always at the end)."""
    keep_checkpoints: int = 3
    """Keep this many newest checkpoints (0: all)."""
    eval_episodes: int = 100
    """Episodes for the evaluation run at the end of training (0: none)."""

    # ------------------------------------------------------------------------
    def validate(self, source: str = "config") -> TrainConfig:
        """Check every field; a ConfigError's message starts with ``source`` (what the settings came from)."""

        def check(cond, msg):
            if not cond:
                raise ConfigError(f"{source}: {msg}")

        def is_int(v):
            return isinstance(v, int) and not isinstance(v, bool)

        def is_num(v):
            return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

        check(isinstance(self.scenes, str) and self.scenes.strip(), "scenes must be a non-empty scene spec")
        for name, lo in (
            ("resolution", 8),
            ("actors", 1),
            ("sensor_az", 1),
            ("sensor_el", 1),
            ("total_steps", 1),
            ("rollout_steps", 1),
            ("update_epochs", 1),
            ("num_minibatches", 1),
            ("checkpoint_every", 1),
            ("seed", 0),
            ("shards", 0),
            ("keep_checkpoints", 0),
            ("eval_episodes", 0),
            ("chunk_size", 1),
            ("tile_min_weights", 0),
            ("tile_rows", 1),
            ("tile_cols", 1),
            ("actor_block", 0),
            ("memory_size", 0),
        ):
            v = getattr(self, name)
            check(is_int(v) and v >= lo, f"{name} must be an integer >= {lo}, got {v!r}")
            check(v < 2**63, f"{name} must be below 2**63 (the counters are 64-bit), got a {len(str(v))}-digit number")
        check(
            is_num(self.shard_recheck) and self.shard_recheck >= 0,
            f"shard_recheck must be a number >= 0, got {self.shard_recheck!r}",
        )
        check(self.seed < 2**63, f"seed must be < 2**63, got {self.seed}")
        check(
            16 <= self.resolution <= 8192 and self.resolution & (self.resolution - 1) == 0,
            f"resolution must be a power of two in 16..8192, got {self.resolution}",
        )
        for f in dataclasses.fields(self):
            choices = f.metadata.get("choices")
            if choices:
                v = getattr(self, f.name)
                check(v in choices, f"{f.name} must be one of {', '.join(choices)}, got {v!r}")
        check(
            isinstance(self.hidden, (list, tuple))
            and len(self.hidden) >= 1
            and all(is_int(h) and 1 <= h <= 4096 for h in self.hidden),
            f"hidden must be a list of layer sizes in 1..4096, got {self.hidden!r}",
        )
        self.hidden = [int(h) for h in self.hidden]
        check(
            self.memory_size <= MAX_MEMORY,
            f"memory_size must be in 0..{MAX_MEMORY} (0: no memory), got {self.memory_size}",
        )
        if self.map_input == "memory":
            from navi_nb.env.episodic_map import map_columns

            check(self.memory_size > 0, "map_input memory needs a memory: set memory_size > 0")
            check(
                not isinstance(self.env, dict) or map_columns(self.env) > 0,
                "map_input memory needs the episodic map: set --env map_cell=METRES (it is off)",
            )
        check(
            is_num(self.log_std_init) and -5.0 <= self.log_std_init <= 2.0,
            f"log_std_init must be a finite number in -5..2, got {self.log_std_init!r}",
        )
        for name in ("learning_rate", "gamma", "gae_lambda", "clip_coef", "vf_coef", "max_grad_norm", "adam_eps"):
            v = getattr(self, name)
            check(is_num(v) and v > 0, f"{name} must be a finite number > 0, got {v!r}")
        check(
            is_num(self.ent_coef) and self.ent_coef >= 0,
            f"ent_coef must be a finite number >= 0, got {self.ent_coef!r}",
        )
        check(
            self.target_kl is None or (is_num(self.target_kl) and self.target_kl > 0),
            f"target_kl must be a finite number > 0 or none (off), got {self.target_kl!r}",
        )
        check(self.gamma <= 1 and self.gae_lambda <= 1, "gamma and gae_lambda must be <= 1")
        for f in dataclasses.fields(self):
            if _kind(f) == "bool":
                check(isinstance(getattr(self, f.name), bool), f"{f.name} must be true or false")
        check(isinstance(self.env, dict), "env must be a table of environment settings")
        batch = self.actors * self.rollout_steps
        check(
            batch % self.num_minibatches == 0,
            f"actors * rollout_steps ({batch}) must divide into {self.num_minibatches} minibatches",
        )
        block = self.actors if self.actor_block == 0 else min(self.actor_block, self.actors)
        check(
            self.actors % block == 0,
            f"actors ({self.actors}) must be a multiple of actor_block ({self.actor_block}), or 0 for one block",
        )
        check(
            block * self.rollout_steps % self.num_minibatches == 0,
            f"actor_block * rollout_steps ({block * self.rollout_steps}) must divide into "
            f"{self.num_minibatches} minibatches (each minibatch takes the same share of every block)",
        )
        check(
            not self.memory_size or block % self.num_minibatches == 0,
            f"memory_size {self.memory_size}: a policy with memory learns from whole actor sequences, so a block's "
            f"{block} actors must split evenly into {self.num_minibatches} minibatches (set actor_block or "
            "num_minibatches)",
        )
        check(isinstance(self.run_dir, str) and self.run_dir, "run_dir must be a non-empty string")
        check(
            isinstance(self.name, str) and "/" not in self.name and self.name not in (".", ".."),
            f"name must be a plain folder name, got {self.name!r}",
        )
        try:
            PPOConfig.validate(self)
        except PPOConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        try:  # the environment's settings too: refused before a world is compiled or a file written
            EnvConfig.from_kwargs(**self.env)
        except EnvConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        return self

    def ram_estimate(self) -> int:
        """A lower bound on the bytes a run of this config holds: per actor, the environment's state and
        step buffers, the sensor's ray buffers and the rollout slab (the world and the network are extra)."""
        obs_dim = self.obs_dim()
        per_actor = actor_bytes(obs_dim, self.sensor_az * self.sensor_el) + self.rollout_steps * (4 * obs_dim + 48)
        per_actor += self.rollout_steps * (4 * self.memory_size + 1) + 8 * self.memory_size  # memory columns, state
        return self.actors * per_actor

    def obs_dim(self) -> int:
        """The observation width this config's environment has (rays, optional classes, motion, goal)."""
        from navi_nb.env.episodic_map import map_columns
        from navi_nb.env.observation import obs_layout, obs_size

        env = self.env if isinstance(self.env, dict) else {}
        n_rays = self.sensor_az * self.sensor_el
        goal = self.task == "pointgoal"
        return obs_size(obs_layout(n_rays, bool(env.get("semantic_obs", False)), goal, map_columns(env)))

    @property
    def batch_size(self) -> int:
        return self.actors * self.rollout_steps

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches

    @property
    def num_updates(self) -> int:
        return -(-self.total_steps // self.batch_size)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def result_dict(self) -> dict:
        """The fields that change results (what the hash covers)."""
        d = self.to_dict()
        out = {k: d[k] for k in RESULT_FIELDS}
        for name in ("memory_size", "log_std_init"):  # at 0 a run keeps the hash it had before the setting existed
            if not out[name]:
                del out[name]
        if out["map_input"] == "all":  # likewise
            del out["map_input"]
        return out

    def hash(self) -> str:
        return config_hash(self.result_dict())


RUN_FIELDS = ("shards", "shard_recheck", "run_dir", "name", "checkpoint_every", "keep_checkpoints", "eval_episodes")
"""Bookkeeping: not part of the config hash (results do not depend on them)."""
RESUME_FIELDS = ("shards", "shard_recheck", "checkpoint_every", "keep_checkpoints", "eval_episodes")
"""What a resumed run may change (``run_dir`` and ``name`` place a new run's folder; a resumed run's folder is
the one given to resume)."""
RESULT_FIELDS = tuple(f.name for f in dataclasses.fields(TrainConfig) if f.name not in RUN_FIELDS)
FIELD_NAMES = tuple(f.name for f in dataclasses.fields(TrainConfig))


def field_docs() -> dict:
    """name -> the docstring written under the field (parsed from the source of TrainConfig and its bases)."""
    import ast
    import inspect
    import textwrap

    docs = {}
    for klass in reversed(TrainConfig.__mro__[:-1]):
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        for a, b in zip(body, body[1:]):
            if isinstance(a, ast.AnnAssign) and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant):
                docs[a.target.id] = " ".join(str(b.value.value).split())
    return docs


# --------------------------------------------------------------------------
# command-line flags, generated from the fields
# --------------------------------------------------------------------------


def _kind(f) -> str:
    """A field's kind from its annotation: int, float, str, bool, optional_float, list or dict."""
    t = str(f.type).replace(" ", "")
    return {"float|None": "optional_float", "Optional[float]": "optional_float"}.get(t, t)


_OFF = "none"


def _optional_float(text):
    if text.strip().lower() in ("none", "off"):
        return _OFF  # not None: None means "flag not given"
    return float(text)


def _whole_number(text):
    """An integer flag's value: ``1000000``, ``1_000_000`` or exact float notation such as ``1e6``."""
    import argparse
    from decimal import Decimal, InvalidOperation

    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = Decimal(text.strip().replace("_", ""))
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"expected a whole number such as 1000000 or 1e6, got {text!r}") from None
    if not value.is_finite() or value != value.to_integral_value():
        raise argparse.ArgumentTypeError(
            f"expected a whole number such as 1000000 or 1e6, got {text!r} (not an integer)"
        )
    return int(value)


def _int_list(text):
    sizes = [_whole_number(x) for x in text.split(",") if x.strip()]
    if not sizes:
        raise ValueError("no sizes")
    return sizes


ENV_VALUE_KINDS = {"int": "a whole number", "float": "a number", "str": "a word", "bool": "true or false"}
"""What an environment setting of each type takes, as ``--env``'s refusal says it."""


def env_setting(text):
    """``--env KEY=VALUE`` as ``(key, value)``, the value read as JSON where it is JSON, else as a bare string;
    the one reader of every command's ``--env``. A text without ``=``, a key that is no EnvConfig setting and a
    value of the wrong type raise CliError, one line naming the flag (not ValueError: argparse would print its
    usage block; ``navi_nb.cli.main`` prints the line and exits 2). The ranges are checked with the whole
    environment config, as a config file's ``[env]`` table's are."""
    key, eq, value = str(text).partition("=")
    key = key.strip()
    if not eq or not key:
        raise CliError(f"--env {text!r}: expected KEY=VALUE, e.g. --env max_steps=300")
    fields = {f.name: f.type for f in dataclasses.fields(EnvConfig)}
    if key not in fields:
        raise CliError(f"--env {text}: {key} is not an environment setting; known: {', '.join(sorted(fields))}")
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = value  # a bare string such as spawn=points
    kind = fields[key]
    fits = {
        "int": isinstance(parsed, int) and not isinstance(parsed, bool),
        "float": isinstance(parsed, (int, float)) and not isinstance(parsed, bool),
        "str": isinstance(parsed, str),
        "bool": isinstance(parsed, bool),
    }[kind]
    if not fits:
        raise CliError(f"--env {text}: {key} takes {ENV_VALUE_KINDS[kind]}, got {value!r}")
    return key, parsed


_whole_number.__name__ = "whole number"
_optional_float.__name__ = "number or none"
_int_list.__name__ = "comma-separated sizes like 128,128"
env_setting.__name__ = "KEY=VALUE"


def first_sentence(doc: str) -> str:
    doc = doc.replace("``", "")
    for i, ch in enumerate(doc):
        if ch == "." and (i + 1 == len(doc) or doc[i + 1] == " ") and not doc[max(0, i - 3) : i].endswith("e.g"):
            return doc[:i]
    return doc


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_config_arguments(parser) -> None:
    """One flag per TrainConfig field: type, choices and help from the field and its docstring.

    Every flag defaults to "not given" (None), so a config file's value is kept unless a flag is
    given; the help shows the field's default. Booleans are ``--x`` / ``--no-x``; ``--target-kl none``
    switches the KL stop off; ``--env KEY=VALUE`` repeats; ``--hidden 128,128``.
    """
    import argparse

    docs = field_docs()
    defaults = TrainConfig()
    own = {f.name for f in dataclasses.fields(PPOConfig)}
    groups = {False: parser.add_argument_group("settings"), True: parser.add_argument_group("PPO settings")}
    for f in sorted(dataclasses.fields(TrainConfig), key=lambda f: f.name in own):  # PPO's last, in order
        kind, default = _kind(f), getattr(defaults, f.name)
        shown = {
            "list": ",".join(str(x) for x in default) if isinstance(default, list) else default,
            "optional_float": "none" if default is None else default,
        }.get(kind, default)
        help_ = first_sentence(docs.get(f.name, f.name)).replace("%", "%%")  # argparse formats help with %
        if kind != "dict":
            help_ += f" (default {shown!s})" if shown != "" else " (default empty)"
        kw = {"dest": f.name, "default": None, "help": help_}
        if kind == "bool":
            kw["action"] = argparse.BooleanOptionalAction
        elif kind == "dict":
            kw.update(type=env_setting, action="append", metavar="KEY=VALUE")
            help_ += " (repeatable)"
            kw["help"] = help_
        else:
            kw["type"] = {
                "int": _whole_number,
                "float": float,
                "str": str,
                "optional_float": _optional_float,
                "list": _int_list,
            }[kind]
            if f.metadata.get("choices"):
                kw["choices"] = f.metadata["choices"]
            else:
                kw["metavar"] = (
                    f.metadata.get("metavar")
                    or {"int": "N", "float": "X", "str": "TEXT", "optional_float": "X", "list": "N,N"}[kind]
                )
        groups[f.name in own].add_argument(flag_name(f.name), **kw)


def overrides_from_args(args) -> dict:
    """The settings the generated flags give (only those actually given)."""
    out = {}
    for f in dataclasses.fields(TrainConfig):
        v = getattr(args, f.name, None)
        if v is None:
            continue
        out[f.name] = dict(v) if _kind(f) == "dict" else None if v is _OFF else v
    return out


RENAMED = {"epochs": "update_epochs", "minibatches": "num_minibatches", "scene": "scenes"}
"""Settings of older versions that now have PPO's names."""


def from_dict(data: dict, source="config") -> TrainConfig:
    """A TrainConfig from a dict; unknown keys are an error naming them."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a table/object of settings")
    renamed = sorted(k for k in data if k in RENAMED)
    if renamed:
        raise ConfigError(f"{source}: setting(s) renamed: " + ", ".join(f"{k} is now {RENAMED[k]}" for k in renamed))
    unknown = sorted(set(data) - set(FIELD_NAMES))
    if unknown:
        raise ConfigError(f"{source}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(FIELD_NAMES)}")
    cfg = TrainConfig()
    kinds = {f.name: _kind(f) for f in dataclasses.fields(TrainConfig)}
    for k, v in data.items():
        if k == "hidden" and isinstance(v, tuple):
            v = list(v)
        if kinds[k] in ("float", "optional_float") and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        setattr(cfg, k, v)
    return cfg.validate(source)


def read_config_file(path) -> dict:
    """Read a TOML (``.toml``) or JSON file of settings into a dict."""
    from navi_nb.files import open_regular

    path = Path(path)
    try:
        with open_regular(path, "config file") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot read ({exc.strerror or exc})") from exc
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {path}: larger than {MAX_CONFIG_BYTES} bytes (a config is a few settings)")
    if path.suffix.lower() == ".toml":
        try:
            import tomllib  # Python 3.11+
        except ImportError:
            try:
                import tomli as tomllib  # type: ignore
            except ImportError:
                raise ConfigError(
                    f"config file {path}: reading TOML needs Python 3.11+ or the 'tomli' "
                    "package; use a .json config instead"
                ) from None
        try:
            data = tomllib.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as exc:
            raise ConfigError(
                f"config file {path}: not valid TOML ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
            ) from exc
    elif path.suffix.lower() == ".json":
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise ConfigError(
                f"config file {path}: not valid JSON ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
            ) from exc
    else:
        raise ConfigError(f"config file {path}: expected a .toml or .json file")
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a table/object of settings at the top")
    return data
