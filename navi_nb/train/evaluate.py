"""Deterministic evaluation of a trained run, on its own worlds or on any set.

``evaluate(run, episodes=N, scenes=SPEC)`` runs N actors side by side, one
episode each, with the policy's mean action (no sampling noise), on seeds the
training never used (``eval_seed``, by default the training seed + 1,000,003),
in the worlds of SPEC (default: the run's own set). Each actor's first finished
episode is its episode; the autoreset episodes that follow are ignored. The
worlds take turns (the environment's ``round_robin`` schedule: actor ``a``
starts in world ``a % W``), so N episodes in W worlds give each world N / W
of them (one more for the first N % W).

Every episode is labelled with its world, the world's family and its split:
``train`` (a world the run trained in, by name or by content: a copy of one under
another name is still one) or ``held-out`` (any other). Worlds of
SPEC that the run trained in are refused unless ``allow_overlap`` is given
(then they are counted, and labelled, as ``train``). Results, overall, per
split and per family: success rate with a 95 % Wilson interval, SPL and the
final distance to the goal with 95 % percentile-bootstrap intervals (seeded:
the same episodes give the same interval), return, length and collisions;
written to ``RUN/eval.json`` with the per-episode values; the trajectories
(position and yaw before every step, the goal, the world, the outcome) to
``RUN/eval_episodes.npz`` for ``navi-nb render RUN --episode K``.

An explore run (no goal) is scored by coverage instead (``navi_nb.train.coverage``): the fraction of the
reachable visit-grid cells entered after ``max_steps // 2`` and after ``max_steps`` steps, with 95 %
percentile-bootstrap intervals, overall, per split and per family; no success, SPL, final distance or
difficulty bins, and its generalization gap is the train minus held-out coverage.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

import navi_nb
from navi_nb.env.config import EPISODE_KEYS, EPISODE_RECORD, EPISODE_SETTINGS, EnvConfig
from navi_nb.errors import NaviError
from navi_nb.train import checkpoint as ck
from navi_nb.train.coverage import (
    COVERAGE_KEYS,
    GOAL_KEYS,
    check_coverages,
    coverage_steps,
    summarize_coverage,
)
from navi_nb.train.intervals import bootstrap_interval, wilson_interval
from navi_nb.train.runs import (
    CHECKPOINT_DIR,
    CHECKPOINT_LAYOUT,
    POLICY_FILE,
    RunError,
    check_ram,
    check_run_entries,
    load_run_worlds,
    load_scene_set,
    make_env,
    make_policy,
    os_error,
    read_run_config,
    read_run_worlds,
    recorded_digests,
    recorded_fingerprints,
    resolve_scenes,
    trained_in,
    write_json_atomic,
)

EVAL_FILE = "eval.json"
EPISODES_FILE = "eval_episodes.npz"
SCORED_KEYS = tuple(k for k in EPISODE_KEYS if k not in ("coverage", "world"))
"""The episode record's entries an evaluation scores per episode (coverage is the explore task's; the world is
kept beside them as an index)."""
SEED_OFFSET = 1_000_003
SPLITS = ("train", "held-out")
DISTANCE_BINS = ((0.0, 2.0), (2.0, 4.0), (4.0, 6.0), (6.0, np.inf))
"""Difficulty by the episode's shortest path from spawn to goal (metres)."""
RATIO_BINS = ((1.0, 1.1), (1.1, 1.5), (1.5, np.inf))
"""Difficulty by its shortest path over the straight line: below 1.1 the goal is (nearly) in sight;
Habitat keeps episodes of 1.1 and more as non-trivial."""


class EvalError(RunError):
    """An evaluation request that cannot be run as asked (e.g. worlds overlapping the training set)."""


