"""Deterministic evaluation of a trained run.

``evaluate(run, episodes=N)`` runs N actors side by side, one episode each,
with the policy's mean action (no sampling noise), on seeds the training never
used (``eval_seed``, by default the training seed + 1,000,003). Each actor's
first finished episode is its episode; the autoreset episodes that follow are
ignored. Results: success rate, SPL, return, length, collisions (means and
per-episode values), written to ``RUN/eval.json``; the trajectories (position
and yaw before every step, the goal, the outcome) to ``RUN/eval_episodes.npz``
for ``navi-nb render RUN --episode K``.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

import navi_nb
from navi_nb.train import checkpoint as ck
from navi_nb.train.runs import (CONFIG_FILE, POLICY_FILE, WORLD_FILE, RunError, check_memory,  # noqa: F401
                                make_env, make_policy, os_error, read_run_config, write_json_atomic)

EVAL_FILE = "eval.json"
EPISODES_FILE = "eval_episodes.npz"
SEED_OFFSET = 1_000_003


def load_run_policy(run_path, cfg, obs_dim, act_dim=4, source="auto"):
    """The run's policy: ``policy.npz`` (final) or, failing that / when asked, the newest checkpoint."""
    run_path = Path(run_path)
    policy = make_policy(cfg, obs_dim, act_dim)
    final = run_path / POLICY_FILE
    spec = {"policy.params": (policy.params.shape, policy.params.dtype)}
    if source in ("auto", "final") and final.is_file():
        arrays, meta = ck.load_checkpoint(final, spec, expect_hash=cfg.hash())
        bad = ~np.isfinite(arrays["policy.params"])
        if bad.any():
            raise ck.CheckpointError(final, f"member 'policy.params' holds {int(bad.sum())} non-finite weight(s) "
                                            f"(first at index {int(np.flatnonzero(bad)[0])})")
        policy.set_params(arrays["policy.params"])
        return policy, {"source": str(final), "update": meta.get("update")}
    if source == "final":
        raise RunError(f"run {run_path} has no final policy ({POLICY_FILE}); it may still be training")
    from navi_nb.train.loop import CHECKPOINT_DIR, Trainer
    from navi_nb.world.gmdag import load_world

    latest = ck.latest_checkpoint(run_path / CHECKPOINT_DIR)
    if latest is None:
        raise RunError(f"run {run_path} has neither {POLICY_FILE} nor a checkpoint to evaluate")
    trainer = Trainer(cfg, run_path, load_world(run_path / WORLD_FILE))
    trainer.env.reset(seed=cfg.seed)
    trainer.load_checkpoint(latest)
    return trainer.policy, {"source": str(latest), "update": trainer.update}


def run_episodes(env, policy, max_ticks):
    """One episode per actor with mean actions. Returns per-episode arrays + trajectories."""
    A = env.n_actors
    obs, _ = env.reset()
    pos_log = [env.positions.copy()]
    yaw_log = [env.yaws.copy()]
    goals = env.goals.copy()
    finished = np.zeros(A, bool)
    out = {k: np.zeros(A, np.float64) for k in ("return", "length", "success", "spl", "collisions")}
    final_pos = np.zeros((A, 3), np.float32)
    rng = np.random.default_rng(0)  # unused by deterministic acting; act() wants one
    for _ in range(max_ticks):
        actions = policy.act(obs, rng, deterministic=True)[0]
        obs, _r, _te, _tr, info = env.step(actions)
        done = info["done"] & ~finished
        keep = ~finished & ~info["done"]
        pos_now = env.positions.copy()
        if done.any():
            ep = info["episode"]
            for k in out:
                out[k][done] = np.asarray(ep[k])[done]
            fp = info.get("final_pos")
            final_pos[done] = (np.asarray(fp)[done] if fp is not None else pos_log[-1][done])
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
    return out, {"positions": np.stack(pos_log).astype(np.float32), "yaws": np.stack(yaw_log).astype(np.float32),
                 "goals": goals.astype(np.float32)}


