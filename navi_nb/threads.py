"""How many threads navi_nb's parallel kernels use when it is embedded in another program.

navi_nb's kernels run on threads: the per-tick ones (ray tracing, motion, the
observation) and the world compiler's on a pool of Python threads that call
compiled range functions without the GIL (:func:`run_ranges`), the learning
kernels on Numba's own pool. Both take their count from Numba's count in the
calling thread, which by default is as large as the machine. Inside a trainer that has its own
pool (PyTorch, JAX, another Numba user), the two pools together can ask for
more threads than there are cores, and throughput collapses. The knob:

- ``navi_nb.set_threads(n)`` (``None``: forget it), or the environment variable ``NAVI_NB_THREADS``
  (read once, when navi_nb first needs a thread count): the threads navi_nb
  uses; ``n`` must lie in 1 .. the cores this process may use (affinity and
  cgroup quota, :func:`navi_nb.cores.allowed_cores`) and at most
  Numba's pool size (``NUMBA_NUM_THREADS``, fixed when Numba loads).
- The Gymnasium adapters and the Stable-Baselines3 adapter take ``threads=`` too; without it they use the
  ``set_threads`` / ``NAVI_NB_THREADS`` value, else their own default (the
  vector adapter half the allowed cores, the single-actor environment 1), and
  apply it only while they step, so the embedding program's own Numba code is
  not affected.

Give the trainer the rest: e.g. ``torch.set_num_threads(allowed - n)``.
The thread count changes no result bits (no kernel reduces across threads).
"""

from __future__ import annotations

import contextlib
import numbers
import os
import threading

from navi_nb.errors import NaviError

ENV_VAR = "NAVI_NB_THREADS"

_chosen: int | None = None  # set by set_threads or read from NAVI_NB_THREADS
_env_read = False


class ThreadsError(NaviError):
    """A thread count navi_nb cannot use."""


def thread_limit() -> int:
    """The most threads navi_nb may use: allowed cores, capped by Numba's pool size."""
    import numba

    from navi_nb.cores import allowed_cores

    return max(1, min(allowed_cores().allowed, int(numba.config.NUMBA_NUM_THREADS)))


def check_threads(n, what="threads") -> int:
    """``n`` as an int if it is a usable thread count, else a ThreadsError naming ``what``."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ThreadsError(f"{what} must be a positive integer, got {n!r}")
    import numba

    from navi_nb.cores import allowed_cores

    cores = allowed_cores()
    if n > cores.allowed:
        raise ThreadsError(f"{what}={n} exceeds the {cores.allowed} cores this process may use ({cores.reason})")
    pool = int(numba.config.NUMBA_NUM_THREADS)
    if n > pool:
        raise ThreadsError(
            f"{what}={n} exceeds Numba's pool of {pool} threads (NUMBA_NUM_THREADS, fixed when "
            f"Numba loads): set NUMBA_NUM_THREADS={n} before starting"
        )
    return int(n)


def set_threads(n: int | None) -> int | None:
    """Use ``n`` threads for navi_nb's kernels from now on; returns ``n``.

    Applies at once to the calling thread (``numba.set_num_threads``) and is
    the default of the Gymnasium adapters created afterwards. ``None`` forgets
    the choice (the adapters fall back to their own defaults; Numba's count in
    this thread is left as it is).
    """
    global _chosen, _env_read
    import numba

    if n is None:
        _chosen, _env_read = None, True
        return None
    n = check_threads(n)
    numba.set_num_threads(n)
    _chosen, _env_read = n, True
    return n


def chosen_threads() -> int | None:
    """The count given to ``set_threads`` or in ``NAVI_NB_THREADS``; None when neither was given."""
    global _chosen, _env_read
    if not _env_read:
        _env_read = True
        text = os.environ.get(ENV_VAR, "").strip()
        if text:
            try:
                value = int(text)
            except ValueError:
                raise ThreadsError(f"{ENV_VAR} must be a positive integer, got {text!r}") from None
            _chosen = check_threads(value, ENV_VAR)
    return _chosen


def resolve_threads(threads, default: int) -> int:
    """An adapter's thread count: ``threads`` if given, else the chosen count, else ``default`` (capped)."""
    if threads is not None:
        return check_threads(threads, "threads")
    chosen = chosen_threads()
    if chosen is not None:
        return chosen
    return max(1, min(int(default), thread_limit()))


@contextlib.contextmanager
def using_threads(n: int):
    """Run the block with ``n`` Numba threads in this thread, then restore the previous count."""
    import numba

    before = numba.get_num_threads()
    if before == n:
        yield
        return
    numba.set_num_threads(n)
    try:
        yield
    finally:
        numba.set_num_threads(before)


