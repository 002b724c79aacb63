"""numpy's own inner loops, called from numba-compiled code, so compiled frames give numpy's bits.

numba compiles `np.exp`, `np.power`, `np.sum` and matrix products itself (libm, its own loops, scipy's
BLAS), and those differ from numpy's SIMD loops and pairwise sums in the last bits (measured: numba's
float32 exp differs from numpy's on ~40% of random inputs on an AVX-512 machine). The mode matrix requires
identical results, so lowerings of such ops call numpy's strided loop for the exact dtypes instead:
numpy >= 1.24 hands it out for this purpose (`ufunc._resolve_dtypes_and_context` and
`ufunc._get_strided_loop`, a `PyArrayMethod_StridedLoop` plus its context and auxdata).

Loop addresses differ from process to process, so compiled code never embeds them (that would defeat the
on-disk cache): each compiled frame gets an int64 array `LP` of (loop, context, auxdata) triples as an
argument, and `call_loop` (an intrinsic) calls through the address at run time, with its pointer,
size and stride arrays on the stack (a call allocates nothing; `call_scalar_loop` and
`call_reduce_loop` keep their scalars there too).
"""
import ctypes

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
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


def _intp_array(context, builder, values):
    """An alloca'd (entry block: no growth inside loops) array of intp holding `values`; its i8* pointer."""
    intp = context.get_value_type(types.intp)
    arr = cgutils.alloca_once(builder, intp, size=max(len(values), 1))
    for j, v in enumerate(values):
        builder.store(v, builder.gep(arr, [ir.Constant(ir.IntType(32), j)]))
    return builder.bitcast(arr, ir.IntType(8).as_pointer())


def _call(builder, fn, ctx, aux, ptrs, dims, steps):
    vp = ir.IntType(8).as_pointer()
    fnty = ir.FunctionType(ir.IntType(32), [vp] * 5)
    f = builder.inttoptr(fn, fnty.as_pointer())
    return builder.call(f, [builder.inttoptr(ctx, vp), ptrs, dims, steps, builder.inttoptr(aux, vp)])


@intrinsic
def call_loop(typingctx, fn, ctx, aux, dims, ptrs, steps):
    """int loop(context, char *const *args, const npy_intp *dims, const npy_intp *steps, auxdata) with
    dims, ptrs and steps given as tuples of intp (held on the stack: a call allocates nothing)."""
    if not all(isinstance(t, types.UniTuple) for t in (dims, ptrs, steps)):
        return None
    sig = types.int32(types.intp, types.intp, types.intp, dims, ptrs, steps)

    def codegen(context, builder, signature, a):
        arrs = [_intp_array(context, builder, cgutils.unpack_tuple(builder, t)) for t in a[3:]]
        return _call(builder, a[0], a[1], a[2], arrs[1], arrs[0], arrs[2])
    return sig, codegen


@intrinsic
def call_scalar_loop(typingctx, fn, ctx, aux, args, out):
    """(status, result) of the loop on one element: the scalars `args` (a tuple) in, one scalar of `out`'s
    type out, all held on the stack."""
    if not isinstance(args, (types.UniTuple, types.Tuple)) or not isinstance(out, (types.Number, types.Boolean)):
        return None
    ret = types.Tuple((types.int32, out))
    sig = ret(types.intp, types.intp, types.intp, args, out)

    def codegen(context, builder, signature, a):
        intp = context.get_value_type(types.intp)
        slots = []
        for t, v in zip(signature.args[3], cgutils.unpack_tuple(builder, a[3])):
            slot = cgutils.alloca_once(builder, context.get_data_type(t))
            builder.store(context.get_value_as_data(builder, t, v), slot)
            slots.append(slot)
        res = cgutils.alloca_once(builder, context.get_data_type(out))
        slots.append(res)
        ptrs = _intp_array(context, builder, [builder.ptrtoint(x, intp) for x in slots])
        one, zero = ir.Constant(intp, 1), ir.Constant(intp, 0)
        status = _call(builder, a[0], a[1], a[2], ptrs, _intp_array(context, builder, [one]),
                       _intp_array(context, builder, [zero] * len(slots)))
        val = context.get_data_as_value(builder, out, builder.load(res))
        return context.make_tuple(builder, ret, [status, val])
    return sig, codegen


