"""`navi-nb bench trace`: rays per second of the batched sphere tracer.

Scene: the ~35,000-triangle benchmark room (``benchmark_mesh_scene``: the
sample meshes shipped in ``navi_nb/data/meshes``) compiled at
``--resolution`` (256). Rays: ``--actors`` (64) actors x 64 x 16 from seeded
free-space positions (point query > 0.3 m), ``--max-distance`` 30 m. The
tracer is timed at 1 and 2 Numba threads (median of ``--repeat`` warm calls,
spread shown), and, when ``embreex`` is installed, Embree on the same rays
against the original triangles (its ``run`` is one thread; in a child
process, ``navi_nb.bench.peers``, which times its own calls), with the depth
agreement on rays both hit. Each call is timed in wall-clock seconds and in
process CPU seconds (``time.process_time``, all threads): on a shared machine
the wall rates fall with the load, while rays per CPU-second (per thread
busy) stay close to what an idle core gives, and equal CPU-seconds per ray at
1 and 2 threads mean the work itself splits without overhead (the wall
speed-up then follows on free cores). Then Navi's canonical sensor: 4 actors x 256 x
48 rays, ``max_distance`` 30, ms per call (Navi's GPU original: 36.5 ms per
environment step on a laptop GPU). All contenders are timed round-robin, one
call each per round, so a busy moment on a shared machine hits them alike;
the load average before and after is reported.

Then the step anatomy: steps per ray by kind from the counting build of
the kernel (``trace_counted``), on the bench scene and on ``house:0`` at 128,
with the production kernel's CPU-ns per ray and per step; and the rays whose
depth is more than two voxels off Embree's, by cause (``outlier_classes``).

Targets: >= 0.6 x Embree's single-thread rate per thread, >= 1.8x
from 1 to 2 threads, p99 |depth difference| within half a voxel, hit flags
equal on >= 99.9 % of rays.
"""

from __future__ import annotations

import math
import os
import time

import numpy as np

NAVI_CANONICAL_MS = 36.5
TARGET_EMBREE_RATIO = 0.6
TARGET_SCALING = 1.8
TARGET_P99_VOXELS = 0.5
TARGET_HIT_AGREEMENT = 0.999


def add_arguments(parser):
    from navi_nb.commands.flags import add_sensor

    parser.add_argument("--resolution", type=int, default=256, help="compile resolution (default 256)")
    parser.add_argument("--actors", type=int, default=64, help="actors (default 64)")
    add_sensor(parser, 64, 16)
    parser.add_argument("--max-distance", type=float, default=30.0, help="metres (default 30)")
    parser.add_argument("--repeat", type=int, default=9, help="timed calls per setting (default 9)")
    parser.add_argument("--threads", default="1,2", help="Numba thread counts to time (default 1,2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-embree", action="store_true", help="skip the Embree peer")
    parser.add_argument(
        "--worlds",
        type=int,
        default=0,
        help="instead: N actors over N worlds (house:0..N-1 at 128) vs N actors in one world, the same rays "
        "(default 0: off)",
    )


def free_positions(world, lo, hi, n, seed, clearance=0.3):
    """n seeded points in [lo, hi] whose point query is above ``clearance`` metres."""
    from navi_nb.world.query import distance

    rng = np.random.default_rng(seed)
    out = np.empty((0, 3), np.float32)
    for _ in range(200):
        pts = rng.uniform(lo, hi, (4 * n, 3)).astype(np.float32)
        d, _ = distance(world, pts)
        out = np.concatenate([out, pts[d > clearance]])
        if len(out) >= n:
            return out[:n]
    raise RuntimeError("could not find free-space positions in the benchmark scene")


