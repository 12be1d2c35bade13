"""`navi-nb train`: train a navigation policy with PPO over many actors.

``--scenes SPEC`` names the worlds (a scene spec, docs/WORLDS.md: ``house``,
``house:0-199``, ``maze:0-99,clutter:0-99``, files); each actor moves to a
world drawn from a seeded schedule at every reset. The set is checked before
anything is written (a bad item is one line naming it, exit 2); held-out
seeds (>= 1,000,000) are refused unless ``--allow-heldout``. The run records
its set in ``worlds.json`` so resume and eval load the same worlds.

Settings come from the defaults (``navi_nb.train.config.TrainConfig``), then
``--config FILE`` (TOML or JSON), then the flags given, each overriding the
one before. ``--resume runs/NAME`` continues a run from its newest checkpoint
with the run's own saved config; only bookkeeping flags (``--shards``,
``--checkpoint-every``, ``--keep-checkpoints``, ``--eval-episodes``) may change
on resume; any other flag that changes a setting is refused, ``--name`` and
``--run-dir`` included (the run's folder is the one given to ``--resume``).
``--print-config`` with ``--resume`` prints the run's config and exits.

One process writes a run folder at a time: a new run and a resume take the folder's lock
(``navi_nb.train.run_lock``) before writing or compiling anything, hold it until they end, and refuse a
folder another process holds with one line naming it.

The setting flags are generated from ``TrainConfig``'s fields
(``navi_nb.train.config.add_config_arguments``): one flag per field, named as
the field, with its docstring's first sentence as help.
"""

from __future__ import annotations

import argparse
import os

from rich.markup import escape

from navi_nb.train.warmup import MAP_MODULES, MEMORY_MODULES

COLD_COMPILE_CPU_S = {
    "navi_nb.learn.fused": 28.2,
    "navi_nb.env.motion": 11.3,  # with the field's point query (navi_nb.world.field), compiled inside it
    "navi_nb.sense.tracer": 8.2,  # with its refinement, compiled from sense/trace_math.py
    "navi_nb.env.spawn": 4.4,
    "navi_nb.env.geodesic": 3.9,  # the goals' shortest-path fields (geodesic progress, the default)
    "navi_nb.learn.acting": 3.7,  # the layer-by-layer kernels it replaced; it compiles in about 0.8x their time
    "navi_nb.env.tasks": 1.5,
    "navi_nb.world.layout": 1.5,
    "navi_nb.learn.gae": 1.3,
    "navi_nb.env.observation": 1.2,
    "navi_nb.world.gmdag": 1.2,
    "navi_nb.learn.adam": 0.1,
    "navi_nb.learn.blocks": 0.1,
    "navi_nb.learn.loss_reference": 0.1,
    "navi_nb.world.field": 0.0,  # compiled inside the collision's and the tracer's kernels, counted there
    # a run's further modules (navi_nb.train.warmup.MEMORY_MODULES and MAP_MODULES), only when it asks for them
    "navi_nb.learn.gru": 24.9,  # a policy with memory: the GRU's kernels and the memory signatures of the
    # minibatch passes and of acting's kernels, over what a run without memory compiles (both all cold)
    "navi_nb.learn.memory_pass": 0.0,  # compiled inside the minibatch passes with the GRU's, counted there
    "navi_nb.env.episodic_map": 3.8,  # the episodic map's update and crop (env setting map_cell > 0)
}
"""The modules whose compiled kernels a training run uses (each leaves an index in Numba's cache), with the
CPU-seconds of each one's cold compile in one process: Numba's compile events, each counted under the
module of the kernel whose first call compiled it, in a defaults run without the warm-up
(``NAVI_NB_WARMUP=0``) on a 2-core AMD EPYC (Zen 3) of docs/PERFORMANCE.md, the mean of two runs
(about 63 in all); the geodesic fields' the same way in one tiny run, beside another job. The GRU's and the
map's: user + sys CPU-seconds of a tiny run with a fresh Numba cache less those of the same run without them
(the GRU: a cold run with memory against a cold one without; the map: a run with it, the rest cached, against
its warm rerun), the mean of two, on a 2-core AMD EPYC (Zen 3) beside another job (which made the rest of this
table about 6 % slower there)."""
TRAIN_KERNELS = tuple(k for k in COLD_COMPILE_CPU_S if k not in MEMORY_MODULES + MAP_MODULES)
"""The modules every training run compiles; ``train_kernels`` adds those of a GRU and of the map."""
MEMORY_ALONE_CPU_S = 39.9
"""A first run with memory where runs without it have cached their kernels: the GRU's and the minibatch passes'
memory signatures, none of which those runs compiled (measured as the GRU's figure above, the rest cached)."""
COLD_START_FIXED_S = 4.0
"""What a cold first tick adds to the compiling: imports, packing the worlds, building the environment."""


