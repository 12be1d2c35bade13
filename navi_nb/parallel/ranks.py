"""Training over MPI ranks: who holds which actor blocks, and the exchanges that keep the bits.

A run's actors are cut into fixed blocks (``actor_block``; ``navi_nb.learn.blocks``). With ``R`` ranks,
rank ``r`` holds a contiguous run of blocks (the first ``n_blocks % R`` ranks one more than the rest),
steps them in its own ``NavEnv`` (``first_block`` set, so each block draws from its own generators),
collects their rollout rows and computes their part of each minibatch's gradient. The blocks' sums meet
in :class:`RankExchange`, one of two ways (``NAVI_NB_REDUCE``, :func:`reduce_mode`): ``tree`` (default),
the top of the block tree added point to point in the tree's own order (``blocks.rank_tree_schedule``)
and the root broadcast from rank 0; or ``allgather``, every rank's subtree rows gathered on every rank
(``Allgatherv``, in rank order, which is block order), after which every rank adds the top itself
(``PPO.minibatches`` with an exchange: ``exchange_update.py``). MPI's own ``Allreduce`` is not used:
it does not promise an order of additions.

``mpi4py`` is imported only when asked (:func:`world`), so the package works without it; the ``mpi``
extra installs it with the ``mpich`` wheel (``pip install -e ".[mpi]"``).
"""

from __future__ import annotations

import os
import socket
import time

import numpy as np

from navi_nb.errors import NaviError
from navi_nb.parallel.exchange_update import exchange_plan, exchanged_minibatches

LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_STEP_NUM_TASKS")
"""The world size as an MPI launcher tells the processes it starts: Open MPI's ``mpiexec``, MPICH's and
Intel MPI's (PMI), PMIx launchers, SLURM's ``srun`` step."""


class RankError(NaviError):
    """MPI requested but unusable, or ranks that do not fit the run."""


class RanksDisagree(RankError):
    """A refusal every rank reaches together, from one collective comparison (configuration, worlds,
    reduction): the ranks need not ``Abort`` each other, so they end normally, rank 0 printing the line
    (an ``Abort`` can tear the launcher down before it has passed on what the ranks printed)."""


def launched_by_mpi(environ=None) -> bool:
    """True when an MPI launcher (``mpiexec``, ``srun`` with PMI) started this process with more than one
    rank; ``mpi4py`` is not imported to find out."""
    env = os.environ if environ is None else environ
    for name in LAUNCHER_VARS:
        try:
            if int(env.get(name, "1")) > 1:
                return True
        except ValueError:
            continue
    return False


def refuse_unless_same(every, why):
    """Raise :class:`RanksDisagree` naming the first rank whose dict in ``every`` (one per rank, gathered by
    one collective, so every rank raises it together) differs from rank 0's, the key and both values."""
    for r, theirs in enumerate(every):
        for key in dict.fromkeys([*every[0], *theirs]):
            if theirs.get(key) != every[0].get(key):
                raise RanksDisagree(
                    f"rank {r} was started with {key} {theirs.get(key)!r}, rank 0 with {every[0].get(key)!r}: {why}"
                )


def check_same_start(plan: dict):
    """Under an MPI launcher with more than one rank: refuse to start unless every rank is about to do the same
    (``plan``: a new run or a resume, the run folder, printing the config), compared in one allgather before any
    other collective. Ranks given different commands then end together with one line (exit 2) instead of
    waiting in different collectives, or one waiting for a rank that has already ended. Nothing otherwise."""
    if not launched_by_mpi():
        return
    comm = world()
    if comm.Get_size() < 2:
        return
    refuse_unless_same(comm.allgather(dict(plan)), "every rank must be given the same command")


def world():
    """``mpi4py``'s ``COMM_WORLD`` (imports ``mpi4py``), or a :class:`RankError` that says how to install it."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise RankError(
            f'training over MPI ranks needs mpi4py ({exc}); install the mpi extra: pip install -e ".[mpi]"'
        ) from None
    return MPI.COMM_WORLD


def split_blocks(n_blocks, n_ranks):
    """Each rank's contiguous ``(first, stop)`` blocks, in rank order."""
    n_blocks, n_ranks = int(n_blocks), int(n_ranks)
    if n_ranks > n_blocks:
        raise RankError(
            f"{n_ranks} ranks for {n_blocks} actor blocks: every rank needs at least one block "
            "(more actors, a smaller actor_block, or fewer ranks)"
        )
    base, extra = divmod(n_blocks, n_ranks)
    out, a = [], 0
    for r in range(n_ranks):
        b = a + base + (1 if r < extra else 0)
        out.append((a, b))
        a = b
    return out


