"""Files written whole or not at all.

``write_atomic(path, data)`` writes through a temporary file beside ``path``
(``.NAME.tmp``), flushed to disk, then renamed over ``path``: a reader, or a
run that resumes after a crash, sees the old file or the new one, never a
part of one. The world files, run records and metrics tables all write
through it. A shared top-level module: it imports no stage.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path, data: bytes) -> Path:
    """Replace ``path`` with ``data`` in one rename; a failure leaves ``path`` as it was and no temporary."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # gone after the rename; a part-written one after a failure
    return path
