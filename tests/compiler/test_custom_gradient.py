"""dfc.custom_gradient: the user's gradient function replaces differentiation of the function's ops, in
traced code, in converted tensor loops and conds (forward values it reads are saved on stacks), on every
execution path and after a save/load round trip."""
import inspect

import numpy as np
import pytest

import dfc
from dfc.runtime.session import Session
from tests.conftest import run_all_modes

F32, F64, I32 = "float32", "float64", "int32"


def _line(fn, text):
    """'file:line' of the first line of fn's source containing text."""
    fn = inspect.unwrap(fn)
    lines, first = inspect.getsourcelines(fn)
    k = next(i for i, s in enumerate(lines) if text in s)
    return f"{inspect.getsourcefile(fn)}:{first + k}"


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


@dfc.custom_gradient
def log1pexp(x):
    e = dfc.exp(x)

    def grad_fn(dy):
        return dy * (1 - 1 / (1 + e))         # sigmoid(x) from the forward intermediate e
    return dfc.where(x > 30.0, x, dfc.log1p(e)), grad_fn


def naive_log1pexp(x):
    return dfc.where(x > 30.0, x, dfc.log1p(dfc.exp(x)))


def _recurrence(softplus):
    """s <- s + softplus(x * (i + 1) - s), n times (n a tensor): each iteration's saved values differ."""
    @dfc.function
    def f(x, n):
        s = dfc.zeros_like(x)
        i = 0
        while i < n:
            s = s + softplus(x * dfc.cast(i + 1, x.dtype) - s)
            i += 1
        return dfc.reduce_sum(s)
    return f


def _recurrence_grad(x, n):
    """The value and analytic gradient of _recurrence, in float64 numpy."""
    s, ds = np.zeros_like(x), np.zeros_like(x)
    for i in range(n):
        u = x * (i + 1) - s
        s, ds = s + np.logaddexp(0, u), ds + _sigmoid(u) * ((i + 1) - ds)
    return s.sum(), ds


def _value_and_grad_graph(f, *specs):
    return dfc.trace(lambda x, n: dfc.value_and_grad(lambda x: f(x, n))(x), *specs)


def test_log1pexp_in_a_tensor_loop_matches_the_analytic_gradient_and_finite_differences():
    f = _recurrence(log1pexp)
    g = _value_and_grad_graph(f, dfc.TensorSpec([3], F64), dfc.TensorSpec([], I32))
    x, n = np.array([0.3, -1.2, 2.0]), np.int32(4)
    value, grad = run_all_modes(g, x, n)
    want_value, want_grad = _recurrence_grad(x, 4)
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-10)
    sess = Session(g)
    eps = 1e-6
    fd = [(sess.call(x + eps * d, n)[0] - sess.call(x - eps * d, n)[0]) / (2 * eps) for d in np.eye(3)]
    np.testing.assert_allclose(grad, fd, rtol=1e-6)
    # grad_fn's forward intermediate e is pushed in the loop and popped in the gradient loop
    assert any(node.op == "StackPush" for node in g.nodes.values())


def test_log1pexp_gradient_is_finite_at_100_where_the_naive_gradient_is_nan():
    x, n = np.array([100.0, 1.0], np.float32), np.int32(3)
    specs = (dfc.TensorSpec([2], F32), dfc.TensorSpec([], I32))
    _, naive = Session(_value_and_grad_graph(_recurrence(naive_log1pexp), *specs)).call(x, n)
    assert np.isnan(naive[0])
    value, grad = run_all_modes(_value_and_grad_graph(_recurrence(log1pexp), *specs), x, n)
    assert np.all(np.isfinite(grad)) and np.isfinite(value)
    want_value, want_grad = _recurrence_grad(x.astype(np.float64), 3)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-5)
    np.testing.assert_allclose(value, want_value, rtol=1e-6)


@dfc.custom_gradient
def ste_round(x):
    return dfc.round(x), lambda dy: dy        # straight-through: round forward, identity backward


def test_straight_through_estimator_in_a_tensor_loop():
    @dfc.function
    def f(x, w, n):
        h = x
        i = 0
        while i < n:
            h = ste_round(h * w) + 0.25
            i += 1
        return dfc.reduce_sum(h * h)

    g = dfc.trace(lambda x, w, n: dfc.value_and_grad(lambda x, w: f(x, w, n), argnums=(0, 1))(x, w),
                  dfc.TensorSpec([3], F64), dfc.TensorSpec([], F64), dfc.TensorSpec([], I32))
    x, w = np.array([0.7, -2.2, 3.1]), np.float64(1.5)
    value, (gx, gw) = run_all_modes(g, x, w, np.int32(3))
    h, dh_dx, dh_dw = x.copy(), np.ones(3), np.zeros(3)     # forward and tangents with d round = 1
    for _ in range(3):
        h, dh_dx, dh_dw = np.round(h * w) + 0.25, dh_dx * w, dh_dw * w + h
    np.testing.assert_allclose(value, np.sum(h * h))
    np.testing.assert_allclose(gx, 2 * h * dh_dx)
    np.testing.assert_allclose(gw, np.sum(2 * h * dh_dw))
    assert np.any(gx != 0)                                   # Round alone has no gradient


