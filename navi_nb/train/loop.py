"""The trainer: collect, bootstrap + GAE, epochs of minibatches, log, checkpoint.

``Trainer.create(config)`` starts a new run in ``runs/NAME``;
``Trainer.resume("runs/NAME")`` continues one from its newest checkpoint,
exactly. A checkpoint is written at an update boundary and holds everything
the next update reads: policy parameters, Adam's moments and step, the
environment's full state (positions, goals, counters, its own generators and
the current observations), the action-noise and shuffle generators' states
and the counters (``CHECKPOINT_LAYOUT`` below lists the arrays). So the
resumed run computes the same bits as the run that never stopped; the shard
count is not part of that state (results do not depend on it,
docs/DETERMINISM.md).

One update, top to bottom (``Trainer.train``):

1-3. ``navi_nb.learn.collect.one_update``: collect ``rollout_steps`` steps of
   every actor into the slab (policy forward with sampled actions,
   environment step, final-observation values for truncated episodes),
   bootstrap from the last observations' values, GAE and PPO epochs of
   shuffled minibatches (the same function the learning tests run),
4. log a metrics row, checkpoint every ``checkpoint_every`` updates;

and at the end of the call, its summary into ``run.json`` (``navi_nb.train.run_record``).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from rich.markup import escape

import navi_nb
from navi_nb.errors import NaviError
from navi_nb.train import checkpoint as ck
from navi_nb.train.config import RESUME_FIELDS, TrainConfig
from navi_nb.train.metrics import MetricsLog
from navi_nb.train.report import print_config
from navi_nb.train.run_record import run_summary, write_run_record
from navi_nb.train.runs import (
    CHECKPOINT_DIR,
    CHECKPOINT_LAYOUT,
    CONFIG_FILE,
    POLICY_FILE,
    RUN_FILE,
    RunError,
    changed_settings,
    check_ram,
    check_run_entries,
    claim_run_path,
    env_changes,
    load_run_worlds,
    load_scene_set,
    make_env,
    make_policy,
    never_checkpointed,
    os_error,
    process_age,
    read_run_config,
    release_new_run,
    resolve_scenes,
    save_run_worlds,
    write_json_atomic,
)
from navi_nb.train.warmup import Warmup
from navi_nb.train.warmup import start as start_warmup
from navi_nb.world.heldout import check_training_worlds

# The run folder's entries a resume writes or appends to (the checkpoints go into CHECKPOINT_DIR)
RESUME_WRITES = (RUN_FILE, POLICY_FILE, "metrics.csv", "metrics.jsonl")


class Trainer:
    """Owns one run: its worlds, environment, policy, optimizer, generators and files."""

    # ------------------------------------------------------------------ setup
    def __init__(self, cfg: TrainConfig, run_path: Path, world_set, console=None, ranks=None):
        from navi_nb.learn.collect import PhaseTimes, RowSlice, action_generator
        from navi_nb.learn.ppo import PPO, PPOConfig
        from navi_nb.learn.rollout import RolloutSlab

        self.cfg = cfg
        self.run_path = Path(run_path)
        self.console = console
        self.world_set = world_set
        self.ranks = ranks  # a navi_nb.parallel.ranks.RankContext under MPI: this rank's blocks only
        self.env = make_env(world_set, cfg, ranks=ranks)
        for line in self.env.pool_notes if console is not None and (ranks is None or ranks.is_root) else ():
            console.print(line, style="dim", markup=False)  # a world whose spawn points the pool splits
        self.policy = make_policy(cfg, self.env.obs_dim, self.env.action_dim)
        self.ppo = PPO(self.policy, PPOConfig.of(cfg), seed=cfg.seed)  # owns the minibatch-shuffle generator
        self.slab = RolloutSlab(
            cfg.rollout_steps, self.env.n_actors, self.env.obs_dim, self.env.action_dim, memory_size=cfg.memory_size
        )
        self.policy_memory = self.policy.new_memory(self.env.n_actors)  # the GRU state of this process's actors
        self.rng_action = action_generator(cfg.seed)
        self._rng_collect = self.rng_action  # under MPI: the whole batch's noise drawn, this rank's rows used
        if ranks is not None:
            self.ppo.exchange = ranks.exchange
            self._rng_collect = RowSlice(self.rng_action, ranks.first_actor, cfg.actors)
            ranks.note_ram(world_set)  # per-rank RSS / PSS and the shared world mapping, for the topology
        self.update = 0
        self.global_step = 0
        self.obs = None
        self.shard_report = None
        self.shard_watch = None  # re-checks the shard count while training (navi_nb.parallel.shards.ShardWatch)
        self.first_tick_s = None
        # seconds collecting and learning; and over the updates that did not wait before learning (the first
        # waits for the learning kernels and the shard count), their wall seconds and the process's
        # CPU-seconds (every thread's): how many cores the run kept busy
        self.timing = {"collect": 0.0, "learn": 0.0, "steady_wall": 0.0, "steady_cpu": 0.0}
        self.times = PhaseTimes()  # the timing hook: seconds in policy, env and PPO (bench train reads it)
        self._t_start = time.perf_counter()
        self.warmup = None  # kernel warm-up children (navi_nb.train.warmup), joined before the first update
        self.lock = None  # the run folder's lock (navi_nb.train.run_lock) while this process writes it

    def close(self):
        """Give up the run folder's lock (the end of the process gives it up too, however it ends)."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def start(self):
        """Reset the environment with the run's seed: the state of a new run before its first update."""
        self.obs, _ = self.env.reset(seed=self.cfg.seed)
        return self

    @classmethod
    def create(cls, cfg: TrainConfig, console=None, run_path=None, progress=True) -> Trainer:
        """A new run: checks everything, makes and locks the run folder (rank 0 alone, before any compile:
        a folder another process writes is refused before anything starts), then writes it. ``progress``: a bar
        while worlds compile (with a console)."""
        cfg.validate()
        items = resolve_scenes(cfg.scenes, cfg)
        check_ram(f"actors={cfg.actors} with rollout_steps={cfg.rollout_steps}", cfg.ram_estimate())
        ranks = _rank_context(cfg)
        lock, made = None, ()
        if ranks is None or ranks.is_root:
            run_path, lock, made = claim_run_path(cfg, items, run_path)
        warmup = Warmup()
        try:
            # first run: the environment's, tracer's and learning kernels compile in child processes while the
            # worlds compile (one process only: ranks already compile side by side)
            if ranks is None:
                warmup = start_warmup(cfg, console)
            if ranks is None or ranks.is_root:
                world_set = load_scene_set(items, cfg.resolution, progress and console is not None)
                check_training_worlds(items, world_set.worlds, cfg.allow_heldout)  # a held-out world by content
            if ranks is not None:  # rank 0 picks the folder and compiles (or caches) the worlds first
                run_path = Path(ranks.bcast(str(run_path)))
                if not ranks.is_root:
                    world_set = load_scene_set(items, cfg.resolution)
                ranks.check_worlds(world_set)  # one small collective: every rank trains in the same worlds
            warmup.wait("env")  # building the environment calls its kernels: load what the child compiled
            self = cls(cfg, run_path, world_set, console, ranks)
            self.env.compile_kernels()  # reset's and step's kernels loaded while the tracer's child may still run
            warmup.wait("tracer")  # the reset traces: load the kernel the child compiled, not compile it twice
            self.start()
        except BaseException:
            warmup.cancel()
            if lock is not None:
                release_new_run(run_path, lock, made)
            raise
        self.warmup = warmup
        self.lock = lock
        if ranks is not None and not ranks.is_root:
            from navi_nb.parallel.ranks import NullMetrics

            self.metrics = NullMetrics()
            self.save_checkpoint()  # takes part in gathering the state; rank 0 writes it
            return self
        try:
            run_path.mkdir(parents=True, exist_ok=True)
            if never_checkpointed(run_path):  # a run killed before its first checkpoint: start it over
                for name in ("metrics.csv", "metrics.jsonl"):
                    (run_path / name).unlink(missing_ok=True)
            save_run_worlds(run_path, cfg, world_set)
            write_json_atomic(
                run_path / CONFIG_FILE,
                {
                    "config": cfg.to_dict(),
                    "config_hash": cfg.hash(),
                    "navi_nb_version": navi_nb.__version__,
                    "created": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "obs_dim": self.env.obs_dim,
                    "n_params": int(self.policy.params.size),
                    **({"topology": self.ranks.topology_info} if self.ranks is not None else {}),
                },
            )
            self.metrics = MetricsLog(run_path, console=console)
        except OSError as exc:
            self.close()
            raise os_error(exc, f"cannot write the run folder {run_path}") from None
        except BaseException:
            self.close()
            raise
        try:
            self.save_checkpoint()  # update 0: a run killed during its first update can still be resumed
        except BaseException:
            self.close()
            raise
        return self

    @classmethod
    def resume(cls, run_path, overrides=None, console=None, progress=True) -> Trainer:
        """Continue ``run_path`` from its newest checkpoint. The folder's lock is taken first (rank 0 alone:
        a folder another process writes is refused before anything is read); nothing in the folder is
        written until the checkpoint has been read and checked completely."""
        from navi_nb.train.run_lock import acquire

        run_path = Path(run_path)
        lock = None
        if _writes_files():
            if not run_path.is_dir():
                raise RunError(f"run folder {run_path} does not exist")
            lock = acquire(run_path, "navi-nb train --resume", "wait for it to finish before resuming")
        try:
            if lock is not None:  # what a resume writes, checked before it reads or writes anything
                check_run_entries(run_path, RESUME_WRITES, (CHECKPOINT_DIR,))
            self = cls._resume(run_path, overrides, console, progress)
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        self.lock = lock
        return self

    @classmethod
    def from_checkpoint(cls, run_path) -> Trainer:
        """A trainer at ``run_path``'s newest checkpoint that writes nothing there (no lock, no metrics):
        ``navi-nb bench train --from-run`` times a run's own late updates with it. Its files are left alone;
        a run training there meanwhile is not disturbed."""
        run_path = Path(run_path)
        if not run_path.is_dir():
            raise RunError(f"run folder {run_path} does not exist")
        return cls._resume(run_path, None, None, False, read_only=True)

    @classmethod
    def _resume(cls, run_path: Path, overrides, console, progress, read_only=False) -> Trainer:
        cfg = read_run_config(run_path)
        changed = {k: v for k, v in (overrides or {}).items() if getattr(cfg, k) != v}
        asked_env = changed.get("env")
        if isinstance(asked_env, dict) and isinstance(cfg.env, dict) and not env_changes(cfg.env, asked_env):
            del changed["env"]  # --env repeating the run's own values (some of them): no change
        moved = sorted(k for k in changed if k in ("run_dir", "name"))
        if moved:
            raise RunError(
                f"run {run_path}: {' and '.join('--' + k.replace('_', '-') for k in moved)} "
                f"name a new run's folder; a resumed run stays in {run_path}"
            )
        bad = sorted(k for k in changed if k not in RESUME_FIELDS)
        if bad:
            raise RunError(
                f"run {run_path}: cannot change {', '.join(bad)} when resuming "
                f"(the run's config says {', '.join(changed_settings(cfg, changed, bad))}); "
                "start a new run instead"
            )
        for k, v in changed.items():
            setattr(cfg, k, v)
        cfg.validate()
        check_ram(f"actors={cfg.actors} with rollout_steps={cfg.rollout_steps}", cfg.ram_estimate())
        folder = run_path / CHECKPOINT_DIR
        try:
            strangers = sorted(p.name for p in folder.iterdir() if ck.CKPT_RE.match(p.name) and not p.is_file())
        except OSError:
            strangers = []
        if strangers:
            raise RunError(
                f"run {run_path}: {folder / strangers[-1]} is not a regular file; move it away before resuming"
            )
        latest = ck.latest_checkpoint(folder)
        if latest is None:
            hint = (
                f"; it was stopped before its first checkpoint: start it again with --name {run_path.name}"
                if never_checkpointed(run_path)
                else ""
            )
            raise RunError(f"run {run_path} has no checkpoint in {folder} to resume from{hint}")
        ranks = _rank_context(cfg)
        warmup = start_warmup(cfg, console) if ranks is None else Warmup()
        try:
            world_set = load_run_worlds(run_path, cfg, progress and console is not None)
            if ranks is not None:
                ranks.check_worlds(world_set)
            warmup.wait("env")
            self = cls(cfg, run_path, world_set, console, ranks)
            self.env.compile_kernels()
            warmup.wait("tracer")
        except BaseException:
            warmup.cancel()
            raise
        self.warmup = warmup
        self.env.reset(seed=cfg.seed)  # shapes only: set_state below replaces everything
        self.load_checkpoint(latest)
        if (ranks is not None and not ranks.is_root) or read_only:
            from navi_nb.parallel.ranks import NullMetrics

            self.metrics = NullMetrics()
            return self
        try:
            self.metrics = MetricsLog(run_path, resume_update=self.update, console=console)
        except OSError as exc:
            raise os_error(exc, f"cannot write the run folder {run_path}") from None
        if console is not None:
            console.print(
                f"resumed [bold]{escape(str(run_path))}[/] from {escape(latest.name)} (update {self.update}, "
                f"{self.global_step:,} actor-steps)"
            )
        return self

    # ------------------------------------------------------------ checkpoints
    def state_arrays(self) -> dict:
        from navi_nb.rng_state import generator_to_array

        arrays = {"ppo." + k: v for k, v in self.ppo.get_state().items()}
        env_state = self.env.get_state()
        if self.ranks is not None:  # the whole run's state, whatever the rank count
            env_state = self.ranks.gather_env_state(env_state)
        arrays.update({"env." + k: v for k, v in env_state.items()})
        if self.policy_memory is not None:  # the actors' GRU states: a resumed run continues every episode exactly
            mem_state = self.policy_memory.get_state()
            if self.ranks is not None:
                mem_state = self.ranks.gather_env_state(mem_state)
            arrays.update({"memory." + k: v for k, v in mem_state.items()})
        arrays["rng.action"] = generator_to_array(self.rng_action)
        return arrays

    def state_spec(self) -> dict:
        """name -> (shape, dtype) of every checkpoint array, implied by the config."""
        return {k: (np.shape(v), np.asarray(v).dtype) for k, v in self.state_arrays().items()}

    def save_checkpoint(self) -> Path:
        meta = {
            "config": self.cfg.to_dict(),
            "config_hash": self.cfg.hash(),
            "layout": CHECKPOINT_LAYOUT,
            "navi_nb_version": navi_nb.__version__,
            "update": self.update,
            "global_step": self.global_step,
        }
        folder = self.run_path / CHECKPOINT_DIR
        arrays = self.state_arrays()  # under ranks: every rank takes part in gathering it
        if self.ranks is not None and not self.ranks.is_root:
            return folder / ck.checkpoint_name(self.update)
        try:
            path = ck.save_checkpoint(folder / ck.checkpoint_name(self.update), arrays, meta)
        except OSError as exc:  # the writer removed its temporary file; older checkpoints are untouched
            raise os_error(
                exc, f"cannot write checkpoint {folder / ck.checkpoint_name(self.update)} (older checkpoints are kept)"
            ) from None
        ck.prune_checkpoints(folder, self.cfg.keep_checkpoints)
        return path

    def load_checkpoint(self, path):
        """Read and check everything, then apply it all (never half-loaded)."""
        from navi_nb.learn.ppo import PPO, PPOConfig
        from navi_nb.rng_state import check_generator_array, restore_generator

        opened = ck.open_checkpoint(path)
        layout = opened.meta.get("layout", 1)
        if layout != CHECKPOINT_LAYOUT:
            raise ck.CheckpointError(
                path,
                f"has the trainer's checkpoint layout {layout!r}, this version reads "
                f"layout {CHECKPOINT_LAYOUT} only (written by an older navi-nb: "
                "start a new run)",
            )
        arrays, meta = ck.load_checkpoint(path, self.state_spec(), expect_hash=self.cfg.hash())
        update, step = meta.get("update"), meta.get("global_step")
        if not (
            isinstance(update, int) and isinstance(step, int) and 0 <= update and step == update * self.cfg.batch_size
        ):
            raise ck.CheckpointError(path, f"counters are inconsistent (update {update!r}, global_step {step!r})")
        ppo_state = {k[4:]: v for k, v in arrays.items() if k.startswith("ppo.")}
        env_state = {k[4:]: v for k, v in arrays.items() if k.startswith("env.")}
        mem_state = {k[7:]: v for k, v in arrays.items() if k.startswith("memory.")}
        if self.ranks is not None:
            env_state = self.ranks.env_part(env_state)
            mem_state = self.ranks.env_part(mem_state)
        if int(ppo_state["updates_done"]) != update:
            raise ck.CheckpointError(path, "optimizer counters do not match the update counter")
        try:  # set_state checks fully before changing anything; probes keep this trainer untouched on failure
            PPO(make_policy(self.cfg, self.env.obs_dim, self.env.action_dim), PPOConfig.of(self.cfg)).set_state(
                ppo_state
            )
            make_env(self.world_set, self.cfg, ranks=self.ranks).set_state(env_state)
            if self.policy_memory is not None:
                self.policy.new_memory(self.env.n_actors).set_state(mem_state)
            check_generator_array(arrays["rng.action"])
        except NaviError as exc:
            raise ck.CheckpointError(path, str(exc)) from exc
        # apply: nothing below can fail on checked data
        self.env.set_state(env_state)
        if self.policy_memory is not None:
            self.policy_memory.set_state(mem_state)
        self.ppo.set_state(ppo_state)
        restore_generator(self.rng_action, arrays["rng.action"])
        self.update, self.global_step = update, step
        self.obs = self.env.get_state()["obs"]

    def save_policy(self) -> Path:
        meta = {
            "config": self.cfg.to_dict(),
            "config_hash": self.cfg.hash(),
            "kind": "policy",
            "navi_nb_version": navi_nb.__version__,
            "update": self.update,
            "global_step": self.global_step,
            "obs_dim": self.env.obs_dim,
        }
        try:
            return ck.save_checkpoint(self.run_path / POLICY_FILE, {"policy.params": self.policy.params}, meta)
        except OSError as exc:
            raise os_error(exc, f"cannot write {self.run_path / POLICY_FILE} (the checkpoints are kept)") from None

    # ------------------------------------------------------------------ loop
    def calibrate_shards(self, timer=None):
        """Pick the learner's shard count (config, NAVI_NB_SHARDS, or a short measurement) and, when it was
        measured, watch it (``shard_recheck``). ``timer``: the test seam of ``choose_shards`` and ``ShardWatch``."""
        from navi_nb.parallel.shards import RECHECK_BUDGET_S, ShardWatch, UpdateShape, choose_shards

        # The collection tick steps the real environment and the PPO timing runs the fused
        # minibatches; both are restored afterwards, so the run is unchanged. Candidates are
        # ranked by the time of a whole update.
        explicit = self.cfg.shards or None
        if self.ranks is not None:  # threads per rank from the cores it may use and its host's ranks
            explicit = self.cfg.shards or self.ranks.set_threads()
        t0 = time.perf_counter()
        shape = UpdateShape.of(self.cfg)
        self.shard_report = choose_shards(explicit, self.ppo, self.slab, env=self.env, shape=shape, timer=timer)
        self.shard_watch = None
        if self.shard_report.source == "measured" and self.cfg.shard_recheck > 0:
            self.shard_watch = ShardWatch(
                self.shard_report,
                self.cfg.shard_recheck,
                self.cfg.batch_size,
                shape,
                # the start's cost can hold one-time work (kernels loading); a re-check costs about its budget
                # per count, so a short run (the quick start: 3 minutes) re-checks too, first after ~17 s
                first_cost_s=min(time.perf_counter() - t0, RECHECK_BUDGET_S * len(self.shard_report.rates)),
                timer=timer,
            )
        return self.shard_report

    def rollout_threads(self):
        """Numba's thread count until the calibration picks the shard count: the count asked for
        (``shards``, ``NAVI_NB_SHARDS``), else every allowed core; never Numba's default of every reported
        core, which a container's quota may allow a small part of."""
        from navi_nb.parallel.shards import choose_shards

        choose_shards(self.cfg.shards or None)

    def recheck_shards(self, row):
        """After an update (its metrics ``row``): re-time the shard counts when the share allows
        (``ShardWatch``); returns a ShardSwitch when the count changed, else None."""
        w = self.shard_watch
        if w is None:
            return None
        w.add(row["t_collect_s"] + row["t_learn_s"])
        if not w.due():
            return None
        return w.recheck(self.update, self.ppo, self.slab, self.env)

    def train_one_update(self, before_learn=None):
        """Collect, GAE, PPO epochs (``navi_nb.learn.collect.one_update``); returns the metrics row.

        ``before_learn()``: run between the collection and the update (``one_update``); its time counts in
        none of the row's times."""
        from navi_nb.learn.collect import one_update

        cfg = self.cfg
        update = self.update + 1
        before = self.times.copy()
        t0, c0 = time.perf_counter(), time.process_time()
        self.obs, ep, losses = one_update(
            self.env,
            self.ppo,
            self.slab,
            self.obs,
            self._rng_collect,
            num_updates=cfg.num_updates,
            times=self.times,
            before_learn=before_learn,
            memory=self.policy_memory,
        )
        if cfg.task == "explore":  # the running episodes' coverage: a figure also for updates where none ended
            ep["coverage_in_progress"] = self.env.coverage
        if self.ranks is not None:
            ep = self.ranks.episodes(ep)
        t2, c2 = time.perf_counter(), time.process_time()
        paused = self.times.seconds["before_learn"] - before["before_learn"]
        self._t_start += paused  # the row's time_s is training time
        if self.first_tick_s is None and self.times.first_step_time is not None:
            self.first_tick_s = process_age() - (time.time() - self.times.first_step_time)
        t_learn = self.times.seconds["ppo"] - before["ppo"]
        t_collect = (t2 - t0) - t_learn - paused
        lr = losses["learning_rate"]
        self.update = update
        self.global_step += cfg.batch_size
        self.timing["collect"] += t_collect
        self.timing["learn"] += t_learn
        if before_learn is None:
            self.timing["steady_wall"] += t2 - t0
            self.timing["steady_cpu"] += c2 - c0

        def mean(a):
            return float(a.mean()) if a.size else float("nan")

        row = {
            "update": update,
            "global_step": self.global_step,
            "time_s": time.perf_counter() - self._t_start,
            "actor_steps_per_s": cfg.batch_size / max(t2 - t0, 1e-9),
            "episodes": int(ep["return"].size),
            "return_mean": mean(ep["return"]),
            "length_mean": mean(ep["length"]),
            "success_rate": mean(ep["success"]) if cfg.task == "pointgoal" else float("nan"),
            "spl_mean": mean(ep["spl"][~np.isnan(ep["spl"])]) if cfg.task == "pointgoal" else float("nan"),
            "coverage_mean": mean(ep["coverage"]) if cfg.task == "explore" else float("nan"),
            "coverage_in_progress_mean": mean(ep["coverage_in_progress"]) if cfg.task == "explore" else float("nan"),
            "collisions_mean": mean(ep["collisions"]),
            "reward_mean": ep["reward_mean"],
            "learning_rate": lr,
            "t_collect_s": t_collect,
            "t_learn_s": t_learn,
        }
        for k in ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac", "explained_var", "grad_norm"):
            row[k] = float(losses.get(k, float("nan")))
        return row

    def start_learning(self, shard_timer=None):
        """Before the first update: wait for the learning kernels' warm-up child, pick the shard count
        (``calibrate_shards``) and print the choice."""
        console = self.console
        if self.warmup is not None:
            if console is not None and self.warmup.running("learn"):
                console.print(
                    "[dim]first update: waiting for the learning kernels, still compiling in their background "
                    "process (first run only)[/]"
                )
            self.warmup.wait()
        self.calibrate_shards(timer=shard_timer)
        if console is not None:
            self.shard_report.print(console)
            mem = self.env.ram_report()
            if mem["geodesic_field_bytes_per_actor"]:
                console.print(
                    f"geodesic fields: {mem['geodesic_field_bytes_per_actor'] / 1024:.0f} KiB per actor, "
                    f"{mem['shared_field_grid_bytes'] / 2**20:.1f} MiB of grids shared by all"
                )
            if mem["map_bytes_per_actor"]:
                console.print(f"episodic map: {mem['map_bytes_per_actor'] / 1024:.1f} KiB per actor")
            if self.ranks is not None:
                from navi_nb.parallel.ranks import print_topology

                print_topology(console, self.ranks.topology_info)

    def train(self, progress=True, stop_after=None, shard_timer=None):
        """Run updates until ``total_steps`` (or ``stop_after`` more updates); returns a summary.

        ``shard_timer``: the shard re-check's test seam (``ShardWatch``'s ``timer``)."""
        from navi_nb.train.progress import TrainProgress

        cfg, console = self.cfg, self.console
        if console is not None:
            print_config(console, cfg, self.run_path)
        if self.update >= cfg.num_updates and console is not None:
            console.print(
                f"run {escape(str(self.run_path))} is already complete ({self.update} of {cfg.num_updates} updates)"
            )
        start_update = self.update
        last = cfg.num_updates if stop_after is None else min(cfg.num_updates, self.update + stop_after)
        # The first rollout needs only the policy's forward pass, so it goes first: the update waits for a first
        # run's learning kernels, still compiling in their child (navi_nb.train.warmup), and picks the shard
        # count after it (calibrating there is what a mid-run re-check does), so the first tick does not wait
        # for the calibration's second of timing. Ranks calibrate together, before their first tick.
        deferred = self.ranks is None and self.update < last
        if deferred:
            self.rollout_threads()
        else:
            self.start_learning(shard_timer)
        self._t_start = time.perf_counter()
        rows = []
        with TrainProgress(console, cfg, start_update, enabled=progress and console is not None) as prog:
            try:
                while self.update < last:
                    hook = (lambda: self.start_learning(shard_timer)) if deferred else None
                    deferred = False
                    row = self.train_one_update(before_learn=hook)
                    try:
                        self.metrics.write(row)
                    except OSError as exc:
                        raise os_error(exc, f"cannot write the metrics of {self.run_path}") from None
                    rows.append(row)
                    if self.update == start_update + 1 and console is not None and self.first_tick_s:
                        prog.note(f"first tick {self.first_tick_s:.2f} s after process start")
                    if self.update % cfg.checkpoint_every == 0 or self.update == last:
                        self.save_checkpoint()
                    prog.advance(row)
                    switch = self.recheck_shards(row) if self.update < last else None
                    if switch is not None:
                        prog.note(switch.line())
            except BaseException:
                if self.warmup is not None:
                    self.warmup.cancel()  # a learning child still compiling
                try:  # the error in flight is the one to report, not a second one from closing the logs
                    self.metrics.close()
                except OSError:
                    pass
                raise
            else:
                try:
                    self.metrics.close()
                except OSError as exc:
                    raise os_error(exc, f"cannot write the metrics of {self.run_path}") from None
        if self.update >= cfg.num_updates and (self.ranks is None or self.ranks.is_root):
            self.save_policy()  # one writer: every rank holds the same weights
        summary = run_summary(self, rows)
        if rows and (self.ranks is None or self.ranks.is_root):
            write_run_record(self, summary)
        return summary

    def cores_busy(self) -> float:
        """The process's CPU-seconds (all its threads) per wall second of collecting and learning, over this
        call's updates but one that waited before learning: 2.0 when two threads worked throughout; NaN
        before such an update. With ``n`` threads, ``(n - cores_busy) / (n - 1)`` is the share of the wall
        in which one thread worked alone (``navi-nb bench train``'s serial share from CPU time)."""
        wall = self.timing["steady_wall"]
        return self.timing["steady_cpu"] / wall if wall > 0 else float("nan")


def _writes_files() -> bool:
    """True in the process that writes the run folder: the only one, or rank 0 under an MPI launcher."""
    from navi_nb.parallel.ranks import launched_by_mpi, world

    return not launched_by_mpi() or world().Get_rank() == 0


def _rank_context(cfg):
    """This process's :class:`~navi_nb.parallel.ranks.RankContext` under an MPI launcher (checked: every
    rank runs the same config and versions; threads set), else None."""
    from navi_nb.parallel.ranks import launched_by_mpi, rank_context

    if not launched_by_mpi():
        return None
    ranks = rank_context(cfg.actors, cfg.actor_block)
    if ranks is not None:
        import numba

        # checkpoint_every decides when the state is gathered: every rank must agree on it too
        ranks.check_same(
            {
                "config hash": cfg.hash(),
                "checkpoint_every": cfg.checkpoint_every,
                "navi_nb": navi_nb.__version__,
                "numpy": np.__version__,
                "numba": numba.__version__,
            }
        )
        ranks.set_threads()
        ranks.topology_info = ranks.topology()
    return ranks
