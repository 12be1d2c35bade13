"""`navi-nb inspect FILE`: header, node counts by kind and depth, size, deep validation."""

from __future__ import annotations

_SAMPLES = {
    "corner": "voxel corners (bmin + i * voxel)",
    "centre": "voxel centres (bmin + (i + 1/2) * voxel)",
}


def add_arguments(parser) -> None:
    parser.add_argument("file", metavar="FILE", help="a .gmdag file")
    parser.add_argument("--mmap", action="store_true", help="memory-map the file instead of reading it")


def run(args) -> int:
    from pathlib import Path

    import numpy as np
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from navi_nb.errors import CliError
    from navi_nb.world.gmdag import GmdagError, decode_leaf, is_leaf, load_world, node_census, validate_world
    from navi_nb.world.scene_spec import is_mesh_path

    if not Path(args.file).is_file():
        raise CliError(f"{args.file}: no such file")
    if is_mesh_path(args.file):
        raise CliError(f"{args.file}: a mesh, not a .gmdag world: compile it first (navi-nb compile {args.file})")
    console = Console()
    world = load_world(args.file, mmap=args.mmap, validate=False)  # header checks always run
    try:
        validate_world(world)
        verdict, ok = "[green]valid[/] (deep walk: indices, masks, slot runs, reserved bits, cycles)", True
    except GmdagError as exc:
        verdict, ok = f"[red]INVALID[/]: {escape(exc.rule)}", False

    head = Table(title=escape(str(args.file)))
    head.add_column("field")
    head.add_column("value", justify="right")
    res = world.resolution
    rows = [
        ("magic / version", f"GDAG / {world.version}"),
        ("resolution", str(res)),
        ("bmin (m)", ", ".join(f"{x:.4f}" for x in world.bmin)),
        ("bmax (m)", ", ".join(f"{x:.4f}" for x in world.bmax)),
        ("voxel size (m)", f"{world.voxel_size:.6g}"),
        ("samples at", _SAMPLES.get(world.sidecar.get("sample"), "voxel centres")),
        ("node_count (words)", f"{world.node_count:,}"),
        ("file bytes", f"{world.nbytes:,}"),
        ("ratio to dense float32", f"{4 * res**3 / world.nbytes:,.1f}x"),
        ("deep validation", verdict),
    ]
    sc = world.sidecar
    if sc:
        rows.append(("sidecar scene", escape(str(sc.get("scene", "-")))))
        rows.append(("sidecar classes", escape(", ".join(map(str, sc.get("class_names", []))))))
        rows.append(("sidecar spawn points", str(len(sc.get("spawn_points", [])))))
    for r in rows:
        head.add_row(*r)
    console.print(head)
    if not ok:
        return 1
    words = np.asarray(world.nodes)
    leaves = is_leaf(words)
    dist, sem = decode_leaf(words[leaves])
    kinds = Table(title="words by kind (all words in the array)")
    kinds.add_column("kind")
    kinds.add_column("count", justify="right")
    kinds.add_row("leaf words", f"{int(leaves.sum()):,}")
    kinds.add_row("  with semantic != 0 (near a surface)", f"{int((sem != 0).sum()):,}")
    kinds.add_row("  with negative distance (solid)", f"{int((dist < 0).sum()):,}")
    kinds.add_row("inner nodes and child slots", f"{int((~leaves).sum()):,}")
    console.print(kinds)
    c = node_census(world)
    depth = Table(title=f"unique reachable nodes by depth (a tree without sharing: {c['tree_nodes']:,.0f} nodes)")
    for col in ("depth", "cell (voxels)", "inner", "leaf", "pruned octants"):
        depth.add_column(col, justify="right")
    for d in range(len(c["inner"])):
        depth.add_row(str(d), f"{res / 2**d:g}", f"{c['inner'][d]:,}", f"{c['leaf'][d]:,}", f"{c['pruned'][d]:,}")
    console.print(depth)
    return 0
