"""One writer per run folder: an exclusive lock on ``RUN/.lock``.

Every command that writes a run folder (``train``, ``train --resume``, ``eval`` without ``--no-save``) holds
the folder's lock from before its first write (before the config, the worlds and any compile) until it ends;
a second one is refused at once with one line naming the holder (its command, pid, host and start time), and
writes nothing. Under MPI rank 0 alone writes the folder and takes the lock; the other ranks never do.

The lock is ``fcntl.flock(LOCK_EX | LOCK_NB)`` on ``RUN/.lock`` (opened with ``O_CREAT``), held open for as
long as the command writes. The kernel releases a flock when its process ends in any way (a normal exit, an
exception, ``kill -9``, a crash), so a lock file left behind by a process that is gone never blocks: the next
command's flock succeeds and it takes the file over. The holder writes its record (pid, host, start time,
command) into the file for the refusal to name, and removes the file on release (while still holding it; a
process that opened the old file sees that the name now points elsewhere, or nowhere, and tries again).

On a file system that refuses flock (ENOLCK, EOPNOTSUPP, ENOSYS, EINVAL: some network and FUSE mounts) the
lock is ``RUN/.lock.pid`` created with ``O_CREAT | O_EXCL``, holding the same record and removed on release.
A killed holder leaves it behind: a record of this host whose pid no longer lives (``os.kill(pid, 0)``), or
lives with another start time than the record's (the pid was reused), is stale and taken over; one of
another host cannot be checked from here and blocks until removed by hand (every such refusal names the
file to remove). Where flock works, a ``.lock.pid`` is stray and ignored.

A run folder may come from elsewhere: the lock files are opened with ``O_NOFOLLOW`` and must be regular
files; a link, FIFO or folder in their place is refused naming it, and nothing is written through it.

Within one process the lock is re-entrant (``train`` evaluates its finished run in the process that holds
it; a library user may resume a run in the process that trained it): it is taken once per folder and freed
when the last of its handles is released (or collected).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import stat
import threading
import time
from pathlib import Path

from navi_nb.errors import RunError, os_error
from navi_nb.files import file_kind

LOCK_FILE = ".lock"
PID_FILE = ".lock.pid"
LOCK_FILES = frozenset({LOCK_FILE, PID_FILE})
"""The lock's file names: not part of a run's content (``runs.never_checkpointed`` and the emptiness check
of a new run's folder leave them out)."""
MAX_RECORD_BYTES = 4096
_NO_FLOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}

_held: dict[str, _Held] = {}  # folder (real path) -> what this process holds there
_guard = threading.Lock()


def _start_ticks(pid: int) -> int | None:
    """Process ``pid``'s start time in clock ticks since boot (Linux /proc), or None where it cannot be read:
    with the pid it names one process, where a pid alone may have been reused since."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[19])  # field 22, counted after "(comm)"
    except (OSError, ValueError, IndexError):
        return None


def _record(command: str) -> dict:
    return {
        "pid": os.getpid(),
        "start_ticks": _start_ticks(os.getpid()),
        "host": socket.gethostname(),
        "since": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": command,
    }


def _parse(raw: bytes) -> dict | None:
    try:
        rec = json.loads(raw[:MAX_RECORD_BYTES].decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    return rec if isinstance(rec, dict) else None


def describe(record: dict | None) -> str:
    """``navi-nb train (pid 1234 on host, since 2025-01-01 12:00:01)``, or what is known of it."""
    if not record:
        return "another process (it has not written its pid yet)"
    command = record.get("command") if isinstance(record.get("command"), str) else "another process"
    return f"{command} (pid {record.get('pid', '?')} on {record.get('host', '?')}, since {record.get('since', '?')})"


def busy_error(run_path, record, hint: str) -> RunError:
    return RunError(f"run folder {run_path} is in use by {describe(record)}; {hint}")


class _Held:
    """The lock this process holds on one folder: the open lock file (flock) or the pid file's path."""

    def __init__(self, key, fd=None, pid_path=None):
        self.key, self.fd, self.pid_path, self.count = key, fd, pid_path, 0

    def free(self):
        try:
            if self.fd is not None:
                try:
                    os.unlink(os.path.join(self.key, LOCK_FILE))  # while still held: see the module's docstring
                except OSError:
                    pass
                os.close(self.fd)
            elif self.pid_path is not None:
                os.unlink(self.pid_path)
        except OSError:
            pass
        self.fd = self.pid_path = None


