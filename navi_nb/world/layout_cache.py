"""The decoded world layout in a file that every process maps read-only.

A world set's packed layout (``world_set.PackedWorlds``: child codes, leaf distances and semantics,
dense top tables, per-world offsets) is decoded from the ``.gmdag`` nodes once and written to
``layouts/KEY.layout`` next to the world cache (``world_cache.default_cache_dir()``'s parent), where
KEY hashes :data:`LAYOUT_VERSION`, the top-table depths and every world's content
(``world_set._world_key``: resolution, voxel size, node bytes). Every later process, and every MPI rank
on the host, maps that file read-only (``mmap``, ``PROT_READ``): the kernels read the page cache's one
copy, so ranks on one host share the world's pages instead of each holding a decoded copy.

File: 8 bytes ``NAVILAY1``, an 8-byte little-endian header length, a JSON header (key, arrays'
dtypes, shapes and offsets, payload size, the BLAKE2b digest of the arrays' table and the payload), then
the arrays, each at a 64-byte boundary. The digest covers the table as well as the bytes: a dtype, shape
or offset changed in the header would read the right bytes as other arrays. It is written to a temporary
name and then linked to its name only if none is there, so whoever comes first (rank 0, or one of
several processes starting together) writes it, the others map that one, and a reader never sees half a
file. A file whose size, header, key or digest
does not match is not trusted: it is decoded again and renamed over the bad one.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import tempfile
from pathlib import Path

import numpy as np

LAYOUT_VERSION = 3  # 3: the digest covers the arrays' table
"""Bump when ``layout.decode_layout`` or the packing changes what the arrays hold, or the file's format."""
MAGIC = b"NAVILAY1"
ALIGN = 64
ARRAY_NAMES = ("child", "leaf_dist", "leaf_sem", "top_code", "top_level", "iparams", "distinct", "added")


def default_layout_dir() -> Path:
    """``layouts/`` beside the world cache's ``worlds/`` (``NAVI_NB_CACHE``, else ``XDG_CACHE_HOME``, moves both)."""
    from navi_nb.world.world_cache import default_cache_dir

    return default_cache_dir().parent / "layouts"


def layout_key(worlds, world_keys, depths) -> str:
    """The content hash that names a set's layout file."""
    h = hashlib.blake2b(digest_size=20)
    h.update(json.dumps({"version": LAYOUT_VERSION, "worlds": len(worlds), "depths": list(depths)}).encode())
    for key in world_keys:
        h.update(repr(key).encode())
    return h.hexdigest()


def _digest(entries, payload) -> str:
    """The digest of the arrays' table (the header's ``arrays``, as JSON with sorted keys) and the payload."""
    h = hashlib.blake2b(json.dumps(entries, sort_keys=True).encode() + b"\0", digest_size=20)
    h.update(payload)
    return h.hexdigest()


def write_layout(path, key, arrays: dict, replace=False) -> Path:
    """Write ``arrays`` (name -> array) to ``path`` atomically: a temporary file, then linked to ``path``
    only if no file is there (another process came first: its file is kept, so every process maps the
    same one), or renamed over it when ``replace`` (a file found bad)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    entries, offset = [], 0
    for name in ARRAY_NAMES:
        a = np.ascontiguousarray(arrays[name])
        entries.append({"name": name, "dtype": a.dtype.str, "shape": list(a.shape), "offset": offset})
        offset += -(-a.nbytes // ALIGN) * ALIGN
    payload = bytearray(offset)
    for e in entries:
        a = np.ascontiguousarray(arrays[e["name"]])
        payload[e["offset"] : e["offset"] + a.nbytes] = a.tobytes()
    header = {"key": key, "arrays": entries, "payload": len(payload), "digest": _digest(entries, payload)}
    head = json.dumps(header).encode()
    head += b" " * (-(len(MAGIC) + 8 + len(head)) % ALIGN)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + len(head).to_bytes(8, "little") + head)
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path


def map_layout(path, key):
    """``(arrays, None)``: the file's arrays as read-only views of one shared mapping, after checking
    its size, header, key and digest; or ``(None, why)`` when the file is missing or not to be trusted (not
    a regular file, a FIFO say, is never opened: the caller writes the layout over it)."""
    from navi_nb.files import open_regular

    path = Path(path)
    try:
        with open_regular(path, "layout file") as f:
            size = os.fstat(f.fileno()).st_size
            start = f.read(len(MAGIC) + 8)
            if len(start) < len(MAGIC) + 8 or start[: len(MAGIC)] != MAGIC:
                return None, "not a layout file"
            n = int.from_bytes(start[len(MAGIC) :], "little")
            if n > size:
                return None, "truncated header"
            header = json.loads(f.read(n))
            base = len(MAGIC) + 8 + n
            if not isinstance(header, dict):
                return None, "not a layout header"
            if header.get("key") != key:
                return None, "another world's layout"
            if size != base + int(header["payload"]):
                return None, f"{size} bytes, expected {base + int(header['payload'])}"
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        return None, "missing"
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        return None, f"unreadable ({exc})"
    whole = np.frombuffer(buf, np.uint8)  # read-only: the mapping is PROT_READ
    payload = whole[base:]
    if _digest(header.get("arrays"), payload) != header.get("digest"):
        return None, "digest mismatch"
    out = {}
    try:
        for e in header["arrays"]:
            dt = np.dtype(e["dtype"])
            count = int(np.prod(e["shape"], dtype=np.int64))
            o = int(e["offset"])
            out[e["name"]] = payload[o : o + count * dt.itemsize].view(dt).reshape(e["shape"])
    except (ValueError, KeyError, TypeError) as exc:
        return None, f"bad header ({exc})"
    if set(out) != set(ARRAY_NAMES):
        return None, "bad header (arrays)"
    return out, None


def mapping_of(array):
    """``(path, pss, rss)`` (bytes) of the mapping in ``/proc/self/smaps`` that holds ``array``'s data,
    or None (no such file, or an array not mapped from a file)."""
    addr = array.__array_interface__["data"][0]
    try:
        with open("/proc/self/smaps") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    found = None
    for line in lines:
        head = line.split()
        if head and not head[0].endswith(":"):  # a mapping's first line: "lo-hi perms offset dev inode path"
            if found is not None:
                break
            lo, hi = (int(x, 16) for x in head[0].split("-"))
            if lo <= addr < hi:
                found = {"path": " ".join(head[5:])}
        elif found is not None and head and head[0] in ("Pss:", "Rss:"):
            found[head[0][:-1].lower()] = int(head[1]) * 1024
    if found is None:
        return None
    return found["path"], found.get("pss", 0), found.get("rss", 0)
