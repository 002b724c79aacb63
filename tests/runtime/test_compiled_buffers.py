"""Buffers for a compiled loop's temporaries (dfc/runtime/compiled/buffers.py): a matrix product or an
elementwise group whose value is only read within its iteration is written into one buffer allocated when
the loop starts. Every value something keeps past its iteration — a loop variable (also through a view,
also one carried unchanged for an iteration), a TensorArray element, a value pushed for the gradient, a
value entering a nested loop — still gets an array of its own: were any of them a buffer, the next
iteration would overwrite it and these results would differ from the reference interpreter's."""
import numpy as np
import pytest

import dfc
from tests.compiledtools import _no_compile_budget  # noqa: F401 (autouse fixture)
from tests.conftest import run_all_modes

pytestmark = pytest.mark.host_devices("numba-compiled code is CPU machine code")
pytest.importorskip("numba")


def _leapfrog(q0, p0, W, n, m):
    """HMC's loops: products and groups read within a leapfrog step (buffers), positions and momenta carried
    from step to step (two buffers each), the last position kept across samples and written out."""
    q, p = q0, p0
    samples = dfc.TensorArray("float64", size=m)
    for s in range(m):
        p, qn = p0 * (dfc.cast(s, "float64") + 1.0), q
        i = 0
        while i < n:
            g = dfc.matmul(W, qn) + qn * qn * qn                 # W @ qn: read by the group only
            p = p - 0.1 * g
            qn = qn + 0.1 * p
            i += 1
        q = qn
        samples = samples.write(s, qn)
    e = 0.0
    for t in range(n):                                         # reductions of a product and a power
        e += dfc.reduce_sum(q * dfc.matmul(W, q)) * 0.5 + 0.25 * dfc.reduce_sum(q ** 4) + dfc.cast(t, "float64")
    return q, p, e, samples.stack()


def _kept(q0, W, n):
    """Values kept past their iteration, each of which a buffer would corrupt."""
    q, prev, acc = q0, q0, dfc.zeros_like(q0)
    ta = dfc.TensorArray("float64", size=n)
    i = 0
    while i < n:
        prev, q = q, dfc.matmul(W, q)                          # q's old value carried one more iteration
        v = dfc.reshape(dfc.matmul(W, dfc.expand_dims(prev, 1)), [-1])     # a view that is carried
        ta = ta.write(i, dfc.matmul(W, v))                     # a TensorArray element
        acc = v
        j = 0
        w = dfc.matmul(W, acc)                                 # read by a nested loop
        while j < n:
            acc = acc + w * 0.25
            j += 1
        i += 1
    return q, prev, acc, ta.stack()


def _rnn_loss(W, h0, n):
    """z = W @ h is pushed for the gradient of z * z (and read by the group): not a buffer."""
    h, loss = h0, 0.0
    for _ in range(n):
        z = dfc.matmul(W, h)
        loss += dfc.reduce_sum(z * z)
        h = dfc.tanh(z)
    return loss, dfc.gradients(loss, W)


def _inputs(seed=0, d=4):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(d), rng.standard_normal(d), rng.standard_normal((d, d)) * 0.4


def _compiled(g, args, replayed=False):
    """The results of a session that ran every frame as compiled code (no fused replay unless `replayed`),
    and the source."""
    from dfc.runtime.compiled import CompiledFrame
    s = dfc.Session(g, compile_loops=True, num_threads=0)
    got = s.call(*args)
    plan = list(s._plans.values())[0]
    progs = [p for p in [plan.root_program, *plan.programs.values()] if isinstance(p, CompiledFrame)]
    assert progs and all(p.runs["fused"] == 0 for p in progs) != replayed, [p.runs for p in progs]
    if isinstance(plan.root_program, CompiledFrame):
        return got, plan.root_program.source
    return got, "".join(f["source"] for f in s.compiled_frames().values() if not f.get("nested"))


def _same(a, b):
    for x, y in zip(dfc.nest.flatten(a), dfc.nest.flatten(b), strict=True):
        assert np.asarray(x).dtype == np.asarray(y).dtype
        np.testing.assert_array_equal(x, y)


def test_temporaries_of_a_loop_are_buffers_and_the_results_are_the_reference_bits():
    q0, p0, W = _inputs()
    for n, m in ((5, 3), (1, 2), (0, 1), (3, 0)):
        args = (q0, p0, W, np.int64(n), np.int64(m))
        g = dfc.function(_leapfrog).trace(*args)
        want = run_all_modes(g, *args)       # (m = 0: the compiled run replays fused for the empty stack)
        got, src = _compiled(g, args, replayed=m == 0)
        _same(got, want)
        # the leapfrog's W @ qn, the second loop's product, group and power are written into buffers; the
        # leapfrog's qn and p into two each, one per parity of the iteration
        assert src.count("P.matmul_into(") == 2 and "P.matmul(" not in src, src
        assert src.count("= np.empty((4, ") >= 8 and src.count(" % 2 == 0 else B") >= 2, src
        # the products' buffers have their shape (4, 1); their squeezed views are made once per loop
        assert src.count("= np.empty((4, 1, ), np.float64)") == 2 and src.count("= H.reshape(B") == 2, src
        # read and written through aliases without reference counts; the owners are kept until the loop
        # is done and a parity buffer's value leaves the loop as its owner
        assert src.count("= H.unmanaged(B") >= 8 and src.count("H.keep(B") >= 8, src
        assert src.count("_0m if it") >= 2, src
        # the leapfrog loop is nested in the samples' loop: its temporary (W @ qn) is allocated once, at the
        # top of the function, not on each entry
        assert src[:src.index("while True:")].count("= np.empty((4, 1, ), np.float64)") == 1, src
    # against plain numpy
    q, rows = q0, []
    for s in range(3):
        p, qn = p0 * (s + 1.0), q
        for _ in range(5):
            p = p - 0.1 * (W @ qn + qn * qn * qn)
            qn = qn + 0.1 * p
        q = qn
        rows.append(qn)
    got = run_all_modes(g, q0, p0, W, np.int64(5), np.int64(3))
    for x, y in zip(got, (q, p, None, np.stack(rows))):
        if y is not None:
            np.testing.assert_allclose(x, y, rtol=1e-12)