def evaluate(run_path, episodes=100, seed=None, source="auto", save=True, console=None):
    """Evaluate ``run_path``; returns the results dict (also saved into the run folder)."""
    from navi_nb.world.gmdag import load_world

    run_path = Path(run_path)
    cfg = read_run_config(run_path)
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise RunError(f"episodes must be a positive integer, got {episodes!r}")
    eval_seed = cfg.seed + SEED_OFFSET if seed is None else int(seed)
    check_memory(f"evaluating {episodes} episodes", episodes_memory_estimate(cfg, episodes))
    world = load_world(run_path / WORLD_FILE)
    env = make_env(world, cfg, n_actors=episodes, seed=eval_seed)
    policy, origin = load_run_policy(run_path, cfg, env.obs_dim, env.action_dim, source)
    t0 = time.perf_counter()
    ep, traj = run_episodes(env, policy, env.config.max_steps + 1)
    wall = time.perf_counter() - t0
    n = episodes
    res = {
        "run": str(run_path), "policy": origin, "episodes": n, "seed": eval_seed, "task": cfg.task,
        "scene": cfg.scene, "deterministic": True, "wall_s": wall, "navi_nb_version": navi_nb.__version__,
        "success_rate": float(ep["success"].mean()), "spl": float(ep["spl"].mean()),
        "return_mean": float(ep["return"].mean()), "return_std": float(ep["return"].std()),
        "length_mean": float(ep["length"].mean()), "collisions_mean": float(ep["collisions"].mean()),
        "per_episode": {k: v.tolist() for k, v in ep.items()},
    }
    # a 95% interval for the success rate (Wilson), so "70%" can be read with its noise
    p, z = res["success_rate"], 1.96
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    res["success_rate_ci95"] = [float(mid - half), float(mid + half)]
    if save:
        try:
            save_results(run_path, res, ep, traj, cfg, eval_seed)
        except OSError as exc:
            raise os_error(exc, f"cannot write the evaluation into {run_path}") from None
    return res


def save_results(run_path, res, ep, traj, cfg, eval_seed):
    """``eval.json`` and ``eval_episodes.npz`` (the trajectories ``navi-nb render RUN --episode K`` draws)."""
    write_json_atomic(run_path / EVAL_FILE, res)
    ck.save_checkpoint(run_path / EPISODES_FILE, {
        "positions": traj["positions"], "yaws": traj["yaws"], "goals": traj["goals"],
        "length": ep["length"].astype(np.int32), "success": ep["success"].astype(np.bool_),
        "return": ep["return"].astype(np.float32), "spl": ep["spl"].astype(np.float32),
        "collisions": ep["collisions"].astype(np.int32)},
        {"kind": "eval_episodes", "episodes": res["episodes"], "steps": int(traj["positions"].shape[0]),
         "config_hash": cfg.hash(), "seed": eval_seed})


def episodes_memory_estimate(cfg, episodes: int) -> int:
    """A lower bound on the bytes evaluating ``episodes`` side by side holds: one environment actor per
    episode, the policy's hidden activations (actor and critic trunks), and its logged poses (position
    and yaw, 16 bytes a step: the list of steps, the stacked array and its float32 copy)."""
    from navi_nb.env.config import EnvConfig
    from navi_nb.train.config import actor_bytes

    max_steps = EnvConfig.from_kwargs(**cfg.env).max_steps
    per_episode = (actor_bytes(cfg.obs_dim(), cfg.sensor_az * cfg.sensor_el) + 8 * sum(cfg.hidden)
                   + 3 * 16 * (max_steps + 2))
    return episodes * per_episode


def episodes_spec(n_episodes, n_steps):
    """What ``eval_episodes.npz`` must hold for ``n_episodes`` and ``n_steps`` logged positions."""
    return {"positions": ((n_steps, n_episodes, 3), np.float32), "yaws": ((n_steps, n_episodes), np.float32),
            "goals": ((n_episodes, 3), np.float32), "length": ((n_episodes,), np.int32),
            "success": ((n_episodes,), np.bool_), "return": ((n_episodes,), np.float32),
            "spl": ((n_episodes,), np.float32), "collisions": ((n_episodes,), np.int32)}


