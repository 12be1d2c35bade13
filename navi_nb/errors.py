"""The one base class for errors a user can cause (bad files, flags, actions).

The CLI prints these as one clear line and exits non-zero; anything else is a
bug and keeps its traceback.
"""


class NaviError(Exception):
    """Bad input from the user: says what and where, raised before state changes."""


class CliError(NaviError):
    """A bad command-line argument: printed as one line, exit status 2."""


class GmdagError(NaviError, ValueError):
    """A `.gmdag` file (or in-memory node array) or its sidecar breaks a rule of the format
    (``navi_nb.world.gmdag``, ``navi_nb.world.sidecar``): ``source`` names the file, ``rule`` the rule."""

    def __init__(self, source, rule):
        self.source = str(source)
        self.rule = rule
        super().__init__(f"{self.source}: {rule}")


class RunError(NaviError):
    """A run folder that is missing, damaged or does not fit the request (``navi_nb.train.runs`` and its
    lock, ``navi_nb.train.run_lock``, both raise it)."""


def os_error(exc: OSError, doing: str) -> RunError:
    """A file-system error as a one-line RunError naming the path (disk full, read-only, name too long...)."""
    where = exc.filename if exc.filename is not None else ""
    if exc.filename2 is not None:
        where = f"{where} -> {exc.filename2}"
    reason = exc.strerror or type(exc).__name__
    return RunError(f"{doing}: {where}: {reason}" if where else f"{doing}: {reason}")
