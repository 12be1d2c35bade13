"""`navi-nb bench train`: end-to-end training actor-steps per second, with the time split.

Runs the real trainer loop (``Trainer.train_one_update``: collection and PPO
learning together) on the default setting (point-goal in ``house``, 64 actors,
64 x 16 rays, the default network and PPO settings) at each shard count, at
steady state: after warm-up updates until every actor has finished an episode
(``--warmup``, at most ``MAX_WARMUP_UPDATES``), so the timed updates see what a
run sees (episodes ending, worlds switching, spawns, goals and shortest paths
drawn, the geodesic fields of new episodes), and splits the time between

- tracing: the batched sphere tracing inside ``NavEnv.step`` / reset,
- environment: the rest of ``NavEnv.step`` (kinematics, collision, rewards, resets, observations),
- map: with the episodic map on (``--env map_cell=X``, or a ``--from-run`` run's), its update and crop
  (``NavEnv.map_seconds``; a column of its own only then),
- policy: the batched policy forward for acting (and the critic's values of final observations),
- PPO: GAE and the epochs of minibatches,

read from the trainer's timing hook (``Trainer.times``, a
``navi_nb.learn.collect.PhaseTimes``) and the environment's tracing clock.
Nothing is written to disk: a real run also writes its metrics every update
and a checkpoint every ``checkpoint_every`` updates, and re-checks its shard
count (PERFORMANCE compares the two).

``--env KEY=VALUE`` (repeatable) sets the environment as ``navi-nb train --env`` does; the settings are in the
table's title and the JSON's ``setting``.

``--ranks 1,2`` adds rank counts: each count above 1 runs the same measurement
under ``mpiexec -n R`` (the one next to this Python, else on the PATH; the
``mpi`` extra), side by side with the one-process rows, at the shard counts
given (threads per rank). Run under ``mpiexec`` itself, the command measures
that rank count only. Rows then also show the bytes each rank sent per update
and the share of time spent exchanging (waiting included), and each rank's
resident and proportional set sizes.
"""

from __future__ import annotations

import time

MAX_WARMUP_UPDATES = 64
"""The most warm-up updates ``--warmup auto`` runs before timing (a setting whose episodes outlast them is timed
then, with the count of actors that had not finished one reported)."""


UPDATES = 3
"""The timed updates per shard count of a new run's measurement."""

FROM_RUN_UPDATES = 48
"""The timed updates per shard count with ``--from-run``: a late run's update takes a few tenths of a second, and
on a shared machine a window of about one second measured the moment more than the code (PERFORMANCE)."""


RUN_SETTINGS = {
    "scenes": "house",
    "actors": 64,
    "sensor_az": 64,
    "sensor_el": 16,
    "resolution": 128,
    "ranks": "1",
    "memory_size": "0",
    "map_input": "all",
    "env": None,
}
"""The defaults of the flags that set what is trained: ``--from-run`` takes them from the run instead."""


def add_arguments(parser) -> None:
    from navi_nb.commands.flags import add_env, add_scenes, add_sensor, shard_counts

    d = RUN_SETTINGS
    add_scenes(parser, d["scenes"], f"the worlds, a scene spec (default {d['scenes']})")
    parser.add_argument("--actors", type=int, default=d["actors"], help=f"actors (default {d['actors']})")
    add_sensor(parser, d["sensor_az"], d["sensor_el"])
    parser.add_argument(
        "--updates",
        type=int,
        default=None,
        help=f"timed updates per shard count (default {UPDATES}; {FROM_RUN_UPDATES} with --from-run)",
    )
    parser.add_argument(
        "--warmup",
        default="auto",
        help="warm-up updates before timing: a count, or auto (default): until every actor has finished an "
        f"episode, at most {MAX_WARMUP_UPDATES}",
    )
    parser.add_argument("--shards", type=shard_counts, default="1,2", help="shard counts to run (default 1,2)")
    parser.add_argument(
        "--resolution", type=int, default=d["resolution"], help=f"scene resolution (default {d['resolution']})"
    )
    parser.add_argument(
        "--ranks", default=d["ranks"], help=f"MPI rank counts to run (default {d['ranks']}; >1 needs mpiexec)"
    )
    parser.add_argument(
        "--from-run",
        metavar="RUN",
        help="time the run folder RUN's own updates from its newest checkpoint (its settings, worlds, policy "
        "and episodes: late in training, where a trained policy's short episodes reset actors every few "
        "ticks), each shard count from the same state, one process; nothing in RUN is written. The run's own "
        "settings take the place of --scenes, --actors, --memory-size, --map-input, --sensor-az, --sensor-el, "
        "--resolution, --env and --ranks",
    )
    parser.add_argument(
        "--memory-size",
        default=d["memory_size"],
        metavar="SIZES",
        help="policy GRU memory sizes to run side by side (default 0: the MLP alone; 0,64: the MLP and a "
        "64-unit GRU, with the ratio)",
    )
    parser.add_argument(
        "--map-input",
        choices=("all", "memory"),
        default=d["map_input"],
        help="what reads the episodic map's crop in the runs with a memory, as train's --map-input (default all)",
    )
    add_env(parser, "an environment setting of the timed runs, as train's --env (repeatable)")