class RunLock:
    """A handle on a run folder's lock (``acquire``); ``release()`` (or leaving its ``with`` block, or its
    collection) gives it up, and the lock is freed with the process's last handle on the folder."""

    def __init__(self, path: Path, held: _Held):
        self.path, self._held = path, held

    @property
    def held(self) -> bool:
        return self._held is not None

    def release(self) -> None:
        held, self._held = self._held, None
        if held is None:
            return
        with _guard:
            held.count -= 1
            if held.count > 0:
                return
            if _held.get(held.key) is held:
                del _held[held.key]
            held.free()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        try:
            self.release()
        except Exception:
            pass


_READ_ONLY = {errno.EROFS, errno.EACCES, errno.EPERM}


def acquire(
    run_path, command: str = "navi-nb train", hint: str = "wait for it to finish", read_only_hint: str = ""
) -> RunLock:
    """Take the lock of the existing folder ``run_path`` for ``command`` (named to a process refused later),
    or raise RunError ``run folder RUN is in use by COMMAND (pid P on HOST, since T); HINT`` without writing
    anything. A folder this process cannot write is refused naming it, with ``read_only_hint`` (what the
    command can do instead) when given."""
    path = Path(run_path)
    key = os.path.realpath(path)
    with _guard:
        held = _held.get(key)
        if held is None:
            try:
                held = _take(path, key, command, hint)
            except OSError as exc:
                err = os_error(exc, f"cannot lock the run folder {path}")
                if exc.errno in _READ_ONLY and read_only_hint:
                    err = RunError(f"{err}; {read_only_hint}")
                raise err from None
            _held[key] = held
        held.count += 1
        return RunLock(path, held)


def _take(path: Path, key: str, command: str, hint: str) -> _Held:
    lock_path = os.path.join(key, LOCK_FILE)
    for _ in range(100):  # a new try only when a holder removed the file between our open and our flock
        fd = _open_lock_file(path, LOCK_FILE, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            record = _parse(os.pread(fd, MAX_RECORD_BYTES, 0))
            os.close(fd)
            raise busy_error(path, record, hint) from None
        except OSError as exc:
            if exc.errno in _NO_FLOCK:
                _drop_empty(fd, lock_path)  # no lock on this file system: the O_CREAT above left an empty file
                os.close(fd)
                return _take_pid_file(path, key, command, hint)
            os.close(fd)
            raise
        try:
            same = os.stat(lock_path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # the holder released and removed it after our open: this file is no one's lock
            os.close(fd)
            continue
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(_record(command)) + "\n").encode("utf-8"), 0)
        except BaseException:
            os.close(fd)
            raise
        return _Held(key, fd=fd)
    raise RunError(f"run folder {path}: cannot take its lock ({LOCK_FILE} keeps being replaced)")


def _drop_empty(fd: int, lock_path: str) -> None:
    """Remove ``lock_path`` when it is still the empty file ``fd`` has open: where flock is refused, a ``.lock``
    holds nothing (the pid file is the lock), so the folder keeps no file the command did not write."""
    try:
        st = os.fstat(fd)
        if st.st_size == 0 and os.stat(lock_path, follow_symlinks=False).st_ino == st.st_ino:
            os.unlink(lock_path)
    except OSError:
        pass


_NO_FOLLOW = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a link is refused; a FIFO cannot block the open


def _not_a_lock(path: Path, name: str, what: str) -> RunError:
    return RunError(
        f"run folder {path}: its {name} is {what}, not a lock file; remove {Path(path) / name} "
        "(a run folder from elsewhere may hold planted links)"
    )