def embree_peer(arrays):
    """The Embree peer's side (in a child process, ``navi_nb.bench.peers.PeerProcess``): ``run`` times one
    ``scene.run`` over every ray (wall and CPU seconds); ``result`` returns its ``tfar`` and ``primID``."""
    from embreex import rtcore_scene as rtcs
    from embreex.mesh_construction import TriangleMesh

    scene = rtcs.EmbreeScene()
    TriangleMesh(scene, arrays["triangles"])
    origins, directions = arrays["origins"], arrays["directions"]

    def run():
        c0, t0 = time.process_time(), time.perf_counter()
        scene.run(origins, directions, output=1)
        return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}

    def result():
        res = scene.run(origins, directions, output=1)
        return {"tfar": np.asarray(res["tfar"]), "primID": np.asarray(res["primID"])}

    return {"run": run, "result": result}


ANATOMY_HOUSE = "house:0"
ANATOMY_HOUSE_RESOLUTION = 128
OUTLIER_VOXELS = 2.0  # |depth - Embree| beyond this many voxels is counted as an outlier
NEAR_VOXELS = 1.5  # an early stop this close to a triangle is the field's blur (see outlier_classes)


def anatomy(world, origins, yaws, sensor, max_distance, repeat=5):
    """Steps per ray by kind (the counting build, ``trace_counted``) and the production
    kernel's cost per ray and per step at one thread (CPU-ns from ``time.process_time``,
    median of ``repeat`` warm calls): a dict."""
    import numba

    from navi_nb.bench.anatomy import trace_counted
    from navi_nb.sense.trace_math import STAT_KINDS
    from navi_nb.sense.tracer import Tracer

    _d, _s, _h, steps, kinds = trace_counted(world, origins, yaws, sensor, max_distance)
    tracer = Tracer(world, sensor, max_distance, max_actors=origins.shape[0])
    before = numba.get_num_threads()
    cpu = []
    try:
        numba.set_num_threads(1)
        tracer.trace(origins, yaws)
        for _ in range(repeat):
            c0 = time.process_time()
            tracer.trace(origins, yaws)
            cpu.append(time.process_time() - c0)
    finally:
        numba.set_num_threads(before)
    n = steps.size
    ns_ray = 1e9 * float(np.median(cpu)) / n
    out = {"rays": n, "ns_per_ray": ns_ray, "kinds": {}}
    for k in ("steps",) + STAT_KINDS:
        v = (steps if k == "steps" else kinds[k]).reshape(-1)
        p50, p99 = np.percentile(v, [50, 99])
        out["kinds"][k] = {"mean": float(v.mean()), "p50": float(p50), "p99": float(p99)}
    out["ns_per_step"] = ns_ray / max(out["kinds"]["steps"]["mean"], 1e-9)
    return out


def outlier_classes(mesh, origins, dirs, depth, tfar, both, voxel):
    """Rays both tracers hit whose depths differ by more than OUTLIER_VOXELS voxels, by cause.

    Against the exact signed distance to the triangles (``MeshField``):
    ``late`` rays (navi_nb past Embree's surface) are ``thin`` when no point
    within 4 voxels behind that surface along the ray lies half a voxel or
    more inside solid (an open sheet, or solid thinner than a voxel: a
    distance field sampled per voxel cannot hold it, the ray marches through)
    and ``tunnel`` otherwise (the ray crossed solid at least a voxel thick); ``early`` rays (navi_nb stops
    before Embree's surface) are ``graze`` when navi_nb's hit point lies
    within NEAR_VOXELS (1.5) voxels of a triangle (the ray passes a surface
    closer than the field resolves: the trilinear field between voxel
    centres fattens thin parts by up to about a voxel, and the hit epsilon
    is half a voxel) and ``false`` otherwise (a bug). Returns a dict of counts
    and the flat indices of each class."""
    from navi_nb.world.mesh_field import MeshField

    diff = depth.astype(np.float64) - tfar
    out = both & (np.abs(diff) > OUTLIER_VOXELS * voxel)
    late = np.flatnonzero(out & (diff > 0))
    early = np.flatnonzero(out & (diff < 0))
    field = MeshField(mesh.vertices, mesh.faces)
    o = origins.astype(np.float64)
    d = dirs.astype(np.float64)
    # the exact field at 16 points a quarter voxel apart behind Embree's surface, per late ray: how deep
    # the solid behind it goes (perpendicular to the surface, whatever the ray's angle)
    k = 0.25 * voxel * np.arange(1, 17)
    behind = o[late, None, :] + (tfar[late, None] + k[None, :])[..., None] * d[late, None, :]
    sdf, _ = field.evaluate(behind.reshape(-1, 3)) if late.size else (np.zeros(0), None)
    deepest = -np.asarray(sdf).reshape(-1, k.size).min(axis=1, initial=0.0) / voxel  # voxels inside, >= 0
    at = o[early] + depth[early, None].astype(np.float64) * d[early]
    near, _ = field.evaluate(at) if early.size else (np.zeros(0), None)
    near = np.abs(np.asarray(near)) < NEAR_VOXELS * voxel
    classes = {
        "thin": late[deepest < 0.5],
        "tunnel": late[deepest >= 0.5],
        "graze": early[near],
        "false": early[~near],
    }
    counts = {"compared": int(both.sum()), "outliers": int(out.sum())}
    counts.update({k: int(v.size) for k, v in classes.items()})
    return counts, classes


