"""Every setting of the environment, in one dataclass that documents itself.

Pass any field as a keyword to :class:`navi_nb.env.NavEnv` (``NavEnv(world, 64,
max_steps=300)``); unknown names and bad values raise :class:`EnvConfigError`
before anything is allocated.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from navi_nb.errors import NaviError


class EnvConfigError(NaviError, ValueError):
    """A bad environment setting (unknown name, wrong type, out of range)."""


class ActionError(NaviError, ValueError):
    """Actions handed to ``step`` that cannot be used (NaN, inf, shape, dtype)."""


class StateError(NaviError, ValueError):
    """A state dict handed to ``set_state`` that does not fit this environment."""


TASKS = ("pointgoal", "explore")
INT32_MAX = 2**31 - 1
WORLD_SCHEDULES = ("random", "round_robin")
DISTANCES = ("geodesic", "euclidean")
EPISODE_RECORD = {
    "return": np.float32,  # the episode's summed reward
    "length": np.int32,  # its steps
    "success": np.bool_,  # reached the goal (point-goal)
    "spl": np.float32,  # success weighted by path length (point-goal)
    "coverage": np.float32,  # fraction of the reachable visit-grid cells visited (explore)
    "collisions": np.int32,  # contacts
    "world": np.int32,  # index of its world in the world set
}
"""The episode record: each finished episode's statistics and their dtypes, as an environment reports them
in ``info["episode"]`` (one value per actor; the toy environments report the ones that apply to them), the
collection loop gathers them and an evaluation keeps them (``eval_episodes.npz``)."""
EPISODE_KEYS = tuple(EPISODE_RECORD)
"""The episode record's names, in its order."""
REWARD_TERMS = (
    "reward_progress",
    "reward_success",
    "reward_new_cell",
    "penalty_contact",
    "penalty_time",
    "penalty_path",
    "reward_count",
)
FLOAT32_MAX = 3.4028234663852886e38
REWARD_HEADROOM = 1e4  # a step's reward terms scale with metres (progress, path) and cells: room for that
MIN_DIVISOR_M = 1e-3
MAX_MAP_CROP = 64
"""The largest ``map_crop``: a crop of 64 x 64 cells is 12,288 columns, already wider than the rays."""
MAX_MAP_COARSE = 16
"""The largest ``map_coarse``: a coarse cell of 16 x 16 map cells is 8 m a side at the 0.5 m cell."""
EPISODE_SETTINGS = (
    "goal_min_distance",
    "goal_max_distance",
    "goal_distance",
    "goal_min_ratio",
    "goal_max_ratio",
    "spawn",
    "max_steps",
    "max_steps_per_metre",
    "max_steps_base",
    "success_radius",
)
"""The environment settings an evaluation may set instead of the run's (``env=``, ``--env``): they decide
which episodes are drawn and when one ends, not what the policy observes or how it moves."""


