"""The gradient of a loop-invariant weight's matmul is one GEMM after the gradient loop
(dfc/compiler/autodiff/loop_matmul.py): same gradients as the per-iteration sum (finite differences,
every execution path), also for transposed weights, zero-trip loops, rows that vary per iteration,
and nested loops; not applied where it must not be."""
import numpy as np
import pytest

import dfc
from _gradcheck import build, check, numeric_grad

rng = np.random.default_rng(5)


@pytest.fixture(autouse=True)
def any_weight_size(monkeypatch):
    """These tests use small weights: rewrite them whatever their size (the threshold has its own test)."""
    from dfc.compiler.autodiff import loop_matmul
    monkeypatch.setattr(loop_matmul, "MIN_WEIGHT_ELEMENTS", 0)


def ops_of(graph):
    return [n.op for n in graph.nodes.values()]


def rnn(xs, W, h0, n):
    def body(t, h):
        return t + 1, dfc.tanh(h @ W + xs[t])
    return dfc.while_loop(lambda t, h: t < n, body, (0, h0))[1]


def rnn_transposed(xs, W, h0, n):
    def body(t, h):
        return t + 1, dfc.tanh(dfc.matmul(h, W, transpose_b=True) + xs[t])
    return dfc.while_loop(lambda t, h: t < n, body, (0, h0))[1]


def rnn_left(xs, W, h0, n):
    """Columns as examples: h [H, B], W @ h."""
    def body(t, h):
        return t + 1, dfc.tanh(W @ h + dfc.transpose(xs[t]))
    return dfc.while_loop(lambda t, h: t < n, body, (0, dfc.transpose(h0)))[1]


def rnn_left_transposed(xs, W, h0, n):
    def body(t, h):
        return t + 1, dfc.tanh(dfc.matmul(W, h, transpose_a=True) + dfc.transpose(xs[t]))
    return dfc.while_loop(lambda t, h: t < n, body, (0, dfc.transpose(h0)))[1]


def rnn_vector(xs, W, h0, n):
    """One example as a vector: W @ h (h 1-D, a one-column matrix in the graph) and h @ W."""
    def body(t, h):
        return t + 1, dfc.tanh(W @ h + xs[t][0]) + dfc.sin(h @ W)
    return dfc.while_loop(lambda t, h: t < n, body, (0, h0[0]))[1]


CELLS = [rnn, rnn_transposed, rnn_left, rnn_left_transposed, rnn_vector]


def specs(*args):
    return [dfc.TensorSpec(np.shape(a), np.asarray(a).dtype.name) for a in args]


def args(n, H=3, B=2, T=5):
    return rng.normal(size=(T, B, H)) * 0.5, rng.normal(size=(H, H)) * 0.5, rng.normal(size=(B, H)), np.int64(n)


@pytest.mark.parametrize("fn", CELLS)
@pytest.mark.parametrize("n", [0, 1, 5])
def test_weight_gradient_matches_finite_differences(fn, n):
    a = args(n)
    _, grads = check(fn, *a, wrt=[0, 1, 2])
    if n == 0:
        np.testing.assert_array_equal(grads[1], np.zeros_like(a[1]))


@pytest.mark.parametrize("fn", CELLS)
def test_every_layout_is_rewritten_and_agrees_with_the_per_iteration_sum(fn, monkeypatch):
    a = args(5)
    g = build(fn, *specs(*a), wrt=[1])
    assert ops_of(g).count("TensorArrayConcat") == 2 * sum(op == "MatMul" for op in ops_of(
        dfc.trace(fn, *specs(*a))))
    monkeypatch.setenv("DFC_BATCH_LOOP_GRADS", "0")
    plain = build(fn, *specs(*a), wrt=[1])
    np.testing.assert_allclose(dfc.Session(g).call(*a)[1][0], dfc.Session(plain).call(*a)[1][0], rtol=1e-12,
                               atol=1e-12)


