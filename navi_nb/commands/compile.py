"""`navi-nb compile`: a mesh file or a built-in scene into a `.gmdag` world.

    navi-nb compile MESH -o OUT.gmdag --resolution 256
    navi-nb compile --scene house -o house.gmdag [--resolution 128] [--seed 0]

Writes OUT.gmdag and its sidecar OUT.gmdag.json, then prints a summary:
triangles, resolution, nodes, bytes, ratio to a dense float32 grid, time.
The file is corner-sampled (``--sample corner``, the default: voxel ``i``'s
distance belongs to ``bmin + i * voxel``, where other `.gmdag` readers look
for it) or centre-sampled (``--sample centre``: ``bmin`` is the cube asked
for); the node words are the same, ``bmin`` differs by half a voxel.
"""

from __future__ import annotations

import time
from pathlib import Path


def add_arguments(parser) -> None:
    parser.add_argument(
        "mesh", nargs="?", metavar="MESH", help="triangle mesh file (.obj, .stl, .ply; others through trimesh)"
    )
    parser.add_argument("--scene", metavar="NAME", help="compile a built-in scene instead (see `navi-nb scenes`)")
    parser.add_argument("-o", "--output", metavar="OUT.gmdag", required=True, help="file to write")
    parser.add_argument(
        "--resolution",
        type=int,
        default=None,
        help="voxels along each axis, a power of two (default: 256 for meshes, 128 for scenes)",
    )
    parser.add_argument(
        "--margin",
        type=float,
        default=None,
        help="metres of space around the geometry (default: 4 voxels; scenes: their own cube)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="scene seed (the seeded families: house, maze, bigmaze, rooms, clutter, pillars; default 0)",
    )
    parser.add_argument(
        "--sample",
        choices=("corner", "centre"),
        default="corner",
        help="where the file says each voxel's distance lies: its minimum corner (default, as other "
        "readers assume; bmin moves up half a voxel) or its centre (bmin is the cube's corner)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress display")


def _validate(args):
    from navi_nb.errors import CliError

    if (args.mesh is None) == (args.scene is None):
        raise CliError("give either a MESH file or --scene NAME (not both)")
    if args.resolution is not None:
        r = args.resolution
        if r < 16 or r > 8192 or r & (r - 1):
            raise CliError(f"--resolution must be a power of two in 16..8192, got {r}")
    if args.margin is not None and not (args.margin >= 0 and args.margin < 1e6):
        raise CliError(f"--margin must be a number >= 0, got {args.margin}")
    out = Path(args.output)
    if out.suffix != ".gmdag":
        raise CliError(f"output {out} should end in .gmdag")
    if not out.parent.exists():
        raise CliError(f"output folder {out.parent} does not exist")
    if args.mesh is not None and not Path(args.mesh).is_file():
        raise CliError(f"mesh file {args.mesh} does not exist")
    return out


def run(args) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from navi_nb.errors import CliError
    from navi_nb.world.compiler import compile_mesh, compile_scene
    from navi_nb.world.gmdag import save_world, with_sample_convention

    out = _validate(args)
    console = Console()
    res = args.resolution or (128 if args.scene else 256)
    progress = Progress(
        TextColumn("[bold]compiling[/] {task.description}"),
        BarColumn(),
        TextColumn("depth {task.completed:.0f}/{task.total:.0f}"),
        TimeElapsedColumn(),
        console=console,
        disable=args.no_progress,
        transient=True,
    )
    with progress:
        task = progress.add_task(escape(args.scene or Path(args.mesh).name), total=res.bit_length() - 1)

        def tick(depth, depths, cells):
            progress.update(
                task,
                completed=depth + 1,
                total=depths + 1,
                description=escape(f"{args.scene or Path(args.mesh).name}: {cells:,} cells"),
            )

        t0 = time.perf_counter()
        try:
            if args.scene:
                world = compile_scene(args.scene, res, args.seed, margin=args.margin, progress=tick)
                triangles = "-"
            else:
                world = compile_mesh(args.mesh, res, args.margin, progress=tick)
                triangles = f"{world.sidecar.get('triangles', 0):,}"
        except MemoryError:  # the size checks before the compile are lower bounds
            source = f"scene {args.scene} (seed {args.seed})" if args.scene else f"mesh {args.mesh}"
            raise CliError(
                f"compiling {source} at --resolution {res} ran out of RAM (the size checks are lower bounds): "
                "a lower --resolution needs less"
            ) from None
        seconds = time.perf_counter() - t0
    world = with_sample_convention(world, args.sample)
    save_world(world, out)
    dense = 4 * res**3
    table = Table(title=escape(f"compiled {out}"))
    table.add_column("quantity")
    table.add_column("value", justify="right")
    for k, v in (
        ("source", args.scene and f"scene {args.scene} (seed {args.seed})" or str(args.mesh)),
        ("triangles", triangles),
        ("resolution", str(res)),
        ("voxel size (m)", f"{world.voxel_size:.4g}"),
        ("cube min (m)", ", ".join(f"{x:.4f}" for x in world.bmin)),
        ("samples at", "voxel corners" if args.sample == "corner" else "voxel centres"),
        ("nodes (64-bit words)", f"{world.node_count:,}"),
        ("bytes", f"{world.nbytes:,}"),
        ("dense float32 grid bytes", f"{dense:,}"),
        ("ratio to dense", f"{dense / world.nbytes:,.1f}x"),
        ("time (s)", f"{seconds:.2f}"),
    ):
        table.add_row(k, escape(v))
    console.print(table)
    return 0
