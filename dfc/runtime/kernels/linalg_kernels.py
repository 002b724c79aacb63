"""Kernels of dfc.linalg, written against `xp.linalg` (numpy.linalg or cupy.linalg).

numpy raises LinAlgError for a singular matrix (solve, inv) or one that is not positive definite
(cholesky); the executor reports it as a DfcRuntimeError naming the node. cupy does not check by
default (it returns NaNs, a silently wrong answer), so on a GPU those kernels run under
`cupyx.errstate(linalg="raise")`: cupy then reads cuSOLVER's status (one device sync per call) and raises
numpy's LinAlgError as numpy does.
"""
import numpy as np

from dfc.runtime.kernels.registry import direct, kernel


def _checked(xp, f, what):
    if xp is np:
        return f
    try:
        import cupyx
    except ImportError:     # the strict double: numpy's linalg underneath, which raises by itself
        return f

    def g(*a):
        with cupyx.errstate(linalg="raise"):
            try:
                return f(*a)
            except np.linalg.LinAlgError as e:     # cuSOLVER's status, said as numpy says it
                raise np.linalg.LinAlgError(f"{what} ({e})") from None
    return g


def _lower(xp, x):
    """The symmetric matrix whose lower triangle is x's (what LAPACK reads for cholesky and eigh)."""
    low = xp.tril(x)
    return low + xp.swapaxes(xp.tril(x, -1), -1, -2)


@kernel("MatrixSolve")
def _solve(node, xp):
    def f(a, b):
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])     # shapes are host tuples
        a = xp.broadcast_to(a, batch + a.shape[-2:])
        b = xp.broadcast_to(b, batch + b.shape[-2:])
        return xp.linalg.solve(a, b)
    return direct(_checked(xp, f, "Singular matrix"))


@kernel("MatrixInverse")
def _inv(node, xp):
    return direct(_checked(xp, lambda x: xp.linalg.inv(x), "Singular matrix"))


@kernel("Cholesky")
def _cholesky(node, xp):
    # Only the lower triangle is read (as numpy.linalg.cholesky does); symmetrising first makes
    # every backend agree on that.
    return direct(_checked(xp, lambda x: xp.linalg.cholesky(_lower(xp, x)), "Matrix is not positive definite"))


@kernel("MatrixDeterminant")
def _det(node, xp):
    return direct(lambda x: xp.asarray(xp.linalg.det(x)))


@kernel("LogMatrixDeterminant")
def _slogdet(node, xp):
    def f(ctx, a):
        sign, logdet = xp.linalg.slogdet(a[0])
        return xp.asarray(sign), xp.asarray(logdet)
    return f


@kernel("Qr")
def _qr(node, xp):
    mode = "complete" if node.attrs["full_matrices"] else "reduced"

    def f(ctx, a):
        q, r = xp.linalg.qr(a[0], mode=mode)
        return _positive_diagonal(xp, q, r)
    return f


# QR and eigenvectors are unique only up to signs, and LAPACK (numpy) and cuSOLVER (cupy) choose them
# differently: dfc fixes them on every device, so a program gives the same factors wherever it runs.
# QR: the diagonal of R is non-negative. eigh: each eigenvector's entry of largest magnitude is positive
# (eigenvectors of a repeated eigenvalue stay whatever the library returns: only their span is defined).
def _positive_diagonal(xp, q, r):
    k = min(r.shape[-2], r.shape[-1])
    d = xp.diagonal(r, axis1=-2, axis2=-1)[..., :k]
    s = xp.where(d < 0, -1, 1).astype(r.dtype)
    q = xp.concatenate([q[..., :, :k] * s[..., None, :], q[..., :, k:]], axis=-1)
    r = xp.concatenate([r[..., :k, :] * s[..., :, None], r[..., k:, :]], axis=-2)
    return q, r


def _positive_largest(xp, v):
    idx = xp.argmax(xp.abs(v), axis=-2)
    big = xp.take_along_axis(v, idx[..., None, :], axis=-2)
    return v * xp.where(big < 0, -1, 1).astype(v.dtype)


@kernel("SelfAdjointEig")
def _eigh(node, xp):
    def f(ctx, a):
        w, v = xp.linalg.eigh(_lower(xp, a[0]))
        return w, _positive_largest(xp, v)
    return f
