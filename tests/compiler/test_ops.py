"""Every op function against numpy; dtype promotion; static shapes; errors name the user's line."""
import numpy as np
import pytest

import dfc
from dfc.ir import ops as opreg
from dfc.runtime.kernels import KERNELS

rng = np.random.default_rng(1)
A = rng.uniform(0.5, 2.0, (3, 4)).astype(np.float32)
B = rng.uniform(0.5, 2.0, (4,)).astype(np.float32)
I = np.array([[3, -1, 4], [1, -5, 9]], np.int32)


def run(fn, *args):
    g = dfc.trace(fn, *[dfc.TensorSpec.from_value(a) for a in args])
    return g(*args)


UNARY = [("exp", np.exp), ("log", np.log), ("sqrt", np.sqrt), ("sin", np.sin), ("cos", np.cos),
         ("tanh", np.tanh), ("abs", np.abs), ("square", np.square), ("negative", np.negative),
         ("sigmoid", lambda x: 1 / (1 + np.exp(-x))), ("relu", lambda x: np.maximum(x, 0)),
         ("floor", np.floor), ("ceil", np.ceil), ("log1p", np.log1p), ("rsqrt", lambda x: 1 / np.sqrt(x)),
         ("reciprocal", lambda x: 1 / x), ("sign", np.sign)]


@pytest.mark.parametrize("name,ref", UNARY, ids=[u[0] for u in UNARY])
def test_unary(name, ref):
    x = A - 1.0
    if name in ("log", "sqrt", "rsqrt", "log1p"):
        x = A
    out = run(getattr(dfc, name), x)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, ref(x), rtol=1e-6)
    scalar = run(getattr(dfc, name), x[0, 0])         # 0-d inputs take other numpy paths
    assert scalar.shape == () and scalar.dtype == np.float32
    np.testing.assert_allclose(scalar, ref(x[0, 0]), rtol=1e-6)


