"""Runs: folders, worlds, and building the environment and policy from a config.

Run folder (docs/TRAINING.md)::

    runs/NAME/config.json       resolved config, its hash, package version
    runs/NAME/worlds.json       the set trained in: spec, resolution, each world's name, content hashes, fingerprint
    runs/NAME/worlds/           copies of the set's .gmdag files and compiled meshes (built-ins stay in the cache)
    runs/NAME/metrics.csv       one row per update (columns: navi_nb.train.metrics.COLUMNS)
    runs/NAME/metrics.jsonl     the same rows as JSON lines
    runs/NAME/checkpoints/      ckpt_UUUUUUUU.npz, the newest `keep_checkpoints`
    runs/NAME/policy.npz        the final policy (parameters + meta)
    runs/NAME/run.json          what each `train` call did: summary, first tick, shard choice and switches
    runs/NAME/eval.json         evaluation results (+ eval_episodes.npz trajectories)
    runs/NAME/tb/               TensorBoard event files (when available)
    runs/NAME/.lock             held by the one process writing the folder (navi_nb.train.run_lock)
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import navi_nb
from navi_nb.errors import RunError, os_error  # defined beside NaviError, so that run_lock imports them too
from navi_nb.files import open_regular, read_regular, write_atomic
from navi_nb.train.config import MAX_CONFIG_BYTES, TrainConfig, from_dict
from navi_nb.world.gmdag import bytes_digest, world_digest

CONFIG_FILE = "config.json"
POLICY_FILE = "policy.npz"
RUN_FILE = "run.json"
WORLDS_FILE = "worlds.json"
WORLDS_DIR = "worlds"
CHECKPOINT_DIR = "checkpoints"
CHECKPOINT_LAYOUT = 2
"""The trainer's checkpoint layout: ``ppo.*`` (``PPO.get_state``), ``env.*`` (``NavEnv.get_state``) and
``rng.action`` (``navi_nb.rng_state``), with the counters in meta.json. Layout 1 (before the
generators had one encoding) is refused."""


# --------------------------------------------------------------------------
# time since the process started (for "time to first tick")
# --------------------------------------------------------------------------

# Python's own start, before it imports navi_nb, takes well under this; a larger gap between the
# kernel's start time of the process and navi_nb's import means the process began as something
# else: bash runs the last command of `( a && b )` in the subshell's own process, so /proc would
# count a's time (an install) too.
_EXEC_GAP_S = 2.0


def process_age() -> float:
    """Seconds since this program started: the process's start time from Linux /proc, or, when that
    lies more than ``_EXEC_GAP_S`` before navi_nb's first import (the process was exec'd into an
    older one, or /proc is missing), since that import."""
    since_import = time.time() - navi_nb.IMPORTED_AT
    try:
        with open("/proc/self/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22 of stat, counted after "(comm)"
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
        age = max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return since_import
    return age if age - since_import <= _EXEC_GAP_S else since_import


# --------------------------------------------------------------------------
# worlds: a scene spec names the set; built-ins come from the world cache
# --------------------------------------------------------------------------


def actor_radius(cfg: TrainConfig) -> float:
    """The actor radius the environment settings give (what a world must have room for)."""
    from navi_nb.env.config import EnvConfig

    r = cfg.env.get("radius", EnvConfig.radius)
    return float(r) if isinstance(r, (int, float)) and not isinstance(r, bool) and r > 0 else EnvConfig.radius


def resolve_scenes(spec, cfg: TrainConfig, training=True) -> list:
    """The WorldItems of a scene spec, checked before anything is loaded or written.

    Raises SceneSpecError naming the item for a malformed spec, an empty range, a missing or invalid file,
    a world too small to spawn in, a set too large for the RAM, or (``training``) a held-out seed when
    ``cfg.allow_heldout`` is off.
    """
    from navi_nb.world.scene_spec import check_ram, check_training_items, parse_spec

    items = parse_spec(spec, actor_radius=actor_radius(cfg))
    if training:
        check_training_items(items, cfg.allow_heldout)
    check_ram(items, cfg.resolution)
    return items


def load_scene_set(items, resolution: int, progress=False, load_items=None):
    """A WorldSet of ``items`` (built-ins compiled into the world cache when missing, in as many processes
    as this process may use); ``load_items``, when given, are where the worlds are read from instead. Its
    decoded layout is mapped read-only from the layout cache (``WorldSet.map_layouts``). ``progress``: a bar on
    stderr while worlds compile."""
    from navi_nb.cores import allowed_cores
    from navi_nb.world.world_cache import load_worlds
    from navi_nb.world.world_set import WorldSet

    worlds = load_worlds(load_items or items, resolution, jobs=allowed_cores().allowed, progress=progress)
    world_set = WorldSet(worlds, items=list(items))  # named "house:7" or by the file's name
    world_set.map_layouts()  # the decoded layout mapped read-only from its file: ranks on a host share it
    return world_set


def save_run_worlds(run_path: Path, cfg: TrainConfig, world_set):
    """Record the run's set in ``worlds.json`` (spec, resolution, each world's name, content hashes (with its
    sidecar and of its file bytes alone) and geometry fingerprint, ``navi_nb.world.fingerprint``);
    file worlds are copied into ``worlds/`` so the run keeps them."""
    from navi_nb.world.fingerprint import stored_records
    from navi_nb.world.gmdag import save_world

    digests = [world_digest(world) for world in world_set.worlds]
    prints = stored_records(world_set.worlds, digests)
    records = []
    for i, (item, world) in enumerate(zip(world_set.items, world_set.worlds)):
        rec = {"name": world_set.names[i], "digest": digests[i], "bytes_digest": bytes_digest(world)}
        rec["fingerprint"] = prints[i]
        if item.builtin:
            rec.update(family=item.family, seed=item.seed)
        else:
            name = item.path.name + (".gmdag" if item.mesh else "")  # a mesh is kept compiled, as trained in
            rec.update(source=str(item.path), file=f"{WORLDS_DIR}/{i:05d}-{name}")
            (run_path / WORLDS_DIR).mkdir(exist_ok=True)
            save_world(world, run_path / rec["file"])
        records.append(rec)
    write_json_atomic(run_path / WORLDS_FILE, {"scenes": cfg.scenes, "resolution": cfg.resolution, "worlds": records})


def read_run_worlds(run_path, cfg: TrainConfig) -> tuple:
    """The run's recorded set: (items as trained, items to load from, records), checked against its config."""
    from navi_nb.world.scene_spec import WorldItem

    run_path = Path(run_path)
    p = run_path / WORLDS_FILE
    try:
        data = json.loads(read_regular(p, WORLDS_FILE))
    except OSError as exc:
        raise RunError(f"run folder {run_path}: cannot read {WORLDS_FILE} ({exc.strerror or exc})") from exc
    except ValueError as exc:
        raise RunError(f"run folder {run_path}: {WORLDS_FILE} is not valid JSON ({exc})") from exc
    records = data.get("worlds") if isinstance(data, dict) else None
    if (
        not isinstance(records, list)
        or not records
        or data.get("scenes") != cfg.scenes
        or data.get("resolution") != cfg.resolution
    ):
        raise RunError(
            f"run folder {run_path}: {WORLDS_FILE} does not record the set of its config "
            f"(scenes {cfg.scenes!r} at resolution {cfg.resolution})"
        )
    items, load_items = [], []
    for k, rec in enumerate(records):
        ok = isinstance(rec, dict) and isinstance(rec.get("name"), str) and isinstance(rec.get("digest"), str)
        if ok and "file" in rec:
            ok = (
                isinstance(rec["file"], str)
                and isinstance(rec.get("source"), str)
                and Path(rec["file"]).parts[:1] == (WORLDS_DIR,)
                and ".." not in Path(rec["file"]).parts
            )
            if ok:
                items.append(WorldItem(path=Path(rec["source"]), origin=rec["name"]))
                load_items.append(WorldItem(path=run_path / rec["file"], origin=f"{run_path / rec['file']}"))
        elif ok:
            fam, seed = rec.get("family"), rec.get("seed")
            ok = isinstance(fam, str) and isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0
            if ok:
                items.append(WorldItem(family=fam, seed=seed, origin=rec["name"]))
                load_items.append(items[-1])
        if not ok:
            raise RunError(f"run folder {run_path}: {WORLDS_FILE} world {k} is damaged")
    return items, load_items, records


