"""Training over MPI ranks: who holds which actor blocks, and the exchanges that keep the bits.

A run's actors are cut into fixed blocks (``actor_block``; ``navi_nb.learn.blocks``). With ``R`` ranks,
rank ``r`` holds a contiguous run of blocks (the first ``n_blocks % R`` ranks one more than the rest),
steps them in its own ``NavEnv`` (``first_block`` set, so each block draws from its own generators),
collects their rollout rows and computes their part of each minibatch's gradient. The blocks' sums meet
in :class:`RankExchange`: ``Allgatherv`` of fixed-size rows, concatenated in rank order (which is block
order), after which every rank does the same additions (``PPO.minibatches_exchanged``). MPI's own
``Allreduce`` is not used: it does not promise an order of additions.

``mpi4py`` is imported only when asked (:func:`world`), so the package works without it; the ``mpi``
extra installs it with the ``mpich`` wheel (``pip install -e ".[mpi]"``).
"""
from __future__ import annotations

import os
import socket
import time

import numpy as np

from navi_nb.errors import NaviError

LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS", "HYDRA_CONTROL_FD")
"""Environment variables an MPI launcher sets in the processes it starts (Open MPI, MPICH/Hydra, PMIx)."""


class RankError(NaviError):
    """MPI requested but unusable, or ranks that do not fit the run."""


def launched_by_mpi(environ=None) -> bool:
    """True when an MPI launcher (``mpiexec``, ``srun`` with PMI) started this process with more than one
    rank; ``mpi4py`` is not imported to find out."""
    env = os.environ if environ is None else environ
    for name in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"):
        try:
            if int(env.get(name, "1")) > 1:
                return True
        except ValueError:
            continue
    return False


def world():
    """``mpi4py``'s ``COMM_WORLD`` (imports ``mpi4py``), or a :class:`RankError` that says how to install it."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise RankError(f"training over MPI ranks needs mpi4py ({exc}); install the mpi extra: "
                        "pip install -e \".[mpi]\"") from None
    return MPI.COMM_WORLD


def split_blocks(n_blocks, n_ranks):
    """Each rank's contiguous ``(first, stop)`` blocks, in rank order."""
    n_blocks, n_ranks = int(n_blocks), int(n_ranks)
    if n_ranks > n_blocks:
        raise RankError(f"{n_ranks} ranks for {n_blocks} actor blocks: every rank needs at least one block "
                        "(more actors, a smaller actor_block, or fewer ranks)")
    base, extra = divmod(n_blocks, n_ranks)
    out, a = [], 0
    for r in range(n_ranks):
        b = a + base + (1 if r < extra else 0)
        out.append((a, b))
        a = b
    return out


class RankExchange:
    """The exchange ``PPO.exchange`` uses: this rank's blocks, every rank's, and ``allgather``.

    ``allgather(rows)``: every rank's ``rows`` (same dtype and row width everywhere; any row count)
    concatenated in rank order, on every rank (``Allgatherv``). ``bytes_sent`` and ``seconds`` add up
    what this rank sent and the time spent in the exchange (waiting included)."""

    def __init__(self, comm, n_blocks):
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.n_blocks = int(n_blocks)
        self.ranges = split_blocks(self.n_blocks, self.size)
        self.first_block = self.ranges[self.rank][0]
        self.bytes_sent = 0
        self.seconds = 0.0
        self.calls = 0

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
            out[name] = np.asarray(v)[first_block:first_block + n_blocks]
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
