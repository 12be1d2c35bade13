"""`NavEnv`: many actors stepping together in one shared world or a world set.

All state is plain arrays, one row per actor (``get_state``/``set_state`` save
and restore it exactly). A step is: validate actions (before anything
changes) -> clip -> ``move_actors`` (kinematics + collision) -> (with
``reward_count`` > 0, the map's visit counts, ``episodic_map.visits_after``) ->
``score_step`` (reward terms, flags, counters) -> finished actors reset in the
same call (autoreset, Gymnasium's SAME_STEP mode; their new episodes' geodesic
fields on a worker thread meanwhile) -> one batched trace of every actor where
its step ended and of each reset actor at its new spawn, whose ranges write the
observations' ray columns as they go (``write_tail`` writes the rest; with ``map_cell`` > 0 the same rays then
update each actor's episodic map and write its crop, ``episodic_map.py``). A
finished episode's last observation goes to ``info["final_obs"]`` (and the pose where it ended to
``info["final_pos"]`` / ``info["final_yaw"]``), their episode statistics to
``info["episode"]``, and the observation returned for them is the first of
their next episode. ``info["done"]`` marks them.

Returned arrays are the environment's own preallocated buffers, overwritten by
the next ``step``/``reset``: copy what you keep.

World sets: ``world`` may be a :class:`~navi_nb.world.world_set.WorldSet`;
each actor then lives in one of its worlds (``world_index``), chosen afresh
at every (re)set by ``EnvConfig.world_schedule`` as a function of (seed,
actor, episode number) only, so it does not depend on thread counts or on
which other actors reset in the same step. A single World is the set of one
(every actor in world 0, no draws: bits as before). Spawns, goals,
collision, the visit grid and SPL's shortest path are each actor's
world's; ``info["episode"]["world"]`` names the world of each finished
episode.
"""

from __future__ import annotations

import numbers
import time

import numpy as np

from navi_nb.env.checks import check_actions, check_straight_band
from navi_nb.env.config import EPISODE_RECORD, EnvConfig, EnvConfigError, StateError
from navi_nb.env.episodic_map import EpisodicMap, map_columns, visits_after
from navi_nb.env.footprint import RAY_BYTES
from navi_nb.env.geodesic import GoalFields
from navi_nb.env.motion import field_cube, move_actors, world_motion_params
from navi_nb.env.observation import obs_layout, obs_size, write_tail
from navi_nb.env.pool_file import default_pool_dir
from navi_nb.env.state import RNG_NAMES, checked_state, copied_state, state_spec
from navi_nb.env.tasks import (
    TASK_CODES,
    TERMS,
    VisitGrid,
    reward_coefficients,
    score_rules,
    score_step,
    start_episodes,
    visit_tables,
)
from navi_nb.env.worlds import checked_world, contact_margin, scheduled_worlds, world_spawner, world_voxel
from navi_nb.threads import defer
from navi_nb.world.world_set import WorldSet


