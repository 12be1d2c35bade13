"""`navi-nb scenes`: list the built-in scene families, resolve scene specs, fill the compile cache."""

from __future__ import annotations

SPEC_SYNTAX = """\
scene specs: comma-separated items, read left to right (a repeat keeps its first place)
  house                  seed 0 of a family
  house:7                one seed
  house:0-199            seeds 0 to 199 (inclusive)
  house:0-9,20-29        bare seeds continue the family before them
  maze:0-99,clutter:0-99 several families
  a.gmdag                a compiled world file
  room.obj               a mesh file (.obj .stl .ply .off .glb), compiled into the cache
  dir/   'dir/*.gmdag'   every .gmdag in a folder, or a glob (.gmdag and meshes)
  @set.txt   set.txt     a list of specs (# comments; paths relative to the list)
held out for evaluation: seeds >= {heldout:,} of every family (training refuses them)"""


def add_arguments(parser) -> None:
    parser.add_argument(
        "--details",
        action="store_true",
        help="also build each family's seed 0 and show its classes, spawn points and size",
    )
    parser.add_argument("--spec", metavar="SPEC", help="resolve a scene spec and summarise its worlds")
    parser.add_argument(
        "--compile",
        metavar="SPEC",
        dest="compile_spec",
        help="compile a spec's built-in worlds into the cache (skips those already there)",
    )
    parser.add_argument("--resolution", type=int, default=128, help="resolution for --compile (default 128)")
    parser.add_argument(
        "--jobs", type=int, default=0, help="processes for --compile (default: the cores this process may use)"
    )
    parser.add_argument(
        "--cache",
        metavar="DIR",
        help="cache folder (default: $NAVI_NB_CACHE/worlds, else $XDG_CACHE_HOME/navi_nb/worlds, else "
        "~/.cache/navi_nb/worlds)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args) -> int:
    from rich.console import Console

    console = Console()
    if args.spec is not None or args.compile_spec is not None:
        return _resolve(args, console)
    return _list(args, console)


def _list(args, console) -> int:
    from rich.table import Table

    from navi_nb.world.scene_spec import HELDOUT_SEED_START
    from navi_nb.world.scenes import (
        CUBE_SIDE,
        DEFAULT_SCENE,
        GENERATOR_VERSION,
        SCENES,
        SEEDED_FAMILIES,
        get_scene,
        resolution_scale,
    )

    table = Table(title="built-in scene families (navi-nb compile --scene NAME --seed N)")
    table.add_column("name")
    table.add_column("seeded")
    table.add_column("generator")
    table.add_column("description")
    if args.details:
        for col in ("interior (m)", "spawn points"):
            table.add_column(col)
    for name, desc in SCENES.items():
        label = f"{name} (default)" if name == DEFAULT_SCENE else name
        row = [label, "yes" if name in SEEDED_FAMILIES else "no", f"v{GENERATOR_VERSION[name]}", desc]
        if args.details:
            s = get_scene(name)
            size = " x ".join(f"{v:g}" for v in (s.bounds_max - s.bounds_min))
            row += [size, str(len(s.spawn_points))]
        table.add_row(*row)
    console.print(table)
    large = [name for name in SCENES if resolution_scale(name) != 1]
    for scale in sorted({resolution_scale(name) for name in large}):
        names = " and ".join(name for name in large if resolution_scale(name) == scale)
        console.print(
            f"{names} compile in a {CUBE_SIDE * scale:g} m cube at {scale}x the resolution (the same voxel size)",
            markup=False,
            highlight=False,
        )
    if args.details:
        console.print("classes (semantic ids from 1): " + ", ".join(get_scene("box").class_names[1:]))
    console.print(SPEC_SYNTAX.format(heldout=HELDOUT_SEED_START), markup=False, highlight=False, soft_wrap=True)
    return 0


def _resolve(args, console) -> int:
    import time

    from navi_nb.errors import CliError
    from navi_nb.world.scene_spec import check_ram, is_heldout, parse_spec
    from navi_nb.world.world_cache import compile_worlds, default_cache_dir

    if args.spec is not None and args.compile_spec is not None:
        raise CliError("give --spec or --compile, not both")
    spec = args.spec if args.spec is not None else args.compile_spec
    items = parse_spec(spec)
    estimate = check_ram(items, args.resolution)
    families = {}
    for it in items:
        key = it.family if it.builtin else ("meshes" if it.mesh else ".gmdag files")
        families[key] = families.get(key, 0) + 1
    heldout = sum(is_heldout(it) for it in items)
    console.print(
        f"{len(items)} world{'s' * (len(items) != 1)}: "
        + ", ".join(f"{k} {v}" for k, v in families.items())
        + f"; held-out {heldout}; about {estimate / 2**20:.1f} MiB at resolution {args.resolution}",
        markup=False,
        highlight=False,
    )
    if args.compile_spec is None:
        return 0
    jobs = args.jobs
    if jobs < 0:
        raise CliError(f"--jobs must be >= 0, got {jobs}")
    if jobs == 0:
        from navi_nb.cores import allowed_cores

        jobs = allowed_cores().allowed
    cache = args.cache or default_cache_dir()
    t0 = time.perf_counter()
    compile_worlds(items, args.resolution, cache, jobs, progress=not args.no_progress)
    console.print(
        f"cache {cache}: ready in {time.perf_counter() - t0:.1f} s (up to {jobs} process{'es' * (jobs != 1)})",
        markup=False,
        highlight=False,
    )
    return 0
