"""A first run's kernel compilation, split over parallel processes.

On a fresh install (or after an edit to a compiled source, which drops the
cached kernels, ``navi_nb/jit_cache.py``) the first training tick waits for
Numba to compile every kernel the trainer calls. Compilation is single-
threaded, and the kernels fall into groups that share nothing:

- the worlds: the compile processes of the world cache
  (``navi_nb/world/world_cache.py``) compile the world compiler's kernels
  with the run's first world, then the rest of the worlds.
- ``env``: the environment's own kernels: spawning and its reachable cells,
  collision, the shortest paths SPL divides by, the observation and the
  tasks' rewards. A child builds the run's environment (its actors, sensor,
  task and settings) on a stand-in world and compiles the kernels that
  building it, its reset and its step call (``NavEnv.compile_kernels``).
- ``tracer``: the tracer's kernel, the biggest one. A child compiles it by
  tracing the stand-in world with the run's sensor, range and actor count.
- ``learn``: the policy's forward and sampling, GAE, the fused PPO
  minibatches and Adam. Nothing in ``sense`` needs them until the first
  update (the first rollout needs only the policy's forward pass, the first
  kernel the child compiles, at normal priority: the first tick needs it; the
  trainer waits for the child, and then picks its shard count, between that
  rollout and its update), so a child process compiles them meanwhile, the
  rest at the lowest priority, by running one
  real update (``navi_nb.learn.collect.one_update``) with the run's network,
  rollout and minibatch sizes and dtypes on the point-goal task of
  ``navi_nb.env.toy`` padded to the run's observation length: the same
  calls with the same argument types, so the same signatures. The update's
  two parallel passes are most of it and independent: a helper process of
  the child (``learn-finish``) compiles the second for the same types while
  the child compiles the first (``PPO.compile_passes``), and the rest of the
  update then loads both.

A kernel's compiled code depends on its arguments' types, not on their
values, and every world's arrays have the same types. So the ``env`` and
``tracer`` children need not wait for the run's worlds: from the start they
use ``STAND_IN``, the built-in ``box`` room at 32 voxels shipped with the
package (a world cache entry; the tests check it is the compiler's output
and that after these children a run on other worlds compiles nothing of
theirs), mapped read-only as the run maps its own. They compile while the
world cache compiles the run's worlds. Numba writes what they compiled to its
on-disk cache; the trainer then waits for each child before its first call
into that group (``env`` before it builds the environment, ``tracer``
before the reset) and loads those kernels instead of compiling them.

The trainer itself packs the run's worlds once the last one is compiled, on
one core, with the layout decoder's kernels (``navi_nb/world/layout.py``):
when those are cold, a thread of the trainer compiles them on the stand-in
while the worlds compile (:func:`compile_layout_decoder`), so that the
packing, at the end of the wait for the first tick, loads them instead.

``start(cfg)`` starts the children of the cold groups (nothing when the
cache is warm: a warm start costs a few file checks), and
``Warmup.wait(group)`` waits for one. A child that fails only costs time:
the trainer compiles what is missing itself, as it would without a warm-up.
``NAVI_NB_WARMUP=0`` turns the warm-up off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

PACKAGE_DIR = Path(__file__).resolve().parent.parent
ENV_VAR = "NAVI_NB_WARMUP"

STAND_IN = PACKAGE_DIR / "data" / "warmup" / "box-r32.gmdag"
"""The world the ``env`` and ``tracer`` children compile on (``world_cache.compile_one("box", 0, 32, path)``);
with its sidecar (spawn points, classes)."""
STAND_IN_LAYOUTS = PACKAGE_DIR / "data" / "warmup" / "layouts"
"""The stand-in's layout file (``world_set.map_packed``), shipped so that the children neither validate nor
decode it: the world-loading kernels then compile once, in the processes that load the run's worlds, not in
both children as well."""

GROUPS = {
    "env": (
        "navi_nb.env.motion",
        "navi_nb.env.spawn",
        "navi_nb.env.tasks",
        "navi_nb.env.observation",
        "navi_nb.env.geodesic",
    ),
    "tracer": ("navi_nb.sense.tracer",),
    "learn": (
        "navi_nb.learn.acting",
        "navi_nb.learn.fused",
        "navi_nb.learn.minibatch",
        "navi_nb.learn.adam",
        "navi_nb.learn.gae",
        "navi_nb.learn.blocks",
    ),
}
"""Group name -> the modules that define its kernels; a group is cold when Numba's cache holds no kernel of
one of them (``navi_nb.jit_cache.cold_sources``)."""
MEMORY_MODULES = ("navi_nb.learn.gru", "navi_nb.learn.memory_pass")
"""The learn group's further modules for a policy with memory (a run without one never compiles them)."""
MAP_MODULES = ("navi_nb.env.episodic_map",)
"""The env group's further module for a run with the episodic map (``map_cell`` > 0 in its ``env``; a run without
it never compiles them): the ``env`` child compiles its kernels (``NavEnv.compile_kernels``)."""

