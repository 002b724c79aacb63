"""dfc.jvp: forward mode through loops (data-dependent trip counts, nesting), conds, TensorArrays, scan,
and forward-over-reverse Hessian-vector products; checked against central finite differences of the same
graph (float64) and against jax.jvp where JAX can run the program."""
import numpy as np
import pytest

import dfc
from tests.conftest import run_all_modes

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp, lax = jax.numpy, jax.lax

F64 = "float64"


def spec(a):
    return dfc.TensorSpec(np.shape(a), np.asarray(a).dtype.name)


def jvp_graph(f, primals, tangents, statics=()):
    """Trace (primals, tangents, statics) -> dfc.jvp(f(., *statics), primals, tangents); the graph verifies."""
    n = len(primals)

    def traced(*a):
        return dfc.jvp(lambda *p: f(*p, *a[2 * n:]), tuple(a[:n]), tuple(a[n:2 * n]))
    g = dfc.trace(traced, *[spec(a) for a in list(primals) + list(tangents) + list(statics)])
    g.verify()
    return g


def finite_difference(g, primals, tangents, statics=(), eps=1e-6):
    """Central difference of the graph's value along the tangents (the same graph, tangent part ignored)."""
    def value(s):
        ps = [p + s * t for p, t in zip(primals, tangents)]
        return g(*ps, *tangents, *statics)[0]
    hi, lo = value(eps), value(-eps)
    return [(np.asarray(a) - np.asarray(b)) / (2 * eps) for a, b in zip(_flat(hi), _flat(lo))]


def _flat(x):
    return dfc.nest.flatten(x)


