"""95 % intervals of an evaluation's figures: Wilson's for a success rate, the percentile bootstrap for a mean."""

from __future__ import annotations

import numpy as np

Z95 = 1.959963984540054  # the standard normal's 97.5 % quantile
BOOTSTRAP_RESAMPLES = 2000


def wilson_interval(successes, n, z=Z95):
    """The Wilson score interval of a success rate (stays inside [0, 1], sensible at 0 % and 100 %)."""
    if n <= 0:
        return [float("nan"), float("nan")]
    p = successes / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return [float(max(0.0, mid - half)), float(min(1.0, mid + half))]


def bootstrap_interval(values, resamples=BOOTSTRAP_RESAMPLES, seed=0):
    """The 95 % percentile-bootstrap interval of a mean; seeded, so the same values give the same interval."""
    v = np.asarray(values, np.float64)
    if v.size == 0:
        return [float("nan"), float("nan")]
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, v.size, size=(resamples, v.size))].mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return [float(lo), float(hi)]