def recorded_digests(records) -> set:
    """The content digests a run's ``worlds.json`` records: each world's with its sidecar (``digest``) and of its
    file bytes alone (``bytes_digest``, where recorded; a run recorded before the sidecar counted holds that in
    ``digest``)."""
    out = set()
    for rec in records:
        out.add(rec["digest"])
        if isinstance(rec.get("bytes_digest"), str):
            out.add(rec["bytes_digest"])
    return out


def recorded_fingerprints(records):
    """The geometry fingerprints a run's ``worlds.json`` records (``navi_nb.world.fingerprint``; None for a
    world too large to have one), or None when a record lacks the key or holds another fingerprint version (a
    run recorded before them): its split then rests on the content digests alone."""
    from navi_nb.world.fingerprint import FingerprintError, from_record

    if any("fingerprint" not in rec for rec in records):
        return None
    try:
        return [
            None if rec["fingerprint"] is None else from_record(rec["fingerprint"], f"{WORLDS_FILE} {rec['name']}")
            for rec in records
        ]
    except FingerprintError:
        return None


def trained_in(world, digests, prints=None) -> bool:
    """Whether `world` is one of the worlds whose :func:`recorded_digests` are `digests` and (where recorded)
    :func:`recorded_fingerprints` are `prints`: by content under any name (the same node words with another
    sidecar are the same geometry), or by geometry (the same world at another resolution, sample convention or
    header, or with a few leaves changed)."""
    digest = world_digest(world)
    if digest in digests or bytes_digest(world) in digests:
        return True
    if not prints:
        return False
    from navi_nb.world.fingerprint import fingerprints, first_match

    return first_match(fingerprints([world], [digest])[0], prints) is not None


