"""`navi-nb bench env`: actor-steps per second of the environment alone.

Measures, on a built-in scene (default ``house`` at 128):

1. 64 actors with a 64 x 16 sensor, at 1 and 2 Numba threads (target on a
   2-core machine: at least 3,000 actor-steps/s), with the step split into
   the ray trace and everything else (motion, collision, rewards, resets,
   observation building);
2. Navi's canonical setting: 4 actors, 256 x 48 rays, max_distance 30 m, in
   ms per step (its original takes 36.5 ms per step on a laptop GPU);
3. time per actor-step from 16 to 4,096 actors (it should stay flat);
4. bytes per actor (``NavEnv.ram_report``).

Actions are uniform random in [-1, 1] (pre-drawn), so actors collide, slide
and reset as in training. Wall time per step is the best of ``--repeats``
rounds; the spread across rounds is printed (the machine is shared).
"""

from __future__ import annotations

import time

import numpy as np

from navi_nb.sense.tracer import check_image, write_image_rays

NAVI_CANONICAL_MS = 36.5


def add_arguments(parser):
    from navi_nb.commands.flags import add_scenes, add_sensor

    add_scenes(parser, "house", "a built-in scene (default house)")
    parser.add_argument("--resolution", type=int, default=128, help="compile resolution (default 128)")
    parser.add_argument("--actors", type=int, default=64, help="actors for the main figure (default 64)")
    add_sensor(parser, 64, 16)
    parser.add_argument("--max-distance", type=float, default=10.0, help="sensor range, metres (default 10)")
    parser.add_argument("--threads", default="1,2", help="Numba thread counts to time (default 1,2)")
    parser.add_argument("--seconds", type=float, default=2.0, help="timing budget per figure (default 2 s)")
    parser.add_argument("--repeats", type=int, default=3, help="timing rounds per figure, best kept (default 3)")
    parser.add_argument(
        "--scaling", default="16,64,256,1024,4096", help="actor counts for the scaling sweep ('' to skip)"
    )
    parser.add_argument("--no-canonical", action="store_true", help="skip Navi's canonical setting")


def _time_steps(env, actions, seconds, repeats):
    """(best wall s/step, spread, best CPU s/step) over rounds of env.step."""
    k = 0
    for _ in range(2):
        env.step(actions[k % len(actions)])
        k += 1
    means, cpus = [], []
    for _ in range(repeats):
        n, t0, c0 = 0, time.perf_counter(), time.process_time()
        while True:
            env.step(actions[k % len(actions)])
            k += 1
            n += 1
            dt = time.perf_counter() - t0
            if dt > seconds / repeats and n >= 2:
                break
        means.append(dt / n)
        cpus.append((time.process_time() - c0) / n)
    return min(means), max(means) / min(means) - 1.0, min(cpus)


def _time_trace(env, seconds, repeats):
    tr = env._tracer
    pos, yaw = env.positions.copy(), env.yaws.copy()
    tr.trace(pos, yaw)
    best = np.inf
    for _ in range(repeats):
        n, t0 = 0, time.perf_counter()
        while True:
            tr.trace(pos, yaw)
            n += 1
            dt = time.perf_counter() - t0
            if dt > seconds / repeats / 2 and n >= 2:
                break
        best = min(best, dt / n)
    return best


class _ReplayTracer:
    """Stands in for the tracer: returns one precomputed trace (sliced to the
    actors asked for: a step with resets asks for up to twice the actors), so a
    step times the environment's own work alone (the observation's ray columns
    included, which the CPU tracer itself writes in a real step: here the host
    kernel a CUDA trace's image uses)."""

    def __init__(self, tracer, pos, yaw, world_index):
        self.out = tuple(np.concatenate([b, b]) for b in tracer.trace(pos, yaw, world_index=world_index))

    def trace(self, origins, yaws, out=None, to_host=False, world_index=None, image=None):
        n = origins.shape[0]
        out = tuple(b[:n] for b in self.out)
        if image is not None:
            n_rays = out[0].shape[1] * out[0].shape[2]
            bundle = check_image(image, n, n_rays)
            write_image_rays(n_rays, out[0].reshape(-1), out[1].reshape(-1), bundle)
        return out


