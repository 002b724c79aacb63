"""numba helpers the generated frame code calls (beside npcall's numpy-loop calls)."""
import numpy as np
from llvmlite import ir
from numba import njit, typed, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from dfc.runtime.compiled import npcall as P
from dfc.runtime.kernels.philox_numba import (normal_into as philox_normal, size_of as philox_size,  # noqa: F401
                                              tag_words as philox_tag, uniform_into as philox_uniform)
from dfc.runtime.compiled.arrays import (add_rows, arg_extreme, argsort_rows, cumprod_grad, cumulate,  # noqa: F401
                                         float_to_int_array, gather3, index_step, int_range, permute, scatter3, scatter_along3,
                                         ta_gather, take_along3, take_rows, wrap)   # (called as H.<name>)


def reshape(x, shape):
    """x.reshape(shape) in compiled code. numba's reshape calls a C helper (~30 ns, and two atomic reference
    counts it cannot see through); a C-contiguous array is viewed with its new shape here, in line. shape:
    an int or a tuple of ints, one of them -1 at most (numpy's meaning); a size that differs raises."""
    return x.reshape(shape)


@overload(reshape)
def _reshape(x, shape):
    if isinstance(shape, types.Integer):
        return lambda x, shape: reshape(x, (shape,))
    if not (isinstance(x, types.Array) and x.layout == "C" and isinstance(shape, types.BaseTuple)
            and len(shape.types) and all(isinstance(t, types.Integer) for t in shape.types)):
        return lambda x, shape: x.reshape(shape)

    def impl(x, shape):
        ok, v = _c_view(x, shape)
        if not ok:
            raise ValueError("cannot reshape an array into a shape of another size")
        return v
    return impl


@intrinsic
def _c_view(typingctx, x, shape):
    """(whether shape fits x's size, x's C-contiguous data seen with that shape, one -1 resolved)."""
    nd = len(shape.types)
    view = x.copy(ndim=nd, layout="C")
    sig = types.Tuple((types.boolean, view))(x, shape)

    def codegen(context, builder, signature, args):
        from numba.core.imputils import impl_ret_borrowed
        from numba.np.arrayobj import make_array, populate_array
        aryty, shty = signature.args
        ary = make_array(aryty)(context, builder, args[0])
        intp = context.get_value_type(types.intp)
        zero, one = ir.Constant(intp, 0), ir.Constant(intp, 1)
        dims = [context.cast(builder, v, t, types.intp)
                for v, t in zip(cgutils.unpack_tuple(builder, args[1]), shty.types)]
        size = ary.nitems
        known, n_unknown = one, zero
        for d in dims:
            is_neg = builder.icmp_signed("<", d, zero)        # (numpy: any negative size is the unknown one)
            known = builder.mul(known, builder.select(is_neg, one, d))
            n_unknown = builder.add(n_unknown, builder.zext(is_neg, intp))
        safe = builder.select(builder.icmp_signed("==", known, zero), one, known)
        fill = builder.sdiv(size, safe)
        dims = [builder.select(builder.icmp_signed("<", d, zero), fill, d) for d in dims]
        total = one
        for d in dims:
            total = builder.mul(total, d)
        ok = builder.icmp_signed("==", total, size)
        ok = builder.and_(ok, builder.icmp_signed("<=", n_unknown, one))
        ok = builder.and_(ok, builder.or_(builder.icmp_signed("==", n_unknown, zero),
                                          builder.icmp_signed("!=", known, zero)))
        strides, acc = [None] * nd, ary.itemsize
        for k in range(nd - 1, -1, -1):
            strides[k] = acc
            acc = builder.mul(acc, builder.select(builder.icmp_signed("==", dims[k], zero), one, dims[k]))
        out = make_array(view)(context, builder)
        populate_array(out, data=ary.data, shape=dims, strides=strides, itemsize=ary.itemsize,
                       meminfo=ary.meminfo, parent=ary.parent)
        v = impl_ret_borrowed(context, builder, view, out._getvalue())
        return context.make_tuple(builder, signature.return_type, [ok, v])
    return sig, codegen


