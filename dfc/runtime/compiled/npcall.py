"""numpy's own inner loops, called from numba-compiled code, so compiled frames give numpy's bits.

numba compiles `np.exp`, `np.power`, `np.sum` and matrix products itself (libm, its own loops, scipy's
BLAS), and those differ from numpy's SIMD loops and pairwise sums in the last bits (measured: numba's
float32 exp differs from numpy's on ~40% of random inputs on an AVX-512 machine). The mode matrix requires
identical results, so lowerings of such ops call numpy's strided loop for the exact dtypes instead:
numpy >= 1.24 hands it out for this purpose (`ufunc._resolve_dtypes_and_context` and
`ufunc._get_strided_loop`, a `PyArrayMethod_StridedLoop` plus its context and auxdata).

Loop addresses differ from process to process, so compiled code never embeds them (that would defeat the
on-disk cache): each compiled frame gets an int64 array `LP` of (loop, context, auxdata) triples as an
argument, and `call_loop` (an intrinsic) calls through the address at run time.
"""
import ctypes

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

_CAPSULE = b"numpy_1.24_ufunc_call_info"
_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_LOOPS = {}      # (ufunc name, dtype names, reduction) -> (capsule kept alive, (loop, context, auxdata))


class NoLoop(Exception):
    """numpy has no loop for these dtypes, or needs the Python API inside it."""


def loop_address(ufunc, dtypes, reduction=False):
    """(loop, context, auxdata) addresses of numpy's strided loop of `ufunc` for exactly `dtypes` (all
    inputs then outputs, as numpy dtype names; for a reduction (None, dtype, None) as numpy asks)."""
    key = (ufunc.__name__, tuple(dtypes), reduction)
    hit = _LOOPS.get(key)
    if hit is None:
        want = tuple(None if d is None else np.dtype(d) for d in dtypes)
        try:
            got, info = ufunc._resolve_dtypes_and_context(want, reduction=reduction)
            ufunc._get_strided_loop(info)
        except (AttributeError, TypeError, ValueError) as e:
            raise NoLoop(f"numpy has no {ufunc.__name__} loop for {dtypes}: {e}") from None
        if any(d is not None and g != d for g, d in zip(got, want)):
            raise NoLoop(f"numpy's {ufunc.__name__} loop for {dtypes} would cast (to {got})")
        p = _get_pointer(info, _CAPSULE)
        loop, ctx, aux = (ctypes.c_void_p.from_address(p + 8 * k).value or 0 for k in range(3))
        if ctypes.c_bool.from_address(p + 24).value:
            raise NoLoop(f"numpy's {ufunc.__name__} loop needs the Python API")
        hit = _LOOPS[key] = (info, (loop, ctx, aux))
    return hit[1]


@intrinsic
def call_loop(typingctx, fn, ctx, args, dims, steps, aux):
    """int loop(context, char *const *args, const npy_intp *dims, const npy_intp *steps, auxdata)."""
    sig = types.int32(types.intp, types.intp, types.intp, types.intp, types.intp, types.intp)

    def codegen(context, builder, signature, a):
        vp = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.IntType(32), [vp] * 5)
        f = builder.inttoptr(a[0], fnty.as_pointer())
        return builder.call(f, [builder.inttoptr(x, vp) for x in a[1:]])
    return sig, codegen


@njit(cache=True, nogil=True)
def _run(LP, k, ptrs, n, steps):
    """Call loop k of LP on the pointers `ptrs` (int64 array), n elements, byte strides `steps`."""
    dims = np.empty(1, np.intp)
    dims[0] = n
    if call_loop(LP[3 * k], LP[3 * k + 1], ptrs.ctypes.data, dims.ctypes.data, steps.ctypes.data,
                 LP[3 * k + 2]) < 0:
        raise FloatingPointError("numpy loop failed")


@njit(cache=True, nogil=True)
def unary(LP, k, x, out):
    """out[:] = ufunc(x) elementwise; x and out C-contiguous of one size."""
    ptrs = np.empty(2, np.intp)
    ptrs[0] = x.ctypes.data
    ptrs[1] = out.ctypes.data
    steps = np.empty(2, np.intp)
    steps[0] = x.itemsize
    steps[1] = out.itemsize
    _run(LP, k, ptrs, out.size, steps)
    return out


