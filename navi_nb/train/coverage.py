"""The explore task's evaluation figures: coverage after half the step limit and after all of it.

An explore episode has no goal, so success, SPL, the final distance to a goal and the difficulty bins mean
nothing there. What it scores is coverage, the fraction of the world's reachable visit-grid cells (the
cells of its spawn pool) that the actor has entered, read twice per episode: ``coverage_half`` after
``max_steps // 2`` steps and ``coverage`` after ``max_steps`` (the episode record's, at its end; explore
episodes always last ``max_steps``). With the default ``max_steps`` of 500 these are coverage after 250 and
after 500 steps. Over a group of episodes their means are ``coverage_half_mean`` and ``coverage_mean``, each
with a 95 % percentile-bootstrap interval (``..._ci95``), beside the mean return, length and collisions.
"""

from __future__ import annotations

import numpy as np

from navi_nb.train.intervals import bootstrap_interval

COVERAGE_KEYS = ("coverage_half", "coverage")
"""The per-episode coverages an explore evaluation keeps: after ``max_steps // 2`` steps and after ``max_steps``."""
GOAL_KEYS = ("success", "spl", "final_distance", "geodesic", "ratio")
"""Per-episode figures of a goal, left out of an explore evaluation's results."""


def coverage_steps(max_steps: int) -> list:
    """The step counts after which an explore evaluation reads coverage: ``[max_steps // 2, max_steps]``."""
    return [int(max_steps) // 2, int(max_steps)]


def summarize_coverage(ep, sel) -> dict:
    """Means and 95 % intervals of the explore episodes ``sel`` (rows or a slice) of per-episode arrays ``ep``."""
    n = int(ep["coverage"][sel].size)
    out = {"episodes": n}
    for k in COVERAGE_KEYS:
        v = ep[k][sel]
        out[k + "_mean"] = float(v.mean()) if n else float("nan")
        out[k + "_mean_ci95"] = bootstrap_interval(v)
    for k in ("return", "length", "collisions"):
        out[k + "_mean"] = float(ep[k][sel].mean()) if n else float("nan")
    return out


def check_coverages(path, eps, error):
    """Raise ``error(path, message)`` unless ``eps``'s coverages (when it holds them) are fractions in [0, 1]."""
    for k in COVERAGE_KEYS:
        v = eps.get(k)
        if v is not None and v.size and not (np.isfinite(v).all() and v.min() >= 0 and v.max() <= 1):
            raise error(path, f"member {k!r} holds values outside [0, 1]")


def coverage_cell(g, key) -> str:
    lo, hi = g[key + "_mean_ci95"]
    return f"{g[key + '_mean']:.1%} ({100 * lo:.1f}-{100 * hi:.1f}%)"


def evaluation_title(res, task) -> str:
    """The title of an evaluation's console table: episodes, task, scenes, worlds, seed, episode settings."""
    overlap = f", {res['overlap_worlds']} overlapping training" if res.get("overlap_worlds") else ""
    drawn = ", ".join(f"{k}={v}" for k, v in res.get("episode_settings", {}).items())
    return (
        f"evaluation: {res['episodes']} episodes, {task} in {res['scenes']} "
        f"({res['worlds']} worlds, {res['worlds_visited']} visited{overlap}; mean action, "
        f"seed {res['seed']}" + (f"; episodes drawn with {drawn}" if drawn else "") + ")"
    )


def print_coverage_results(console, res):
    """The console table of an explore evaluation (``res``: ``evaluate``'s results): coverage after each of
    ``res["coverage_steps"]`` steps, overall, per split and per family."""
    from rich import box
    from rich.table import Table

    half, full = res["coverage_steps"]
    t = Table(
        title=evaluation_title(res, "explore"),
        caption="(coverage: the fraction of the reachable visit-grid cells entered after that many steps; "
        "95% intervals" + ("; then by scene family)" if len(res["families"]) > 1 else ")"),
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
    )
    t.add_column("worlds", no_wrap=True)
    for col in ("episodes", f"coverage @{half}", f"coverage @{full}"):
        t.add_column(col, justify="right", no_wrap=True)
    groups = [("all", res)] + list(res["splits"].items())
    families = list(res["families"].items()) if len(res["families"]) > 1 else []
    for i, (name, g) in enumerate(groups + families):
        if i == len(groups):
            t.add_section()
        t.add_row(name, str(g["episodes"]), coverage_cell(g, "coverage_half"), coverage_cell(g, "coverage"))
    console.print(t)
    if "generalization_gap" in res:
        console.print(f"generalization gap (train minus held-out coverage @{full}): {res['generalization_gap']:+.1%}")
    console.print(
        f"return {res['return_mean']:.3f} +- {res['return_std']:.3f}, length {res['length_mean']:.1f} "
        f"steps, {res['collisions_mean']:.2f} collisions per episode; policy {res['policy']['source']} "
        f"(update {res['policy']['update']}); {res['wall_s']:.1f} s"
    )
