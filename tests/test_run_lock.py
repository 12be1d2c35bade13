"""One writer per run folder (navi_nb.train.run_lock).

A holder is a child process that takes a folder's lock the way `train` does and waits; the command under
test runs in this process. A refused command exits 2 with one line naming the holder's pid and leaves the
folder as it was (names and bytes of every file, the lock file included).
"""

import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from run_helpers import tiny_run_args

from navi_nb.cli import main
from navi_nb.train import run_lock
from navi_nb.train.runs import RunError

ROOT = Path(__file__).resolve().parents[1]
TINY = tiny_run_args()
HOLD = (
    "import sys, time\n"
    "from navi_nb.train.run_lock import acquire\n"
    "lock = acquire(sys.argv[1], 'navi-nb train')\n"
    "print('held', flush=True)\n"
    "time.sleep(600)\n"
)


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("NAVI_NB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny finished run, copied by the tests that lock it."""
    root = tmp_path_factory.mktemp("runs")
    mp = pytest.MonkeyPatch()
    mp.setenv("NAVI_NB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
    assert main(["train", *TINY, "--run-dir", str(root), "--name", "r"]) == 0
    mp.undo()
    return root / "r"


class Holder:
    """A child process holding ``folder``'s lock until killed."""

    def __init__(self, folder: Path):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        line = self.proc.stdout.readline()
        assert line == b"held\n", (line, self.proc.stderr.read() if self.proc.poll() is not None else "")
        self.pid = self.proc.pid

    def kill(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture
def hold():
    holders = []

    def start(folder):
        holders.append(Holder(folder))
        return holders[-1]

    yield start
    for h in holders:
        h.kill()


def snapshot(folder: Path):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def refused(argv, capsys, holder, folder):
    before = snapshot(folder)
    code = main(argv)
    err = " ".join(capsys.readouterr().err.split())  # rich wraps long lines at the terminal width
    assert code == 2, (code, err)
    assert err.startswith("error:") and err.count("error:") == 1 and "Traceback" not in err, err
    assert f"run folder {folder} is in use by navi-nb train (pid {holder.pid} on {socket.gethostname()}" in err, err
    assert snapshot(folder) == before, "run folder changed"
    return err


def dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_second_train_into_a_held_folder_is_refused_writes_nothing_and_runs_once_the_holder_is_killed(
    tmp_path, capsys, hold
):
    folder = tmp_path / "X"
    folder.mkdir()  # what a first `train --name X` has made, before its config is written
    holder = hold(folder)
    argv = ["train", *TINY, "--eval-episodes", "0", "--run-dir", str(tmp_path), "--name", "X"]
    err = refused(argv, capsys, holder, folder)
    assert "choose another --name" in err
    assert set(snapshot(folder)) == {".lock"}  # the holder's record only
    holder.kill()  # SIGKILL: the kernel drops its flock; its lock file stays behind, stale
    assert main(argv) == 0
    names = set(snapshot(folder))
    assert {"config.json", "metrics.csv", "policy.npz"} <= names and ".lock" not in names


def test_resume_eval_and_a_new_train_into_a_held_folder_are_refused(trained, tmp_path, capsys, hold):
    folder = tmp_path / "r"
    shutil.copytree(trained, folder)
    holder = hold(folder)
    refused(["train", "--resume", str(folder), "--no-progress"], capsys, holder, folder)
    refused(["train", *TINY, "--run-dir", str(tmp_path), "--name", "r"], capsys, holder, folder)  # not "--resume"
    err = refused(["eval", str(folder), "--episodes", "2"], capsys, holder, folder)
    assert "--no-save" in err


def test_eval_no_save_on_a_held_folder_works_and_writes_nothing(trained, tmp_path, capsys, hold):
    folder = tmp_path / "r"
    shutil.copytree(trained, folder)
    hold(folder)
    before = snapshot(folder)
    assert main(["eval", str(folder), "--episodes", "2", "--no-save"]) == 0
    assert snapshot(folder) == before


def test_lock_file_left_by_a_dead_process_does_not_block(trained, tmp_path, capsys):
    stale = json.dumps({"pid": dead_pid(), "host": socket.gethostname(), "since": "x", "command": "navi-nb train"})
    folder = tmp_path / "r"
    shutil.copytree(trained, folder)
    (folder / ".lock").write_text(stale)
    assert main(["eval", str(folder), "--episodes", "2"]) == 0
    assert main(["train", "--resume", str(folder), "--no-progress"]) == 0  # a finished run: a no-op
    assert not (folder / ".lock").exists()  # taken over, then removed on release
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / ".lock").write_text(stale)
    assert main(["train", *TINY, "--eval-episodes", "0", "--run-dir", str(tmp_path), "--name", "fresh"]) == 0
    assert (fresh / "policy.npz").is_file()


def test_a_new_run_that_fails_after_taking_the_lock_leaves_no_folder(tmp_path, monkeypatch):
    import navi_nb.train.loop as loop

    def fail(*a, **k):
        raise RunError("the worlds cannot be loaded")

    monkeypatch.setattr(loop, "load_scene_set", fail)
    argv = ["train", *TINY, "--run-dir", str(tmp_path), "--name", "gone"]
    assert main(argv) == 2
    assert not (tmp_path / "gone").exists()


def test_lock_is_reentrant_in_one_process_and_freed_with_its_last_handle(tmp_path):
    first = run_lock.acquire(tmp_path, "navi-nb train")
    second = run_lock.acquire(tmp_path, "navi-nb eval")  # train evaluates its run in the process holding it
    record = json.loads((tmp_path / ".lock").read_text())
    assert record["pid"] == os.getpid() and record["command"] == "navi-nb train"
    second.release()
    assert (tmp_path / ".lock").exists()
    first.release()
    first.release()  # a second release is a no-op
    assert not (tmp_path / ".lock").exists()
    with run_lock.acquire(tmp_path):
        assert (tmp_path / ".lock").exists()
    assert not (tmp_path / ".lock").exists()


def test_check_free_names_a_live_holder_and_creates_nothing(tmp_path, hold):
    run_lock.check_free(tmp_path, "hint")  # no lock file: free, and none is made
    assert list(tmp_path.iterdir()) == []
    holder = hold(tmp_path)
    with pytest.raises(RunError, match=f"in use by navi-nb train \\(pid {holder.pid} on .*\\); hint"):
        run_lock.check_free(tmp_path, "hint")


def test_without_flock_a_pid_file_locks_and_a_dead_holders_file_is_taken_over(tmp_path, monkeypatch):
    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(run_lock.fcntl, "flock", no_flock)
    pid_file = tmp_path / ".lock.pid"
    record = {"host": socket.gethostname(), "since": "x", "command": "navi-nb train"}
    pid_file.write_text(json.dumps({**record, "pid": dead_pid()}))
    lock = run_lock.acquire(tmp_path, "navi-nb eval")
    assert json.loads(pid_file.read_text())["pid"] == os.getpid()
    lock.release()
    assert not pid_file.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no empty .lock left where flock is refused
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        pid_file.write_text(json.dumps({**record, "pid": sleeper.pid}))
        with pytest.raises(RunError, match=f"in use by navi-nb train \\(pid {sleeper.pid} on "):
            run_lock.acquire(tmp_path, "navi-nb eval")
        pid_file.write_text(json.dumps({**record, "pid": sleeper.pid, "host": "elsewhere"}))
        with pytest.raises(RunError, match="if that process is gone, remove"):
            run_lock.acquire(tmp_path, "navi-nb eval")
    finally:
        sleeper.kill()
        sleeper.wait()


def test_under_mpi_only_rank_0_takes_the_lock(monkeypatch):
    import navi_nb.parallel.ranks as ranks
    from navi_nb.train.loop import _writes_files

    class Comm:
        rank = 1

        def Get_rank(self):
            return self.rank

    comm = Comm()
    monkeypatch.setattr(ranks, "launched_by_mpi", lambda environ=None: True)
    monkeypatch.setattr(ranks, "world", lambda: comm)
    assert not _writes_files()
    comm.rank = 0
    assert _writes_files()


def test_two_trains_started_together_with_one_name_give_one_run_and_one_refusal(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    args = list(TINY)
    args[args.index("--total-steps") + 1] = str(128 * 40)  # long enough to be running when the second starts
    argv = [sys.executable, "-m", "navi_nb", "train", *args, "--eval-episodes", "0", "--run-dir", str(tmp_path)]
    procs = []
    for _ in range(2):
        procs.append(subprocess.Popen([*argv, "--name", "X"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env))
        time.sleep(0.5)
    outs = [p.communicate(timeout=600) for p in procs]
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [0, 2], (codes, outs)
    winner, loser = (0, 1) if codes[0] == 0 else (1, 0)
    err = " ".join(outs[loser][1].decode().split())
    assert err.startswith("error:") and err.count("error:") == 1, err
    # refused while the winner holds the folder, or (on a machine slow to start the second) once it has
    # written into it: either way one line, exit status 2, and nothing of the loser's in the folder
    assert f"in use by navi-nb train (pid {procs[winner].pid} on " in err or "already exists and is not empty" in err, (
        err
    )
    rows = (tmp_path / "X" / "metrics.csv").read_text().splitlines()
    updates = [int(r.split(",")[0]) for r in rows[1:]]
    assert updates == list(range(1, len(updates) + 1)) and len(updates) > 2  # one run's rows, not two interleaved
