"""`navi-nb render`: draw what an actor sees (or a trained run's episode) as a PNG.

SOURCE is a built-in scene name, a `.gmdag` file, a mesh file (compiled at
``--resolution`` through the world cache, as a scene spec's mesh is), or a run
directory (then ``--episode K`` draws that evaluation episode). Examples::

    navi-nb render --scene house --pose 0,1,0,0 -o view.png
    navi-nb render house.gmdag --pose 1.5,1.2,-2,1.57 -o view.png
    navi-nb render runs/mine --episode 0 -o episode.png
    navi-nb render runs/mine --episode 0 -o episode.gif    (an animation of the episode)
"""

from __future__ import annotations

import math
from pathlib import Path


def add_arguments(parser):
    from navi_nb.commands.flags import add_sensor

    parser.add_argument(
        "source",
        nargs="?",
        default=None,
        metavar="SOURCE",
        help="a built-in scene name, a .gmdag file, a mesh file, or a run directory (default: house)",
    )
    parser.add_argument("--scene", default=None, help="a built-in scene (same as giving its name as SOURCE)")
    parser.add_argument(
        "--pose",
        default=None,
        metavar="X,Y,Z,YAW",
        help="actor position (metres) and yaw (radians, growing to the right); "
        "default: the scene's first spawn point, yaw 0",
    )
    parser.add_argument(
        "-o",
        "--output",
        default="view.png",
        help="PNG to write (default view.png); with --episode, NAME.gif writes an animation",
    )
    parser.add_argument(
        "--resolution", type=int, default=128, help="compile resolution for scenes and meshes (default 128)"
    )
    parser.add_argument("--seed", type=int, default=0, help="scene seed (default 0)")
    add_sensor(parser, 256, 48)
    parser.add_argument("--max-distance", type=float, default=20.0, help="metres (default 20)")
    parser.add_argument("--backend", default="cpu", choices=("cpu", "cuda", "auto"))
    parser.add_argument("--size", type=int, default=520, help="width of the slice in pixels (default 520)")
    parser.add_argument(
        "--episode", type=int, default=None, help="with a run directory as SOURCE: the evaluation episode to draw"
    )
    parser.add_argument(
        "--gif", action="store_true", help="with --episode: write an animated GIF of the episode (as does -o NAME.gif)"
    )


def _world(args):
    from navi_nb.errors import CliError

    source = args.scene or args.source or "house"
    if args.scene and args.source:
        raise CliError("give either SOURCE or --scene, not both")
    path = Path(source)
    from navi_nb.world.scene_spec import is_mesh_path

    if is_mesh_path(path) and path.is_file():  # compiled once into the world cache, as in a scene spec
        import os

        from navi_nb.world.scene_spec import WorldItem
        from navi_nb.world.world_cache import load_worlds

        item = WorldItem(path=Path(os.path.realpath(path)), origin=source, suffix=path.suffix)
        world = load_worlds([item], args.resolution, progress=True, actor_radius=0.0)[0]
        return world, f"{path.name} @ {args.resolution}"
    if path.suffix == ".gmdag" or (path.exists() and path.is_file()):
        from navi_nb.world.gmdag import load_world

        return load_world(path), path.name
    from navi_nb.world.scenes import SCENES

    if source not in SCENES:
        raise CliError(f"{source!r} is neither a .gmdag file nor a built-in scene ({', '.join(SCENES)})")
    from navi_nb.world.compiler import compile_scene

    if args.resolution < 8 or args.resolution & (args.resolution - 1):
        raise CliError(f"--resolution must be a power of two >= 8, got {args.resolution}")
    return compile_scene(source, args.resolution, seed=args.seed), f"scene {source} @ {args.resolution}"


def run(args) -> int:
    from rich.console import Console
    from rich.markup import escape

    from navi_nb.errors import CliError
    from navi_nb.sense.render import parse_pose, pillow, render_view
    from navi_nb.sense.sensor import Sensor, check_sensor_ram

    console = Console()
    pillow()  # say which extra is missing before any long compile
    if args.source and Path(args.source).is_dir():
        if args.episode is None:
            raise CliError(f"{args.source} is a directory: give --episode K to draw a run's episode")
        from navi_nb.train.render_episode import render_episode

        out = Path(args.output)
        if args.gif and out.suffix.lower() != ".gif":
            out = out.with_suffix(".gif")
        result = render_episode(args.source, args.episode, out)
        console.print(f"wrote {escape(str(result))}")
        return 0
    if args.episode is not None:
        raise CliError("--episode needs a run directory as SOURCE")
    if not math.isfinite(args.max_distance) or args.max_distance <= 0:
        raise CliError(f"--max-distance must be finite and > 0, got {args.max_distance}")
    if args.size < 64 or args.size > 4096:
        raise CliError(f"--size must be in 64..4096, got {args.size}")
    if args.sensor_az >= 1 and args.sensor_el >= 1:  # the Sensor refuses other counts itself, by name
        what = f"--sensor-az {args.sensor_az} --sensor-el {args.sensor_el} ({args.sensor_az * args.sensor_el:,} rays)"
        check_sensor_ram(args.sensor_az, args.sensor_el, what, actors=1)
    sensor = Sensor(args.sensor_az, args.sensor_el)
    pose = parse_pose(args.pose) if args.pose is not None else None
    world, label = _world(args)
    if pose is None:
        spawns = world.spawn_points
        if len(spawns) == 0:
            raise CliError("this world has no spawn points: give --pose X,Y,Z,YAW")
        pose = [float(spawns[0][0]), float(spawns[0][1]), float(spawns[0][2]), 0.0]
    title = (
        f"{label}: depth seen from ({pose[0]:.2f}, {pose[1]:.2f}, {pose[2]:.2f}), yaw {math.degrees(pose[3]):.0f} deg"
    )
    stats = render_view(
        world,
        pose,
        args.output,
        sensor=sensor,
        max_distance=args.max_distance,
        title=title,
        slice_size=args.size,
        backend=args.backend,
    )
    console.print(
        f"wrote {escape(str(stats['path']))} ({stats['width']}x{stats['height']}): "
        f"{100 * stats['hit_fraction']:.1f}% of {stats['rays']} rays hit, depth "
        f"{stats['depth_min']:.2f} .. {stats['depth_max']:.2f} m (median {stats['depth_median']:.2f})"
    )
    return 0