def warm_up(tr, warmup, ranks=None) -> int:
    """Run ``tr``'s warm-up updates (``warmup``: a count, or ``"auto"``: until every actor of every rank has
    finished an episode, at most ``MAX_WARMUP_UPDATES``); returns how many ran. The first compiles or loads
    every kernel."""
    done = 0
    while True:
        if warmup != "auto":
            if done >= int(warmup):
                return done
        elif done >= 1:
            fresh = int(tr.env.episodes_finished.min() < 1)
            if ranks is not None:
                fresh = ranks.comm.allreduce(fresh)  # every rank runs the same number of updates
            if not fresh or done >= MAX_WARMUP_UPDATES:
                return done
        tr.train_one_update()
        done += 1


def measure(cfg, shard_counts, updates, console=None, warmup="auto", from_run=None):
    """The rows of ``cfg`` at each shard count: a new run's trainer warmed up (``warm_up``), or with
    ``from_run`` the trainer of that run folder's newest checkpoint (``Trainer.from_checkpoint``), afresh
    for each count."""
    import numba

    from navi_nb.parallel.ranks import ram_sizes, rank_context
    from navi_nb.train.loop import Trainer
    from navi_nb.train.runs import load_scene_set, resolve_scenes

    ranks = None
    if from_run is None:
        ranks = rank_context(cfg.actors, cfg.actor_block)  # under mpiexec: this rank's blocks
        world_set = load_scene_set(resolve_scenes(cfg.scenes, cfg), cfg.resolution, console is not None)
    out = []
    for shards in shard_counts:
        numba.set_num_threads(min(int(shards), numba.config.NUMBA_NUM_THREADS))
        if from_run is None:
            tr = Trainer(cfg, run_path="/nonexistent", world_set=world_set, ranks=ranks).start()
        else:
            tr = Trainer.from_checkpoint(from_run)
            tr.warmup.wait()
        warm = warm_up(tr, warmup, ranks)
        episodes0 = int(tr.env.episodes_finished.sum())
        unfinished = int((tr.env.episodes_finished < 1).sum())
        before = tr.times.copy()
        trace0, field0, map0 = tr.env.trace_seconds, tr.env.field_seconds, tr.env.map_seconds
        ex = tr.ppo.exchange
        sent0, comm0 = (ex.bytes_sent, ex.seconds) if ex is not None else (0, 0.0)
        if ranks is not None:
            ranks.comm.Barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(updates):
            tr.train_one_update()
        if ranks is not None:
            ranks.comm.Barrier()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        spent = {k: v - before[k] for k, v in tr.times.copy().items()}
        tracing = tr.env.trace_seconds - trace0
        fields = tr.env.field_seconds - field0
        mapping = tr.env.map_seconds - map0
        steps = updates * cfg.batch_size
        other = wall - spent["env"] - spent["policy"] - spent["ppo"]
        out.append(
            {
                "shards": int(shards),
                "memory_size": cfg.memory_size,
                "actor_steps_per_s": steps / wall,
                "wall_s": wall,
                "cpu_s": cpu,
                "actor_steps": steps,
                "warmup_updates": warm,
                "actors_without_an_episode": unfinished,
                "episodes": int(tr.env.episodes_finished.sum()) - episodes0,
                "split_s": {
                    "tracing": tracing,
                    "fields": fields,
                    "map": mapping,
                    "environment": spent["env"] - tracing - fields - mapping,
                    "policy": spent["policy"],
                    "ppo": spent["ppo"],
                    "other": other,
                },
                "ranks": 1 if ranks is None else ranks.size,
                "bytes_sent_per_update": 0 if ex is None else (ex.bytes_sent - sent0) / updates,
                "exchange_share": 0.0 if ex is None else (ex.seconds - comm0) / wall,
                "ram": [ram_sizes()] if ranks is None else ranks.comm.gather(ram_sizes(), root=0),
            }
        )
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    return out


