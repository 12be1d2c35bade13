"""Single-threaded GEMM callable from inside Numba kernels (and `prange` bodies).

The learning kernels need dense products on small blocks (a chunk of samples
times a layer's weights, a tile of a weight gradient). They call
``gemm(trans_a, trans_b, (m, n, k), alpha, (a_ptr, lda), (b_ptr, ldb), beta, (c_ptr, ldc))``
(row major, each operand its address, an integer from ``arr.ctypes.data``,
with its leading dimension), which Numba compiles to a call of the external
symbol ``navi_nb_sgemm`` / ``navi_nb_dgemm``: the 14 arguments of the
``cblas_?gemm`` interface, spelled out only where that interface is met (the
symbols' signatures and the plain-loop fallback bound in their place).

At import we bind those symbols to one of two implementations:

- ``blas``: the ILP64 ``cblas_?gemm`` of the OpenBLAS that NumPy itself loaded
  (the ``scipy-openblas64`` wheel), pinned to ONE thread. Every call runs in
  the calling thread, so a `prange` over chunks never nests BLAS threads, and
  no second BLAS library is loaded (Numba's own ``np.dot`` would pull SciPy's).
- ``numba``: plain Numba loops compiled as C callbacks (``cfunc``); used when
  no such symbol is found, or when ``NAVI_NB_GEMM=numba`` asks for it.

Both are deterministic: a given call (shapes, operands) always gives the same
bits, whichever thread makes it. The two differ from each other in the last
bits. Kernels that use ``gemm`` cache normally (``cache=True``): the cached code
refers to the symbol by name, and importing this module binds it again.
"""

from __future__ import annotations

import ctypes
import glob
import os

import llvmlite.binding as _llvm
import numpy as np
from numba import carray, cfunc, njit, types
from numba.extending import overload

ROW_MAJOR = 101
NO_TRANS = 111
TRANS = 112

_i32, _i64, _ptr = types.int32, types.int64, types.uintp
_sig32 = types.void(
    _i32, _i32, _i32, _i64, _i64, _i64, types.float32, _ptr, _i64, _ptr, _i64, types.float32, _ptr, _i64
)
_sig64 = types.void(
    _i32, _i32, _i32, _i64, _i64, _i64, types.float64, _ptr, _i64, _ptr, _i64, types.float64, _ptr, _i64
)
_sgemm = types.ExternalFunction("navi_nb_sgemm", _sig32)
_dgemm = types.ExternalFunction("navi_nb_dgemm", _sig64)

# Names the ILP64 cblas gemm has in NumPy's bundled OpenBLAS builds.
_BLAS_NAMES = {
    "s": ("scipy_cblas_sgemm64_", "cblas_sgemm64_", "cblas_sgemm64"),
    "d": ("scipy_cblas_dgemm64_", "cblas_dgemm64_", "cblas_dgemm64"),
}
_THREAD_NAMES = ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_", "openblas_set_num_threads")


def _numpy_blas_library():
    libs = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    for path in sorted(glob.glob(os.path.join(libs, "libscipy_openblas64*"))):
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


# ---- the fallback: plain loops, compiled as C callbacks --------------------
def _make_loop_gemm(dtype):
    def loop_gemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        # cblas_?gemm's 14 arguments, as the symbol it stands in for takes them. Row major only
        # (order is always ROW_MAJOR here).
        A = carray(a, ((m - 1) * lda + k if ta == NO_TRANS else (k - 1) * lda + m,))
        B = carray(b, ((k - 1) * ldb + n if tb == NO_TRANS else (n - 1) * ldb + k,))
        C = carray(c, ((m - 1) * ldc + n,))
        row = np.empty(n, dtype)
        for i in range(m):
            for j in range(n):
                row[j] = 0.0
            for p in range(k):
                aip = A[i * lda + p] if ta == NO_TRANS else A[p * lda + i]
                if tb == NO_TRANS:
                    base = p * ldb
                    for j in range(n):
                        row[j] += aip * B[base + j]
                else:
                    for j in range(n):
                        row[j] += aip * B[j * ldb + p]
            for j in range(n):
                if beta == 0.0:
                    C[i * ldc + j] = alpha * row[j]
                else:
                    C[i * ldc + j] = alpha * row[j] + beta * C[i * ldc + j]

    return loop_gemm