def load_run_worlds(run_path, cfg: TrainConfig, progress=False):
    """The WorldSet a run trained in, refusing any world whose content changed since."""
    from navi_nb.world.scene_spec import SceneSpecError

    items, load_items, records = read_run_worlds(run_path, cfg)
    try:
        world_set = load_scene_set(items, cfg.resolution, progress, load_items=load_items)
    except SceneSpecError as exc:
        raise RunError(f"run {run_path}: a world of its set cannot be loaded ({exc})") from None
    for rec, world in zip(records, world_set.worlds):
        digest = world_digest(world)
        # a run recorded before the digest covered the sidecar holds the file bytes' hash
        if digest != rec["digest"] and bytes_digest(world) != rec["digest"]:
            raise RunError(
                f"run {run_path}: world {rec['name']} is not the one the run trained in (content hash "
                f"{digest}, recorded {rec['digest']}; its generator, the compiler or the file changed)"
            )
    return world_set


def changed_settings(cfg, asked: dict, names) -> list:
    """``"name=<the run's value> (asked <value>)"`` for each of ``names`` that ``asked`` sets otherwise than the
    run's config ``cfg``; for ``env``, one per environment setting asked for that differs from the run's (the
    default where the run's config does not name it)."""
    out = []
    for k in names:
        run, new = getattr(cfg, k), asked[k]
        if k == "env" and isinstance(run, dict) and isinstance(new, dict):
            diff = [f"env {e}={was!r} (asked {new[e]!r})" for e, was in env_changes(run, new).items()]
            if diff:
                out += diff
                continue
        out.append(f"{k}={run!r} (asked {new!r})")
    return out


