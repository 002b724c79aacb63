"""The XLA prototype (dfc/runtime/xla/): a whole run through jax.jit agrees with the reference interpreter.

Tolerances, per dtype: XLA fuses elementwise chains and may reassociate reductions and matmuls, so float
results are not numpy's bits. float64: rtol 1e-11 (observed <= 3e-13 on the benchmark programs, through
hundreds of loop iterations and their gradients); float32: rtol 1e-5 with atol 1e-6 (observed 3e-8
absolute at magnitudes ~0.1, the difference a hand-written JAX version shows too); ints and bools: exact.
"""
import numpy as np
import pytest

import dfc
from tests.conftest import SAME_ON_EVERY_TEST_DEVICE

pytest.importorskip("jax")

from dfc.runtime.xla import to_jax  # noqa: E402
from dfc.runtime.xla.jops import NotLowerable  # noqa: E402
from dfc.runtime.xla import program  # noqa: E402

MIN_ROWS = program.MIN_ROWS

pytestmark = [pytest.mark.host_devices("the prototype compiles for JAX's CPU backend"),
              SAME_ON_EVERY_TEST_DEVICE]


def _reference(g, *args):
    return dfc.Session(g, mode="reference").call(*args)


def _leaves(x):
    if isinstance(x, (list, tuple)):
        return [y for v in x for y in _leaves(v)]
    if isinstance(x, dict):
        return [y for k in sorted(x) for y in _leaves(x[k])]
    return [np.asarray(x)]


def _agree(got, want):
    for a, b in zip(_leaves(got), _leaves(want), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
        if b.dtype == np.float64:
            np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-300)
        elif b.dtype == np.float32:
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(a, b)


def _fixed_point_grad(W, b, tol):
    x = dfc.zeros_like(b)
    diff = tol + 1.0
    n = 0
    while diff >= tol:
        x_new = dfc.tanh(dfc.matmul(W, x) + b)
        diff = dfc.reduce_max(dfc.abs(x_new - x))
        x = x_new
        n += 1
    dW, db = dfc.gradients(dfc.reduce_sum(x), [W, b])
    return x, dW, db, n


def _contraction(d, seed=0, scale=0.9):
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((d, d))
    return W * (scale / np.linalg.norm(W, 2)), rng.standard_normal(d)


def test_gradient_through_a_data_dependent_while_loop():
    W, b = _contraction(4)
    args = (W, b, np.float64(1e-10))
    g = dfc.function(_fixed_point_grad).trace(*args)
    prog = to_jax(g)
    _agree(prog(*args), _reference(g, *args))
    assert prog.reruns == 0         # 20-odd iterations fit the first buffers


def test_a_loop_that_outruns_its_stacks_runs_again_with_larger_buffers(monkeypatch):
    monkeypatch.setattr(program, "STACK_BYTES", 0)      # buffers start at MIN_ROWS
    q, _ = np.linalg.qr(np.random.default_rng(1).standard_normal((3, 3)))
    args = (0.9 * q, np.array([0.1, -0.05, 0.02]), np.float64(1e-12))     # a slow contraction: ~250 iterations
    g = dfc.function(_fixed_point_grad).trace(*args)
    prog = to_jax(g)
    out = prog(*args)
    assert int(out[3]) > MIN_ROWS
    _agree(out, _reference(g, *args))
    assert prog.reruns == 1
    _agree(prog(*args), out)        # the larger buffers are kept: no second re-run
    assert prog.reruns == 1
    short = args[:2] + (np.float64(1e-2),)    # fewer iterations than the buffers hold: the same compiled code
    _agree(prog(*short), _reference(g, *short))
    assert prog.reruns == 1


@dfc.function
def _accept_reject(y0, mu, t_end, tol):
    t, h, y = 0.0, 0.05, y0
    while t < t_end:
        h = dfc.minimum(h, t_end - t)
        k1 = dfc.stack([y[1], mu * (1.0 - y[0] * y[0]) * y[1] - y[0]])
        y2 = y + h * k1
        k2 = dfc.stack([y2[1], mu * (1.0 - y2[0] * y2[0]) * y2[1] - y2[0]])
        err = dfc.reduce_max(dfc.abs(0.5 * h * (k2 - k1)))
        if err <= tol:              # a cond inside the loop: its branch's values reach the gradient
            t = t + h
            y = y + 0.5 * h * (k1 + k2)
        h = h * dfc.clip(0.9 * dfc.sqrt(tol / (err + 1e-16)), 0.2, 5.0)
    dy0, dmu = dfc.gradients(dfc.reduce_sum(y), [y0, mu])
    return y, dy0, dmu


def test_gradient_through_a_cond_inside_a_while_loop():
    args = (np.array([2.0, 0.0]), np.float64(1.0), np.float64(1.0), np.float64(1e-3))
    g = _accept_reject.trace(*args)
    _agree(to_jax(g)(*args), _reference(g, *args))


@dfc.function
def _masked_rnn(x, lengths, W, U):
    h = dfc.zeros([x.shape[1], U.shape[0]], "float32")
    for t in range(dfc.reduce_max(lengths)):
        h_next = dfc.tanh(dfc.matmul(x[t], W) + dfc.matmul(h, U))
        h = dfc.where(dfc.expand_dims(t < lengths, 1), h_next, h)
    loss = dfc.reduce_sum(h * h)
    return loss, dfc.gradients(loss, [W, U])