def summarize(ep, rows=None):
    """Means and 95 % intervals of the episodes ``rows`` (default all) of per-episode arrays ``ep``: each
    quantity's mean is ``NAME_mean`` (the success's is ``success_rate``), its interval ``..._ci95``. Episodes of
    the explore task (``ep`` holds their coverages) get ``coverage.summarize_coverage``'s figures instead."""
    sel = slice(None) if rows is None else rows
    if "coverage" in ep:  # an explore evaluation (``run_episodes``): coverage, no goal to score
        return summarize_coverage(ep, sel)
    succ = ep["success"][sel]
    n = int(succ.size)
    out = {
        "episodes": n,
        "success_rate": float(succ.mean()) if n else float("nan"),
        "success_rate_ci95": wilson_interval(int(succ.sum()), n),
    }
    for k in ("spl", "final_distance"):
        v = ep[k][sel]
        v = v[~np.isnan(v)] if k == "spl" else v  # SPL over the episodes whose shortest path is known
        out[k + "_mean"] = float(v.mean()) if v.size else float("nan")
        out[k + "_mean_ci95"] = bootstrap_interval(v)
    for k in ("return", "length", "collisions"):
        out[k + "_mean"] = float(ep[k][sel].mean()) if n else float("nan")
    return out


def bin_label(lo, hi) -> str:
    return f"{lo:g}+" if hi == np.inf else f"{lo:g}-{hi:g}"


def difficulty(ep) -> dict:
    """``summarize`` per difficulty bin: by the shortest path (``DISTANCE_BINS``, metres) and by the detour
    ratio (``RATIO_BINS``); bins without episodes are left out. An episode whose shortest path is unknown
    (NaN: no path joins its spawn and goal) is in no bin, and ``unknown_shortest_path`` counts them. Empty
    without the per-episode geodesic."""
    if "geodesic" not in ep:
        return {}
    out = {"unknown_shortest_path": int(np.isnan(ep["geodesic"]).sum())}
    for key, column, bins in (("geodesic_m", "geodesic", DISTANCE_BINS), ("ratio", "ratio", RATIO_BINS)):
        v = ep[column]
        groups = {}
        for k, (lo, hi) in enumerate(bins):
            rows = (v >= lo) & (v < hi) if k else (v < hi)  # the first bin takes everything below its top
            if rows.any():
                groups[bin_label(lo, hi)] = summarize(ep, rows)
        out[key] = groups
    return out


def load_run_policy(run_path, cfg, source="auto"):
    """The run's policy: ``policy.npz`` (final) or, failing that / when asked, the newest checkpoint.

    Only the weights are read (a checkpoint's ``ppo.params``; the optimizer and environment state stay
    unread): the network's shape comes from the config, so no environment or trainer is built.
    """
    run_path = Path(run_path)
    policy = make_policy(cfg, cfg.obs_dim())
    final = run_path / POLICY_FILE
    if source in ("auto", "final") and final.is_file():
        params, meta = _read_weights(final, "policy.params", policy, cfg)
        policy.set_params(params)
        return policy, {"source": str(final), "update": meta.get("update")}
    if source == "final":
        raise RunError(f"run {run_path} has no final policy ({POLICY_FILE}); it may still be training")
    latest = ck.latest_checkpoint(run_path / CHECKPOINT_DIR)
    if latest is None:
        raise RunError(f"run {run_path} has neither {POLICY_FILE} nor a checkpoint to evaluate")
    layout = ck.open_checkpoint(latest).meta.get("layout", 1)
    if layout != CHECKPOINT_LAYOUT:
        raise ck.CheckpointError(
            latest, f"has the trainer's checkpoint layout {layout!r}; this version reads layout {CHECKPOINT_LAYOUT}"
        )
    params, meta = _read_weights(latest, "ppo.params", policy, cfg)
    update = meta.get("update")
    if not (isinstance(update, int) and update >= 0):
        raise ck.CheckpointError(latest, f"its update counter {update!r} is not a count")
    policy.set_params(params)
    return policy, {"source": str(latest), "update": update}


def _read_weights(path, member, policy, cfg):
    """``(weights, meta)``: member ``member`` of checkpoint ``path``, shaped as ``policy``'s parameters, written
    by a run of ``cfg`` and finite."""
    spec = {member: (policy.params.shape, policy.params.dtype)}
    arrays, meta = ck.load_checkpoint(path, spec, expect_hash=cfg.hash(), subset=True)
    bad = ~np.isfinite(arrays[member])
    if bad.any():
        raise ck.CheckpointError(
            path,
            f"member {member!r} holds {int(bad.sum())} non-finite weight(s) "
            f"(first at index {int(np.flatnonzero(bad)[0])})",
        )
    return arrays[member], meta


