"""navi_nb.threads.run_ranges: the ranges cover every item once, on the threads Numba's count allows,
with the same results at any count, and in a forked child too; a deferred value (`defer`) likewise."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import numba
import numpy as np
import pytest
from numba import njit

import navi_nb  # noqa: F401
from navi_nb.threads import RangeKernel, defer, run_ranges, using_threads


@njit(cache=True, nogil=True)
def _square_span(i0, i1, x, out, visits):
    for i in range(i0, i1):
        out[i] = x[i] * x[i]
        visits[i] += 1


@pytest.mark.parametrize("n, grain", [(0, 4), (1, 4), (7, 4), (1000, 1), (1000, 64), (4099, 256)])
def test_ranges_cover_every_item_once_at_any_thread_count(n, grain):
    x = np.arange(n, dtype=np.float64) * 0.37
    expected = x * x
    for threads in range(1, numba.config.NUMBA_NUM_THREADS + 1):
        out = np.full(n, np.nan)
        visits = np.zeros(n, np.int64)
        with using_threads(threads):
            run_ranges(_square_span, n, grain, x, out, visits)
        assert np.array_equal(visits, np.ones(n, np.int64)), threads
        assert np.array_equal(out, expected), threads


def test_ranges_run_on_several_threads_and_the_calling_thread_is_one_of_them():
    seen = set()

    def record(i0, i1):
        seen.add(threading.get_ident())
        threading.Event().wait(0.01)  # long enough for a helper to take a range too

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("Numba's pool has one thread here: nothing to run beside the calling thread")
    with using_threads(2):
        run_ranges(record, 64, 1)
    assert threading.get_ident() in seen
    assert len(seen) == 2
    with using_threads(1):
        seen.clear()
        run_ranges(record, 64, 1)
    assert seen == {threading.get_ident()}


def test_a_range_kernel_compiles_what_a_call_runs_and_reports_errors():
    kernel = RangeKernel(_square_span, lambda x, out, visits: x.shape[0], 16)
    x = np.ones(40)
    out, visits = np.zeros(40), np.zeros(40, np.int64)
    sig = tuple(numba.typeof(a) for a in (x, out, visits))
    kernel.compile(sig)
    assert (numba.types.int64, numba.types.int64) + sig in _square_span.signatures
    kernel(x, out, visits)
    assert np.array_equal(visits, np.ones(40, np.int64))

    def fail(i0, i1):
        raise ValueError(f"range {i0}..{i1}")

    with pytest.raises(ValueError, match="range"):
        run_ranges(fail, 10, 1)


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="needs fork")
def test_a_forked_child_runs_ranges_on_threads_of_its_own():
    x = np.arange(5000, dtype=np.float64)
    with using_threads(min(2, numba.config.NUMBA_NUM_THREADS)):
        run_ranges(_square_span, 5000, 16, x, np.zeros(5000), np.zeros(5000, np.int64))  # the parent's pool
        pid = os.fork()
        if pid == 0:  # the child: a pool started before the fork has no threads here
            code = 1
            try:
                out, visits = np.zeros(5000), np.zeros(5000, np.int64)
                run_ranges(_square_span, 5000, 16, x, out, visits)
                code = 0 if np.array_equal(out, x * x) and np.all(visits == 1) else 2
            finally:
                os._exit(code)
        deadline = time.monotonic() + 60
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        if done[0] == 0:  # waiting for helpers that do not exist in the child
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child's run_ranges hung")
    status = done[1]
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def _slow_square(x, seconds):
    time.sleep(seconds)
    return x * x


def test_a_deferred_value_is_the_functions_on_any_thread_count_and_in_a_forked_child():
    with using_threads(1):
        job = defer(_slow_square, 3.0, 0.0)
        assert job.future is None and job.here and job.result() == 9.0  # one thread: computed at once, here
    if numba.config.NUMBA_NUM_THREADS < 2:
        return
    with using_threads(2):
        caller = threading.get_ident()
        job = defer(threading.get_ident)
        assert not job.here and job.result() != caller  # on a worker thread
        job = defer(_slow_square, 4.0, 0.5)  # still running when the process forks
        pid = os.fork()
        if pid == 0:  # the child has none of the parent's threads: it computes the value itself
            code = 1
            try:
                code = 0 if job.result() == 16.0 else 2
            finally:
                os._exit(code)
        assert job.result() == 16.0
        deadline = time.monotonic() + 60
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        if done[0] == 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child waited for a deferred value in vain")
    status = done[1]
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
