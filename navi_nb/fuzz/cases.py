"""What every fuzz target is made of: a ``Case`` (the mutated bytes and how to read them), a ``Target`` (how to
build its base files, make case ``index`` from them, run a case and name one without building it), and the
pieces the targets share (the case generator, a case's input file, hostile floats, query points)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from dataclasses import dataclass

import numpy as np

FLOAT_SPECIALS = (
    float("nan"),
    float("inf"),
    float("-inf"),
    3.4e38,
    -3.4e38,
    1e38,
    -1e38,
    1e-45,
    0.0,
    -0.0,
    1e30,
    -1e30,
    65504.0,
    1e-30,
)


@dataclass
class Case:
    index: int
    mutator: str
    mode: str  # load mode (gmdag), mesh format or file kind (checkpoint)
    data: bytes
    sidecar: str | None = None


@dataclass
class Target:
    bases: object  # () -> bases
    make: object  # (bases, seed, index) -> Case
    run: object  # (case, folder, rng, bases) -> None; raises NaviError (rejected), NonFinite, or a bug
    label: object  # (seed, index) -> (rng, base, mutator, mode): names a case whose worker died
    name: str = "custom"  # the report's target name


def case_rng(seed, index):
    return np.random.default_rng([int(seed), int(index)])


def pick_case(seed, index, n_bases, mutators, modes) -> tuple:
    """(generator, base number, mutator name, mode) of case ``index``: its own generator draws the base and
    the mutator (in sorted name order); the mode is ``index % len(modes)``."""
    rng = case_rng(seed, index)
    base = int(rng.integers(n_bases))
    return rng, base, sorted(mutators)[int(rng.integers(len(mutators)))], modes[index % len(modes)]


def case_file_name(case: Case, target: str) -> str:
    ext = {"gmdag": ".gmdag", "checkpoint": f".{case.mode}.npz"}.get(target, "." + case.mode.split("-")[0])
    return f"case{case.index}{ext}"


def write_case(case: Case, target: str, folder) -> str:
    """The case's input file (and its sidecar, if any) in ``folder``; its path."""
    path = os.path.join(folder, case_file_name(case, target))
    with open(path, "wb") as fh:
        fh.write(case.data)
    if case.sidecar is not None:
        with open(path + ".json", "wb") as fh:
            fh.write(case.sidecar.encode("utf-8", "surrogateescape"))
    return path


def query_points(world, rng, n=32):
    """``n`` points over a world's cube and up to a quarter of its extent outside it (corners and centre first)."""
    ext = float(world.extent)
    lo = world.bmin.astype(np.float64)
    u = rng.uniform(-0.25, 1.25, size=(n, 3))
    u[:4] = [[0, 0, 0], [1, 1, 1], [0.5, 0.5, 0.5], [1e-9, 0.999999, 0.5]]
    return lo + u * ext


def bases_once(store: dict, prefix: str, build):
    """The bases ``build(root)`` makes in a new temporary folder named ``prefix...`` the first time in this
    process (kept in ``store``; the folder removed when the process ends), the same ones afterwards."""
    if "bases" not in store:
        root = tempfile.mkdtemp(prefix=prefix)
        atexit.register(shutil.rmtree, root, True)
        store["bases"] = build(root)
    return store["bases"]