def env_changes(run_env: dict, asked: dict) -> dict:
    """name -> the run's value, sorted by name, of each environment setting in ``asked`` whose value differs
    from the run's (``run_env``, the run's ``env`` table; the default where it does not name the setting). A
    value equal to the run's is no change (20 and 20.0 alike; a boolean differs from a number)."""
    from navi_nb.env.config import EnvConfig

    default, out = EnvConfig(), {}
    for e in sorted(asked):
        was, new = run_env.get(e, getattr(default, e, None)), asked[e]
        if was != new or isinstance(was, bool) != isinstance(new, bool):
            out[e] = was
    return out


def make_env(world_set, cfg: TrainConfig, n_actors=None, seed=None, ranks=None, **env_overrides):
    """The run's environment over ``world_set`` (its actor blocks' generators), or with ``n_actors`` a plain one
    (evaluation); with ``ranks`` (``navi_nb.parallel.ranks.RankContext``) this rank's blocks only;
    ``env_overrides`` replace settings of ``cfg.env``."""
    from navi_nb.env.nav_env import NavEnv
    from navi_nb.sense.sensor import Sensor

    sensor = Sensor(az=cfg.sensor_az, el=cfg.sensor_el)
    if ranks is not None:
        n_actors, blocks = ranks.n_actors, {"actor_block": cfg.actor_block, "first_block": ranks.first_block}
    else:
        blocks = {"actor_block": cfg.actor_block if n_actors is None else 0}
    return NavEnv(
        world_set,
        cfg.actors if n_actors is None else n_actors,
        sensor=sensor,
        task=cfg.task,
        seed=cfg.seed if seed is None else seed,
        backend=cfg.backend,
        **blocks,
        **{**cfg.env, **env_overrides},
    )


def make_policy(cfg: TrainConfig, obs_dim: int, act_dim: int = 4):
    """The policy of ``cfg`` over observations of ``obs_dim`` columns (the map's crop, when on, their last)."""
    from navi_nb.env.episodic_map import map_columns
    from navi_nb.learn.policy import ActorCritic

    trunk_obs = obs_dim - map_columns(cfg.env) if cfg.map_input == "memory" else obs_dim
    return ActorCritic(
        obs_dim, act_dim, hidden=tuple(cfg.hidden), activation=cfg.activation, seed=cfg.seed,
        memory_size=cfg.memory_size, log_std_init=cfg.log_std_init, trunk_obs=trunk_obs,
    )  # fmt: skip


# --------------------------------------------------------------------------
# run folders
# --------------------------------------------------------------------------


def read_run_config(run_path) -> TrainConfig:
    run_path = Path(run_path)
    if not run_path.is_dir():
        raise RunError(f"run folder {run_path} does not exist")
    p = run_path / CONFIG_FILE
    try:
        with open_regular(p, CONFIG_FILE) as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise RunError(
            f"run folder {run_path}: cannot read {CONFIG_FILE} ({exc.strerror or exc}); is this a navi-nb run folder?"
        ) from exc
    if len(raw) > MAX_CONFIG_BYTES:
        raise RunError(f"run folder {run_path}: {CONFIG_FILE} is larger than {MAX_CONFIG_BYTES} bytes")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # (UnicodeDecodeError is a ValueError)
        raise RunError(
            f"run folder {run_path}: {CONFIG_FILE} is not valid JSON ({type(exc).__name__}: "
            f"{' '.join(str(exc).split())[:200]})"
        ) from exc
    if not isinstance(data, dict) or not isinstance(data.get("config"), dict):
        raise RunError(f"run folder {run_path}: {CONFIG_FILE} has no 'config' object")
    cfg = from_dict(data["config"], source=str(p))
    if data.get("config_hash") != cfg.hash():
        raise RunError(
            f"run folder {run_path}: {CONFIG_FILE} was edited (its hash "
            f"{data.get('config_hash')!r} does not match its settings {cfg.hash()!r})"
        )
    return cfg