def _loop_gemm_address(dtype, item):
    """The address of the plain-loop gemm for ``dtype`` (``item`` its Numba type), compiled on this first
    use: a run that binds the BLAS never compiles it (a few CPU-seconds at import on a first run)."""
    ptr = types.CPointer(item)
    sig = types.void(_i32, _i32, _i32, _i64, _i64, _i64, item, ptr, _i64, ptr, _i64, item, ptr, _i64)
    return cfunc(sig, cache=True)(_make_loop_gemm(dtype)).address


_THREAD_SETTER = None


def set_blas_threads(n):
    """Set the thread count of NumPy's OpenBLAS (benchmarks only: navi_nb keeps
    it at 1). Returns False when this BLAS offers no setter."""
    if _THREAD_SETTER is None:
        return False
    _THREAD_SETTER(int(n))
    return True


def _bind():
    """Bind navi_nb_sgemm/dgemm; return the name of the implementation chosen."""
    global _THREAD_SETTER
    want = os.environ.get("NAVI_NB_GEMM", "blas").strip().lower()
    lib = _numpy_blas_library() if want != "numba" else None
    addrs = {}
    if lib is not None:
        for kind, names in _BLAS_NAMES.items():
            for name in names:
                fn = getattr(lib, name, None)
                if fn is not None:
                    addrs[kind] = ctypes.cast(fn, ctypes.c_void_p).value
                    break
    if len(addrs) == 2:
        # One BLAS thread: calls run in the caller's thread (see module doc).
        for name in _THREAD_NAMES:
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.argtypes = [ctypes.c_int]
                fn(1)
                _THREAD_SETTER = fn
                break
        _llvm.add_symbol("navi_nb_sgemm", addrs["s"])
        _llvm.add_symbol("navi_nb_dgemm", addrs["d"])
        return "blas"
    _llvm.add_symbol("navi_nb_sgemm", _loop_gemm_address(np.float32, types.float32))
    _llvm.add_symbol("navi_nb_dgemm", _loop_gemm_address(np.float64, types.float64))
    return "numba"


GEMM_BACKEND = _bind()


@njit(cache=True, inline="always")
def address(a, offset):
    """Address of element ``offset`` (counted in elements) of contiguous ``a``: a gemm operand."""
    return a.ctypes.data + np.uint64(offset * a.itemsize)


def gemm(ta, tb, shape, alpha, a, b, beta, c):  # pragma: no cover
    """C = alpha * op(A) @ op(B) + beta * C, row major; ``shape = (m, n, k)``, ``a, b, c``
    each ``(address, leading dimension)``."""
    raise NotImplementedError("gemm is callable from Numba kernels only")


@overload(gemm, inline="always")
def _gemm_overload(ta, tb, shape, alpha, a, b, beta, c):
    if alpha == types.float32:
        blas = _sgemm
    elif alpha == types.float64:
        blas = _dgemm
    else:
        return None

    def impl(ta, tb, shape, alpha, a, b, beta, c):
        m, n, k = shape
        blas(np.int32(ROW_MAJOR), np.int32(ta), np.int32(tb), m, n, k, alpha, a[0], a[1], b[0], b[1], beta, c[0], c[1])

    return impl


@njit(cache=True)
def matmul_into(a, b, c, trans_a, trans_b):
    """c = op(a) @ op(b) for C-contiguous 2-D arrays (a test and bench helper)."""
    m, n = c.shape
    k = a.shape[0] if trans_a else a.shape[1]
    one = np.ones(1, c.dtype)[0]
    zero = np.zeros(1, c.dtype)[0]
    gemm(
        TRANS if trans_a else NO_TRANS,
        TRANS if trans_b else NO_TRANS,
        (m, n, k),
        one,
        (a.ctypes.data, a.shape[1]),
        (b.ctypes.data, b.shape[1]),
        zero,
        (c.ctypes.data, n),
    )