@intrinsic
def unmanaged(typingctx, x):
    """x without its memory's owner: the same array struct with no meminfo (and no parent), so numba's
    reference counts of it, and of views of it, do nothing (null meminfo) instead of two atomic operations
    each. Only for a loop's buffer (buffers.py), whose owner, the allocated array, the generated code keeps
    alive (`keep`) until the loop is done and which never leaves the loop (an Exit value is the owner)."""
    if not isinstance(x, types.Array):
        return None

    def codegen(context, builder, signature, args):
        from numba.np.arrayobj import make_array
        ary = make_array(signature.args[0])(context, builder, args[0])
        out = make_array(signature.return_type)(context, builder)
        out.meminfo = ir.Constant(ary.meminfo.type, None)
        out.parent = ir.Constant(ary.parent.type, None)
        out.nitems, out.itemsize, out.data = ary.nitems, ary.itemsize, ary.data
        out.shape, out.strides = ary.shape, ary.strides
        return out._getvalue()
    return x(x), codegen


@njit(cache=True, nogil=True)
def keep(x):
    """A use of array x, so numba keeps it alive until here (numba frees a value after its last use): a
    loop's buffer owner (`unmanaged`) named after its loop, an array whose address (P.address) a call took."""
    return x.size


@njit(cache=True, nogil=True)
def _call(LP, k, p0, p1, p2, s0, s1, s2, n):
    P.run(LP, k, (n,), (p0, p1, p2), (s0, s1, s2))


@njit(cache=True, nogil=True)
def broadcast(x, shape):
    """x (C-contiguous) as a C-contiguous array of `shape`, copied only when its shape differs."""
    if x.shape == shape:
        return x
    if x.size == 1:
        return np.full(shape, reshape(x, 1)[0])
    return np.broadcast_to(x, shape).copy()


@njit(cache=True, nogil=True)
def flat(x, shape):
    """x (C-contiguous, of at most shape's rank) as a flat array of `shape`'s elements (fusion.py), copied
    only when it is broadcast."""
    if x.size == size_of(shape):
        return reshape(x, x.size)
    b = np.broadcast_to(x, shape).copy()
    return reshape(b, b.size)


@njit(cache=True, nogil=True)
def spread(x, shape):
    """x (C-contiguous, of lower rank than shape) broadcast to `shape`, as a flat copy (fusion.py)."""
    b = np.broadcast_to(x, shape).copy()
    return reshape(b, b.size)


@njit(cache=True, nogil=True)
def size_of(shape):
    n = 1
    for d in shape:
        n *= d
    return n


@njit(cache=True, nogil=True)
def _operand(x, shape, n):
    """x flat, as a binary loop reads it for a result of `shape` (n elements): itself if it has n elements or
    one (stride 0), else a copy broadcast to `shape`."""
    if x.size == n or x.size == 1:
        return reshape(x, x.size)
    return flat(x, shape)


@njit(cache=True, nogil=True)
def binary(LP, k, a, b, proto):
    """numpy's binary loop k on arrays a, b broadcast together; the result has proto's dtype."""
    shape = np.broadcast_shapes(a.shape, b.shape)
    out = np.empty(shape, proto.dtype)
    n = out.size
    fa, fb = _operand(a, shape, n), _operand(b, shape, n)
    _call(LP, k, fa.ctypes.data, fb.ctypes.data, out.ctypes.data, fa.itemsize if fa.size == n else 0,
          fb.itemsize if fb.size == n else 0, out.itemsize, n)
    return out


@njit(cache=True, nogil=True)
def unary(LP, k, a, proto):
    """numpy's unary loop k on array a; the result has proto's dtype."""
    # (a is read before the allocation, so numba's reference counts of it cancel; the caller keeps it alive)
    shape, pa, step = a.shape, P.address(a), a.itemsize
    out = np.empty(shape, proto.dtype)
    P.run(LP, k, (out.size,), (pa, P.address(out)), (step, out.itemsize))
    return out