PHASES = {"trace": ("tracing",), "env": ("environment", "fields"), "policy": ("policy",), "PPO": ("ppo",)}
"""The table's phases and the ``split_s`` parts each adds up."""


def fewest_and_most_shards(rows):
    """(the row with the fewest shards, the row with the most) among one process's rows, or None when they
    ran one shard count."""
    ones = [r for r in rows if r.get("ranks", 1) == 1]
    if len({r["shards"] for r in ones}) < 2:
        return None
    return min(ones, key=lambda r: r["shards"]), max(ones, key=lambda r: r["shards"])


def phase_speedups(rows) -> dict:
    """Per phase, the speed-up from the fewest to the most shards of one rank count: its seconds per actor-step
    at the fewest over those at the most (what the extra threads bought that phase); {} with one count."""
    pair = fewest_and_most_shards(rows)
    if pair is None:
        return {}
    lo, hi = pair

    def per_step(r, parts):
        steps = r.get("actor_steps") or r["actor_steps_per_s"] * r["wall_s"]  # rows of older runs lack the count
        return sum(r["split_s"].get(k, 0.0) for k in parts) / steps

    out = {"shards": [lo["shards"], hi["shards"]]}
    for name, parts in PHASES.items():
        t_lo, t_hi = per_step(lo, parts), per_step(hi, parts)
        out[name] = t_lo / t_hi if t_hi > 0 else float("nan")
    return out


def serial_share(rows):
    """The share of the most shards' wall time in which one thread works alone, by Amdahl's law from the
    fewest and the most shards of one rank count (None with one count): with ``n`` times the threads and a
    speed-up ``s``, a serial share ``p`` of the most shards' wall gives ``s = p n + (1 - p)``, so ``p = 1 -
    (s - 1) / (n - 1)``, clamped to [0, 1] (0 when faster than linear, 1 when more threads were slower).
    An estimate: work that waits on a shared core (another process) counts as serial."""
    pair = fewest_and_most_shards(rows)
    if pair is None:
        return None
    lo, hi = pair
    n = hi["shards"] / lo["shards"]
    speedup = hi["actor_steps_per_s"] / lo["actor_steps_per_s"]
    return min(max(1.0 - (speedup - 1.0) / (n - 1.0), 0.0), 1.0)


def cpu_serial_share(row):
    """The share of ``row``'s wall time in which one thread works alone, from the process's CPU time
    instead of a second row: with ``n`` threads working all the time but a share ``p`` of it, when one
    works, the CPU-seconds are ``wall (p + (1 - p) n)``, so ``p = (n - cpu / wall) / (n - 1)``, clamped to
    [0, 1]. None for one shard, and for a row of several ranks (its CPU time is one rank's). Beside the
    Amdahl estimate (:func:`serial_share`) it tells a tick that leaves a core idle (both high) from
    threads that are busy but slower together than apart (a low share here, a high one there). Time in
    which no thread works counts twice; a thread that spins while it waits counts as working."""
    n = row["shards"]
    if n < 2 or row.get("ranks", 1) != 1 or "cpu_s" not in row or row["wall_s"] <= 0:  # (older JSON: no CPU time)
        return None
    return min(max((n - row["cpu_s"] / row["wall_s"]) / (n - 1), 0.0), 1.0)


