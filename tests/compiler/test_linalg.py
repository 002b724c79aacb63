"""dfc.linalg against numpy.linalg (batched, float32/float64, every execution path) and each gradient
against finite differences of the same graph (_gradcheck.check)."""
import numpy as np
import pytest

import dfc
from _gradcheck import check
from tests.conftest import run_all_modes

rng = np.random.default_rng(3)


def run(fn, *args):
    g = dfc.trace(fn, *[dfc.TensorSpec(np.shape(a), np.asarray(a).dtype.name) for a in args])
    return run_all_modes(g, *args)


def spd(*shape):
    """Symmetric positive definite matrices (well conditioned)."""
    a = rng.normal(size=shape)
    return a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])


def lower_spd(*shape):
    """An SPD matrix's lower triangle with noise above the diagonal (only the lower triangle is read)."""
    return np.tril(spd(*shape)) + np.triu(rng.normal(size=shape), 1)


def close(got, want, dtype):
    tol = 1e-4 if dtype == "float32" else 1e-10
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("batch", [(), (2,), (2, 3)])
def test_against_numpy(dtype, batch):
    a = (rng.normal(size=batch + (4, 4)) + 4 * np.eye(4)).astype(dtype)
    b = rng.normal(size=batch + (4, 2)).astype(dtype)
    s = spd(*batch, 4, 4).astype(dtype)
    got = run(lambda a, b, s: (dfc.linalg.solve(a, b), dfc.linalg.inv(a), dfc.linalg.det(a), *dfc.linalg.slogdet(a),
                               dfc.linalg.cholesky(s), dfc.linalg.eigh(s)[0], dfc.linalg.norm(a),
                               dfc.linalg.norm(a, axis=-1), dfc.linalg.norm(a, 1, axis=(-2, -1))), a, b, s)
    want = (np.linalg.solve(a, b), np.linalg.inv(a), np.linalg.det(a), *np.linalg.slogdet(a), np.linalg.cholesky(s),
            np.linalg.eigh(s)[0], np.linalg.norm(a), np.linalg.norm(a, axis=-1), np.linalg.norm(a, 1, axis=(-2, -1)))
    for k, (x, y) in enumerate(zip(got, want)):
        assert x.dtype == dtype and x.shape == y.shape, (k, x.dtype, x.shape, y.shape)
        close(x, y, dtype)
    q, r = run(lambda a: dfc.linalg.qr(a), a)
    close(q @ r, a, dtype)
    close(np.abs(r), np.abs(np.linalg.qr(a)[1]), dtype)
    w, v = run(lambda s: dfc.linalg.eigh(s), s)
    close(s @ v, v * w[..., None, :], dtype)


def test_shapes_modes_and_integers():
    a = rng.normal(size=(5, 3))
    q, r = run(lambda a: dfc.linalg.qr(a, "complete"), a)
    assert q.shape == (5, 5) and r.shape == (5, 3)
    np.testing.assert_allclose(q @ r, a, atol=1e-12)
    assert run(lambda a: dfc.linalg.qr(a, "r"), a).shape == (3, 3)
    m = np.array([[2, 1], [1, 3]])
    x = run(lambda m, v: dfc.linalg.solve(m, v), m, np.array([1, 2]))
    assert x.dtype == np.float64
    np.testing.assert_allclose(x, np.linalg.solve(m, [1, 2]))
    u = np.triu(rng.normal(size=(3, 3))) + np.tril(rng.normal(size=(3, 3)), -1)
    sym_u = np.triu(u) + np.triu(u, 1).T
    w = run(lambda u: dfc.linalg.eigvalsh(u, UPLO="U"), u)
    np.testing.assert_allclose(w, np.linalg.eigvalsh(sym_u), atol=1e-12)
    v = rng.normal(size=(4, 3))
    for kw in [dict(ord=np.inf, axis=1), dict(ord=-np.inf, axis=0), dict(ord=0, axis=1), dict(ord=3, axis=0),
               dict(ord=1), dict(ord="fro"), dict(ord=np.inf), dict(ord=-1), dict(axis=(1, 0), keepdims=True)]:
        np.testing.assert_allclose(run(lambda t: dfc.linalg.norm(t, **kw), v), np.linalg.norm(v, **kw),
                                   err_msg=str(kw))


def test_errors():
    with pytest.raises(dfc.DfcTypeError, match="square"):
        dfc.trace(lambda a: dfc.linalg.inv(a), dfc.TensorSpec([2, 3], "float64"))
    with pytest.raises(dfc.DfcTypeError, match="singular values"):
        dfc.trace(lambda a: dfc.linalg.norm(a, 2), dfc.TensorSpec([2, 3], "float64"))
    g = dfc.trace(lambda a: dfc.linalg.inv(a), dfc.TensorSpec([2, 2], "float64"))
    with pytest.raises(dfc.DfcRuntimeError, match="[Ss]ingular"):
        g(np.zeros((2, 2)))
    g = dfc.trace(lambda a: dfc.linalg.cholesky(a), dfc.TensorSpec([2, 2], "float64"))
    with pytest.raises(dfc.DfcRuntimeError, match="positive definite"):
        g(-np.eye(2))
    with pytest.raises(dfc.DfcError, match="M >= N"):
        dfc.trace(lambda a: dfc.gradients(dfc.reduce_sum(dfc.linalg.qr(a)[1]), [a]), dfc.TensorSpec([2, 3], "float64"))


