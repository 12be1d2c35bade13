"""`navi-nb bench sb3`: navi_nb's trainer against Stable-Baselines3's PPO on the same environment.

Both learners get the same setting: the scene, actors, sensor, rollout length
and every PPO hyper-parameter of ``TrainConfig``'s defaults
(``navi_nb.env.sb3_adapter.ppo_kwargs`` maps them onto SB3's PPO:
``MlpPolicy``, separate actor and critic trunks, the same minibatches,
epochs, clips and annealed learning rate). SB3 steps the very same NavEnv
through ``NaviSB3VecEnv`` with the same actor blocks and seeds, so the two
differ only in the learner: SB3's PyTorch policy, rollout buffer and update
against navi_nb's Numba kernels.

Two measurements:

- throughput: training actor-steps per second, collection and updates
  together, over ``--updates`` timed updates after one warm-up update;
- learning: each side trains for the same actor-steps (``--steps``, rounded
  up to whole updates) at each seed of ``--seeds``, then runs the
  evaluation ``navi-nb eval`` runs (``navi_nb.train.evaluate.evaluate_policy``:
  ``--episodes`` episodes at the training seed + 1,000,003, mean actions).
  Success rate and SPL pool every seed's episodes, with 95 % intervals
  (Wilson, bootstrap).

SB3 runs in a child process (``navi_nb.bench.peers``: PyTorch's thread pools
stay out of this one). Threads: navi_nb's trainer runs ``--threads`` learner
shards; in the child the adapter steps NavEnv with the same count and PyTorch
uses it too (the two take turns inside a step, environment then policy).
"""

from __future__ import annotations

import time

MISSING = 'bench sb3: stable-baselines3 is not installed; install the sb3 extra: pip install -e ".[sb3]"'


def add_arguments(parser) -> None:
    from navi_nb.commands.flags import add_scenes, add_sensor

    add_scenes(parser, "house", "the worlds, a scene spec (default house)")
    parser.add_argument("--resolution", type=int, default=128, help="scene resolution (default 128)")
    parser.add_argument("--actors", type=int, default=16, help="actors (default 16)")
    add_sensor(parser, 32, 8)
    parser.add_argument("--rollout-steps", type=int, default=32, help="steps per actor per update (default 32)")
    parser.add_argument("--updates", type=int, default=4, help="timed updates for the throughput (default 4)")
    parser.add_argument(
        "--steps", type=int, default=16384, help="actor-steps each side trains per seed (default 16384; 0: skip)"
    )
    parser.add_argument("--seeds", default="0,1", help="training seeds, comma-separated (default 0,1)")
    parser.add_argument("--episodes", type=int, default=32, help="evaluation episodes per seed (default 32)")
    parser.add_argument("--threads", type=int, default=0, help="threads for each side (default 0: allowed cores)")


def config(settings: dict):
    """The TrainConfig both sides use: the defaults with ``settings`` over them."""
    from navi_nb.train.config import TrainConfig

    return TrainConfig(**{"eval_episodes": 0, **settings}).validate("bench sb3")


def _world_set(cfg):
    from navi_nb.train.runs import load_scene_set, resolve_scenes

    return load_scene_set(resolve_scenes(cfg.scenes, cfg), cfg.resolution)


def _pooled(runs):
    """summarize() over every seed's episodes, plus each seed's success rate and the training wall time."""
    import numpy as np

    from navi_nb.train.evaluate import summarize

    ep = {
        k: np.concatenate([np.asarray(r["per_episode"][k], np.float64) for r in runs]) for k in runs[0]["per_episode"]
    }
    out = summarize(ep)
    out["per_seed"] = [r["success_rate"] for r in runs]
    out["wall_s"] = sum(r["wall_s"] for r in runs)
    return out


def _episodes_json(res):
    """``evaluate_policy``'s per-episode arrays as lists (the child answers in JSON)."""
    return {k: v.tolist() for k, v in res["per_episode"].items()}


# --- the SB3 side (runs in the child process) ------------------------------------------------------


def _sb3_model(cfg, world_set, threads, seed):
    import torch
    from stable_baselines3 import PPO

    from navi_nb.env.sb3_adapter import NaviSB3VecEnv, ppo_kwargs
    from navi_nb.train.runs import make_env

    torch.set_num_threads(threads)
    venv = NaviSB3VecEnv(env=make_env(world_set, cfg, seed=seed), threads=threads)
    return PPO("MlpPolicy", venv, seed=seed, device="cpu", verbose=0, **ppo_kwargs(cfg))


