"""scan built by hand from a TensorArray and a while loop (Figure 2 of the paper), and its gradient.

    scan(fn, elems, init) == stack([a_1, ..., a_n]) where a_i = fn(a_{i-1}, elems[i]), a_0 = init

The elements are unstacked into a TensorArray, each iteration reads one,
applies fn and writes the new accumulator into a result TensorArray, which is
stacked at the end. Gradients flow back through the loop and both
TensorArrays (the gradient loop runs the iterations in reverse, §5).

    python samples/scan.py
    dfc compile samples/scan.py -o out           # -> out/prefix_sum.json, out/running_max.json, ...
    dfc run out/prefix_sum.json --input "xs=[1,2,3,4]" --json
"""
import numpy as np

import dfc


def scan(fn, elems, init):
    """Figure 2: a while_loop that reads elems[i] from one TensorArray and writes a_i to another."""
    n = dfc.shape(elems)[0]
    elem_ta = dfc.TensorArray(elems.dtype, size=n, dynamic_size=False).unstack(elems)
    result_ta = dfc.TensorArray(elems.dtype, size=n, dynamic_size=False)

    def body(i, a, ta):
        a = fn(a, elem_ta.read(i))
        return i + 1, a, ta.write(i, a)

    _, _, result_ta = dfc.while_loop(lambda i, a, ta: i < n, body, (0, init, result_ta))
    return result_ta.stack()


@dfc.function(input_signature=[dfc.TensorSpec([None], "float64")])
def prefix_sum(xs):
    """numpy.cumsum(xs)."""
    return scan(lambda a, x: a + x, xs, dfc.zeros([], "float64"))


@dfc.function(input_signature=[dfc.TensorSpec([None], "float64")])
def running_max(xs):
    """The same pattern written as plain Python: dfc.function turns the `while` into the loop above."""
    out = dfc.TensorArray("float64")
    best = xs[0]
    i = 0
    while i < dfc.shape(xs)[0]:
        best = dfc.maximum(best, xs[i])
        out = out.write(i, best)
        i += 1
    return out.stack()


@dfc.function(input_signature=[dfc.TensorSpec([None, None], "float64"), dfc.TensorSpec([None, None], "float64")])
def prefix_sum_grad(xs, ws):
    """d/dxs of sum(ws * cumsum(xs, axis=0)) -- analytically, the reversed cumulative sum of ws."""
    ys = scan(lambda a, x: a + x, xs, dfc.zeros_like(xs[0]))
    loss = dfc.reduce_sum(ws * ys)
    return loss, dfc.gradients(loss, [xs])[0]


@dfc.function(input_signature=[dfc.TensorSpec([None], "float64"), dfc.TensorSpec([], "float64")])
def ema_grad(xs, decay):
    """A nonlinear-in-parameters scan: exponential moving average a_i = decay * a_{i-1} + (1 - decay) * x_i.

    Returns the averages, and the gradient of sum(a_i ** 2) with respect to decay and to xs."""
    ys = scan(lambda a, x: decay * a + (1 - decay) * x, xs, xs[0])
    loss = dfc.reduce_sum(ys * ys)
    d_decay, d_xs = dfc.gradients(loss, [decay, xs])
    return ys, d_decay, d_xs


def ema_numpy(xs, decay):
    a, out = xs[0], []
    for x in xs:
        a = decay * a + (1 - decay) * x
        out.append(a)
    return np.array(out)


def numeric_grad(f, x, eps=1e-6):
    """Central finite differences of the scalar f at x (a numpy array or float)."""
    x = np.array(x, dtype=np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


def main():
    r = np.random.default_rng(0)
    xs = r.normal(size=7)
    got = prefix_sum(xs)
    assert np.allclose(got, np.cumsum(xs))
    print(f"prefix_sum of {len(xs)} numbers == numpy.cumsum: max |diff| {np.max(np.abs(got - np.cumsum(xs))):.1e}")

    assert np.array_equal(running_max(xs), np.maximum.accumulate(xs))
    print("running_max (plain Python while + TensorArray) == numpy.maximum.accumulate")

    x2, w2 = r.normal(size=(6, 3)), r.normal(size=(6, 3))
    loss, g = prefix_sum_grad(x2, w2)
    want = np.cumsum(w2[::-1], axis=0)[::-1]
    assert np.isclose(loss, np.sum(w2 * np.cumsum(x2, axis=0))) and np.allclose(g, want)
    print(f"gradient of sum(w * cumsum(x)) == reversed cumsum of w: max |diff| {np.max(np.abs(g - want)):.1e}")

    decay = 0.7
    ys, d_decay, d_xs = ema_grad(xs, decay)
    num_decay = numeric_grad(lambda d: np.sum(ema_numpy(xs, d) ** 2), decay)
    num_xs = numeric_grad(lambda x: np.sum(ema_numpy(x, decay) ** 2), xs)
    assert np.allclose(ys, ema_numpy(xs, decay)) and np.allclose(d_decay, num_decay, rtol=1e-5)
    assert np.allclose(d_xs, num_xs, rtol=1e-5, atol=1e-7)
    print(f"moving average: d/d decay {float(d_decay):.6f} (finite differences {float(num_decay):.6f}), "
          f"d/d xs max |diff| {np.max(np.abs(d_xs - num_xs)):.1e}")


if __name__ == "__main__":
    main()
