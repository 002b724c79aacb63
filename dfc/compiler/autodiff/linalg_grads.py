"""Gradient rules of dfc.linalg (the standard reverse-mode formulas, as in TensorFlow and JAX).

Cholesky and SelfAdjointEig read only the lower triangle of their input, so their gradients are
the derivative with respect to that triangle: a symmetric-direction gradient G becomes
tril(G + G^T) with G's own diagonal (`_lower_part`).
"""
from dfc.compiler import ops_api as K
from dfc.compiler import linalg
from dfc.compiler.tracing import current_builder
from dfc.errors import DfcError

_mT = linalg.matrix_transpose


def _make(op, inputs, attrs=None):
    return current_builder().make1(op, inputs, attrs)


def _unbroadcast(op, k, g):
    from dfc.compiler.autodiff.op_grads import unbroadcast
    return unbroadcast(op, k, g)


def _masks(x):
    """(strictly lower, diagonal) masks of x's last two axes, in x's dtype."""
    n = x.shape[-1] if x.shape is not None and x.shape[-1] is not None else K.shape(x)[-1]
    i = K.range(0, n, 1, "int64")
    rows, cols = K.expand_dims(i, -1), K.expand_dims(i, 0)
    return K.cast(K.greater(rows, cols), x.dtype), K.cast(K.equal(rows, cols), x.dtype)


def _lower_part(g):
    """tril(g + g^T) with g's diagonal: the gradient w.r.t. the lower triangle that was read."""
    strict, diag = _masks(g)
    return (g + _mT(g)) * strict + g * diag


def _solve_grad(op, g):
    a, x = op.x(0), op.y(0)
    gb = linalg.solve(_mT(a), g)
    return [_unbroadcast(op, 0, -K.matmul(gb, _mT(x))), _unbroadcast(op, 1, gb)]


def _inv_grad(op, g):
    yt = _mT(op.y(0))
    return [-K.matmul(K.matmul(yt, g), yt)]


def _cholesky_grad(op, g):
    low = op.y(0)
    strict, diag = _masks(low)
    middle = K.matmul(_mT(low), g)
    middle = middle * strict + 0.5 * middle * diag               # phi: lower triangle, halved diagonal
    left = linalg.solve(_mT(low), middle)                        # L^-T phi
    s = _mT(linalg.solve(_mT(low), _mT(left)))                   # L^-T phi L^-1
    return [_lower_part(0.5 * (s + _mT(s)))]


def _det_grad(op, g):
    scale = K.expand_dims(K.expand_dims(g * op.y(0), -1), -1)
    return [scale * _mT(linalg.inv(op.x(0)))]


def _slogdet_grad(op, g_sign, g_logdet):
    if g_logdet is None:
        return [None]
    scale = K.expand_dims(K.expand_dims(g_logdet, -1), -1)
    return [scale * _mT(linalg.inv(op.x(0)))]


def _tall(op):
    s = op.input(0).shape
    if s is None or s[-1] is None or s[-2] is None:
        raise DfcError("the gradient of qr needs the matrix size known while tracing: give the matrix a "
                       "full shape (a TensorSpec with both sizes, or dfc.reshape to them)", node=op.node.name)
    m, n = s[-2:]
    if m < n or (op.attrs["full_matrices"] and m > n):
        raise DfcError(f"the gradient of qr is supported for mode='reduced' of an M x N matrix with M >= N, "
                       f"got {m} x {n}{' (complete)' if op.attrs['full_matrices'] else ''}: for a wide "
                       f"matrix differentiate the qr of its transpose instead, or dfc.stop_gradient the "
                       f"input", node=op.node.name)


def _qr_grad(op, dq, dr):
    _tall(op)
    q, r = op.y(0), op.y(1)
    dq = dq if dq is not None else K.zeros_like(q)
    dr = dr if dr is not None else K.zeros_like(r)

    def times_r_inv_t(x):                      # x @ r^-T, r upper-triangular
        return _mT(linalg.solve(r, _mT(x)))

    qdq = K.matmul(_mT(q), dq)
    rdr = K.matmul(r, _mT(dr))
    strict, diag = _masks(r)
    m = (qdq - _mT(qdq)) + (rdr - _mT(rdr))
    tril = m * (strict + diag)
    grad = K.matmul(q, dr + times_r_inv_t(tril)) + times_r_inv_t(dq - K.matmul(q, qdq))
    return [grad]


def _eigh_grad(op, ge, gv):
    w, v = op.y(0), op.y(1)
    strict, diag = _masks(v)
    off = 1 - diag
    diff = K.expand_dims(w, -2) - K.expand_dims(w, -1)        # diff[i, j] = w_j - w_i
    f = off / (diff + diag)                                    # 1 / (w_j - w_i) off the diagonal, 0 on it
    inner = diag * K.expand_dims(ge, -1) if ge is not None else K.zeros_like(v)
    if gv is not None:
        inner = inner + f * K.matmul(_mT(v), gv)
    g = K.matmul(K.matmul(v, inner), _mT(v))
    return [_lower_part(g)]


GRADS = {
    "MatrixSolve": _solve_grad,
    "MatrixInverse": _inv_grad,
    "Cholesky": _cholesky_grad,
    "MatrixDeterminant": _det_grad,
    "LogMatrixDeterminant": _slogdet_grad,
    "Qr": _qr_grad,
    "SelfAdjointEig": _eigh_grad,
}
