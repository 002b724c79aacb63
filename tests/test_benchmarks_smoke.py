"""The benchmark workloads run, tiny, and dfc computes what numpy by hand and JAX compute (no timing)."""
import numpy as np
import pytest

from benchmarks import fixed_point, gru, harness, hmc, ode, trivial_loop


def _dfc(function, *args):
    import dfc
    return dfc.Session(function.trace(*args)).call(*args)


def test_trivial_loop_equals_python_and_jax():
    pytest.importorskip("jax")
    a = (np.int64(1), np.int64(50))
    want = trivial_loop.python_lcg(*a)
    assert int(_dfc(trivial_loop.lcg, *a)) == int(trivial_loop.numpy_lcg(*a)) == int(want)
    assert int(trivial_loop._jax()(*a)) == int(want)


def test_ode_forward_and_gradient():
    a = ode.inputs(t_end=0.3)
    np.testing.assert_allclose(_dfc(ode.ode_forward, *a), ode.numpy_forward(*a), rtol=1e-12, atol=1e-14)
    _, dy0, dmu = _dfc(ode.ode_gradient, *a)
    eps = 1e-6     # the gradient of sum(final state) against central differences of the numpy integrator
    for k in range(2):
        e = np.zeros(2)
        e[k] = eps
        fd = (ode.numpy_forward(a[0] + e, *a[1:]).sum() - ode.numpy_forward(a[0] - e, *a[1:]).sum()) / (2 * eps)
        assert dy0[k] == pytest.approx(fd, rel=1e-4, abs=1e-6)
    fd = (ode.numpy_forward(a[0], a[1] + eps, *a[2:]).sum() - ode.numpy_forward(a[0], a[1] - eps, *a[2:]).sum()) / (2 * eps)
    assert float(dmu) == pytest.approx(fd, rel=1e-4, abs=1e-6)


def test_hmc_chain_equals_numpy():
    a = hmc.inputs(4)
    harness.check_close({"dfc": _dfc(hmc.hmc, *a), "numpy": hmc.numpy_hmc(*a)}, "numpy", rtol=1e-10, atol=1e-12)


