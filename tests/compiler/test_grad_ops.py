"""Every op of the registry has a gradient rule or an explicit declaration; each rule vs finite differences."""
import numpy as np
import pytest

import dfc
from dfc.compiler import ops_api as K
from dfc.compiler.autodiff.op_grads import GRADS, NOT_DIFFERENTIABLE, STRUCTURAL
from dfc.ir import ops as opreg
from _gradcheck import check

rng = np.random.default_rng(42)


def test_every_op_has_a_rule_or_a_declaration():
    missing = [op for op in opreg.REGISTRY if op not in GRADS and op not in NOT_DIFFERENTIABLE
               and op not in STRUCTURAL]
    assert not missing, f"ops with neither a gradient rule nor a NOT_DIFFERENTIABLE entry: {missing}"
    both = set(GRADS) & (NOT_DIFFERENTIABLE | STRUCTURAL)
    assert not both
    assert set(GRADS) <= set(opreg.REGISTRY)


def _a(*shape, positive=False, lo=None):
    x = rng.normal(size=shape)
    if positive:
        x = np.abs(x) + 0.5
    return x


UNARY = {
    "negative": K.negative, "abs": K.abs, "square": K.square, "exp": K.exp, "sin": K.sin, "cos": K.cos,
    "tanh": K.tanh, "sigmoid": K.sigmoid, "relu": K.relu, "identity": K.identity,
    "sqrt": (K.sqrt, True), "rsqrt": (K.rsqrt, True), "log": (K.log, True), "log1p": (K.log1p, True),
    "reciprocal": (K.reciprocal, True),
    "softmax": lambda x: K.softmax(x, axis=1), "log_softmax": lambda x: K.log_softmax(x, axis=0),
    "sum": lambda x: K.reduce_sum(x, axis=1), "sum_all": K.reduce_sum,
    "sum_keep": lambda x: K.reduce_sum(x, axis=0, keepdims=True), "mean": lambda x: K.reduce_mean(x, axis=[0]),
    "mean_all": K.reduce_mean, "max": lambda x: K.reduce_max(x, axis=1), "min": K.reduce_min,
    "prod": lambda x: K.reduce_prod(x, axis=0),
    "reshape": lambda x: K.reshape(x, [6]), "transpose": K.transpose,
    "transpose_perm": lambda x: K.transpose(K.reshape(x, [1, 2, 3]), [2, 0, 1]),
    "expand_dims": lambda x: K.expand_dims(x, 1), "squeeze": lambda x: K.squeeze(K.reshape(x, [2, 1, 3]), 1),
    "getitem": lambda x: x[1, ::2], "getitem_dyn": lambda x: x[:, K.constant(1)],
    "getitem_tensor": lambda x: x[K.constant([1, 1, 0])],
    "gather": lambda x: K.gather(x, K.constant([2, 0, 2]), axis=1),
    "concat": lambda x: K.concat([x, x * 2.0, x[:, :1]], axis=1),
    "stack": lambda x: K.stack([x, K.sin(x)], axis=1),
    "unstack": lambda x: K.unstack(x)[1] * 3.0, "unstack_all": lambda x: K.stack(K.unstack(x, axis=1)),
    "broadcast_to": lambda x: K.broadcast_to(x, [4, 2, 3]),
    "cast": lambda x: K.cast(K.cast(x, "float32"), "float64"),
    "fill": lambda x: K.fill([2, 2], K.reduce_sum(x)),
    "getitem_grad": lambda x: dfc.gradients(K.reduce_sum(K.square(x[1]) * x[0]), x),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name):
    fn = UNARY[name]
    positive = False
    if isinstance(fn, tuple):
        fn, positive = fn
    tol = 3e-2 if name == "cast" else 1e-6   # float32 in the middle: finite differences are coarse
    check(fn, _a(2, 3, positive=positive), rtol=tol * 10, atol=tol)


BINARY = {
    "add": K.add, "subtract": K.subtract, "multiply": K.multiply, "divide": K.divide,
    "maximum": K.maximum, "minimum": K.minimum, "mod": K.mod,
    "pow": K.pow, "matmul_bcast": lambda a, b: a * b,
    "where": lambda a, b: K.where(a > b, a * a, b),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_with_broadcasting(name):
    a, b = _a(2, 3), _a(3)
    if name == "pow":
        a = np.abs(a) + 0.5
    if name == "divide":
        b = np.abs(b) + 0.5
    if name == "mod":
        a, b = np.abs(a) * 3 + 0.1, np.abs(b) + 0.7
    check(BINARY[name], a, b)


@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
def test_matmul(ta, tb):
    a = _a(3, 2) if ta else _a(2, 3)
    b = _a(4, 3) if tb else _a(3, 4)
    check(lambda x, y: K.matmul(x, y, transpose_a=ta, transpose_b=tb), a, b)


def test_batched_matmul_broadcasts():
    check(lambda x, y: K.matmul(x, y), _a(2, 2, 3), _a(3, 4))


def test_scatter_add_and_sum_to_shape():
    from dfc.compiler.tracing import current_builder

    def f(x):
        b = current_builder()
        s = b.make1("ScatterAdd", (K.constant(np.array([4, 3], np.int64)), K.constant([0, 2]), x))
        return b.make1("SumToShape", (s * s, K.constant(np.array([1, 3], np.int64))))
    check(f, _a(2, 3))


def test_variable_gradient():
    v = dfc.Variable(np.array([1.0, 2.0, 3.0]))

    def f(x):
        y = dfc.reduce_sum(v.read_value() * x + dfc.square(v.read_value()))
        return y, dfc.gradients(y, [v, x])
    g = dfc.trace(f, dfc.TensorSpec([3], "float64"))
    _, (gv, gx) = g(np.array([0.5, -1.0, 2.0]))
    np.testing.assert_allclose(gv, [0.5 + 2, -1.0 + 4, 2.0 + 6])
    np.testing.assert_allclose(gx, [1.0, 2.0, 3.0])


def test_unconnected_stop_gradient_and_grad_ys():
    def f(x, z):
        y = x * 3.0 + dfc.stop_gradient(x * x)
        g1 = dfc.gradients(y, [x, z])
        g2 = dfc.gradients(y, [x, z], unconnected_gradients="zero")
        g3 = dfc.gradients([y, y * 2.0], x, grad_ys=[K.ones_like(x), 0.5 * K.ones_like(x)])
        assert g1[1] is None
        return g1[0], g2[1], g3
    g = dfc.trace(f, dfc.TensorSpec([2], "float64"), dfc.TensorSpec([2], "float64"))
    a, b, c = g(np.ones(2), np.ones(2))
    np.testing.assert_allclose(a, [3, 3])
    np.testing.assert_allclose(b, [0, 0])
    np.testing.assert_allclose(c, [6, 6])


def test_value_and_grad_in_trace_and_eagerly():
    vg = dfc.value_and_grad(lambda x, y: dfc.reduce_sum(x * x * y), argnums=(0, 1))
    g = dfc.trace(lambda x, y: vg(x, y), dfc.TensorSpec([2], "float64"), dfc.TensorSpec([2], "float64"))
    v, (gx, gy) = g(np.array([1.0, 2.0]), np.array([3.0, 4.0]))
    assert v == 19.0
    np.testing.assert_allclose(gx, [6, 16])
    np.testing.assert_allclose(gy, [1, 4])
    v, gx = dfc.value_and_grad(lambda x: dfc.reduce_sum(dfc.sin(x)))(np.array([0.0, 1.0]))
    np.testing.assert_allclose(gx, np.cos([0.0, 1.0]))