REDUCE_ENV = "NAVI_NB_REDUCE"
"""How the ranks add up the blocks' sums: ``tree`` (point to point along the block tree, then a
broadcast; the default) or ``allgather`` (every rank gathers every rank's subtree sums and adds the
top of the tree itself). Both make the same additions, so the same bits."""
REDUCE_MODES = ("tree", "allgather")
_TAG_TREE = 0x7EE


def reduce_mode(environ=None) -> str:
    """The reduction ``NAVI_NB_REDUCE`` asks for (default ``tree``); anything else is refused."""
    env = os.environ if environ is None else environ
    mode = env.get(REDUCE_ENV, "").strip().lower() or REDUCE_MODES[0]
    if mode not in REDUCE_MODES:
        raise RankError(f"{REDUCE_ENV}={env.get(REDUCE_ENV)!r}: must be one of {', '.join(REDUCE_MODES)}")
    return mode


class RankExchange:
    """The exchange ``PPO.exchange`` uses: this rank's blocks, every rank's, and the two ways to add up.

    ``allgather(rows)``: every rank's ``rows`` (same dtype and row width everywhere; any row count)
    concatenated in rank order, on every rank (``Allgatherv``). ``tree_reduce(bufs, schedule, add)``:
    the block tree's top added point to point (``blocks.rank_tree_schedule``), the root broadcast from
    rank 0. ``mode`` (``reduce_mode``, the same on every rank or refused) says which ``PPO`` uses.
    ``bytes_sent`` and ``seconds`` add up what this rank sent (rank 0 counts the broadcast once) and the
    time spent in the exchange (waiting, and the tree's few additions, included)."""

    def __init__(self, comm, n_blocks, mode=None):
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.n_blocks = int(n_blocks)
        self.ranges = split_blocks(self.n_blocks, self.size)
        self.first_block = self.ranges[self.rank][0]
        self.mode = reduce_mode() if mode is None else mode
        every = comm.allgather(self.mode)
        if len(set(every)) > 1:
            r = next(r for r, m in enumerate(every) if m != every[0])
            raise RanksDisagree(
                f"rank {r} was started with {REDUCE_ENV}={every[r]}, rank 0 with {every[0]}: every rank must "
                "reduce the same way"
            )
        self.bytes_sent = 0
        self.seconds = 0.0
        self.calls = 0
        self._schedules = {}

    def schedule(self):
        """This rank's ``blocks.rank_tree_schedule`` (cached)."""
        from navi_nb.learn.blocks import rank_tree_schedule

        got = self._schedules.get("tree")
        if got is None:
            got = self._schedules["tree"] = rank_tree_schedule(self.n_blocks, self.ranges, self.rank)
        return got

    def tree_reduce(self, bufs, add):
        """The whole tree's sum on every rank. ``bufs``: arrays with the schedule's ``n_rows`` rows (a row
        ``i`` of each together make one node's sums; rows ``0 ..`` hold this rank's cover nodes);
        ``add(ops)`` adds rows along ``ops`` in every buffer (``blocks.tree_ops``' rows). Sends, receives
        and additions run in the schedule's order; rank 0 then broadcasts the root's row. Returns each
        buffer's root row (1, width) (new arrays)."""
        from mpi4py import MPI

        from navi_nb.learn.blocks import ADD, SEND

        t0 = time.perf_counter()
        _, steps, root = self.schedule()
        widths = [b[0].nbytes for b in bufs]
        msg = np.empty(sum(widths), np.uint8)

        def pack(row):
            o = 0
            for b, n in zip(bufs, widths):
                msg[o : o + n] = b[row].view(np.uint8)
                o += n

        for step in steps:
            if step[0] == ADD:
                add(step[1])
            elif step[0] == SEND:
                pack(step[2])
                self.comm.Send([msg, MPI.BYTE], dest=step[1], tag=_TAG_TREE)
                self.bytes_sent += msg.nbytes
            else:
                self.comm.Recv([msg, MPI.BYTE], source=step[1], tag=_TAG_TREE)
                o = 0
                for b, n in zip(bufs, widths):
                    b[step[2]].view(np.uint8)[:] = msg[o : o + n]
                    o += n
        if self.rank == 0:
            pack(root)
            self.bytes_sent += msg.nbytes
        self.comm.Bcast([msg, MPI.BYTE], root=0)
        out, o = [], 0
        for b, n in zip(bufs, widths):
            out.append(msg[o : o + n].copy().view(b.dtype).reshape(1, -1))
            o += n
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        return out

    def minibatches(self, job):
        """Run a ``learn.ppo.Job`` (``PPO.minibatches``' call) with the sums combined over the ranks
        (``exchange_update.exchanged_minibatches``). Returns the minibatches done."""
        plan = self._schedules.get("update")
        if plan is None:
            plan = self._schedules["update"] = exchange_plan(self.n_blocks, tuple(self.ranges), self.rank)
        return exchanged_minibatches(self, job, plan)

    @property
    def local_blocks(self):
        a, b = self.ranges[self.rank]
        return b - a

    def allgather(self, rows):
        from mpi4py import MPI

        t0 = time.perf_counter()
        rows = np.ascontiguousarray(rows)
        width = int(np.prod(rows.shape[1:]))
        counts = np.array(self.comm.allgather(rows.shape[0]), np.int64)
        out = np.empty((int(counts.sum()),) + rows.shape[1:], rows.dtype)
        mpi_type = MPI._typedict[rows.dtype.char]
        self.comm.Allgatherv([rows, mpi_type], [out, (counts * width, None), mpi_type])
        self.bytes_sent += rows.nbytes
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        return out


