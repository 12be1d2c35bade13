"""`navi-nb bench ppo`: PPO update samples per second, shards, PyTorch, matmul.

One "update step" is one minibatch: gather, forward of both trunks, the PPO
loss, backward, global-norm clipping and one Adam step
(``PPO.minibatches``), timed as ``PPO.update`` runs them: an
epoch of 4 minibatches in one compiled call (``PPO.minibatches``), the time
divided by 4. Measured at each shard count (Numba
threads), for

- ``default``: the trainer's default network (2 x 128 tanh, separate trunks)
  on the environment's default observation (64 x 16 rays + extras), minibatch
  1024 (64 actors x 64 steps / 4);
- ``wide``: observation 1030, 2 x 256, minibatch 1024 (the issue's scale figure);
- ``small``: observation 270, 2 x 64, minibatch 256;

and, when PyTorch is installed, the same network, loss, clipping and Adam in
PyTorch on the CPU with its default threads, run in a child process
(``navi_nb.bench.peers``: PyTorch's thread pools, left in this process,
would slow and flatten the navi_nb rows timed after it); and NumPy's float32 matmul rate
(4096^2, BLAS at the allowed cores), which bounds any implementation.
"""

from __future__ import annotations

import math
import os
import time

import numpy as np

NETS = {
    "default": {"obs": None, "hidden": (128, 128), "minibatch": 1024},
    "wide": {"obs": 1030, "hidden": (256, 256), "minibatch": 1024},
    "small": {"obs": 270, "hidden": (64, 64), "minibatch": 256},
}
FALLBACK_OBS = 1037
MINIBATCHES = 4
"""Minibatches per timed call: one epoch of the default PPO settings (4
minibatches), run as ``PPO.update`` runs it (``PPO.minibatches``)."""


def add_arguments(parser):
    from navi_nb.commands.flags import shard_counts

    parser.add_argument(
        "--nets", default="default,wide,small", help="networks to run (comma list of " + ", ".join(NETS) + ")"
    )
    parser.add_argument("--shards", type=shard_counts, default="1,2", help="shard counts to measure (comma list)")
    parser.add_argument("--seconds", type=float, default=2.0, help="timing budget per measurement")
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch peer")
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="independent timing rounds per measurement (the best and the spread are reported)",
    )


def default_obs_dim():
    """The environment's default observation length (64 x 16 sensor)."""
    try:
        from navi_nb.env.config import EnvConfig
        from navi_nb.env.observation import obs_layout, obs_size
        from navi_nb.sense.sensor import Sensor

        return int(obs_size(obs_layout(Sensor(64, 16), EnvConfig())))
    except Exception:  # the env stage's signature may differ: the documented estimate
        return FALLBACK_OBS


def net_flops(obs, hidden, act_dim=4):
    """FLOPs per sample of forward + backward (weight and input gradients) of both trunks."""
    total = 0
    for head in (act_dim, 1):
        sizes = [obs] + list(hidden) + [head]
        mults = [sizes[i] * sizes[i + 1] for i in range(len(sizes) - 1)]
        total += 2 * sum(mults) * 2 + 2 * sum(mults[1:])
    return total


def synthetic(policy, n, seed=0):
    from navi_nb.learn.rollout import RolloutSlab

    rng = np.random.default_rng(seed)
    slab = RolloutSlab(n, 1, policy.obs_dim, policy.act_dim)
    slab.obs[...] = rng.standard_normal(slab.obs.shape)
    mu, v = policy.forward(slab.obs[:, 0])
    act = mu + rng.standard_normal(mu.shape).astype(np.float32)
    slab.actions[:, 0] = act
    slab.logp[:, 0] = policy.log_prob(mu, act) + rng.uniform(-0.3, 0.3, n)
    slab.value[:, 0] = v
    slab.advantages[:, 0] = rng.standard_normal(n)
    slab.returns[:, 0] = v + rng.standard_normal(n)
    return slab