@dataclass
class EnvConfig:
    # --- time and motion -------------------------------------------------
    dt: float = 0.1
    """Seconds per step."""
    max_speed: float = 2.0
    """Metres per second at forward action +-1."""
    max_vertical_speed: float = 1.0
    """Metres per second at vertical action +-1 (+1 moves up, along +y)."""
    max_lateral_speed: float = 1.0
    """Metres per second at lateral action +-1 (+1 moves right, +x at yaw 0)."""
    max_yaw_rate: float = math.pi / 2
    """Radians per second at yaw action +-1 (+1 turns right, toward +x from -z)."""
    radius: float = 0.2
    """The actor is a sphere of this radius (metres)."""
    contact_margin: float = -1.0
    """Extra clearance (metres) kept from the queried distance to absorb the
    world's quantisation; negative means half a voxel of the loaded world."""
    max_substeps: int = 24
    """Most clearance-limited sub-moves per step in the collision kernel."""

    # --- episodes --------------------------------------------------------
    max_steps: int = 500
    """Step limit: an episode reaching it is truncated (with ``max_steps_per_metre`` on, the cap of the rule)."""
    max_steps_per_metre: float = 0.0
    """pointgoal: above 0, each episode's step limit follows its goal, ``min(max_steps, ceil(max_steps_base +
    max_steps_per_metre * l))`` with l the shortest path from spawn to goal (metres, SPL's); 0 (the default):
    every episode gets ``max_steps``. Explore episodes always get ``max_steps``."""
    max_steps_base: int = 100
    """pointgoal, with ``max_steps_per_metre`` on: the steps the rule gives before the first metre."""
    spawn: str = "free"
    """``"free"``: uniform over reachable free space with clearance (default);
    ``"points"``: the world's listed spawn points (falls back to free space
    when the world lists none)."""
    spawn_cell: float = -1.0
    """Cell size (metres) of the reachability grid used to sample spawns and
    goals; zero or negative means ``max(radius, one voxel)``."""

    world_schedule: str = "random"
    """Which world of a world set an actor's next episode uses, a function of
    (seed, actor, episode number) only: ``"random"``, uniform, by a hash of the
    three; ``"round_robin"``, world ``(actor + episode) % worlds`` (every world
    in use from the first episode when there are at least as many actors as
    worlds, and every actor cycles through all of them)."""

    # --- point-goal ------------------------------------------------------
    goal_min_distance: float = 1.0
    """Goals are sampled at least this far (straight line) from the spawn."""
    goal_max_distance: float = 8.0
    """... and at most this far (when the free space allows)."""
    goal_distance: str = "euclidean"
    """What ``goal_min_distance``..``goal_max_distance`` measure: ``"euclidean"``, the straight line
    from the spawn, or ``"geodesic"``, the shortest path through free space (the goal is drawn first
    and the spawn among pool cells whose distance from it lies in the band)."""
    goal_min_ratio: float = 1.0
    """Episodes prefer spawn-goal pairs whose geodesic / straight-line ratio is at least this (1.1 keeps
    Habitat's non-trivial episodes, which need a detour); above 1 the geodesic field decides the draw."""
    goal_max_ratio: float = 0.0
    """... and at most this (0: no upper bound)."""
    success_radius: float = 0.5
    """Success: the actor's centre within this distance of the goal."""
    goal_scale: float = 10.0
    """The goal distance and height difference in the observation are divided by this."""

    # --- explore ---------------------------------------------------------
    visit_cell: float = 1.0
    """Cell size (metres) of the per-actor visit grid; grown when the world
    cube needs more than ``visit_max_cells`` cells per axis."""
    visit_max_cells: int = 64
    """Most visit-grid cells per axis (bounds the per-actor RAM)."""

    # --- rewards ---------------------------------------------------------
    reward_progress: float = 1.0
    """pointgoal: reward per metre the goal distance shrinks (negative if it grows)."""
    progress: str = "geodesic"
    """pointgoal: the distance the progress reward measures: ``"geodesic"``, the shortest path through
    the world's free space read from a field computed at each episode start (Habitat's PointNav
    reward), or ``"euclidean"``, the straight line."""
    reward_success: float = 10.0
    """pointgoal: bonus on the step that reaches the goal."""
    reward_new_cell: float = 1.0
    """explore: reward per visit-grid cell entered for the first time in the episode."""
    penalty_contact: float = 0.1
    """Subtracted on every step that touched geometry or the world cube's side."""
    penalty_time: float = 0.01
    """Subtracted on every step."""
    penalty_path: float = 0.0
    """pointgoal: subtracted per metre the actor moves (the path length SPL divides by)."""
    reward_count: float = 0.0
    """Meant for explore (either task takes it): above 0, a count-based bonus of ``reward_count / sqrt(n)`` each
    step, n the episodic map's visit count of the actor's cell after the step (this visit included, so n >= 1;
    the count saturates at 255); needs the map (``map_cell`` > 0). 0: off (the ``count`` term reads 0)."""

    # --- observation -----------------------------------------------------
    max_distance: float = 10.0
    """Sensor range in metres; depth is observed as log1p(d) / log1p(max_distance)."""
    semantic_obs: bool = False
    """Append each ray's semantic class / (classes - 1) to the observation."""

    # --- episodic map (navi_nb/env/episodic_map.py) -------------------------
    map_cell: float = 0.0
    """Cell size (metres) of each actor's episodic map, a 2-D grid over its world at its height of what it
    has visited and its rays have seen free or occupied this episode, observed as the ``map`` entry; 0: off
    (no map, no columns, no cost)."""
    map_crop: int = 16
    """Cells a side of the egocentric crop of the map the actor observes (turned to its heading)."""
    map_channels: int = 3
    """The crop's channels: 3 (visits, seen free, seen occupied) or 2 (visits, seen occupied)."""
    map_coarse: int = 0
    """With k > 0, one more channel: the visits over coarse cells of k x k map cells, cropped at the same size,
    so the crop reaches k times as far (where the actor has been, beyond what the fine channels show); 0: off."""
    map_band: float = 0.25
    """Radians from horizontal within which a sensor row's rays update the map."""

    def validate(self) -> EnvConfig:
        def positive(name):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise EnvConfigError(f"env config: {name} must be a finite number > 0, got {v!r}")

        def non_negative(name):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise EnvConfigError(f"env config: {name} must be a finite number >= 0, got {v!r}")

        for name in (
            "dt",
            "max_speed",
            "max_vertical_speed",
            "max_lateral_speed",
            "max_yaw_rate",
            "radius",
            "goal_max_distance",
            "success_radius",
            "goal_scale",
            "visit_cell",
            "max_distance",
        ):
            positive(name)
        for name in ("goal_min_distance", *REWARD_TERMS):
            non_negative(name)
        for name in ("contact_margin", "spawn_cell"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v)):
                raise EnvConfigError(f"env config: {name} must be a finite number, got {v!r}")
        for name, lo in (("max_steps", 1), ("max_substeps", 1), ("visit_max_cells", 1)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise EnvConfigError(f"env config: {name} must be an integer >= {lo}, got {v!r}")
        self._validate_step_rule()
        # observations and rewards are float32: a length that divides one, or a reward that a whole episode adds
        # up, is bounded so that neither can overflow (the refusal names the setting, not the rollout it breaks)
        for name in ("goal_scale", "max_distance"):
            v = getattr(self, name)
            if v < MIN_DIVISOR_M:
                raise EnvConfigError(
                    f"env config: {name} must be >= {MIN_DIVISOR_M} m (observations divide by it), got {v!r}"
                )
        for name in REWARD_TERMS:
            v = getattr(self, name)
            if v * (self.max_steps + 1) * REWARD_HEADROOM > FLOAT32_MAX:
                raise EnvConfigError(
                    f"env config: {name} of {v!r} would overflow float32 returns over {self.max_steps} steps; "
                    f"it must be <= {FLOAT32_MAX / ((self.max_steps + 1) * REWARD_HEADROOM):.3g}"
                )
        if self.visit_max_cells > 256:
            raise EnvConfigError(f"env config: visit_max_cells must be <= 256, got {self.visit_max_cells}")
        if self.goal_min_distance > self.goal_max_distance:
            raise EnvConfigError(
                f"env config: goal_min_distance ({self.goal_min_distance}) > goal_max_distance "
                f"({self.goal_max_distance})"
            )
        for name in ("progress", "goal_distance"):
            if getattr(self, name) not in DISTANCES:
                raise EnvConfigError(
                    f"env config: {name} must be one of {', '.join(DISTANCES)}, got {getattr(self, name)!r}"
                )
        lo, hi = self.goal_min_ratio, self.goal_max_ratio
        if not (isinstance(lo, (int, float)) and math.isfinite(lo) and lo >= 1.0):
            raise EnvConfigError(f"env config: goal_min_ratio must be a finite number >= 1, got {lo!r}")
        if not (isinstance(hi, (int, float)) and math.isfinite(hi) and (hi == 0 or hi >= lo)):
            raise EnvConfigError(
                f"env config: goal_max_ratio must be 0 (no bound) or finite >= goal_min_ratio ({lo}), got {hi!r}"
            )
        if self.spawn not in ("free", "points"):
            raise EnvConfigError(f"env config: spawn must be 'free' or 'points', got {self.spawn!r}")
        if self.world_schedule not in WORLD_SCHEDULES:
            raise EnvConfigError(
                f"env config: world_schedule must be one of {', '.join(WORLD_SCHEDULES)}, got {self.world_schedule!r}"
            )
        self._validate_map()
        if not isinstance(self.semantic_obs, bool):
            raise EnvConfigError(f"env config: semantic_obs must be True or False, got {self.semantic_obs!r}")
        return self

    def _validate_step_rule(self):
        """max_steps fits ep_len's int32, and the per-metre rule gives every episode 1 to max_steps steps."""
        if self.max_steps > INT32_MAX:
            raise EnvConfigError(
                f"env config: max_steps must be <= {INT32_MAX} (episode lengths are int32), got {self.max_steps}"
            )
        rate, base = self.max_steps_per_metre, self.max_steps_base
        if not (isinstance(rate, (int, float)) and not isinstance(rate, bool) and math.isfinite(rate) and rate >= 0):
            raise EnvConfigError(f"env config: max_steps_per_metre must be a finite number >= 0 (0: off), got {rate!r}")
        if not isinstance(base, int) or isinstance(base, bool) or base < 0:
            raise EnvConfigError(f"env config: max_steps_base must be an integer >= 0, got {base!r}")
        if rate == 0:
            return
        if base < 1:  # a goal next to the spawn would get 0 steps
            raise EnvConfigError(
                f"env config: max_steps_base must be >= 1 with max_steps_per_metre on (the rule gives a goal at 0 m "
                f"max_steps_base steps), got {base}"
            )
        if math.ceil(base + rate) >= self.max_steps:
            raise EnvConfigError(
                f"env config: the step rule ceil({base} + {rate} * metres) capped at max_steps ({self.max_steps}) "
                "gives max_steps to every goal 1 m away or farther: raise max_steps (the cap) or lower "
                "max_steps_base / max_steps_per_metre"
            )

    def _validate_map(self):
        """The map settings' ranges (each error names the setting and its valid range), and the map that the count
        bonus (``reward_count`` > 0) reads."""
        cell, crop, channels, band = self.map_cell, self.map_crop, self.map_channels, self.map_band
        if not (isinstance(cell, (int, float)) and not isinstance(cell, bool) and (cell == 0 or 0.05 <= cell <= 10)):
            raise EnvConfigError(f"env config: map_cell must be 0 (off) or metres in 0.05..10, got {cell!r}")
        if not isinstance(crop, int) or isinstance(crop, bool) or not 2 <= crop <= MAX_MAP_CROP:
            raise EnvConfigError(f"env config: map_crop must be an integer in 2..{MAX_MAP_CROP} (cells), got {crop!r}")
        if channels not in (2, 3) or isinstance(channels, bool):
            raise EnvConfigError(f"env config: map_channels must be 2 or 3, got {channels!r}")
        coarse = self.map_coarse
        if not isinstance(coarse, int) or isinstance(coarse, bool) or coarse not in (0, *range(2, MAX_MAP_COARSE + 1)):
            raise EnvConfigError(
                f"env config: map_coarse must be 0 (off) or an integer in 2..{MAX_MAP_COARSE} (map cells a side of "
                f"a coarse cell), got {coarse!r}"
            )
        if not (isinstance(band, (int, float)) and not isinstance(band, bool) and 0 <= band <= math.pi / 2):
            raise EnvConfigError(f"env config: map_band must be a number of radians in 0..pi/2, got {band!r}")
        if coarse and cell == 0:
            raise EnvConfigError(f"env config: map_coarse ({coarse}) needs the map: set map_cell > 0 (it is 0, off)")
        if self.reward_count > 0 and cell == 0:
            raise EnvConfigError(
                f"env config: reward_count ({self.reward_count}) is a bonus from the episodic map's visit counts and "
                "needs the map: set map_cell > 0 (it is 0, off)"
            )

    def needs_field(self, task: str) -> bool:
        """Whether episodes of ``task`` need a geodesic field (the progress reward or the goal draw)."""
        return task == "pointgoal" and (
            self.progress == "geodesic"
            or self.goal_distance == "geodesic"
            or self.goal_min_ratio > 1.0
            or self.goal_max_ratio > 0
        )

    @classmethod
    def from_kwargs(cls, **kwargs) -> EnvConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise EnvConfigError(
                f"env config: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}"
            )
        return cls(**kwargs).validate()

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