def check(f, primals, tangents, statics=(), jax_f=None, modes=False, rtol=1e-6, atol=1e-8):
    g = jvp_graph(f, primals, tangents, statics)
    args = list(primals) + list(tangents) + list(statics)
    value, tangent = run_all_modes(g, *args) if modes else g(*args)
    for got, want in zip(_flat(tangent), finite_difference(g, primals, tangents, statics)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    if jax_f is not None:
        jv, jt = jax.jvp(jax_f, tuple(primals), tuple(tangents))
        for got, want in zip(_flat(value), jax.tree_util.tree_leaves(jv)):
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
        for got, want in zip(_flat(tangent), jax.tree_util.tree_leaves(jt)):
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return value, tangent


X = np.array([0.3, -0.2, 0.5])
V = np.array([1.0, 0.5, -2.0])


def test_elementwise_chain_in_python_values():
    x, v = np.float64(0.5), np.float64(1.0)
    y, t = dfc.jvp(lambda x: dfc.sin(x) * x, (x,), (v,))
    np.testing.assert_allclose(y, np.sin(0.5) * 0.5, rtol=1e-12)
    np.testing.assert_allclose(t, np.cos(0.5) * 0.5 + np.sin(0.5), rtol=1e-12)


def test_while_loop_with_data_dependent_trip_count():
    def f(x, limit):
        while dfc.reduce_sum(x * x) < limit:      # the trip count depends on x's value
            x = x * 1.3 + 0.2 * dfc.sin(x)
        return x

    def jf(x):
        return lax.while_loop(lambda x: jnp.sum(x * x) < 7.0, lambda x: x * 1.3 + 0.2 * jnp.sin(x), x)
    check(f, (X,), (V,), (np.float64(7.0),), jax_f=jf, modes=True)


def test_nested_loops_with_tensor_trip_counts():
    def f(x, n, m):
        i = 0
        while i < n:
            j = 0
            while j < m + i:
                x = dfc.tanh(x) + 0.1 * x * x
                j += 1
            x = x * 0.9
            i += 1
        return dfc.reduce_sum(x * x), x

    def jf(x):
        def outer(i, x):
            x = lax.fori_loop(0, 2 + i, lambda j, x: jnp.tanh(x) + 0.1 * x * x, x)
            return x * 0.9
        x = lax.fori_loop(0, 3, outer, x)
        return jnp.sum(x * x), x
    check(f, (X,), (V,), (np.int64(3), np.int64(2)), jax_f=jf)


def test_cond_inside_loop():
    def f(x, n):
        for i in range(n):
            if dfc.reduce_sum(x) > 0:
                x = x * x * 0.5 - 0.3
            else:
                x = dfc.sin(x) + 0.4
        return x

    def jf(x):
        return lax.fori_loop(0, 5, lambda i, x: lax.cond(jnp.sum(x) > 0, lambda x: x * x * 0.5 - 0.3,
                                                         lambda x: jnp.sin(x) + 0.4, x), x)
    check(f, (X,), (V,), (np.int64(5),), jax_f=jf)


def test_tensor_array_and_scan():
    xs = np.linspace(-1.0, 1.0, 12).reshape(4, 3)
    vs = np.cos(np.arange(12.0)).reshape(4, 3)

    def f(h, xs, n):
        ta = dfc.TensorArray(F64, size=0)
        i = 0
        while i < n:
            h = dfc.tanh(h * xs[i] + 0.5)
            ta = ta.write(i, h * h)
            i += 1
        acc = dfc.scan(lambda a, x: a * 0.5 + dfc.exp(x * 0.1), ta.stack(), initializer=h)
        return acc

    def jf(h, xs):
        def step(h, x):
            h = jnp.tanh(h * x + 0.5)
            return h, h * h
        h, hs = lax.scan(step, h, xs)
        def acc_step(a, x):
            a = a * 0.5 + jnp.exp(x * 0.1)
            return a, a
        return lax.scan(acc_step, h, hs)[1]
    check(f, (X, xs), (V, vs), (np.int64(4),), jax_f=jf)


def test_rnn_step_loop_with_structured_primals():
    rng = np.random.default_rng(0)
    params = {"W": rng.normal(size=(3, 3)) * 0.5, "h0": rng.normal(size=(1, 3))}
    dparams = {"W": rng.normal(size=(3, 3)), "h0": rng.normal(size=(1, 3))}
    xs = rng.normal(size=(5, 1, 3))

    def f(p, xs, n):
        h = p["h0"]
        for t in range(n):
            h = dfc.tanh(h @ p["W"] + xs[t])
        return {"h": h, "loss": dfc.reduce_mean(h * h)}

    def jf(p):
        h = lax.fori_loop(0, 5, lambda t, h: jnp.tanh(h @ p["W"] + jnp.asarray(xs)[t]), p["h0"])
        return {"h": h, "loss": jnp.mean(h * h)}

    def traced(W, h0, dW, dh0, xs, n):
        return dfc.jvp(lambda p: f(p, xs, n), ({"W": W, "h0": h0},), ({"W": dW, "h0": dh0},))
    args = [params["W"], params["h0"], dparams["W"], dparams["h0"], xs, np.int64(5)]
    g = dfc.trace(traced, *[spec(a) for a in args])
    value, tangent = g(*args)
    assert set(value) == {"h", "loss"} and set(tangent) == {"h", "loss"}
    eps = 1e-6
    hi = g(args[0] + eps * args[2], args[1] + eps * args[3], *args[2:])[0]
    lo = g(args[0] - eps * args[2], args[1] - eps * args[3], *args[2:])[0]
    for k in ("h", "loss"):
        np.testing.assert_allclose(tangent[k], (hi[k] - lo[k]) / (2 * eps), rtol=1e-6, atol=1e-9)
    jv, jt = jax.jvp(jf, (params,), (dparams,))
    for k in ("h", "loss"):
        np.testing.assert_allclose(value[k], jv[k], rtol=1e-10)
        np.testing.assert_allclose(tangent[k], jt[k], rtol=1e-8, atol=1e-12)


def _loss(x, n):
    def body(i, h):
        return i + 1, dfc.tanh(h * 1.3) + 0.1 * h * h
    _, h = dfc.while_loop(lambda i, h: i < n, body, (0, x))
    return dfc.reduce_sum(h * h)


def test_hessian_vector_product_forward_over_reverse_through_while_loop():
    n = np.int64(4)
    hvp = jvp_graph(lambda x, n: dfc.gradients(_loss(x, n), x), (X,), (V,), (n,))
    grad, hv = run_all_modes(hvp, X, V, n)
    grad_graph = dfc.trace(lambda x, n: dfc.gradients(_loss(x, n), x), spec(X), spec(n))
    eps = 1e-6
    fd = (grad_graph(X + eps * V, n) - grad_graph(X - eps * V, n)) / (2 * eps)
    np.testing.assert_allclose(hv, fd, rtol=1e-6, atol=1e-8)

    def jloss(x):
        h = lax.fori_loop(0, 4, lambda i, h: jnp.tanh(h * 1.3) + 0.1 * h * h, x)
        return jnp.sum(h * h)
    jg, jhv = jax.jvp(jax.grad(jloss), (X,), (V,))
    np.testing.assert_allclose(grad, jg, rtol=1e-10)
    np.testing.assert_allclose(hv, jhv, rtol=1e-8, atol=1e-12)


def test_inside_dfc_function():
    @dfc.function
    def f(x, v, n):
        def g(x):
            i = 0
            while i < n:              # a tensor loop over a closed-over trip count
                x = x * dfc.cos(x)
                i += 1
            return x
        return dfc.jvp(g, (x,), (v,))
    _, t = f(X, V, np.int64(1))
    np.testing.assert_allclose(t, (np.cos(X) - X * np.sin(X)) * V, rtol=1e-12)


def test_closed_over_values_are_constants():
    def traced(x, v):
        c = x * 2.0
        return dfc.jvp(lambda y: y * c, (x,), (v,))
    g = dfc.trace(traced, spec(X), spec(V))
    _, t = g(X, V)
    np.testing.assert_allclose(t, 2.0 * X * V, rtol=1e-12)     # not 4 x v: c is a constant of f


def test_output_independent_of_primals_has_zero_tangent():
    y, t = dfc.jvp(lambda x: (x * 2.0, dfc.constant(np.ones(2))), (X,), (V,))
    np.testing.assert_allclose(t[0], 2 * V)
    np.testing.assert_array_equal(t[1], np.zeros(2))


@pytest.mark.parametrize("tangent, match", [
    (np.zeros(3, np.float32), r"tangent 0 is float32\[3\] but its primal is float64\[3\]"),
    (np.zeros(4), r"tangent 0 is float64\[4\] but its primal is float64\[3\]"),
])
def test_tangent_mismatch_is_a_clear_error(tangent, match):
    with pytest.raises(dfc.DfcError, match=match) as e:
        dfc.jvp(lambda x: x * 2.0, (X,), (tangent,))
    assert "test_jvp.py" in str(e.value)


def test_tangent_mismatch_in_traced_code_names_the_line():
    def traced(x, v):
        return dfc.jvp(lambda x: x * 2.0, (x,), (v,))
    with pytest.raises(dfc.DfcError, match=r"tangent 0 is float64\[2\] but its primal is float64\[3\]") as e:
        dfc.trace(traced, spec(X), dfc.TensorSpec([2], F64))
    assert "test_jvp.py" in str(e.value)


def test_integer_primal_is_a_clear_error():
    with pytest.raises(dfc.DfcError, match="primal 0 is int64") as e:
        dfc.jvp(lambda n: n * 2, (np.int64(3),), (np.int64(1),))
    assert "test_jvp.py" in str(e.value)


def test_primals_must_be_tuples():
    with pytest.raises(dfc.DfcError, match="tuples"):
        dfc.jvp(lambda x: x, X, V)


# ---------------------------------------------------------------- forward over reverse, more programs

def _cond_in_loop(x, n):
    # the branches compute values the gradient saves: the reverse mode lifts them out of the cond to push them
    def body(i, h):
        h = dfc.cond(dfc.reduce_sum(h) > 0, lambda: dfc.sin(dfc.exp(h * 0.7) * h),
                     lambda: dfc.tanh(h * h + 0.4) * 2.0)
        return i + 1, h
    return dfc.reduce_sum(dfc.while_loop(lambda i, h: i < n, body, (0, x))[1] ** 2)


def _nested(x, n):
    def outer(i, h):
        h = dfc.while_loop(lambda j, h: j < i + 2, lambda j, h: (j + 1, dfc.tanh(h) + 0.1 * h * h), (0, h))[1]
        return i + 1, h * 0.9
    return dfc.reduce_sum(dfc.while_loop(lambda i, h: i < n, outer, (0, x))[1] ** 2)


def _tensor_array(x, n):
    def body(i, h, ta):
        h = dfc.tanh(h * 1.2 + 0.1)
        return i + 1, h, ta.write(i, h * h)
    _, h, ta = dfc.while_loop(lambda i, h, ta: i < n, body, (0, x, dfc.TensorArray(F64, size=0)))
    s = ta.stack()
    return dfc.reduce_sum(s * s * s) + dfc.reduce_sum(h)     # the gradient array holds x-dependent values


def _scan(x, n):
    xs = dfc.reshape(dfc.cast(dfc.range(0, n * 3), F64), [-1, 3]) * 0.1
    acc = dfc.scan(lambda a, e: dfc.tanh(a * x + e), xs, initializer=x)
    return dfc.reduce_sum(acc * acc)


def _powers(x, n):
    # ops without a forward rule of their own: their JVP is their VJP transposed
    def body(i, h):
        return i + 1, h ** 3.0 * 0.5 + dfc.reduce_max(h) * h + dfc.reduce_prod(h + 2.0) * 0.1
    return dfc.reduce_sum(dfc.while_loop(lambda i, h: i < n, body, (0, x))[1])


@pytest.mark.parametrize("loss", [_cond_in_loop, _nested, _tensor_array, _scan, _powers])
def test_hessian_vector_products_of_loop_programs(loss):
    n = np.int64(3)
    hvp = jvp_graph(lambda x, n: dfc.gradients(loss(x, n), x), (X,), (V,), (n,))
    _, hv = hvp(X, V, n)
    grad_graph = dfc.trace(lambda x, n: dfc.gradients(loss(x, n), x), spec(X), spec(n))
    eps = 1e-6
    fd = (grad_graph(X + eps * V, n) - grad_graph(X - eps * V, n)) / (2 * eps)
    np.testing.assert_allclose(hv, fd, rtol=1e-6, atol=1e-7 * max(1.0, np.max(np.abs(fd))))


def test_gradient_of_a_tangent_through_a_loop():
    # the tangent variables are variables of the loop: the reverse mode differentiates through them
    def traced(x, v, n):
        _, t = dfc.jvp(lambda x: _loss(x, n), (x,), (v,))
        return dfc.gradients(t, x)
    g = dfc.trace(traced, spec(X), spec(V), spec(np.int64(4)))
    hvp = jvp_graph(lambda x, n: dfc.gradients(_loss(x, n), x), (X,), (V,), (np.int64(4),))
    np.testing.assert_allclose(g(X, V, np.int64(4)), hvp(X, V, np.int64(4))[1], rtol=1e-10)


def test_common_ops_and_fallback_ops_against_jax():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(3, 4)), rng.normal(size=(4, 3))
    da, db = rng.normal(size=(3, 4)), rng.normal(size=(4, 3))

    def ops(m, a, b):
        c = m.matmul(a, b)
        return [m.concat([a, b.T], 0), m.stack([a, b.T], 1), a[1:, ::2], m.where(a > 0, a, b.T * 2.0),
                m.maximum(a, b.T), m.minimum(a, 0.1), c / (1.5 + m.abs(c)), m.sqrt(a * a + 1.0), m.exp(-a * a),
                m.log1p(b * b), m.tanh(c) * m.sigmoid(c), m.reshape(m.transpose(b), [2, 6]), m.cos(a) ** 3.0,
                m.mean(a, 1), m.max(b, 0), m.prod(a + 2.0, 1), m.cumsum(a, 1), m.square(m.sin(b)),
                m.einsum("ij,jk->ik", a, b), m.relu(a - b.T), 1.0 / (a * a + 2.0)]

    class D:
        matmul, concat, stack, where, maximum, minimum = dfc.matmul, dfc.concat, dfc.stack, dfc.where, \
            dfc.maximum, dfc.minimum
        abs, sqrt, exp, log1p, tanh, sigmoid, reshape = dfc.abs, dfc.sqrt, dfc.exp, dfc.log1p, dfc.tanh, \
            dfc.sigmoid, dfc.reshape
        transpose, cos, sin, square, einsum, relu = dfc.transpose, dfc.cos, dfc.sin, dfc.square, dfc.einsum, dfc.relu
        mean, max, prod, cumsum = dfc.reduce_mean, dfc.reduce_max, dfc.reduce_prod, dfc.cumsum

    class J:
        matmul, concat, stack, where, maximum, minimum = jnp.matmul, jnp.concatenate, jnp.stack, jnp.where, \
            jnp.maximum, jnp.minimum
        abs, sqrt, exp, log1p, tanh, sigmoid, reshape = jnp.abs, jnp.sqrt, jnp.exp, jnp.log1p, jnp.tanh, \
            jax.nn.sigmoid, jnp.reshape
        transpose, cos, sin, square, einsum, relu = jnp.transpose, jnp.cos, jnp.sin, jnp.square, jnp.einsum, \
            jax.nn.relu
        mean, max, prod, cumsum = jnp.mean, jnp.max, jnp.prod, jnp.cumsum
    _, got = dfc.jvp(lambda a, b: ops(D, a, b), (a, b), (da, db))
    _, want = jax.jit(lambda *p: jax.jvp(lambda a, b: ops(J, a, b), p[:2], p[2:]))(a, b, da, db)
    assert len(got) == len(want)
    for k, (x, y) in enumerate(zip(got, want)):
        np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-12, err_msg=f"output {k}")


