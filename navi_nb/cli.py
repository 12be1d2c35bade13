"""`navi-nb`: the console front.

Each subcommand lives in ``navi_nb/commands/NAME.py`` and exposes
``add_arguments(parser)`` and ``run(args) -> int``; its one-line help is
written once, in ``COMMANDS`` below. A command's module is imported only when
that command is chosen, so ``navi-nb --help`` is quick and a missing optional
extra affects only the command that needs it.
"""

from __future__ import annotations

import argparse
import importlib
import sys

import navi_nb  # noqa: F401  (pins BLAS threads before NumPy loads)
from navi_nb.errors import NaviError

# command name -> (module, one-line help). Order is the order `--help` lists.
COMMANDS = {
    "compile": ("navi_nb.commands.compile", "compile a mesh or a built-in scene into a .gmdag world"),
    "inspect": ("navi_nb.commands.inspect", "print a .gmdag file's header, node counts and validation result"),
    "scenes": ("navi_nb.commands.scenes", "list scene families; resolve a scene spec or fill the compile cache"),
    "render": ("navi_nb.commands.render", "draw what an actor sees (or a trained run's episode) as a PNG"),
    "train": ("navi_nb.commands.train", "train a navigation policy with PPO over many actors"),
    "eval": ("navi_nb.commands.eval", "evaluate a trained run deterministically"),
    "bench": ("navi_nb.commands.bench", "run benchmarks (compile, meshfield, trace, env, ppo, train, sb3)"),
    "info": ("navi_nb.commands.info", "versions, backends, cores and caches of this machine"),
    "fuzz": ("navi_nb.commands.fuzz", "fuzz the readers (.gmdag, meshes, checkpoints, caches) with mutated files"),
}


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose refusal of a flag is one line naming it and where the flags are listed (not the
    usage block that argparse prints above it); exit 2, as argparse's. Subcommands' parsers are of this class."""

    help_prog = None
    """Whose ``--help`` the refusal names, when not this parser's own: the root parser's refusals of
    unrecognized flags come after a subcommand was chosen, so they name that subcommand's."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (`{self.help_prog or self.prog} --help` lists the flags)\n")


def build_parser(only=None):
    parser = Parser(prog="navi-nb", description="Many-actor navigation RL in compiled 3-D worlds.")
    parser.add_argument("--version", action="version", version=f"navi-nb {navi_nb.__version__}")
    if only in COMMANDS:
        parser.help_prog = f"navi-nb {only}"
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (module, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        if only is None or only == name:
            importlib.import_module(module).add_arguments(p)
    return parser


def print_error(exc) -> None:
    """One line on stderr: ``error: MESSAGE``, never wrapped, the message as plain text.

    The message carries user text (file names, run names, flag values):
    escaped, rich markup in it such as ``x[/]y`` prints as typed instead of
    raising; soft wrapping keeps a long message on one line at any width.
    """
    from rich.console import Console
    from rich.markup import escape

    message = " ".join(str(exc).splitlines())
    Console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True, highlight=False)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Import only the chosen command's module to build its arguments.
    chosen = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(only=chosen if chosen in COMMANDS else None)
    try:
        args = parser.parse_args(argv)
    except NaviError as exc:  # a flag's reader that says what is wrong in one line (--env's)
        print_error(exc)
        return 2
    module = importlib.import_module(COMMANDS[args.command][0])
    try:
        return int(module.run(args) or 0)
    except NaviError as exc:
        print_error(exc)
        return 2
    except MemoryError:  # what no command names itself: the size checks are lower bounds
        print_error(
            f"navi-nb {args.command}: ran out of RAM past the size checks (they are lower bounds); smaller "
            "settings need less"
        )
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