@intrinsic
def call_reduce_loop(typingctx, fn, ctx, aux, init, ptr, n, stride):
    """(status, result) of the loop in reduce mode, as numpy reduces one contiguous run into a scalar
    `init`: out = init; out op= the n elements from address `ptr`, `stride` bytes apart (numpy's pairwise sum
    for add). The scalar is held on the stack."""
    if not isinstance(init, (types.Number, types.Boolean)):
        return None
    ret = types.Tuple((types.int32, init))
    sig = ret(types.intp, types.intp, types.intp, init, types.intp, types.intp, types.intp)

    def codegen(context, builder, signature, a):
        intp = context.get_value_type(types.intp)
        res = cgutils.alloca_once(builder, context.get_data_type(init))
        builder.store(context.get_value_as_data(builder, init, a[3]), res)
        at = builder.ptrtoint(res, intp)
        zero = ir.Constant(intp, 0)
        status = _call(builder, a[0], a[1], a[2], _intp_array(context, builder, [at, a[4], at]),
                       _intp_array(context, builder, [a[5]]), _intp_array(context, builder, [zero, a[6], zero]))
        val = context.get_data_as_value(builder, init, builder.load(res))
        return context.make_tuple(builder, ret, [status, val])
    return sig, codegen


@intrinsic
def address(typingctx, arr):
    """The address of arr's first element (arr.ctypes.data without the ctypes object, whose reference to the
    array costs two atomic operations). Only for an array its caller keeps alive (an argument, or one used
    after the call the address goes to): the address does not hold the array."""
    if not isinstance(arr, types.Array):
        return None

    def codegen(context, builder, signature, a):
        from numba.np.arrayobj import make_array
        ary = make_array(signature.args[0])(context, builder, a[0])
        return builder.ptrtoint(ary.data, context.get_value_type(types.intp))
    return types.intp(arr), codegen


@njit(cache=True, nogil=True)
def run(LP, k, dims, ptrs, steps):
    """Call loop k of LP (dims, ptrs, steps: tuples of intp, as numpy's strided loops take them)."""
    if call_loop(LP[3 * k], LP[3 * k + 1], LP[3 * k + 2], dims, ptrs, steps) < 0:
        raise FloatingPointError("numpy loop failed")


@njit(cache=True, nogil=True)
def scalar(LP, k, args, out):
    """Loop k of LP on the scalars `args`, giving a scalar of `out`'s type."""
    status, r = call_scalar_loop(LP[3 * k], LP[3 * k + 1], LP[3 * k + 2], args, out)
    if status < 0:
        raise FloatingPointError("numpy loop failed")
    return r


@njit(cache=True, nogil=True)
def reduce_all(LP, k, x, first, ident):
    """Loop k of LP in reduce mode over all of C-contiguous x, as numpy's ufunc.reduce with no axis gives it:
    from `ident`, or (first=True: max, min) from the first element."""
    n = x.size
    if first and n == 0:
        raise ValueError("zero-size array to a reduction operation that has no identity")
    if first:
        init = x.reshape(n)[0]
    else:
        init = ident
    start = 1 if first else 0
    if n - start <= 0:
        return init
    status, r = call_reduce_loop(LP[3 * k], LP[3 * k + 1], LP[3 * k + 2], init,
                                 address(x) + start * x.itemsize, n - start, x.itemsize)     # (x: the caller's)
    if status < 0:
        raise FloatingPointError("numpy loop failed")
    return r


@njit(cache=True, nogil=True)
def _core(a, t):
    """(rows, cols, row stride, col stride) in bytes of a as matmul's left (t: transposed) operand, numpy's
    missing core dimension (size 1, stride 0) for a 1-D one."""
    it = a.itemsize
    if a.ndim == 1:
        return 1, a.shape[0], 0, it
    if t:
        return a.shape[1], a.shape[0], it, a.shape[1] * it
    return a.shape[0], a.shape[1], a.shape[1] * it, it