def test_jvp_inside_a_loop_body_newton():
    def newton(x0, target):
        def body(i, x):
            y, dy = dfc.jvp(lambda x: x * x * x - target, (x,), (dfc.ones_like(x),))
            return i + 1, x - y / dy
        return dfc.while_loop(lambda i, x: i < 20, body, (0, x0))[1]
    g = dfc.trace(newton, spec(np.float64(1.0)), spec(np.float64(8.0)))
    np.testing.assert_allclose(g(np.float64(1.0), np.float64(8.0)), 2.0, rtol=1e-12)


def test_jvp_of_a_float32_loop_inside_a_cond_branch():
    def f(x, v, n):
        def inner(x):
            i = dfc.constant(0, "int64")
            return dfc.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, dfc.sin(x) * 1.1), (i, x))[1]
        return dfc.cond(n > 1, lambda: dfc.jvp(inner, (x,), (v,))[1], lambda: v)
    x, v = np.array([0.3, 0.4], np.float32), np.array([1.0, -2.0], np.float32)
    g = dfc.trace(f, spec(x), spec(v), spec(np.int64(3)))
    got = g(x, v, np.int64(3))
    h, d = x.astype(np.float64), v.astype(np.float64)
    for _ in range(3):
        h, d = np.sin(h) * 1.1, d * np.cos(h) * 1.1
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, d, rtol=1e-5)


