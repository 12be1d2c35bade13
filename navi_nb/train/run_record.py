"""``run.json``: what each ``train`` call of a run did, one segment per call (a resumed run adds one).

``run_summary`` is a call's summary, the table the console prints at its end; ``write_run_record`` adds it to
the run folder's record with the start's shard report, the shard re-checks and switches, the placement under
MPI ranks, the command line and the software it ran on. ``scripts/headline_figures.py`` reads the rate, the
first tick and the shard count from it.
"""

from __future__ import annotations

import json
import math
import time

import numpy as np

import navi_nb
from navi_nb.train.runs import RUN_FILE, os_error, write_json_atomic


def run_summary(trainer, rows) -> dict:
    """What one ``train`` call did: its updates and actor-steps, their rate over the update seconds, the first
    tick, the last ten updates' success rate (an explore run: their mean coverage of the episodes that ended
    and of those still running, ``coverage_mean`` and ``coverage_in_progress_mean``) and mean return, the time
    split, the cores kept busy and the shard count (``rows``: the call's metrics rows)."""

    def last_finite(key, n=10):
        vals = [r[key] for r in rows[-n:] if math.isfinite(r[key])]
        return float(np.mean(vals)) if vals else float("nan")

    steps = sum(r["global_step"] for r in rows[-1:]) - (rows[0]["global_step"] - trainer.cfg.batch_size if rows else 0)
    wall = sum(r["t_collect_s"] + r["t_learn_s"] for r in rows)
    return {
        "run": str(trainer.run_path),
        "updates": trainer.update,
        "actor_steps": trainer.global_step,
        "wall_s": wall,
        "actor_steps_per_s": steps / wall if wall else float("nan"),
        "first_tick_s": trainer.first_tick_s,
        **(
            {
                "coverage_mean_last10": last_finite("coverage_mean"),
                "coverage_in_progress_mean_last10": last_finite("coverage_in_progress_mean"),
            }
            if trainer.cfg.task == "explore"
            else {"success_rate_last10": last_finite("success_rate")}
        ),
        "return_mean_last10": last_finite("return_mean"),
        "t_collect_s": trainer.timing["collect"],
        "t_learn_s": trainer.timing["learn"],
        "cores_busy": trainer.cores_busy(),
        "shards": trainer.shard_watch.current
        if trainer.shard_watch is not None
        else getattr(trainer.shard_report, "choice", None),
        "shard_switches": len(trainer.shard_watch.switches) if trainer.shard_watch is not None else 0,
        "shard_recheck_s": trainer.shard_watch.recheck_s if trainer.shard_watch is not None else 0.0,
        **({"ranks": trainer.ranks.size} if trainer.ranks is not None else {}),
    }


def write_run_record(trainer, summary):
    """Add this ``train`` call to ``run.json`` (``RUN_FILE``): its summary, the start's shard report, the
    shard re-checks and switches, the command and the software (a resumed run adds a segment)."""
    import platform
    import sys

    import numba

    from navi_nb.cores import cpu_model

    path = trainer.run_path / RUN_FILE
    try:
        old = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):  # unreadable: start the record again rather than stop a finished run
        old = {}
    segments = old.get("segments") if isinstance(old, dict) and isinstance(old.get("segments"), list) else []
    segment = {
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
        "argv": list(sys.argv),
        "summary": summary,
        "shards": {
            "start": trainer.shard_report.as_dict() if trainer.shard_report is not None else None,
            "watch": trainer.shard_watch.as_dict() if trainer.shard_watch is not None else None,
        },
        # hosts, ranks, threads and RAM of this call's placement (a resume may use another)
        **({"topology": trainer.ranks.topology_info} if trainer.ranks is not None else {}),
        "software": {
            "cpu": cpu_model(),
            "navi_nb": navi_nb.__version__,
            "python": platform.python_version(),
            "numpy": np.__version__,
            "numba": numba.__version__,
            "platform": platform.platform(),
        },
    }
    try:
        write_json_atomic(path, {"segments": segments + [segment]})
    except OSError as exc:
        raise os_error(exc, f"cannot write {path}") from None