def train_kernels(cfg=None) -> tuple:
    """The modules whose kernels the run ``cfg`` (a TrainConfig; None: any run) compiles: ``TRAIN_KERNELS``, and
    the GRU's with memory and the map's with ``map_cell`` > 0 (``navi_nb.train.warmup.run_modules``)."""
    from navi_nb.train.warmup import run_modules

    extra = [m for modules in run_modules(cfg).values() for m in modules if m in MEMORY_MODULES + MAP_MODULES]
    return TRAIN_KERNELS + tuple(extra)


def cold_compile_estimate(cold, cores: int) -> float:
    """Wall seconds to compile the ``cold`` modules on an idle machine with ``cores`` cores: the warm-up
    compiles in up to three processes side by side (``navi_nb.train.warmup``), and Numba compiles each
    module on one thread, so the largest module bounds it from below. The GRU's modules cold where the
    minibatch passes' are cached count ``MEMORY_ALONE_CPU_S``."""
    alone = "navi_nb.learn.gru" in cold and "navi_nb.learn.fused" not in cold
    work = [MEMORY_ALONE_CPU_S if alone and name == "navi_nb.learn.gru" else COLD_COMPILE_CPU_S[name] for name in cold]
    if not work:
        return 0.0
    return max(max(work), sum(work) / max(1, min(cores, 3))) + COLD_START_FIXED_S


def add_arguments(p: argparse.ArgumentParser) -> None:
    from navi_nb.train.config import add_config_arguments

    g = p.add_argument_group("run")
    g.add_argument("--config", metavar="FILE", help="TOML or JSON file of settings (flags override it)")
    g.add_argument("--resume", metavar="RUN", help="continue the run in folder RUN from its newest checkpoint")
    g.add_argument("--no-progress", action="store_true", help="plain log lines, no live display or world-compile bar")
    g.add_argument(
        "--print-config",
        action="store_true",
        help="print every setting with its meaning and exit (a run prints only the changed ones)",
    )
    add_config_arguments(p)


def resolve_config(args):
    """Defaults <- --config file <- flags, validated (raises ConfigError)."""
    from navi_nb.train.config import from_dict, overrides_from_args, read_config_file

    data = {}
    if args.config:
        data.update(read_config_file(args.config))
    flags = overrides_from_args(args)
    env = dict(data.get("env") or {}) if isinstance(data.get("env", {}), dict) else data.get("env")
    data.update(flags)
    if "env" in flags and isinstance(env, dict):
        env.update(flags["env"])
        data["env"] = env
    return from_dict(data, source=f"config file {args.config}" if args.config else "settings")


def announce_cold_kernels(console, cfg=None) -> bool:
    """Say once, before the first compile, that kernels are compiling and about how long it takes (for the run
    ``cfg``: with its GRU's and map's kernels)."""
    from navi_nb.cores import allowed_cores
    from navi_nb.jit_cache import cold_sources

    cold = cold_sources(train_kernels(cfg))
    if cold:
        seconds = cold_compile_estimate(cold, allowed_cores().allowed)
        busy = os.getloadavg()[0] / (os.cpu_count() or 1) if hasattr(os, "getloadavg") else 0.0
        seconds *= max(1.0, busy)  # a busy machine shares its cores with the compile
        console.print(
            f"compiling kernels, first run only: ~{max(5, round(seconds, -1)):.0f} s (an estimate; cached afterwards)"
        )
    return bool(cold)


def run(args) -> int:
    """``navi-nb train``; under ``mpiexec``/``srun`` every rank runs it (rank 0 alone writes and prints),
    and a rank that fails stops every rank with one line naming it (``ranks.abort_on_failure``)."""
    from navi_nb.parallel.ranks import abort_on_failure
    from navi_nb.train.runs import RunError, os_error

    try:
        try:
            return _run(args)
        except OSError as exc:  # a full disk, a read-only folder, a name too long: one line, not a traceback
            raise os_error(exc, "train") from None
        except MemoryError:  # the size checks are lower bounds; what they let through may still not fit
            raise RunError(
                "train: ran out of RAM past the size checks (they are lower bounds): fewer actors, rollout steps "
                "or worlds, or a lower --resolution, need less"
            ) from None
    except BaseException as exc:
        abort_on_failure(exc)
        raise