BINARY = [(lambda x, y: x + y, np.add), (lambda x, y: x - y, np.subtract), (lambda x, y: x * y, np.multiply),
          (lambda x, y: x / y, np.divide), (lambda x, y: x // y, np.floor_divide), (lambda x, y: x % y, np.mod),
          (lambda x, y: x ** y, np.power), (dfc.maximum, np.maximum), (dfc.minimum, np.minimum),
          (lambda x, y: x < y, np.less), (lambda x, y: x <= y, np.less_equal), (lambda x, y: x > y, np.greater),
          (lambda x, y: x >= y, np.greater_equal), (lambda x, y: x == y, np.equal),
          (lambda x, y: x != y, np.not_equal)]


@pytest.mark.parametrize("fn,ref", BINARY)
def test_binary_broadcasting(fn, ref):
    np.testing.assert_allclose(run(fn, A, B), ref(A, B), rtol=1e-6)


def test_integer_arithmetic_and_promotion():
    y = np.array([2, 3, -4], np.int64)
    out = run(lambda x, y: (x // y, x % y, x + y, x / y, x * 2, x + 0.5), I, y)
    np.testing.assert_array_equal(out[0], I // y)
    np.testing.assert_array_equal(out[1], I % y)
    assert out[2].dtype == np.int64                   # int32 + int64 -> int64 (numpy)
    assert out[3].dtype == np.float64                 # int / int -> float64 (numpy)
    assert out[4].dtype == np.int32                   # Python int is weak
    assert out[5].dtype == np.float64
    np.testing.assert_allclose(out[3], I / y)


def test_logical_ops():
    a, b = np.array([True, False, True]), np.array([True, True, False])
    out = run(lambda a, b: (a & b, a | b, ~a, dfc.logical_and(a, b)), a, b)
    np.testing.assert_array_equal(out[0], a & b)
    np.testing.assert_array_equal(out[1], a | b)
    np.testing.assert_array_equal(out[2], ~a)


@pytest.mark.parametrize("red,ref", [("reduce_sum", np.sum), ("reduce_mean", np.mean), ("reduce_max", np.max),
                                     ("reduce_min", np.min), ("reduce_prod", np.prod)])
@pytest.mark.parametrize("axis,keep", [(None, False), (0, False), (1, True), ((0, 1), False), (-1, True)])
def test_reductions(red, ref, axis, keep):
    out = run(lambda x: getattr(dfc, red)(x, axis=axis, keepdims=keep), A)
    want = ref(A, axis=axis, keepdims=keep)
    assert out.shape == want.shape and out.dtype == np.float32
    np.testing.assert_allclose(out, want, rtol=1e-5)


def test_int_sum_keeps_dtype():
    assert run(lambda x: dfc.reduce_sum(x), I).dtype == np.int32


def test_matmul_and_shape_inference():
    w = rng.normal(size=(4, 5)).astype(np.float32)

    def f(a, w):
        y = a @ w
        assert y.shape == (3, 5)
        return y, dfc.matmul(a, a, transpose_b=True), dfc.matmul(w, a, transpose_a=True, transpose_b=True)
    y, aat, wtat = run(f, A, w)
    np.testing.assert_allclose(y, A @ w, rtol=1e-5)
    np.testing.assert_allclose(aat, A @ A.T, rtol=1e-5)
    np.testing.assert_allclose(wtat, w.T @ A.T, rtol=1e-5)


def test_matmul_shape_mismatch_names_user_line():
    with pytest.raises(dfc.DfcTypeError, match="do not fit") as e:
        dfc.trace(lambda a: a @ a, dfc.TensorSpec([3, 4], "float32"))
    assert "test_ops.py" in e.value.loc


def test_runtime_shape_mismatch_in_loop_names_node_and_line():
    def f(a, n):
        def body(i, x):
            return i + 1, x @ a
        return dfc.while_loop(lambda i, x: i < n, body, (0, a))[1]
    g = dfc.trace(f, dfc.TensorSpec([None, None], "float32"), dfc.TensorSpec([], "int64"))
    with pytest.raises(dfc.DfcRuntimeError) as e:
        g(A, np.int64(2))
    assert e.value.node.startswith("matmul") and "test_ops.py" in e.value.loc


def test_array_ops():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)

    def f(x):
        return (dfc.reshape(x, [4, -1]), dfc.transpose(x, [2, 0, 1]), dfc.concat([x, x], axis=1),
                dfc.stack([x, x], axis=1), dfc.unstack(x, axis=1)[2], dfc.expand_dims(x, 1),
                dfc.squeeze(dfc.expand_dims(x, 0)), dfc.gather(x, [1, 0, 1], axis=0), dfc.gather(x, [3, 0], axis=2),
                dfc.where(x > 10, x, -x), dfc.cast(x, "int32"), dfc.shape(x), dfc.size(x), dfc.rank(x),
                dfc.zeros_like(x), dfc.ones([2, 2], "int64"), dfc.fill([3], 7.0), dfc.range(2, 11, 3),
                dfc.broadcast_to(x[0, 0], [2, 4]))
    out = run(f, x)
    want = (x.reshape(4, -1), x.transpose(2, 0, 1), np.concatenate([x, x], 1), np.stack([x, x], 1), x[:, 2],
            x[:, None], x, x[[1, 0, 1]], x[:, :, [3, 0]], np.where(x > 10, x, -x), x.astype(np.int32),
            np.array(x.shape), np.array(x.size), np.array(3), np.zeros_like(x), np.ones((2, 2), np.int64),
            np.full(3, 7.0, np.float32), np.arange(2, 11, 3), np.broadcast_to(x[0, 0], (2, 4)))
    for k, (o, w) in enumerate(zip(out, want)):
        np.testing.assert_array_equal(o, w, err_msg=f"output {k}")


def test_indexing():
    x = np.arange(60, dtype=np.float32).reshape(3, 4, 5)

    def f(x, i):
        return (x[1], x[-1, 2], x[:, 1:3], x[..., ::2], x[None, 0], x[i], x[:, i], x[i, 1:i + 2],
                x[[2, 0]], x[:, [1, 3], 0], x[0, 0, i])
    out = run(f, x, np.int64(1))
    i = 1
    want = (x[1], x[-1, 2], x[:, 1:3], x[..., ::2], x[None, 0], x[i], x[:, i], x[i, 1:i + 2], x[[2, 0]],
            x[:, [1, 3], 0], x[0, 0, i])
    for k, (o, w) in enumerate(zip(out, want)):
        np.testing.assert_array_equal(o, w, err_msg=f"output {k}")


def test_index_out_of_range_is_an_error_not_clipping():
    g = dfc.trace(lambda x, i: x[i], dfc.TensorSpec([3], "float32"), dfc.TensorSpec([], "int64"))
    assert float(g(np.ones(3, np.float32), np.int64(2))) == 1.0
    with pytest.raises(dfc.DfcRuntimeError, match="GetItem"):
        g(np.ones(3, np.float32), np.int64(3))
    with pytest.raises(dfc.DfcTypeError, match="out of range"):
        dfc.trace(lambda x: x[5], dfc.TensorSpec([3], "float32"))


def test_nn_ops():
    logits = rng.normal(size=(4, 6)).astype(np.float32)
    out = run(lambda x: (dfc.softmax(x), dfc.log_softmax(x), dfc.argmax(x), dfc.argmax(x, 0),
                         dfc.one_hot(dfc.argmax(x), 6)), logits)
    e = np.exp(logits - logits.max(-1, keepdims=True))
    sm = e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(out[0], sm, rtol=1e-5)
    np.testing.assert_allclose(out[1], np.log(sm), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out[2], logits.argmax(-1))
    np.testing.assert_array_equal(out[3], logits.argmax(0))
    np.testing.assert_array_equal(out[4], np.eye(6)[logits.argmax(-1)])


def test_seeded_random_is_deterministic_per_run_and_differs_per_iteration():
    def f(n):
        a = dfc.random_uniform([1000], seed=3)
        b = dfc.random_normal([1000], seed=3, mean=1.0, stddev=2.0)
        draws = dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + dfc.random_uniform([], seed=1)),
                               (0, 0.0))[1]
        return a, b, draws

    g = dfc.trace(f, dfc.TensorSpec([], "int64"))
    results = [dfc.Session(g, mode=m, parallel_iterations=p).call(np.int64(50))
               for m, p in (("reference", 1), ("threads", 32))]
    for x, y in zip(*results):
        np.testing.assert_array_equal(x, y)
    a, b, draws = results[0]
    assert 0 <= a.min() and a.max() < 1 and abs(a.mean() - 0.5) < 0.05
    assert abs(b.mean() - 1.0) < 0.2 and abs(b.std() - 2.0) < 0.2
    assert 15 < float(draws) < 35                    # 50 different uniform draws
    again = dfc.Session(g).call(np.int64(50))
    np.testing.assert_array_equal(again[0], a)       # a fresh session replays the same numbers


def test_bool_of_symbolic_tensor_explains_what_to_do():
    def f(x):
        if x > 0:
            return x
        return -x
    with pytest.raises(dfc.DfcTypeError, match="dfc.function"):
        dfc.trace(f, dfc.TensorSpec([], "float32"))


def test_every_op_has_a_kernel_unless_the_executor_implements_it():
    in_executor = {name for name, op in opreg.REGISTRY.items() if op.in_executor}
    assert sorted(set(opreg.REGISTRY) - set(KERNELS) - in_executor) == []
    assert sorted(in_executor & set(KERNELS)) == []          # no stand-in kernel that would compute wrongly
    assert in_executor == {"Switch", "Merge", "Enter", "Exit", "NextIteration", "Send", "Recv"}


def test_matmul_cost_rule_counts_multiply_adds():
    from dfc.ir.dtypes import TType
    op = opreg.get("MatMul")
    out = TType("float32", (8, 5))
    assert op.cost({}, [TType("float32", (8, 3)), TType("float32", (3, 5))], [out]) == 8 * 5 * 3
    assert op.cost({"transpose_a": True}, [TType("float32", (3, 8)), TType("float32", (3, 5))], [out]) == 120
    assert opreg.get("Add").cost is None                     # placement counts output elements