def run_base_name(cfg: TrainConfig, items) -> str:
    """``SET-TASK-sSEED``: SET is the one world's name, else its families and count (``house200``)."""
    if len(items) == 1:
        it = items[0]
        name = it.path.stem if not it.builtin else it.family if it.seed == 0 else f"{it.family}{it.seed}"
    else:
        fams = list(dict.fromkeys("file" if not it.builtin else it.family for it in items))
        name = "+".join(fams) + str(len(items))
    return f"{name}-{cfg.task}-s{cfg.seed}"


# What a run folder holds before its first checkpoint exists (Trainer.create writes these first).
_BEFORE_FIRST_CHECKPOINT = {CONFIG_FILE, WORLDS_FILE, WORLDS_DIR, "metrics.csv", "metrics.jsonl", "tb", "checkpoints"}


def never_checkpointed(path: Path) -> bool:
    """True for a run folder that a kill left before its first checkpoint was complete: only the files
    ``Trainer.create`` writes first, and nothing in ``checkpoints/`` but temporary files. Such a
    folder holds nothing to resume; a new run may take it over."""
    try:
        names = _content(path)
        if not names or not names <= _BEFORE_FIRST_CHECKPOINT:
            return False
        ckpt = path / "checkpoints"
        return not ckpt.exists() or (ckpt.is_dir() and all(p.name.endswith(".tmp") for p in ckpt.iterdir()))
    except OSError:
        return False


def _content(path: Path) -> set:
    """The names in a run folder, its lock's files left out (``navi_nb.train.run_lock``)."""
    from navi_nb.train.run_lock import LOCK_FILES

    return {p.name for p in path.iterdir()} - LOCK_FILES


BUSY_HINT_NEW = "wait for it or choose another --name"


def pick_run_path(cfg: TrainConfig, items) -> Path:
    """The new run's folder (not created yet): ``run_dir/name``, or a free ``SET-TASK-sSEED[-N]``."""
    root = Path(cfg.run_dir)
    try:
        if root.exists() and not root.is_dir():
            raise RunError(f"--run-dir {root} is not a folder")
        if cfg.name:
            limit = _name_max(root)
            if len(os.fsencode(cfg.name)) > limit:
                raise RunError(
                    f"--name is {len(os.fsencode(cfg.name))} bytes long; a folder name here may have at most {limit}"
                )
            path = root / cfg.name
            if path.exists() and not path.is_dir():
                raise RunError(f"run folder {path} exists and is not a folder; choose another --name")
            if path.exists() and _content(path) and not never_checkpointed(path):
                from navi_nb.train.run_lock import check_free

                check_free(path, BUSY_HINT_NEW)  # a run that is writing it is named first
                raise _not_empty(path)
            return path
        base = run_base_name(cfg, items)
        path, n = root / base, 1
        while path.exists():
            n += 1
            path = root / f"{base}-{n}"
        return path
    except OSError as exc:
        raise os_error(exc, "cannot use the run folder") from None


def _not_empty(path: Path) -> RunError:
    return RunError(
        f"run folder {path} already exists and is not empty; use --resume {path} "
        "to continue it, or choose another --name"
    )


def _holds_run(path: Path) -> RunError:
    return RunError(
        f"run folder {path} is not empty (it holds a run or other files); resume a run with "
        f"Trainer.resume({str(path)!r}) (navi-nb train --resume), or give an empty or new folder"
    )


