"""Files read only when they are regular files; files written whole or not at all.

``regular_file(path, what)`` stats ``path`` (following symlinks) and refuses
anything that is not a regular file (a FIFO, a character or block device, a
socket, a folder) with :class:`FileKindError`, one line naming the file and
what it is, before anything opens it: opening a FIFO blocks until a writer
comes, and a device such as ``/dev/zero`` never ends. ``open_regular`` does the
same check, then opens with ``O_NONBLOCK`` (a path swapped for a FIFO after the
check cannot block the open) and checks the open file again with ``fstat``.
``read_regular(path, what, max_bytes)`` reads a whole file, refusing one larger
than ``max_bytes`` from its size before reading, and reading at most
``max_bytes + 1`` bytes anyway (a file that reports size 0 but keeps giving).
``FileKindError`` is an ``OSError`` too, so code that treats an unreadable
file as missing or damaged (the caches) treats these the same way.

``write_atomic(path, data)`` writes through a temporary file beside ``path``
(``.NAME.XXXXXXXX.tmp``, made with ``mkstemp``: a new name, created exclusively,
so a link planted in the folder is never written through; its mode then set
to what ``open`` gives a new file under the umask), flushed to disk,
then renamed over ``path`` (a link at ``path`` is replaced, not followed): a
reader, or a run that resumes after a crash, sees the old file or the new one,
never a part of one. The world files, run records and metrics tables all write
through it. ``open_append(path)`` opens a log for appending without following a
link at ``path`` and refuses anything but a regular file there. A folder may
come from elsewhere (an unpacked run folder is untrusted input): no writer here
follows a link it finds in it. A shared top-level module: it imports no stage.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import tempfile
from pathlib import Path

from navi_nb.errors import NaviError


class FileKindError(NaviError, OSError):
    """A path that is not a regular file (FIFO, device, socket, folder), or a file over its size bound."""

    def __init__(self, path, why, what="file", code=errno.EINVAL):
        super().__init__(code, why, str(path))
        self.what = what

    def __str__(self):
        return f"{self.what} {self.filename}: {self.strerror}"


def file_kind(mode: int) -> str:
    """What an ``st_mode`` names, in words: ``"a regular file"``, ``"a FIFO"``, ``"a folder"`` ..."""
    for test, words in (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return words
    return "not a file"


def _check_mode(st, path, what, max_bytes):
    if not stat.S_ISREG(st.st_mode):
        kind = file_kind(st.st_mode)
        code = errno.EISDIR if stat.S_ISDIR(st.st_mode) else errno.EINVAL
        raise FileKindError(path, f"{kind}, not a regular file", what, code)
    if max_bytes is not None and st.st_size > max_bytes:
        raise FileKindError(path, _over(max_bytes), what, errno.EFBIG)


def _over(max_bytes) -> str:
    return f"larger than the bound of {size_words(max_bytes)}"


def size_words(n: int) -> str:
    """``16 MiB``, ``64 KiB`` or ``100 bytes``: a bound as a message shows it."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n:,} bytes"


def regular_file(path, what="file", max_bytes=None) -> Path:
    """``path`` as a Path, when it is (or links to) a regular file of at most ``max_bytes`` bytes; else
    FileKindError (FIFO, device, socket, folder, too large), or the OSError of ``os.stat`` (missing ...)."""
    path = Path(path)
    _check_mode(os.stat(path), path, what, max_bytes)
    return path


def open_regular(path, what="file", max_bytes=None) -> io.BufferedReader:
    """Open a regular file for reading in binary, never blocking: checked by ``stat`` before the open and by
    ``fstat`` after it (opened with ``O_NONBLOCK``, cleared once it is known to be a regular file)."""
    path = regular_file(path, what, max_bytes)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        _check_mode(os.fstat(fd), path, what, max_bytes)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path, what="file", max_bytes=None) -> bytes:
    """The bytes of a regular file (``open_regular``); with ``max_bytes``, at most that many: a larger file
    is refused from its size, and a read that finds more than the size said is refused too."""
    with open_regular(path, what, max_bytes) as fh:
        data = fh.read() if max_bytes is None else fh.read(max_bytes + 1)
    if max_bytes is not None and len(data) > max_bytes:
        raise FileKindError(path, _over(max_bytes), what, errno.EFBIG)
    return data


def _umask() -> int:
    """The process's umask, read without changing it (Linux /proc), else by setting and restoring it."""
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path, data: bytes) -> Path:
    """Replace ``path`` with ``data`` in one rename; a failure leaves ``path`` as it was and no temporary. An
    OSError that names no file (a full disk on write or fsync) is raised naming ``path``."""
    path = Path(path)
    tmp = None
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        tmp = Path(name)
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 -> what open() would give the file
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        if exc.filename is None or tmp is None or exc.filename == str(tmp):  # name the file, not its temporary
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None
        raise
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)  # gone after the rename; a part-written one after a failure
    return path


def open_append(path, what="file", newline=None):
    """``path`` opened for appending text (created if missing), never through a link: a link, a FIFO, a
    device or a folder at ``path`` raises :class:`FileKindError` naming it and what is there, before
    anything is written."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise FileKindError(path, "a symbolic link, not a regular file; remove it", what) from None
        if exc.errno in (errno.ENXIO, errno.EISDIR):  # a FIFO without a reader; a folder
            kind = file_kind(os.lstat(path).st_mode)
            raise FileKindError(path, f"{kind}, not a regular file; remove it", what) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise FileKindError(path, f"{file_kind(st.st_mode)}, not a regular file; remove it", what)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "a", newline=newline)
