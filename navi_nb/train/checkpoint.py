"""Checkpoints: one `.npz` (a zip of `.npy` members, never pickle) per save.

A checkpoint file holds

- ``meta.json``: format version, package version, the config and its hash,
  counters, and anything else JSON-able the trainer wants back;
- one ``NAME.npy`` member per array (policy parameters, optimizer moments,
  environment state, random generators' states as ``navi_nb.rng_state``
  arrays, ...).

Writing is atomic: the zip goes to a temporary file in the same folder, is
flushed and fsynced, renamed over the final name, and the folder is fsynced.
A kill at any moment leaves either the old set of checkpoints or the old set
plus the complete new one; a stray ``.tmp`` file is ignored by the reader and
removed by the next save.

Reading treats the file as untrusted input. ``open_checkpoint`` reads the
zip's directory (all members together may not declare more than
``MAX_INFLATION`` times the file's size, so a small file of deflated zeros
cannot make a reader allocate gigabytes) and ``meta.json`` (bounded in size;
any parser error, deep nesting included, is a ``CheckpointError``); ``read_arrays(spec)``
then checks the member list against ``spec`` (name -> (shape, dtype), what the
config implies), reads every member's ``.npy`` header and checks its declared
shape, dtype, order and size BEFORE reading any data, and only then reads the
data (the zip's CRC is checked as it goes). Any mismatch raises
``CheckpointError`` naming the file and the member; nothing is returned half
read, so a caller that applies the arrays only after ``read_arrays`` returns
never half-loads.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tokenize
import zipfile
import zlib
from pathlib import Path

import numpy as np

from navi_nb.errors import NaviError

FORMAT_VERSION = 1
META_MEMBER = "meta.json"
MAX_META_BYTES = 8 << 20  # a larger meta.json is refused unread
MAX_ARRAY_BYTES = 4 << 30  # a larger declared array is refused unread, even if spec says so
# All members together may inflate to at most MAX_INFLATION times the file's size on disk plus
# INFLATION_SLACK: the writer stores members uncompressed (ratio 1), so only a crafted file of
# deflated zeros comes near it, and its declared sizes cannot make a reader allocate more than this.
MAX_INFLATION = 16
INFLATION_SLACK = 1 << 20
# What parsing an untrusted .npy header or meta.json can raise besides the usual ValueError family:
# an unbalanced bracket (tokenize.TokenError), deep nesting (RecursionError), a huge literal (MemoryError).
_PARSE_ERRORS = (
    ValueError,
    OSError,
    EOFError,
    SyntaxError,
    TypeError,
    zipfile.BadZipFile,
    tokenize.TokenError,
    RecursionError,
    MemoryError,
    zlib.error,
    zipfile.LargeZipFile,
    NotImplementedError,
    RuntimeError,
)
CKPT_RE = re.compile(r"^ckpt_(\d{8})\.npz$")


class CheckpointError(NaviError):
    """A checkpoint is missing, corrupt, truncated or from another configuration."""

    def __init__(self, source, problem):
        self.source = str(source)
        super().__init__(f"checkpoint {self.source}: {problem}")


# --------------------------------------------------------------------------
# the config hash
# --------------------------------------------------------------------------


def config_hash(config: dict) -> str:
    """A short stable hash of a JSON-able config dict (sorted keys)."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------


def _fsync_dir(folder: Path):
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # platforms without directory fds (Windows): rename is all we get
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _no_hook(step):
    return None


def save_checkpoint(path, arrays: dict, meta: dict, _hook=_no_hook) -> Path:
    """Write ``arrays`` (name -> ndarray) and ``meta`` atomically to ``path``.

    ``_hook(step)`` is called before each write step ("open", "meta", "array:NAME",
    "close", "flush", "fsync", "rename", "fsync_dir"); tests use it to simulate
    a kill at every step.
    """
    path = Path(path)
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob(".*.tmp"):  # left by a killed writer
        try:
            stale.unlink()
        except OSError:
            pass
    meta = dict(meta)
    meta.setdefault("format_version", FORMAT_VERSION)
    meta_bytes = json.dumps(meta, sort_keys=True, indent=1).encode()
    tmp = folder / f".{path.name}.{os.getpid()}.tmp"
    try:
        _hook("open")
        # created exclusively and never through a link: a name planted in the folder is refused, not written
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "wb") as fh:
            with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED) as zf:
                _hook("meta")
                zf.writestr(META_MEMBER, meta_bytes)
                for name in sorted(arrays):
                    arr = np.asarray(arrays[name])  # (not ascontiguousarray: it makes 0-d arrays 1-d)
                    if not arr.flags.c_contiguous:
                        arr = arr.copy(order="C")
                    if arr.dtype.hasobject:
                        raise TypeError(f"array {name!r} has object dtype; checkpoints hold plain arrays")
                    _hook("array:" + name)
                    with zf.open(name + ".npy", "w", force_zip64=True) as member:
                        np.lib.format.write_array(member, arr, allow_pickle=False)
                _hook("close")
            _hook("flush")
            fh.flush()
            _hook("fsync")
            os.fsync(fh.fileno())
        _hook("rename")
        os.replace(tmp, path)
        _hook("fsync_dir")
        _fsync_dir(folder)
    except Exception:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    return path


