"""The ``checkpoint`` fuzz target: a run's `.npz` files (checkpoints, ``policy.npz``, ``eval_episodes.npz``)
mutated and read back by the code that reads them in use.

A case is a pure function of ``(seed, index)``: a real file of a real (tiny) run, changed by one named
mutator that knows the format (zip members, ``.npy`` headers and data, ``meta.json``, the zip's own size
fields), put back into a scratch copy of the run folder and read; the file kind is ``index % 3`` (or the
one kind asked for):

- ``checkpoint``: ``Trainer.load_checkpoint`` (what ``train --resume`` and ``eval --policy latest`` run);
- ``policy``: ``load_run_policy(source="final")`` (what ``eval`` runs);
- ``episodes``: ``load_episodes`` with the run's world (what ``render RUN --episode K`` runs).

A load that returns NaN or infinite values, or a recurrent state no GRU can hold (``memory.h`` past
[-1, 1] and a few ulps), is ``non-finite``. By default the run is a tiny recurrent one (a GRU memory of
:data:`MEMORY_SIZE` units, so its checkpoints hold ``memory.h`` and ``memory.start``, which the
``memory_state`` mutator damages) trained in a temporary folder (once per process);
``checkpoint_target(run)`` fuzzes another run's files (its scratch copy; the run itself is never written).
"""

from __future__ import annotations

import atexit
import functools
import io
import json
import os
import shutil
import struct
import tempfile
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from navi_nb.fuzz.cases import Case, Target
from navi_nb.fuzz.outcomes import NonFinite

KINDS = ("checkpoint", "policy", "episodes")


# --------------------------------------------------------------------------
# a file as a list of members, and back
# --------------------------------------------------------------------------


def read_members(data: bytes) -> list:
    """``[(name, bytes), ...]`` of a well-formed `.npz`, in stored order."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return [(i.filename, zf.read(i)) for i in zf.infolist()]


def write_members(members, deflate=()) -> bytes:
    """A `.npz` of ``members`` (stored, or deflated for the names in ``deflate``)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a duplicated member name is what some cases want
        for name, body in members:
            zf.writestr(
                zipfile.ZipInfo(name),
                body,
                compress_type=zipfile.ZIP_DEFLATED if name in deflate else zipfile.ZIP_STORED,
            )
    return buf.getvalue()


def split_npy(body: bytes):
    """``(header dict, data bytes)`` of a `.npy` member written by NumPy."""
    f = io.BytesIO(body)
    version = np.lib.format.read_magic(f)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read(f)
    return {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": fortran, "shape": shape}, body[f.tell() :]


def npy_with_header(header_text: str, data: bytes) -> bytes:
    """A version 1.0 `.npy` member with ``header_text`` taken as given (padded to 64 bytes)."""
    text = header_text.encode("latin1")
    pad = (-(10 + len(text) + 1)) % 64
    text = text + b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + data


def header_text(hdr: dict) -> str:
    descr, fortran, shape = hdr["descr"], hdr["fortran_order"], tuple(hdr["shape"])
    return f"{{'descr': {descr!r}, 'fortran_order': {fortran!r}, 'shape': {shape!r}, }}"


# --------------------------------------------------------------------------
# mutators: (rng, members, raw bytes) -> bytes of the new file
# --------------------------------------------------------------------------


def _pick_array(rng, members):
    names = [i for i, (n, _) in enumerate(members) if n.endswith(".npy")]
    return names[int(rng.integers(len(names)))]


def _meta_index(members):
    return next(i for i, (n, _) in enumerate(members) if n == "meta.json")


def m_flip_bytes(rng, members, raw):
    out = bytearray(raw)
    for _ in range(int(rng.integers(1, 9))):
        out[int(rng.integers(len(out)))] ^= 1 << int(rng.integers(8))
    return bytes(out)


def m_truncate_file(rng, members, raw):
    return raw[: int(rng.integers(len(raw)))]


def m_drop_member(rng, members, raw):
    members = list(members)
    del members[int(rng.integers(len(members)))]
    return write_members(members)


def m_duplicate_member(rng, members, raw):
    members = list(members)
    members.append(members[int(rng.integers(len(members)))])
    return write_members(members)


def m_rename_member(rng, members, raw):
    members = list(members)
    i = int(rng.integers(len(members)))
    name = ["x.npy", "../evil.npy", ".hidden.npy", "meta.json", "a/b.npy", "policy.params.npz", ""][
        int(rng.integers(7))
    ]
    members[i] = (name, members[i][1])
    return write_members(members)


def m_truncate_member(rng, members, raw):
    members = list(members)
    i = _pick_array(rng, members)
    body = members[i][1]
    members[i] = (members[i][0], body[: int(rng.integers(len(body)))])
    return write_members(members)


def m_extend_member(rng, members, raw):
    members = list(members)
    i = _pick_array(rng, members)
    members[i] = (members[i][0], members[i][1] + bytes(int(rng.integers(1, 64))))
    return write_members(members)


_BAD_HEADERS = [
    "{'descr': '<f4', 'fortran_order': False, 'shape': (1,\n",  # unbalanced bracket
    "{'descr': '<f4', 'fortran_order': False, 'shape': " + "(" * 500 + ")" * 500 + ", }",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2**62, 2**62), }",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }",
    "{'descr': 'O', 'fortran_order': False, 'shape': (1,), }",
    "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }",
    "{'descr': '<f4', 'fortran_order': 'yes', 'shape': (1,), }",
    "{'descr': '<f4', 'shape': (1,), }",
    "[1, 2, 3]",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (1.5,), }",
    "__import__('os').system('true')",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}",
    "{" * 3000,
    "",
]