def gather_env_state(comm, state):
    """The whole run's environment state from every rank's part, on every rank: per-actor arrays and the
    per-block generator arrays concatenated in rank order (block order); ``has_reset`` from rank 0."""
    parts = comm.allgather(state)
    out = {}
    for name, v in parts[0].items():
        if np.ndim(v) == 0:
            out[name] = v
        else:
            out[name] = np.concatenate([p[name] for p in parts])
    return out


def env_state_part(state, block, first_block, n_blocks):
    """The part of a whole run's environment ``state`` that blocks ``first_block .. + n_blocks`` hold."""
    a, b = first_block * block, (first_block + n_blocks) * block
    out = {}
    for name, v in state.items():
        if np.ndim(v) == 0:
            out[name] = v
        elif name.startswith("rng_"):
            out[name] = np.asarray(v)[first_block : first_block + n_blocks]
        else:
            out[name] = np.asarray(v)[a:b]
    return out


def threads_per_rank(comm, allowed):
    """Numba threads for this rank: the cores this process may use (``allowed``) divided by the ranks
    on its host (at least 1). Returns ``(threads, hosts, ranks_on_host)`` (``hosts``: host name ->
    ranks there, for the report)."""
    names = comm.allgather(socket.gethostname())
    here = names[comm.Get_rank()]
    hosts = {}
    for n in names:
        hosts[n] = hosts.get(n, 0) + 1
    return max(1, int(allowed) // hosts[here]), hosts, hosts[here]


class NullMetrics:
    """What ranks other than 0 log: nothing (rank 0 alone writes the run folder)."""

    def write(self, row):
        pass

    def close(self):
        pass


class RankContext:
    """One rank's place in a training run: its blocks and actors, the exchange, and the collectives the
    trainer needs (state gathers, episode statistics, agreement checks). Rank 0 alone writes files."""

    def __init__(self, comm, actors, actor_block):
        from navi_nb.learn.blocks import block_size

        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.block = block_size(actor_block, actors)
        self.exchange = RankExchange(comm, int(actors) // self.block)
        self.first_block = self.exchange.first_block
        self.first_actor = self.first_block * self.block
        self.n_actors = self.exchange.local_blocks * self.block
        self.total_actors = int(actors)
        self.threads, self.hosts, self.ranks_on_host = 1, {}, 1
        self.allowed_cores = 1
        self.topology_info = None  # :meth:`topology`, once the threads are set

    @property
    def is_root(self):
        return self.rank == 0

    def check_same(self, facts: dict):
        """Refuse to start unless every rank reports the same ``facts`` (config hash, package versions)."""
        refuse_unless_same(self.comm.allgather(dict(facts)), "every rank must run the same configuration and versions")

    def check_worlds(self, world_set):
        """Refuse to start unless every rank loaded the same worlds: each rank's world digests
        (``gmdag.world_digest``, everything a run reads of a world) gathered once and compared with rank 0's;
        the first differing world and rank are named (a rank whose world cache holds another compile of a
        world, e.g. another host's cache)."""
        from navi_nb.world.gmdag import world_digest

        mine = (socket.gethostname(), [world_digest(w) for w in world_set.worlds])
        every = self.comm.allgather(mine)
        root = every[0][1]
        for r, (host, theirs) in enumerate(every):
            for k in range(max(len(root), len(theirs))):
                a = root[k] if k < len(root) else None
                b = theirs[k] if k < len(theirs) else None
                if a != b:
                    name = world_set.names[k] if k < len(world_set.names) else f"#{k}"
                    raise RanksDisagree(
                        f"rank {r} on {host} loaded world {k} ({name}) with content {b or 'missing'}, rank 0 "
                        f"with {a or 'missing'}: every rank must load the same worlds (check that rank's world "
                        "cache, NAVI_NB_CACHE)"
                    )

    def bcast(self, obj):
        return self.comm.bcast(obj, root=0)

    def set_threads(self):
        """Numba threads for this rank: the cores it may use divided by the ranks on its host."""
        import numba

        from navi_nb.cores import allowed_cores

        self.allowed_cores = allowed_cores().allowed
        self.threads, self.hosts, self.ranks_on_host = threads_per_rank(self.comm, self.allowed_cores)
        self.threads = min(self.threads, numba.config.NUMBA_NUM_THREADS)
        numba.set_num_threads(self.threads)
        return self.threads

    def topology(self) -> dict:
        """Hosts, ranks per host, threads and actors per rank, and why (the cores each rank may use)."""
        every = self.comm.allgather(
            {
                "rank": self.rank,
                "host": socket.gethostname(),
                "threads": self.threads,
                "allowed_cores": self.allowed_cores,
                "actors": self.n_actors,
                "blocks": list(self.exchange.ranges[self.rank]),
            }
        )
        return {
            "ranks": self.size,
            "hosts": dict(self.hosts),
            "actor_block": self.block,
            "per_rank": every,
            "why": "threads per rank = cores this rank may use (affinity and cgroup quota) // ranks on "
            "its host; blocks split contiguously, the first ranks one more when uneven",
        }

    def note_ram(self, world_set):
        """Add each rank's RAM use and the world's to :meth:`topology`'s dict (a collective): the world
        set's packed layout size and file (``WorldSet.map_layouts``), and per rank its RSS and PSS and
        the layout mapping's RSS and PSS (``/proc/self/smaps``): ranks on one host that share the
        mapped pages each count a share of them in PSS."""
        from navi_nb.world.layout_cache import mapping_of

        packed = world_set.packed
        self.comm.Barrier()  # every rank has mapped its world before any measures its share
        sizes = ram_sizes() or {}
        mapping = mapping_of(packed.child) if packed.mapped is not None else None
        every = self.comm.allgather(
            {
                "rank": self.rank,
                "rss": sizes.get("rss"),
                "pss": sizes.get("pss"),
                "world_rss": mapping[2] if mapping else None,
                "world_pss": mapping[1] if mapping else None,
            }
        )
        info = dict(self.topology_info or {})
        info["world"] = {
            "layout_bytes": int(packed.nbytes),
            "mapped_from": str(packed.mapped) if packed.mapped is not None else None,
            "note": packed.map_note,
        }
        info["ram"] = every
        self.topology_info = info
        return info

    def gather_env_state(self, state):
        return gather_env_state(self.comm, state)

    def env_part(self, full):
        return env_state_part(full, self.block, self.first_block, self.exchange.local_blocks)

    def episodes(self, ep):
        """The whole run's finished-episode statistics (every rank's, in rank order) and reward mean."""
        every = self.comm.allgather((ep, self.n_actors))
        out = {k: np.concatenate([e[k] for e, _ in every]) for k in ep if k != "reward_mean"}
        out["reward_mean"] = float(sum(e["reward_mean"] * n for e, n in every) / self.total_actors)
        return out


def abort_on_failure(exc):
    """Under an MPI launcher with more than one rank: one line naming this rank and ``exc``, then stop
    every rank (``Abort``), so no rank waits forever on a collective. A :class:`RanksDisagree` every rank
    raised together ends each rank with exit status 2 instead, the line from rank 0 alone. Returns only
    when not under MPI."""
    import sys

    if not launched_by_mpi():
        return
    try:
        comm = world()
    except RankError:
        return
    if comm.Get_size() < 2:
        return
    what = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
    line = f"navi-nb: rank {comm.Get_rank()} of {comm.Get_size()} on {socket.gethostname()} stopped the run: {what}"
    agreed = isinstance(exc, RanksDisagree)  # every rank raised it together: end normally, rank 0 says why
    if agreed and comm.Get_rank() != 0:
        sys.exit(2)
    sys.stderr.flush()
    try:  # the whole line in one write: ranks that fail together print whole lines, never run into one
        os.write(sys.stderr.fileno(), (" ".join(line.split()) + "\n").encode(errors="replace"))
    except (OSError, ValueError, AttributeError):
        print(line, file=sys.stderr, flush=True)
    if agreed:
        sys.exit(2)
    comm.Abort(2 if not isinstance(exc, KeyboardInterrupt) else 130)


def rank_context(actors, actor_block):
    """A :class:`RankContext` when an MPI launcher started this process with more than one rank, else None."""
    if not launched_by_mpi():
        return None
    comm = world()
    if comm.Get_size() < 2:
        return None
    return RankContext(comm, actors, actor_block)


def ram_sizes():
    """This process's resident and proportional set sizes in bytes (``/proc/self/smaps_rollup``; pages
    shared with other processes count fully in RSS, by share in PSS); None where not readable."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
    except OSError:
        return None
    kb = {k.strip(): v.split()[0] for k, v in fields.items() if v.strip().endswith("kB")}
    return {"rss": int(kb.get("Rss", 0)) * 1024, "pss": int(kb.get("Pss", 0)) * 1024}


def run_under_mpiexec(n, navi_args, marker, timeout=3600):
    """``mpiexec -n n python -m navi_nb ARGS`` (the ``mpiexec`` next to this Python, else on the PATH);
    returns the JSON objects of its output lines that start with ``marker``."""
    import json
    import shutil
    import subprocess
    import sys

    exe = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    if exe is None:
        raise RankError(f'{n} ranks need mpiexec: install the mpi extra (pip install -e ".[mpi]") or an MPI')
    out = subprocess.run(
        [exe, "-n", str(int(n)), sys.executable, "-m", "navi_nb", *navi_args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise RankError(f"mpiexec -n {n} navi-nb {' '.join(navi_args[:2])} failed: {tail}")
    return [json.loads(line[len(marker) :]) for line in out.stdout.splitlines() if line.startswith(marker)]


def print_topology(console, info):
    """The run's ranks as a table (``RankContext.topology``'s dict): host, blocks, actors, threads, cores."""
    from rich.table import Table

    t = Table(title=f"ranks: {info['ranks']} on {len(info['hosts'])} host(s), blocks of {info['actor_block']} actors")
    for c in ("rank", "host", "blocks", "actors", "threads", "cores it may use"):
        t.add_column(c)
    for r in info["per_rank"]:
        a, b = r["blocks"]
        t.add_row(
            str(r["rank"]), r["host"], f"{a}..{b - 1}", str(r["actors"]), str(r["threads"]), str(r["allowed_cores"])
        )
    console.print(t)
    console.print(f"[dim]{info['why']}[/]")
    world, ram = info.get("world"), info.get("ram")
    if world and ram:
        where = f"mapped read-only from {world['mapped_from']}" if world["mapped_from"] else "decoded in each rank"
        console.print(f"world layout: {world['layout_bytes'] / 2**20:.1f} MiB, {where}")
        mib = lambda x: "-" if x is None else f"{x / 2**20:.1f}"  # noqa: E731
        for m in ram:
            console.print(
                f"  rank {m['rank']}: RSS {mib(m['rss'])} MiB, PSS {mib(m['pss'])} MiB; world mapping "
                f"RSS {mib(m['world_rss'])} MiB, PSS {mib(m['world_pss'])} MiB"
            )