# --------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------


class Checkpoint:
    """An opened checkpoint: ``.meta`` is read; arrays come from ``read_arrays(spec)``."""

    def __init__(self, path, meta, infos):
        self.path = Path(path)
        self.meta = meta
        self._infos = infos  # member name -> ZipInfo

    @property
    def array_names(self):
        return sorted(n[:-4] for n in self._infos if n != META_MEMBER)

    def read_arrays(self, spec: dict, subset: bool = False) -> dict:
        """Read every array, checked against ``spec``: name -> (shape, dtype).

        The member set must equal ``spec``'s names (with ``subset``: hold them; the other members stay
        unread); each member's declared header must match before any of its data is read.
        """
        src = self.path
        have = set(self.array_names)
        want = set(spec)
        if have - want and not subset:
            raise CheckpointError(src, f"unexpected member(s) {sorted(have - want)} (not implied by the configuration)")
        if want - have:
            raise CheckpointError(src, f"missing member(s) {sorted(want - have)}")
        with _open_file(src) as fh, _open_zip(fh, src) as zf:
            # pass 1: headers only
            offsets = {}
            for name in sorted(want):
                shape, dtype = tuple(int(s) for s in spec[name][0]), np.dtype(spec[name][1])
                info = self._infos[name + ".npy"]
                with _open_member(zf, info, src) as f:
                    hdr = _read_header(f, src, name)
                    header_len = f.tell()
                got_shape, fortran, got_dtype = hdr
                if got_dtype != dtype:
                    raise CheckpointError(
                        src, f"member {name!r} declares dtype {got_dtype}, the configuration implies {dtype}"
                    )
                if tuple(got_shape) != shape:
                    raise CheckpointError(
                        src, f"member {name!r} declares shape {tuple(got_shape)}, the configuration implies {shape}"
                    )
                if fortran and len(shape) > 1:
                    raise CheckpointError(src, f"member {name!r} is Fortran-ordered; expected C order")
                nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                if nbytes > MAX_ARRAY_BYTES:
                    raise CheckpointError(
                        src, f"member {name!r} declares {nbytes} bytes, over the {MAX_ARRAY_BYTES}-byte limit"
                    )
                if info.file_size != header_len + nbytes:
                    raise CheckpointError(
                        src,
                        f"member {name!r} holds {info.file_size - header_len} data bytes, its header implies {nbytes}",
                    )
                offsets[name] = (shape, dtype, nbytes)
            # pass 2: data (CRC checked when each member is read to its end)
            out = {}
            for name in sorted(want):
                shape, dtype, nbytes = offsets[name]
                arr = np.empty(shape, dtype=dtype)
                view = memoryview(arr.reshape(-1).view(np.uint8)) if nbytes else memoryview(b"")
                with _open_member(zf, self._infos[name + ".npy"], src) as f:
                    _read_header(f, src, name)
                    try:
                        got = 0
                        while got < nbytes:
                            n = f.readinto(view[got:])
                            if not n:
                                break
                            got += n
                        tail = f.read(1)
                    except _PARSE_ERRORS as exc:
                        raise CheckpointError(src, f"member {name!r} is corrupt ({_one_line(exc)})") from exc
                if got != nbytes or tail:
                    raise CheckpointError(src, f"member {name!r} is truncated or has trailing data")
                out[name] = arr
        return out


def _open_file(src):
    from navi_nb.files import open_regular

    try:
        return open_regular(src, "checkpoint")
    except OSError as exc:
        raise CheckpointError(src, f"cannot read ({exc.strerror or _one_line(exc)})") from exc


def _open_zip(fh, src):
    try:
        return zipfile.ZipFile(fh, "r")
    except _PARSE_ERRORS as exc:
        raise CheckpointError(src, f"not a readable .npz (truncated or corrupt: {_one_line(exc)})") from exc