def load_episodes(run_path, world=None):
    """The saved trajectories of the last evaluation (checked like any checkpoint).

    Beyond the checkpoint reader's checks (members, shapes, sizes, CRCs), the
    values are checked: finite, lengths within the logged steps, counters not
    negative, SPL in [0, 1], and, when ``world`` is given, every position and
    goal inside the world's cube.
    """
    path = Path(run_path) / EPISODES_FILE
    c = ck.open_checkpoint(path)
    n, steps = c.meta.get("episodes"), c.meta.get("steps")
    if not (isinstance(n, int) and isinstance(steps, int) and not isinstance(n, bool)
            and not isinstance(steps, bool) and 0 < n <= 1_000_000 and 0 < steps <= 1_000_000):
        raise ck.CheckpointError(path, "meta.json has no valid episode/step counts")
    eps = c.read_arrays(episodes_spec(n, steps))
    check_episodes(path, eps, world)
    return eps, c.meta


def check_episodes(path, eps, world=None):
    """Raise CheckpointError unless the loaded episode arrays hold possible values."""
    steps = eps["positions"].shape[0]
    for name in ("positions", "yaws", "goals", "return", "spl"):
        bad = ~np.isfinite(eps[name])
        if bad.any():
            raise ck.CheckpointError(path, f"member {name!r} holds {int(bad.sum())} non-finite value(s)")
    if eps["success"].view(np.uint8).max(initial=0) > 1:
        raise ck.CheckpointError(path, "member 'success' holds bytes other than 0 and 1")
    length = eps["length"]
    if length.size and (length.min() < 0 or length.max() > steps - 1):
        raise ck.CheckpointError(path, f"member 'length' holds {int(length.min())}..{int(length.max())}, "
                                       f"outside 0..{steps - 1} (the logged steps)")
    if eps["collisions"].size and eps["collisions"].min() < 0:
        raise ck.CheckpointError(path, "member 'collisions' holds negative counts")
    if eps["spl"].size and (eps["spl"].min() < 0 or eps["spl"].max() > 1):
        raise ck.CheckpointError(path, "member 'spl' holds values outside [0, 1]")
    if np.abs(eps["yaws"]).max(initial=0) > 4.0:  # yaws are kept in [-pi, pi)
        raise ck.CheckpointError(path, "member 'yaws' holds angles outside [-pi, pi]")
    if world is not None:
        lo = np.asarray(world.bmin, np.float64) - 1e-3 * float(world.voxel_size)
        hi = np.asarray(world.bmax, np.float64) + 1e-3 * float(world.voxel_size)
        for name in ("positions", "goals"):
            xyz = eps[name].reshape(-1, 3)
            if xyz.size and (np.any(xyz.min(axis=0) < lo) or np.any(xyz.max(axis=0) > hi)):
                raise ck.CheckpointError(path, f"member {name!r} holds points outside the world's cube "
                                               f"{lo.round(3).tolist()}..{hi.round(3).tolist()}")


def print_results(console, res):
    from rich.table import Table

    t = Table(title=f"evaluation: {res['episodes']} episodes, {res['task']} in {res['scene']} "
                    f"(mean action, seed {res['seed']})")
    t.add_column("metric")
    t.add_column("value")
    lo, hi = res["success_rate_ci95"]
    t.add_row("success rate", f"{res['success_rate']:.1%}  (95% CI {lo:.0%}-{hi:.0%})")
    t.add_row("SPL", f"{res['spl']:.3f}")
    t.add_row("return", f"{res['return_mean']:.3f} +- {res['return_std']:.3f}")
    t.add_row("length (steps)", f"{res['length_mean']:.1f}")
    t.add_row("collisions per episode", f"{res['collisions_mean']:.2f}")
    t.add_row("policy", f"{res['policy']['source']} (update {res['policy']['update']})")
    t.add_row("wall time", f"{res['wall_s']:.1f} s")
    console.print(t)


def results_json(res) -> str:
    return json.dumps(res, indent=1, default=str)