def memory_ratios(rows):
    """{(first size, size, "R rank(s) x S shard(s)"): actor-steps/s of the rows with that memory size over the
    first size's row at the same placement}: the cost of a GRU memory, side by side."""
    first = rows[0].get("memory_size", 0) if rows else 0
    base = {(r.get("ranks", 1), r["shards"]): r for r in rows if r.get("memory_size", 0) == first}
    out = {}
    for r in rows:
        key = (r.get("ranks", 1), r["shards"])
        if r.get("memory_size", 0) != first and key in base:
            place = f"{key[0]} rank(s) x {key[1]} shard(s)"
            out[(first, r["memory_size"], place)] = r["actor_steps_per_s"] / base[key]["actor_steps_per_s"]
    return out


def split_table(cfg, rows):
    """The rates and the time split at 80 columns (the split in percent of the wall time)."""
    from rich.table import Table

    t = Table(
        title=f"bench train: {cfg.scenes}, {cfg.actors} actors, {cfg.sensor_az}x{cfg.sensor_el} rays, "
        f"hidden {cfg.hidden}, {cfg.rollout_steps} steps x {cfg.update_epochs} epochs x "
        f"{cfg.num_minibatches} minibatches"
        + "".join(f", {k}={v}" for k, v in sorted(cfg.env.items()))
        + (f", map_input={cfg.map_input}" if cfg.map_input != "all" else "")
        + "; steps/s: actor-steps per second; time split in % of wall"
    )
    ranks = any(r.get("ranks", 1) > 1 for r in rows)  # a ranks column only when several were run
    memory = len({r.get("memory_size", 0) for r in rows}) > 1  # a memory column only when sizes are compared
    maps = any(r["split_s"].get("map", 0.0) > 0 for r in rows)  # a map column only with the episodic map on
    for c in (
        ("ranks",) * ranks
        + ("memory",) * memory
        + ("shards", "steps/s", "speed-up", "trace", "env")
        + ("map",) * maps
        + ("policy", "PPO", "other")
    ):
        t.add_column(c, justify="right", no_wrap=True)
    base = rows[0]["actor_steps_per_s"] if rows else 1.0
    for r in rows:
        s, tot = r["split_s"], r["wall_s"]
        t.add_row(
            *(str(r.get("ranks", 1)),) * ranks,
            *(str(r.get("memory_size", 0)),) * memory,
            str(r["shards"]),
            f"{r['actor_steps_per_s']:,.0f}",
            f"{r['actor_steps_per_s'] / base:.2f}x",
            f"{100 * s['tracing'] / tot:.0f}%",
            f"{100 * (s['environment'] + s.get('fields', 0.0)) / tot:.0f}%",
            *(f"{100 * s.get('map', 0.0) / tot:.1f}%",) * maps,
            *(f"{100 * s[k] / tot:.0f}%" for k in ("policy", "ppo", "other")),
        )
    notes = [
        "timed after "
        + ", ".join(f"{r.get('warmup_updates', 1)}" for r in rows)
        + " warm-up updates; episodes ended in the timed updates: "
        + ", ".join(f"{r.get('episodes', 0):,}" for r in rows)
    ]
    first = [r for r in rows if r.get("memory_size", 0) == rows[0].get("memory_size", 0)]
    speedups = phase_speedups(first)
    if speedups:
        a, b = speedups["shards"]
        notes.append(f"{a} -> {b} shards per phase: " + ", ".join(f"{k} {speedups[k]:.2f}x" for k in PHASES))
        share = serial_share(first)
        note = f"serial share at {b} shards (Amdahl, from the two rows): {100 * share:.0f}% of the wall"
        most = fewest_and_most_shards(first)[1]
        if (by_cpu := cpu_serial_share(most)) is not None:
            note += f"; from its CPU time ({most['cpu_s'] / most['wall_s']:.2f} CPU-s per second): {100 * by_cpu:.0f}%"
        notes.append(note)
    if any(r.get("actors_without_an_episode") for r in rows):
        notes.append(
            "not at steady state: actors that had not finished an episode when timing began: "
            + ", ".join(str(r.get("actors_without_an_episode", 0)) for r in rows)
        )
    if any(r["split_s"].get("fields", 0.0) > 0 for r in rows):  # the geodesic fields' share of env, row by row
        notes.append(
            "env includes the step's own time on the geodesic fields at episode starts (with more than one "
            "shard a worker computes them beside the trace; env counts the wait): "
            + ", ".join(f"{100 * r['split_s'].get('fields', 0.0) / r['wall_s']:.1f}%" for r in rows)
        )
    t.caption = "; ".join(notes)
    return t


