"""`navi-nb scenes`: list the built-in procedural scenes."""
from __future__ import annotations


def add_arguments(parser) -> None:
    parser.add_argument("--details", action="store_true",
                        help="also build each scene and show its classes, spawn points and size")


def run(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from navi_nb.world.scenes import DEFAULT_SCENE, SCENES, get_scene

    table = Table(title="built-in scenes (navi-nb compile --scene NAME)")
    table.add_column("name")
    table.add_column("description")
    if args.details:
        for col in ("interior (m)", "spawn points"):
            table.add_column(col)
    for name, desc in SCENES.items():
        label = f"{name} (default)" if name == DEFAULT_SCENE else name
        row = [label, desc]
        if args.details:
            s = get_scene(name)
            size = " x ".join(f"{v:g}" for v in (s.bounds_max - s.bounds_min))
            row += [size, str(len(s.spawn_points))]
        table.add_row(*row)
    console = Console()
    console.print(table)
    if args.details:
        console.print("classes (semantic ids from 1): " + ", ".join(get_scene("box").class_names[1:]))
    return 0