def _round(fn, seconds, count=False):
    """One timing round: calls ``fn`` for at least ``seconds`` (and 3 calls);
    (wall seconds per call, CPU seconds per call), and the number of calls with ``count``."""
    n, t0, c0 = 0, time.perf_counter(), time.process_time()
    while True:
        fn()
        n += 1
        dt = time.perf_counter() - t0
        if dt > seconds and n >= 3:
            return (dt / n, (time.process_time() - c0) / n) + ((n,) if count else ())


def _time(fn, seconds, repeats, cpu=None):
    """Best-of-rounds wall seconds per call and the spread (max/min - 1) of the
    round means. With ``cpu`` (a dict), also the best CPU seconds per call
    (``time.process_time``: on one thread, the time the code really ran, which
    other processes on a shared machine do not inflate)."""
    fn()
    fn()
    means, cpus = [], []
    for _ in range(repeats):
        wall, cpu_s = _round(fn, seconds / repeats)
        means.append(wall)
        cpus.append(cpu_s)
    if cpu is not None:
        cpu["s"] = min(cpus)
    return min(means), max(means) / min(means) - 1.0


def thread_cpu_ns():
    """{thread id: CPU nanoseconds so far} for every thread of this process
    (Linux ``/proc/self/task/*/schedstat``); {} where that is not available."""
    out = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                out[tid] = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return out


def bench_navi(obs, hidden, mb, shards, seconds, repeats):
    import numba

    from navi_nb.learn.fused import SOURCE_FIELDS
    from navi_nb.learn.policy import ActorCritic
    from navi_nb.learn.ppo import PPO, PPOConfig

    pol = ActorCritic(obs, 4, hidden=hidden, seed=0)
    ppo = PPO(pol, PPOConfig())
    slab = synthetic(pol, mb * MINIBATCHES)
    ppo.set_source(slab.flat, slab.input_dim, {k: slab.col(k) for k in SOURCE_FIELDS})
    order = np.random.default_rng(1).permutation(slab.n_samples)
    params0 = pol.params.copy()

    def step():  # one epoch as PPO.update runs it: MINIBATCHES minibatches in one call
        ppo.minibatches(order, mb, MINIBATCHES, 3e-4)

    # the shard counts are timed round-robin (one round of each in turn), so a
    # busy moment on a shared machine hits them alike and their ratio holds
    means = {k: [] for k in shards}
    cpus = {k: [] for k in shards}
    paths = {k: [] for k in shards}  # (busiest thread's CPU s, all threads' CPU s) per call, per round
    for k in shards:
        numba.set_num_threads(k)
        step()
        step()
    for _ in range(repeats):
        for k in shards:
            numba.set_num_threads(k)
            pol.params[...] = params0
            # the critical path is taken in the same rounds: its best round is a quiet moment of the
            # machine, as the best wall time is (a sibling thread descheduled by another process makes
            # the waiting thread spin at each barrier, and that spinning counts as its CPU time)
            before = thread_cpu_ns()
            wall, cpu_s, calls = _round(step, seconds / repeats, count=True)
            after = thread_cpu_ns()
            if before and after:
                deltas = [after[t] - before.get(t, 0) for t in after]
                paths[k].append((max(deltas) / calls / 1e9, sum(deltas) / calls / 1e9))
            means[k].append(wall / MINIBATCHES)
            cpus[k].append(cpu_s / MINIBATCHES)
    out = {}
    for k in shards:
        t = min(means[k])
        out[k] = {"samples_per_s": mb / t, "ms_per_minibatch": 1e3 * t, "spread": max(means[k]) / t - 1.0}
        if k == 1:
            out[k]["samples_per_cpu_s"] = mb / min(cpus[k])
        if paths[k]:
            crit, total = min(paths[k])
            out[k]["cpu_ms_per_minibatch"] = 1e3 * total / MINIBATCHES
            out[k]["critical_ms_per_minibatch"] = 1e3 * crit / MINIBATCHES
            out[k]["critical_spread"] = max(c for c, _ in paths[k]) / crit - 1.0
    out["modes"] = dict(ppo.modes)
    out["n_params"] = pol.n_params
    return out


