"""Stable-Baselines3's ``VecEnv`` over a :class:`~navi_nb.env.nav_env.NavEnv` (needs the ``sb3`` extra).

::

    from stable_baselines3 import PPO
    from navi_nb.env.sb3_adapter import NaviSB3VecEnv

    venv = NaviSB3VecEnv("house", 64, seed=0)           # or NaviSB3VecEnv(env=NavEnv(...))
    model = PPO("MlpPolicy", venv).learn(100_000)

One NavEnv, one SB3 sub-environment per actor. ``world`` and the keywords are
the Gymnasium adapter's (:mod:`navi_nb.env.gym_adapter`: a World, a
``.gmdag`` path or a built-in scene name; ``resolution``, ``scene_seed``;
every other keyword goes to NavEnv), and so are the spaces, the observation
layout and the thread default. What SB3's own ``DummyVecEnv`` + ``Monitor``
give, this gives:

- ``reset()`` returns the observations (a copy); ``step`` returns
  ``(obs, rewards float32, dones bool, infos)``, one info dict per actor.
  Finished actors are reset inside the same step (SB3's auto-reset): the
  observation returned for them is their next episode's first, and their info
  holds ``terminal_observation`` (the finished episode's last observation),
  ``episode`` = ``{"r": return, "l": length, "t": seconds since the adapter
  was made}`` as ``Monitor`` writes it, ``is_success`` (the goal was reached)
  and ``navi`` (navi_nb's episode record: return, length, success, spl,
  coverage, collisions, world). Every info holds ``TimeLimit.truncated``:
  true exactly when the episode ended at ``max_steps`` without reaching the
  goal. Because ``episode`` is already there, ``env_is_wrapped(Monitor)`` is
  true (SB3's ``evaluate_policy`` then reads it); wrapping in ``VecMonitor``
  works too and overwrites it with the same figures (SB3 warns that it does).
- ``seed(s)`` (what ``PPO(seed=s)`` calls) applies at the next ``reset``:
  the actors share one generator, so the adapter resets NavEnv with seed
  ``s`` itself (the same episodes as ``NavEnv(..., seed=s).reset()``) and
  returns SB3's list ``[s, s + 1, ...]``. Reset options are refused.
- ``get_attr(name)`` reads NavEnv's attribute (the same object for every
  actor) except for the per-actor arrays ``positions``, ``yaws``, ``goals``,
  ``world_index`` and ``episodes_finished``, where actor ``i`` gets its row
  (a copy). ``set_attr`` sets a NavEnv attribute for all actors at once (a
  subset of actors, or a per-actor array, is refused: the actors share one
  environment). ``env_method(name, ...)`` calls NavEnv's method once and
  returns its result for each actor asked for (all actors must be asked for).

Threads: like ``NaviVectorEnv``, the adapter applies its own Numba thread
count (``threads=``; default the ``navi_nb.set_threads`` / ``NAVI_NB_THREADS``
value, else half the allowed cores) only while it resets and steps; give
PyTorch the rest with ``torch.set_num_threads`` (docs/ENVIRONMENT.md).
"""

from __future__ import annotations

import time

import numpy as np

from navi_nb.env.config import EnvConfigError
from navi_nb.env.gym_adapter import adapter_env, check_options, single_spaces
from navi_nb.env.nav_env import NavEnv
from navi_nb.errors import NaviError
from navi_nb.threads import using_threads


class SB3Missing(NaviError, ImportError):
    """Stable-Baselines3 is not installed."""


try:
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env.base_vec_env import VecEnv
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise SB3Missing(
        "navi_nb.env.sb3_adapter needs stable-baselines3, which is not installed; install the sb3 extra: "
        'pip install -e ".[sb3]"'
    ) from exc

PER_ACTOR = ("positions", "yaws", "goals", "world_index", "episodes_finished")
"""NavEnv attributes that hold one row per actor: ``get_attr`` hands actor ``i`` its row."""


