"""The gradient API as users meet it: nested xs for dfc.gradients, dfc.hvp and dfc.hessian (checked
against JAX and finite differences), and gradient errors that name the user's line and say what to do."""
import collections

import numpy as np
import pytest

import dfc
from tests.conftest import run_all_modes

S = dfc.TensorSpec
Params = collections.namedtuple("Params", "w b")


def _line(mark):
    return next(i for i, text in enumerate(open(__file__), 1) if f"# MARK: {mark}" in text)


# ------------------------------------------------------------ dfc.gradients on nested structures
def test_gradients_of_a_dict_with_nested_lists_namedtuples_and_tuples_keep_the_structure():
    def f(x, y, z):
        xs = {"x": x, "more": [Params(y, z), (x,)]}
        loss = dfc.reduce_sum(x * x) + dfc.reduce_sum(dfc.sin(y)) * z
        return dfc.gradients(loss, xs)

    g = dfc.trace(f, S([3], "float64"), S([2], "float64"), S([], "float64"))
    x, y, z = np.array([1.0, -2.0, 0.5]), np.array([0.3, 0.7]), np.float64(1.5)
    got = run_all_modes(g, x, y, z)
    # traced graphs return plain tuples; the structure itself is checked in the traced test below
    np.testing.assert_allclose(got["x"], 2 * x)
    (w, b), (x_again,) = got["more"]
    np.testing.assert_allclose(w, np.cos(y) * z)
    np.testing.assert_allclose(b, np.sin(y).sum())
    np.testing.assert_allclose(x_again, 2 * x)


def test_gradients_return_the_types_they_were_given():
    seen = {}

    def f(x, y):
        loss = dfc.reduce_sum(x * y)
        seen["one"] = dfc.gradients(loss, x)
        seen["list"] = dfc.gradients(loss, [x, y])
        seen["tuple"] = dfc.gradients(loss, (x, y))
        seen["named"] = dfc.gradients(loss, Params(x, y))
        seen["dict"] = dfc.gradients(loss, {"b": y, "a": x})
        seen["empty"] = dfc.gradients(loss, [])
        return seen["dict"], seen["named"]

    x, y = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    d, named = dfc.trace(f, S([2], "float64"), S([2], "float64"))(x, y)
    assert isinstance(seen["one"], dfc.Tensor)
    assert type(seen["list"]) is list and len(seen["list"]) == 2
    assert type(seen["tuple"]) is tuple and len(seen["tuple"]) == 2
    assert type(seen["named"]) is Params
    assert type(seen["dict"]) is dict and list(seen["dict"]) == ["b", "a"]
    assert seen["empty"] == []
    # the gradients are paired with the right keys and fields (d/dx = y, d/dy = x)
    np.testing.assert_array_equal(d["a"], y)
    np.testing.assert_array_equal(d["b"], x)
    np.testing.assert_array_equal(named[0], y)


def test_nested_gradients_of_variables_and_unconnected_leaves():
    w = dfc.Variable(np.array([1.0, 2.0]), name="api_w")

    def f(x):
        loss = dfc.reduce_sum(w * x * x)
        return (dfc.gradients(loss, {"w": w, "x": [x], "c": dfc.zeros([3], "float64")}),
                dfc.gradients(loss, {"c": [dfc.ones([2], "float64")]}, unconnected_gradients="zero"))

    g = dfc.trace(f, S([2], "float64"))
    x = np.array([3.0, -1.0])
    got, zeros = run_all_modes(g, x)
    np.testing.assert_allclose(got["w"], x * x)
    np.testing.assert_allclose(got["x"][0], 2 * np.array([1.0, 2.0]) * x)
    assert got["c"] is None
    np.testing.assert_array_equal(zeros["c"][0], np.zeros(2))


def test_nested_ys_and_grad_ys_pair_in_order():
    def f(x):
        ys = {"a": x * x, "b": [dfc.sin(x)]}
        return dfc.gradients(ys, {"x": x}, grad_ys={"a": dfc.ones_like(x) * 2.0, "b": [x]})

    x = np.array([0.4, -1.2])
    got = dfc.trace(f, S([2], "float64"))(x)
    np.testing.assert_allclose(got["x"], 2 * 2 * x + x * np.cos(x))