@njit(cache=True, nogil=True)
def binary(LP, k, x, y, out):
    """out[:] = ufunc(x, y); x and y C-contiguous of out's size, or of size 1 (broadcast by stride 0)."""
    ptrs = np.empty(3, np.intp)
    ptrs[0] = x.ctypes.data
    ptrs[1] = y.ctypes.data
    ptrs[2] = out.ctypes.data
    steps = np.empty(3, np.intp)
    steps[0] = x.itemsize if x.size == out.size else 0
    steps[1] = y.itemsize if y.size == out.size else 0
    steps[2] = out.itemsize
    _run(LP, k, ptrs, out.size, steps)
    return out


@njit(cache=True, nogil=True)
def reduce_into(LP, k, x, start, n, stride, out, pos):
    """out[pos] = ufunc.reduce of the n elements of flat x from `start`, `stride` elements apart, as numpy
    reduces one contiguous run: the first element, then the loop in reduce mode (out += pairwise(rest))."""
    flat = x.reshape(x.size)
    o = out.reshape(out.size)
    o[pos] = flat[start]
    if n > 1:
        ptrs = np.empty(3, np.intp)
        ptrs[0] = o.ctypes.data + pos * o.itemsize
        ptrs[1] = flat.ctypes.data + (start + stride) * flat.itemsize
        ptrs[2] = ptrs[0]
        steps = np.empty(3, np.intp)
        steps[0] = 0
        steps[1] = stride * flat.itemsize
        steps[2] = 0
        _run(LP, k, ptrs, n - 1, steps)


@njit(cache=True, nogil=True)
def matmul2d(LP, k, a, b, ta, tb):
    """numpy's matmul loop on 2-D C-contiguous a and b, each optionally transposed (passed as strides,
    as numpy passes a swapaxes view), into a new C-contiguous array."""
    it = a.itemsize
    n, kk = (a.shape[1], a.shape[0]) if ta else (a.shape[0], a.shape[1])
    kb, m = (b.shape[1], b.shape[0]) if tb else (b.shape[0], b.shape[1])
    if kk != kb:
        raise ValueError("matmul: inner dimensions differ")
    out = np.empty((n, m), a.dtype)
    ptrs = np.empty(3, np.intp)
    ptrs[0] = a.ctypes.data
    ptrs[1] = b.ctypes.data
    ptrs[2] = out.ctypes.data
    dims = np.empty(4, np.intp)
    dims[0] = 1
    dims[1] = n
    dims[2] = kk
    dims[3] = m
    steps = np.zeros(9, np.intp)
    a0, a1 = a.shape[1] * it, it
    b0, b1 = b.shape[1] * it, it
    steps[3], steps[4] = (a1, a0) if ta else (a0, a1)
    steps[5], steps[6] = (b1, b0) if tb else (b0, b1)
    steps[7] = m * it
    steps[8] = it
    if call_loop(LP[3 * k], LP[3 * k + 1], ptrs.ctypes.data, dims.ctypes.data, steps.ctypes.data,
                 LP[3 * k + 2]) < 0:
        raise FloatingPointError("numpy loop failed")
    return out


@njit(cache=True, nogil=True)
def matmul_vec(LP, k, a, b):
    """numpy's matmul loop where a or b (or both) is 1-D, passed as numpy passes a missing core
    dimension: size 1, stride 0. Returns the flat result (n, m or () as numpy shapes it, flattened)."""
    it = a.itemsize
    if a.ndim == 1:
        n, kk, sa_n, sa_k = 1, a.shape[0], 0, it
    else:
        n, kk, sa_n, sa_k = a.shape[0], a.shape[1], a.shape[1] * it, it
    if b.ndim == 1:
        kb, m, sb_k, sb_m = b.shape[0], 1, it, 0
    else:
        kb, m, sb_k, sb_m = b.shape[0], b.shape[1], b.shape[1] * it, it
    if kk != kb:
        raise ValueError("matmul: inner dimensions differ")
    out = np.empty(n * m, a.dtype)
    ptrs = np.empty(3, np.intp)
    ptrs[0] = a.ctypes.data
    ptrs[1] = b.ctypes.data
    ptrs[2] = out.ctypes.data
    dims = np.empty(4, np.intp)
    dims[0] = 1
    dims[1] = n
    dims[2] = kk
    dims[3] = m
    steps = np.zeros(9, np.intp)
    steps[3], steps[4] = sa_n, sa_k
    steps[5], steps[6] = sb_k, sb_m
    steps[7] = 0 if a.ndim == 1 else (it if b.ndim == 1 else m * it)
    steps[8] = 0 if b.ndim == 1 else it
    if call_loop(LP[3 * k], LP[3 * k + 1], ptrs.ctypes.data, dims.ctypes.data, steps.ctypes.data,
                 LP[3 * k + 2]) < 0:
        raise FloatingPointError("numpy loop failed")
    return out