def anatomy_table(rows):
    """rows: (scene name, :func:`anatomy` dict) -> a rich Table of steps per ray by kind."""
    from rich.table import Table

    from navi_nb.sense.trace_math import STAT_KINDS

    table = Table(title="trace: steps per ray by kind, mean / p50 / p99 (counting build); 1-thread CPU-ns")
    table.add_column("kind", no_wrap=True)
    for name, _ in rows:
        table.add_column(name, justify="right", no_wrap=True)
    for k in ("steps",) + STAT_KINDS:
        cells = [a["kinds"][k] for _, a in rows]
        table.add_row(k, *(f"{c['mean']:.2f} / {c['p50']:.0f} / {c['p99']:.0f}" for c in cells))
    table.add_row("ns per ray", *(f"{a['ns_per_ray']:.0f}" for _, a in rows))
    table.add_row("ns per step", *(f"{a['ns_per_step']:.1f}" for _, a in rows))
    return table


def house_rays(n_actors, seed):
    """The anatomy's second scene: ANATOMY_HOUSE at ANATOMY_HOUSE_RESOLUTION (the world cache) and
    ``n_actors`` seeded free-space poses in it: (world, origins, yaws)."""
    from navi_nb.world.scene_spec import parse_spec
    from navi_nb.world.world_cache import load_worlds
    from navi_nb.world.world_set import WorldSet

    world = load_worlds(parse_spec(ANATOMY_HOUSE), ANATOMY_HOUSE_RESOLUTION)[0]
    origins, yaws = world_set_rays(WorldSet.of(world), n_actors, seed)
    return world, origins, yaws


def _spread(r):
    return f"{r['max_s'] / r['min_s'] - 1:.0%}" if r["min_s"] > 0 else "-"