def m_bad_header(rng, members, raw):
    members = list(members)
    i = _pick_array(rng, members)
    _hdr, data = split_npy(members[i][1])
    members[i] = (members[i][0], npy_with_header(_BAD_HEADERS[int(rng.integers(len(_BAD_HEADERS)))], data))
    return write_members(members)


def m_header_field(rng, members, raw):
    """One header field changed to another plausible value (dtype, order, shape)."""
    members = list(members)
    i = _pick_array(rng, members)
    hdr, data = split_npy(members[i][1])
    k = int(rng.integers(4))
    if k == 0:
        hdr["descr"] = ["<f8", ">f4", "<i4", "|b1", "<u8", "<f2", "|u1"][int(rng.integers(7))]
    elif k == 1:
        hdr["fortran_order"] = not hdr["fortran_order"]
    elif k == 2:
        shape = list(hdr["shape"]) or [1]
        shape[int(rng.integers(len(shape)))] += int(rng.integers(-2, 3))
        hdr["shape"] = tuple(shape)
    else:
        hdr["shape"] = tuple(hdr["shape"]) + (1,)
    members[i] = (members[i][0], npy_with_header(header_text(hdr), data))
    return write_members(members)


def m_header_version(rng, members, raw):
    members = list(members)
    i = _pick_array(rng, members)
    body = bytearray(members[i][1])
    body[6], body[7] = int(rng.integers(0, 5)), int(rng.integers(0, 3))
    if rng.random() < 0.5:  # and a header length that lies
        body[8:10] = struct.pack("<H", int(rng.integers(0, 65536)))
    members[i] = (members[i][0], bytes(body))
    return write_members(members)


def m_values(rng, members, raw):
    """Data values replaced by NaN, infinities, huge, negative or out-of-range numbers."""
    members = list(members)
    i = _pick_array(rng, members)
    hdr, data = split_npy(members[i][1])
    dtype = np.dtype(hdr["descr"])
    arr = np.frombuffer(data, dtype=dtype).copy()
    if arr.size == 0:
        return write_members(members)
    n = int(rng.integers(1, min(arr.size, 4) + 1))
    where = rng.choice(arr.size, size=n, replace=False)
    if dtype.kind == "f":
        choices = [np.nan, np.inf, -np.inf, 1e30, -1e30, 1e6, -1.0, 7.0]
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        choices = [info.max, info.min, -1, 0, 2**31 - 1, 1_000_000]
        choices = [c for c in choices if info.min <= c <= info.max]
    else:
        arr.view(np.uint8)[where] = int(rng.integers(2, 256))
        members[i] = (members[i][0], npy_with_header(header_text(hdr), arr.tobytes()))
        return write_members(members)
    for w in where:
        arr[w] = choices[int(rng.integers(len(choices)))]
    members[i] = (members[i][0], npy_with_header(header_text(hdr), arr.tobytes()))
    return write_members(members)