def mean_action(policy):
    """The acting function of navi_nb's policy for evaluation: its mean action (no sampling noise). A policy
    with memory keeps one state per actor from a zero state at the first call, advanced every call; its
    ``reset()`` forgets them, and :func:`run_episodes` calls it before its first step, so each evaluation
    starts from zero states however often the function is used."""
    rng = np.random.default_rng(0)  # unused by deterministic acting; act() wants one
    memory = {}

    def act(obs):
        if policy.gru is not None and obs.shape[0] not in memory:
            memory[obs.shape[0]] = policy.new_memory(obs.shape[0])
        return policy.act(obs, rng, deterministic=True, memory=memory.get(obs.shape[0]))[0]

    act.reset = memory.clear
    return act


def run_episodes(env, act, max_ticks):
    """One episode per actor, acting with ``act`` (observations (N, obs_dim) -> actions (N, 4): any policy,
    e.g. :func:`mean_action` of navi_nb's or a Stable-Baselines3 model's ``predict``). Returns per-episode
    arrays + trajectories. An ``act`` with a ``reset()`` (a policy's memory, as :func:`mean_action`'s) is reset
    first: the same episodes give the same results however often ``act`` ran before. In an explore environment
    the arrays hold each episode's coverage after ``max_steps // 2`` and ``max_steps`` steps
    (``coverage.COVERAGE_KEYS``) and no final distance or difficulty: there is no goal."""
    if callable(getattr(act, "reset", None)):
        act.reset()
    A = env.n_actors
    obs, _ = env.reset()
    pos_log = [env.positions.copy()]
    yaw_log = [env.yaws.copy()]
    goals = env.goals.copy()
    explore = getattr(env, "task", "pointgoal") == "explore"
    geodesic = np.array(env.shortest_paths, np.float64) if hasattr(env, "shortest_paths") and not explore else None
    half = coverage_steps(env.config.max_steps)[0] if explore else -1
    cover = {k: np.full(A, np.nan) for k in COVERAGE_KEYS}
    straight = np.linalg.norm(goals.astype(np.float64) - pos_log[0].astype(np.float64), axis=1)
    finished = np.zeros(A, bool)
    out = {k: np.zeros(A, np.float64) for k in SCORED_KEYS}
    world = np.zeros(A, np.int64)
    final_pos = np.zeros((A, 3), np.float32)
    for tick in range(1, max_ticks + 1):
        actions = act(obs)
        obs, _r, _te, _tr, info = env.step(actions)
        done = info["done"] & ~finished
        keep = ~finished & ~info["done"]
        pos_now = env.positions.copy()
        if tick == half:  # the episodes still running have taken half their steps (one ending now has all)
            cover["coverage_half"][keep] = env.coverage[keep]
        if done.any():
            ep = info["episode"]
            for k in out:
                out[k][done] = np.asarray(ep[k])[done]
            world[done] = np.asarray(ep["world"])[done]
            cover["coverage"][done] = np.asarray(ep["coverage"], np.float64)[done]
            fp = info.get("final_pos")
            final_pos[done] = np.asarray(fp)[done] if fp is not None else pos_log[-1][done]
            pos_now[done] = final_pos[done]
        # positions of actors already finished are frozen at their final position
        pos_now[finished] = final_pos[finished]
        pos_log.append(pos_now)
        yaw_now = env.yaws.copy()
        yaw_now[~keep] = yaw_log[-1][~keep]
        yaw_log.append(yaw_now)
        finished |= info["done"]
        if finished.all():
            break
    if not finished.all():
        raise RuntimeError(f"{int((~finished).sum())} evaluation episodes did not end in {max_ticks} steps")
    out["world"] = world
    if explore:  # an episode that ended by half its steps (none does: explore episodes last max_steps) kept its end
        out["coverage_half"] = np.where(np.isnan(cover["coverage_half"]), cover["coverage"], cover["coverage_half"])
        out["coverage"] = cover["coverage"]
    else:
        out["final_distance"] = np.linalg.norm(final_pos.astype(np.float64) - goals.astype(np.float64), axis=1)
    if geodesic is not None:  # the episode's difficulty: its shortest path and the detour it asks
        out["geodesic"] = geodesic
        out["ratio"] = geodesic / np.maximum(straight, 1e-9)
    return out, {
        "positions": np.stack(pos_log).astype(np.float32),
        "yaws": np.stack(yaw_log).astype(np.float32),
        "goals": goals.astype(np.float32),
    }