class _Ranges:
    """Hands out consecutive ranges of ``[0, n)`` to threads: each range a fraction of what is left
    (guided scheduling), never under ``grain``, so that early ranges are long (few calls) and the last
    ones short (the threads finish together, even when the shared machine stalls one of them). Counts
    the ranges handed out and not yet done, so that the calling thread waits for those only, not for a
    helper that woke too late to find any (its wake-up would add to every call)."""

    def __init__(self, n, threads, grain):
        self.n, self.threads, self.grain = n, threads, grain
        self.next = 0
        self.running = 0
        self.error = None
        self.cond = threading.Condition(threading.Lock())

    def take(self):
        with self.cond:
            lo = self.next
            if lo >= self.n or self.error is not None:
                return None
            hi = min(self.n, lo + max(self.grain, (self.n - lo) // (2 * self.threads)))
            self.next = hi
            self.running += 1
            return lo, hi

    def done(self, error=None):
        with self.cond:
            self.running -= 1
            if error is not None and self.error is None:
                self.error = error
            if self.running == 0:
                self.cond.notify_all()

    def wait(self):
        """Until every range handed out is done; then raise the first error a range raised."""
        with self.cond:
            while self.running:
                self.cond.wait()
        if self.error is not None:
            raise self.error


_pool = None
_pool_lock = threading.Lock()


def _forget_pool():
    # a forked child has none of its parent's threads: it starts a pool of its own when it needs one
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _worker_pool():
    """The process's worker threads (one fewer than Numba's pool size; the calling thread works too)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            from concurrent.futures import ThreadPoolExecutor

            import numba

            _pool = ThreadPoolExecutor(max(1, int(numba.config.NUMBA_NUM_THREADS) - 1), "navi-nb")
        return _pool


def _run_ranges(kernel, ranges, args):
    while (span := ranges.take()) is not None:
        try:
            kernel(span[0], span[1], *args)
        except BaseException as exc:  # handed to the calling thread, which raises it
            ranges.done(exc)
            return
        ranges.done()


def run_ranges(kernel, n, grain, *args):
    """Call ``kernel(lo, hi, *args)`` over consecutive ranges that cover ``[0, n)``, on as many threads
    as Numba's count in this thread (``numba.get_num_threads``, which :func:`set_threads` and
    :func:`using_threads` set), the calling thread one of them.

    ``kernel`` is a compiled function built with ``nogil=True`` whose ranges write disjoint outputs,
    each item computed alone: the results are the same bits at any thread count. This is how the
    per-tick kernels run in parallel without a ``prange``: Numba compiles a ``prange`` loop as a
    separate function with its own wrapper, and links and generates the machine code of everything
    it calls again at each of those levels, several CPU-seconds per kernel on a first run.
    """
    import numba

    n = int(n)
    threads = min(numba.get_num_threads(), max(1, -(-n // grain)))
    if threads <= 1:
        if n > 0:
            kernel(0, n, *args)
        return
    ranges = _Ranges(n, threads, grain)
    pool = _worker_pool()
    for _ in range(threads - 1):
        pool.submit(_run_ranges, kernel, ranges, args)
    _run_ranges(kernel, ranges, args)
    ranges.wait()


class Deferred:
    """``fn(*args)``, computed on one of the worker threads while the caller goes on (:func:`defer`);
    :meth:`result` waits for it. A process forked meanwhile has none of its parent's threads: there it
    computes the value itself, so a result is never waited for in vain."""

    def __init__(self, fn, args):
        import numba

        self.fn, self.args, self.pid = fn, args, os.getpid()
        self.future = None
        self.here = numba.get_num_threads() <= 1  # computed by the caller, now (one thread), not a worker
        if self.here:
            self.value = fn(*args)
            self.args = None
        else:
            self.future = _worker_pool().submit(fn, *args)

    def result(self):
        if self.future is not None:
            if os.getpid() != self.pid:
                self.value = self.fn(*self.args)
            else:
                self.value = self.future.result()
            self.future = self.args = None  # done: the inputs' copies are not kept
        return self.value


def defer(fn, *args) -> Deferred:
    """``fn(*args)`` on one of the worker threads while the caller goes on; with one thread (Numba's
    count in this thread, as :func:`run_ranges` reads it) it runs here, now. ``fn`` must release the GIL
    (a compiled function built with ``nogil=True``) and read nothing the caller changes before the
    result is taken (pass copies). A worker busy with it misses the ranges of a :func:`run_ranges` call
    meanwhile, which the calling thread then takes: the same bits, one thread fewer for that call."""
    return Deferred(fn, args)


class RangeKernel:
    """A compiled range function ``span(lo, hi, *args)``, called as one kernel over all its items:
    ``kernel(*args)`` runs :func:`run_ranges` over ``[0, size(*args))`` with ranges of at least
    ``grain`` items (a number, or a function of the arguments); ``kernel.compile(sig)`` compiles
    ``span`` for ``args`` of the types ``sig`` (a warm-up compiles it without running it).

    Choose the grain so that a range is worth a thread: a helper thread that wakes up takes the GIL
    to pick its range, and on a busy machine it can be descheduled holding it, so work of a few tens
    of microseconds runs faster in the calling thread alone."""

    def __init__(self, span, size, grain):
        self.span, self.size, self.grain = span, size, grain
        self.__name__ = span.__name__
        self.__doc__ = span.__doc__

    def __call__(self, *args):
        grain = self.grain(*args) if callable(self.grain) else self.grain
        run_ranges(self.span, self.size(*args), grain, *args)

    def compile(self, sig):
        from numba import types

        return self.span.compile((types.int64, types.int64) + tuple(sig))
