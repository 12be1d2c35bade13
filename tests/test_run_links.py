"""A run folder from elsewhere is untrusted input: no writer follows a link planted in it.

Each planted name (the lock, the pid-file lock, an atomic write's temporary, a checkpoint's temporary, the
metrics logs) points at a victim file outside the folder; the command under test must refuse in one line
naming the planted file, or write around it, and the victim's bytes must stay as they were. A folder that
already holds a run is refused to the library's ``Trainer.create(run_path=...)`` as the CLI refuses it.
"""

import errno
import json
import os
import socket
from pathlib import Path

import numpy as np
import pytest

from navi_nb.files import FileKindError, open_append, write_atomic
from navi_nb.train import run_lock
from navi_nb.train.checkpoint import save_checkpoint
from navi_nb.train.config import TrainConfig
from navi_nb.train.metrics import MetricsLog
from navi_nb.train.runs import RunError, claim_run_path

VICTIM = b"another run's metrics, not to be touched\n"


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "elsewhere" / "metrics.csv"
    path.parent.mkdir()
    path.write_bytes(VICTIM)
    return path


@pytest.fixture
def run(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    return folder


def names(folder: Path) -> list:
    return sorted(p.name for p in folder.iterdir())


def test_a_lock_that_is_a_link_is_refused_and_its_target_untouched(run, victim):
    (run / ".lock").symlink_to(victim)
    with pytest.raises(RunError, match=r"its \.lock is a symbolic link, not a lock file; remove .*\.lock"):
        run_lock.acquire(run, "navi-nb eval")
    with pytest.raises(RunError, match="symbolic link"):
        run_lock.check_free(run, "hint")
    assert victim.read_bytes() == VICTIM
    assert names(run) == [".lock"]


def test_a_lock_that_is_a_fifo_is_refused_at_once_naming_it(run):
    os.mkfifo(run / ".lock")
    with pytest.raises(RunError, match=rf"run folder {run}: its \.lock is a FIFO, not a lock file; remove"):
        run_lock.acquire(run, "navi-nb train")
    with pytest.raises(RunError, match="a FIFO"):
        run_lock.check_free(run, "hint")


def test_without_flock_a_pid_file_that_is_a_link_is_refused(run, victim, monkeypatch):
    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(run_lock.fcntl, "flock", no_flock)
    (run / ".lock.pid").symlink_to(victim)
    with pytest.raises(RunError, match=r"its \.lock\.pid is a symbolic link"):
        run_lock.acquire(run, "navi-nb eval")
    assert victim.read_bytes() == VICTIM


def test_an_atomic_write_never_writes_through_a_planted_temporary(run, victim):
    (run / ".config.json.tmp").symlink_to(victim)  # the temporary's old fixed name
    write_atomic(run / "config.json", b"{}\n")
    assert victim.read_bytes() == VICTIM
    assert (run / "config.json").read_bytes() == b"{}\n"
    assert names(run) == [".config.json.tmp", "config.json"]  # no temporary of its own left behind


def test_an_atomic_write_replaces_a_link_at_its_path_without_following_it(run, victim):
    (run / "run.json").symlink_to(victim)
    write_atomic(run / "run.json", b"new\n")
    assert not (run / "run.json").is_symlink()
    assert (run / "run.json").read_bytes() == b"new\n"
    assert victim.read_bytes() == VICTIM


def test_a_checkpoint_never_writes_through_a_planted_temporary(run, victim):
    folder = run / "checkpoints"
    folder.mkdir()
    path = folder / "ckpt_000001.ckpt"
    (folder / f".{path.name}.{os.getpid()}.tmp").symlink_to(victim)
    save_checkpoint(path, {"w": np.arange(3, dtype=np.float32)}, {"update": 1})
    assert victim.read_bytes() == VICTIM
    assert path.is_file() and not path.is_symlink()


@pytest.mark.parametrize("name", ["metrics.csv", "metrics.jsonl"])
def test_metrics_logs_that_are_links_are_refused_before_anything_is_written(run, victim, name):
    (run / name).symlink_to(victim)
    with pytest.raises(FileKindError, match=rf"{name}: a symbolic link, not a regular file; remove it"):
        MetricsLog(run, tensorboard=False)
    assert victim.read_bytes() == VICTIM
    assert names(run) == ([name] if name == "metrics.csv" else ["metrics.csv", name])


def test_open_append_refuses_a_fifo_and_a_folder_without_blocking(run):
    os.mkfifo(run / "log")
    with pytest.raises(FileKindError, match="a FIFO, not a regular file"):
        open_append(run / "log", "log")
    (run / "dir").mkdir()
    with pytest.raises(FileKindError, match="a folder, not a regular file"):
        open_append(run / "dir", "log")
    with open_append(run / "ok", "log") as fh:
        fh.write("a\n")
    with open_append(run / "ok", "log") as fh:
        fh.write("b\n")
    assert (run / "ok").read_text() == "a\nb\n"


def test_the_api_refuses_a_run_path_that_holds_a_run_and_writes_nothing(run):
    (run / "config.json").write_text('{"seed": 0}\n')
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "ckpt_000002.ckpt").write_bytes(b"x")
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    with pytest.raises(RunError, match=rf"run folder {run} is not empty .*Trainer\.resume"):
        claim_run_path(TrainConfig(), [], run_path=run)
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    assert names(run) == ["checkpoints", "config.json"]  # no lock file left