def _time_without_trace(env, actions, seconds, repeats):
    real = env._tracer
    env._tracer = _ReplayTracer(real, env.positions, env.yaws, env.world_index)
    try:
        return _time_steps(env, actions, seconds, repeats)
    finally:
        env._tracer = real


def _env(world, n, az, el, max_distance, seed=0):
    from navi_nb.env.nav_env import NavEnv
    from navi_nb.sense.sensor import Sensor

    env = NavEnv(world, n, sensor=Sensor(az, el), task="pointgoal", seed=seed, max_distance=max_distance)
    env.reset()
    rng = np.random.default_rng(seed)
    actions = rng.uniform(-1.0, 1.0, (8, n, 4)).astype(np.float32)
    return env, actions


def _table(title, *columns):
    from rich.table import Table

    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="right", no_wrap=True)
    return table


def main_tables(result, args) -> list:
    """The main figure at 80 columns: the rates, then where a step's time goes."""
    rows = {t: r for t, r in result["main"].items() if isinstance(r, dict)}
    rates = _table(
        f"NavEnv: {args.scenes}, {args.actors} actors, {args.sensor_az}x{args.sensor_el} rays, {args.max_distance:g} m",
        "threads",
        "actor-steps/s",
        "ms/step",
        "spread",
        "vs 3,000/s",
    )
    split = _table(
        "NavEnv: a step's time (no-trace: tracer output replayed)",
        "threads",
        "trace ms",
        "rest ms",
        "CPU ms/step",
        "no-trace steps/s",
    )
    for t, r in rows.items():
        rates.add_row(
            str(t),
            f"{r['actor_steps_per_s']:,.0f}",
            f"{r['ms_per_step']:.2f}",
            f"{r['spread']:.0%}",
            f"{r['actor_steps_per_s'] / 3000:.2f}x",
        )
        split.add_row(
            str(t),
            f"{r['trace_ms']:.2f}",
            f"{r['rest_ms']:.2f}",
            f"{r['cpu_ms_per_step']:.2f}",
            f"{r['no_trace_actor_steps_per_s']:,.0f}",
        )
    return [rates, split]


def canonical_table(result):
    table = _table(
        "Navi canonical: 4 actors, 256x48 rays, 30 m",
        "threads",
        "ms/step",
        "spread",
        "trace ms",
        f"vs Navi GPU {NAVI_CANONICAL_MS} ms",
    )
    for t, r in result["canonical"].items():
        ms = r["ms_per_step"]
        table.add_row(
            str(t),
            f"{ms:.1f}",
            f"{r['spread']:.0%}",
            f"{r['trace_ms']:.1f}",
            f"{NAVI_CANONICAL_MS / ms:.2f}x faster"
            if ms < NAVI_CANONICAL_MS
            else f"{ms / NAVI_CANONICAL_MS:.2f}x slower",
        )
    return table


def scaling_table(result, args, threads):
    table = _table(
        f"us per actor-step vs actors ({args.sensor_az}x{args.sensor_el} rays, {threads} threads)",
        "actors",
        "us/step",
        "trace us",
        "rest us",
        "bytes/actor",
    )
    for n, r in result["scaling"].items():
        table.add_row(
            f"{n:,}",
            f"{r['us_per_actor_step']:.1f}",
            f"{r['trace_us_per_actor_step']:.1f}",
            f"{r['rest_us_per_actor_step']:.2f}",
            f"{r['bytes_per_actor']:,.0f}",
        )
    return table


