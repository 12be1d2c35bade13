"""Runs: folders, worlds, and building the environment and policy from a config.

Run folder (docs/TRAINING.md)::

    runs/NAME/config.json       resolved config, its hash, package version
    runs/NAME/world.gmdag       the world trained in (+ .json sidecar)
    runs/NAME/metrics.csv       one row per update (columns: navi_nb.train.metrics.COLUMNS)
    runs/NAME/metrics.jsonl     the same rows as JSON lines
    runs/NAME/checkpoints/      ckpt_UUUUUUUU.npz, the newest `keep_checkpoints`
    runs/NAME/policy.npz        the final policy (parameters + meta)
    runs/NAME/eval.json         evaluation results (+ eval_episodes.npz trajectories)
    runs/NAME/tb/               TensorBoard event files (when available)
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import navi_nb
from navi_nb.errors import NaviError
from navi_nb.train.config import MAX_CONFIG_BYTES, ConfigError, TrainConfig, from_dict

CONFIG_FILE = "config.json"
POLICY_FILE = "policy.npz"
WORLD_FILE = "world.gmdag"


class RunError(NaviError):
    """A run folder that is missing, damaged or does not fit the request."""


# --------------------------------------------------------------------------
# time since the process started (for "time to first tick")
# --------------------------------------------------------------------------

_IMPORT_TIME = time.time()


def process_age() -> float:
    """Seconds since this process started (Linux /proc), else since this module loaded."""
    try:
        with open("/proc/self/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22 of stat, counted after "(comm)"
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.time() - _IMPORT_TIME


# --------------------------------------------------------------------------
# worlds: built-in scenes are compiled once and cached
# --------------------------------------------------------------------------

def world_cache_dir() -> Path:
    base = os.environ.get("NAVI_NB_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "navi_nb")
    return Path(base) / "worlds"


def check_scene(scene: str):
    """Raise ConfigError unless ``scene`` is a built-in name or an existing .gmdag file."""
    if scene.endswith(".gmdag") or os.sep in scene:
        if not Path(scene).is_file():
            raise ConfigError(f"scene file {scene} does not exist")
        return
    from navi_nb.world.scenes import SCENES

    if scene not in SCENES:
        raise ConfigError(f"unknown scene {scene!r}: built-in scenes are {', '.join(SCENES)} "
                          "(or give a .gmdag file)")


def load_scene_world(scene: str, resolution: int, console=None):
    """A World for a built-in scene name (compiled, cached) or a .gmdag path."""
    from navi_nb.world.gmdag import load_world, save_world

    check_scene(scene)
    if scene.endswith(".gmdag") or os.sep in scene:
        return load_world(scene)
    cache = world_cache_dir() / f"{scene}-r{resolution}-v{navi_nb.__version__}.gmdag"
    if cache.is_file():
        try:
            return load_world(cache)
        except NaviError:
            pass  # a damaged cache entry is rebuilt below
    from navi_nb.world.compiler import compile_scene

    if console is not None:
        console.print(f"compiling scene [bold]{scene}[/] at resolution {resolution} (cached afterwards)")
    world = compile_scene(scene, resolution=resolution)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        save_world(world, cache)
    except OSError:
        pass  # a read-only home is not an error; the next start compiles again
    return world


def make_env(world, cfg: TrainConfig, n_actors=None, seed=None, ranks=None):
    """The run's environment (its actor blocks' generators), or with ``n_actors`` a plain one (evaluation);
    with ``ranks`` (``navi_nb.parallel.ranks.RankContext``) this rank's blocks only."""
    from navi_nb.env.nav_env import NavEnv
    from navi_nb.sense.sensor import Sensor

    sensor = Sensor(az=cfg.sensor_az, el=cfg.sensor_el)
    if ranks is not None:
        n_actors, blocks = ranks.n_actors, {"actor_block": cfg.actor_block, "first_block": ranks.first_block}
    else:
        blocks = {"actor_block": cfg.actor_block if n_actors is None else 0}
    return NavEnv(world, cfg.actors if n_actors is None else n_actors, sensor=sensor, task=cfg.task,
                  seed=cfg.seed if seed is None else seed, backend=cfg.backend, **blocks, **cfg.env)


def make_policy(cfg: TrainConfig, obs_dim: int, act_dim: int = 4):
    from navi_nb.learn.policy import ActorCritic

    return ActorCritic(obs_dim, act_dim, hidden=tuple(cfg.hidden), activation=cfg.activation, seed=cfg.seed)


# --------------------------------------------------------------------------
# run folders
# --------------------------------------------------------------------------