def test_fixed_point_forward_and_gradient_equal_jax():
    pytest.importorskip("jax")
    a = fixed_point.inputs()
    np.testing.assert_allclose(_dfc(fixed_point.fixed_point, *a), fixed_point.numpy_solve(*a), rtol=1e-12)
    jax, _, rev, jacfwd = fixed_point._jax()
    assert "Reverse-mode differentiation does not work" in harness.jax_fails(lambda: rev(*a))   # recorded, not hidden
    _, dW, db = _dfc(fixed_point.fixed_point_gradient, *a)
    jW, jb = jacfwd(*a)
    np.testing.assert_allclose(dW, np.asarray(jW), rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(db, np.asarray(jb), rtol=1e-8, atol=1e-12)


def test_gru_step_gradient_matches_finite_differences():
    import dfc
    a = gru.inputs()
    s = dfc.Session(gru.gru_step.trace(*a))
    loss, grads = s.call(*a)
    assert np.isfinite(loss) and [g.shape for g in grads] == [w.shape for w in a[3:]]
    eps = 1e-2      # d loss / d b_out (the last weight) by central differences
    for k in range(gru.C):
        e = np.zeros(gru.C, np.float32)
        e[k] = eps
        hi = s.call(*a[:8], a[8] + e)[0]
        lo = s.call(*a[:8], a[8] - e)[0]
        assert grads[5][k] == pytest.approx((hi - lo) / (2 * eps), rel=2e-2, abs=2e-3)


def test_lstm_comparison_takes_rounds_and_reports_their_range(monkeypatch):
    # Each round times every system in turn; a system's figure is the median of its round medians.
    import statistics
    from benchmarks import __main__ as bench
    monkeypatch.setattr(harness, "compiled_available", lambda: False)
    rows = bench.bench_lstm("small", 1, {}, rounds=3)
    for name in ("numpy (hand-written BPTT)", "dfc (while_loop + dfc.gradients)"):
        r = rows[name]
        assert len(r["rounds_ms"]) == 3 and r["rounds_ms"] == sorted(r["rounds_ms"])
        assert r["ms_per_step"] == statistics.median(r["rounds_ms"])
    assert rows["dfc (while_loop + dfc.gradients)"]["max_rel_error"] < 1e-5
    assert rows["JAX (jit + scan + grad)"] == {"error": "not installed"}
    text = bench.table({"machine": bench.machine(), "competitors": {}, "lstm_small": rows})
    line = next(x for x in text.splitlines() if x.startswith("| dfc (while_loop"))
    lo, hi = rows["dfc (while_loop + dfc.gradients)"]["rounds_ms"][::2]
    assert f"({lo:.1f}–{hi:.1f}, 3 rounds)" in line


# The research programs (benchmarks/research/), tiny: dfc against numpy on the same inputs; programs that
# draw random numbers inside the graph are checked by replaying dfc's draws in numpy.

def _directional_fd(loss, args, k, grad, rng, eps=1e-3):
    """grad . d against central differences of the numpy loss along a random direction d of args[k]
    (computed in float64)."""
    a64 = [np.asarray(v, np.float64) if np.asarray(v).dtype == np.float32 else v for v in args]
    d = rng.standard_normal(np.shape(args[k]))
    hi, lo = list(a64), list(a64)
    hi[k], lo[k] = a64[k] + eps * d, a64[k] - eps * d
    fd = (float(loss(*hi)) - float(loss(*lo))) / (2 * eps)
    assert float(np.sum(np.asarray(grad, np.float64) * d)) == pytest.approx(fd, rel=2e-2, abs=1e-4)


def test_particle_filter_equals_numpy_replaying_its_draws():
    from benchmarks.research import particle_filter as pf
    ys, N = pf.inputs("tiny")
    loglik, means, x_first, noise, offsets = pf.particle_filter(ys, N, True)
    assert np.sum(offsets >= 0) > 0            # some steps resampled
    ref_loglik, ref_means = pf.numpy_pf(ys, N, pf.Replay(x_first, noise, offsets))
    np.testing.assert_allclose(loglik, ref_loglik, rtol=1e-12)
    np.testing.assert_allclose(means, ref_means, rtol=1e-10, atol=1e-12)


def test_seq2seq_decode_and_train_equal_numpy():
    from benchmarks.research import seq2seq
    src, tgt, max_len, ps = seq2seq.inputs("tiny")
    tokens, steps = seq2seq.greedy_decode(src, np.int64(max_len), *ps)
    ref_tokens, ref_steps = seq2seq.numpy_decode(src, max_len, *ps)
    assert int(steps) == int(ref_steps) and np.array_equal(tokens, ref_tokens)
    loss, grads = seq2seq.train_step(src, tgt, *ps)
    assert float(loss) == pytest.approx(float(seq2seq.numpy_loss(src, tgt, *ps)), rel=1e-5)
    rng = np.random.default_rng(0)
    for k in (0, 5, 8):          # the source embedding, the recurrent decoder weight, the output bias
        _directional_fd(lambda *p: seq2seq.numpy_loss(src, tgt, *p), ps, k, grads[k], rng)


def test_maml_meta_loss_and_gradient_equal_numpy():
    from benchmarks.research import maml
    params, xs, ys, xq, yq, n = maml.inputs("tiny")
    loss, grads = maml.maml_step(params, xs, ys, xq, yq, n)
    assert float(loss) == pytest.approx(float(maml.numpy_meta_loss(params, xs, ys, xq, yq, n)), rel=1e-5)
    rng = np.random.default_rng(0)
    for k in range(4):
        _directional_fd(lambda *p: maml.numpy_meta_loss(list(p), xs, ys, xq, yq, n), params, k, grads[k], rng)


def test_reinforce_equals_numpy_replaying_its_draws():
    from benchmarks.research import reinforce
    W, b, E, S = reinforce.inputs("tiny")
    loss, lengths, dW, db, draws = reinforce.reinforce_step(W, b, E, S, True)
    assert len(draws) == 4 * int(E) + int(lengths.sum())
    harness.check_close({"dfc": (loss, lengths, dW, db), "numpy": reinforce.numpy_reinforce(W, b, E, S, draws)},
                        "numpy", rtol=1e-10, atol=1e-12)


def test_tree_lstm_with_a_tensor_stack_equals_numpy():
    from benchmarks.research import tree_lstm
    a = tree_lstm.inputs("tiny")
    loss, grads = tree_lstm.tree_lstm_step_tensor_stack(*a)
    assert float(loss) == pytest.approx(float(tree_lstm.numpy_loss(*a)), rel=1e-5)
    rng = np.random.default_rng(0)
    for k in (4, 7, 9):          # the embedding, the combining weight, the classifier
        _directional_fd(lambda *p: tree_lstm.numpy_loss(*a[:4], *p), a[4:], k - 4, grads[k - 4], rng)


@pytest.mark.xfail(strict=True, reason="dfc refuses a Python list used as a stack (pushed in one branch of a "
                                       "tensor if, popped every iteration); the benchmark records it")
def test_tree_lstm_with_a_list_stack_equals_numpy():
    from benchmarks.research import tree_lstm
    a = tree_lstm.inputs("tiny")
    loss, _ = tree_lstm.tree_lstm_step(*a)
    assert float(loss) == pytest.approx(float(tree_lstm.numpy_loss(*a)), rel=1e-5)