# ---------------------------------------------------------------- loop shapes the tangent variables must fit

def _accumulate_from_python_zero(x, n):
    s, i = 0.0, 0          # s's tangent starts at zero: its tangent variable starts from zeros
    while i < n:
        s += x * x
        i += 1
    return s


def _invariant_next_value(x, n):
    # the next value is a loop invariant: its tangent must still run once per iteration
    return dfc.while_loop(lambda i, h: i < n, lambda i, h: (i + 1, x * 2.0), (0, x * 0.0))[1]


def _maximum_iterations_serial(x, n):
    return dfc.while_loop(lambda i, h: dfc.reduce_sum(h) < 100.0, lambda i, h: (i + 1, h * 1.5 + 1.0), (0, x),
                          maximum_iterations=n, parallel_iterations=1)[1]


def _break_out(x, n):
    for _ in range(n):
        if dfc.reduce_sum(x) > 3.0:
            break
        x = x * 1.4 + dfc.sin(x)
    return x


def _tensor_array_made_in_the_loop(x, n):
    def outer(i, h):
        ta = dfc.TensorArray(F64, size=0)
        ta = dfc.while_loop(lambda j, ta: j < 3,
                            lambda j, ta: (j + 1, ta.write(j, h * dfc.cast(j + 1, F64))), (0, ta))[1]
        return i + 1, dfc.reduce_sum(ta.stack(), 0) * 0.3
    return dfc.while_loop(lambda i, h: i < n, outer, (0, x))[1]