def claim_run_path(cfg: TrainConfig, items, run_path=None, command="navi-nb train"):
    """The new run's folder (``run_path``, else ``pick_run_path``), made and locked before anything is written
    into it: ``(path, RunLock, made)``, ``made`` the folders this call made, the run folder first, then any of
    its parents (``--run-dir``) that were missing (empty when it made none; ``release_new_run`` removes them
    again while empty if the run stops before writing). Raises RunError when another process holds the folder
    (``navi_nb.train.run_lock``) or it filled since it was picked; writes nothing then."""
    from navi_nb.train.run_lock import acquire

    for _ in range(100):  # without --name two runs may pick the same free name: the one that makes it wins
        path = Path(run_path) if run_path is not None else pick_run_path(cfg, items)
        fixed = run_path is not None or bool(cfg.name)
        try:
            parents = _missing_parents(path.parent)
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                path.mkdir()
                made = (path, *parents)
            except FileExistsError:
                if not fixed:
                    continue
                made = parents
        except OSError as exc:
            raise os_error(exc, "cannot make the run folder") from None
        lock = acquire(path, command, BUSY_HINT_NEW)
        try:
            # a folder given by the caller is checked here, one picked by name was checked by pick_run_path and
            # may have filled since: either way a run already in it is never written over
            if _content(path) and not never_checkpointed(path):
                raise _not_empty(path) if run_path is None else _holds_run(path)
        except OSError as exc:
            lock.release()
            raise os_error(exc, "cannot use the run folder") from None
        except BaseException:
            lock.release()
            raise
        return path, lock, made
    raise RunError(f"--run-dir {cfg.run_dir}: no free run folder name found (other runs keep taking them)")


def _missing_parents(folder: Path) -> tuple:
    """The folders of ``folder`` and its parents that do not exist yet, deepest first."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return tuple(missing)


def release_new_run(path: Path, lock, made) -> None:
    """Give up a new run's folder after a failure before its first write: the lock released, and the folders
    ``claim_run_path`` made (the run folder, a missing ``--run-dir``) removed while they are still empty."""
    lock.release()
    for folder in made or ():
        try:
            folder.rmdir()
        except OSError:
            break  # not empty (another run came in), or gone: leave it and its parents


def _name_max(folder: Path) -> int:
    """The longest file name (bytes) the file system under ``folder`` (or its nearest existing parent) allows."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return int(os.pathconf(probe if probe.exists() else ".", "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):
        return 255


# --------------------------------------------------------------------------
# RAM: refuse what cannot fit before allocating it
# --------------------------------------------------------------------------


def check_run_entries(run_path, files=(), folders=()) -> None:
    """Before a command writes into the run folder ``run_path``: each of ``files`` (names it writes or
    appends to) is absent or a regular file, and each of ``folders`` absent or a real folder. A link, FIFO,
    folder or device in their place is refused in one line naming it, before anything is written (a writer
    that met it later would have written the folder's other files first, or written through a linked folder)."""
    import stat

    from navi_nb.files import file_kind

    for names, want, words in ((files, stat.S_ISREG, "a regular file"), (folders, stat.S_ISDIR, "a folder")):
        for name in names:
            path = Path(run_path) / name
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise os_error(exc, f"cannot use the run folder {run_path}") from None
            if stat.S_ISLNK(mode):
                raise RunError(f"run folder {run_path}: {name} is a symbolic link, not {words} of its own; remove it")
            if not want(mode):
                raise RunError(f"run folder {run_path}: {name} is {file_kind(mode)}, not {words}; remove it")


def check_ram(what: str, need: int) -> None:
    """Raise RunError when ``need`` bytes (a lower bound of what ``what`` allocates) exceed the RAM available
    (``navi_nb.ram.check_fits``, the one RAM check)."""
    from navi_nb.ram import check_fits

    check_fits(need, what, error=RunError)


def write_json_atomic(path: Path, data):
    """``data`` as indented JSON with sorted keys, written whole or not at all."""
    write_atomic(path, (json.dumps(data, indent=1, sort_keys=True, default=str) + "\n").encode("utf-8"))
