"""Gymnasium forms of :class:`~navi_nb.env.nav_env.NavEnv` (needs the ``gym`` extra, gymnasium >= 1.1).

Two forms, both registered with Gymnasium when this module is imported (ids
``navi_nb/PointNav-v0`` and ``navi_nb/Explore-v0``)::

    import gymnasium as gym
    import navi_nb.env.gym_adapter  # registers the ids
    env = gym.make("navi_nb/PointNav-v0", world="house.gmdag")        # NaviEnv: one actor
    envs = gym.make_vec("navi_nb/PointNav-v0", num_envs=64)          # NaviVectorEnv: 64 actors

(``gym.make("navi_nb.env.gym_adapter:navi_nb/PointNav-v0")`` imports the
module itself.) ``world`` is a loaded World, a ``.gmdag`` path or a built-in
scene name (compiled once per process at ``resolution``; default
``"house"``); every other keyword goes to NavEnv (``sensor``, ``seed``,
``max_steps``, ``map_cell`` for the episodic map's crop in the observation, ...).

:class:`NaviVectorEnv` (one NavEnv, one sub-environment per actor; what
``make_vec`` builds) uses the SAME_STEP autoreset mode: an actor whose episode
ends is reset inside the same ``step``; the observation returned for it is
its next episode's first. Its ``info``, laid out as ``SyncVectorEnv`` lays out
its sub-environments' infos (each key with a boolean mask ``_key``):

- every step, for every actor: ``success`` (reached the goal on this step),
  ``contact`` and ``reward_terms`` (a dict of the reward's terms);
- when some actor finished: ``final_obs`` / ``_final_obs`` (the last
  observation of the finished episode), ``final_info`` / ``_final_info`` (the
  info of its last step, including ``navi``) and ``navi`` / ``_navi``:
  navi_nb's episode record (return, length, success, spl, coverage,
  collisions). The key ``episode`` is left to Gymnasium's
  ``RecordEpisodeStatistics``.

Rewards are float64, as Gymnasium's own vector environments return them.
``reset(seed=...)`` takes an int or a list of one seed per actor; the actors
share one generator, so a list is hashed into one seed (the same list gives
the same episodes). Arrays returned are copies (unlike NavEnv's reused
buffers).

:class:`NaviEnv` is the ``gym.Env`` of one actor (for ``check_env`` and tools
that take a single environment): when an episode ends, ``step`` returns its
last observation and ``info["navi"]``, and the caller resets.

Both apply their own Numba thread count (``threads=``; default: the
``navi_nb.set_threads`` / ``NAVI_NB_THREADS`` value, else half the allowed
cores for the vector form and 1 for the single form) while they reset and
step, so they share the cores with the trainer that embeds them
(:mod:`navi_nb.threads`).
"""

from __future__ import annotations

import numbers
from pathlib import Path
from typing import ClassVar

import numpy as np

from navi_nb.env.config import ActionError, EnvConfigError
from navi_nb.env.nav_env import NavEnv
from navi_nb.errors import NaviError
from navi_nb.threads import resolve_threads, thread_limit, using_threads

GYMNASIUM_MIN = "1.1"


class GymnasiumMissing(NaviError, ImportError):
    """Gymnasium is absent or older than this adapter needs."""


try:
    import gymnasium as gym
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise GymnasiumMissing(
        f"navi_nb.env.gym_adapter needs gymnasium >= {GYMNASIUM_MIN}, which is not "
        'installed; install the gym extra: pip install -e ".[gym]"'
    ) from exc
try:
    from gymnasium.vector import AutoresetMode, VectorEnv
    from gymnasium.vector.utils import batch_space
except ImportError as exc:  # pragma: no cover - exercised only with an old gymnasium
    raise GymnasiumMissing(
        f"navi_nb.env.gym_adapter needs gymnasium >= {GYMNASIUM_MIN} (for AutoresetMode); "
        f"gymnasium {getattr(gym, '__version__', '?')} is installed: "
        f"pip install -U 'gymnasium>={GYMNASIUM_MIN}'"
    ) from exc


_SCENES: dict = {}  # (name, resolution, scene_seed) -> World, compiled once per process