def _swapped_gradient(x, n):
    body = (lambda i, h: (i + 1, dfc.tanh(h) * 1.2))
    h = dfc.while_loop(lambda i, h: i < n, body, (0, x), swap_memory=True)[1]
    return dfc.gradients(dfc.reduce_sum(h ** 3.0), x)


@pytest.mark.parametrize("f", [_accumulate_from_python_zero, _invariant_next_value, _maximum_iterations_serial,
                               _break_out, _tensor_array_made_in_the_loop, _swapped_gradient])
def test_loop_variants_against_finite_differences(f):
    check(f, (X,), (V,), (np.int64(4),))


def test_tensor_array_with_constant_elements():
    # element 0 does not depend on x: the tangent array must still hold (zeros) there when it is read
    def f(x, n):
        ta = dfc.TensorArray(F64, size=0).write(0, dfc.ones([3], F64))
        ta = dfc.while_loop(lambda i, ta: i < n, lambda i, ta: (i + 1, ta.write(i, x * dfc.cast(i, F64))),
                            (1, ta))[1]
        return ta.write(n, dfc.zeros([3], F64)).stack()
    _, t = check(f, (X,), (V,), (np.int64(3),))
    np.testing.assert_allclose(t, [0 * V, V, 2 * V, 0 * V], rtol=1e-12)


