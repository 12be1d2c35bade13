"""The bytes one actor of ``NavEnv`` holds at least, for checks made before an environment is built.

``NavEnv.ram_report()`` measures a built environment's buffers; this is the lower bound a training or
evaluation run checks against the available RAM (``navi_nb.ram``) before it allocates anything:
``TrainConfig.ram_estimate`` and the evaluation's estimate add the rollout slab and the network to it.
"""

from __future__ import annotations

RAY_BYTES = 4 + 2 + 1
"""Per ray: the depth (float32), the class (uint16) and the hit flag (bool) buffers."""


def actor_bytes(obs_dim: int, n_rays: int) -> int:
    """Bytes one actor of NavEnv holds at least: its state and step buffers (two observations of ``obs_dim``
    float32 values and about 200 bytes of poses and counters) and its ``n_rays`` rays' buffers."""
    return 8 * int(obs_dim) + 200 + RAY_BYTES * int(n_rays)