@njit(cache=True, nogil=True)
def reduce3(LP, kr, kb, x, pre, n, post, first, ident):
    """x viewed as (pre, n, post) reduced over n, as a flat (pre * post) array, in numpy's order: a run
    along the last axis (post == 1) by the loop in reduce mode (numpy's pairwise sum), otherwise one
    elementwise step per slice in order. Starts from `ident`, or (first=True: max, min) the first slice."""
    flat = reshape(x, x.size)
    out = np.empty(pre * post, x.dtype)
    it = x.itemsize
    if first and n == 0:
        raise ValueError("zero-size array to a reduction operation that has no identity")
    for p in range(pre):
        base = p * n * post
        if post == 1:
            if first:
                out[p] = flat[base]
                start, cnt = base + 1, n - 1
            else:
                out[p] = ident
                start, cnt = base, n
            if cnt > 0:
                o = out.ctypes.data + p * it
                _call(LP, kr, o, flat.ctypes.data + start * it, o, 0, it, 0, cnt)
        else:
            ob = p * post
            if first:
                for q in range(post):
                    out[ob + q] = flat[base + q]
                i0 = 1
            else:
                for q in range(post):
                    out[ob + q] = ident
                i0 = 0
            o = out.ctypes.data + ob * it
            for i in range(i0, n):
                _call(LP, kb, o, flat.ctypes.data + (base + i * post) * it, o, it, it, it, post)
    return out


@njit(cache=True, nogil=True)
def float_to_int(x, lo, hi, bad):
    """numpy's (x86) float -> int cast of one value: truncation, `bad` (INT_MIN) when out of range or NaN."""
    if x >= lo and x < hi:
        return np.int64(x)
    return bad


@njit(cache=True, nogil=True)
def check_index(i, n):
    if i < -n or i >= n:
        raise IndexError("index out of range")
    return i + n if i < 0 else i


@njit(cache=True, nogil=True)
def unary_s(LP, k, x):
    """numpy's unary loop k on one scalar (its dtype in and out)."""
    return P.scalar(LP, k, (x,), x)


@njit(cache=True, nogil=True)
def binary_s(LP, k, x, y):
    """numpy's binary loop k on two scalars of one dtype (that dtype out)."""
    return P.scalar(LP, k, (x, y), x)


@njit(cache=True, nogil=True)
def grow(b):
    """b's elements in an array twice its size (a stack of scalars that is full: state_lower.py)."""
    out = np.empty(max(2 * b.size, 16), b.dtype)
    out[:b.size] = b
    return out


@njit(cache=True, nogil=True)
def extreme_all(LP, k, x, largest):
    """np.max (largest) or np.min of flat x, compared here as numpy's loop compares
    (math_lower._minmax_probe); a NaN result comes from numpy's reduce loop k, which decides which NaN's
    bits it keeps."""
    n = x.size
    if n == 0:
        raise ValueError("zero-size array to a reduction operation that has no identity")
    r = x[0]
    for i in range(1, n):
        y = x[i]
        if not ((r > y if largest else r < y) or r != r):
            r = y
    if r != r and n > 1:
        return P.reduce_all(LP, k, x, True, r)
    return r


# Signed integer arithmetic wraps as numpy's does. numba marks its signed +, -, * and negation "nsw" (no
# signed wrap), which lets LLVM assume they never overflow and drop a test such as `i >= 0` after `i + c`;
# the lowerings compute them in uint64 instead (defined to wrap, same low bits) and cast back to the signed
# type (a truncation to int32 keeps numpy's int32 wraparound too).

@njit(cache=True, nogil=True)
def wrap_neg(x):
    """-x of a signed integer scalar, as uint64 bits (MIN gives MIN's bits)."""
    return np.uint64(0) - np.uint64(x)


@njit(cache=True, nogil=True)
def wrap_abs(x):
    """numpy's abs of a signed integer scalar, as uint64 bits (abs(MIN) is MIN, as in numpy)."""
    return np.uint64(x) if x >= 0 else np.uint64(0) - np.uint64(x)