_MEMORY_H = (1.0, -1.0, 0.0, 1.0 + 8 * 2.0**-23, 1.0 + 9 * 2.0**-23, -1.0001, 1.5, -2.0, 1e30, np.nan, np.inf)
"""Values put in ``memory.h``: a GRU's state lies within [-1, 1] (plus a few float32 ulps of rounding, which
``PolicyMemory.set_state`` allows: ``learn.policy.STATE_BOUND``), the rest must be refused."""


def m_memory_state(rng, members, raw):
    """A recurrent run's memory members (``memory.h``, ``memory.start``): ``h`` values at and past a GRU's
    bound, NaN or infinite; ``start`` flags that are neither 0 nor 1; either member in another dtype or shape.
    A file without them (a run without memory, ``policy.npz``, ``eval_episodes.npz``) gets ``m_values``."""
    names = [n for n, _ in members]
    mine = [n for n in ("memory.h.npy", "memory.start.npy") if n in names]
    if not mine:
        return m_values(rng, members, raw)
    members = list(members)
    i = names.index(mine[int(rng.integers(len(mine)))])
    hdr, data = split_npy(members[i][1])
    arr = np.frombuffer(data, dtype=np.dtype(hdr["descr"])).copy()
    k = int(rng.integers(4))
    if k == 0 and arr.size:  # values: h's at and past its bound, start's raw bytes 2..255
        where = rng.choice(arr.size, size=int(rng.integers(1, min(arr.size, 3) + 1)), replace=False)
        if arr.dtype.kind == "f":
            arr[where] = [_MEMORY_H[int(rng.integers(len(_MEMORY_H)))] for _ in where]
        else:
            arr.view(np.uint8)[where] = int(rng.integers(2, 256))
        body = arr.tobytes()
    elif k == 1:  # the same values in another dtype (float64 h, uint8 or int32 start)
        new = ["<f8", "<f2", "|u1", "<i4", "|b1"][int(rng.integers(5))]
        body = arr.astype(np.dtype(new)).tobytes()
        hdr = {**hdr, "descr": new}
    elif k == 2:  # a row more or fewer (another actor count)
        shape = list(hdr["shape"]) or [1]
        shape[0] = max(0, shape[0] + int(rng.choice([-1, 1])))
        body = bytes(int(np.prod(shape)) * arr.itemsize)
        hdr = {**hdr, "shape": tuple(shape)}
    else:  # every value just inside or just past the bound
        edge = np.float32(1.0 + int(rng.integers(0, 12)) * 2.0**-23) * np.float32(rng.choice([-1, 1]))
        body = (np.full(arr.shape, edge, arr.dtype) if arr.dtype.kind == "f" else np.ones_like(arr)).tobytes()
    members[i] = (members[i][0], npy_with_header(header_text(hdr), body))
    return write_members(members)


def m_meta_value(rng, members, raw):
    members = list(members)
    i = _meta_index(members)
    meta = json.loads(members[i][1])
    key = sorted(meta)[int(rng.integers(len(meta)))]
    choices = [None, -1, 0, 2**70, "x", [], {}, True, 1.5, 10**6, 89478, float("nan"), float("inf")]
    if rng.random() < 0.2:
        del meta[key]
    else:
        meta[key] = choices[int(rng.integers(len(choices)))]
    members[i] = ("meta.json", json.dumps(meta).encode())
    return write_members(members)


def m_meta_text(rng, members, raw):
    """meta.json replaced by text that is not a meta object."""
    members = list(members)
    i = _meta_index(members)
    k = int(rng.integers(6))
    text = [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a": ' * 50_000 + b"1" + b"}" * 50_000,
        b"\xff\xfe{}",
        members[i][1][: len(members[i][1]) // 2],
        b"[1, 2]",
        b'{"format_version": 1e999}',
    ][k]
    members[i] = ("meta.json", text)
    return write_members(members)


