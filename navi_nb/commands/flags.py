"""The flags that several commands share, each spelled one way everywhere.

The sensor is ``--sensor-az N --sensor-el M``, the world set ``--scenes SPEC`` and an environment setting
``--env KEY=VALUE`` in every command that takes them, as in ``navi-nb train`` (whose flags come from
``TrainConfig``'s fields; its ``--env`` reads its values with the same ``env_setting``). The spellings that some
commands used before (``--az``/``--el``, ``--sensor AZxEL``, ``--scene``) are still read, into the same
setting, with one line on stderr naming the flag that replaces each; they are left out of ``--help`` and
docs/CLI.md.
"""

from __future__ import annotations

import argparse
import sys


def notice(old: str, new: str) -> None:
    """The one line an earlier spelling prints: ``navi-nb: --az is deprecated; use --sensor-az``."""
    print(f"navi-nb: {old} is deprecated; use {new}", file=sys.stderr, flush=True)


class Deprecated(argparse.Action):
    """An earlier spelling of a flag: stores into the new flag's setting and prints ``notice``."""

    def __init__(self, option_strings, dest, new_flag="", **kwargs):
        self.new_flag = new_flag
        super().__init__(option_strings, dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        notice(option_string, self.new_flag)
        setattr(namespace, self.dest, values)


class DeprecatedSensor(argparse.Action):
    """``--sensor AZxEL``, the earlier spelling of ``--sensor-az AZ --sensor-el EL``."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        notice(f"{option_string} AZxEL", "--sensor-az AZ --sensor-el EL")
        parts = str(values).lower().split("x")
        if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
            raise argparse.ArgumentError(self, f"{values!r} is not AZxEL (e.g. 64x16); use --sensor-az and --sensor-el")
        namespace.sensor_az, namespace.sensor_el = (int(p) for p in parts)


def add_sensor(parser, az: int, el: int, what: str = "sensor") -> None:
    """``--sensor-az`` and ``--sensor-el`` with their defaults, and the earlier ``--az``, ``--el`` and
    ``--sensor AZxEL``; ``what`` begins each help line."""
    parser.add_argument("--sensor-az", type=int, default=az, metavar="N", help=f"{what} azimuth bins (default {az})")
    parser.add_argument("--sensor-el", type=int, default=el, metavar="N", help=f"{what} elevation rows (default {el})")
    parser.add_argument("--az", dest="sensor_az", type=int, action=Deprecated, new_flag="--sensor-az")
    parser.add_argument("--el", dest="sensor_el", type=int, action=Deprecated, new_flag="--sensor-el")
    parser.add_argument("--sensor", dest="sensor_az", action=DeprecatedSensor)


def add_scenes(parser, default: str, help: str) -> None:
    """``--scenes SPEC`` (a scene spec, docs/WORLDS.md) and the earlier ``--scene``."""
    parser.add_argument("--scenes", default=default, metavar="SPEC", help=help)
    parser.add_argument("--scene", dest="scenes", action=Deprecated, new_flag="--scenes")


def shard_counts(text) -> list:
    """``--shards 1,2,4``: the counts as a list of whole numbers >= 1 (argparse names the flag when one is not)."""
    counts = []
    for part in str(text).split(","):
        if part.strip():
            if not part.strip().isdigit() or int(part) < 1:
                raise argparse.ArgumentTypeError(f"expected shard counts >= 1 such as 1,2,4, got {text!r}")
            counts.append(int(part))
    if not counts:
        raise argparse.ArgumentTypeError(f"expected shard counts >= 1 such as 1,2,4, got {text!r}")
    return counts


def add_env(parser, help: str) -> None:
    """``--env KEY=VALUE``, repeatable, read as ``navi-nb train``'s is (``navi_nb.train.config.env_setting``):
    ``args.env`` is None or a list of ``(key, value)``; ``help`` is the help line."""
    from navi_nb.train.config import env_setting

    parser.add_argument("--env", type=env_setting, action="append", default=None, metavar="KEY=VALUE", help=help)
