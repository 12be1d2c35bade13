"""A random generator's full state as one small array: the package's one encoding.

Environments, PPO and checkpoints all save a ``numpy.random.Generator``
(PCG64) as ``uint64[6]``: the 128-bit state and increment as low/high words,
then ``has_uint32`` and ``uinteger``. A plain array fits a checkpoint's
``.npz`` members like every other piece of state (no JSON, no pickle).
"""

from __future__ import annotations

import numpy as np

from navi_nb.errors import NaviError

STATE_SHAPE = (6,)
STATE_DTYPE = np.uint64
_WORD = (1 << 64) - 1


class GeneratorStateError(NaviError, ValueError):
    """A saved generator state that is not a PCG64 state in this encoding."""


def generator_to_array(gen: np.random.Generator) -> np.ndarray:
    """``gen``'s full state as ``uint64[6]``."""
    st = gen.bit_generator.state
    if st.get("bit_generator") != "PCG64":
        raise GeneratorStateError(f"only PCG64 generators can be saved, not {st.get('bit_generator')}")
    s, inc = st["state"]["state"], st["state"]["inc"]
    return np.array([s & _WORD, s >> 64, inc & _WORD, inc >> 64, st["has_uint32"], st["uinteger"]], STATE_DTYPE)


def _pcg64_state(a) -> dict:
    arr = np.asarray(a)
    if arr.shape != STATE_SHAPE or arr.dtype != STATE_DTYPE:
        raise GeneratorStateError(f"a generator state must be uint64 {STATE_SHAPE}, got {arr.dtype} {arr.shape}")
    w = [int(x) for x in arr]
    if w[4] not in (0, 1) or w[5] > 0xFFFFFFFF:
        raise GeneratorStateError(f"generator state has has_uint32={w[4]}, uinteger={w[5]} (not a PCG64 state)")
    return {
        "bit_generator": "PCG64",
        "state": {"state": w[0] | (w[1] << 64), "inc": w[2] | (w[3] << 64)},
        "has_uint32": w[4],
        "uinteger": w[5],
    }


def check_generator_array(a) -> None:
    """Raise GeneratorStateError unless ``a`` can be restored (nothing changes)."""
    probe = np.random.PCG64()
    try:
        probe.state = _pcg64_state(a)
    except (TypeError, ValueError, OverflowError) as exc:
        if isinstance(exc, GeneratorStateError):
            raise
        raise GeneratorStateError(f"generator state is malformed ({exc})") from exc


def generator_from_array(a) -> np.random.Generator:
    """A new Generator in the state ``a`` (checked first)."""
    check_generator_array(a)
    bg = np.random.PCG64()
    bg.state = _pcg64_state(a)
    return np.random.Generator(bg)


def restore_generator(gen: np.random.Generator, a) -> None:
    """Put ``gen`` (kept, not replaced) into the state ``a`` (checked first)."""
    check_generator_array(a)
    gen.bit_generator.state = _pcg64_state(a)