W = rng.normal(size=(3, 3))      # fixed weights make each loss depend on every output entry differently

GRADIENTS = {
    "solve": (lambda a, b: dfc.linalg.solve(a, b) * W[:, :2], [np.eye(3) * 3 + rng.normal(size=(3, 3)),
                                                               rng.normal(size=(3, 2))]),
    "solve_vector": (lambda a, b: dfc.linalg.solve(a, b) ** 2, [np.eye(3) * 3 + rng.normal(size=(3, 3)),
                                                                rng.normal(size=3)]),
    "solve_batch_bcast": (lambda a, b: dfc.linalg.solve(a, b) ** 2, [np.eye(3) * 3 + rng.normal(size=(3, 3)),
                                                                     rng.normal(size=(2, 3, 1))]),
    "inv": (lambda a: dfc.linalg.inv(a) * W, [np.eye(3) * 3 + rng.normal(size=(3, 3))]),
    "det": (lambda a: dfc.linalg.det(a), [rng.normal(size=(2, 3, 3))]),
    "slogdet": (lambda a: dfc.linalg.slogdet(a)[1], [rng.normal(size=(3, 3))]),
    "cholesky": (lambda a: dfc.linalg.cholesky(a) * W, [lower_spd(3, 3)]),
    "cholesky_batch": (lambda a: dfc.linalg.cholesky(a) ** 2, [lower_spd(2, 3, 3)]),
    "eigh_values": (lambda a: dfc.linalg.eigh(a)[0] * np.array([1.0, -2.0, 0.5]), [lower_spd(3, 3)]),
    # eigenvectors up to sign: a sign-invariant loss
    "eigh_vectors": (lambda a: dfc.linalg.eigh(a)[1] ** 2 * W + dfc.linalg.eigh(a)[0], [lower_spd(3, 3)]),
    "eigh_upper": (lambda a: dfc.linalg.eigh(a, "U")[0] ** 2, [spd(3, 3) + np.triu(rng.normal(size=(3, 3)), 1)]),
    "qr": (lambda a: dfc.linalg.qr(a)[0] * W[:, :2] + dfc.einsum("ij->j", dfc.linalg.qr(a)[1] ** 2),
           [rng.normal(size=(3, 2))]),
    "qr_square_r_only": (lambda a: dfc.linalg.qr(a, "r") * W, [rng.normal(size=(3, 3))]),
    "norm": (lambda a: dfc.linalg.norm(a), [rng.normal(size=(3, 4))]),
    "norm_inf": (lambda a: dfc.linalg.norm(a, np.inf, axis=1), [rng.normal(size=(3, 4))]),
    "norm_matrix_1": (lambda a: dfc.linalg.norm(a, 1), [rng.normal(size=(3, 4))]),
}


@pytest.mark.parametrize("name", sorted(GRADIENTS))
def test_gradient(name):
    fn, args = GRADIENTS[name]
    check(fn, *args, rtol=1e-5, atol=1e-6)


def test_second_derivative_through_inverse():
    check(lambda a: dfc.gradients(dfc.reduce_sum(dfc.linalg.inv(a) * W), [a])[0] * W,
          np.eye(3) * 3 + rng.normal(size=(3, 3)))


def test_qr_and_eigenvector_signs_are_the_same_on_every_device():
    """LAPACK and cuSOLVER pick different signs for Q's columns and eigenvectors (seen on an H200: every
    path on gpu:0 disagreed with the reference interpreter in sign); dfc fixes them: R's diagonal is
    non-negative and each eigenvector's largest-magnitude entry is positive."""
    a = rng.normal(size=(3, 5, 4))
    q, r = run(lambda a: dfc.linalg.qr(a), a)
    assert (np.diagonal(r, axis1=-2, axis2=-1) >= 0).all()
    np.testing.assert_allclose(q @ r, a, atol=1e-12)
    s = spd(3, 4, 4)
    w, v = run(lambda s: dfc.linalg.eigh(s), s)
    big = np.take_along_axis(v, np.argmax(np.abs(v), axis=-2)[..., None, :], axis=-2)
    assert (big > 0).all()
    np.testing.assert_allclose(s @ v, v * w[..., None, :], atol=1e-10)
    assert (np.diagonal(np.linalg.qr(a)[1], axis1=-2, axis2=-1) < 0).any()    # numpy alone would not say so