def m_deflate(rng, members, raw):
    """The same members, deflated: a well-formed file the writer never makes (should still read)."""
    return write_members(members, deflate={n for n, _ in members})


def m_inflate_bomb(rng, members, raw):
    """One array member replaced by deflated zeros whose header declares many more elements,
    with a matching ``meta.json`` where the counts come from it (eval_episodes.npz)."""
    members = list(members)
    i = _pick_array(rng, members)
    hdr, data = split_npy(members[i][1])
    factor = int(rng.integers(2, 2000))
    shape = list(hdr["shape"]) or [1]
    shape[0] *= factor
    itemsize = np.dtype(hdr["descr"]).itemsize
    nbytes = int(np.prod(shape)) * itemsize
    nbytes = min(nbytes, 16 << 20)  # a small-scale bomb: the reader must refuse it by ratio, not by memory
    shape = [nbytes // (itemsize * max(1, int(np.prod(shape[1:]))))] + shape[1:]
    body = npy_with_header(header_text({**hdr, "shape": tuple(shape)}), bytes(int(np.prod(shape)) * itemsize))
    members[i] = (members[i][0], body)
    m = _meta_index(members)
    meta = json.loads(members[m][1])
    if "episodes" in meta and "steps" in meta:
        meta["steps" if members[i][0] in ("positions.npy", "yaws.npy") else "episodes"] = shape[0]
        members[m] = ("meta.json", json.dumps(meta).encode())
    return write_members(members, deflate={members[i][0]})


def m_zip_sizes(rng, members, raw):
    """A central-directory size field changed (what the reader trusts to size its reads)."""
    data = bytearray(write_members(members))
    starts = [k for k in range(len(data) - 46) if data[k : k + 4] == b"PK\x01\x02"]
    if not starts:
        return bytes(data)
    k = starts[int(rng.integers(len(starts)))]
    off = [20, 24][int(rng.integers(2))]  # compressed or uncompressed size
    value = [0, 1, 0xFFFFFFFE, int(rng.integers(0, 1 << 32))][int(rng.integers(4))]
    data[k + off : k + off + 4] = struct.pack("<I", value)
    return bytes(data)


def m_crc(rng, members, raw):
    data = bytearray(write_members(members))
    starts = [k for k in range(len(data) - 46) if data[k : k + 4] == b"PK\x01\x02"]
    k = starts[int(rng.integers(len(starts)))]
    data[k + 16 : k + 20] = struct.pack("<I", int(rng.integers(0, 1 << 32)))
    return bytes(data)


MUTATORS = {
    f.__name__[2:]: f
    for f in (
        m_flip_bytes,
        m_truncate_file,
        m_drop_member,
        m_duplicate_member,
        m_rename_member,
        m_truncate_member,
        m_extend_member,
        m_bad_header,
        m_header_field,
        m_header_version,
        m_values,
        m_memory_state,
        m_meta_value,
        m_meta_text,
        m_deflate,
        m_inflate_bomb,
        m_zip_sizes,
        m_crc,
    )
}


# --------------------------------------------------------------------------
# the run whose files are mutated, and the readers
# --------------------------------------------------------------------------


def tiny_config(root, scenes="box", name="run", **overrides):
    """The TrainConfig of a tiny run (``scenes`` at resolution 32, 4 actors, 2 updates) in ``root/name``;
    ``overrides``: other values of its fields."""
    from navi_nb.train.config import TrainConfig

    settings = dict(
        scenes=scenes,
        resolution=32,
        actors=4,
        sensor_az=8,
        sensor_el=4,
        rollout_steps=16,
        hidden=[16],
        update_epochs=1,
        num_minibatches=2,
        total_steps=128,
        checkpoint_every=1,
        keep_checkpoints=0,
        eval_episodes=0,
        run_dir=str(root),
        name=name,
        env={"max_steps": 20},
    )
    return TrainConfig(**{**settings, **overrides}).validate()


MEMORY_SIZE = 4
"""The GRU units of the tiny run whose files are fuzzed: its checkpoints hold the actors' memory members."""


def make_tiny_run(root) -> Path:
    """Train and evaluate a tiny recurrent run (box scene, 4 actors, a GRU of :data:`MEMORY_SIZE` units, 2
    updates) in ``root/run``."""
    from navi_nb.train.evaluate import evaluate
    from navi_nb.train.loop import Trainer

    trainer = Trainer.create(tiny_config(root, memory_size=MEMORY_SIZE))
    try:
        trainer.train(progress=False)
        evaluate(trainer.run_path, episodes=4)
    finally:
        trainer.close()  # the run folder's lock
    return trainer.run_path


@dataclass
class Fuzzer:
    """Cases over one run's files; the scratch copy of the run lives in ``work``."""

    run: Path
    work: Path
    seed: int = 0
    _ctx: dict = field(default_factory=dict)

    def __post_init__(self):
        from navi_nb.train import checkpoint as ck
        from navi_nb.train.evaluate import EPISODES_FILE
        from navi_nb.train.loop import Trainer
        from navi_nb.train.runs import CHECKPOINT_DIR, POLICY_FILE, load_run_worlds, read_run_config

        self.run, self.work = Path(self.run), Path(self.work)
        scratch = self.work / "run"
        if scratch.exists():
            shutil.rmtree(scratch)
        shutil.copytree(self.run, scratch, ignore=shutil.ignore_patterns("tb"))
        cfg = read_run_config(scratch)
        world_set = load_run_worlds(scratch, cfg)
        world = world_set.worlds[0]  # the tiny run's one world (the box)
        trainer = Trainer(cfg, scratch, world_set)
        trainer.env.reset(seed=cfg.seed)
        latest = ck.latest_checkpoint(scratch / CHECKPOINT_DIR)
        self._ctx = {
            "cfg": cfg,
            "world": world,
            "trainer": trainer,
            "scratch": scratch,
            "paths": {"checkpoint": latest, "policy": scratch / POLICY_FILE, "episodes": scratch / EPISODES_FILE},
        }
        self.originals = {t: p.read_bytes() for t, p in self._ctx["paths"].items()}

    def mutate(self, target: str, index: int, seed=None):
        """``(mutator name, bytes)`` of case ``index`` for ``target`` (pure in seed, target, index)."""
        rng, name = case_mutator(self.seed if seed is None else seed, target, index)
        raw = self.originals[target]
        return name, MUTATORS[name](rng, read_members(raw), raw)

    def load_bytes(self, target: str, data: bytes):
        """Put ``data`` at the target's path, read it as the package does, put the real file back;
        the loaded arrays (whatever the reader raises propagates)."""
        path = self._ctx["paths"][target]
        path.write_bytes(data)
        try:
            return self.load(target)
        finally:
            path.write_bytes(self.originals[target])

    def load(self, target: str):
        """Read the file now at the target's path the way the package reads it; the loaded arrays."""
        from navi_nb.train.evaluate import load_episodes, load_run_policy

        ctx = self._ctx
        if target == "checkpoint":
            trainer = ctx["trainer"]
            trainer.load_checkpoint(ctx["paths"]["checkpoint"])
            return trainer.state_arrays()
        if target == "policy":
            policy, _origin = load_run_policy(ctx["scratch"], ctx["cfg"], source="final")
            return {"params": policy.params}
        eps, _meta = load_episodes(ctx["scratch"], ctx["world"])
        return eps


def case_mutator(seed: int, target: str, index: int):
    """``(generator, mutator name)`` of case ``index`` for ``target``: the generator the mutator then draws from."""
    rng = np.random.default_rng([int(seed), KINDS.index(target), int(index)])
    names = sorted(MUTATORS)
    return rng, names[int(rng.integers(len(names)))]


NAN_MEANS_UNKNOWN = {"episodes": ("spl",), "checkpoint": ("env.start_dist",)}
"""Members a file kind may hold NaN in, where NaN is a value: an episode's SPL when its shortest path is unknown
(``eval_episodes.npz``), an actor's shortest path when unknown (a checkpoint's ``env.start_dist``, which
``NavEnv.set_state`` takes); infinities stay failures there too."""


def non_finite_members(arrays: dict, kind: str = "") -> list:
    """Names of the loaded floating-point arrays holding NaN or infinities (NaN allowed where
    ``NAN_MEANS_UNKNOWN`` says it is a value)."""
    out = []
    for k, v in arrays.items():
        v = np.asarray(v)
        if v.dtype.kind != "f":
            continue
        ok = ~np.isinf(v) if k in NAN_MEANS_UNKNOWN.get(kind, ()) else np.isfinite(v)
        if not ok.all():
            out.append(k)
    return out


# --------------------------------------------------------------------------
# the target
# --------------------------------------------------------------------------

_FUZZERS = {}  # run folder (None: this process's own tiny run) -> its Fuzzer, made once per process


def checkpoint_bases(run=None):
    """The Fuzzer over ``run``'s files, or over a tiny run trained and evaluated in a temporary folder
    (``run`` None); made once per process, its scratch copy removed when the process ends."""
    key = None if run is None else str(Path(run).resolve())
    if key not in _FUZZERS:
        root = tempfile.mkdtemp(prefix="navi_nb_fuzz_run_")
        atexit.register(shutil.rmtree, root, True)
        source = make_tiny_run(root) if run is None else Path(run)
        _FUZZERS[key] = Fuzzer(source, os.path.join(root, "work"))
    return _FUZZERS[key]


def checkpoint_label(seed, index, kinds=KINDS) -> tuple:
    """(generator, base number, mutator, file kind) of a case, without building any file."""
    kind = kinds[index % len(kinds)]
    rng, name = case_mutator(seed, kind, index // len(kinds))
    return rng, 0, name, kind


def make_checkpoint_case(fuzzer, seed, index, kinds=KINDS) -> Case:
    kind = kinds[index % len(kinds)]
    name, data = fuzzer.mutate(kind, index // len(kinds), seed)
    return Case(index, name, kind, data)


def impossible_memory(arrays: dict) -> list:
    """What a loaded recurrent state holds that a GRU cannot: ``memory.h`` past ``[-1, 1]`` and its few ulps of
    rounding (``learn.policy.STATE_BOUND``), or ``memory.start`` not bool. (A bool's byte other than 0 and 1
    reads as True in NumPy and in the compiled kernels alike, as the environment's flags do.)"""
    from navi_nb.learn.policy import STATE_BOUND

    out = []
    h, start = arrays.get("memory.h"), arrays.get("memory.start")
    if h is not None and np.asarray(h).size:
        h = np.asarray(h)
        bound = STATE_BOUND.get(h.dtype.type)
        if bound is None or not np.isfinite(h).all() or np.abs(h).max() > bound:
            out.append(f"memory.h ({h.dtype}, largest |value| {float(np.nanmax(np.abs(h.astype(np.float64)))):.9g})")
    if start is not None and np.asarray(start).dtype != np.bool_:
        out.append(f"memory.start ({np.asarray(start).dtype}, not bool)")
    return out


def run_checkpoint_case(case: Case, folder, rng, fuzzer):
    arrays = fuzzer.load_bytes(case.mode, case.data)
    bad = non_finite_members(arrays, case.mode)
    if bad:
        raise NonFinite(f"loaded non-finite values in {bad}")
    impossible = impossible_memory(arrays)
    if impossible:
        raise NonFinite(f"loaded a memory state a GRU cannot hold: {', '.join(impossible)}")


def checkpoint_target(run=None, kinds=KINDS) -> Target:
    """The target over ``run``'s files (default: this process's tiny run), its cases cycling over ``kinds``."""
    kinds = tuple(kinds)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise ValueError(f"file kinds must be some of {KINDS}, got {kinds}")
    return Target(
        functools.partial(checkpoint_bases, None if run is None else str(run)),
        functools.partial(make_checkpoint_case, kinds=kinds),
        run_checkpoint_case,
        functools.partial(checkpoint_label, kinds=kinds),
        "checkpoint",
    )


TARGET = checkpoint_target()