def run(args) -> dict:
    import numba
    from rich.console import Console

    from navi_nb.bench.machine import machine_info
    from navi_nb.world.compiler import compile_scene

    console = Console()
    machine = machine_info()
    threads = [int(t) for t in str(args.threads).split(",") if t.strip()]
    cap = numba.config.NUMBA_NUM_THREADS
    threads = [t for t in threads if 1 <= t <= cap] or [1]
    old_threads = numba.get_num_threads()
    t0 = time.perf_counter()
    world = compile_scene(args.scenes, args.resolution)
    console.print(
        f"world: {args.scenes} at {args.resolution} ({world.node_count} nodes, "
        f"{time.perf_counter() - t0:.1f} s to compile)"
    )
    result = {
        "machine": machine,
        "scenes": args.scenes,
        "resolution": args.resolution,
        "main": {},
        "canonical": {},
        "scaling": {},
    }
    summary = []
    try:
        # 1. the main figure -------------------------------------------------
        t0 = time.perf_counter()
        env, actions = _env(world, args.actors, args.sensor_az, args.sensor_el, args.max_distance)
        env.step(actions[0])
        console.print(f"first NavEnv + reset + step (JIT or cache load): {time.perf_counter() - t0:.1f} s")
        for t in threads:
            numba.set_num_threads(t)
            s, spread, cpu = _time_steps(env, actions, args.seconds, args.repeats)
            tr = _time_trace(env, args.seconds, args.repeats)
            rate = args.actors / s
            s_nt, _sp, _c = _time_without_trace(env, actions, args.seconds, args.repeats)
            result["main"][t] = {
                "actor_steps_per_s": rate,
                "ms_per_step": s * 1e3,
                "spread": spread,
                "trace_ms": tr * 1e3,
                "rest_ms": max(0.0, s - tr) * 1e3,
                "cpu_ms_per_step": cpu * 1e3,
                "cpu_actor_steps_per_s": args.actors / cpu,
                "no_trace_actor_steps_per_s": args.actors / s_nt,
            }
            rays = f"{args.sensor_az}x{args.sensor_el}"
            summary.append([f"actor-steps/s ({args.actors} actors, {rays}, {t} thr)", f"{rate:,.0f}"])
        if len(threads) > 1:
            a, b = result["main"][threads[0]], result["main"][threads[-1]]
            result["main"]["speedup"] = b["actor_steps_per_s"] / a["actor_steps_per_s"]
        for table in main_tables(result, args):
            console.print(table)
        mem = env.ram_report()
        result["ram"] = mem
        summary.append(["bytes per actor", f"{mem['bytes_per_actor']:,.0f}"])
        console.print(
            f"RAM per actor: {mem['bytes_per_actor']:,.0f} B (state {mem['state_bytes_per_actor']:,.0f}, "
            f"visit grid {mem['visit_grid_bytes_per_actor']}, ray buffers "
            f"{mem['ray_buffer_bytes_per_actor']:,}); shared: world {mem['shared_world_bytes']:,} B, "
            f"spawn pool {mem['shared_spawn_pool_bytes']:,} B"
        )
        del env

        # 2. Navi's canonical setting ----------------------------------------
        if not args.no_canonical:
            env, actions = _env(world, 4, 256, 48, 30.0)
            for t in threads:
                numba.set_num_threads(t)
                s, spread, _cpu = _time_steps(env, actions, args.seconds, args.repeats)
                tr = _time_trace(env, args.seconds, args.repeats)
                result["canonical"][t] = {
                    "ms_per_step": s * 1e3,
                    "spread": spread,
                    "trace_ms": tr * 1e3,
                    "ratio_to_navi": NAVI_CANONICAL_MS / (s * 1e3),
                }
                summary.append([f"canonical ms/step ({t} thr)", f"{s * 1e3:.1f} (Navi GPU {NAVI_CANONICAL_MS})"])
            console.print(canonical_table(result))
            del env

        # 3. scaling in the number of actors ----------------------------------
        counts = [int(c) for c in str(args.scaling).split(",") if c.strip()]
        if counts:
            t = max(threads)
            numba.set_num_threads(t)
            for n in counts:
                env, actions = _env(world, n, args.sensor_az, args.sensor_el, args.max_distance)
                budget = max(args.seconds, 0.0)
                s, spread, _cpu = _time_steps(env, actions, budget, max(1, min(args.repeats, 2)))
                tr = _time_trace(env, budget, 1)
                per = s / n * 1e6
                result["scaling"][n] = {
                    "us_per_actor_step": per,
                    "trace_us_per_actor_step": tr / n * 1e6,
                    "rest_us_per_actor_step": max(0.0, s - tr) / n * 1e6,
                    "bytes_per_actor": env.ram_report()["bytes_per_actor"],
                }
                del env
            console.print(scaling_table(result, args, t))
            per = [v["us_per_actor_step"] for v in result["scaling"].values()]
            summary.append(["us/actor-step over actors", f"{min(per):.1f} .. {max(per):.1f}"])
    finally:
        numba.set_num_threads(old_threads)
    result["summary"] = summary
    return result
