"""Peer benchmarks (PyTorch, Embree) in a child process.

A peer library loaded into the benchmark's own process keeps its thread
pools there (PyTorch's OpenMP and MKL workers, Embree's TBB workers) after
its timings: their spin-waits then compete with navi_nb's Numba threads for
the same cores and show up in this process's CPU times, so the navi_nb rows
measured after a peer read slower and scale worse than the same rows measured
alone. Each peer therefore runs in a fresh Python process (the interpreter
running the benchmark, the same environment) that imports the peer library,
answers and exits; this process never imports it.

``peer_available(module)`` tells whether a peer library is installed without
importing it; ``call_in_child(function, **kwargs)`` runs a module-level
function of navi_nb.bench in a child and returns its result (a JSON-able
value), raising ``PeerError`` with the child's last error line when it fails.
``PeerProcess`` keeps one child for calls one at a time (the Embree peer in
``bench trace``, timed round-robin with navi_nb's calls): arrays go to it
through a ``.npz`` file, calls and answers through its standard streams.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

_CHILD = "from navi_nb.bench.peers import child_main\nchild_main()\n"


class PeerError(RuntimeError):
    """A peer benchmark's child process failed (its message is the child's last error line)."""


def peer_available(module: str) -> bool:
    """Whether ``module`` is importable, without importing it into this process."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _child_env():
    env = dict(os.environ)
    # the child imports navi_nb from wherever this process did (a checkout on PYTHONPATH too)
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def _resolve(name: str):
    module, _, attr = name.rpartition(".")
    if not module.startswith("navi_nb.bench."):
        raise PeerError(f"peer function {name!r} is not in navi_nb.bench")
    return getattr(importlib.import_module(module), attr)


def _last_error_line(text: str) -> str:
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def call_in_child(function: str, timeout: float = 600.0, **kwargs):
    """``function(**kwargs)`` (a dotted name in navi_nb.bench) run in a fresh child process; its result."""
    request = json.dumps({"function": function, "kwargs": kwargs})
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=request + "\n",
        capture_output=True,
        text=True,
        env=_child_env(),
        timeout=timeout,
    )
    answer = proc.stdout.strip().splitlines()[-1:] if proc.returncode == 0 else []
    if not answer:
        raise PeerError(f"{function} failed in its child process: {_last_error_line(proc.stderr)}")
    reply = json.loads(answer[0])
    if "error" in reply:
        raise PeerError(f"{function} failed in its child process: {reply['error']}")
    return reply["result"]


class PeerProcess:
    """One child process that serves calls one at a time.

    ``PeerProcess(setup, arrays, **kwargs)`` starts a child that runs
    ``setup(arrays, **kwargs)`` (a dotted name in navi_nb.bench; ``arrays`` a
    dict of NumPy arrays, passed as a temporary ``.npz``) and keeps what it
    returns: a dict of named functions of no argument. ``call(name)`` runs one
    and returns its result: JSON-able values, or a dict of arrays when the
    function returns one. ``close()`` (or leaving a ``with`` block) ends it.
    """

    def __init__(self, setup: str, arrays: dict, **kwargs):
        self._dir = tempfile.TemporaryDirectory(prefix="navi_nb_peer_")
        path = os.path.join(self._dir.name, "in.npz")
        np.savez(path, **arrays)
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_child_env(),
        )
        self._send({"setup": setup, "arrays": path, "kwargs": kwargs, "dir": self._dir.name})

    def _send(self, message):
        try:
            self._proc.stdin.write(json.dumps(message) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            self.close()
            raise PeerError(f"peer process ended: {_last_error_line(self._proc.stderr.read())}")
        reply = json.loads(line)
        if "error" in reply:
            self.close()
            raise PeerError(f"peer process failed: {reply['error']}")
        if reply.get("arrays"):
            with np.load(reply["arrays"]) as data:
                return {k: data[k] for k in data.files}
        return reply.get("result")

    def call(self, name: str):
        """Run the child's function ``name`` once; its result."""
        return self._send({"call": name})

    def close(self):
        if self._proc.poll() is None:
            try:
                self._proc.stdin.close()
                self._proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
        for stream in (self._proc.stdout, self._proc.stderr):
            stream.close()
        self._dir.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def child_main():
    """The child's side: one JSON request per line on stdin, one JSON answer per line on stdout."""
    import traceback

    out = sys.stdout
    sys.stdout = sys.stderr  # a peer's own prints must not corrupt the answers
    served, n_out = None, 0
    for line in sys.stdin:
        msg = json.loads(line)
        try:
            if "function" in msg:
                reply = {"result": _resolve(msg["function"])(**msg["kwargs"])}
            elif "setup" in msg:
                with np.load(msg["arrays"]) as data:
                    arrays = {k: data[k] for k in data.files}
                served, folder = _resolve(msg["setup"])(arrays, **msg["kwargs"]), msg["dir"]
                reply = {"result": sorted(served)}
            else:
                result = served[msg["call"]]()
                if isinstance(result, dict) and result and all(isinstance(v, np.ndarray) for v in result.values()):
                    n_out += 1
                    path = os.path.join(folder, f"out{n_out}.npz")
                    np.savez(path, **result)
                    reply = {"arrays": path}
                else:
                    reply = {"result": result}
        except Exception as exc:  # reported to the parent as one line
            traceback.print_exc()
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()
        if "function" in msg:
            break