def rate_tables(result) -> list:
    """The rates at 80 columns: one table of rays per second, and (with Embree) one of the ratios to it."""
    from rich.table import Table

    scene, embree = result["scene"], result.get("embree")
    az, el = result["sensor"]
    rates = Table(
        title=f"trace: {result['rays']:,} rays ({result['actors']} x {az}x{el}), "
        f"{scene['triangles']:,} triangles at {scene['resolution']}, "
        f"voxel {scene['voxel_m'] * 100:.1f} cm"
    )
    rates.add_column("tracer", no_wrap=True)
    for col in ("rays/s", "best rays/s", "spread", "rays/CPU-s"):
        rates.add_column(col, justify="right", no_wrap=True)
    vs = Table(title="trace: navi_nb vs Embree's one thread (rays/s ratios)")
    vs.add_column("tracer", no_wrap=True)
    for col in ("wall", "per thread", "per CPU-s"):
        vs.add_column(col, justify="right", no_wrap=True)
    for t, r in result["threads"].items():
        name = f"navi_nb, {t} thread{'s' if t > 1 else ''}"
        rates.add_row(
            name, f"{r['rays_per_s']:,.0f}", f"{r['rays_per_s_best']:,.0f}", _spread(r), f"{r['rays_per_cpu_s']:,.0f}"
        )
        if embree:
            ratio = r["rays_per_s"] / embree["rays_per_s"]
            vs.add_row(
                name, f"{ratio:.2f}x", f"{ratio / t:.2f}x", f"{r['rays_per_cpu_s'] / embree['rays_per_cpu_s']:.2f}x"
            )
    if embree:
        rates.add_row(
            "Embree, 1 thread",
            f"{embree['rays_per_s']:,.0f}",
            f"{embree['rays_per_s_best']:,.0f}",
            _spread(embree),
            f"{embree['rays_per_cpu_s']:,.0f}",
        )
    return [rates, vs] if embree else [rates]