LAYOUT_MODULES = ("navi_nb.world.layout",)
"""The layout decoder, compiled in a thread of the trainer itself (:func:`compile_layout_decoder`)."""

GROUP_NAMES = {"env": "environment", "tracer": "tracer", "learn": "learning"}  # as the console names them

_CHILD = "from navi_nb.train.warmup import child_main\nchild_main()\n"
PARENT_VAR = "NAVI_NB_WARMUP_PARENT"
"""The pid of the process that started a warm-up child, in the child's environment: the child ends at once
if its parent is already gone when it asks to end with it."""


def run_modules(cfg=None) -> dict:
    """Group name -> the modules whose kernels the run ``cfg`` calls: ``GROUPS``, with ``MEMORY_MODULES`` in the
    learn group for a policy with memory and ``MAP_MODULES`` in the env group with the episodic map on (neither
    without ``cfg``)."""
    from navi_nb.env.episodic_map import map_columns

    env = cfg.env if cfg is not None and isinstance(cfg.env, dict) else {}
    extra = {
        "learn": MEMORY_MODULES if cfg is not None and cfg.memory_size else (),
        "env": MAP_MODULES if map_columns(env) else (),
    }
    return {name: modules + extra.get(name, ()) for name, modules in GROUPS.items()}


def cold_groups(cfg=None) -> list[str]:
    """The cold groups (for the run ``cfg``: the tracer group only with the CPU backend, whose kernel it
    compiles; the GRU's and the map's modules with the groups of ``run_modules``)."""
    from navi_nb.jit_cache import cold_sources

    if os.environ.get("NUMBA_DISABLE_CACHE", "0") not in ("", "0"):
        return []  # nothing a child compiles would reach this process
    skip = {"tracer"} if cfg is not None and cfg.backend != "cpu" else set()
    return [name for name, modules in run_modules(cfg).items() if name not in skip and cold_sources(modules)]


def enabled() -> bool:
    return os.environ.get(ENV_VAR, "1").strip() not in ("0", "no", "off", "false")


class Warmup:
    """The running warm-up children; ``wait()`` joins them (at most once)."""

    def __init__(self, children=(), console=None):
        self.children = list(children)  # (group, Popen, stderr file)
        self.decoder = None  # the thread compiling the layout decoder (compile_layout_decoder), if any
        self.console = console
        self.started = time.perf_counter()
        self.report = {}

    @property
    def groups(self):
        return [g for g, _, _ in self.children]

    def running(self, group) -> bool:
        """Whether the child of ``group`` is still compiling."""
        return any(g == group and proc.poll() is None for g, proc, _ in self.children)

    def wait(self, group=None) -> dict:
        """Wait for the child of ``group`` (default: every child); returns {group: (exit status, seconds
        since start)} of the children joined so far."""
        joined = [c for c in self.children if group is None or c[0] == group]
        for group, proc, err in joined:
            rc = proc.wait()
            self.report[group] = (rc, time.perf_counter() - self.started)
            if rc != 0 and self.console is not None:
                err.seek(0)
                lines = [ln for ln in err.read().decode(errors="replace").splitlines() if ln.strip()]
                self.console.print(
                    f"[yellow]kernel warm-up '{group}' failed ({lines[-1] if lines else rc}); "
                    "compiling those kernels here instead[/]"
                )
            err.close()
        self.children = [c for c in self.children if c not in joined]
        if group is None:
            self._join_decoder()
        return self.report

    def _join_decoder(self):
        if self.decoder is not None:
            self.decoder.join()  # long done by the time anything waits: it ends before the worlds are packed
            self.decoder = None

    def cancel(self) -> None:
        """End the children now (the run failed to start)."""
        for _, proc, err in self.children:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            err.close()
        self.children = []
        self._join_decoder()  # a compile in a thread cannot be stopped; it takes a second or two


