"""The trainer: collect, bootstrap + GAE, epochs of minibatches, log, checkpoint.

``Trainer.create(config)`` starts a new run in ``runs/NAME``;
``Trainer.resume("runs/NAME")`` continues one from its newest checkpoint,
exactly. A checkpoint is written at an update boundary and holds everything
the next update reads: policy parameters, Adam's moments and step, the
environment's full state (positions, goals, counters, its own generators and
the current observations), the action-noise and shuffle generators' states
and the counters. So the resumed run computes the same bits as the run that
never stopped; the shard count is not part of that state (results do not
depend on it, DESIGN.md).

One update, top to bottom (``Trainer.train``):

1. collect ``rollout_steps`` steps of every actor into the slab (policy
   forward with sampled actions, environment step, final-observation values
   for truncated episodes),
2. bootstrap from the last observations' values and compute GAE,
3. PPO epochs of shuffled minibatches,
4. log a metrics row, checkpoint every ``checkpoint_every`` updates.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np

import navi_nb
from navi_nb.train import checkpoint as ck
from navi_nb.errors import NaviError
from navi_nb.train.metrics import MetricsLog
from navi_nb.train.runs import (CONFIG_FILE, POLICY_FILE, WORLD_FILE, RunError, pick_run_path, write_json_atomic,
                          check_scene, load_scene_world, make_env, make_policy, process_age, read_run_config)
from navi_nb.train.config import RESULT_FIELDS, RUN_FIELDS, TrainConfig, field_docs  # noqa: F401

CHECKPOINT_DIR = "checkpoints"


class Trainer:
    """Owns one run: its world, environment, policy, optimizer, generators and files."""

    # ------------------------------------------------------------------ setup
    def __init__(self, cfg: TrainConfig, run_path: Path, world, console=None):
        from navi_nb.learn.ppo import PPO
        from navi_nb.learn.rollout import RolloutSlab

        self.cfg = cfg
        self.run_path = Path(run_path)
        self.console = console
        self.world = world
        self.env = make_env(world, cfg)
        self.policy = make_policy(cfg, self.env.obs_dim, self.env.action_dim)
        self.ppo = PPO(self.policy, ppo_config(cfg), seed=cfg.seed)  # owns the minibatch-shuffle generator
        self.slab = RolloutSlab(cfg.rollout_steps, cfg.actors, self.env.obs_dim, self.env.action_dim)
        self.rng_action = np.random.default_rng([int(cfg.seed), 0xAC7])  # action noise
        self.update = 0
        self.global_step = 0
        self.obs = None
        self.shard_report = None
        self.first_tick_s = None
        self.timing = {"collect": 0.0, "learn": 0.0}

    @classmethod
    def create(cls, cfg: TrainConfig, console=None, run_path=None) -> "Trainer":
        """A new run: checks everything, then makes the run folder."""
        cfg.validate()
        check_scene(cfg.scene)
        run_path = Path(run_path) if run_path is not None else pick_run_path(cfg)
        world = load_scene_world(cfg.scene, cfg.resolution, console)
        self = cls(cfg, run_path, world, console)
        obs, _ = self.env.reset(seed=cfg.seed)
        self.obs = obs
        run_path.mkdir(parents=True, exist_ok=True)
        from navi_nb.world.gmdag import save_world
        save_world(world, run_path / WORLD_FILE)
        write_json_atomic(run_path / CONFIG_FILE, {
            "config": cfg.to_dict(), "config_hash": cfg.hash(), "navi_nb_version": navi_nb.__version__,
            "created": time.strftime("%Y-%m-%d %H:%M:%S"), "obs_dim": self.env.obs_dim,
            "n_params": int(self.policy.params.size)})
        self.metrics = MetricsLog(run_path, console=console)
        self.save_checkpoint()  # update 0: a run killed during its first update can still be resumed
        return self

    @classmethod
    def resume(cls, run_path, overrides=None, console=None) -> "Trainer":
        """Continue ``run_path`` from its newest checkpoint. Nothing in the folder is
        written until the checkpoint has been read and checked completely."""
        run_path = Path(run_path)
        cfg = read_run_config(run_path)
        changed = {k: v for k, v in (overrides or {}).items() if getattr(cfg, k) != v}
        bad = sorted(k for k in changed if k not in RUN_FIELDS)
        if bad:
            raise RunError(f"run {run_path}: cannot change {', '.join(bad)} when resuming "
                           f"(the run's config says {', '.join(f'{k}={getattr(cfg, k)!r}' for k in bad)}); "
                           "start a new run instead")
        for k, v in changed.items():
            setattr(cfg, k, v)
        cfg.validate()
        latest = ck.latest_checkpoint(run_path / CHECKPOINT_DIR)
        if latest is None:
            raise RunError(f"run {run_path} has no checkpoint in {run_path / CHECKPOINT_DIR} to resume from")
        from navi_nb.world.gmdag import load_world
        world = load_world(run_path / WORLD_FILE)
        self = cls(cfg, run_path, world, console)
        self.env.reset(seed=cfg.seed)  # shapes only: set_state below replaces everything
        self.load_checkpoint(latest)
        self.metrics = MetricsLog(run_path, resume_update=self.update, console=console)
        if console is not None:
            console.print(f"resumed [bold]{run_path}[/] from {latest.name} (update {self.update}, "
                          f"{self.global_step:,} actor-steps)")
        return self

    # ------------------------------------------------------------ checkpoints
    def state_arrays(self) -> dict:
        adam = self.ppo.adam
        arrays = {"policy.params": self.policy.params, "adam.m": adam.m, "adam.v": adam.v,
                  "adam.t": np.array(adam.t, np.int64), "ppo.updates_done": np.array(self.ppo.updates_done, np.int64)}
        for k, v in self.env.get_state().items():
            arrays["env." + k] = v
        return arrays

    def state_spec(self) -> dict:
        """name -> (shape, dtype) of every checkpoint array, implied by the config."""
        return {k: (np.shape(v), np.asarray(v).dtype) for k, v in self.state_arrays().items()}

    def save_checkpoint(self) -> Path:
        meta = {"config": self.cfg.to_dict(), "config_hash": self.cfg.hash(),
                "navi_nb_version": navi_nb.__version__, "update": self.update,
                "global_step": self.global_step,
                "rng": {"action": ck.rng_state(self.rng_action), "shuffle": ck.rng_state(self.ppo.rng)}}
        folder = self.run_path / CHECKPOINT_DIR
        path = ck.save_checkpoint(folder / ck.checkpoint_name(self.update), self.state_arrays(), meta)
        ck.prune_checkpoints(folder, self.cfg.keep_checkpoints)
        return path

    def load_checkpoint(self, path):
        """Read and check everything, then apply it all (never half-loaded)."""
        arrays, meta = ck.load_checkpoint(path, self.state_spec(), expect_hash=self.cfg.hash())
        rng = meta.get("rng")
        if not isinstance(rng, dict):
            raise ck.CheckpointError(path, "meta.json has no generator states")
        ck.check_rng_state(self.rng_action, rng.get("action"), path, "action")
        ck.check_rng_state(self.ppo.rng, rng.get("shuffle"), path, "shuffle")
        update, step = meta.get("update"), meta.get("global_step")
        if not (isinstance(update, int) and isinstance(step, int) and 0 <= update
                and step == update * self.cfg.batch_size):
            raise ck.CheckpointError(path, f"counters are inconsistent (update {update!r}, global_step {step!r})")
        for name in ("policy.params", "adam.m", "adam.v"):
            if not np.isfinite(arrays[name]).all():
                raise ck.CheckpointError(path, f"{name} holds non-finite values")
        if int(arrays["ppo.updates_done"]) != update or int(arrays["adam.t"]) < 0:
            raise ck.CheckpointError(path, "optimizer counters do not match the update counter")
        env_state = {k[4:]: v for k, v in arrays.items() if k.startswith("env.")}
        try:
            probe = make_env(self.world, self.cfg)  # set_state checks fully before changing anything
            probe.set_state(env_state)
        except NaviError as exc:
            raise ck.CheckpointError(path, str(exc)) from exc
        # apply: nothing below can fail on checked data
        self.env.set_state(env_state)
        self.policy.set_params(arrays["policy.params"])
        self.ppo.adam.load_state({"m": arrays["adam.m"], "v": arrays["adam.v"], "t": arrays["adam.t"]})
        self.ppo.updates_done = int(arrays["ppo.updates_done"])
        self.rng_action.bit_generator.state = rng["action"]
        self.ppo.rng.bit_generator.state = rng["shuffle"]
        self.update, self.global_step = update, step
        self.obs = self.env.get_state()["obs"]

    def save_policy(self) -> Path:
        meta = {"config": self.cfg.to_dict(), "config_hash": self.cfg.hash(), "kind": "policy",
                "navi_nb_version": navi_nb.__version__, "update": self.update, "global_step": self.global_step,
                "obs_dim": self.env.obs_dim}
        return ck.save_checkpoint(self.run_path / POLICY_FILE, {"policy.params": self.policy.params}, meta)

    # ------------------------------------------------------------------ loop
    def calibrate_shards(self):
        """Pick the learner's shard count (config, NAVI_NB_SHARDS, or a short measurement)."""
        try:
            from navi_nb.parallel.shards import choose_shards
        except ImportError:  # the learning stage's planner is not there: keep Numba's default
            self.shard_report = None
            if self.cfg.shards:
                import numba
                numba.set_num_threads(min(self.cfg.shards, numba.config.NUMBA_NUM_THREADS))
            return None
        # The collection tick steps the real environment (and restores it, so the
        # run is unchanged); candidates are ranked by the time of a whole update.
        self.shard_report = choose_shards(self.cfg.shards or None, ppo=self.ppo, slab=self.slab,
                                          minibatch_size=self.cfg.minibatch_size, env=self.env,
                                          ticks_per_update=self.cfg.rollout_steps,
                                          minibatches_per_update=self.cfg.epochs * self.cfg.minibatches)
        return self.shard_report

    def collect(self):
        """Fill the slab with ``rollout_steps`` steps of every actor; returns episode stats."""
        cfg, env, pol, slab = self.cfg, self.env, self.policy, self.slab
        stats = {k: [] for k in ("return", "length", "success", "spl", "coverage", "collisions")}
        reward_sum = 0.0
        obs = self.obs
        for t in range(cfg.rollout_steps):
            slab.obs[t] = obs
            actions, logp, value = pol.act(obs, self.rng_action)
            slab.actions[t] = actions
            slab.logp[t] = logp
            slab.value[t] = value
            obs, reward, terminated, truncated, info = env.step(actions)
            if self.first_tick_s is None:
                self.first_tick_s = process_age()
            slab.reward[t] = reward
            slab.terminated[t] = terminated
            slab.truncated[t] = truncated
            slab.final_value[t] = 0.0
            if truncated.any():
                rows = np.flatnonzero(truncated & ~terminated)
                if rows.size:
                    slab.final_value[t, rows] = pol.value(info["final_obs"][rows])
            done = info["done"]
            if done.any():
                for k in stats:
                    stats[k].append(np.asarray(info["episode"][k])[done].astype(np.float64))
            reward_sum += float(reward.sum(dtype=np.float64))
        self.obs = obs
        out = {k: (np.concatenate(v) if v else np.zeros(0)) for k, v in stats.items()}
        out["reward_mean"] = reward_sum / (cfg.rollout_steps * cfg.actors)
        return out

    def train_one_update(self):
        """Collect, GAE, PPO epochs; returns the metrics row."""
        cfg = self.cfg
        update = self.update + 1
        t0 = time.perf_counter()
        ep = self.collect()
        t1 = time.perf_counter()
        # bootstrap from the value of the observation after the last step; PPO.update
        # computes GAE (termination: no bootstrap; truncation: final_value) and runs the epochs
        last_values = self.policy.value(self.obs)
        losses = self.ppo.update(self.slab, last_values, num_updates=cfg.num_updates)
        lr = losses["learning_rate"]
        t2 = time.perf_counter()
        self.update = update
        self.global_step += cfg.batch_size
        self.timing["collect"] += t1 - t0
        self.timing["learn"] += t2 - t1

        def mean(a):
            return float(a.mean()) if a.size else float("nan")

        row = {
            "update": update, "global_step": self.global_step, "time_s": time.perf_counter() - self._t_start,
            "actor_steps_per_s": cfg.batch_size / max(t2 - t0, 1e-9), "episodes": int(ep["return"].size),
            "ep_return_mean": mean(ep["return"]), "ep_length_mean": mean(ep["length"]),
            "success_rate": mean(ep["success"]) if cfg.task == "pointgoal" else float("nan"),
            "spl_mean": mean(ep["spl"]) if cfg.task == "pointgoal" else float("nan"),
            "coverage_mean": mean(ep["coverage"]) if cfg.task == "explore" else float("nan"),
            "collisions_mean": mean(ep["collisions"]), "reward_mean": ep["reward_mean"],
            "learning_rate": lr, "t_collect_s": t1 - t0, "t_learn_s": t2 - t1,
        }
        for k, src in (("policy_loss", "pg_loss"), ("value_loss", "v_loss"), ("entropy", "entropy"),
                       ("approx_kl", "approx_kl"), ("clip_frac", "clipfrac"),
                       ("explained_var", "explained_variance"), ("grad_norm", "grad_norm")):
            row[k] = float(losses.get(src, float("nan")))
        return row

    def train(self, progress=True, stop_after=None):
        """Run updates until ``total_steps`` (or ``stop_after`` more updates); returns a summary."""
        from navi_nb.train.progress import TrainProgress

        cfg, console = self.cfg, self.console
        if console is not None:
            print_config(console, cfg, self.run_path)
        if self.update >= cfg.num_updates and console is not None:
            console.print(f"run {self.run_path} is already complete ({self.update} of {cfg.num_updates} updates)")
        self.calibrate_shards()
        if console is not None and self.shard_report is not None and hasattr(self.shard_report, "print"):
            self.shard_report.print(console)
        self._t_start = time.perf_counter()
        start_update = self.update
        last = cfg.num_updates if stop_after is None else min(cfg.num_updates, self.update + stop_after)
        rows = []
        with TrainProgress(console, cfg, start_update, enabled=progress and console is not None) as prog:
            try:
                while self.update < last:
                    row = self.train_one_update()
                    self.metrics.write(row)
                    rows.append(row)
                    if self.update == start_update + 1 and console is not None and self.first_tick_s:
                        prog.note(f"first tick {self.first_tick_s:.2f} s after process start")
                    if self.update % cfg.checkpoint_every == 0 or self.update == last:
                        self.save_checkpoint()
                    prog.advance(row)
            finally:
                self.metrics.close()
        if self.update >= cfg.num_updates:
            self.save_policy()
        return self.summary(rows)

    def summary(self, rows):
        def last_finite(key, n=10):
            vals = [r[key] for r in rows[-n:] if math.isfinite(r[key])]
            return float(np.mean(vals)) if vals else float("nan")

        steps = sum(r["global_step"] for r in rows[-1:]) - (rows[0]["global_step"] - self.cfg.batch_size
                                                             if rows else 0)
        wall = sum(r["t_collect_s"] + r["t_learn_s"] for r in rows)
        return {
            "run": str(self.run_path), "updates": self.update, "actor_steps": self.global_step,
            "wall_s": wall, "actor_steps_per_s": steps / wall if wall else float("nan"),
            "first_tick_s": self.first_tick_s,
            "success_rate_last10": last_finite("success_rate"), "return_last10": last_finite("ep_return_mean"),
            "t_collect_s": self.timing["collect"], "t_learn_s": self.timing["learn"],
            "shards": getattr(self.shard_report, "choice", None),
        }