def sb3_throughput(settings, updates, threads):
    """SB3 PPO's training actor-steps per second (one warm-up update, then ``updates`` timed)."""
    cfg = config(settings)
    model = _sb3_model(cfg, _world_set(cfg), threads, cfg.seed)
    model.learn(cfg.batch_size)
    t0, c0 = time.perf_counter(), time.process_time()
    model.learn(updates * cfg.batch_size)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    import torch

    steps = updates * cfg.batch_size
    return {
        "actor_steps_per_s": steps / wall,
        "actor_steps_per_cpu_s": steps / cpu,
        "wall_s": wall,
        "cpu_s": cpu,
        "torch": torch.__version__,
    }


def sb3_learning(settings, seeds, episodes, threads):
    """For each seed: SB3 PPO trained for ``settings['total_steps']`` actor-steps, then evaluated."""
    from navi_nb.train.evaluate import evaluate_policy

    cfg = config(settings)
    world_set = _world_set(cfg)
    runs = []
    for seed in seeds:
        cfg_s = config({**settings, "seed": seed})
        model = _sb3_model(cfg_s, world_set, threads, seed)
        t0 = time.perf_counter()
        model.learn(cfg_s.num_updates * cfg_s.batch_size)
        wall = time.perf_counter() - t0
        res = evaluate_policy(lambda obs, m=model: m.predict(obs, deterministic=True)[0], world_set, cfg_s, episodes)
        runs.append({"success_rate": res["success_rate"], "wall_s": wall, "per_episode": _episodes_json(res)})
    return runs


# --- the navi_nb side ------------------------------------------------------------------------------


def navi_learning(settings, seeds, episodes, threads):
    """For each seed: navi_nb's trainer for ``settings['total_steps']`` actor-steps, then evaluated."""
    import numba

    from navi_nb.train.evaluate import evaluate_policy, mean_action
    from navi_nb.train.loop import Trainer

    world_set = _world_set(config(settings))
    numba.set_num_threads(threads)
    runs = []
    for seed in seeds:
        cfg = config({**settings, "seed": seed, "shards": threads})
        tr = Trainer(cfg, run_path="/nonexistent", world_set=world_set).start()
        t0 = time.perf_counter()
        for _ in range(cfg.num_updates):
            tr.train_one_update()
        wall = time.perf_counter() - t0
        res = evaluate_policy(mean_action(tr.policy), world_set, cfg, episodes)
        runs.append({"success_rate": res["success_rate"], "wall_s": wall, "per_episode": _episodes_json(res)})
    return runs


# --- tables -------------------------------------------------------------------------------------------


def tables(result, args):
    """The setting line, the throughput and the learning tables, laid out for 80 columns."""
    from rich.table import Table

    out = [
        f"setting: {args.scenes} at {args.resolution}, {args.actors} actors, {args.sensor_az}x{args.sensor_el} rays, "
        f"{args.rollout_steps} steps per actor per update, TrainConfig's PPO defaults; "
        f"{result['threads']} navi_nb threads, {result['torch_threads']} torch threads"
    ]
    tp = result.get("throughput")
    if tp:
        t = Table(
            title="bench sb3: training actor-steps/s (collection and updates)",
            caption="(per CPU-s: per CPU-second of the process, the rate least moved by other load)",
            caption_justify="left",
        )
        for c in ("learner", "actor-steps/s", "vs SB3", "per CPU-s", "vs SB3", "timed s"):
            t.add_column(c, justify="right", no_wrap=True)
        sb3 = tp["sb3"]
        for who, name in (("navi_nb", "navi_nb"), ("sb3", "SB3 PPO")):
            r = tp[who]
            t.add_row(
                name,
                f"{r['actor_steps_per_s']:,.0f}",
                f"{r['actor_steps_per_s'] / sb3['actor_steps_per_s']:.2f}x",
                f"{r['actor_steps_per_cpu_s']:,.0f}",
                f"{r['actor_steps_per_cpu_s'] / sb3['actor_steps_per_cpu_s']:.2f}x",
                f"{r['wall_s']:.1f}",
            )
        out.append(t)
    ln = result.get("learning")
    if ln:
        t = Table(
            title=f"bench sb3: {ln['steps']:,} actor-steps per seed, seeds {','.join(map(str, ln['seeds']))}, "
            f"{ln['episodes']} eval episodes each",
            caption="(95% intervals over every seed's episodes; train s: training wall time, all seeds)",
            caption_justify="left",
        )
        for c in ("learner", "success", "SPL", "success per seed", "train s"):
            t.add_column(c, justify="right")
        for who, name in (("navi_nb", "navi_nb"), ("sb3", "SB3 PPO")):
            g = ln[who]
            (slo, shi), (plo, phi) = g["success_rate_ci95"], g["spl_mean_ci95"]
            t.add_row(
                name,
                f"{g['success_rate']:.1%} ({slo:.0%}-{shi:.0%})",
                f"{g['spl_mean']:.2f} ({plo:.2f}-{phi:.2f})",
                " ".join(f"{s:.0%}" for s in g["per_seed"]),
                f"{g['wall_s']:,.0f}",
            )
        out.append(t)
    return out


