"""RAM checks: refuse what cannot fit in the machine's memory before allocating it.

``available_ram()`` is the bytes this process may still allocate (the
system's ``MemAvailable``, capped by a cgroup memory limit minus its use);
``check_fits(need, what)`` raises when an estimate exceeds a share of it. The
world stage (scene sets, ``world/scene_spec.py``) and the train stage (actors,
rollout slabs, evaluation episodes, ``train/runs.py``) both ask here, each with
its own error class and wording of ``what``. A shared top-level module: it
imports no stage.
"""

from __future__ import annotations

import os

from navi_nb.errors import NaviError

_CGROUP_FILES = (
    ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),  # cgroup v2
    ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),  # v1
)
_NO_LIMIT = 2**60  # cgroup v1 writes "unlimited" as a number near 2**63


def available_ram() -> int | None:
    """Bytes this process may still allocate: the smaller of ``MemAvailable`` and the cgroup's limit minus its
    use; the free pages where neither can be read; None where nothing can be read."""
    found = []
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    for limit_file, usage_file in _CGROUP_FILES:
        try:
            with open(limit_file) as fh:
                text = fh.read().strip()
            if not text.isdigit() or int(text) >= _NO_LIMIT:  # "max": no limit
                continue
            with open(usage_file) as fh:
                found.append(max(0, int(text) - int(fh.read().strip())))
            break
        except (OSError, ValueError):
            continue
    if not found:
        try:
            found.append(int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")))
        except (OSError, ValueError, AttributeError):
            return None
    return min(found)


def size_text(n: int) -> str:
    """Bytes as GiB (from a quarter GiB up) or MiB, for messages."""
    return f"{n / 2**30:.2f} GiB" if n >= 2**28 else f"{n / 2**20:.1f} MiB"


def check_fits(
    need: int, what: str, *, fraction: float = 1.0, available=None, detail: str = "", error=NaviError
) -> int | None:
    """Raise ``error`` when ``need`` bytes exceed ``fraction`` of the available RAM; returns the bytes available.

    The message reads ``"{what} would need about N GiB of RAM{detail}, more than [50% of] the M GiB
    available"``, e.g. with ``what="actors=4096 with rollout_steps=128"``. available: bytes (default:
    ``available_ram()``; where that cannot be read nothing is refused).
    """
    have = available_ram() if available is None else int(available)
    if have is not None and need > fraction * have:
        share = "" if fraction >= 1.0 else f"{fraction:.0%} of "
        raise error(
            f"{what} would need about {size_text(need)} of RAM{detail}, "
            f"more than {share}the {size_text(have)} available"
        )
    return have