def test_value_and_grad_of_a_nested_argument_still_matches():
    def loss(p, x):
        return dfc.reduce_sum(dfc.tanh(x @ p["w"] + p["b"]))

    p = {"w": np.array([[0.5, -0.3], [0.2, 0.1]]), "b": np.array([0.1, 0.2])}
    x = np.array([[1.0, 2.0]])
    value, g = dfc.value_and_grad(loss)(p, x)
    t = 1 - np.tanh(x @ p["w"] + p["b"]) ** 2
    np.testing.assert_allclose(g["w"], x.T @ t)
    np.testing.assert_allclose(g["b"], t[0])


def test_value_and_grad_with_numpy_keyword_arguments_traces_them_as_inputs():
    traces = []

    def loss(x, scale, mode):
        traces.append(mode)
        return dfc.reduce_sum(x * x) * scale * (1.0 if mode == "plain" else 10.0)

    f = dfc.value_and_grad(loss)
    x = np.ones(2)
    np.testing.assert_allclose(f(x, scale=2.0, mode="plain")[1], [4.0, 4.0])
    np.testing.assert_allclose(f(x, scale=3.0, mode="plain")[1], [6.0, 6.0])    # was the first graph's 4
    np.testing.assert_allclose(f(x, mode="loud", scale=3.0)[1], [60.0, 60.0])
    assert traces == ["plain", "loud"]


# ------------------------------------------------------------ dfc.hvp and dfc.hessian
W = np.array([[0.5, -1.0, 0.3], [0.2, 0.4, -0.7], [1.1, 0.0, 0.6]])


def _f_dfc(x):
    h = dfc.tanh(dfc.reshape(x, [1, 3]) @ W)
    return dfc.reduce_sum(dfc.softmax(h) * dfc.sin(x)) + dfc.reduce_sum(x * x * x) / 3.0


def _f_jax(x):
    import jax
    import jax.numpy as jnp
    h = jnp.tanh(x.reshape(1, 3) @ W)
    return jnp.sum(jax.nn.softmax(h) * jnp.sin(x)) + jnp.sum(x ** 3) / 3.0


def _f_torch(x):
    import torch
    h = torch.tanh(x.reshape(1, 3) @ torch.from_numpy(W))
    return torch.sum(torch.softmax(h, -1) * torch.sin(x)) + torch.sum(x ** 3) / 3.0


@pytest.fixture
def jax64():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return jax


def _torch_hessian(f, x):
    """The Hessian from PyTorch (eager, so much cheaper to get than JAX's compiled one)."""
    torch = pytest.importorskip("torch")
    return torch.autograd.functional.hessian(f, torch.from_numpy(x)).numpy()


def test_hvp_matches_jax_jvp_of_grad(jax64):
    x, v = np.array([0.2, -0.4, 0.9]), np.array([1.0, -2.0, 0.5])
    want = jax64.jvp(jax64.grad(_f_jax), (x,), (v,))[1]
    np.testing.assert_allclose(dfc.hvp(_f_dfc, x, v), want, rtol=1e-10)


def test_hessian_matches_torch_and_finite_differences():
    x = np.array([0.2, -0.4, 0.9])
    H = dfc.hessian(_f_dfc)(x)
    np.testing.assert_allclose(H, _torch_hessian(_f_torch, x), rtol=1e-10, atol=1e-12)
    grad = dfc.value_and_grad(_f_dfc)
    eps = 1e-6
    fd = np.stack([(grad(x + eps * e)[1] - grad(x - eps * e)[1]) / (2 * eps) for e in np.eye(3)])
    np.testing.assert_allclose(H, fd, rtol=1e-6, atol=1e-8)


def test_hessian_of_a_matrix_argument_has_shape_x_by_x_and_argnums_picks_it():
    a = np.array([[1.0, 2.0], [0.5, -1.0]])
    x = np.array([[0.3, -0.2], [0.4, 0.1]])
    H = dfc.hessian(lambda a, x: dfc.reduce_sum(dfc.exp(a * x) * x), argnums=1)(a, x)
    assert H.shape == (2, 2, 2, 2)
    # elementwise in x: H[i, j, i, j] = d2/dx2 exp(a x) x = (a^2 x + 2 a) exp(a x), zero elsewhere
    want = np.diag(((a * a * x + 2 * a) * np.exp(a * x)).reshape(-1)).reshape(2, 2, 2, 2)
    np.testing.assert_allclose(H, want, rtol=1e-12)