def run(args) -> dict:
    if getattr(args, "worlds", 0):
        return run_world_set(args)
    import numba
    from rich.console import Console

    from navi_nb.bench.machine import machine_info, summary_table
    from navi_nb.bench.peers import PeerError, PeerProcess, peer_available
    from navi_nb.sense.sensor import Sensor
    from navi_nb.sense.tracer import Tracer
    from navi_nb.world.compiler import compile_mesh
    from navi_nb.world.mesh_scene import benchmark_mesh_scene

    console = Console()
    mesh, classes = benchmark_mesh_scene()
    t0 = time.perf_counter()
    world = compile_mesh(mesh, args.resolution, classes=classes)
    compile_s = time.perf_counter() - t0
    vs = float(world.voxel_size)
    vmin, vmax = mesh.vertices.min(axis=0), mesh.vertices.max(axis=0)
    pos = free_positions(world, vmin + 0.2, vmax - 0.2, args.actors, args.seed)
    yaws = np.random.default_rng(args.seed + 1).uniform(-math.pi, math.pi, args.actors).astype(np.float32)
    sensor = Sensor(args.sensor_az, args.sensor_el)
    tracer = Tracer(world, sensor, args.max_distance, max_actors=args.actors)
    n_rays = args.actors * sensor.n_rays
    threads = [int(t) for t in str(args.threads).split(",") if t.strip()]
    allowed = numba.config.NUMBA_NUM_THREADS
    skipped = [t for t in threads if t > allowed]
    threads = [t for t in threads if t <= allowed]
    for t in skipped:
        console.print(f"[yellow]skipping {t} threads: numba allows {allowed}[/]")
    before = numba.get_num_threads()
    result = {
        "machine": machine_info(),
        "scene": {
            "triangles": int(mesh.faces.shape[0]),
            "resolution": args.resolution,
            "voxel_m": vs,
            "nodes": world.node_count,
            "compile_s": compile_s,
        },
        "rays": n_rays,
        "actors": args.actors,
        "sensor": [args.sensor_az, args.sensor_el],
        "max_distance": args.max_distance,
        "threads": {},
        "canonical": {},
        "load_average_before": list(os.getloadavg()),
    }

    # the contenders, timed round-robin (one call of each per round) so that a
    # busy moment on this shared machine hits them all alike
    canon_sensor = Sensor(256, 48)
    canon = Tracer(world, canon_sensor, 30.0, max_actors=4)
    cpos, cyaw = pos[:4], yaws[:4]
    calls = {}
    for t in threads:
        calls[("rays", t)] = (t, lambda: tracer.trace(pos, yaws))
        calls[("canonical", t)] = (t, lambda: canon.trace(cpos, cyaw))
    scene = None  # the Embree peer: a child process (navi_nb.bench.peers), so its threads stay out of this one
    if not args.no_embree:
        if not peer_available("embreex"):
            console.print("[yellow]embreex is not installed: no Embree peer (pip install embreex)[/]")
        else:
            e_dirs = np.ascontiguousarray(sensor.world_directions(yaws).reshape(-1, 3), dtype=np.float32)
            e_orig = np.repeat(pos, sensor.n_rays, axis=0).astype(np.float32)
            try:
                scene = PeerProcess(
                    "navi_nb.bench.trace.embree_peer",
                    {
                        "triangles": mesh.vertices[mesh.faces].astype(np.float32),
                        "origins": e_orig,
                        "directions": e_dirs,
                    },
                )
            except PeerError as exc:
                console.print(f"[yellow]no Embree peer: {exc}[/]")
            else:
                calls[("embree", 1)] = (1, lambda: scene.call("run"))
    times = {k: [] for k in calls}
    cpu_times = {k: [] for k in calls}
    try:
        for t, fn in calls.values():  # warm every contender once
            numba.set_num_threads(t)
            fn()
        for _ in range(args.repeat):
            for k, (t, fn) in calls.items():
                numba.set_num_threads(t)
                c0 = time.process_time()
                t0 = time.perf_counter()
                timed = fn()
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                if isinstance(timed, dict) and "wall_s" in timed:  # the peer process timed its own call
                    wall, cpu = timed["wall_s"], timed["cpu_s"]
                times[k].append(wall)
                cpu_times[k].append(cpu)
        numba.set_num_threads(max(threads) if threads else before)
        depth, sem, hit = (np.array(a) for a in tracer.trace(pos, yaws))
        res = scene.call("result") if scene is not None else None
    finally:
        numba.set_num_threads(before)
        if scene is not None:
            scene.close()
    result["load_average_after"] = list(os.getloadavg())
    for (kind, t), ts in times.items():
        ts = np.array(ts)
        cs = np.array(cpu_times[(kind, t)])
        med = float(np.median(ts))
        if kind == "rays":
            result["threads"][t] = {
                "median_s": med,
                "min_s": float(ts.min()),
                "max_s": float(ts.max()),
                "rays_per_s": n_rays / med,
                "rays_per_s_best": n_rays / float(ts.min()),
                "cpu_s_median": float(np.median(cs)),
                "rays_per_cpu_s": n_rays / max(float(np.median(cs)), 1e-9),
            }
        elif kind == "canonical":
            result["canonical"][t] = {
                "median_ms": 1e3 * med,
                "min_ms": 1e3 * float(ts.min()),
                "max_ms": 1e3 * float(ts.max()),
                "cpu_ms_median": 1e3 * float(np.median(cs)),
            }
    result["hit_fraction"] = float(hit.mean())
    embree = None
    if scene is not None:
        ts = np.array(times[("embree", 1)])
        tfar = res["tfar"].astype(np.float64)
        e_hit = (res["primID"] >= 0) & (tfar <= args.max_distance)
        both = e_hit & hit.reshape(-1)
        diff = np.abs(tfar[both] - depth.reshape(-1)[both].astype(np.float64))
        med = float(np.median(ts))
        cs = np.array(cpu_times[("embree", 1)])
        embree = {
            "median_s": med,
            "min_s": float(ts.min()),
            "max_s": float(ts.max()),
            "rays_per_s": n_rays / med,
            "rays_per_s_best": n_rays / float(ts.min()),
            "rays_per_cpu_s": n_rays / max(float(np.median(cs)), 1e-9),
            "hit_agreement": float(np.mean(e_hit == hit.reshape(-1))),
            "depth_diff_median_m": float(np.median(diff)) if diff.size else float("nan"),
            "depth_diff_p99_m": float(np.percentile(diff, 99)) if diff.size else float("nan"),
            "depth_diff_max_m": float(diff.max()) if diff.size else float("nan"),
            "rays_compared": int(both.sum()),
        }
        embree["depth_diff_p99_voxels"] = embree["depth_diff_p99_m"] / vs
        counts, _classes = outlier_classes(mesh, e_orig, e_dirs, depth.reshape(-1), tfar, both.reshape(-1), vs)
        embree["outliers"] = counts
        result["embree"] = embree

    for table in rate_tables(result):
        console.print(table)
    rows = [("bench scene", anatomy(world, pos, yaws, sensor, args.max_distance))]
    h_world, h_pos, h_yaws = house_rays(args.actors, args.seed)
    house = f"{ANATOMY_HOUSE} at {ANATOMY_HOUSE_RESOLUTION}"
    rows.append((house, anatomy(h_world, h_pos, h_yaws, sensor, args.max_distance)))
    result["anatomy"] = {name: a for name, a in rows}
    console.print(anatomy_table(rows))
    one = result["threads"].get(1, {}).get("rays_per_s")
    summary = []
    if one and 2 in result["threads"]:
        result["scaling_1_to_2"] = result["threads"][2]["rays_per_s"] / one
        summary.append(["speed-up 1 -> 2 threads", f"{result['scaling_1_to_2']:.2f}x (target >= {TARGET_SCALING})"])
        result["cpu_efficiency_2_threads"] = (
            result["threads"][2]["rays_per_cpu_s"] / result["threads"][1]["rays_per_cpu_s"]
        )
        summary.append(
            [
                "rays per CPU-s, 2 threads / 1 thread",
                f"{result['cpu_efficiency_2_threads']:.2f} (2x this is the speed-up on 2 free cores)",
            ]
        )
    if embree and one:
        result["per_thread_vs_embree"] = min(
            r["rays_per_s"] / t / embree["rays_per_s"] for t, r in result["threads"].items()
        )
        summary.append(
            [
                "per thread vs Embree 1 thread",
                f"{result['per_thread_vs_embree']:.2f}x (target >= {TARGET_EMBREE_RATIO})",
            ]
        )
        result["per_cpu_s_vs_embree"] = min(
            r["rays_per_cpu_s"] / embree["rays_per_cpu_s"] for r in result["threads"].values()
        )
        summary.append(
            [
                "per CPU-second vs Embree per CPU-second",
                f"{result['per_cpu_s_vs_embree']:.2f}x (target >= {TARGET_EMBREE_RATIO})",
            ]
        )
        summary.append(
            [
                "|depth - Embree| median / p99",
                f"{embree['depth_diff_median_m'] * 100:.2f} / {embree['depth_diff_p99_m'] * 100:.2f} cm "
                f"({embree['depth_diff_p99_voxels']:.2f} voxel at p99; target <= {TARGET_P99_VOXELS})",
            ]
        )
        summary.append(
            [
                "hit flags equal to Embree",
                f"{100 * embree['hit_agreement']:.2f}% (target >= {100 * TARGET_HIT_AGREEMENT:g}%)",
            ]
        )
        oc = embree["outliers"]
        summary.append(
            [
                f"rays > {OUTLIER_VOXELS:g} voxels off Embree (max {embree['depth_diff_max_m']:.2f} m)",
                f"{oc['outliers']} of {oc['compared']:,}: past a surface thinner than a voxel {oc['thin']}, "
                f"tunnelled {oc['tunnel']}; stopped within {NEAR_VOXELS:g} voxels of a surface {oc['graze']}, "
                f"false hit {oc['false']} (docs/SENSING.md)",
            ]
        )
    for t, r in result["canonical"].items():
        summary.append(
            [
                f"canonical 4 x 256 x 48, {t} thread{'s' if t > 1 else ''}",
                f"{r['median_ms']:.1f} ms/call, best {r['min_ms']:.1f}, {r['cpu_ms_median']:.1f} CPU-ms "
                f"(Navi GPU: {NAVI_CANONICAL_MS} ms/step; {NAVI_CANONICAL_MS / r['median_ms']:.2f}x)",
            ]
        )
    summary.append(["rays that hit", f"{100 * result['hit_fraction']:.1f}%"])
    summary.append(
        [
            "load average before / after",
            " / ".join(f"{a[0]:.1f}" for a in (result["load_average_before"], result["load_average_after"])),
        ]
    )
    console.print(summary_table("trace: summary", summary))
    result["summary"] = summary
    return result