def _spawn(group, cfg):
    """A child compiling ``group`` for the run ``cfg``: (group, Popen, stderr file), or None."""
    env = dict(os.environ)
    env[PARENT_VAR] = str(os.getpid())
    env["PYTHONPATH"] = os.pathsep.join(
        [str(PACKAGE_DIR.parent)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    err = tempfile.TemporaryFile()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, group, json.dumps(cfg.to_dict())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
        )
    except OSError:
        err.close()
        return None  # no child: this process compiles the group itself
    return group, proc, err


def compile_layout_decoder() -> bool:
    """Compile the layout decoder's kernels by decoding the stand-in, loaded as the run's worlds are (mapped
    read-only: the same argument types, so the same signatures); returns whether it did. Run in a thread of the
    trainer while the worlds compile: the compile holds Numba's lock, and a packing that starts meanwhile
    waits for it and loads what it compiled. Never raises: on any failure the packing compiles them."""
    try:
        from navi_nb.world import gmdag
        from navi_nb.world.layout import decode_layout

        world = gmdag.load_world(STAND_IN, mmap=True, validate=False)
        decode_layout(world, 1.0 / float(np.float32(world.voxel_size)))
        return True
    except Exception:
        return False


def start(cfg, console=None) -> Warmup:
    """The warm-up of the run ``cfg`` (a TrainConfig): a child for each cold group starts now, and a thread
    for the layout decoder when it is cold; which groups are cold is decided here, before this process
    compiles anything."""
    from navi_nb.jit_cache import cold_sources

    cold = cold_groups(cfg) if enabled() else []
    warm = Warmup([], console)
    if enabled() and os.environ.get("NUMBA_DISABLE_CACHE", "0") in ("", "0") and cold_sources(LAYOUT_MODULES):
        warm.decoder = threading.Thread(target=compile_layout_decoder, name="navi-nb-layout-warmup")
        warm.decoder.start()
    for group in cold:
        child = _spawn(group, cfg)
        if child is not None:
            warm.children.append(child)
    if cold and console is not None:
        names = [GROUP_NAMES[g] for g in cold]
        listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        console.print(f"[dim]compiling the {listed} kernels in background processes (first run only)[/]")
    return warm


def _learn_setup(cfg):
    """The run ``cfg``'s network, learner and rollout slab on the point-goal task of ``navi_nb.env.toy`` padded
    to the run's observation length: ``(env, ppo, slab, first observation)``."""
    from navi_nb.env.toy import PointGoalToy
    from navi_nb.learn.ppo import PPO, PPOConfig
    from navi_nb.learn.rollout import RolloutSlab
    from navi_nb.train.runs import make_policy

    obs_dim = cfg.obs_dim()  # the map's crop included: a policy whose trunks skip it needs its columns
    env = PointGoalToy(cfg.actors, seed=cfg.seed, obs_pad=max(0, obs_dim - 5), max_steps=2)
    policy = make_policy(cfg, env.obs_dim, env.action_dim)
    ppo = PPO(policy, PPOConfig.of(cfg), seed=cfg.seed)
    slab = RolloutSlab(cfg.rollout_steps, cfg.actors, env.obs_dim, env.action_dim, memory_size=cfg.memory_size)
    obs, _ = env.reset(seed=cfg.seed)
    return env, ppo, slab, obs


def warm_learn(cfg) -> None:
    """Compile the learning kernels the run ``cfg`` calls: one real update on the padded point-goal task.

    The update's two parallel passes are the biggest part of it and share nothing: a helper process
    (``learn-finish``) compiles the second from the start, this one compiles the first after the rollout
    (whose policy kernel the trainer needs first), waits for the helper, and then compiles the rest of the
    update, loading both."""
    from navi_nb.learn.collect import action_generator, one_update

    helper = _spawn("learn-finish", cfg)  # (group, process, stderr file), or None: compile it here
    try:
        env, ppo, slab, obs = _learn_setup(cfg)
        memory = ppo.policy.new_memory(cfg.actors)  # a policy with memory: its GRU kernels too
        # the first rollout's kernel, at normal priority: the run's first tick needs it (compiled at the
        # lowest, it was sometimes not ready then, and the trainer compiled it a second time itself)
        ppo.policy.forward(obs, memory, advance=False)
        _lower_priority()

        def before_learn():
            ppo.compile_passes(slab, ("chunk",))
            if helper is not None:
                helper[1].wait()

        one_update(
            env,
            ppo,
            slab,
            obs,
            action_generator(cfg.seed),
            num_updates=cfg.num_updates,
            before_learn=before_learn,
            memory=memory,
        )
    finally:
        if helper is not None:
            _, proc, err = helper
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            err.close()
    if not np.all(np.isfinite(ppo.policy.params)):
        raise RuntimeError("the warm-up update produced non-finite parameters")


def warm_learn_finish(cfg) -> None:
    """The ``learn`` child's helper: compile the update's second parallel pass (``minibatch._finish_pass``) for the
    run ``cfg``'s types, at the lowest priority from the start."""
    _lower_priority()
    _env, ppo, slab, _obs = _learn_setup(cfg)
    ppo.compile_passes(slab, ("finish",))


def stand_in_set(folder):
    """``STAND_IN`` as a one-world WorldSet, its layout mapped read-only as the run maps its own
    (``runs.load_scene_set``): the kernels compile for read-only arrays too. The layout comes from
    ``STAND_IN_LAYOUTS``; without a file there for this code's layout (an edit to the layout's format),
    it is decoded into ``folder``. The stand-in is the package's own file, which the tests check against
    the compiler's output, so it is not validated again."""
    from navi_nb.world.gmdag import load_world
    from navi_nb.world.world_set import WorldSet, layout_file

    world = load_world(STAND_IN, mmap=True, validate=False)
    world.deep_checked = True
    world_set = WorldSet([world])
    shipped = layout_file(world_set.worlds, STAND_IN_LAYOUTS)[0].exists()
    world_set.map_layouts(STAND_IN_LAYOUTS if shipped else Path(folder) / "layouts")
    return world_set


def warm_env(cfg) -> None:
    """Compile the environment kernels the run ``cfg`` calls: its environment built on the stand-in world
    (spawning, reachable cells), then the kernels of its reset and step (``NavEnv.compile_kernels``). They run
    on the host whatever the tracer's backend, so this environment's tracer is a CPU one in every case."""
    from dataclasses import replace

    from navi_nb.train.runs import make_env

    with tempfile.TemporaryDirectory(prefix="navi_nb_warmup_") as folder:
        env = make_env(stand_in_set(folder), replace(cfg, backend="cpu"))
        env.compile_kernels()


def warm_tracer(cfg) -> None:
    """Compile the tracer kernel the run ``cfg`` calls: the stand-in world, the run's sensor, range and
    actor count, one call with float32 poses as the environment makes them."""
    from navi_nb.env.config import EnvConfig
    from navi_nb.sense.sensor import Sensor
    from navi_nb.sense.tracer import Tracer

    env_cfg = EnvConfig.from_kwargs(**cfg.env)
    with tempfile.TemporaryDirectory(prefix="navi_nb_warmup_") as folder:
        world_set = stand_in_set(folder)
        world = world_set.worlds[0]
        tracer = Tracer(
            world_set,
            Sensor(az=cfg.sensor_az, el=cfg.sensor_el),
            env_cfg.max_distance,
            backend=cfg.backend,
            max_actors=cfg.actors,
        )
        centre = 0.5 * (np.asarray(world.bmin, np.float64) + np.asarray(world.bmax, np.float64))
        origins = np.repeat(centre.astype(np.float32)[None, :], cfg.actors, axis=0)
        yaws = np.linspace(-np.pi, np.pi, cfg.actors, endpoint=False, dtype=np.float32)
        depth, _, _ = tracer.trace(origins, yaws, to_host=True)
    if not np.all(np.isfinite(depth)):
        raise RuntimeError("the warm-up trace returned non-finite depths")


WARMERS = {"env": warm_env, "tracer": warm_tracer, "learn": warm_learn, "learn-finish": warm_learn_finish}
LOW_PRIORITY = 19
"""The niceness of the learning kernels' compile: they are needed last (at the first update, after the first
rollout: ``Trainer.train`` waits for their child there), the worlds, the environment's and the tracer's before
the first tick, so on a machine with fewer cores than processes the learning child takes only what they
leave. Each warmer takes it itself: the ``learn-finish`` helper from its start, the ``learn`` child once it
has compiled the policy's forward pass (which the first tick needs)."""


def _lower_priority() -> None:
    try:
        os.nice(LOW_PRIORITY)
    except OSError:
        pass


def _end_with_parent() -> None:
    """On Linux, have the kernel kill this process when the process that started it ends (``prctl``'s
    ``PR_SET_PDEATHSIG``): a trainer killed outright, or a ``learn`` child ended by ``Warmup.cancel``, leaves
    no compile running behind it. Elsewhere, or if the call fails, a child ends when its compile does."""
    if not sys.platform.startswith("linux"):
        return
    import signal

    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    # the signal only covers a parent that ends after the call: one killed while this child was still starting
    # (a loaded machine can take seconds) has left it to init already, so end as the signal would have
    if os.environ.get(PARENT_VAR, str(os.getppid())) != str(os.getppid()):
        os.kill(os.getpid(), signal.SIGKILL)


def child_main() -> None:
    """A warm-up child: ``argv`` = [group, the run's config as JSON]."""
    from navi_nb.train.config import from_dict

    _end_with_parent()
    group, cfg = sys.argv[1], from_dict(json.loads(sys.argv[2]))
    WARMERS[group](cfg)