def check_sensor(cfg) -> None:
    """Refuse, by its flags, a sensor whose rays for one actor would not fit in RAM (the run's and the
    evaluation's RAM checks would otherwise name the actors or the episodes for it)."""
    from navi_nb.sense.sensor import check_sensor_ram

    az, el = cfg.sensor_az, cfg.sensor_el
    check_sensor_ram(az, el, f"--sensor-az {az} --sensor-el {el} ({az * el:,} rays)", actors=1)


def check_final_evaluation(cfg) -> None:
    """Refuse, before anything is written, an end-of-run evaluation (``eval_episodes``) that would not fit in RAM."""
    if cfg.eval_episodes:
        from navi_nb.train.evaluate import episodes_ram_estimate
        from navi_nb.train.runs import check_ram

        what = f"the end-of-run evaluation of {cfg.eval_episodes} episodes (--eval-episodes)"
        check_ram(what, episodes_ram_estimate(cfg, cfg.eval_episodes))


def start_plan(args, cfg) -> dict:
    """What this call is about to do, which every MPI rank must be given alike: the action (a new run,
    ``--resume`` or ``--print-config``) and the run folder (``cfg``: a new run's resolved config, None on
    resume)."""
    action = "--print-config" if args.print_config else ("--resume" if args.resume else "a new run")
    if args.resume:
        folder = os.path.normpath(args.resume)
    elif cfg.name:
        folder = os.path.normpath(os.path.join(cfg.run_dir, cfg.name))
    else:
        folder = f"a new folder in {os.path.normpath(cfg.run_dir)}"
    return {"action": action, "run folder": folder}


def _run_config_or_none(run_path):
    """The run's config for the compile estimate, or None where it cannot be read (the resume then says why)."""
    from navi_nb.errors import NaviError
    from navi_nb.train.runs import read_run_config

    try:
        return read_run_config(run_path)
    except (NaviError, OSError):
        return None


def _run(args) -> int:
    from rich.console import Console

    from navi_nb.parallel.ranks import check_same_start, launched_by_mpi
    from navi_nb.train.loop import Trainer
    from navi_nb.train.report import print_config, print_summary

    console = Console()
    if launched_by_mpi():  # rank 0 alone prints
        from navi_nb.parallel.ranks import world

        if world().Get_rank() != 0:
            console = Console(file=open(os.devnull, "w"))
    if args.resume and args.config:
        from navi_nb.errors import CliError

        raise CliError("--resume uses the run's own config.json; --config cannot be combined with it")
    cfg = None if args.resume else resolve_config(args)
    check_same_start(start_plan(args, cfg))  # under MPI: every rank about to do the same, before any collective
    if args.resume:
        from navi_nb.train.config import overrides_from_args

        if args.print_config:
            from navi_nb.train.runs import read_run_config

            print_config(console, read_run_config(args.resume), args.resume, full=True)
            return 0
        announce_cold_kernels(console, _run_config_or_none(args.resume))
        trainer = Trainer.resume(args.resume, overrides_from_args(args), console=console, progress=not args.no_progress)
    else:
        if args.print_config:
            print_config(console, cfg, full=True)
            return 0
        check_sensor(cfg)  # named as render names it, before the sizes it multiplies
        check_final_evaluation(cfg)  # found now, not after the whole training
        announce_cold_kernels(console, cfg)
        trainer = Trainer.create(cfg, console=console, progress=not args.no_progress)
    try:  # the run folder stays locked through the evaluation (the same process: navi_nb.train.run_lock)
        summary = trainer.train(progress=not args.no_progress)
        print_summary(console, trainer, summary)
        cfg = trainer.cfg
        if cfg.eval_episodes and trainer.update >= cfg.num_updates and (trainer.ranks is None or trainer.ranks.is_root):
            from navi_nb.train.evaluate import evaluate
            from navi_nb.train.report import print_results

            console.rule(f"evaluation: {cfg.eval_episodes} episodes, mean action, fresh seeds")
            print_results(console, evaluate(trainer.run_path, episodes=cfg.eval_episodes))
    finally:
        trainer.close()
    console.print(f"run folder: [bold]{escape(str(trainer.run_path))}[/]")
    return 0