def evaluation_set(run_path, cfg, scenes=None, allow_overlap=False, console=None):
    """(WorldSet to evaluate in, split of each of its worlds), checked first.

    scenes: a spec (default: the run's own set, all ``train``). Worlds of the spec that the run trained in, by
    name, content or geometry (a copy of a training world, or it at another resolution: ``runs.trained_in``;
    by content alone for a run recorded without fingerprints), raise EvalError unless
    ``allow_overlap``; they are then in the ``train`` split. Names are compared before any world loads,
    content once the worlds are loaded.
    """
    from navi_nb.world.scene_spec import overlap

    train_items, _, records = read_run_worlds(run_path, cfg)
    if scenes is None:
        run_worlds = load_run_worlds(run_path, cfg, console is not None)
        return run_worlds, ["train"] * len(run_worlds)
    items = resolve_scenes(scenes, cfg, training=False)
    shared = overlap(items, train_items)
    if shared and not allow_overlap:
        raise EvalError(
            f"scene spec item {shared[0].origin!r}: {len(shared)} of the {len(items)} evaluation worlds "
            f"(first {shared[0].label}) are training worlds of run {run_path}; allow the overlap "
            "explicitly to evaluate on them (they are then reported as the train split)"
        )
    world_set = load_scene_set(items, cfg.resolution, console is not None)
    keys, digests, prints = {it.key for it in shared}, recorded_digests(records), recorded_fingerprints(records)
    if prints is None and console is not None:
        note = f"run {run_path} records no geometry fingerprints: train or held-out by content hash only"
        console.print(note, style="dim", markup=False)
    copies = [it for it, w in zip(items, world_set.worlds) if it.key not in keys and trained_in(w, digests, prints)]
    if copies and not allow_overlap:
        raise EvalError(
            f"scene spec item {copies[0].origin!r}: {len(copies)} of the {len(items)} evaluation worlds "
            f"(first {copies[0].label}) hold the content of training worlds of run {run_path} under another name; "
            "allow the overlap explicitly to evaluate on them (they are then reported as the train split)"
        )
    keys |= {it.key for it in copies}
    return world_set, ["train" if it.key in keys else "held-out" for it in items]


def evaluation_env(world_set, cfg, episodes, eval_seed, env=None):
    """The environment of an evaluation: ``episodes`` actors, one episode each, seeded ``eval_seed``; round
    robin (actor a's episode is in world a % W, so the worlds share the episodes evenly); ``env``: settings of
    ``EPISODE_SETTINGS`` in place of the run's."""
    return make_env(world_set, cfg, n_actors=episodes, seed=eval_seed, world_schedule="round_robin", **(env or {}))


def check_episode_settings(env, run_path=None) -> dict:
    """``env`` as a dict of episode settings, or an EvalError naming the first one an evaluation may not set
    (and, with ``run_path``, the run's own value of it: what its checkpoint was trained with)."""
    env = dict(env or {})
    for key in env:
        if key not in EPISODE_SETTINGS:
            raise EvalError(
                f"eval --env {key}={env[key]!r}: {_run_setting(run_path, key)}only the episode settings can differ "
                f"from the run's ({', '.join(EPISODE_SETTINGS)})"
            )
    return env


def _run_setting(run_path, key) -> str:
    """``"the run's config says KEY=VALUE; "`` for ``run_path``'s environment setting ``key`` (its default where
    the config does not name it), or nothing where the run's config cannot be read (its own error comes later)."""
    if run_path is None or key not in EnvConfig.__dataclass_fields__:
        return ""
    try:
        cfg = read_run_config(Path(run_path))
    except NaviError:
        return ""
    return f"the run's config says {key}={cfg.env.get(key, getattr(EnvConfig(), key))!r}; "