class NaviSB3VecEnv(VecEnv):
    """SB3 ``VecEnv`` over one NavEnv, one sub-environment per actor (see the module docstring)."""

    render_mode = None

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
        env, self.threads = adapter_env("NaviSB3VecEnv", world, num_envs, env, threads, resolution, scene_seed, kwargs)
        self.env = env
        observation_space, action_space = single_spaces(env)
        super().__init__(env.n_actors, observation_space, action_space)
        self._actions = None
        self._t_start = time.time()

    # --- the VecEnv interface ------------------------------------------------
    def reset(self):
        options = [o for o in self._options if o]
        check_options(options[0] if options else None)
        seed = self._seeds[0]
        with using_threads(self.threads):
            obs, _info = self.env.reset(seed=None if seed is None else int(seed))
        self._reset_seeds()
        self._reset_options()
        self.reset_infos = [{} for _ in range(self.num_envs)]
        return obs.copy()

    def seed(self, seed=None):
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
            raise EnvConfigError(f"NaviSB3VecEnv.seed: seed must be a non-negative integer or None, got {seed!r}")
        return super().seed(None if seed is None else int(seed))

    def step_async(self, actions):
        self._actions = actions

    def step_wait(self):
        actions, self._actions = self._actions, None
        if actions is None:
            raise EnvConfigError("NaviSB3VecEnv.step_wait called without step_async")
        with using_threads(self.threads):
            obs, reward, terminated, truncated, info = self.env.step(actions)
        dones = info["done"].copy()
        time_limit = truncated & ~terminated
        infos = [{"TimeLimit.truncated": bool(t)} for t in time_limit]
        rows = np.flatnonzero(dones)
        if rows.size:
            ep = info["episode"]
            now = round(time.time() - self._t_start, 6)
            final = info["final_obs"]
            for i in rows:
                record = {k: v[i].item() for k, v in ep.items()}
                infos[i].update(
                    terminal_observation=final[i].copy(),
                    episode={"r": round(float(ep["return"][i]), 6), "l": int(ep["length"][i]), "t": now},
                    is_success=bool(ep["success"][i]),
                    navi=record,
                )
        return obs.copy(), reward.astype(np.float32), dones, infos

    def close(self):
        pass

    def get_images(self):
        raise NaviError("NaviSB3VecEnv has no images to render (use `navi-nb render`)")

    # --- attributes and methods ----------------------------------------------
    def _rows(self, indices, what):
        rows = list(self._get_indices(indices))
        for i in rows:
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < self.num_envs:
                raise EnvConfigError(f"NaviSB3VecEnv.{what}: index {i!r} is not an actor in 0..{self.num_envs - 1}")
        return [int(i) for i in rows]

    def _all_actors(self, indices, what):
        rows = self._rows(indices, what)
        if sorted(set(rows)) != list(range(self.num_envs)):
            raise EnvConfigError(
                f"NaviSB3VecEnv.{what}: the actors share one NavEnv, so it applies to all {self.num_envs} "
                f"of them at once; indices {rows} name only some"
            )
        return rows

    def get_attr(self, attr_name, indices=None):
        rows = self._rows(indices, "get_attr")
        if attr_name == "render_mode":
            return [self.render_mode] * len(rows)
        value = getattr(self.env, attr_name)
        if attr_name in PER_ACTOR:
            return [np.array(value[i], copy=True) for i in rows]
        return [value] * len(rows)

    def set_attr(self, attr_name, value, indices=None):
        self._all_actors(indices, "set_attr")
        if attr_name in PER_ACTOR:
            raise EnvConfigError(f"NaviSB3VecEnv.set_attr: {attr_name} is per-actor state; use NavEnv.set_state")
        setattr(self.env, attr_name, value)

    def env_method(self, method_name, *method_args, indices=None, **method_kwargs):
        rows = self._all_actors(indices, "env_method")
        method = getattr(self.env, method_name)
        with using_threads(self.threads):
            result = method(*method_args, **method_kwargs)
        return [result] * len(rows)

    def env_is_wrapped(self, wrapper_class, indices=None):
        # no Gymnasium wrappers sit around the actors; Monitor's episode record is written by the adapter itself
        wrapped = isinstance(wrapper_class, type) and issubclass(Monitor, wrapper_class)
        return [wrapped] * len(self._rows(indices, "env_is_wrapped"))


def ppo_kwargs(cfg) -> dict:
    """Keywords for SB3's ``PPO("MlpPolicy", venv, **ppo_kwargs(cfg))`` matching navi_nb's trainer settings.

    ``cfg``: any object with a :class:`~navi_nb.train.config.TrainConfig`'s fields (PPO's, plus ``actors``,
    ``rollout_steps``, ``hidden``, ``activation``). Matched: the rollout (``rollout_steps`` per actor), the
    minibatch size (the rollout's samples over ``num_minibatches``), epochs, gamma, GAE lambda, the ratio
    clip, advantage normalisation, entropy coefficient, gradient-norm clip, target KL, Adam's epsilon, the
    learning rate and its linear annealing to 0, separate actor and critic trunks of ``hidden`` units with
    ``activation``, orthogonal initialisation (SB3's default, gains as navi_nb's) and ``log_std_init``. A ``cfg`` with a
    recurrent memory (``memory_size`` > 0) is refused: ``MlpPolicy`` has none to match. Two
    differences of form: SB3's value loss is the mean squared error without navi_nb's factor 1/2, so its
    ``vf_coef`` is half of ``cfg.vf_coef`` (the same weight); and with ``clip_vloss`` SB3 uses the clipped
    value loss alone where navi_nb takes the larger of the clipped and unclipped ones.
    """
    if int(getattr(cfg, "memory_size", 0) or 0) > 0:
        raise ValueError(
            f"ppo_kwargs: memory_size is {cfg.memory_size}, and SB3's PPO('MlpPolicy') has no recurrent memory; "
            "compare with memory_size=0"
        )
    from torch import nn

    batch = int(cfg.actors) * int(cfg.rollout_steps)
    lr = float(cfg.learning_rate)
    hidden = [int(h) for h in cfg.hidden]
    return {
        "learning_rate": (lambda progress_remaining: lr * progress_remaining) if cfg.anneal_lr else lr,
        "n_steps": int(cfg.rollout_steps),
        "batch_size": max(1, batch // int(cfg.num_minibatches)),
        "n_epochs": int(cfg.update_epochs),
        "gamma": float(cfg.gamma),
        "gae_lambda": float(cfg.gae_lambda),
        "clip_range": float(cfg.clip_coef),
        "clip_range_vf": float(cfg.clip_coef) if cfg.clip_vloss else None,
        "normalize_advantage": bool(cfg.norm_adv),
        "ent_coef": float(cfg.ent_coef),
        "vf_coef": 0.5 * float(cfg.vf_coef),
        "max_grad_norm": float(cfg.max_grad_norm),
        "target_kl": cfg.target_kl,
        "policy_kwargs": {
            "net_arch": {"pi": hidden, "vf": hidden},
            "activation_fn": {"tanh": nn.Tanh, "relu": nn.ReLU}[cfg.activation],
            "ortho_init": True,
            "log_std_init": float(getattr(cfg, "log_std_init", 0.0)),
            "optimizer_kwargs": {"eps": float(cfg.adam_eps)},
        },
    }