def ranks_table(rows):
    """What the ranks exchanged per update, the share of the wall time in the exchange (waiting included),
    and each rank's resident / proportional set size."""
    from rich.table import Table

    t = Table(title="ranks: exchange and RAM")
    for c in ("ranks", "shards", "sent/update", "exchange", "RSS/PSS per rank"):
        t.add_column(c, justify="right")
    for r in rows:
        mem = " ".join(f"{m['rss'] / 2**20:.0f}/{m['pss'] / 2**20:.0f}M" for m in r["ram"] if m)
        t.add_row(
            str(r["ranks"]),
            str(r["shards"]),
            f"{r['bytes_sent_per_update'] / 2**20:.2f} MiB",
            f"{100 * r['exchange_share']:.1f}%",
            mem,
        )
    return t


def run(args) -> dict:
    from rich.console import Console

    from navi_nb.train.config import TrainConfig

    console = Console()
    if getattr(args, "from_run", None):
        return run_from(args, console)
    try:
        sizes = [int(m) for m in str(args.memory_size).split(",") if m.strip()]
    except ValueError:
        sizes = []
    if not sizes:
        from navi_nb.errors import NaviError

        raise NaviError(f"bench train --memory-size {args.memory_size!r}: a list of sizes such as 0 or 0,64")
    configs = [
        TrainConfig(
            scenes=args.scenes, actors=args.actors, sensor_az=args.sensor_az, sensor_el=args.sensor_el,
            resolution=args.resolution,
            eval_episodes=0, memory_size=m, map_input=args.map_input if m else "all", env=dict(args.env or ()),
        ).validate("bench train")
        for m in sizes
    ]  # fmt: skip
    cfg = next((c for c in configs if c.memory_size), configs[0])  # the title's settings: a memory's map_input
    shard_counts, warmup, updates = timing_args(args)
    import json

    from navi_nb.parallel.ranks import launched_by_mpi, run_under_mpiexec, world

    if launched_by_mpi():  # one rank count, this one; rank 0 prints
        rows = [r for c in configs for r in measure(c, shard_counts, updates, console, warmup)]
        if world().Get_rank() != 0:
            return {}
        for r in rows:
            print("bench-train-row " + json.dumps(r), flush=True)
    else:
        rows = []
        for n in [int(r) for r in str(args.ranks).split(",") if r.strip()]:
            if n == 1:
                rows += [r for c in configs for r in measure(c, shard_counts, updates, console, warmup)]
            else:
                rows += run_under_mpiexec(
                    n,
                    [
                        "bench",
                        "train",
                        "--scenes",
                        args.scenes,
                        "--actors",
                        str(args.actors),
                        "--sensor-az",
                        str(args.sensor_az),
                        "--sensor-el",
                        str(args.sensor_el),
                        "--updates",
                        str(updates),
                        "--shards",
                        ",".join(map(str, args.shards)),
                        "--resolution",
                        str(args.resolution),
                        "--warmup",
                        str(warmup),
                        "--memory-size",
                        str(args.memory_size),
                        "--map-input",
                        args.map_input,
                        *[a for k, v in cfg.env.items() for a in ("--env", f"{k}={json.dumps(v)}")],
                    ],
                    "bench-train-row ",
                )
    return report(console, cfg, rows, sizes, shard_counts)