@dfc.custom_gradient
def mul(y, a):
    def grad_fn(dy):
        return dy * a, dy * y
    return y * a, grad_fn


def test_grad_fn_reads_values_of_the_loop_around_the_loop_it_is_in():
    """The marker sits in an inner loop; `a` is a value of the outer loop's body: saved there, popped in the
    outer gradient loop, entered into the inner one."""
    @dfc.function
    def f(x, n, m):
        s = x
        j = 0
        while j < n:
            a = x * dfc.cast(j + 1, "float64")
            k = 0
            while k < m:
                s = dfc.sin(mul(s, a))
                k += 1
            j += 1
        return dfc.reduce_sum(s)

    g = dfc.trace(lambda x, n, m: dfc.value_and_grad(lambda x: f(x, n, m))(x),
                  dfc.TensorSpec([2], F64), dfc.TensorSpec([], I32), dfc.TensorSpec([], I32))

    def numpy_f(x):
        s = x.copy()
        for j in range(2):
            for _ in range(3):
                s = np.sin(s * x * (j + 1))
        return s.sum()
    x = np.array([0.3, -0.2])
    value, grad = run_all_modes(g, x, np.int32(2), np.int32(3))
    eps = 1e-6
    fd = [(numpy_f(x + eps * d) - numpy_f(x - eps * d)) / (2 * eps) for d in np.eye(2)]
    np.testing.assert_allclose(value, numpy_f(x), rtol=1e-12)
    np.testing.assert_allclose(grad, fd, rtol=1e-6)


def test_grad_fn_with_its_own_tensor_loop_reading_a_forward_intermediate():
    """grad_fn's loop is traced twice (its accumulator starts as a Python 0): the intermediate e it reads
    is routed into the gradient loop outside that loop, so the second trace does not lose the stack."""
    @dfc.custom_gradient
    def exp_(x):
        e = dfc.exp(x)

        def grad_fn(dy):
            g = 0
            k = 0
            while k < dfc.size(e):          # a tensor loop of 2 trips, each adding half the gradient
                g += dy * e * 0.5
                k += 1
            return g
        return e, grad_fn

    @dfc.function
    def f(x, n):
        i = 0
        while i < n:
            x = exp_(x) * 0.5
            i += 1
        return dfc.reduce_sum(x)

    g = dfc.trace(lambda x, n: dfc.value_and_grad(lambda x: f(x, n))(x), dfc.TensorSpec([2], F64),
                  dfc.TensorSpec([], I32))

    def numpy_f(x):
        for _ in range(3):
            x = np.exp(x) * 0.5
        return x.sum()
    x = np.array([0.1, -0.3])
    value, grad = run_all_modes(g, x, np.int32(3))
    eps = 1e-6
    np.testing.assert_allclose(value, numpy_f(x), rtol=1e-12)
    np.testing.assert_allclose(grad, [(numpy_f(x + eps * d) - numpy_f(x - eps * d)) / (2 * eps) for d in np.eye(2)],
                               rtol=1e-6)


def test_in_a_converted_cond_and_with_structured_arguments_and_values():
    @dfc.custom_gradient
    def pair(p, scale):          # p: dict of tensors; scale: a static Python number (no gradient)
        def grad_fn(du, dv):
            return {"a": du * 2.0 * scale, "b": dv * 3.0}, None      # deliberately not d(value)
        return (p["a"] * p["b"], p["b"] + 1.0), grad_fn

    @dfc.function
    def f(a, b):
        if dfc.reduce_sum(a) > 0:
            u, v = pair({"a": a, "b": b}, 5.0)
            out = u + v * v
        else:
            out = a * b
        return dfc.reduce_sum(out)

    g = dfc.trace(lambda a, b: dfc.value_and_grad(f, argnums=(0, 1))(a, b),
                  dfc.TensorSpec([2], F64), dfc.TensorSpec([2], F64))
    a, b = np.array([1.0, 2.0]), np.array([0.5, -1.0])
    _, (ga, gb) = run_all_modes(g, a, b)
    np.testing.assert_allclose(ga, np.full(2, 10.0))                 # du = 1 -> 2 * 5
    np.testing.assert_allclose(gb, 3.0 * 2 * (b + 1.0))              # dv = 2v -> 3 dv
    _, (ga, gb) = run_all_modes(g, -a, b)                            # the other branch: plain gradient
    np.testing.assert_allclose(ga, b)
    np.testing.assert_allclose(gb, -a)