def make_world(world, resolution=128, scene_seed=0):
    """A World from a World, a ``.gmdag`` path or a built-in scene name (scenes compiled once per process)."""
    from navi_nb.world.gmdag import World, load_world

    if isinstance(world, World):
        return world
    if isinstance(world, Path) or (isinstance(world, str) and (world.endswith(".gmdag") or Path(world).is_file())):
        return load_world(world)
    if isinstance(world, str):
        from navi_nb.world.compiler import compile_scene
        from navi_nb.world.scenes import SCENES

        if world not in SCENES:
            raise EnvConfigError(f"world {world!r} is neither a .gmdag file nor a built-in scene ({', '.join(SCENES)})")
        key = (world, int(resolution), int(scene_seed))
        if key not in _SCENES:
            _SCENES[key] = compile_scene(world, int(resolution), seed=int(scene_seed))
        return _SCENES[key]
    raise EnvConfigError(f"world must be a World, a .gmdag path or a scene name, got {type(world).__name__}")


def observation_bounds(layout: dict, dim: int):
    """(low, high) float32 (dim,) for a NavEnv observation layout."""
    low = np.full(dim, -np.inf, np.float32)
    high = np.full(dim, np.inf, np.float32)
    for name in ("depth", "semantic", "map"):
        if name in layout:
            low[layout[name]] = 0.0
            high[layout[name]] = 1.0
    low[layout["prev_action"]] = -1.0
    high[layout["prev_action"]] = 1.0
    if "goal" in layout:
        g = layout["goal"].start
        low[g] = 0.0  # distance / goal_scale
        low[g + 1 : g + 3] = -1.0  # sin, cos of the bearing
        high[g + 1 : g + 3] = 1.0
    return low, high


def single_spaces(env: NavEnv):
    """(observation space, action space) of one actor of ``env``."""
    low, high = observation_bounds(env.obs_layout, env.obs_dim)
    return (
        gym.spaces.Box(low, high, (env.obs_dim,), np.float32),
        gym.spaces.Box(-1.0, 1.0, (NavEnv.action_dim,), np.float32),
    )


def combined_seed(seed, n):
    """A Python int or None from ``reset``'s seed: an int, None, or a sequence of ``n`` ints / Nones."""
    if seed is None:
        return None
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
        if seed < 0:
            raise EnvConfigError(f"reset: seed must be non-negative, got {seed!r}")
        return int(seed)
    try:
        seeds = list(seed)
    except TypeError:
        raise EnvConfigError(f"reset: seed must be an int, None or a list of {n} ints, got {seed!r}") from None
    if len(seeds) != n:
        raise EnvConfigError(f"reset: a list of seeds needs one per actor ({n}), got {len(seeds)}")
    if all(s is None for s in seeds):
        return None
    for s in seeds:
        if s is not None and (isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 0):
            raise EnvConfigError(f"reset: seeds must be non-negative ints or None, got {s!r}")
    # None entries count as -1 so [None, 3] and [3, None] differ; the actors share one generator
    entropy = [int(s) + 1 if s is not None else 0 for s in seeds]
    return int(np.random.SeedSequence(entropy).generate_state(1, np.uint32)[0])


def check_options(options, allowed=()):
    """Refuse reset options (the actors reset together; none are supported)."""
    if options:
        unknown = [k for k in options if k not in allowed]
        if unknown:
            raise EnvConfigError(f"reset: options {unknown} are not supported (all actors reset together)")