def timing_args(args, default_updates=UPDATES):
    """``--shards`` as a list of counts, ``--warmup`` checked (a count >= 1, or ``"auto"``) and ``--updates``
    (``default_updates`` when not given) checked (>= 1)."""
    from navi_nb.errors import NaviError

    counts = list(args.shards)
    warmup = str(args.warmup).strip().lower()
    if warmup != "auto" and not (warmup.isdigit() and int(warmup) >= 1):
        raise NaviError(f"bench train --warmup {args.warmup!r}: a count of updates (>= 1) or auto")
    updates = default_updates if args.updates is None else args.updates
    if updates < 1:
        raise NaviError(f"bench train --updates {updates}: a count of timed updates (>= 1)")
    return counts, warmup, updates


def run_from(args, console) -> dict:
    """``bench train --from-run RUN``: the run's own settings from its newest checkpoint, one process."""
    from navi_nb.errors import NaviError
    from navi_nb.train.runs import read_run_config

    given = [k for k, v in RUN_SETTINGS.items() if str(getattr(args, k)) != str(v)]
    if given:
        raise NaviError(
            f"bench train --from-run {args.from_run}: the run's settings are timed; leave out "
            + ", ".join("--" + k.replace("_", "-") for k in given)
        )
    cfg = read_run_config(args.from_run)
    shard_counts, warmup, updates = timing_args(args, FROM_RUN_UPDATES)
    if warmup == "auto":
        warmup = "1"  # the run's actors have finished episodes already: one update loads the kernels
    rows = measure(cfg, shard_counts, updates, console, warmup, from_run=args.from_run)
    out = report(console, cfg, rows, [cfg.memory_size], shard_counts)
    out["setting"]["from_run"] = str(args.from_run)
    return out


def report(console, cfg, rows, sizes, shard_counts) -> dict:
    """Print the tables and return the JSON of ``rows`` (the rates, the split, the ratios, the serial share)."""
    az, el = cfg.sensor_az, cfg.sensor_el
    console.print(split_table(cfg, rows))
    if any(r["ranks"] > 1 for r in rows):
        console.print(ranks_table(rows))
    summary = [
        [
            f"actor-steps/s at {r['ranks']} rank(s) x {r['shards']} shard(s)"
            + (f", memory {r['memory_size']}" if len(sizes) > 1 else ""),
            f"{r['actor_steps_per_s']:,.0f}",
        ]
        for r in rows
    ]
    summary += [[f"memory {m} over memory {a}, {k}", f"{v:.2f}x"] for (a, m, k), v in memory_ratios(rows).items()]
    shares = {m: serial_share([r for r in rows if r.get("memory_size", 0) == m]) for m in sizes}
    summary += [
        [f"serial share of the wall at {max(shard_counts)} shards" + (f", memory {m}" if len(sizes) > 1 else ""),
         f"{100 * v:.0f}% (target <= 15%)"]
        for m, v in shares.items() if v is not None
    ]  # fmt: skip
    cpu_rows = [(r, v) for r in rows if (v := cpu_serial_share(r)) is not None]
    for r, v in cpu_rows:
        label = f"serial share from CPU time at {r['shards']} shards"
        if len(sizes) > 1:
            label += f", memory {r.get('memory_size', 0)}"
        summary.append([label, f"{100 * v:.0f}%"])
    cpu_shares = {f"memory {r.get('memory_size', 0)}, {r['shards']} shards": v for r, v in cpu_rows}
    return {
        "setting": {
            "scenes": cfg.scenes,
            "actors": cfg.actors,
            "rays": [az, el],
            "hidden": cfg.hidden,
            "rollout_steps": cfg.rollout_steps,
            "update_epochs": cfg.update_epochs,
            "num_minibatches": cfg.num_minibatches,
            "memory_sizes": sizes,
            "map_input": cfg.map_input,
            "env": dict(cfg.env),
        },
        "runs": rows,
        "phase_speedups": phase_speedups([r for r in rows if r.get("memory_size", 0) == sizes[0]]),
        "memory_ratios": {f"{m}/{a} {k}": v for (a, m, k), v in memory_ratios(rows).items()},
        "serial_share": {str(m): v for m, v in shares.items()},
        "cpu_serial_share": cpu_shares,
        "summary": summary,
    }