@pytest.mark.parametrize("x0", [np.array([0.5, 0.25]), np.array([-0.5, 0.25])])
def test_hessian_and_hvp_through_a_converted_if_on_a_tensor(x0):
    def f(x):
        if dfc.reduce_sum(x) > 0:
            y = dfc.reduce_sum(x * x * x) * x[0]
        else:
            y = dfc.reduce_sum(dfc.sin(x) * x)
        return y

    a, b = x0
    if a + b > 0:                 # x0 * (x0^3 + x1^3)
        want = np.array([[12 * a * a, 3 * b * b], [3 * b * b, 6 * a * b]])
    else:
        want = np.diag(2 * np.cos(x0) - x0 * np.sin(x0))
    np.testing.assert_allclose(dfc.hessian(f)(x0), want, rtol=1e-12)
    v = np.array([1.0, 3.0])
    np.testing.assert_allclose(dfc.hvp(f, x0, v), want @ v, rtol=1e-12)


def test_hvp_of_a_nested_structure_matches_jax(jax64):
    import jax.numpy as jnp
    p = {"w": np.array([[0.5, -0.3], [0.2, 0.1]]), "b": Params(np.array([0.1, 0.2]), np.float64(0.7))}
    v = {"w": np.array([[1.0, 0.0], [-1.0, 2.0]]), "b": Params(np.array([0.5, -0.5]), np.float64(2.0))}
    x = np.array([[1.0, 2.0], [-0.5, 0.3]])

    def f(p):
        return dfc.reduce_sum(dfc.tanh(x @ p["w"] + p["b"].w) * p["b"].b ** 2.0)

    def fj(p):
        return jnp.sum(jnp.tanh(x @ p["w"] + p["b"].w) * p["b"].b ** 2.0)

    got = dfc.hvp(f, p, v)
    want = jax64.jvp(jax64.grad(fj), (p,), (v,))[1]
    assert type(got) is dict and type(got["b"]) is Params
    for a, b in zip(dfc.nest.flatten(got), dfc.nest.flatten(want)):
        np.testing.assert_allclose(a, b, rtol=1e-10)


def test_hvp_and_hessian_inside_traced_code_on_every_path():
    def f(x):
        return dfc.reduce_sum(dfc.exp(x) * x[0])

    def traced(x, v):
        return dfc.hvp(f, x, v), dfc.hessian(f)(x)

    g = dfc.trace(traced, S([2], "float64"), S([2], "float64"))
    x, v = np.array([0.5, -1.0]), np.array([2.0, 1.0])
    hv, H = run_all_modes(g, x, v)
    e = np.exp(x)
    want = np.diag(e * x[0]) + np.array([[2 * e[0], e[1]], [e[1], 0.0]])
    np.testing.assert_allclose(H, want, rtol=1e-12)
    np.testing.assert_allclose(hv, want @ v, rtol=1e-12)


def test_hvp_with_a_variable_among_the_leaves():
    w = dfc.Variable(np.array([1.0, 2.0]), name="api_hvp_w")

    def traced(x, v):
        return dfc.hvp(lambda p: dfc.reduce_sum(p["w"] ** 3.0 * p["x"]), {"w": w, "x": x}, {"w": v, "x": v})

    x, v = np.array([1.0, -1.0]), np.array([1.0, 0.5])
    got = dfc.trace(traced, S([None], "float64"), S([None], "float64"))(x, v)
    w0 = np.array([1.0, 2.0])
    np.testing.assert_allclose(got["w"], 6 * w0 * x * v + 3 * w0 ** 2 * v)    # H_ww v_w + H_wx v_x
    np.testing.assert_allclose(got["x"], 3 * w0 ** 2 * v)                     # H_xw v_w


