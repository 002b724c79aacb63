"""The research programs added as a held-out speed test (benchmarks/research/: newton_logreg, kmeans, char_rnn,
ising_mh), tiny: dfc against numpy on the same inputs; programs that draw random numbers inside the graph are
checked by replaying dfc's draws in numpy; gradients against numpy's implicit-function-theorem adjoint or
central differences of numpy's loss."""
import numpy as np
import pytest


def test_newton_hypergradient_equals_the_implicit_function_theorem():
    from benchmarks.research import newton_logreg as m
    a = m.inputs("tiny")
    val, w, iters, halvings, d_log_lam, d_X = m.newton_hypergrad(*a)
    ref_val, ref_w, ref_iters, ref_halvings, ref_dl, ref_dX = m.numpy_hypergrad(*a)
    assert int(halvings) > 0 and int(halvings) == int(ref_halvings)      # the line search halved some steps
    assert int(iters) == int(ref_iters) < int(a[7])                        # stopped on the gradient norm
    np.testing.assert_allclose(w, ref_w, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(val, ref_val, rtol=1e-12)
    np.testing.assert_allclose(d_log_lam, ref_dl, rtol=1e-6, atol=1e-10)
    np.testing.assert_allclose(d_X, ref_dX, rtol=1e-6, atol=1e-10)


def test_kmeans_equals_numpy():
    from benchmarks.research import kmeans
    a = kmeans.inputs("tiny")
    centers, assign, iters, inertia = kmeans.kmeans(*a)
    ref_centers, ref_assign, ref_iters, ref_inertia = kmeans.numpy_kmeans(*a)
    assert 1 < int(iters) == int(ref_iters) < int(a[2])                  # stopped when nothing changed
    assert np.array_equal(assign, ref_assign)
    np.testing.assert_allclose(centers, ref_centers, rtol=1e-12)
    np.testing.assert_allclose(inertia, ref_inertia, rtol=1e-12)


def test_char_rnn_sampling_equals_numpy_replaying_its_draws():
    from benchmarks.research import char_rnn
    params, _, _, B, max_len = char_rnn.inputs("tiny")
    seen_early_stop = False
    for _ in range(4):                          # each run draws anew
        tokens, steps, draws = char_rnn.sample(*params, B, max_len, True)
        assert draws.shape == (int(steps), int(B))
        ref_tokens, ref_steps = char_rnn.numpy_sample(*params, B, max_len, draws)
        assert int(steps) == int(ref_steps) and np.array_equal(tokens, ref_tokens)
        seen_early_stop |= int(steps) < int(max_len)
        if int(steps) < int(max_len):
            assert np.all(np.any(tokens == char_rnn.END, axis=1))      # every sequence ended
    assert seen_early_stop


def test_char_rnn_training_loss_and_gradient_equal_numpy():
    from benchmarks.research import char_rnn
    params, seqs, lengths, _, _ = char_rnn.inputs("tiny")
    assert lengths.min() < lengths.max()
    loss, grads = char_rnn.train_step(seqs, lengths, *params)
    assert float(loss) == pytest.approx(float(char_rnn.numpy_loss(seqs, lengths, *params)), rel=1e-5)
    rng, eps = np.random.default_rng(0), 1e-3
    for k in range(5):
        d = rng.standard_normal(params[k].shape)
        hi = [np.asarray(p, np.float64) + (eps * d if q == k else 0) for q, p in enumerate(params)]
        lo = [np.asarray(p, np.float64) - (eps * d if q == k else 0) for q, p in enumerate(params)]
        fd = (char_rnn.numpy_loss(seqs, lengths, *hi) - char_rnn.numpy_loss(seqs, lengths, *lo)) / (2 * eps)
        assert float(np.sum(np.asarray(grads[k], np.float64) * d)) == pytest.approx(fd, rel=2e-2, abs=1e-4)


def test_ising_metropolis_hastings_equals_numpy_replaying_its_draws():
    from benchmarks.research import ising_mh
    a = ising_mh.inputs("tiny")
    spins, accepted, mean_energy, mean_abs_mag, draws = ising_mh.ising_mh(*a, True)
    assert draws.shape == (2 * int(a[2]),)
    ref = ising_mh.numpy_ising(*a, ising_mh.Replay(draws))
    assert 0 < int(accepted) == int(ref[1]) < int(a[2])                 # some flips accepted, some rejected
    assert np.array_equal(spins, ref[0])
    np.testing.assert_allclose([mean_energy, mean_abs_mag], ref[2:], rtol=1e-12)


def test_neural_ode_loss_and_gradient_equal_numpy():
    from benchmarks.research import neural_ode
    a = neural_ode.inputs("tiny")
    loss, accepted, rejected, grads = neural_ode.neural_ode_step(*a)
    ref_loss, ref_accepted, ref_rejected = neural_ode.numpy_loss(*a)
    assert int(accepted) == int(ref_accepted) and 0 < int(rejected) == int(ref_rejected)
    assert float(loss) == pytest.approx(float(ref_loss), rel=1e-12)
    rng, params = np.random.default_rng(0), a[3:]
    for k in range(4):          # the step sizes move with the weights: the derivative of the whole discretization
        d = rng.standard_normal(params[k].shape)
        hi = [p + (1e-6 * d if q == k else 0) for q, p in enumerate(params)]
        lo = [p - (1e-6 * d if q == k else 0) for q, p in enumerate(params)]
        fd = (neural_ode.numpy_loss(*a[:3], *hi)[0] - neural_ode.numpy_loss(*a[:3], *lo)[0]) / 2e-6
        assert float(np.sum(grads[k] * d)) == pytest.approx(fd, rel=1e-5)