# --------------------------------------------------------------------------
# many worlds: one batched trace over a world set
# --------------------------------------------------------------------------

WORLD_SET_RESOLUTION = 128
TARGET_SET_RATIO = 0.9


def world_set_rays(world_set, n_actors, seed):
    """Seeded free-space poses: actor k in world ``k % len(world_set)`` (origins (A,3), yaws (A,))."""
    rng = np.random.default_rng(seed)
    origins = np.empty((n_actors, 3), np.float32)
    for k in range(n_actors):
        w = world_set.worlds[k % len(world_set)]
        lo, hi = _interest(w)
        origins[k] = free_positions(w, lo, hi, 1, seed + k)[0]
    return origins, rng.uniform(-math.pi, math.pi, n_actors).astype(np.float32)


def _interest(world):
    b = world.sidecar.get("bounds_of_interest")
    if b:
        return np.asarray(b[0], np.float64), np.asarray(b[1], np.float64)
    return world.bmin.astype(np.float64), world.bmax.astype(np.float64)


def world_grid_rays(worlds, per_world, seed):
    """``per_world`` seeded free-space poses in each world: origins (W, per_world, 3), yaws (W, per_world)."""
    rng = np.random.default_rng(seed)
    origins = np.empty((len(worlds), per_world, 3), np.float32)
    for k, w in enumerate(worlds):
        lo, hi = _interest(w)
        origins[k] = free_positions(w, lo, hi, per_world, seed + k)
    return origins, rng.uniform(-math.pi, math.pi, (len(worlds), per_world)).astype(np.float32)


