"""dfc.linalg: numpy.linalg on tensors, with gradients (dfc/compiler/autodiff/linalg_grads.py).

Every function works on the last two axes and batches over the leading ones, as numpy.linalg does.
Integer inputs become float64 (numpy's result dtype); float32 stays float32. Kernels call
numpy.linalg (cupy.linalg on a GPU): a singular matrix in solve/inv or one that is not positive
definite in cholesky is a DfcRuntimeError on the CPU (cupy gives NaNs instead).
"""
import builtins

from dfc.errors import DfcTypeError
from dfc.ir import dtypes as dt
from dfc.compiler import ops_api as K
from dfc.compiler.tracing import convert, current_builder, user_location


def _b():
    return current_builder()


def _float(x):
    x = convert(x)
    return x if x.dtype in dt.FLOATS else K.cast(x, "float64")


def matrix_transpose(x):
    """x with its last two axes swapped (numpy.matrix_transpose; the rank must be known)."""
    x = convert(x)
    if x.ndim is None or x.ndim < 2:
        raise DfcTypeError(f"matrix_transpose needs a tensor of known rank >= 2, got shape {x.shape}",
                           loc=user_location())
    r = x.ndim
    return K.transpose(x, list(builtins.range(r - 2)) + [r - 1, r - 2])


def solve(a, b):
    """numpy.linalg.solve: x with a @ x == b, for square a (..., M, M) and b (..., M, K), or b of
    shape (M,) (a vector, numpy 2 rule: only an exactly 1-D b is a vector). Batch axes broadcast."""
    a, b = K.operands(_float(a), _float(b))
    if b.ndim == 1:
        return K.squeeze(_b().make1("MatrixSolve", (a, K.expand_dims(b, -1))), -1)
    return _b().make1("MatrixSolve", (a, b))


def inv(a):
    """numpy.linalg.inv: the inverse of each square matrix a (..., M, M)."""
    return _b().make1("MatrixInverse", (_float(a),))


def cholesky(a):
    """numpy.linalg.cholesky: lower-triangular L with L @ L.T == a, for a symmetric positive definite a.
    Only the lower triangle of a is read (as numpy does), so the gradient is lower-triangular too."""
    return _b().make1("Cholesky", (_float(a),))


def det(a):
    """numpy.linalg.det: the determinant of each square matrix (LU based)."""
    return _b().make1("MatrixDeterminant", (_float(a),))


def slogdet(a):
    """numpy.linalg.slogdet: (sign, log|det a|) of each square matrix; only log|det| has a gradient."""
    sign, logdet = _b().make("LogMatrixDeterminant", (_float(a),))
    return sign, logdet


def qr(a, mode="reduced"):
    """numpy.linalg.qr: (q, r) with a == q @ r, q with orthonormal columns, r upper-triangular.
    mode "reduced" (q: (..., M, K), r: (..., K, N), K = min(M, N)), "complete" (q: (..., M, M)) or
    "r" (r alone). Gradients: mode "reduced" with M >= N (the usual tall case), as in TensorFlow."""
    if mode not in ("reduced", "complete", "r"):
        raise DfcTypeError(f"dfc.linalg.qr mode must be 'reduced', 'complete' or 'r', got {mode!r}",
                           loc=user_location())
    q, r = _b().make("Qr", (_float(a),), {"full_matrices": mode == "complete"})
    return r if mode == "r" else (q, r)


def eigh(a, UPLO="L"):
    """numpy.linalg.eigh: (w, v) of a symmetric matrix: eigenvalues w ascending, eigenvectors as the
    columns of v (a @ v == v * w). Only the triangle named by UPLO ("L" or "U") is read. Gradients
    assume distinct eigenvalues (as in JAX and TF); an eigenvector's sign is whatever LAPACK gives."""
    if UPLO not in ("L", "U"):
        raise DfcTypeError(f"dfc.linalg.eigh UPLO must be 'L' or 'U', got {UPLO!r}", loc=user_location())
    a = _float(a)
    if UPLO == "U":
        a = matrix_transpose(a)      # the upper triangle of a is the lower triangle of a.T
    w, v = _b().make("SelfAdjointEig", (a,))
    return w, v