def ppo_config(cfg: TrainConfig):
    from navi_nb.learn.ppo import PPOConfig

    return PPOConfig(gamma=cfg.gamma, gae_lambda=cfg.gae_lambda, clip_coef=cfg.clip_coef,
                     clip_vloss=cfg.clip_vloss, ent_coef=cfg.ent_coef, vf_coef=cfg.vf_coef,
                     max_grad_norm=cfg.max_grad_norm, learning_rate=cfg.learning_rate,
                     anneal_lr=cfg.anneal_lr, adam_eps=cfg.adam_eps, update_epochs=cfg.epochs,
                     num_minibatches=cfg.minibatches, target_kl=cfg.target_kl or None)


# ---------------------------------------------------------------------- console
def print_config(console, cfg: TrainConfig, run_path=None):
    from rich.table import Table

    docs = field_docs()
    t = Table(title=f"training config{f' ({run_path})' if run_path else ''}  hash {cfg.hash()}")
    t.add_column("setting")
    t.add_column("value")
    t.add_column("meaning", style="dim")
    for k, v in cfg.to_dict().items():
        t.add_row(k, json.dumps(v) if isinstance(v, (dict, list)) else str(v), docs.get(k, ""))
    console.print(t)


def print_summary(console, trainer: "Trainer", summary: dict):
    from rich.table import Table

    t = Table(title="training summary")
    t.add_column("")
    t.add_column("value")
    for k, v in summary.items():
        t.add_row(k, f"{v:,.4g}" if isinstance(v, float) else str(v))
    console.print(t)
