"""The fuzz runner: one case in this process (``run_case``), or many in a pool of worker processes
(``run_fuzz``), for any target.

A case is a pure function of ``(target, seed, index)``, so results do not depend on scheduling (each case
draws from its own generator) and a failure is replayed in-process by its index. Workers take batches of
case indices; the parent watches each one, records a dead worker's case as a ``crash`` and a silent one's
as a ``hang`` (killing it), and hands the rest of the batch to a fresh worker. Every other outcome comes
from the one classifier, ``navi_nb.fuzz.outcomes.classify``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections import deque

import numpy as np

from navi_nb.fuzz import cache, checkpoint, gmdag, mesh, runfolder
from navi_nb.fuzz.cases import write_case
from navi_nb.fuzz.outcomes import Report, classify

TARGETS = {
    "gmdag": gmdag.TARGET,
    "mesh": mesh.TARGET,
    "checkpoint": checkpoint.TARGET,
    "cache": cache.TARGET,
    "run-folder": runfolder.TARGET,
}


def _clear(folder):
    for name in os.listdir(folder):
        try:
            os.unlink(os.path.join(folder, name))
        except OSError:
            pass


def run_case(target, bases, seed: int, index: int, folder) -> tuple:
    """One case in this process: (outcome, mutator, mode, detail). Never raises for the case's faults.

    target: a name in TARGETS, or a Target.
    """
    t = TARGETS[target] if isinstance(target, str) else target
    case = t.make(bases, seed, index)
    rng = np.random.default_rng([int(seed), int(index), 1])

    def attempt():
        try:
            t.run(case, folder, rng, bases)
        finally:
            _clear(folder)

    outcome, detail = classify(attempt)
    return outcome, case.mutator, case.mode, detail


# --------------------------------------------------------------------------
# the process pool
# --------------------------------------------------------------------------


def _worker(conn, target, seed):
    """Build the bases, warm the kernels, then run batches of case indices until told to stop.

    target: a name in TARGETS or a Target (passed whole: a spawned worker sees only importable names).
    """
    try:
        import numba

        numba.set_num_threads(1)  # parallelism comes from the processes
    except (ImportError, ValueError):
        pass
    folder = tempfile.mkdtemp(prefix="navi_nb_fuzz_")
    try:
        bases = target.bases()
        run_case(target, bases, seed, 0, folder)  # compile/load every kernel once before timing starts
        conn.send(("ready",))
        while True:
            batch = conn.recv()
            if batch is None:
                break
            for index in batch:
                conn.send(("case", index) + run_case(target, bases, seed, index, folder))
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        pass
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class _Slot:
    def __init__(self, ctx, target, seed):
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, target, seed), daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent
        self.batch = deque()  # indices sent and not yet answered, in order
        self.ready = False
        self.since = time.monotonic()

    def stop(self, kill=False):
        try:
            if kill:
                self.proc.kill()
            else:
                self.conn.send(None)
        except (OSError, BrokenPipeError):
            pass
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=5)
        self.conn.close()


def run_fuzz(
    target="gmdag", cases=1000, seed=0, jobs=None, timeout=10.0, batch=64, warmup_timeout=600.0, progress=None
) -> Report:
    """Run cases 0..cases-1 of `target` in `jobs` worker processes; return a Report.

    timeout: seconds one case may take before its worker is killed (a hang).
    progress: optional callable(done, total) called as results arrive.
    """
    import multiprocessing as mp
    from multiprocessing.connection import wait

    if isinstance(target, str):
        if target not in TARGETS:
            raise ValueError(f"unknown fuzz target {target!r}")
        name, target = target, TARGETS[target]
    else:
        name = target.name
    if not jobs:
        jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    jobs = max(1, int(jobs))
    # spawn, not fork: a parent that has run a Numba parallel kernel (OpenMP) cannot fork safely
    ctx = mp.get_context("spawn")
    report = Report(name, int(seed), int(cases), jobs, float(timeout))
    todo = deque(range(int(cases)))
    t0 = time.perf_counter()
    slots = [_Slot(ctx, target, seed) for _ in range(min(jobs, max(1, int(cases))))]
    done = 0

    def feed(slot):
        if slot.ready and not slot.batch and todo:
            take = [todo.popleft() for _ in range(min(batch, len(todo)))]
            slot.batch.extend(take)
            slot.conn.send(take)
            slot.since = time.monotonic()

    def replace(slot, outcome, detail):
        nonlocal done
        if slot.batch:
            index = slot.batch.popleft()
            _, _, mutator, mode = target.label(seed, index)
            report.add(index, outcome, mutator, mode, detail)
            done += 1
            todo.extendleft(reversed(slot.batch))
        slot.stop(kill=True)
        report.restarts += 1
        return _Slot(ctx, target, seed)

    try:
        while done < cases:
            conns = {s.conn: s for s in slots}
            for conn in wait(list(conns), timeout=0.25):
                slot = conns[conn]
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    slot.proc.join(timeout=5)
                    code = slot.proc.exitcode
                    if not slot.ready:
                        raise RuntimeError(f"a fuzz worker died while starting (exit code {code})") from None
                    why = f"worker died: signal {-code}" if code and code < 0 else f"worker exited ({code})"
                    slots[slots.index(slot)] = replace(slot, "crash", why)
                    continue
                if msg[0] == "ready":
                    slot.ready = True
                elif msg[0] == "case":
                    index = slot.batch.popleft()
                    assert index == msg[1]
                    report.add(*msg[1:])
                    done += 1
                    if progress is not None:
                        progress(done, cases)
                slot.since = time.monotonic()
            now = time.monotonic()
            for k, slot in enumerate(slots):
                limit = timeout if slot.ready else warmup_timeout
                if (slot.batch or not slot.ready) and now - slot.since > limit:
                    if not slot.ready:
                        raise RuntimeError(f"a fuzz worker did not start within {warmup_timeout:g} s")
                    slots[k] = replace(slot, "hang", f"no answer within {timeout:g} s")
                else:
                    feed(slot)
    finally:
        for slot in slots:
            slot.stop()
    report.seconds = time.perf_counter() - t0
    return report


def failure_inputs(report: Report, folder, target=None) -> list:
    """Write the input files of the report's failures into `folder` (after the run); return their paths.

    target: the Target the report ran (default: the one TARGETS names by the report's target).
    """
    t = target or TARGETS[report.target]
    bases = t.bases()
    paths = []
    for index, *_ in report.failures:
        paths.append(write_case(t.make(bases, report.seed, index), report.target, folder))
    return paths