def read_run_config(run_path) -> TrainConfig:
    run_path = Path(run_path)
    if not run_path.is_dir():
        raise RunError(f"run folder {run_path} does not exist")
    p = run_path / CONFIG_FILE
    try:
        with open(p, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise RunError(f"run folder {run_path}: cannot read {CONFIG_FILE} ({exc.strerror or exc}); "
                       "is this a navi-nb run folder?") from exc
    if len(raw) > MAX_CONFIG_BYTES:
        raise RunError(f"run folder {run_path}: {CONFIG_FILE} is larger than {MAX_CONFIG_BYTES} bytes")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # (UnicodeDecodeError is a ValueError)
        raise RunError(f"run folder {run_path}: {CONFIG_FILE} is not valid JSON ({type(exc).__name__}: "
                       f"{' '.join(str(exc).split())[:200]})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("config"), dict):
        raise RunError(f"run folder {run_path}: {CONFIG_FILE} has no 'config' object")
    cfg = from_dict(data["config"], source=str(p))
    if data.get("config_hash") != cfg.hash():
        raise RunError(f"run folder {run_path}: {CONFIG_FILE} was edited (its hash "
                       f"{data.get('config_hash')!r} does not match its settings {cfg.hash()!r})")
    return cfg


# What a run folder holds before its first checkpoint exists (Trainer.create writes these first).
_BEFORE_FIRST_CHECKPOINT = {CONFIG_FILE, WORLD_FILE, WORLD_FILE + ".json", "metrics.csv", "metrics.jsonl", "tb",
                            "checkpoints"}


def never_checkpointed(path: Path) -> bool:
    """True for a run folder that a kill left before its first checkpoint was complete: only the files
    ``Trainer.create`` writes first, and nothing in ``checkpoints/`` but temporary files. Such a
    folder holds nothing to resume; a new run may take it over."""
    try:
        names = {p.name for p in path.iterdir()}
        if not names or not names <= _BEFORE_FIRST_CHECKPOINT:
            return False
        ckpt = path / "checkpoints"
        return not ckpt.exists() or (ckpt.is_dir() and all(p.name.endswith(".tmp") for p in ckpt.iterdir()))
    except OSError:
        return False


def pick_run_path(cfg: TrainConfig) -> Path:
    """The new run's folder (not created yet): ``run_dir/name``, or a free ``SCENE-TASK-sSEED[-N]``."""
    root = Path(cfg.run_dir)
    try:
        if root.exists() and not root.is_dir():
            raise RunError(f"--run-dir {root} is not a folder")
        if cfg.name:
            limit = _name_max(root)
            if len(os.fsencode(cfg.name)) > limit:
                raise RunError(f"--name is {len(os.fsencode(cfg.name))} bytes long; a folder name here may "
                               f"have at most {limit}")
            path = root / cfg.name
            if path.exists() and not path.is_dir():
                raise RunError(f"run folder {path} exists and is not a folder; choose another --name")
            if path.exists() and any(path.iterdir()) and not never_checkpointed(path):
                raise RunError(f"run folder {path} already exists and is not empty; use --resume {path} "
                               "to continue it, or choose another --name")
            return path
        base = f"{Path(cfg.scene).stem}-{cfg.task}-s{cfg.seed}"
        path, n = root / base, 1
        while path.exists():
            n += 1
            path = root / f"{base}-{n}"
        return path
    except OSError as exc:
        raise os_error(exc, "cannot use the run folder") from None


def _name_max(folder: Path) -> int:
    """The longest file name (bytes) the file system under ``folder`` (or its nearest existing parent) allows."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return int(os.pathconf(probe if probe.exists() else ".", "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):
        return 255


def os_error(exc: OSError, doing: str) -> RunError:
    """A file-system error as a one-line RunError naming the path (disk full, read-only, name too long...)."""
    where = exc.filename if exc.filename is not None else ""
    if exc.filename2 is not None:
        where = f"{where} -> {exc.filename2}"
    reason = exc.strerror or type(exc).__name__
    return RunError(f"{doing}: {where}: {reason}" if where else f"{doing}: {reason}")


# --------------------------------------------------------------------------
# memory: refuse what cannot fit before allocating it
# --------------------------------------------------------------------------

def available_memory() -> int | None:
    """Bytes this process may still allocate: the smaller of the system's available memory and the cgroup's
    limit minus its use; None where neither can be read."""
    found = []
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            with open(limit_file) as fh:
                text = fh.read().strip()
            if text == "max":
                continue
            with open(usage_file) as fh:
                found.append(max(0, int(text) - int(fh.read().strip())))
            break
        except (OSError, ValueError):
            continue
    return min(found) if found else None


def check_memory(what: str, need: int) -> None:
    """Raise RunError when ``need`` bytes (a lower bound of what ``what`` allocates) exceed the memory available."""
    have = available_memory()
    if have is not None and need > have:
        raise RunError(f"{what} needs at least {need / 2**30:.1f} GiB of memory; "
                       f"{have / 2**30:.1f} GiB is available")


def write_json_atomic(path: Path, data):
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=1, sort_keys=True, default=str)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)

