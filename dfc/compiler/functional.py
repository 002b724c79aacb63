"""scan, map_fn and foldl built on while_loop + TensorArray (Figure 2 of the paper)."""
from dfc import nest
from dfc.compiler.tracing import convert
from dfc.compiler.control_flow import while_loop
from dfc.compiler.tensor_array import TensorArray
from dfc.compiler import ops_api


def _unstacked(elems):
    flat = [convert(e) for e in nest.flatten(elems)]
    n = ops_api.shape(flat[0])[0]
    tas = [TensorArray(e.dtype, size=n, dynamic_size=False,
                       element_shape=None if e.shape is None else e.shape[1:]).unstack(e) for e in flat]
    return flat, n, tas


def scan(fn, elems, initializer=None, parallel_iterations=32):
    """Equivalent Python: acc = initializer; ys = []; for x in elems: acc = fn(acc, x); ys.append(acc);
    return stack(ys). Without an initializer the first element starts the accumulator."""
    flat, n, tas = _unstacked(elems)
    start = 0
    if initializer is None:
        initializer = nest.pack_sequence_as(elems, [ta.read(0) for ta in tas])
        start = 1
    init_flat = [convert(a) for a in nest.flatten(initializer)]
    outs = [TensorArray(a.dtype, size=n, dynamic_size=False, element_shape=a.shape) for a in init_flat]
    if start:
        outs = [o.write(0, a) for o, a in zip(outs, init_flat)]

    def body(i, acc, outs):
        x = nest.pack_sequence_as(elems, [ta.read(i) for ta in tas])
        new = fn(nest.pack_sequence_as(initializer, acc), x)
        new_flat = [convert(v, a.dtype) for v, a in zip(nest.flatten(new), init_flat)]
        return i + 1, new_flat, [o.write(i, v) for o, v in zip(outs, new_flat)]

    _, _, outs = while_loop(lambda i, acc, outs: i < n, body,
                            (convert(start, "int64"), init_flat, outs),
                            parallel_iterations=parallel_iterations)
    return nest.pack_sequence_as(initializer, [o.stack() for o in outs])


def map_fn(fn, elems, dtype=None, parallel_iterations=32):
    """Equivalent Python: stack([fn(x) for x in elems])."""
    flat, n, tas = _unstacked(elems)
    def cond(i, out):
        return i < n

    out_dtype = dtype or flat[0].dtype
    out = TensorArray(out_dtype, size=n, dynamic_size=False)

    def body(i, out):
        y = convert(fn(nest.pack_sequence_as(elems, [ta.read(i) for ta in tas])), out_dtype)
        return i + 1, out.write(i, y)

    _, out = while_loop(cond, body, (convert(0, "int64"), out), parallel_iterations=parallel_iterations)
    return out.stack()


def foldl(fn, elems, initializer=None, parallel_iterations=32):
    """Equivalent Python: acc = initializer; for x in elems: acc = fn(acc, x); return acc."""
    flat, n, tas = _unstacked(elems)
    start = 0
    if initializer is None:
        initializer, start = tas[0].read(0), 1
    init_flat = [convert(a) for a in nest.flatten(initializer)]

    def body(i, acc):
        x = nest.pack_sequence_as(elems, [ta.read(i) for ta in tas])
        new = fn(nest.pack_sequence_as(initializer, acc), x)
        return i + 1, [convert(v, a.dtype) for v, a in zip(nest.flatten(new), init_flat)]

    _, acc = while_loop(lambda i, acc: i < n, body, (convert(start, "int64"), init_flat),
                        parallel_iterations=parallel_iterations)
    return nest.pack_sequence_as(initializer, acc)