def test_linear_and_constant_functions_have_zero_second_derivatives():
    x, v = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    np.testing.assert_array_equal(dfc.hvp(lambda x: dfc.reduce_sum(x * 3.0), x, v), np.zeros(2))
    np.testing.assert_array_equal(dfc.hessian(lambda x: dfc.constant(1.0, "float64"))(x), np.zeros((2, 2)))
    got = dfc.hvp(lambda p: dfc.reduce_sum(p[0] * p[0]) + dfc.reduce_sum(p[1]), [x, x], [v, v])
    np.testing.assert_allclose(got[0], 2 * v)
    np.testing.assert_array_equal(got[1], np.zeros(2))


def test_numpy_calls_trace_once_per_signature():
    traces = []

    def f(x):
        traces.append(1)
        return dfc.reduce_sum(x ** 4.0)

    h = dfc.hessian(f)
    for x in (np.array([1.0, 2.0]), np.array([3.0, -1.0])):
        np.testing.assert_allclose(h(x), np.diag(12 * x ** 2))
        np.testing.assert_allclose(dfc.hvp(f, x, np.ones(2)), 12 * x ** 2)
    assert len(traces) == 2            # one trace for h, one for dfc.hvp of f
    h(np.array([1.0, 2.0, 3.0]))       # a new shape is a new signature
    assert len(traces) == 3


def test_hvp_and_hessian_through_a_tensor_while_loop(jax64):
    import jax.numpy as jnp

    def f(x, n):
        i, s = 0, x
        while i < n:
            s = dfc.sin(s) * x
            i += 1
        return dfc.reduce_sum(s)

    def fj(x):
        s = x
        for _ in range(3):
            s = jnp.sin(s) * x
        return jnp.sum(s)

    x, v = np.array([0.3, 0.8]), np.array([1.0, -1.0])
    n = np.int32(3)                                    # a graph input: the loop is a dfc.while_loop
    g = dfc.trace(lambda x, v, n: dfc.hvp(lambda x: f(x, n), x, v), S([2], "float64"), S([2], "float64"),
                  S([], "int32"))
    np.testing.assert_allclose(g(x, v, n), jax64.jvp(jax64.grad(fj), (x,), (v,))[1], rtol=1e-10)
    torch = pytest.importorskip("torch")

    def ft(x):
        s = x
        for _ in range(3):
            s = torch.sin(s) * x
        return torch.sum(s)
    np.testing.assert_allclose(dfc.hessian(f)(x, n), _torch_hessian(ft, x), rtol=1e-10)


# ------------------------------------------------------------ errors: the user's line and what to do
def _refused(fn, specs, mark, advice, exc=dfc.DfcError):
    with pytest.raises(exc) as info:
        dfc.trace(fn, *specs)
    msg = str(info.value)
    assert f"{__file__}:{_line(mark)}" in msg, msg
    assert advice in msg, msg


def _in_loop(step):
    """step(x) summed over a tensor while loop (the gradient rule then runs inside a gradient loop)."""
    def f(x, shape, n):
        s = dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + step(x, shape)),
                           (0, dfc.zeros([], "float64")))[1]
        return dfc.gradients(s, x)
    return f


def _reduce_negative_axis(x, shape):
    return dfc.reduce_sum(dfc.reduce_sum(dfc.reshape(x, shape), axis=-1))  # MARK: negative-axis


def _concat_unknown_rank(x, shape):
    y = dfc.reshape(x, shape)
    return dfc.reduce_sum(dfc.concat([y, y], axis=0))  # MARK: concat


def _qr_unknown_size(x, shape):
    return dfc.reduce_sum(dfc.linalg.qr(dfc.reshape(x, dfc.concat([shape[:1], [2]], 0)))[1])  # MARK: qr-size


def _qr_wide(x, shape):
    return dfc.reduce_sum(dfc.linalg.qr(dfc.reshape(x, [2, 3]))[1])  # MARK: qr-wide


def _tensor_array_concat(x, shape):
    ta = dfc.TensorArray("float64", size=2).write(0, x).write(1, x)
    return dfc.reduce_sum(ta.concat())  # MARK: ta-concat