def eigvalsh(a, UPLO="L"):
    """numpy.linalg.eigvalsh: the eigenvalues (ascending) of a symmetric matrix."""
    return eigh(a, UPLO)[0]


def trace(x):
    """numpy.linalg.trace: the sum of the main diagonal of each square matrix (dfc.trace builds graphs)."""
    from dfc.compiler.numpy_api import diagonal
    return K.reduce_sum(diagonal(x), -1)


def diagonal(x):
    """numpy.linalg.diagonal: out[..., i] = x[..., i, i] for square matrices (also dfc.diagonal)."""
    from dfc.compiler.numpy_api import diagonal as diag
    return diag(x)


def _vector_norm(x, ord, axis, keepdims):
    ax = axis
    if ord is None or ord == 2:
        return K.sqrt(K.reduce_sum(K.square(x), ax, keepdims))
    if ord == float("inf"):
        return K.reduce_max(K.abs(x), ax, keepdims)
    if ord == float("-inf"):
        return K.reduce_min(K.abs(x), ax, keepdims)
    if ord == 0:
        return K.reduce_sum(K.cast(K.not_equal(x, 0), x.dtype), ax, keepdims)
    if ord == 1:
        return K.reduce_sum(K.abs(x), ax, keepdims)
    if isinstance(ord, (int, float)) and not isinstance(ord, bool):
        return K.pow(K.reduce_sum(K.pow(K.abs(x), float(ord)), ax, keepdims), 1.0 / ord)
    raise DfcTypeError(f"dfc.linalg.norm: ord {ord!r} is not a vector norm", loc=user_location())


def _matrix_norm(x, ord, axes, keepdims):
    row, col = axes
    if ord in (None, "fro"):
        return K.sqrt(K.reduce_sum(K.square(x), list(axes), keepdims))
    if ord in (1, -1, float("inf"), float("-inf")):
        summed, over = (row, col) if ord in (1, -1) else (col, row)
        pick = K.reduce_max if ord in (1, float("inf")) else K.reduce_min
        out = pick(K.reduce_sum(K.abs(x), summed, True), over, True)
        return out if keepdims else K.squeeze(out, sorted(axes))
    raise DfcTypeError(f"dfc.linalg.norm: matrix ord {ord!r} is not supported (None, 'fro', 1, -1, inf and "
                       f"-inf are; 2, -2 and 'nuc' need singular values)", loc=user_location())


def norm(x, ord=None, axis=None, keepdims=False):
    """numpy.linalg.norm: with axis=None and ord=None the 2-norm of the flattened x; an int axis (or a
    1-D x) gives vector norms (ord None/2, 1, inf, -inf, 0 = count of nonzeros, any p), a pair of
    axes (or a 2-D x with ord given) matrix norms (None/'fro', 1, -1, inf, -inf). A composition of
    reductions; like JAX, the gradient of the 2-norm at 0 is NaN."""
    x = _float(x)
    if axis is None:
        if ord is None:
            return _vector_norm(x, None, None, keepdims)
        if x.ndim == 1:
            axis = 0
        elif x.ndim == 2:
            axis = (0, 1)
        else:
            raise DfcTypeError("dfc.linalg.norm with ord needs a 1-D or 2-D tensor, or axis=",
                               loc=user_location())
    if isinstance(axis, (list, tuple)) and len(axis) == 2:
        rank = x.ndim
        if rank is None:
            raise DfcTypeError("dfc.linalg.norm over two axes needs a tensor of known rank", loc=user_location())
        axes = tuple(a % rank for a in axis)
        if axes[0] == axes[1]:
            raise DfcTypeError("dfc.linalg.norm: the two axes must differ", loc=user_location())
        return _matrix_norm(x, ord, axes, keepdims)
    if isinstance(axis, (list, tuple)):
        if len(axis) != 1:
            raise DfcTypeError(f"dfc.linalg.norm axis must be an int or a pair, got {axis!r}", loc=user_location())
        axis = axis[0]
    return _vector_norm(x, ord, axis, keepdims)