def _open_lock_file(path: Path, name: str, flags: int) -> int:
    """``path/name`` opened with ``flags`` (0o644 where created), never through a link: a link, FIFO, device or
    folder in its place raises RunError naming it and the way out, and nothing is written."""
    full = os.path.join(os.path.realpath(path), name)
    try:
        fd = os.open(full, flags | _NO_FOLLOW, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _not_a_lock(path, name, "a symbolic link") from None
        if exc.errno in (errno.ENXIO, errno.EISDIR):  # a FIFO without a reader; a folder
            raise _not_a_lock(path, name, file_kind(os.lstat(full).st_mode)) from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _not_a_lock(path, name, file_kind(mode))
    os.set_blocking(fd, True)
    return fd


def _read_record(path: Path, name: str) -> dict | None:
    """The record in ``path/name`` (a lock file of another process), read without following a link."""
    fd = _open_lock_file(path, name, os.O_RDONLY)
    try:
        return _parse(os.pread(fd, MAX_RECORD_BYTES, 0))
    finally:
        os.close(fd)


def _take_pid_file(path: Path, key: str, command: str, hint: str) -> _Held:
    """The lock where flock is refused: an exclusively created ``PID_FILE`` holding this process's record."""
    pid_path = os.path.join(key, PID_FILE)
    for _ in range(2):  # once more after removing a stale file
        try:
            fd = os.open(pid_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            try:
                record = _read_record(path, PID_FILE)
            except FileNotFoundError:
                continue  # its holder just released it
            if not _stale(record):
                raise busy_error(path, record, f"{hint} (if that process is gone, remove {pid_path})") from None
            try:
                os.unlink(pid_path)
            except FileNotFoundError:
                pass
            continue
        try:
            os.write(fd, (json.dumps(_record(command)) + "\n").encode("utf-8"))
        finally:
            os.close(fd)
        return _Held(key, pid_path=pid_path)
    raise RunError(f"run folder {path}: cannot take its lock ({PID_FILE} keeps being replaced)")


def _on_this_host(record) -> bool:
    return isinstance(record, dict) and record.get("host") == socket.gethostname()


def _stale(record) -> bool:
    """True for a pid file of this host whose process no longer lives (an unreadable one is not judged)."""
    if not _on_this_host(record):
        return False
    pid = record.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        pass
    # alive: the holder only if it started when the record says (a pid is reused once its process is gone)
    then, now = record.get("start_ticks"), _start_ticks(pid)
    return isinstance(then, int) and not isinstance(then, bool) and now is not None and now != then


def _flock_works(key: str) -> bool:
    """Whether the file system of the folder ``key`` takes flock (tried on the folder itself, shared and at
    once released): where it does, the lock is ``LOCK_FILE`` and a ``PID_FILE`` there is stray."""
    try:
        fd = os.open(key, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    except BlockingIOError:
        return True
    except OSError as exc:
        return exc.errno not in _NO_FLOCK
    finally:
        os.close(fd)


def check_free(run_path, hint: str) -> None:
    """Raise the busy RunError when another process holds ``run_path``'s lock now; writes nothing (no lock
    file is made). For a refusal that should name a live holder before any other reason."""
    path = Path(run_path)
    key = os.path.realpath(path)
    with _guard:
        if key in _held:
            return
    try:
        fd = _open_lock_file(path, LOCK_FILE, os.O_RDONLY)
    except RunError:
        raise
    except OSError:  # none there, or unreadable: judged by the pid file alone
        fd = None
    if fd is not None:
        try:  # shared, for a moment: refused while a holder has the lock
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            raise busy_error(path, _parse(os.pread(fd, MAX_RECORD_BYTES, 0)), hint) from None
        except OSError:
            pass
        finally:
            os.close(fd)
    if _flock_works(key):  # acquire takes LOCK_FILE here, as eval does: a PID_FILE left beside it holds nothing
        return
    try:
        record = _read_record(path, PID_FILE)
    except RunError:
        raise
    except OSError:
        return
    if not _stale(record):
        raise busy_error(path, record, f"{hint} (if that process is gone, remove {Path(key) / PID_FILE})")


def _forget_after_fork():
    """A forked child does not hold its parent's locks: it drops its copies of the lock files (closing a copy
    leaves the parent's flock in place) so the lock ends with the parent, not with a child that outlives it."""
    global _guard
    _guard = threading.Lock()
    for held in _held.values():
        if held.fd is not None:
            try:
                os.close(held.fd)
            except OSError:
                pass
        held.fd = held.pid_path = None
    _held.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
