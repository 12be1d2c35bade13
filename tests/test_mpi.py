"""Same bits over MPI ranks: 1 rank x 1 thread, 1 x 2, 2 x 1 and 4 x 1 give byte-identical weights, Adam
state, generators and environment state, and a run saved at 2 ranks continues at 4 and at 1 with the same
bits. Runs ``tests/mpi_run.py`` under the ``mpiexec`` next to this Python (the ``mpi`` extra's ``mpich``
wheel puts it there); oversubscribed on a 2-core machine, which is fine for bits."""
import json
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("mpi4py", reason="the mpi extra is not installed (pip install -e '.[mpi]')")

HERE = os.path.dirname(os.path.abspath(__file__))
MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")


def mpirun(n, *args):
    assert MPIEXEC, "mpi4py is installed but no mpiexec was found"
    env = dict(os.environ, NUMBA_NUM_THREADS="2", OMP_WAIT_POLICY="PASSIVE")
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(HERE), env.get("PYTHONPATH", "")])
    out = subprocess.run([MPIEXEC, "-n", str(n), sys.executable, os.path.join(HERE, "mpi_run.py"), *map(str, args)],
                         capture_output=True, text=True, env=env, timeout=900)
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-3000:])
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return lines[0] if lines else None


def test_same_bits_at_any_rank_and_thread_count(tmp_path):
    one = mpirun(1, 1, 3)                    # first: compiles the kernels once for the others
    assert one["ranks"] == 1 and one["threads"] == 1 and one["adam_t"] == 3 * 2 * 2
    assert one["episodes"] > 0 and one["bytes_sent"] == 0
    runs = [mpirun(1, 2, 3), mpirun(2, 1, 3), mpirun(4, 1, 3)]
    assert [(r["ranks"], r["threads"]) for r in runs] == [(1, 2), (2, 1), (4, 1)]
    for r in runs:
        assert r["ranks_agree"]
        assert (r["learner"], r["env"]) == (one["learner"], one["env"]), r
    assert runs[1]["bytes_sent"] > 0 and runs[2]["bytes_sent"] > 0
    # the hashes see the state: one update fewer gives others
    short = mpirun(2, 1, 2)
    assert short["learner"] != one["learner"] and short["env"] != one["env"]

    # saved at 2 ranks after 2 of 3 updates, resumed at 4 ranks and at 1
    saved = tmp_path / "state.npz"
    assert mpirun(2, 1, 3, f"save:2:{saved}") is None and saved.exists()
    for n in (4, 1):
        resumed = mpirun(n, 1, 3, f"load:{saved}")
        assert (resumed["learner"], resumed["env"]) == (one["learner"], one["env"]), n