def test_values_kept_past_their_iteration_are_never_buffers():
    q0, _, W = _inputs(1)
    for n in (4, 1):
        args = (q0, W, np.int64(n))
        g = dfc.function(_kept).trace(*args)
        want = run_all_modes(g, *args)
        got, src = _compiled(g, args)
        _same(got, want)
        # W @ v and W @ acc (acc = v) are one node once common subexpressions are merged (runtime/cse.py)
        assert "P.matmul_into(" not in src and src.count("P.matmul(") == 3, src
    # against plain numpy
    q, prev, acc, rows = q0, q0, np.zeros(4), []
    for _ in range(4):
        prev, q = q, W @ q
        v = W @ prev
        rows.append(W @ v)
        acc = v
        w = W @ acc
        for _ in range(4):
            acc = acc + w * 0.25
    for x, y in zip(run_all_modes(g, q0, W, np.int64(4)), (q, prev, acc, np.stack(rows))):
        np.testing.assert_allclose(x, y, rtol=1e-12)


def test_a_product_pushed_for_the_gradient_is_not_a_buffer():
    _, h0, W = _inputs(2)
    args = (W, h0, np.int64(6))
    g = dfc.function(_rnn_loss).trace(*args)
    want = run_all_modes(g, *args)
    got, _ = _compiled(g, args)
    _same(got, want)
    s, eps, slope = dfc.Session(g), 1e-6, np.zeros_like(W)
    for idx in np.ndindex(*W.shape):
        d = np.zeros_like(W)
        d[idx] = eps
        slope[idx] = (s.call(W + d, h0, np.int64(6))[0] - s.call(W - d, h0, np.int64(6))[0]) / (2 * eps)
    np.testing.assert_allclose(want[1], slope, rtol=1e-6, atol=1e-7)


def _matrix_walk(X0, W, n):
    """A 2-D loop variable in parity buffers (a flat buffer seen with its shape) that leaves the loop after
    an even or odd number of iterations, then arrays of its size made after the loop: the value that left
    must be the buffer's owner, alive and not overwritten. (Y, fetched and read by Z's group, is kept.)"""
    X = X0
    i = 0
    while i < n:
        X = dfc.tanh(dfc.matmul(W, X) * 0.9 + 0.1)
        i += 1
    Y = X * 2.0
    Z = dfc.exp(Y) + X
    return X, Y, Z


def test_a_loop_variable_in_parity_buffers_leaves_the_loop_as_its_owner():
    X0 = np.random.default_rng(3).standard_normal((3, 5))
    W = np.random.default_rng(4).standard_normal((3, 3)) * 0.5
    for n in (0, 1, 2, 3, 6):
        args = (X0, W, np.int64(n))
        g = dfc.function(_matrix_walk).trace(*args)
        got, src = _compiled(g, args)
        _same(got, run_all_modes(g, *args))
        assert "(B" in src and "_0 if it1 % 2 == 0 else B" in src and "H.reshape(B" in src, src
        X = X0
        for _ in range(n):
            X = np.tanh(W @ X * 0.9 + 0.1)
        for x, y in zip(got, (X, X * 2.0, np.exp(X * 2.0) + X)):
            np.testing.assert_allclose(x, y, rtol=1e-14)


def _constants(x, n):
    """C is only read in the loop (an alias without reference counts); D is kept (TensorArray elements, a loop
    variable, a result): those are the constant's own array, and a result is a copy of it."""
    ta = dfc.TensorArray("float64", size=n)
    y, d = x, x
    i = 0
    while i < n:
        y = y * dfc.constant(np.array([1.5, -2.0, 0.25])) + dfc.reduce_sum(dfc.constant(np.array([1.0, 2.0, 3.0])))
        d = dfc.constant(np.array([4.0, 5.0, 6.0]))
        ta = ta.write(i, d)
        i += 1
    return y, d, ta.stack()


def test_constants_only_read_in_a_loop_are_aliases_and_kept_ones_are_their_own_arrays():
    x = np.array([0.5, -1.0, 2.0])
    for n in (3, 1):
        args = (x, np.int64(n))
        g = dfc.function(_constants).trace(*args)
        got, src = _compiled(g, args)
        _same(got, run_all_modes(g, *args))
        assert src.count("= H.unmanaged(K[") == 2 and "= K[" in src, src
        y = x
        for _ in range(n):
            y = y * np.array([1.5, -2.0, 0.25]) + 6.0
        for a, b in zip(got, (y, [4.0, 5.0, 6.0], np.tile([4.0, 5.0, 6.0], (n, 1)))):
            np.testing.assert_array_equal(a, b)
        s = dfc.Session(g, compile_loops=True, num_threads=0)
        for _ in range(2):
            got = s.call(*args)
            np.testing.assert_array_equal(got[1], [4.0, 5.0, 6.0])
            np.testing.assert_array_equal(got[2], np.tile([4.0, 5.0, 6.0], (n, 1)))
            got[1][:] = 0.0             # a result is the caller's to change: the constant is not
            got[2][:] = 0.0
        assert s.compiled_run()["status"] == "compiled"