@njit(cache=True, nogil=True)
def int_floordiv(a, b):
    """numpy's floor_divide of two integer scalars, b != 0 (checked before): floor semantics, and
    MIN // -1 wraps to MIN as numpy's does (no trap)."""
    if b == -1:
        return np.int64(wrap_neg(a))    # (callers pass int64: an int32's quotient is cast back by them)
    return a // b


@njit(cache=True, nogil=True)
def int_mod(a, b):
    """numpy's remainder of two integer scalars, b != 0: the sign of b; MIN % -1 is 0."""
    if b == -1:
        return a - a
    return a % b


@njit(cache=True, nogil=True)
def sum_to_shape(LP, kr, kb, x, shape, ident):
    """array_kernels.sum_to_shape, flat: x summed over its leading axes, then (keeping them) over the
    axes where `shape` has 1 and x has not, each as numpy sums (reduce3's order). The second sum must
    cover one contiguous run of axes (numpy coalesces them into one); other cases raise, and the fused
    path computes them."""
    r = shape.size
    lead = x.ndim - r
    if lead < 0:
        raise ValueError("sum_to_shape: the target has more dimensions")
    n = 1
    for j in range(lead):
        n *= x.shape[j]
    dims = np.empty(r, np.int64)
    post = 1
    for j in range(r):
        dims[j] = x.shape[lead + j]
        post *= dims[j]
    y = reshape(x, x.size)
    if lead:
        y = reduce3(LP, kr, kb, x, 1, n, post, False, ident)
    a, b = -1, -1
    for j in range(r):
        if shape[j] == 1 and dims[j] != 1:
            if a < 0:
                a = j
            elif b != j - 1:
                raise ValueError("sum_to_shape: axes that are not one run")
            b = j
        elif shape[j] != dims[j]:
            raise ValueError("sum_to_shape: shapes do not match")
    if a < 0:
        return y
    pre, nn, post2 = 1, 1, 1
    for j in range(r):
        if j < a:
            pre *= dims[j]
        elif j <= b:
            nn *= dims[j]
        else:
            post2 *= dims[j]
    return reduce3(LP, kr, kb, y, pre, nn, post2, False, ident)


@njit(cache=True, nogil=True)
def ta_read(items, ok, i):
    """Element i of a TensorArray the frame reads (items: its elements, ok: which can be read); any other
    index raises, and the fused path reads it (or names the node in its error)."""
    if i < 0 or i >= len(items) or not ok[i]:
        raise IndexError("TensorArray element the compiled frame does not hold")
    return items[i]


@njit(cache=True, nogil=True)
def ta_new(proto, n):
    """A TensorArray made in compiled code: (its n elements, which are written); proto fills the unwritten."""
    if n < 0:
        raise ValueError("TensorArray of negative size")
    items, written = typed.List(), typed.List()
    for _ in range(n):
        items.append(proto)
        written.append(False)
    return items, written


@njit(cache=True, nogil=True)
def ta_write(items, written, i, v, dynamic):
    """Write element i once, as TensorArrayStore.write checks it (a dynamic array grows to hold i)."""
    if i < 0:
        raise IndexError("TensorArray index is negative")
    while i >= len(items):
        if not dynamic:
            raise IndexError("TensorArray index out of range")
        items.append(v)
        written.append(False)
    if written[i]:
        raise ValueError("TensorArray index written twice")
    items[i] = v
    written[i] = True


@njit(cache=True, nogil=True)
def _all_written(written):
    """The number of elements of a TensorArray made in compiled code, once each is checked written; an empty
    one raises (the fused path replays the run: the kernel's zeros of the element shape)."""
    n = len(written)
    if n == 0:
        raise ValueError("an empty TensorArray")
    for k in range(n):
        if not written[k]:
            raise ValueError("TensorArray element read before it was written")
    return n