def _open_member(zf, info, src):
    try:
        return zf.open(info, "r")
    except _PARSE_ERRORS as exc:
        raise CheckpointError(src, f"member {info.filename!r} cannot be opened ({_one_line(exc)})") from exc


def _read_header(f, src, name):
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            return np.lib.format.read_array_header_1_0(f)
        if version == (2, 0):
            return np.lib.format.read_array_header_2_0(f)
    except _PARSE_ERRORS as exc:
        raise CheckpointError(src, f"member {name!r} has a corrupt .npy header ({_one_line(exc)})") from exc
    raise CheckpointError(src, f"member {name!r} has .npy format version {version}, expected 1.0 or 2.0")


def _one_line(exc) -> str:
    """An exception's text on one line, bounded (parsers quote the bad input back)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def open_checkpoint(path) -> Checkpoint:
    """Open ``path``, check the zip directory and read ``meta.json`` (nothing else yet)."""
    src = Path(path)
    if not src.is_file():
        raise CheckpointError(src, "no such file" if not src.exists() else "not a regular file")
    with _open_file(src) as fh, _open_zip(fh, src) as zf:
        disk_size = os.fstat(fh.fileno()).st_size
        infos = {}
        for info in zf.infolist():
            name = info.filename
            if name in infos:
                raise CheckpointError(src, f"member {name!r} appears twice")
            if name != META_MEMBER and (not name.endswith(".npy") or "/" in name or name.startswith(".")):
                raise CheckpointError(src, f"unexpected member {name!r}")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise CheckpointError(src, f"member {name!r} uses unsupported compression {info.compress_type}")
            if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
                raise CheckpointError(
                    src,
                    f"member {name!r} is stored uncompressed but declares "
                    f"{info.file_size} bytes in {info.compress_size}",
                )
            infos[name] = info
        inflated = sum(info.file_size for info in infos.values())
        limit = MAX_INFLATION * disk_size + INFLATION_SLACK
        if inflated > limit:
            raise CheckpointError(
                src,
                f"members declare {inflated} bytes in all, more than {MAX_INFLATION} times "
                f"the file's {disk_size} bytes (limit {limit}): refused unread",
            )
        if META_MEMBER not in infos:
            raise CheckpointError(src, "no meta.json member")
        if infos[META_MEMBER].file_size > MAX_META_BYTES:
            raise CheckpointError(
                src, f"meta.json declares {infos[META_MEMBER].file_size} bytes (limit {MAX_META_BYTES})"
            )
        try:
            with zf.open(infos[META_MEMBER]) as f:
                raw = f.read(MAX_META_BYTES + 1)
            meta = json.loads(raw.decode("utf-8"))
        except _PARSE_ERRORS as exc:
            raise CheckpointError(src, f"meta.json is corrupt ({_one_line(exc)})") from exc
    if not isinstance(meta, dict):
        raise CheckpointError(src, "meta.json is not a JSON object")
    version = meta.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(src, f"format version {version!r} is not supported (expected {FORMAT_VERSION})")
    return Checkpoint(src, meta, infos)


def load_checkpoint(path, spec: dict, expect_hash: str | None = None, subset: bool = False):
    """Open, check the config hash (when given) and read the arrays of ``spec``: ``(arrays, meta)``
    (all the members, or with ``subset`` those of ``spec`` only: ``Checkpoint.read_arrays``)."""
    ck = open_checkpoint(path)
    if expect_hash is not None and ck.meta.get("config_hash") != expect_hash:
        raise CheckpointError(
            path,
            f"was written by a run with config hash {ck.meta.get('config_hash')!r}, "
            f"this run's config hash is {expect_hash!r} (another configuration)",
        )
    return ck.read_arrays(spec, subset), ck.meta


# --------------------------------------------------------------------------
# a run's checkpoint folder
# --------------------------------------------------------------------------


def checkpoint_name(update: int) -> str:
    return f"ckpt_{int(update):08d}.npz"


def list_checkpoints(folder) -> list:
    """``[(update, path), ...]`` sorted by update; temp files and strangers are ignored."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    out = []
    for p in folder.iterdir():
        m = CKPT_RE.match(p.name)
        if m and p.is_file():
            out.append((int(m.group(1)), p))
    return sorted(out)


def latest_checkpoint(folder):
    """Path of the newest checkpoint in ``folder``, or None."""
    found = list_checkpoints(folder)
    return found[-1][1] if found else None


def prune_checkpoints(folder, keep: int):
    """Delete all but the newest ``keep`` checkpoints (keep <= 0 keeps all)."""
    if keep <= 0:
        return
    for _, p in list_checkpoints(folder)[:-keep]:
        try:
            p.unlink()
        except OSError:
            pass