RULE_ERRORS = [(_reduce_negative_axis, "negative-axis", "use non-negative axes"),
               (_concat_unknown_rank, "concat", "give them one"),
               (_qr_unknown_size, "qr-size", "give the matrix a full shape"),
               (_qr_wide, "qr-wide", "the qr of its transpose"),
               (_tensor_array_concat, "ta-concat", "use TensorArray.stack()")]


@pytest.mark.parametrize("step,mark,advice", RULE_ERRORS, ids=[m for _, m, _ in RULE_ERRORS])
@pytest.mark.parametrize("in_loop", [False, True], ids=["straight", "in-loop"])
def test_a_gradient_rule_refusal_names_the_users_line_and_what_to_do(step, mark, advice, in_loop):
    if in_loop:
        fn = _in_loop(step)
    else:
        def fn(x, shape, n):
            return dfc.gradients(step(x, shape), x)
    _refused(fn, [S([6], "float64"), S([None], "int64"), S([], "int32")], mark, advice)


def test_second_derivative_of_cumprod_names_the_first_gradient_and_an_alternative():
    def f(x):
        g = dfc.gradients(dfc.reduce_sum(dfc.cumprod(x)), x)  # MARK: cumprod
        return dfc.gradients(dfc.reduce_sum(g), x)
    _refused(f, [S([3], "float64")], "cumprod", "dfc.exp(dfc.cumsum(dfc.log(x)))")


def test_refusals_inside_a_converted_function_name_the_users_line():
    @dfc.function
    def f(x, shape, n):
        s = dfc.zeros([], "float64")
        for _ in range(n):
            y = dfc.reshape(x, shape)
            s += dfc.reduce_sum(dfc.concat([y, y], axis=-1))  # MARK: concat-converted
        return dfc.gradients(s, x)
    with pytest.raises(dfc.DfcError) as info:
        f.trace(S([6], "float64"), S([None], "int64"), S([], "int32"))
    assert f"{__file__}:{_line('concat-converted')}" in str(info.value)


def test_a_constant_among_xs_is_refused_with_what_to_do():
    def f(x):
        return dfc.gradients(dfc.reduce_sum(x), {"x": x, "w": np.ones(2)})  # MARK: numpy-x
    _refused(f, [S([2], "float64")], "numpy-x", "pass it to the traced function as an argument",
             exc=dfc.DfcTypeError)


def test_differentiating_with_respect_to_a_loop_body_value_says_where_to_call_gradients():
    kept = []

    def f(x):
        def body(i, s):
            kept.append(s * 2.0)
            return i + 1, kept[-1]
        dfc.while_loop(lambda i, s: i < 3, body, (0, x))

        def body2(i, s):
            return i + 1, s + dfc.gradients(s * s, kept[0])  # MARK: inside
        return dfc.while_loop(lambda i, s: i < 3, body2, (0, x))[1]
    _refused(f, [S([2], "float64")], "inside", "call dfc.gradients there")


def test_hessian_and_hvp_refusals_name_the_users_line_and_what_to_do():
    def nonscalar(x):
        return dfc.hessian(lambda x: x * x)(x)  # MARK: nonscalar
    _refused(nonscalar, [S([2], "float64")], "nonscalar", "reduce it (dfc.reduce_sum) first")

    def unknown(x):
        return dfc.hessian(lambda x: dfc.reduce_sum(x * x))(x)  # MARK: unknown-shape
    _refused(unknown, [S([None], "float64")], "unknown-shape", "use dfc.hvp(f, x, v)")

    def integer(x):
        return dfc.hvp(lambda x: dfc.reduce_sum(x), x, x)  # MARK: int-x
    _refused(integer, [S([2], "int64")], "int-x", "pass x as floats", exc=dfc.DfcTypeError)

    def mismatch(x):
        return dfc.hvp(lambda p: dfc.reduce_sum(p[0] * p[1]), [x, x], [x])  # MARK: structure
    _refused(mismatch, [S([2], "float64")], "structure", "v must have x's structure")

    def nested(x):
        return dfc.hessian(lambda p: dfc.reduce_sum(p[0] * p[1]))([x, x])  # MARK: nested-hessian
    _refused(nested, [S([2], "float64")], "nested-hessian", "use dfc.hvp(f, x, v)", exc=dfc.DfcTypeError)