def adapter_env(adapter, world, num_envs, env, threads, resolution, scene_seed, kwargs, default_threads=None):
    """``(env, threads)`` for the adapter named ``adapter``: ``env`` as given (``num_envs``, when given,
    must be its actor count), else a NavEnv of ``num_envs`` actors in ``world`` (see :func:`make_world`;
    ``kwargs`` go to NavEnv) built on ``threads`` (default: ``default_threads``, else half the allowed
    threads)."""
    threads = resolve_threads(threads, thread_limit() // 2 if default_threads is None else default_threads)
    if env is None:
        if num_envs is None:
            raise TypeError(f"{adapter} needs num_envs (and a world) or env=NavEnv(...)")
        with using_threads(threads):
            env = NavEnv(make_world(world, resolution, scene_seed), num_envs, **kwargs)
    elif num_envs is not None and num_envs != env.n_actors:
        raise EnvConfigError(f"{adapter}: num_envs={num_envs} but the NavEnv has {env.n_actors} actors")
    return env, threads


class NaviVectorEnv(VectorEnv):
    """Gymnasium vector API for a NavEnv: one sub-environment per actor (see the module docstring)."""

    metadata: ClassVar[dict] = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(
        self,
        world="house",
        num_envs=None,
        *,
        env: NavEnv | None = None,
        threads=None,
        resolution=128,
        scene_seed=0,
        **kwargs,
    ):
        env, self.threads = adapter_env("NaviVectorEnv", world, num_envs, env, threads, resolution, scene_seed, kwargs)
        self.env = env
        self.num_envs = env.n_actors
        self.single_observation_space, self.single_action_space = single_spaces(env)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

    def reset(self, *, seed=None, options=None):
        check_options(options)
        seed = combined_seed(seed, self.num_envs)
        if seed is not None:
            self._np_random, self._np_random_seed = gym.utils.seeding.np_random(seed)
        with using_threads(self.threads):
            obs, _info = self.env.reset(seed=seed)
        return obs.copy(), {}

    def step(self, actions):
        with using_threads(self.threads):
            obs, reward, terminated, truncated, info = self.env.step(actions)
        n = self.num_envs
        every = np.ones(n, bool)
        terms = {k: v.copy() for k, v in info["reward_terms"].items()}
        terms.update({"_" + k: every.copy() for k in info["reward_terms"]})
        out = {
            "success": info["success"].copy(),
            "_success": every.copy(),
            "contact": info["contact"].copy(),
            "_contact": every.copy(),
            "reward_terms": terms,
            "_reward_terms": every.copy(),
        }
        done = info["done"]
        if done.any():
            navi = {k: v.copy() for k, v in info["episode"].items()}
            navi.update({"_" + k: done.copy() for k in info["episode"]})
            out["navi"], out["_navi"] = navi, done.copy()
            out["final_obs"], out["_final_obs"] = info["final_obs"].copy(), done.copy()

            def last(v):
                return np.where(done, v, np.zeros_like(v))

            final_terms = {k: last(v) for k, v in info["reward_terms"].items()}
            final_terms.update({"_" + k: done.copy() for k in info["reward_terms"]})
            out["final_info"] = {
                "success": last(info["success"]),
                "_success": done.copy(),
                "contact": last(info["contact"]),
                "_contact": done.copy(),
                "reward_terms": final_terms,
                "_reward_terms": done.copy(),
                "navi": {k: v.copy() for k, v in navi.items()},
                "_navi": done.copy(),
            }
            out["_final_info"] = done.copy()
        return obs.copy(), reward.astype(np.float64), terminated.copy(), truncated.copy(), out

    def close_extras(self, **kwargs):
        pass


class NaviEnv(gym.Env):
    """One actor as a ``gym.Env`` (see the module docstring); NavEnv keywords as for NaviVectorEnv."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, world="house", *, threads=None, resolution=128, scene_seed=0, render_mode=None, **kwargs):
        if render_mode is not None:
            raise EnvConfigError(f"NaviEnv: render_mode must be None (use `navi-nb render`), got {render_mode!r}")
        self.env, self.threads = adapter_env(
            "NaviEnv", world, 1, None, threads, resolution, scene_seed, kwargs, default_threads=1
        )
        self.observation_space, self.action_space = single_spaces(self.env)

    def reset(self, *, seed=None, options=None):
        check_options(options)
        seed = combined_seed(seed, 1)
        super().reset(seed=seed)
        with using_threads(self.threads):
            obs, _info = self.env.reset(seed=seed)
        return obs[0].copy(), {}

    def step(self, action):
        a = np.asarray(action)
        if a.shape != (NavEnv.action_dim,):
            raise ActionError(
                f"NaviEnv.step: action must have shape (4,) (forward, vertical, lateral, yaw rate), got {a.shape}"
            )
        with using_threads(self.threads):
            obs, reward, terminated, truncated, info = self.env.step(a.reshape(1, NavEnv.action_dim))
        out = {
            "success": bool(info["success"][0]),
            "contact": bool(info["contact"][0]),
            "reward_terms": {k: float(v[0]) for k, v in info["reward_terms"].items()},
        }
        if info["done"][0]:
            # NavEnv has already started the next episode; return the one that ended
            obs = info["final_obs"]
            out["navi"] = {k: v[0].item() for k, v in info["episode"].items()}
        return obs[0].copy(), float(reward[0]), bool(terminated[0]), bool(truncated[0]), out


def _register():
    for task, name in (("pointgoal", "PointNav"), ("explore", "Explore")):
        env_id = f"navi_nb/{name}-v0"
        if env_id not in gym.registry:
            gym.register(
                id=env_id,
                entry_point=f"{__name__}:NaviEnv",
                vector_entry_point=f"{__name__}:NaviVectorEnv",
                kwargs={"task": task},
            )


_register()