class NavEnv:
    """A batch of ``n_actors`` actors in one world or in the worlds of a set.

    Parameters: ``world`` (a loaded :class:`~navi_nb.world.gmdag.World`, a
    path to a ``.gmdag`` or a :class:`~navi_nb.world.world_set.WorldSet`), ``n_actors``, ``sensor`` (default
    ``Sensor(64, 16)``), ``task`` (``"pointgoal"`` or ``"explore"``), ``seed``,
    ``backend`` for the tracer (``"cpu"``, ``"cuda"``, ``"auto"``), and any
    field of :class:`~navi_nb.env.config.EnvConfig` as a keyword.

    ``actor_block`` > 0 cuts the actors into blocks of that many (all of them
    when fewer), each with its own spawn and goal generators seeded from
    ``(seed, block index)``, the index counted from ``first_block``: a block's
    episodes then do not depend on the other actors, so an environment holding
    blocks ``[a, b)`` of a bigger run steps them exactly as the whole one does
    (the generators' states are then ``(blocks, 6)`` arrays). 0: one pair of
    generators for all actors.
    """

    action_dim = 4
    metadata = {"autoreset_mode": "same_step"}

    def __init__(
        self,
        world,
        n_actors,
        sensor=None,
        task="pointgoal",
        seed=0,
        backend="cpu",
        actor_block=0,
        first_block=0,
        **config,
    ):
        from navi_nb.sense.sensor import Sensor
        from navi_nb.sense.tracer import Tracer

        world = checked_world(world, n_actors, task, seed, actor_block, first_block)
        block = min(int(actor_block), int(n_actors)) if actor_block else 0
        self.actor_block, self.first_block = block, int(first_block)
        self._n_blocks = int(n_actors) // block if block else 0
        if sensor is None:
            sensor = Sensor(64, 16)
        cfg = EnvConfig.from_kwargs(**config)
        self.config = cfg
        self.world_set = world_set = WorldSet.of(world)
        self.world = world_set.worlds[0]  # world 0 (the world of a single-world environment)
        self.sensor = sensor
        self.task = task
        self.backend = backend
        self.n_actors = A = int(n_actors)
        self._task_code = TASK_CODES[task]
        self.reward_names = TERMS[task]
        # the map's geometry and rays, its grids checked against the memory before anything is built (None: off)
        self._episodic_map = EpisodicMap(world_set, sensor, cfg, A) if cfg.map_cell > 0 else None
        voxels, margins = self._world_tables(cfg)
        self._spawners_and_grids(cfg, voxels, margins)
        # sensing
        # room for every actor's rays and a second pose of each actor that resets in a step (one trace a step)
        self._tracer = Tracer(world_set, sensor, cfg.max_distance, backend=backend, max_actors=2 * A)
        n_rays = sensor.az_count * sensor.el_count
        self.obs_layout = obs_layout(n_rays, cfg.semantic_obs, task == "pointgoal", map_columns(cfg))
        self.obs_dim = obs_size(self.obs_layout)
        self._inv_log_max = 1.0 / float(np.log1p(cfg.max_distance))
        n_classes = max(len(w.class_names) for w in world_set.worlds)
        self._sem_scale = 1.0 / max(1, n_classes - 1)
        self._allocate_state(A, max(g.nbytes for g in self._grids))
        self._bundle_arrays(cfg)
        self._seed(seed)
        self._has_reset = False
        self.trace_seconds = 0.0  # time spent sphere tracing, summed (bench train reads it)

    def _world_tables(self, cfg):
        """The worlds' shared tables for the kernels (never copied per actor); returns each world's
        voxel size and contact margin."""
        world_set = self.world_set
        self._packed = world_set.packed.arrays  # the decoded layouts the collision query reads
        voxels = [world_voxel(w) for w in world_set.worlds]
        self._voxel = voxels[0]
        self._res = int(self.world.resolution)
        margins = [contact_margin(cfg, v) for v in voxels]
        self.margin = margins[0]
        self._wparams = world_motion_params(world_set, margins, cfg.radius)
        for w in range(len(world_set)):
            if np.any(self._wparams[w, 5:8] <= self._wparams[w, 2:5]):
                raise EnvConfigError(
                    f"NavEnv: radius {cfg.radius} does not fit in the cube of world {world_set.names[w]}"
                )
        self._speeds = np.array(
            [cfg.max_speed, cfg.max_vertical_speed, cfg.max_lateral_speed, cfg.max_yaw_rate], dtype=np.float64
        )
        self._inv_speeds = 1.0 / self._speeds[:3]
        self._coefs = reward_coefficients(self.task, cfg)
        return voxels, margins

    def _spawners_and_grids(self, cfg, voxels, margins):
        """Per world: the spawn sampler (its pool read from the pool cache or computed), the visit grid
        and its reachable cells; then the goal fields over the samplers."""
        world_set = self.world_set
        self._spawners, self._grids, reachable = [], [], []
        pool_dir = default_pool_dir()
        for w, wd in enumerate(world_set.worlds):
            spawner = world_spawner(world_set, w, cfg, voxels[w], margins[w], pool_dir)
            cube_lo, cube_hi = field_cube(wd)
            grid = VisitGrid(cube_lo, cube_hi, cfg.visit_cell, cfg.visit_max_cells)
            reach = np.zeros(grid.n_cells, dtype=bool)
            reach[grid.cell_of(spawner.pool)] = True
            self._spawners.append(spawner)
            self._grids.append(grid)
            reachable.append(int(reach.sum()))
        self._spawner = self._spawners[0]
        self.pool_notes = [f"world {world_set.names[w]}: {sp.note}" for w, sp in enumerate(self._spawners) if sp.note]
        self._grid = self._grids[0]
        self._fields = GoalFields(self._spawners, self.n_actors, cfg.needs_field(self.task))
        if self._fields.enabled and cfg.goal_distance == "geodesic":
            self._fields.check_band(self._spawners, world_set.names, cfg.goal_min_distance, cfg.goal_max_distance)
        elif self.task == "pointgoal":
            pools = [sp.pool for sp in self._spawners]
            check_straight_band(pools, world_set.names, cfg.goal_min_distance, cfg.goal_max_distance)
        self.reachable_cells = reachable[0]
        self._reachable = np.asarray(reachable, dtype=np.int64)
        self._visit_tables = visit_tables(self._grids)

    def _allocate_state(self, A, visit_bytes):
        """The per-actor state (plain arrays, everything ``get_state`` saves, each the attribute ``_`` +
        its name) and the per-step outputs (preallocated, reused)."""
        map_cells = self._episodic_map.n_cells if self._episodic_map is not None else 0
        self._state_spec = state_spec(A, self.obs_dim, visit_bytes, self._n_blocks, map_cells)
        for name, (shape, dtype) in self._state_spec.items():
            if name not in RNG_NAMES:
                setattr(self, "_" + name, np.zeros(shape, dtype=dtype))
        self._act = np.zeros((A, 4), np.float32)
        self._potential = np.zeros(A, np.float64)
        self._contact = np.zeros(A, bool)
        self._moved = np.zeros(A, np.float32)
        self._terms = np.zeros((len(self.reward_names), A), np.float32)
        self._count_visits = np.zeros(A, np.int32)  # the count bonus's n (0: off), written before each score
        self._reward = np.zeros(A, np.float32)
        self._terminated = np.zeros(A, bool)
        self._truncated = np.zeros(A, bool)
        self._success = np.zeros(A, bool)
        self._done = np.zeros(A, bool)
        # the observations and the finished episodes' last ones in one buffer: a step's one trace writes both
        self._obs_pair = np.zeros((2 * A, self.obs_dim), np.float32)
        self._obs = self._obs_pair[:A]
        self._final_obs = self._obs_pair[A:]
        self._final_pos = np.zeros((A, 3), np.float32)  # where a finished episode ended (before its reset)
        self._final_yaw = np.zeros(A, np.float32)
        self._ep_out = {k: np.zeros(A, t) for k, t in EPISODE_RECORD.items()}
        self._all_rows = np.arange(A, dtype=np.int64)
        self._path_jobs = []  # (rows, threads.Deferred): SPL's shortest paths being computed (_start_shortest_paths)
        self._field_job = None  # the fields of the episodes a step starts, computed while it traces (_start)

    def _bundle_arrays(self, cfg):
        """The bundles the kernels take (tuples of the arrays above, never copies: ``set_state`` writes
        into the arrays, so they stay current). Per actor: pose, goals, visits, counters (state), moves
        and outcome (a step's outputs); shared: the motion tables and the constants of a move, a score
        and an observation. The kernels' docstrings name each member."""
        self._pose = (self._world_index, self._pos, self._yaw, self._vel)
        self._goals = (self._goal, self._goal_dist, self._start_dist)
        self._visits = (self._visit, self._cells)
        self._counters = (self._ep_return, self._ep_len, self._path_len, self._collisions)
        self._moves = (self._act, self._contact, self._moved)
        self._outcome = (self._terms, self._reward, self._terminated, self._truncated, self._success)
        self._motion = (self._packed, self._wparams)
        self._limits = (self._speeds, cfg.dt, cfg.radius, cfg.max_substeps)
        self._rules = score_rules(self._coefs, cfg)
        self._scales = (self._inv_log_max, self._sem_scale, self._inv_speeds, 1.0 / cfg.goal_scale)

    # ------------------------------------------------------------------
    def _seed(self, seed):
        self._world_seed[()] = np.uint64(seed)
        if not self._n_blocks:
            spawn_ss, goal_ss = np.random.SeedSequence(int(seed)).spawn(2)
            self._rng_spawn = np.random.Generator(np.random.PCG64(spawn_ss))
            self._rng_goal = np.random.Generator(np.random.PCG64(goal_ss))
            return
        self._rng_spawn, self._rng_goal = [], []
        for k in range(self.first_block, self.first_block + self._n_blocks):
            spawn_ss, goal_ss = np.random.SeedSequence([int(seed), k]).spawn(2)
            self._rng_spawn.append(np.random.Generator(np.random.PCG64(spawn_ss)))
            self._rng_goal.append(np.random.Generator(np.random.PCG64(goal_ss)))

    def _start(self, rows, observe=True):
        """Fresh episodes for actors ``rows`` (int64, ascending): world, spawn, goal, counters, and with
        ``observe`` the observation (``step`` observes them in its own trace)."""
        self._settle_paths()  # a path still computed for an episode these rows end must not land after it
        n_worlds = len(self.world_set)
        if n_worlds > 1:  # by the actor's global index (a block run alone draws what it draws in the whole)
            first = self.first_block * self.actor_block if self._n_blocks else 0
            self._world_index[rows] = scheduled_worlds(
                self.config.world_schedule, n_worlds, int(self._world_seed), rows + first, self._episodes[rows]
            )
        if not self._n_blocks:
            self._sample_episodes(rows, self._rng_spawn, self._rng_goal)
        else:  # each block's actors from the block's own generators
            block_of = rows // self.actor_block
            for k in np.unique(block_of):
                self._sample_episodes(rows[block_of == k], self._rng_spawn[k], self._rng_goal[k])
        start_episodes(*self._start_args(rows))
        if self.task == "pointgoal" and not observe and not self._goal_first:
            # the fields and start potentials on a worker while step traces (it settles them after)
            geodesic = self.config.progress == "geodesic"
            self._field_job = self._fields.start(
                geodesic, rows, self._world_index, self._goal, self._pos, self._goal_dist
            )
        elif self.task == "pointgoal":
            if not self._goal_first:
                self._fields.compute(rows, self._world_index, self._goal)
            self._fields.potential(
                self.config.progress == "geodesic",
                rows,
                self._pos,
                self._goal,
                self._world_index,
                self._goal_dist,
                self._goal_dist,
            )
        if self.task == "pointgoal":
            self._start_shortest_paths(rows)
        if observe:
            self._observe(rows, fresh=True)

    def _start_shortest_paths(self, rows):
        """SPL's distance for actors ``rows``: the shortest path from spawn to goal through their
        world's reachable cells (``spawn.path_lengths``), world by world. Nothing reads it before the
        episode ends, so it is computed on a worker thread (``threads.defer``, from copies of the
        spawns and goals) while the run goes on, and written by :meth:`_settle_paths`: the same
        values, off the tick's one-thread part."""
        for spawner, sub in self._by_world(rows):
            self._path_jobs.append((sub, defer(spawner.path_lengths, self._pos[sub], self._goal[sub])))

    def _settle_paths(self):
        """Wait for the shortest paths :meth:`_start_shortest_paths` deferred and write them into
        ``_start_dist`` (before anything reads it: an episode's end, ``get_state``, ``set_state``,
        :attr:`shortest_paths`); first the fields (:meth:`_settle_fields`)."""
        self._settle_fields()
        for sub, job in self._path_jobs:
            self._start_dist[sub] = job.result()
        self._path_jobs.clear()

    def _settle_fields(self):
        """Wait for the fields and start potentials of the episodes a step started (:meth:`_start`)."""
        if self._field_job is not None:
            job, self._field_job = self._field_job, None
            self._fields.settle(job)

    def _by_world(self, rows):
        """(spawn sampler, the actors of ``rows`` in its world) for each world that ``rows`` touch, in
        ascending world order (rows ascending within one); a set of one is all of ``rows`` at once."""
        if len(self.world_set) == 1:
            return [(self._spawner, rows)]
        wi = self._world_index[rows]
        return [(self._spawners[w], rows[wi == w]) for w in np.unique(wi)]

    def _start_args(self, rows):
        return (rows, self._visit_tables, self._pose, self._goals, self._visits, self._counters, self._prev_action)

    @property
    def _goal_first(self) -> bool:
        """Episodes draw the goal first, then the spawn by its geodesic distance from it."""
        cfg = self.config
        return self._fields.enabled and (
            cfg.goal_distance == "geodesic" or cfg.goal_min_ratio > 1 or cfg.goal_max_ratio > 0
        )

    def _sample_episodes(self, rows, rng_spawn, rng_goal):
        """Spawns and goals of actors ``rows`` from the two generators; with several worlds,
        world by world in ascending world order (rows ascending within one)."""
        cfg = self.config
        groups = self._by_world(rows)
        if self._goal_first:
            self._fields.sample_goal_first(
                rows, groups, self._world_index, self._pos, self._yaw, self._goal, cfg, rng_spawn, rng_goal
            )
            return
        for spawner, sub in groups:  # every spawn first, then every goal: each generator's draws in one order
            self._pos[sub], self._yaw[sub] = spawner.sample_spawns(rng_spawn, sub.shape[0])
        for spawner, sub in groups:
            self._goal[sub] = spawner.sample_goals(
                rng_goal, self._pos[sub], cfg.goal_min_distance, cfg.goal_max_distance
            )

    def _observe(self, rows, fresh=False):
        """The observations of actors ``rows`` from their state now (``fresh``: their episodes' first)."""
        if rows.shape[0] == self.n_actors:
            origins, yaws, wi = self._pos, self._yaw, self._world_index
        else:
            origins, yaws, wi = self._pos[rows], self._yaw[rows], self._world_index[rows]
        write_tail(*self._tail_args(rows, rows))
        self._trace_into(origins, yaws, wi, rows, *((None, (rows, 0)) if fresh else ((rows, rows), None)))

    def _trace_into(self, origins, yaws, wi, dest, kept, fresh):
        """Trace the actors at ``origins`` / ``yaws`` in worlds ``wi`` in one call and write their ray
        columns into rows ``dest`` of ``_obs_pair`` (row ``A + i``: actor i's final observation); the CPU
        tracer's ranges write them as they trace. Then the maps from the same rays (``kept``, ``fresh``:
        :meth:`EpisodicMap.observe`'s)."""
        t0 = time.perf_counter()
        image = (dest, self._obs_pair, self._inv_log_max, self._sem_scale, self.config.semantic_obs)
        depth, _sem, hit = self._tracer.trace(origins, yaws, to_host=True, world_index=wi, image=image)
        self.trace_seconds += time.perf_counter() - t0
        if self._episodic_map is not None:
            at = self.obs_layout["map"].start
            self._episodic_map.observe(self._map, (origins, yaws, wi, depth, hit), kept, fresh, self._obs_pair, at)

    def _tail_args(self, actors, dest):
        ray_columns = self.obs_layout["prev_action"].start
        goal = self.task == "pointgoal"
        return (
            actors,
            dest,
            self._scales,
            self._pose,
            self._goals,
            self._prev_action,
            ray_columns,
            goal,
            self._obs_pair,
        )

    # ------------------------------------------------------------------
    def reset(self, seed=None):
        """Start a fresh episode for every actor. Returns ``(obs (A, obs_dim) float32, info)``."""
        if seed is not None:
            if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
                raise EnvConfigError(f"NavEnv.reset: seed must be a non-negative integer, got {seed!r}")
            self._seed(seed)
        self._episodes[:] = 0
        self._start(self._all_rows)
        self._has_reset = True
        self._done[:] = False
        return self._obs, {"done": self._done}

    def _move_args(self):
        return (self._motion, self._limits, self._pose, self._moves)

    def _score_args(self):
        return (
            self._task_code,
            self._rules,
            self._visit_tables,
            self._pose,
            self._goals,
            self._potential,
            self._moves,
            self._visits,
            self._counters,
            self._outcome,
            self._count_visits,
        )

    def compile_kernels(self):
        """Compile (or load from Numba's cache) the kernels that reset and step call, for these
        argument types, without running them (the point-goal task's shortest paths run for no actor):
        nothing changes. A first run's warm-up child calls this on a stand-in world
        (``navi_nb/train/warmup.py``), so the run's first reset and step find their kernels ready."""
        from numba import typeof

        for kernel, args in (
            (start_episodes, self._start_args(self._all_rows)),
            (write_tail, self._tail_args(self._all_rows, self._all_rows)),
            (move_actors, self._move_args()),
            (score_step, self._score_args()),
        ):
            kernel.compile(tuple(typeof(a) for a in args))
        if self.task == "pointgoal":  # SPL's shortest paths and the fields, for no actor: the kernels only
            none = np.zeros((0, 3), np.float64)
            self._spawner.path_lengths(none, none)
            self._fields.compile_kernels(self._world_index, self._pos, self._goal, self._goal_dist, self._potential)
        self._spawner.compile_kernels()  # the spawn grid's, which a cached pool did not run
        if self._episodic_map is not None:
            self._episodic_map.compile(self._map, self._obs_pair, self.obs_layout["map"].start)
        if self.config.reward_count > 0:
            args = (self._episodic_map.grid.tables(), self._map, self._world_index, self._pos, self._count_visits)
            visits_after.compile(tuple(typeof(a) for a in args))

    def check_actions(self, actions) -> np.ndarray:
        """The actions as an array, or an :class:`ActionError`; changes nothing."""
        return check_actions(actions, self.n_actors)

    def step(self, actions):
        """One step for every actor; see the module docstring for the autoreset contract.

        Returns ``(obs, reward (A,) float32, terminated (A,) bool, truncated (A,) bool, info)``.
        """
        a = self.check_actions(actions)
        if not self._has_reset:
            raise StateError("NavEnv.step called before reset()")
        np.clip(a, -1.0, 1.0, out=self._act, casting="unsafe")
        move_actors(*self._move_args())
        if self.task == "pointgoal":
            self._fields.potential(
                self.config.progress == "geodesic",
                self._all_rows,
                self._pos,
                self._goal,
                self._world_index,
                self._goal_dist,
                self._potential,
            )
        if self.task == "pointgoal" and self.config.max_steps_per_metre > 0:
            self._settle_paths()  # the step limits follow the shortest paths (start_dist)
        if self.config.reward_count > 0:  # n from the map before this step's visit is recorded (+1)
            visits_after(self._episodic_map.grid.tables(), self._map, self._world_index, self._pos, self._count_visits)
        score_step(*self._score_args())
        self._prev_action[:] = self._act
        np.logical_or(self._terminated, self._truncated, out=self._done)
        ep = self._ep_out
        for v in ep.values():
            v[:] = 0
        rows = np.flatnonzero(self._done)
        if not rows.shape[0]:
            self._observe(self._all_rows, fresh=False)
        else:
            self._settle_paths()
            # the finished episodes' last observations go to _final_obs (rows A + i of _obs_pair): their
            # tails from the state now, their rays from the trace below, which also sees the new episodes'
            # first poses (one trace for both, its ranges spread over the threads)
            A = self.n_actors
            dest = self._all_rows.copy()
            dest[rows] += A
            write_tail(*self._tail_args(self._all_rows, dest))
            self._final_pos[rows] = self._pos[rows]
            self._final_yaw[rows] = self._yaw[rows]
            ep["return"][rows] = self._ep_return[rows]
            ep["length"][rows] = self._ep_len[rows]
            succ = self._success[rows]
            ep["success"][rows] = succ
            l = self._start_dist[rows]
            scored = succ | np.isnan(l)  # a success's SPL, or NaN where the shortest path is unknown
            ep["spl"][rows] = np.where(scored, l / np.maximum(np.maximum(self._path_len[rows], l), 1e-12), 0.0)
            ep["coverage"][rows] = self._cells[rows] / np.maximum(1, self._reachable[self._world_index[rows]])
            ep["collisions"][rows] = self._collisions[rows]
            ep["world"][rows] = self._world_index[rows]  # the finished episode's world (before the reset)
            self._episodes[rows] += 1
            rows = rows.astype(np.int64)
            self._start(rows, observe=False)
            write_tail(*self._tail_args(rows, rows))
            k = rows.shape[0]
            origins = np.empty((A + k, 3), np.float32)
            yaws = np.empty(A + k, np.float32)
            wi = np.empty(A + k, np.int32)
            origins[:A], yaws[:A], wi[:A] = self._pos, self._yaw, self._world_index
            origins[rows], yaws[rows], wi[rows] = self._final_pos[rows], self._final_yaw[rows], ep["world"][rows]
            origins[A:], yaws[A:], wi[A:] = self._pos[rows], self._yaw[rows], self._world_index[rows]
            self._trace_into(origins, yaws, wi, np.concatenate([dest, rows]), (self._all_rows, dest), (rows, A))
            self._settle_fields()
        info = {
            "done": self._done,
            "final_obs": self._final_obs,
            "final_pos": self._final_pos,
            "final_yaw": self._final_yaw,
            "episode": ep,
            "reward_terms": {n: self._terms[k] for k, n in enumerate(self.reward_names)},
            "contact": self._contact,
            "success": self._success,
        }
        return self._obs, self._reward, self._terminated, self._truncated, info

    # ------------------------------------------------------------------
    def get_state(self) -> dict:
        """Copies of every per-actor array and both generators' states."""
        self._settle_paths()
        rngs = {"rng_spawn": self._rng_spawn, "rng_goal": self._rng_goal}
        return copied_state(
            self._state_spec, lambda name: getattr(self, "_" + name), rngs, bool(self._n_blocks), self._has_reset
        )

    def set_state(self, state: dict) -> None:
        """Restore a ``get_state`` dict exactly (checked fully before anything changes)."""
        n_cells = [g.n_cells for g in self._grids]
        values, generators, has_reset = checked_state(
            state, self._state_spec, self.config, self._wparams, n_cells, len(self.world_set), bool(self._n_blocks)
        )
        # apply: everything is checked and converted; nothing below can fail
        self._settle_paths()  # (a path still being computed must not land on the restored values)
        self._rng_spawn, self._rng_goal = generators["rng_spawn"], generators["rng_goal"]
        for name in self._state_spec:
            if name not in RNG_NAMES:
                getattr(self, "_" + name)[...] = values[name]
        self._has_reset = has_reset
        if self.task == "pointgoal":  # each field is a pure function of its goal and world: computed again
            self._fields.compute_changed(self._world_index, self._goal)  # where either changed

    # ------------------------------------------------------------------
    @property
    def positions(self):
        return self._pos

    @property
    def yaws(self):
        return self._yaw

    @property
    def goals(self):
        return self._goal

    @property
    def field_seconds(self) -> float:
        """Time the step's thread spent on the geodesic fields at episode starts, summed: computing them, or,
        when a worker computes them beside the step's trace, waiting for it (bench train reads it)."""
        return self._fields.seconds

    @property
    def map_seconds(self) -> float:
        """Time spent updating the episodic maps and writing their crops, summed (0 with the map off)."""
        return self._episodic_map.seconds if self._episodic_map is not None else 0.0

    @property
    def shortest_paths(self):
        """(A,) float64, read-only view: each actor's shortest path from its spawn to its goal (metres,
        SPL's distance; point-goal)."""
        self._settle_paths()
        v = self._start_dist.view()
        v.flags.writeable = False
        return v

    @property
    def coverage(self):
        """(A,) float64, a new array: each actor's episode so far as its record's ``coverage`` would be now."""
        return self._cells / np.maximum(1, self._reachable[self._world_index])

    @property
    def episodes_finished(self):
        return self._episodes

    @property
    def world_index(self):
        """(A,) int32, read-only view: each actor's world in ``world_set``."""
        v = self._world_index.view()
        v.flags.writeable = False
        return v

    def ram_report(self) -> dict:
        """Bytes held: per actor (state + step buffers + ray buffers) and shared."""
        per = sum(
            int(np.prod(s)) * np.dtype(d).itemsize for n, (s, d) in self._state_spec.items() if n not in RNG_NAMES
        )
        steps = (
            self._act.nbytes
            + self._contact.nbytes
            + self._moved.nbytes
            + self._terms.nbytes
            + self._count_visits.nbytes
            + self._reward.nbytes
            + self._terminated.nbytes
            + self._truncated.nbytes
            + self._success.nbytes
            + self._done.nbytes
            + self._final_obs.nbytes
            + self._final_pos.nbytes
            + self._final_yaw.nbytes
            + sum(v.nbytes for v in self._ep_out.values())
            + self._all_rows.nbytes
        )
        rays = self.sensor.az_count * self.sensor.el_count * RAY_BYTES  # depth, semantic, hit
        total_actor = per + steps + rays * self.n_actors + self._fields.field.nbytes
        return {
            "bytes_per_actor": total_actor / self.n_actors,
            "state_bytes_per_actor": per / self.n_actors,
            "visit_grid_bytes_per_actor": self._grid.nbytes,
            "map_bytes_per_actor": self._map.nbytes // self.n_actors if self._episodic_map is not None else 0,
            "ray_buffer_bytes_per_actor": rays,
            "shared_world_bytes": int(
                sum(
                    int(w.nodes.nbytes)
                    for k, w in enumerate(self.world_set.worlds)
                    if self.world_set.packed.distinct[k] == k
                )
            ),
            "shared_layout_bytes": int(self.world_set.packed.nbytes),
            "shared_spawn_pool_bytes": int(sum(s.nbytes for s in self._spawners)),
            "geodesic_field_bytes_per_actor": self._fields.bytes_per_actor,
            "shared_field_grid_bytes": self._fields.shared_bytes,
        }