def test_structure_mismatch_and_rule_errors_name_the_line():
    with pytest.raises(dfc.DfcError, match="different structures") as e:
        dfc.jvp(lambda x: x, (X,), ({"a": V},))
    assert "test_jvp.py" in str(e.value)
    with pytest.raises(dfc.DfcError, match="second derivative of cumprod") as e:
        dfc.jvp(lambda x: dfc.gradients(dfc.reduce_sum(dfc.cumprod(x)), x), (X,), (V,))
    assert "test_jvp.py" in str(e.value)


def test_forward_over_forward_through_cond_in_loop_survives_save_and_load(tmp_path):
    def f(x, n):
        def body(i, h):
            return i + 1, dfc.cond(dfc.reduce_sum(h) > 0, lambda: dfc.sin(h) * 1.3, lambda: h * h + 0.2)
        return dfc.while_loop(lambda i, h: i < n, body, (0, x))[1]
    n = np.int64(4)
    second = jvp_graph(lambda x, n: dfc.jvp(lambda x: f(x, n), (x,), (V,))[1], (X,), (V,), (n,))
    first = jvp_graph(f, (X,), (V,), (n,))
    eps = 1e-5
    fd = (first(X + eps * V, V, n)[1] - first(X - eps * V, V, n)[1]) / (2 * eps)
    np.testing.assert_allclose(second(X, V, n)[1], fd, rtol=1e-6)
    dfc.save(second, tmp_path / "g.json")
    np.testing.assert_array_equal(dfc.load(tmp_path / "g.json")(X, V, n)[1], second(X, V, n)[1])


def test_shape_and_nn_ops_against_jax():
    rng = np.random.default_rng(2)
    a, da = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    idx, order = np.array([2, 0, 2]), np.argsort(rng.normal(size=(3, 4)), axis=1)

    def d(a):
        return [dfc.softmax(a), dfc.log_softmax(a, 0), dfc.log(a * a + 1.0), dfc.gather(a, idx, 1),
                dfc.expand_dims(a, 1), dfc.squeeze(dfc.reshape(a, [3, 1, 4]), 1), dfc.unstack(a, axis=1)[2],
                dfc.split(a, 2, axis=1)[1], dfc.take_along_axis(a, order, 1), dfc.broadcast_to(a[0], [2, 4]),
                dfc.reduce_sum(a, 0), dfc.cast(dfc.cast(a, "float32"), F64), dfc.reciprocal(a + 3.0),
                dfc.negative(a) - a[:, :1]]

    def j(a):
        return [jax.nn.softmax(a), jax.nn.log_softmax(a, 0), jnp.log(a * a + 1.0), jnp.take(a, idx, 1),
                jnp.expand_dims(a, 1), jnp.squeeze(a.reshape(3, 1, 4), 1), a[:, 2], jnp.split(a, 2, axis=1)[1],
                jnp.take_along_axis(a, order, 1), jnp.broadcast_to(a[0], (2, 4)), jnp.sum(a, 0),
                a.astype(jnp.float32).astype(jnp.float64), 1.0 / (a + 3.0), -a - a[:, :1]]
    _, got = dfc.jvp(d, (a,), (da,))
    _, want = jax.jit(lambda a, da: jax.jvp(j, (a,), (da,)))(a, da)
    for k, (x, y) in enumerate(zip(got, want)):
        np.testing.assert_allclose(x, y, rtol=1e-6 if k == 11 else 1e-10, atol=1e-6 if k == 11 else 1e-12,
                                   err_msg=f"output {k}")


def test_hessian_vector_product_through_indexing_gradients():
    # the first gradient holds GetItemGrad, ScatterAdd and TakeAlongAxisGrad: linear in their first input
    order = np.array([2, 0, 1])

    def loss(x):
        return dfc.reduce_sum(dfc.sin(x[1:]) * dfc.gather(x, [0, 0])) + \
            dfc.reduce_sum(dfc.take_along_axis(x * x * x, order, 0) * x)

    def jloss(x):
        return jnp.sum(jnp.sin(x[1:]) * jnp.take(x, jnp.array([0, 0]))) + \
            jnp.sum(jnp.take_along_axis(x ** 3, order, 0) * x)
    _, hv = dfc.jvp(lambda x: dfc.gradients(loss(x), x), (X,), (V,))
    _, want = jax.jvp(jax.grad(jloss), (X,), (V,))
    np.testing.assert_allclose(hv, want, rtol=1e-10)