def test_gradients_at_the_top_level_and_an_unused_value_gets_zero_upstream():
    seen = []

    @dfc.custom_gradient
    def two(x):
        def grad_fn(d1, d2):
            seen.append((d1, d2))
            return d1 * 7.0 + d2
        return [x * 2.0, x * 3.0], grad_fn

    def fn(x):
        y = two(x)[0]
        return y, dfc.gradients(y, x)
    g = dfc.trace(fn, dfc.TensorSpec([2], F32))
    y, gx = run_all_modes(g, np.array([1.0, 2.0], np.float32))
    np.testing.assert_array_equal(y, [2.0, 4.0])
    np.testing.assert_array_equal(gx, [7.0, 7.0])
    assert len(seen) == 1 and seen[0][1] is not None


def test_value_and_grad_called_with_numpy_values_and_eagerly():
    vg = dfc.value_and_grad(lambda x: dfc.reduce_sum(ste_round(x * 3.0)))
    value, grad = vg(np.array([0.4, 1.1]))
    np.testing.assert_allclose(value, 4.0)
    np.testing.assert_allclose(grad, [3.0, 3.0])
    np.testing.assert_allclose(ste_round(np.array([0.4, 1.6])), [0.0, 2.0])    # eager: the value


def test_a_saved_and_loaded_graph_computes_the_same_gradient(tmp_path):
    f = _recurrence(log1pexp)
    g = _value_and_grad_graph(f, dfc.TensorSpec([3], F64), dfc.TensorSpec([], I32))
    dfc.save(g, str(tmp_path / "g.json"))
    h = dfc.load(str(tmp_path / "g.json"))
    assert any(node.op == "CustomGradient" for node in h.nodes.values())
    x, n = np.array([0.3, -1.2, 2.0]), np.int32(4)
    want = Session(g).call(x, n)
    got = run_all_modes(h, x, n)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_allclose(got[1], _recurrence_grad(x, 4)[1], rtol=1e-10)


# ---------------------------------------------------------------- errors name the user's line

def _grad_graph(fn, *specs):
    return dfc.trace(lambda *a: dfc.gradients(fn(*a), list(a)), *specs)


def test_wrong_number_of_gradients():
    @dfc.custom_gradient
    def f(x, y):
        def grad_fn(dz):
            return dz
        return x * y, grad_fn

    with pytest.raises(dfc.DfcError, match="returned 1 gradients; it must return 2") as e:
        _grad_graph(f, dfc.TensorSpec([2], F32), dfc.TensorSpec([2], F32))
    assert _line(f, "def grad_fn") in str(e.value)


def test_wrong_gradient_shape_static_in_a_loop():
    @dfc.custom_gradient
    def f(x):
        def grad_fn(dy):
            return dfc.reduce_sum(dy)
        return x * 2.0, grad_fn

    @dfc.function
    def loop(x, n):
        i = 0
        while i < n:
            x = f(x)
            i += 1
        return x

    with pytest.raises(dfc.DfcError, match=r"shape \[\] for argument 0 of shape \[3\]") as e:
        _grad_graph(loop, dfc.TensorSpec([3], F32), dfc.TensorSpec([], I32))
    assert _line(f, "def grad_fn") in str(e.value)


def test_wrong_gradient_shape_known_only_when_it_runs():
    @dfc.custom_gradient
    def f(x):
        def grad_fn(dy):
            return dfc.concat([dy, dy], 0)
        return x * 2.0, grad_fn

    g = dfc.trace(lambda x: dfc.gradients(dfc.reduce_sum(f(x)), x), dfc.TensorSpec([None], F32))
    with pytest.raises(dfc.DfcError, match="returned a gradient of shape other than its argument 0's"):
        Session(g).call(np.ones(3, np.float32))


