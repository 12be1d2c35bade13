"""The one base class for errors a user can cause (bad files, flags, actions).

The CLI prints these as one clear line and exits non-zero; anything else is a
bug and keeps its traceback.
"""


class NaviError(Exception):
    """Bad input from the user: says what and where, raised before state changes."""


class CliError(NaviError):
    """A bad command-line argument: printed as one line, exit status 2."""