@njit(cache=True, nogil=True)
def matmul(LP, k, a, b, ta, tb):
    """numpy's matmul loop on C-contiguous a and b (1-D or 2-D; a 2-D one optionally transposed, passed as
    strides as numpy passes a swapaxes view; a 1-D one as numpy passes a missing core dimension), into a
    new flat C-contiguous array of n * m elements (n, m: the rows of a, the columns of b, 1 if 1-D)."""
    it = a.itemsize
    n, kk, sa_n, sa_k = _core(a, ta)
    if b.ndim == 1:
        kb, m, sb_k, sb_m = b.shape[0], 1, it, 0
    else:
        m, kb, sb_m, sb_k = _core(b, not tb)
    if kk != kb:
        raise ValueError("matmul: inner dimensions differ")
    steps = (0, 0, 0, sa_n, sa_k, sb_k, sb_m, 0 if a.ndim == 1 else (it if b.ndim == 1 else m * it),
             0 if b.ndim == 1 else it)
    # a, b and LP are read before the allocation: their lives end before its error branch, so numba's
    # reference counts of them cancel (four atomic operations a call otherwise); the caller keeps them alive
    dt, pa, pb, fn, ctx, aux = a.dtype, address(a), address(b), LP[3 * k], LP[3 * k + 1], LP[3 * k + 2]
    out = np.empty(n * m, dt)
    if call_loop(fn, ctx, aux, (1, n, kk, m), (pa, pb, address(out)), steps) < 0:
        raise FloatingPointError("numpy loop failed")
    return out


@njit(cache=True, nogil=True)
def matmul_into(LP, k, a, b, ta, tb, out):
    """matmul(LP, k, a, b, ta, tb) written into `out`, a C-contiguous array of the result's size (flat or of its
    shape) that is neither a nor b (a loop's buffer: dfc/runtime/compiled/buffers.py).

    (Its steps are not computed by a helper shared with matmul: measured, a helper returning them made HMC's
    compiled run ~25% slower, the call no longer being inlined into the loop.)"""
    it = a.itemsize
    n, kk, sa_n, sa_k = _core(a, ta)
    if b.ndim == 1:
        kb, m, sb_k, sb_m = b.shape[0], 1, it, 0
    else:
        m, kb, sb_m, sb_k = _core(b, not tb)
    if kk != kb:
        raise ValueError("matmul: inner dimensions differ")
    if out.size != n * m:
        raise ValueError("matmul: the result's buffer has another size")
    steps = (0, 0, 0, sa_n, sa_k, sb_k, sb_m, 0 if a.ndim == 1 else (it if b.ndim == 1 else m * it),
             0 if b.ndim == 1 else it)
    if call_loop(LP[3 * k], LP[3 * k + 1], LP[3 * k + 2], (1, n, kk, m), (address(a), address(b), address(out)),
                 steps) < 0:
        raise FloatingPointError("numpy loop failed")


@njit(cache=True, nogil=True)
def matmul_batched(LP, k, a, b, ta, tb):
    """numpy's matmul loop over a stack of matrices: a (batch, r, c) and b (batch, r, c) or (1, r, c) (one
    matrix for every batch entry, numpy's broadcast: outer stride 0), C-contiguous, each optionally
    transposed (as strides). One call with the batch as the gufunc's outer dimension, as numpy makes it;
    a new flat C-contiguous result of batch * n * m elements."""
    it = a.itemsize
    nb = a.shape[0]
    n, kk, sa_n, sa_k = _core(a[0], ta)
    m, kb, sb_m, sb_k = _core(b[0], not tb)
    if kk != kb:
        raise ValueError("matmul: inner dimensions differ")
    if b.shape[0] != nb and b.shape[0] != 1:
        raise ValueError("matmul: batch dimensions differ")
    sb = 0 if b.shape[0] == 1 else b.shape[1] * b.shape[2] * it
    steps = (a.shape[1] * a.shape[2] * it, sb, n * m * it, sa_n, sa_k, sb_k, sb_m, m * it, it)
    dt, pa, pb, fn, ctx, aux = a.dtype, address(a), address(b), LP[3 * k], LP[3 * k + 1], LP[3 * k + 2]
    out = np.empty(nb * n * m, dt)
    if call_loop(fn, ctx, aux, (nb, n, kk, m), (pa, pb, address(out)), steps) < 0:
        raise FloatingPointError("numpy loop failed")
    return out