def test_float32_rnn_gradient_within_the_float32_tolerance():
    rng = np.random.default_rng(2)
    f = np.float32
    args = (rng.standard_normal((7, 3, 4)).astype(f), np.array([7, 2, 5], np.int64),
            (rng.standard_normal((4, 5)) / 2).astype(f), (rng.standard_normal((5, 5)) / 3).astype(f))
    g = _masked_rnn.trace(*args)
    _agree(to_jax(g)(*args), _reference(g, *args))


@dfc.function
def _loop_in_a_branch(x, n):
    if dfc.reduce_sum(x) > 0:       # the loop frame may be dead: it runs under lax.cond
        i = 0
        while i < n:
            x = x * 1.5 + 1.0
            i += 1
    else:
        x = -x
    return x, dfc.gradients(dfc.reduce_sum(x * x), x)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_loop_inside_a_cond_branch(sign):
    args = (sign * np.array([0.5, 0.25]), np.int64(5))
    g = _loop_in_a_branch.trace(*args)
    _agree(to_jax(g)(*args), _reference(g, *args))


def test_variables_pass_in_and_out():
    def run(make):
        dfc.containers.reset()
        v = dfc.Variable(np.array([1.0, 2.0]), name="acc")

        @dfc.function
        def f(n):
            i = 0
            while i < n:
                v.assign_add(v.read_value() * 0.5)
                i += 1
            return v.read_value() * 2.0

        g = f.trace(np.int64(3))
        call = make(g)
        first = call(np.int64(3))
        second = call(np.int64(2))      # the second run starts from the value the first left
        return first, second, v.numpy()

    got = run(to_jax)
    want = run(lambda g: dfc.Session(g, mode="reference").call)
    _agree(got, want)
    dfc.containers.reset()


def test_an_op_without_lowering_is_an_error_naming_its_node():
    @dfc.function
    def f(n):
        s = dfc.zeros([2])
        i = 0
        while i < n:
            s = s + dfc.cast(dfc.timestamp(), "float32")
            i += 1
        return s

    g = f.trace(np.int64(3))
    with pytest.raises(NotLowerable) as e:
        to_jax(g)(np.int64(3))
    assert isinstance(e.value, dfc.DfcError) and e.value.node is not None
    assert "Timestamp" in str(e.value)


@dfc.function
def _tensor_arrays(x, n):
    xs = dfc.TensorArray("float64", size=0).unstack(x)
    out = dfc.TensorArray("float64", size=0)
    s = dfc.zeros_like(x[0])
    i = 0
    while i < n:
        v = xs.read(i)
        s = s + dfc.tanh(v) * s + v
        out = out.write(i, s * 2.0)
        i += 1
    stacked = out.stack()
    return stacked, dfc.gradients(dfc.reduce_sum(stacked * stacked), x)


def test_tensor_arrays_grow_by_running_again_and_their_gradients_agree(monkeypatch):
    monkeypatch.setattr(program, "STACK_BYTES", 0)      # buffers start at MIN_ROWS
    rng = np.random.default_rng(3)
    args = (rng.standard_normal((MIN_ROWS + 6, 3)) * 0.1, np.int64(MIN_ROWS + 4))
    g = _tensor_arrays.trace(*args)
    prog = to_jax(g)
    out = prog(*args)
    assert out[0].shape == (MIN_ROWS + 4, 3)
    _agree(out, _reference(g, *args))
    reruns = prog.reruns
    assert reruns >= 1              # the written array outran its buffer and its stacked length was learned
    _agree(prog(*args), out)
    assert prog.reruns == reruns


def test_a_heavy_node_in_a_branch_runs_only_when_the_branch_is_taken():
    """Large nodes live only under a cond's predicate run inside a lax.cond of their own (lower.py
    _guarded): the results are the reference interpreter's, with the branch taken in some iterations and
    not in others, gradient included."""
    from dfc.runtime.xla import lower

    @dfc.function
    def f(x0, pos, n):
        x = x0
        i = 0
        total = dfc.reduce_sum(x) * 0.0
        while i < n:
            if i % 3 == 0:      # the heavy branch: a 64 x 64 comparison and sum, a gather
                idx = dfc.reduce_sum(dfc.cast(dfc.cumsum(x)[None, :] < pos[:, None], "int64"), 1)
                x = dfc.gather(x, dfc.minimum(idx, 63)) * 0.9 + 0.01
            else:
                x = x * 1.01
            total = total + dfc.reduce_sum(x * x)
            i += 1
        return total, dfc.gradients(total, x0)

    rng = np.random.default_rng(0)
    x = rng.random(64) / 32
    pos = np.sort(rng.random(64))
    n = np.int64(6)
    g = f.trace(x, pos, n)
    prog = to_jax(g)
    got = prog(x, pos, n)
    want = dfc.Session(g, mode="reference").call(x, pos, n)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    (fn,) = prog._fns.values()
    from dfc.runtime.xla.program import x64
    with x64():
        text = fn.lower(prog.feeds(x, pos, n), {}, np.int64(1)).as_text()
    assert "stablehlo.case" in text or "conditional" in text       # the branch's heavy nodes are guarded