def episode_settings(config) -> dict:
    """The episode settings of an evaluation's environment config that differ from the defaults (the run's
    own or ``--env``'s): they change which episodes are drawn, so figures are comparable only where they agree."""
    default = EnvConfig()
    return {k: getattr(config, k) for k in EPISODE_SETTINGS if getattr(config, k) != getattr(default, k)}


def check_eval_seed(seed) -> int:
    """``seed`` as an int when it can seed NumPy's generators (an integer in 0..2**64 - 1); else RunError."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2**64:
        raise RunError(f"--seed must be an integer in 0..2**64-1, got {seed!r}")
    return int(seed)


def check_evaluation(cfg, episodes, seed=None, overrides=None) -> int:
    """The evaluation's seed (``cfg.seed + SEED_OFFSET`` unless given), once its episode count, its seed and the
    RAM its episodes need (with ``overrides``' step limit) are checked: RunError naming what does not hold."""
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise RunError(f"episodes must be a positive integer, got {episodes!r}")
    eval_seed = check_eval_seed(cfg.seed + SEED_OFFSET if seed is None else seed)
    check_ram(episodes_ram_label(cfg, episodes, overrides), episodes_ram_estimate(cfg, episodes, overrides))
    return eval_seed


def evaluate_policy(act, world_set, cfg, episodes=100, seed=None):
    """Any policy ``act`` (see :func:`run_episodes`) on the episodes ``navi-nb eval`` runs for a run with
    config ``cfg`` in ``world_set`` (seed ``cfg.seed + SEED_OFFSET`` unless given). Returns
    ``summarize``'s means and 95 % intervals, overall and per family (``families``), plus ``per_episode``
    (the arrays ``run_episodes`` returns); for the explore task also ``coverage_steps``."""
    eval_seed = check_evaluation(cfg, episodes, seed)
    env = evaluation_env(world_set, cfg, episodes, eval_seed)
    ep, _traj = run_episodes(env, act, env.config.max_steps + 1)
    family = np.array(world_set.families)[ep["world"]]
    res = {"seed": eval_seed, **summarize(ep), "difficulty": difficulty(ep), "per_episode": ep}
    res["families"] = {f: summarize(ep, family == f) for f in dict.fromkeys(world_set.families) if (family == f).any()}
    if cfg.task == "explore":
        res["coverage_steps"] = coverage_steps(env.config.max_steps)
    return res


def evaluate(
    run_path,
    episodes=100,
    seed=None,
    source="auto",
    save=True,
    console=None,
    scenes=None,
    allow_overlap=False,
    env=None,
):
    """Evaluate ``run_path`` in the worlds of ``scenes`` (default: its own); returns the results dict
    (also saved into the run folder unless ``save`` is off). Everything is checked before anything is written.
    With ``save`` the run folder's lock (``navi_nb.train.run_lock``) is held from the start to the end: a
    folder that another process writes (a run training) is refused at once; without it nothing is locked."""
    from navi_nb.train.run_lock import acquire

    run_path = Path(run_path)
    overrides = check_episode_settings(env, run_path)
    lock = None
    if save:
        if not run_path.is_dir():
            raise RunError(f"run folder {run_path} does not exist")
        no_save = "evaluate with --no-save, which writes nothing"
        lock = acquire(run_path, "navi-nb eval", "wait for it, or evaluate with --no-save", no_save)
    try:
        check_run_entries(run_path, (EVAL_FILE, EPISODES_FILE) if save else ())  # both before either is written
        return _evaluate(run_path, episodes, seed, source, save, console, scenes, allow_overlap, overrides)
    finally:
        if lock is not None:
            lock.release()


def _evaluate(run_path, episodes, seed, source, save, console, scenes, allow_overlap, overrides):
    cfg = read_run_config(run_path)
    eval_seed = check_evaluation(cfg, episodes, seed, overrides)
    world_set, split_of = evaluation_set(run_path, cfg, scenes, allow_overlap, console)
    policy, origin = load_run_policy(run_path, cfg, source)  # a damaged policy is refused before any world is traced
    env = evaluation_env(world_set, cfg, episodes, eval_seed, overrides)
    for line in env.pool_notes if console is not None else ():
        console.print(line, style="dim", markup=False)  # a world whose spawn points the pool splits
    t0 = time.perf_counter()
    ep, traj = run_episodes(env, mean_action(policy), env.config.max_steps + 1)
    wall = time.perf_counter() - t0
    family_of = world_set.families
    world = ep["world"]
    explore = cfg.task == "explore"
    score = "coverage_mean" if explore else "success_rate"  # the figure of the generalization gap
    ep_split = np.array([split_of[w] for w in world])
    ep_family = np.array([family_of[w] for w in world])
    res = {
        "run": str(run_path),
        "policy": origin,
        "episodes": episodes,
        "seed": eval_seed,
        "task": cfg.task,
        "scenes": cfg.scenes if scenes is None else scenes,
        "train_scenes": cfg.scenes,
        "env_overrides": overrides,
        "episode_settings": episode_settings(env.config),
        "worlds": len(world_set),
        "worlds_visited": int(np.unique(world).size),
        "overlap_worlds": sum(s == "train" for s in split_of) if scenes is not None else 0,
        "deterministic": True,
        "wall_s": wall,
        "navi_nb_version": navi_nb.__version__,
        **summarize(ep),
        "return_std": float(ep["return"].std()),
        "splits": {s: summarize(ep, ep_split == s) for s in SPLITS if (ep_split == s).any()},
        "families": {f: summarize(ep, ep_family == f) for f in dict.fromkeys(family_of) if (ep_family == f).any()},
        **({"coverage_steps": coverage_steps(env.config.max_steps)} if explore else {"difficulty": difficulty(ep)}),
        "per_episode": {
            **{k: v.tolist() for k, v in ep.items() if k != "world" and not (explore and k in GOAL_KEYS)},
            "world": [world_set.names[w] for w in world],
            "split": ep_split.tolist(),
            "family": ep_family.tolist(),
        },
    }
    if "train" in res["splits"] and "held-out" in res["splits"]:
        res["generalization_gap"] = res["splits"]["train"][score] - res["splits"]["held-out"][score]
    if save:
        records = world_records(world_set, run_path if scenes is None else None)
        try:
            save_results(run_path, res, ep, traj, cfg, eval_seed, records)
        except OSError as exc:
            raise os_error(exc, f"cannot write the evaluation into {run_path}") from None
    return res


def save_results(run_path, res, ep, traj, cfg, eval_seed, records):
    """``eval.json`` and ``eval_episodes.npz`` (the trajectories ``navi-nb render RUN --episode K`` draws;
    ``records``: ``world_records`` of the evaluation's set)."""
    write_json_atomic(run_path / EVAL_FILE, res)
    ck.save_checkpoint(
        run_path / EPISODES_FILE,
        {
            "positions": traj["positions"],
            "yaws": traj["yaws"],
            "goals": traj["goals"],
            **{k: ep[k].astype(EPISODE_RECORD[k]) for k in SCORED_KEYS + ("world",)},
            **{k: ep[k].astype(np.float32) for k in COVERAGE_KEYS if k in ep},  # explore's
        },
        {
            "kind": "eval_episodes",
            "episodes": res["episodes"],
            "steps": int(traj["positions"].shape[0]),
            "config_hash": cfg.hash(),
            "seed": eval_seed,
            "resolution": cfg.resolution,
            "worlds": records,
        },
    )


def world_records(world_set, run_path=None):
    """What finds each world of an evaluation again: a built-in's family and seed, a file's path (for a run's
    own set, ``run_path``, its copy in the run folder)."""
    copies = None
    if run_path is not None:
        copies = read_run_worlds(run_path, read_run_config(run_path))[1]
    out = []
    for i, it in enumerate(world_set.items):
        if it.builtin:
            out.append({"name": world_set.names[i], "family": it.family, "seed": it.seed})
        else:
            path = copies[i].path if copies is not None else it.path
            out.append({"name": world_set.names[i], "path": str(Path(path).resolve())})
    return out


def episodes_ram_estimate(cfg, episodes: int, overrides=None) -> int:
    """A lower bound on the bytes evaluating ``episodes`` side by side holds: one environment actor per
    episode, the policy's hidden activations (actor and critic trunks), and its logged poses (position
    and yaw, 16 bytes a step: the list of steps, the stacked array and its float32 copy). ``overrides``:
    the evaluation's own episode settings (``eval --env``), whose ``max_steps`` sizes the log."""
    from navi_nb.env.config import EnvConfig
    from navi_nb.env.footprint import actor_bytes

    max_steps = EnvConfig.from_kwargs(**{**cfg.env, **(overrides or {})}).max_steps
    per_episode = (
        actor_bytes(cfg.obs_dim(), cfg.sensor_az * cfg.sensor_el) + 8 * sum(cfg.hidden) + 3 * 16 * (max_steps + 2)
    )
    return episodes * per_episode


def episodes_ram_label(cfg, episodes: int, overrides=None) -> str:
    """What an evaluation's RAM refusal names: the episodes and their step limit, with the flag that set it
    when the evaluation's own ``--env`` did (the two sizes ``episodes_ram_estimate`` multiplies)."""
    from navi_nb.env.config import EnvConfig

    max_steps = EnvConfig.from_kwargs(**{**cfg.env, **(overrides or {})}).max_steps
    limit = f"--env max_steps={max_steps}" if "max_steps" in (overrides or {}) else f"the run's max_steps={max_steps}"
    return f"evaluating {episodes} episode{'s' if episodes != 1 else ''} of up to {max_steps:,} steps ({limit})"


def episodes_spec(n_episodes, n_steps, coverage=False):
    """What ``eval_episodes.npz`` must hold for ``n_episodes`` and ``n_steps`` logged positions (``coverage``:
    with an explore evaluation's coverages)."""
    return {
        **{k: ((n_episodes,), np.float32) for k in COVERAGE_KEYS if coverage},
        "positions": ((n_steps, n_episodes, 3), np.float32),
        "yaws": ((n_steps, n_episodes), np.float32),
        "goals": ((n_episodes, 3), np.float32),
        **{k: ((n_episodes,), EPISODE_RECORD[k]) for k in SCORED_KEYS + ("world",)},
    }


def load_episodes(run_path, world=None):
    """The saved trajectories of the last evaluation (checked like any checkpoint).

    Beyond the checkpoint reader's checks (members, shapes, sizes, CRCs), the
    values are checked: finite (SPL may be NaN: the shortest path unknown), lengths within the logged steps,
    counters not negative, SPL in [0, 1], and, when ``world`` is given, every position and
    goal inside the world's cube (an evaluation in one world; ``check_in_world`` checks one episode).
    """
    path = Path(run_path) / EPISODES_FILE
    c = ck.open_checkpoint(path)
    n, steps = c.meta.get("episodes"), c.meta.get("steps")
    if not (
        isinstance(n, int)
        and isinstance(steps, int)
        and not isinstance(n, bool)
        and not isinstance(steps, bool)
        and 0 < n <= 1_000_000
        and 0 < steps <= 1_000_000
    ):
        raise ck.CheckpointError(path, "meta.json has no valid episode/step counts")
    eps = c.read_arrays(episodes_spec(n, steps, coverage=set(COVERAGE_KEYS) <= set(c.array_names)))
    check_episodes(path, eps, world)
    return eps, c.meta


def check_episodes(path, eps, world=None):
    """Raise CheckpointError unless the loaded episode arrays hold possible values."""
    steps = eps["positions"].shape[0]
    for name in ("positions", "yaws", "goals", "return", "spl"):
        bad = ~np.isfinite(eps[name]) & ~((name == "spl") & np.isnan(eps[name]))  # NaN SPL: path unknown
        if bad.any():
            raise ck.CheckpointError(path, f"member {name!r} holds {int(bad.sum())} non-finite value(s)")
    if eps["success"].view(np.uint8).max(initial=0) > 1:
        raise ck.CheckpointError(path, "member 'success' holds bytes other than 0 and 1")
    length = eps["length"]
    if length.size and (length.min() < 0 or length.max() > steps - 1):
        raise ck.CheckpointError(
            path,
            f"member 'length' holds {int(length.min())}..{int(length.max())}, "
            f"outside 0..{steps - 1} (the logged steps)",
        )
    if eps["collisions"].size and eps["collisions"].min() < 0:
        raise ck.CheckpointError(path, "member 'collisions' holds negative counts")
    if np.any(eps["spl"] < 0) or np.any(eps["spl"] > 1):
        raise ck.CheckpointError(path, "member 'spl' holds values outside [0, 1]")
    check_coverages(path, eps, ck.CheckpointError)
    if np.abs(eps["yaws"]).max(initial=0) > 4.0:  # yaws are kept in [-pi, pi)
        raise ck.CheckpointError(path, "member 'yaws' holds angles outside [-pi, pi]")
    if eps["world"].size and eps["world"].min() < 0:
        raise ck.CheckpointError(path, "member 'world' holds negative world indices")
    if world is not None:
        check_in_world(path, {"positions": eps["positions"], "goals": eps["goals"]}, world)


def check_in_world(path, points, world):
    """Raise CheckpointError unless every point of ``points`` (name -> (..., 3) array) lies in ``world``'s cube."""
    lo = np.asarray(world.bmin, np.float64) - 1e-3 * float(world.voxel_size)
    hi = np.asarray(world.bmax, np.float64) + 1e-3 * float(world.voxel_size)
    for name, pts in points.items():
        xyz = np.asarray(pts).reshape(-1, 3)
        if xyz.size and (np.any(xyz.min(axis=0) < lo) or np.any(xyz.max(axis=0) > hi)):
            raise ck.CheckpointError(
                path,
                f"member {name!r} holds points outside the world's cube {lo.round(3).tolist()}..{hi.round(3).tolist()}",
            )


def episode_world(meta, world_index, resolution):
    """The World an evaluation episode ran in, from ``eval_episodes.npz``'s meta and the episode's world."""
    from navi_nb.world.scene_spec import WorldItem
    from navi_nb.world.world_cache import load_worlds

    recs = meta.get("worlds")
    if not isinstance(recs, list) or not 0 <= world_index < len(recs) or not isinstance(recs[world_index], dict):
        raise RunError(f"{EPISODES_FILE}: meta.json does not record world {world_index}")
    rec = recs[world_index]
    if isinstance(rec.get("path"), str):
        item = WorldItem(path=Path(rec["path"]), origin=rec["path"])
    elif isinstance(rec.get("family"), str) and isinstance(rec.get("seed"), int):
        item = WorldItem(family=rec["family"], seed=rec["seed"], origin=f"{rec['family']}:{rec['seed']}")
    else:
        raise RunError(f"{EPISODES_FILE}: meta.json world {world_index} is damaged")
    return load_worlds([item], resolution)[0]


RENAMED_RESULTS = {
    "spl": "spl_mean",
    "spl_ci95": "spl_mean_ci95",
    "final_distance": "final_distance_mean",
    "final_distance_ci95": "final_distance_mean_ci95",
}
"""The figures of an evaluation's groups under the names ``eval.json`` files of earlier versions give them."""


def current_names(res: dict) -> dict:
    """An evaluation's results (``eval.json``, any version) with every group's figures under today's names
    (``RENAMED_RESULTS``): the whole evaluation, each split, family and difficulty bin; ``per_episode`` keeps
    the episode record's names. Results already in today's names come back equal."""

    def group(g):
        return {RENAMED_RESULTS.get(k, k): v for k, v in g.items()} if isinstance(g, dict) else g

    out = group(res)
    for key in ("splits", "families"):
        if isinstance(out.get(key), dict):
            out[key] = {name: group(g) for name, g in out[key].items()}
    if isinstance(out.get("difficulty"), dict):
        out["difficulty"] = {
            k: {name: group(g) for name, g in bins.items()} if isinstance(bins, dict) else bins
            for k, bins in out["difficulty"].items()
        }
    return out


def results_json(res) -> str:
    return json.dumps(res, indent=1, default=str)