def test_the_api_takes_an_empty_folder_and_one_a_kill_left_before_its_first_checkpoint(run):
    path, lock, made = claim_run_path(TrainConfig(), [], run_path=run)
    assert path == run and not made
    lock.release()
    (run / "config.json").write_text("{}\n")  # what Trainer.create writes before its first checkpoint
    path, lock, made = claim_run_path(TrainConfig(), [], run_path=run)
    lock.release()


def test_a_pid_file_whose_pid_now_names_another_process_is_stale(run, monkeypatch):
    """Without flock: a record whose pid lives but started at another time (the pid was reused) is taken
    over; the same pid with its own start time blocks, naming the file to remove."""

    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(run_lock.fcntl, "flock", no_flock)
    me = run_lock._record("navi-nb train")
    assert isinstance(me["start_ticks"], int)
    pid_file = run / ".lock.pid"
    pid_file.write_text(json.dumps({**me, "pid": os.getppid(), "start_ticks": me["start_ticks"] + 12345}))
    lock = run_lock.acquire(run, "navi-nb eval")  # reused pid: stale, taken over
    assert json.loads(pid_file.read_text())["pid"] == os.getpid()
    lock.release()
    parent = run_lock._start_ticks(os.getppid())
    pid_file.write_text(json.dumps({**me, "pid": os.getppid(), "start_ticks": parent}))
    with pytest.raises(RunError, match=rf"in use by .*if that process is gone, remove {pid_file}"):
        run_lock.acquire(run, "navi-nb eval")


def test_where_flock_works_a_stray_pid_file_blocks_nothing(run):
    (run / ".lock.pid").write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname()}))
    run_lock.check_free(run, "hint")  # train --name's check: the folder is free
    run_lock.acquire(run, "navi-nb eval").release()  # as eval finds it


def test_a_folder_that_cannot_be_written_is_refused_with_the_commands_way_out(run, monkeypatch):
    real_open = os.open

    def read_only(path, flags, *a):
        if str(path).endswith(".lock") and flags & os.O_CREAT:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *a)

    monkeypatch.setattr(run_lock.os, "open", read_only)
    with pytest.raises(RunError, match=r"Read-only file system; evaluate with --no-save, which writes nothing"):
        run_lock.acquire(run, "navi-nb eval", "wait", "evaluate with --no-save, which writes nothing")


def test_what_a_command_writes_is_checked_before_it_writes_anything(run, victim):
    from navi_nb.train.runs import check_run_entries

    check_run_entries(run, ("run.json", "metrics.csv"), ("checkpoints",))  # absent: nothing to refuse
    (run / "checkpoints").symlink_to(victim.parent, target_is_directory=True)
    with pytest.raises(RunError, match=r"checkpoints is a symbolic link, not a folder of its own; remove it"):
        check_run_entries(run, (), ("checkpoints",))
    (run / "policy.npz").mkdir()
    with pytest.raises(RunError, match=r"policy.npz is a folder, not a regular file; remove it"):
        check_run_entries(run, ("policy.npz",))
    os.mkfifo(run / "metrics.jsonl")
    with pytest.raises(RunError, match=r"metrics.jsonl is a FIFO, not a regular file"):
        check_run_entries(run, ("metrics.jsonl",))
    (run / "eval.json").symlink_to(run / "nowhere")
    with pytest.raises(RunError, match=r"eval.json is a symbolic link"):
        check_run_entries(run, ("eval.json",))
    (run / "run.json").write_text("{}")
    check_run_entries(run, ("run.json",))  # a regular file: fine
    assert victim.read_bytes() == VICTIM