def test_a_tensor_read_from_outside_without_being_an_argument():
    def fn(x, w):
        w2 = w * 1.0

        @dfc.custom_gradient
        def f(x):
            return x * w2, lambda dy: dy * w2
        return f(x)

    with pytest.raises(dfc.DfcError, match=r"reads tensor .* made outside it, and the gradient depends on it") \
            as e:
        dfc.trace(lambda x, w: dfc.gradients(fn(x, w), [x, w]), dfc.TensorSpec([2], F32), dfc.TensorSpec([2], F32))
    assert _line(fn, "return f(x)") in str(e.value)
    # when nobody asks for the gradient of w, reading it is fine
    g = dfc.trace(lambda x, w: dfc.gradients(fn(x, w), x), dfc.TensorSpec([2], F32), dfc.TensorSpec([2], F32))
    np.testing.assert_array_equal(Session(g).call(np.ones(2, np.float32), np.full(2, 3.0, np.float32)), [3, 3])


def test_a_differentiated_input_or_variable_read_without_being_an_argument():
    def fn(x, w):
        @dfc.custom_gradient
        def f(x):
            return x * w, lambda dy: dy * w          # w is differentiated below, but not f's argument
        return f(x)

    with pytest.raises(dfc.DfcError, match="reads tensor w:0, made outside it, and the gradient depends") as e:
        dfc.trace(lambda x, w: dfc.gradients(fn(x, w), [x, w]), dfc.TensorSpec([2], F32), dfc.TensorSpec([2], F32))
    assert _line(fn, "return f(x)") in str(e.value)

    v = dfc.Variable(np.full(2, 3.0, np.float32))

    @dfc.custom_gradient
    def g(x):
        w = v.read_value()
        return x * w, lambda dy: dy * w

    @dfc.custom_gradient
    def g_arg(x, w):
        return x * w, lambda dy: (dy * w, dy * x * 10.0)

    @dfc.function
    def h(x0, n, as_argument):
        x = x0
        i = 0
        while i < n:
            x = g_arg(x, v.read_value()) if as_argument else g(x)
            i += 1
        return dfc.gradients(dfc.reduce_sum(x), [x0, v])

    with pytest.raises(dfc.DfcError, match="reads dfc.Variable .* and the gradient depends on it"):
        h(np.ones(2, np.float32), np.int32(2), False)
    gx, gv = h(np.ones(2, np.float32), np.int32(2), True)
    np.testing.assert_allclose(gx, [9.0, 9.0])
    np.testing.assert_allclose(gv, [3.0 * 10.0 + 1.0 * 3.0 * 10.0] * 2)    # iteration 2 (x=3), then 1 (x=1)


def test_grad_fn_reading_a_value_from_inside_a_cond_of_the_function():
    @dfc.custom_gradient
    def f(x):
        box = []

        def branch():
            t = dfc.exp(x)
            box.append(t)
            return t
        y = dfc.cond(dfc.reduce_sum(x) > 0, branch, lambda: x)

        def grad_fn(dy):
            return dy * box[0]
        return y, grad_fn

    @dfc.function
    def loop(x, n):
        i = 0
        while i < n:
            x = f(x)
            i += 1
        return x

    with pytest.raises(dfc.DfcError, match="reads tensor .* made inside") as e:
        _grad_graph(loop, dfc.TensorSpec([2], F32), dfc.TensorSpec([], I32))
    assert _line(f, "return dy * box[0]") in str(e.value)


def test_not_returning_a_pair():
    @dfc.custom_gradient
    def f(x):
        return x * 2.0

    with pytest.raises(dfc.DfcError, match=r"must return \(value, grad_fn\)") as e:
        dfc.trace(lambda x: f(x), dfc.TensorSpec([2], F32))
    assert __file__ in str(e.value)


def test_the_xla_prototype_runs_a_graph_with_a_custom_gradient():
    pytest.importorskip("jax")
    from dfc.runtime.xla import to_jax
    g = _value_and_grad_graph(_recurrence(log1pexp), dfc.TensorSpec([3], F64), dfc.TensorSpec([], I32))
    x, n = np.array([0.3, -1.2, 2.0]), np.int32(4)
    got, want = to_jax(g)(x, n), Session(g, mode="reference").call(x, n)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-11)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-11)


def test_forward_mode_and_second_order_through_a_custom_gradient():
    """dfc.jvp and dfc.hvp differentiate through the custom gradient (its grad_fn defines the derivative)."""
    @dfc.custom_gradient
    def softplus(x):
        e = dfc.exp(x)

        def grad(dy):
            return dy * (1 - 1 / (1 + e))
        return dfc.log(1 + e), grad

    def f(x):
        return dfc.reduce_sum(softplus(x) * x)
    x, v = np.array([0.3, -1.2]), np.array([1.0, 2.0])
    s = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(dfc.jvp(f, (x,), (v,))[1], np.sum((s * x + np.log1p(np.exp(x))) * v), rtol=1e-12)
    np.testing.assert_allclose(dfc.hvp(f, x, v), (s * (1 - s) * x + 2 * s) * v, rtol=1e-12)