def run(args) -> dict:
    from rich.console import Console

    from navi_nb.bench import peers
    from navi_nb.bench.machine import print_machine

    console = Console()
    if not peers.peer_available("stable_baselines3"):
        print(MISSING)
        return {"error": MISSING}
    if not hasattr(args, "bench_name"):  # called directly, not through `navi-nb bench`
        print_machine(console)
    from navi_nb.bench.train import measure
    from navi_nb.errors import NaviError
    from navi_nb.threads import check_threads, thread_limit

    threads = check_threads(args.threads, "--threads") if args.threads else thread_limit()
    try:
        seeds = [int(s) for s in str(args.seeds).split(",") if s.strip()]
    except ValueError:
        seeds = []
    for name, v, lo in (("--updates", args.updates, 1), ("--steps", args.steps, 0), ("--episodes", args.episodes, 1)):
        if v < lo:
            raise NaviError(f"{name} must be >= {lo}, got {v}")
    if not seeds or min(seeds) < 0:
        raise NaviError(f"--seeds must list non-negative integers, got {args.seeds!r}")
    settings = {
        "scenes": args.scenes,
        "resolution": args.resolution,
        "actors": args.actors,
        "sensor_az": args.sensor_az,
        "sensor_el": args.sensor_el,
        "rollout_steps": args.rollout_steps,
        "total_steps": max(1, args.steps),
    }
    cfg = config(settings)  # every setting checked before anything runs
    result = {"setting": settings, "threads": threads, "torch_threads": threads}

    navi = measure(config({**settings, "shards": threads}), [threads], args.updates, console)[0]
    sb3 = peers.call_in_child(
        "navi_nb.bench.sb3.sb3_throughput", timeout=3600.0, settings=settings, updates=args.updates, threads=threads
    )
    result["throughput"] = {
        "navi_nb": {
            "actor_steps_per_s": navi["actor_steps_per_s"],
            "actor_steps_per_cpu_s": navi["actor_steps"] / navi["cpu_s"],
            "wall_s": navi["wall_s"],
            "cpu_s": navi["cpu_s"],
        },
        "sb3": sb3,
        "ratio": navi["actor_steps_per_s"] / sb3["actor_steps_per_s"],
        "ratio_per_cpu_s": navi["actor_steps"] / navi["cpu_s"] / sb3["actor_steps_per_cpu_s"],
    }
    if args.steps:
        navi_runs = navi_learning(settings, seeds, args.episodes, threads)
        sb3_runs = peers.call_in_child(
            "navi_nb.bench.sb3.sb3_learning",
            timeout=24 * 3600.0,
            settings=settings,
            seeds=seeds,
            episodes=args.episodes,
            threads=threads,
        )
        result["learning"] = {
            "steps": cfg.num_updates * cfg.batch_size,
            "seeds": seeds,
            "episodes": args.episodes,
            "navi_nb": _pooled(navi_runs),
            "sb3": _pooled(sb3_runs),
        }
    for t in tables(result, args):
        console.print(t)
    tp = result["throughput"]
    result["summary"] = [
        ["navi_nb training actor-steps/s", f"{tp['navi_nb']['actor_steps_per_s']:,.0f}"],
        ["SB3 PPO training actor-steps/s", f"{tp['sb3']['actor_steps_per_s']:,.0f}"],
        ["navi_nb / SB3", f"{tp['ratio']:.2f}x"],
        ["navi_nb / SB3 per CPU-second", f"{tp['ratio_per_cpu_s']:.2f}x"],
    ]
    if "learning" in result:
        for who in ("navi_nb", "sb3"):
            result["summary"].append(
                [
                    f"{who} success at {result['learning']['steps']:,} steps",
                    f"{result['learning'][who]['success_rate']:.1%}",
                ]
            )
    return result