def run_world_set(args) -> dict:
    """``--worlds N``: the same N x N rays traced two ways. Spread: N calls of N actors, actor k
    in world k of house:0..N-1 (compiled at 128, from the cache), all in one world set. Alone:
    N calls of N actors in one world, world k by itself (its own set of one). Pose j of world k
    is traced in spread call j and in world k's call, so both trace exactly the same rays (and
    give the same bits: checked). Rays per second over a round of all calls (median of
    ``--repeat`` rounds, the two ways interleaved call by call) and the packed layout's RAM per world."""
    import numba
    from rich.console import Console
    from rich.table import Table

    from navi_nb.bench.machine import machine_info
    from navi_nb.sense.sensor import Sensor
    from navi_nb.sense.tracer import Tracer
    from navi_nb.world.scene_spec import parse_spec
    from navi_nb.world.world_cache import load_worlds
    from navi_nb.world.world_set import WorldSet

    console = Console()
    n = int(args.worlds)
    items = parse_spec(f"house:0-{n - 1}")
    worlds = load_worlds(items, WORLD_SET_RESOLUTION)
    alone = [WorldSet.of(w) for w in worlds]
    for one in alone:
        _ = one.packed  # each world's own layout (default dense table), packed before the set repacks it
    one = alone[0]
    many = WorldSet(worlds, items=items)
    sensor = Sensor(args.sensor_az, args.sensor_el)
    origins, yaws = world_grid_rays(worlds, n, args.seed)  # (world k, pose j)
    wi_many = np.arange(n, dtype=np.int32)
    tr_many = Tracer(many, sensor, args.max_distance, max_actors=n)
    tr_alone = [Tracer(a, sensor, args.max_distance, max_actors=n) for a in alone]
    threads = [int(t) for t in str(args.threads).split(",") if t.strip()]
    info = machine_info()
    rays = n * n * sensor.n_rays
    # the same rays give the same bits either way (world 0's poses, and every world's pose 0); warms both
    first = tr_alone[0].trace(origins[0], yaws[0])[0].copy()
    spread0 = None
    for j in range(n):
        d = tr_many.trace(origins[:, j], yaws[:, j], world_index=wi_many)[0]
        if not np.array_equal(d[0], first[j]):
            raise RuntimeError(f"world set and world alone disagree on {many.names[0]} pose {j}")
        if j == 0:
            spread0 = d.copy()
    for k in range(n):
        if not np.array_equal(tr_alone[k].trace(origins[k], yaws[k])[0][0], spread0[k]):
            raise RuntimeError(f"world set and world alone disagree on {many.names[k]} pose 0")
    rows = []
    for t in threads:
        numba.set_num_threads(min(t, numba.config.NUMBA_NUM_THREADS))
        times = {"one": [], "many": []}
        for _ in range(max(1, args.repeat)):
            spent = {"one": 0.0, "many": 0.0}
            for k in range(n):  # interleaved call by call: a busy moment hits both alike
                t0 = time.perf_counter()
                tr_alone[k].trace(origins[k], yaws[k])
                spent["one"] += time.perf_counter() - t0
                t0 = time.perf_counter()
                tr_many.trace(origins[:, k], yaws[:, k], world_index=wi_many)
                spent["many"] += time.perf_counter() - t0
            for key, v in spent.items():
                times[key].append(v)
        rate = {k: rays / np.median(v) for k, v in times.items()}
        spread = {k: (rays / max(v), rays / min(v)) for k, v in times.items()}
        rows.append(
            {
                "threads": t,
                "one_world_rays_per_s": rate["one"],
                "many_worlds_rays_per_s": rate["many"],
                "ratio": rate["many"] / rate["one"],
                "spread_one": spread["one"],
                "spread_many": spread["many"],
            }
        )
    table = Table(title=f"the same {n} x {n} x {sensor.n_rays} rays: {n} actors in {n} worlds vs in 1 world")
    for col in ("threads", "1 world per call Mrays/s", f"{n} worlds per call Mrays/s", "ratio"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            str(r["threads"]),
            f"{r['one_world_rays_per_s'] / 1e6:.2f} ({r['spread_one'][0] / 1e6:.2f}-{r['spread_one'][1] / 1e6:.2f})",
            f"{r['many_worlds_rays_per_s'] / 1e6:.2f} ({r['spread_many'][0] / 1e6:.2f}-"
            f"{r['spread_many'][1] / 1e6:.2f})",
            f"{r['ratio']:.2f}",
        )
    console.print(table)
    per = many.nbytes_per_world()
    mem = Table(title="packed RAM per world (decoded layout; file nodes beside it)")
    for col in ("world", "layout KiB", "file nodes KiB"):
        mem.add_column(col, justify="right")
    for w in range(len(many)):
        mem.add_row(many.names[w], f"{per[w] / 1024:.0f}", f"{worlds[w].nodes.nbytes / 1024:.0f}")
    console.print(mem)
    total = many.packed.nbytes
    console.print(
        f"sum over worlds {per.sum() / 2**20:.1f} MiB + constant {many.constant_nbytes()} B "
        f"= packed {total / 2**20:.1f} MiB; one world alone {one.packed.nbytes / 2**20:.1f} MiB"
    )
    ok = all(r["ratio"] >= TARGET_SET_RATIO for r in rows)
    console.print(f"target: {n} worlds >= {TARGET_SET_RATIO}x one world's rays/s: {'met' if ok else 'NOT met'}")
    return {
        "machine": info,
        "rows": rows,
        "bytes_per_world": per.tolist(),
        "names": list(many.names),
        "constant_bytes": many.constant_nbytes(),
        "packed_bytes": int(total),
        "target_met": ok,
    }