def bench_torch(obs, hidden, mb, seconds, repeats, threads):
    import torch
    from torch import nn

    # PyTorch's default is one thread per core; navi_nb's BLAS pin
    # (OMP_NUM_THREADS=1) would otherwise have lowered it to 1.
    torch.set_num_threads(threads)
    torch.manual_seed(0)

    def trunk(n_out, gain_out):
        layers, n_in = [], obs
        for h in hidden:
            lin = nn.Linear(n_in, h)
            nn.init.orthogonal_(lin.weight, math.sqrt(2))
            nn.init.zeros_(lin.bias)
            layers += [lin, nn.Tanh()]
            n_in = h
        lin = nn.Linear(n_in, n_out)
        nn.init.orthogonal_(lin.weight, gain_out)
        nn.init.zeros_(lin.bias)
        return nn.Sequential(*layers, lin)

    actor, critic = trunk(4, 0.01), trunk(1, 1.0)
    log_std = nn.Parameter(torch.zeros(4))
    params = list(actor.parameters()) + [log_std] + list(critic.parameters())
    opt = torch.optim.Adam(params, lr=3e-4, eps=1e-5)
    g = torch.Generator().manual_seed(0)
    n = mb * 2
    x = torch.randn(n, obs, generator=g)
    a = torch.randn(n, 4, generator=g)
    logp_old = torch.randn(n, generator=g) * 0.1 - 5.0
    adv_all, ret_all, v_old_all = (torch.randn(n, generator=g) for _ in range(3))
    idx = torch.randperm(n, generator=g)[:mb]

    def step():
        b = idx
        mu = actor(x[b])
        v = critic(x[b]).squeeze(-1)
        std = log_std.exp()
        logp = (-0.5 * ((a[b] - mu) / std) ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(1)
        adv = adv_all[b]
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        ratio = (logp - logp_old[b]).exp()
        pg = torch.max(-adv * ratio, -adv * ratio.clamp(0.8, 1.2)).mean()
        vc = v_old_all[b] + (v - v_old_all[b]).clamp(-0.2, 0.2)
        vl = 0.5 * torch.max((v - ret_all[b]) ** 2, (vc - ret_all[b]) ** 2).mean()
        ent = (log_std + 0.5 + 0.5 * math.log(2 * math.pi)).sum()
        loss = pg - 0.0 * ent + 0.5 * vl
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(params, 0.5)
        opt.step()

    t, spread = _time(step, seconds, repeats)
    torch.set_num_threads(1)  # the per-core figure, in CPU time
    cpu = {}
    _time(step, seconds / 2, max(1, repeats - 1), cpu)
    torch.set_num_threads(threads)
    return {
        "samples_per_s": mb / t,
        "ms_per_minibatch": 1e3 * t,
        "spread": spread,
        "samples_per_cpu_s_1t": mb / cpu["s"],
        "threads": threads,
        "version": torch.__version__,
    }


def bench_matmul(threads, seconds):
    from navi_nb.learn.blas import set_blas_threads

    n = 4096
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    set_blas_threads(threads)
    try:
        t, spread = _time(lambda: a @ b, seconds, 2)
    finally:
        set_blas_threads(1)
    cpu = {}
    _time(lambda: a @ b, seconds / 2, 1, cpu)
    return {
        "gflops": 2 * n**3 / t / 1e9,
        "threads": threads,
        "spread": spread,
        "gflops_per_cpu_s_1t": 2 * n**3 / cpu["s"] / 1e9,
    }


def _table(title, *columns):
    from rich.table import Table

    table = Table(title=title)
    for k, col in enumerate(columns):
        table.add_column(col, justify="left" if k < 2 else "right", no_wrap=True)
    return table


def _rows(res):
    """(net name, who, navi shard entry or None, torch entry or None, net entry) per row, in order: each net's
    shard counts, then its PyTorch peer."""
    for name, entry in res["nets"].items():
        for k, e in entry["shards"].items():
            yield name, f"navi {k} sh", e, None, entry
        if entry.get("torch"):
            tr = entry["torch"]
            yield name, f"torch {tr['threads']} thr", None, tr, entry


def rate_tables(res) -> list:
    """The figures as tables that read whole at 80 columns: the networks, the rates, the FLOP rates and
    critical paths, the rates per CPU-second (``--json`` of ``navi-nb bench`` keeps every field)."""
    nets = _table("PPO networks (separate tanh trunks, 4 actions)", "net", "obs", "hidden", "minibatch", "params")
    for name, entry in res["nets"].items():
        nets.add_row(
            name,
            str(entry["obs"]),
            " x ".join(map(str, entry["hidden"])),
            f"{entry['minibatch']:,}",
            f"{entry['n_params']:,}",
        )
    rates = _table(
        f"PPO update rate: one minibatch = gather, forward, loss, backward, clip, Adam (gemm={res['gemm']})",
        "net",
        "who",
        "samples/s",
        "spread",
        "vs 1 shard",
        "vs torch",
    )
    flop = _table(
        f"PPO FLOP rate (NumPy matmul: {res['matmul']['gflops']:.1f} GFLOP/s) and critical path",
        "net",
        "who",
        "GFLOP/s",
        "% matmul",
        "critical ms",
        "idle est.",
    )
    core = _table(
        f"PPO per CPU-second, 1 thread (matmul: {res['matmul']['gflops_per_cpu_s_1t']:.1f} GFLOP/CPU-s)",
        "net",
        "who",
        "samples/CPU-s",
        "vs torch",
        "% matmul",
    )
    for name, who, e, tr, _entry in _rows(res):
        if e is not None:
            rates.add_row(
                name,
                who,
                f"{e['samples_per_s']:,.0f}",
                f"{100 * e['spread']:.0f}%",
                f"{e['speedup_vs_1']:.2f}x",
                f"{e['vs_torch']:.2f}x" if e.get("vs_torch") else "-",
            )
            crit = e.get("critical_ms_per_minibatch")
            flop.add_row(
                name,
                who,
                f"{e['gflops']:.1f}",
                f"{e['pct_matmul']:.0f}%",
                f"{crit:.3f}" if crit else "-",
                f"{e['idle_speedup_estimate']:.2f}x" if e.get("idle_speedup_estimate") else "-",
            )
            if "samples_per_cpu_s" in e:
                core.add_row(
                    name,
                    who,
                    f"{e['samples_per_cpu_s']:,.0f}",
                    f"{e['per_core_vs_torch']:.2f}x" if e.get("per_core_vs_torch") else "-",
                    f"{e['per_core_pct_matmul']:.0f}%",
                )
        else:
            rates.add_row(name, who, f"{tr['samples_per_s']:,.0f}", f"{100 * tr['spread']:.0f}%", "", "1.00x")
            flop.add_row(name, who, f"{tr['gflops']:.1f}", f"{tr['pct_matmul']:.0f}%", "", "")
            core.add_row(name, who, f"{tr['samples_per_cpu_s_1t']:,.0f}", "1.00x", f"{tr['per_core_pct_matmul']:.0f}%")
    return [nets, rates, flop] + ([core] if core.row_count else [])


def run(args) -> dict:
    import numba
    from rich.console import Console

    import navi_nb  # noqa: F401  (BLAS pin)
    from navi_nb.bench.machine import machine_info, print_machine
    from navi_nb.bench.peers import PeerError, call_in_child, peer_available
    from navi_nb.learn.blas import GEMM_BACKEND

    console = Console()
    if not console.is_terminal:
        console = Console(width=200)
    if not hasattr(args, "bench_name"):  # called directly, not through `navi-nb bench`
        print_machine(console)
    cap = numba.config.NUMBA_NUM_THREADS
    shards = list(args.shards)
    shards = [s for s in shards if 1 <= s <= cap] or [1]
    # PyTorch runs in a child process (navi_nb.bench.peers): its thread pools stay out of this one
    have_torch = not args.no_torch and peer_available("torch")
    torch_note = "" if have_torch or args.no_torch else "; PyTorch not installed"
    from navi_nb.cores import allowed_cores

    allowed = allowed_cores().allowed
    res = {"machine": machine_info(), "gemm": GEMM_BACKEND, "nets": {}}
    t_start = time.perf_counter()
    mm = bench_matmul(allowed, args.seconds)
    res["matmul"] = mm
    summary = [["numpy matmul GFLOP/s", f"{mm['gflops']:.1f} ({allowed} threads)"]]
    for name in [n.strip() for n in args.nets.split(",") if n.strip()]:
        spec = NETS[name]
        obs = spec["obs"] or default_obs_dim()
        hidden, mb = spec["hidden"], spec["minibatch"]
        r = bench_navi(obs, hidden, mb, shards, args.seconds, args.repeats)
        flops = net_flops(obs, hidden)
        tr = None
        if have_torch:
            try:
                tr = call_in_child(
                    "navi_nb.bench.ppo.bench_torch",
                    obs=obs,
                    hidden=list(hidden),
                    mb=mb,
                    seconds=args.seconds,
                    repeats=args.repeats,
                    threads=allowed,
                )
            except PeerError as exc:
                console.print(f"[yellow]no PyTorch peer: {exc}[/]")
                have_torch, torch_note = False, f"; PyTorch peer failed ({exc})"
        entry = {
            "obs": obs,
            "hidden": list(hidden),
            "minibatch": mb,
            "n_params": r["n_params"],
            "flops_per_sample": flops,
            "modes": r["modes"],
            "shards": {},
            "torch": tr,
        }
        base = r[shards[0]]["samples_per_s"]
        crit1 = r[shards[0]].get("critical_ms_per_minibatch")
        for k in shards:
            sps = r[k]["samples_per_s"]
            gf = sps * flops / 1e9
            e = dict(
                r[k],
                gflops=gf,
                pct_matmul=100 * gf / mm["gflops"],
                speedup_vs_1=sps / base,
                vs_torch=(sps / tr["samples_per_s"]) if tr else None,
            )
            if "samples_per_cpu_s" in e:
                cps = e["samples_per_cpu_s"]
                e["per_core_vs_torch"] = cps / tr["samples_per_cpu_s_1t"] if tr else None
                e["per_core_pct_matmul"] = 100 * cps * flops / 1e9 / mm["gflops_per_cpu_s_1t"]
            crit = e.get("critical_ms_per_minibatch")
            if crit and crit1:
                e["idle_speedup_estimate"] = crit1 / crit
            entry["shards"][k] = e
            summary.append([f"{name} {k} shard(s) samples/s", f"{sps:,.0f}"])
        if tr:
            tr["gflops"] = tr["samples_per_s"] * flops / 1e9
            tr["pct_matmul"] = 100 * tr["gflops"] / mm["gflops"]
            tr["per_core_pct_matmul"] = 100 * tr["samples_per_cpu_s_1t"] * flops / 1e9 / mm["gflops_per_cpu_s_1t"]
            summary.append([f"{name} torch samples/s", f"{tr['samples_per_s']:,.0f}"])
        res["nets"][name] = entry
    numba.set_num_threads(cap)
    for table in rate_tables(res):
        console.print(table)
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    res["loadavg"] = load
    wait = os.environ.get("OMP_WAIT_POLICY", "unset")
    spin = os.environ.get("GOMP_SPINCOUNT", "unset (GNU default 300000)")
    res["omp_wait_policy"], res["gomp_spincount"] = wait, spin
    res["seconds"] = time.perf_counter() - t_start
    console.print(
        f"numpy float32 matmul 4096^2: {mm['gflops']:.1f} GFLOP/s with {allowed} BLAS threads "
        f"(spread {100 * mm['spread']:.0f}%), {mm['gflops_per_cpu_s_1t']:.1f} GFLOP per CPU-second "
        f"on 1 thread" + torch_note
    )
    console.print(
        f"load average {load}: on a shared machine wall-clock rates and the 2-shard "
        "speedup are only as good as the idle cores; the per-CPU-second columns are not "
        "inflated by other processes"
    )
    console.print(
        f"OMP_WAIT_POLICY={wait}, GOMP_SPINCOUNT={spin}, threading layer "
        f"{numba.threading_layer()}. 'critical path': CPU time of the busiest thread per "
        "minibatch, in the quietest timing round; where waiting threads sleep instead of "
        "spinning (passive waits, or a short spin count) it is about the wall-clock time "
        "on idle cores, less wake-up latencies, so 'idle est.' estimates the speed-up an "
        "idle machine would show; with long spins it counts the spinning and means little"
    )
    res["summary"] = summary
    return res