def test_the_rewrite_replaces_the_per_iteration_weight_matmul(monkeypatch):
    a = args(4)
    g = build(rnn, *specs(*a), wrt=[1])
    assert ops_of(g).count("TensorArrayConcat") == 2
    monkeypatch.setenv("DFC_BATCH_LOOP_GRADS", "0")
    plain = build(rnn, *specs(*a), wrt=[1])
    assert "TensorArrayConcat" not in ops_of(plain)
    # Same gradient both ways (the sums differ only in rounding order).
    got, want = dfc.Session(g).call(*a)[1][0], dfc.Session(plain).call(*a)[1][0]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_not_applied_to_a_small_weight(monkeypatch):
    from dfc.compiler.autodiff import loop_matmul
    a = args(3)
    monkeypatch.setattr(loop_matmul, "MIN_WEIGHT_ELEMENTS", a[1].size + 1)
    assert "TensorArrayConcat" not in ops_of(build(rnn, *specs(*a), wrt=[1]))
    monkeypatch.setattr(loop_matmul, "MIN_WEIGHT_ELEMENTS", a[1].size)
    assert "TensorArrayConcat" in ops_of(build(rnn, *specs(*a), wrt=[1]))


def test_not_applied_to_a_loop_that_swaps():
    def swapping(xs, W, h0, n):
        def body(t, h):
            return t + 1, dfc.tanh(h @ W + xs[t])
        return dfc.while_loop(lambda t, h: t < n, body, (0, h0), swap_memory=True)[1]
    a = args(3)
    g = build(swapping, *specs(*a), wrt=[1])
    assert "TensorArrayConcat" not in ops_of(g)


def test_not_applied_in_a_cond_branch_of_the_body():
    """A matmul inside a cond runs in some iterations only: it keeps the per-iteration sum."""
    def gated(xs, W, h0, n):
        def body(t, h):
            h = dfc.cond(t % 2 == 0, lambda: dfc.tanh(h @ W), lambda: h * 0.5)
            return t + 1, h + xs[t]
        return dfc.while_loop(lambda t, h: t < n, body, (0, h0))[1]
    a = args(5)
    _, grads = check(gated, *a, wrt=[1])
    assert "TensorArrayConcat" not in ops_of(build(gated, *specs(*a), wrt=[1]))


def test_rows_that_change_from_one_iteration_to_the_next():
    """a_t with t + 1 rows: the concatenation has 1 + 2 + ... + n rows."""
    def growing(X, W, n):
        def body(t, acc):
            return t + 1, acc + dfc.reduce_sum(dfc.tanh(X[:t + 1] @ W))
        return dfc.while_loop(lambda t, acc: t < n, body, (0, dfc.constant(0.0, "float64")))[1]
    X, W = rng.normal(size=(6, 4)), rng.normal(size=(4, 3)) * 0.5
    check(growing, X, W, np.int64(5), wrt=[1])
    assert ops_of(build(growing, *specs(X, W, np.int64(5)), wrt=[1])).count("TensorArrayConcat") == 2


def test_nested_loops_share_the_weight():
    def nested(xs, W, h0, n):
        def outer(i, h):
            def inner(j, h):
                return j + 1, dfc.tanh(h @ W + xs[i])
            return i + 1, dfc.while_loop(lambda j, h: j < i + 1, inner, (0, h))[1]
        return dfc.while_loop(lambda i, h: i < n, outer, (0, h0))[1]
    a = args(4)
    check(nested, *a, wrt=[1, 2])


def test_float32_lstm_step_matches_the_per_iteration_sum(monkeypatch):
    """The benchmark's LSTM (one [2H, 4H] weight, concat then matmul) in float32: both ways agree."""
    from benchmarks.lstm import build as build_lstm
    from benchmarks.lstm_problem import make_inputs, numpy_loss_and_grads, max_rel_error
    x, W, b = make_inputs(8, 4, 7)
    g = build_lstm(8, 4, 7)
    assert "TensorArrayConcat" in ops_of(g)
    _, dW, db = dfc.Session(g).call(x, W, b)
    _, ref_dW, ref_db = numpy_loss_and_grads(x, W, b)
    assert max_rel_error(dW, ref_dW) < 1e-5 and max_rel_error(db, ref_db) < 1e-5