@njit(cache=True, nogil=True)
def ta_stack(items, written):
    """The elements (arrays of one shape, all written) stacked along a new first axis."""
    n = _all_written(written)
    first = items[0]
    out = np.empty((n,) + first.shape, first.dtype)
    for k in range(n):
        if items[k].shape != first.shape:
            raise ValueError("TensorArray elements of different shapes")
        out[k] = items[k]
    return out


@njit(cache=True, nogil=True)
def ta_stack_scalars(items, written):
    """The scalar elements (all written) as a 1-D array."""
    n = _all_written(written)
    out = np.empty(n, type(items[0]))
    for k in range(n):
        out[k] = items[k]
    return out


@njit(cache=True, nogil=True)
def ta_concat(items, written):
    """The elements (arrays of one rank, all written, equal but in their first axis) joined along it."""
    n = _all_written(written)
    first = items[0]
    rows = 0
    for k in range(n):
        if items[k].shape[1:] != first.shape[1:]:
            raise ValueError("TensorArray elements of different shapes")
        rows += items[k].shape[0]
    out = np.empty((rows,) + first.shape[1:], first.dtype)
    r = 0
    for k in range(n):
        m = items[k].shape[0]
        out[r:r + m] = items[k]
        r += m
    return out


class _Ctx:
    """The part of the executor's KernelContext a kernel called from compiled code may read."""
    __slots__ = ("run_count", "tag")


_KERNELS = {}


def kernel_call(node, R, chain, args, ranks):
    """Run a node's own kernel from compiled code (numba object mode; codegen.Emit.kernel_call). node: JSON
    [name, op, attrs]; R: [run count, *tag of the frame's call]; chain: (frame, iteration) pairs from the
    compiled frame to the node's frame, so ctx.tag is the fused path's. Returns the tuple of its first
    len(ranks) outputs as compiled code holds them (a C-contiguous array, or a numpy scalar for rank 0)."""
    k = _KERNELS.get(node)
    if k is None:
        import json

        from dfc.ir.graph import Node
        from dfc.runtime.kernels.registry import KERNELS
        name, op, attrs = json.loads(node)
        k = _KERNELS[node] = KERNELS[op](Node(name, op, [], attrs), np)
    ctx = _Ctx()
    ctx.run_count = int(R[0])
    ctx.tag = tuple(int(x) for x in R[1:]) + tuple(int(x) for x in chain)
    vs = k(ctx, [np.asarray(a) for a in args])
    return tuple(np.asarray(v)[()] if nd == 0 else np.ascontiguousarray(v) for v, nd in zip(vs, ranks))


@njit(cache=True, nogil=True)
def to_list(a):
    """A typed List of a[0], a[1], ... of a non-empty C-contiguous array: the scalars of a 1-D one, views of
    the rows of another (a stack handed to compiled code, which never writes into the arrays it is given)."""
    lst = typed.List()
    for i in range(a.shape[0]):
        lst.append(a[i])
    return lst


@njit(cache=True, nogil=True)
def empty_list(proto):
    """An empty typed List for values of proto's type (typed.List.empty_list from Python costs ~0.1-0.3 ms)."""
    lst = typed.List()
    lst.append(proto)
    lst.pop()
    return lst


@njit(cache=True, nogil=True)
def list_to_scalars(lst, proto):
    """The scalars of a typed List as a 1-D array of proto's dtype."""
    out = np.empty(len(lst), proto.dtype)
    for i in range(len(lst)):
        out[i] = lst[i]
    return out


@njit(cache=True, nogil=True)
def list_to_rows(lst):
    """The arrays of a non-empty typed List stacked along a new first axis, and whether they all had one
    shape (if not, the result is not filled)."""
    first = lst[0]
    out = np.empty((len(lst),) + first.shape, first.dtype)
    flat = reshape(out, out.size)
    m = first.size
    for i in range(len(lst)):
        x = lst[i]
        if x.shape != first.shape:
            return out, False
        xf = reshape(x, m)
        b = i * m
        for j in range(m):          # (an element loop LLVM vectorizes: slice assignment is ~4x slower)
            flat[b + j] = xf[j]
    return out, True
