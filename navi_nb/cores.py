"""How many cores this process may really use: affinity and cgroup CPU quota.

``os.cpu_count()`` reports the machine; a container may be allowed far less.
``allowed_cores(root="/")`` reads

- the CPU affinity set (``os.sched_getaffinity``), and
- the cgroup CPU quota of this process's cgroup and of every parent cgroup
  (the smallest wins): cgroup v2 ``cpu.max`` ("QUOTA PERIOD" or "max PERIOD"),
  cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (-1 means none),

and allows ``min(affinity count, floor(quota / period))``, at least 1.
``root`` prefixes every path (``root/proc/self/cgroup``,
``root/sys/fs/cgroup/...``) so tests can hand it a fake tree.
"""

from __future__ import annotations

import math
import os
import platform
from dataclasses import dataclass, field


@dataclass
class CoreReport:
    cpu_count: int | None
    """what os.cpu_count() said"""
    affinity: frozenset = field(default_factory=frozenset)
    """CPUs in the affinity set"""
    affinity_count: int = 1
    cgroup_version: int | None = None
    """1, 2, or None when no cgroup CPU controller was found"""
    quota_raw: str | None = None
    """the quota as read, e.g. '200000 100000' (v2) or '200000/100000' (v1); None: no quota"""
    quota_cores: float | None = None
    """quota / period; None when unlimited"""
    quota_path: str | None = None
    """the file the binding quota came from"""
    allowed: int = 1
    """cores this process may use: min(affinity, floor(quota)), at least 1"""
    reason: str = ""

    def as_dict(self):
        return {
            "cpu_count": self.cpu_count,
            "affinity_count": self.affinity_count,
            "cgroup_version": self.cgroup_version,
            "quota_raw": self.quota_raw,
            "quota_cores": self.quota_cores,
            "allowed": self.allowed,
            "reason": self.reason,
        }


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _cgroup_paths(root):
    """{controller-set or '' (v2): cgroup path} from root/proc/self/cgroup."""
    text = _read(os.path.join(root, "proc/self/cgroup")) or ""
    out = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            out[parts[1]] = parts[2]
    return out


def _ancestors(base, rel):
    """base/rel, base/parent(rel), ..., base: the cgroup and every parent up to the mount."""
    rel = rel.strip("/")
    dirs = []
    while True:
        dirs.append(os.path.join(base, rel) if rel else base)
        if not rel:
            break
        rel = os.path.dirname(rel)
    return dirs


def _quota_v2(root, rel):
    base = os.path.join(root, "sys/fs/cgroup")
    best = None
    for d in _ancestors(base, rel):
        text = _read(os.path.join(d, "cpu.max"))
        if not text:
            continue
        parts = text.split()
        if parts[0] == "max" or len(parts) < 2:
            continue
        q, p = int(parts[0]), int(parts[1])
        if q > 0 and p > 0 and (best is None or q / p < best[0]):
            best = (q / p, text, os.path.join(d, "cpu.max"))
    return best


def _quota_v1(root, rel, mount):
    base = os.path.join(root, "sys/fs/cgroup", mount)
    best = None
    dirs = _ancestors(base, rel)
    if not os.path.isdir(dirs[0]):
        dirs = [base]  # a container often sees its own cgroup mounted at the root
    for d in dirs:
        q, p = _read(os.path.join(d, "cpu.cfs_quota_us")), _read(os.path.join(d, "cpu.cfs_period_us"))
        if q is None or p is None:
            continue
        q, p = int(q), int(p)
        if q > 0 and p > 0 and (best is None or q / p < best[0]):
            best = (q / p, f"{q}/{p}", os.path.join(d, "cpu.cfs_quota_us"))
    return best


def read_quota(root="/"):
    """(cgroup version or None, (cores, raw text, path) or None)."""
    paths = _cgroup_paths(root)
    if os.path.exists(os.path.join(root, "sys/fs/cgroup/cgroup.controllers")):
        return 2, _quota_v2(root, paths.get("", "/"))
    for controllers, rel in paths.items():
        names = controllers.split(",")
        if "cpu" in names:
            for mount in (controllers, "cpu", "cpu,cpuacct", "cpuacct,cpu"):
                if os.path.isdir(os.path.join(root, "sys/fs/cgroup", mount)):
                    return 1, _quota_v1(root, rel, mount)
    if "" in paths:  # v2 without the controllers file at the mount (unusual)
        return 2, _quota_v2(root, paths[""])
    return None, None


def allowed_cores(root="/", affinity=None) -> CoreReport:
    """The cores this process may use (see the module docstring).

    ``affinity``: an iterable of CPU ids to use instead of the real affinity
    set (tests).
    """
    cpu_count = os.cpu_count()
    if affinity is None:
        try:
            affinity = os.sched_getaffinity(0)
        except (AttributeError, OSError):
            affinity = range(cpu_count or 1)
    affinity = frozenset(int(c) for c in affinity)
    n_aff = max(1, len(affinity))
    version, quota = read_quota(root)
    if quota is None:
        allowed = n_aff
        why = f"no CPU quota; affinity allows {n_aff} of {cpu_count} reported cores"
        raw = cores = path = None
    else:
        cores, raw, path = quota
        q = max(1, math.floor(cores + 1e-9))
        allowed = min(n_aff, q)
        limit = "quota" if q < n_aff else "affinity"
        why = f"{limit} allows {allowed} of {cpu_count} reported cores (quota {cores:g} cores, affinity {n_aff})"
    return CoreReport(
        cpu_count=cpu_count,
        affinity=affinity,
        affinity_count=n_aff,
        cgroup_version=version,
        quota_raw=raw,
        quota_cores=cores,
        quota_path=path,
        allowed=allowed,
        reason=why,
    )


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
