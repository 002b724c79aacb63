"""The numpy surface (issue 15 item 2): each function against numpy on several shapes, dtypes and axes,
on every execution path (run_all_modes); gradients against finite differences (_gradcheck.check)."""
import numpy as np
import pytest

import dfc
from dfc.compiler.autodiff.op_grads import GRADS, NOT_DIFFERENTIABLE
from dfc.runtime.kernels import KERNELS
from _gradcheck import check
from tests.conftest import run_all_modes

rng = np.random.default_rng(7)


def run(fn, *args):
    """fn traced on the args' dtypes and shapes, run on every execution path."""
    g = dfc.trace(fn, *[dfc.TensorSpec(np.shape(a), np.asarray(a).dtype.name) for a in args])
    return run_all_modes(g, *args)


def same(got, want, exact=True):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def data(shape, dtype="float64"):
    if np.dtype(dtype).kind == "f":
        return rng.normal(size=shape).astype(dtype)
    return rng.integers(-5, 6, size=shape).astype(dtype)


SHAPES = [(5,), (3, 4), (2, 3, 4)]
DTYPES = ["float32", "float64", "int32", "int64"]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_sort_argsort_cumsum_flip_against_numpy(shape, dtype):
    x = data(shape, dtype)
    axes = range(-len(shape), len(shape))

    def per_axis(t):
        return [(dfc.sort(t, a), dfc.argsort(t, a), dfc.cumsum(t, a), dfc.flip(t, a), dfc.cumprod(t, a),
                 dfc.roll(t, 2, a), dfc.roll(t, -7, a)) for a in axes]

    def whole(t):
        return (dfc.sort(t, None), dfc.cumsum(t), dfc.flip(t), dfc.roll(t, 3), dfc.repeat(t, 2), dfc.tile(t, (2, 1)),
                dfc.outer(t, t), dfc.argsort(t, None))

    got = run(lambda t: (per_axis(t), whole(t)), x)
    want = ([(np.sort(x, a), np.argsort(x, a, kind="stable"), np.cumsum(x, a, dtype=x.dtype), np.flip(x, a),
              np.cumprod(x, a, dtype=x.dtype), np.roll(x, 2, a), np.roll(x, -7, a)) for a in axes],
            (np.sort(x, None), np.cumsum(x, dtype=x.dtype), np.flip(x), np.roll(x, 3), np.repeat(x, 2),
             np.tile(x, (2, 1)), np.outer(x, x), np.argsort(x, None, kind="stable")))
    for a, b in zip(dfc.nest.flatten(got), dfc.nest.flatten(want)):
        same(a, b)


def test_sort_ties_and_nan_follow_numpy():
    x = np.array([[3.0, np.nan, 1.0, 3.0, -np.inf, 1.0], [0.0, -0.0, 2.0, np.nan, np.nan, 2.0]])
    s, i, d = run(lambda t: (dfc.sort(t), dfc.argsort(t), dfc.argsort(t, descending=True)), x)
    same(s, np.sort(x))
    same(i, np.argsort(x, kind="stable"))
    # descending: largest first, equal values in index order, NaN first (it sorts last ascending)
    same(d, [[1, 0, 3, 2, 5, 4], [3, 4, 2, 5, 0, 1]])


@pytest.mark.parametrize("shape,k", [((6,), 3), ((3, 5), 5), ((2, 3, 4), 1), ((2, 4), 0)])
def test_top_k(shape, k):
    x = data(shape)
    x[..., 0] = x[..., -1]                       # a tie: the lower index comes first
    v, i = run(lambda t: dfc.top_k(t, k), x)
    order = np.argsort(-x, axis=-1, kind="stable")[..., :k]
    same(i, order)
    same(v, np.take_along_axis(x, order, -1))
    with pytest.raises(dfc.DfcTypeError, match="larger than the last dimension"):
        dfc.trace(lambda t: dfc.top_k(t, shape[-1] + 1), dfc.TensorSpec(shape, "float64"))


def test_top_k_larger_than_dimension_at_run_time():
    g = dfc.trace(lambda t: dfc.top_k(t, 3), dfc.TensorSpec([None], "float32"))
    with pytest.raises(dfc.DfcError, match="k must be at most"):
        g(np.ones(2, np.float32))


def test_take_along_axis_broadcasts_wraps_negative_and_refuses_out_of_range():
    x = data((3, 4))
    idx = np.array([[0, -1, 2], [3, 3, 0], [1, 2, -4]])
    same(run(lambda a, i: dfc.take_along_axis(a, i, 1), x, idx), np.take_along_axis(x, idx, 1))
    col = np.array([[2, 0, 1, 1]])
    same(run(lambda a, i: dfc.take_along_axis(a, i, 0), x, col), np.take_along_axis(x, col, 0))
    flat = np.array([11, 0, 5])
    same(run(lambda a, i: dfc.take_along_axis(a, i, None), x, flat), np.take_along_axis(x, flat, None))
    g = dfc.trace(lambda a, i: dfc.take_along_axis(a, i, 1), dfc.TensorSpec([3, 4], "float64"),
                  dfc.TensorSpec([3, 1], "int64"))
    with pytest.raises(dfc.DfcError, match="out of range"):
        g(x, np.array([[0], [4], [1]]))


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_constructors(dtype):
    got = run(lambda n: (dfc.full([2, 3], 7, dtype), dfc.full((2,), n), dfc.arange(2, 11, 3, dtype),
                         dfc.arange(n), dfc.linspace(0, 1, 5), dfc.linspace(-2.0, 3.0, 7, endpoint=False),
                         dfc.linspace(1, 1, 1), dfc.linspace(0, 1, 0)), np.int64(4))
    want = (np.full([2, 3], 7, dtype), np.full((2,), 4), np.arange(2, 11, 3, dtype=dtype), np.arange(4),
            np.linspace(0, 1, 5, dtype=np.float32), np.linspace(-2, 3, 7, endpoint=False, dtype=np.float32),
            np.linspace(1, 1, 1, dtype=np.float32), np.linspace(0, 1, 0, dtype=np.float32))
    for a, b in zip(got, want):
        assert a.dtype == b.dtype, (a.dtype, b.dtype)
        same(a, b, exact=False)
    lo, hi = np.float64(-1.5), np.float64(2.25)
    same(run(lambda a, b: dfc.linspace(a, b, 9), lo, hi), np.linspace(lo, hi, 9))


def test_repeat_tile_pad_against_numpy():
    x = data((2, 3), "int32")
    cases = [
        (lambda t: dfc.repeat(t, 3, axis=1), np.repeat(x, 3, axis=1)),
        (lambda t: dfc.repeat(t, [1, 0, 2], axis=-1), np.repeat(x, [1, 0, 2], axis=-1)),
        (lambda t: dfc.repeat(t, 0, axis=0), np.repeat(x, 0, axis=0)),
        (lambda t: dfc.tile(t, 3), np.tile(x, 3)),
        (lambda t: dfc.tile(t, (2, 1, 2)), np.tile(x, (2, 1, 2))),
        (lambda t: dfc.pad(t, 1), np.pad(x, 1)),
        (lambda t: dfc.pad(t, ((0, 2), (3, 1)), constant_values=-9), np.pad(x, ((0, 2), (3, 1)), constant_values=-9)),
        (lambda t: dfc.pad(t, (1, 0)), np.pad(x, (1, 0))),
        (lambda t: dfc.roll(t, (1, -1), (0, 1)), np.roll(x, (1, -1), (0, 1))),
    ]
    for fn, want in cases:
        same(run(fn, x), want)
    # unknown sizes: shapes come from the run-time shape
    g = dfc.trace(lambda t, s: (dfc.tile(t, (2, 2)), dfc.repeat(t, 2, 0), dfc.roll(t, s, 1), dfc.flip(t, -1)),
                  dfc.TensorSpec([None, None], "int32"), dfc.TensorSpec([], "int64"))
    for a, b in zip(run_all_modes(g, x, np.int64(5)),
                    (np.tile(x, (2, 2)), np.repeat(x, 2, 0), np.roll(x, 5, 1), np.flip(x, -1))):
        same(a, b)


@pytest.mark.parametrize("eq,shapes", [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("ij,jk", [(2, 3), (3, 4)]), ("i,i->", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("ij->ji", [(3, 4)]), ("ii->i", [(3, 3)]), ("ijk->", [(2, 3, 4)]), ("ij,ij->ij", [(1, 3), (2, 3)]),
    ("ba,ac", [(2, 3), (3, 4)]),
])
def test_einsum_against_numpy(eq, shapes):
    args = [data(s) for s in shapes]
    same(run(lambda *t: dfc.einsum(eq, *t), *args), np.einsum(eq, *args), exact=False)


def test_isnan_isinf_isfinite_and_constants():
    x = np.array([0.0, dfc.nan, dfc.inf, -dfc.inf, 1.5], np.float32)
    got = run(lambda t: (dfc.isnan(t), dfc.isinf(t), dfc.isfinite(t), dfc.isnan(dfc.cast(t, "float64") * 0)), x)
    with np.errstate(invalid="ignore"):
        want = (np.isnan(x), np.isinf(x), np.isfinite(x), np.isnan(x.astype(np.float64) * 0))
    for a, b in zip(got, want):
        same(a, b)
    i = np.arange(3)
    same(run(lambda t: (dfc.isnan(t), dfc.isinf(t)), i)[0], np.zeros(3, bool))
    assert dfc.pi == np.pi and dfc.e == np.e and dfc.inf == np.inf and np.isnan(dfc.nan) and dfc.newaxis is None


def test_clip_with_one_bound():
    x = data((4, 3))
    got = run(lambda t: (dfc.clip(t, -0.5, 0.5), dfc.clip(t, None, 0.1), dfc.clip(t, 0.2), dfc.clip(t, 1, -1)), x)
    for a, b in zip(got, (np.clip(x, -0.5, 0.5), np.clip(x, None, 0.1), np.clip(x, 0.2, None), np.clip(x, 1, -1))):
        same(a, b)


def test_tensor_methods_have_numpy_signatures():
    x = data((2, 3, 4))
    b = np.array([[True, False], [True, True]])

    def f(t, m):
        return (t.max(), t.max(axis=1), t.min(axis=(0, 2), keepdims=True), t.argmax(), t.argmin(axis=-1),
                t.argmax(axis=1, keepdims=True), m.all(), m.any(axis=0), m.all(axis=1, keepdims=True),
                t.prod(axis=2), t.astype("int32"), t.T, t.flatten(), t[:, :1].squeeze(), t[:1, :, :1].squeeze(axis=0),
                t.clip(-0.2, 0.3), t.clip(max=0.0), t.cumsum(), t.cumsum(axis=1), t.dot(t[0].T), t[0].dot(t[0].T),
                t[0, 0].dot(t[0, 0]), t.sum(), t.sum(axis=(0, 1), keepdims=True), t.mean(axis=-1), t.sum(dtype="float32"),
                t.reshape(4, 6), t.reshape((-1,)), t.transpose(1, 0, 2), t.transpose(), t.ravel(), t.cumprod(axis=0),
                t.argsort(axis=1), t[0].repeat(2, axis=0), t.mean(dtype="float32"))

    want = (x.max(), x.max(axis=1), x.min(axis=(0, 2), keepdims=True), x.argmax(), x.argmin(axis=-1),
            x.argmax(axis=1, keepdims=True), b.all(), b.any(axis=0), b.all(axis=1, keepdims=True),
            x.prod(axis=2), x.astype("int32"), x.T, x.flatten(), x[:, :1].squeeze(), x[:1, :, :1].squeeze(axis=0),
            x.clip(-0.2, 0.3), x.clip(max=0.0), x.cumsum(), x.cumsum(axis=1), x.dot(x[0].T), x[0].dot(x[0].T),
            x[0, 0].dot(x[0, 0]), x.sum(), x.sum(axis=(0, 1), keepdims=True), x.mean(axis=-1),
            x.sum(dtype="float32"), x.reshape(4, 6), x.reshape((-1,)), x.transpose(1, 0, 2), x.transpose(),
            x.ravel(), x.cumprod(axis=0), x.argsort(axis=1, kind="stable"), x[0].repeat(2, axis=0),
            x.mean(dtype="float32"))
    got = run(f, x, b)
    assert len(got) == len(want)
    for k, (a, w) in enumerate(zip(got, want)):
        assert np.asarray(a).dtype == np.asarray(w).dtype or k in (25, 34), (k, a.dtype, np.asarray(w).dtype)
        np.testing.assert_allclose(a, w, rtol=1e-5, err_msg=f"result {k}")


# ------------------------------------------------------------------ gradients vs finite differences

GRADIENTS = {
    "sort": (lambda x: dfc.sort(x, 1) * np.arange(4.0), [(3, 4)]),
    "sort_flat_desc": (lambda x: dfc.sort(x, None, descending=True) * np.arange(12.0), [(3, 4)]),
    "top_k": (lambda x: dfc.top_k(x, 2)[0] * np.array([1.0, -2.0]), [(3, 5)]),
    "take_along_axis": (lambda x: dfc.take_along_axis(x, np.array([[0, 0, 2], [1, 3, 3]]), 1), [(2, 4)]),
    "take_along_axis_bcast": (lambda x: dfc.take_along_axis(x, np.array([[0, 0, 2, 1]]), 0) * 2.0, [(3, 4)]),
    "cumsum": (lambda x: dfc.cumsum(x, 1) * x, [(3, 4)]),
    "cumsum_rev": (lambda x: dfc.cumsum(x, 0, reverse=True) ** 2, [(3, 4)]),
    "cumprod": (lambda x: dfc.cumprod(x, -1) * np.arange(1.0, 5.0), [(3, 4)]),
    "cumprod_zero": (lambda x: dfc.cumprod(x * np.array([1.0, 0.0, 1.0, 1.0]) + np.array([0, 0, 0, 0.0]), 1),
                     [(2, 4)]),
    "cumprod_rev": (lambda x: dfc.cumprod(x, 0, reverse=True) * np.arange(12.0).reshape(3, 4), [(3, 4)]),
    "pad": (lambda x, c: dfc.pad(x, ((1, 2), (0, 1)), constant_values=c) * np.arange(30.0).reshape(6, 5), [(3, 4), ()]),
    "einsum_mm": (lambda a, b: dfc.einsum("ij,jk->ik", a, b), [(2, 3), (3, 4)]),
    "einsum_batch": (lambda a, b: dfc.einsum("...ij,...jk->...ik", a, b) ** 2, [(2, 1, 3, 4), (5, 4, 2)]),
    "einsum_sum_only": (lambda a, b: dfc.einsum("ijk,j->i", a, b) ** 2, [(2, 3, 4), (3,)]),
    "einsum_trace_like": (lambda a, b: dfc.einsum("ij,ji->", a, b), [(3, 2), (2, 3)]),
    "einsum_bcast1": (lambda a, b: dfc.einsum("ij,ij->ij", a, b) ** 2, [(1, 3), (2, 3)]),
    "einsum_diagonal": (lambda a: dfc.einsum("ii->i", a) * np.arange(3.0), [(3, 3)]),
    "einsum_trace": (lambda a: dfc.einsum("ii", a) ** 2, [(3, 3)]),
    "einsum_batch_diag": (lambda a, b: dfc.einsum("...ii,ij->...j", a, b) ** 2, [(2, 3, 3), (3, 2)]),
    "einsum_repeat_and_sum": (lambda a: dfc.einsum("iji->j", a) ** 2, [(2, 3, 2)]),
    "einsum_all": (lambda a: dfc.einsum("ij->", a) ** 2, [(2, 3)]),
    "repeat": (lambda x: dfc.repeat(x, [2, 0, 1], axis=1) * np.arange(3.0), [(2, 3)]),
    "repeat_scalar": (lambda x: dfc.repeat(x, 3) * np.arange(18.0), [(2, 3)]),
    "tile": (lambda x: dfc.tile(x, (2, 3)) * np.arange(36.0).reshape(4, 9), [(2, 3)]),
    "roll": (lambda x: dfc.roll(x, 1, 1) * np.arange(6.0).reshape(2, 3), [(2, 3)]),
    "flip": (lambda x: dfc.flip(x) * np.arange(6.0).reshape(2, 3), [(2, 3)]),
    "outer": (lambda a, b: dfc.outer(a, b) ** 2, [(3,), (2, 2)]),
    "linspace": (lambda a, b: dfc.linspace(a, b, 5) ** 2, [(), ()]),
    "clip": (lambda x: dfc.clip(x, -0.3, 0.4) * x, [(3, 4)]),
    "full": (lambda c: dfc.full([2, 3], c) * np.arange(6.0).reshape(2, 3), [()]),
}


@pytest.mark.parametrize("name", sorted(GRADIENTS))
def test_gradient(name):
    fn, shapes = GRADIENTS[name]
    args = [rng.normal(size=s) for s in shapes]
    check(fn, *args, rtol=1e-5, atol=1e-6)


def test_cumprod_gradient_with_zeros_is_exact():
    x = np.array([[2.0, 0.0, 3.0, 0.5], [0.0, 0.0, 1.5, 2.0]])
    check(lambda t: dfc.cumprod(t, 1) * np.array([1.0, 2.0, 3.0, 4.0]), x)


def test_every_new_op_has_a_kernel_and_a_gradient_rule():
    new = ["IsNan", "IsInf", "Cumsum", "Cumprod", "CumprodGrad", "ArgSort", "TopK", "TakeAlongAxis",
           "TakeAlongAxisGrad", "Pad", "Einsum", "MatrixSolve", "MatrixInverse", "Cholesky", "MatrixDeterminant",
           "LogMatrixDeterminant", "Qr", "SelfAdjointEig"]
    for op in new:
        assert op in KERNELS, op
        assert op in GRADS or op in NOT_DIFFERENTIABLE, op


def test_second_derivative_of_cumprod_is_a_clear_error():
    def f(x):
        (g,) = dfc.gradients(dfc.reduce_sum(dfc.cumprod(x)), [x])
        return dfc.gradients(dfc.reduce_sum(g), [x])
    with pytest.raises(dfc.DfcError, match="second derivative of cumprod"):
        dfc.trace(f, dfc.TensorSpec([3], "float64"))


def test_bad_arguments_are_dfc_errors():
    spec = dfc.TensorSpec([2, 3], "float32")
    for fn, msg in [(lambda t: dfc.repeat(t, [1, 2], 1), "2 counts"), (lambda t: dfc.pad(t, 1, mode="edge"), "constant"),
                    (lambda t: dfc.einsum("ij,jk->ik", t), "names 2 operands"), (lambda t: dfc.flip(t, 2), "out of range"),
                    (lambda t: dfc.linspace(0, t, 3), "scalar"), (lambda t: dfc.tile(t, t), "Python int"),
                    (lambda t: dfc.take_along_axis(t, t, 0), "integers"), (lambda t: dfc.einsum("ij->k", t), "no input")]:
        with pytest.raises(dfc.DfcError, match=msg):
            dfc.trace(fn, spec)


# ------------------------------------------------------------------ float64 by default, eager use


@pytest.fixture
def float64_default():
    dfc.config.set_default_float("float64")
    yield
    dfc.config.set_default_float("float32")


def test_default_float_float64(float64_default):
    @dfc.function
    def f(x, n):
        s = 0.0
        for i in range(n):
            s += 0.5
        return (s, dfc.constant(1.5), dfc.zeros([2]), dfc.ones(2), dfc.full([1], 2.5), dfc.linspace(0, 1, 3),
                dfc.arange(0.5, 2.0), dfc.constant([1.0, 2.0]), x + 1.5, dfc.softmax(dfc.constant([1, 2])),
                dfc.random_normal([2]), dfc.one_hot(dfc.constant([0]), 2), dfc.cond(n > 0, lambda: 1.0, lambda: 2.0))

    out = f(np.float32(1.0), np.int64(3))
    assert [o.dtype.name for o in out] == ["float64"] * 8 + ["float32"] + ["float64"] * 4
    assert out[0] == 1.5 and np.allclose(out[5], np.linspace(0, 1, 3))
    assert dfc.zeros([2], dtype="float32").dtype == np.float32     # an explicit dtype is kept
    with pytest.raises(dfc.DfcError, match="use 'float32' or 'float64'"):
        dfc.config.set_default_float("int32")


def test_default_float_from_the_environment():
    import subprocess
    import sys
    code = "import dfc; print(dfc.config.default_float(), dfc.constant(0.5).dtype, dfc.zeros(2).dtype)"
    env = dict(__import__("os").environ, DFC_DEFAULT_FLOAT="float64")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["float64", "float64", "float64"]


def test_outside_a_graph_the_functions_compute_at_once():
    x = data((3, 4))
    same(dfc.sort(x, 0), np.sort(x, 0))
    same(dfc.top_k(x, 2)[1], np.argsort(-x, -1, kind="stable")[:, :2])
    same(dfc.einsum("ij->j", x), x.sum(0), exact=False)
    same(dfc.linalg.norm(x, 1), np.linalg.norm(x, 1), exact=False)
    same(dfc.roll(x, 2), np.roll(x, 2))
    same(dfc.pad(x, 1), np.pad(x, 1))


def test_every_function_of_the_numpy_surface_has_a_docstring():
    import inspect
    from dfc.compiler import linalg, tensor_methods
    names = [n for n in dfc._OPS + dfc._NUMPY + list(dfc._ALIASES) if callable(getattr(dfc, n))]
    funcs = [getattr(dfc, n) for n in names] + [getattr(linalg, n) for n in dir(linalg)
                                               if inspect.isfunction(getattr(linalg, n)) and not n.startswith("_")]
    funcs += list(tensor_methods.METHODS.values()) + [dfc.Tensor.T, dfc.config.set_default_float]
    missing = [getattr(f, "__name__", f) for f in funcs if len((f.__doc__ or "").strip()) < 20]
    assert not missing


def test_linspace_dtypes_follow_numpy():
    for a, b in [(np.int64(0), np.int64(3)), (np.float32(0), np.float32(2)), (np.int32(1), np.float32(2))]:
        got = run(lambda s, t: dfc.linspace(s, t, 4), a, b)
        want = np.linspace(a, b, 4)
        assert got.dtype == want.dtype, (a.dtype, b.dtype, got.dtype, want.dtype)
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert run(lambda s: dfc.linspace(s, 2.0, 3), np.float32(0)).dtype == np.float32


def test_integer_einsum_and_a_saved_graph_of_every_new_op(tmp_path):
    i = rng.integers(-3, 4, size=(3, 3)).astype(np.int32)
    same(run(lambda t: dfc.einsum("ij,jk->ik", t, t), i), np.einsum("ij,jk->ik", i, i))

    def f(x, k):
        s = dfc.linalg.eigh(x)
        return (dfc.top_k(x, 2), dfc.sort(x, descending=True), dfc.cumprod(x, 0, reverse=True), dfc.pad(x, 1),
                dfc.einsum("ij->i", x), dfc.isnan(x), dfc.isinf(x), dfc.linalg.solve(x + 3 * np.eye(3), x), s,
                dfc.linalg.qr(x), dfc.linalg.slogdet(x), dfc.linalg.det(x), dfc.linalg.inv(x + 3 * np.eye(3)),
                dfc.linalg.cholesky(dfc.matmul(x, x, transpose_b=True) + np.eye(3)), dfc.take_along_axis(x, k, 1),
                dfc.gradients(dfc.reduce_sum(dfc.cumprod(x) * dfc.cumsum(x) + dfc.pad(x, 1)[0, 0]), [x]))
    g = dfc.trace(f, dfc.TensorSpec([3, 3], "float64"), dfc.TensorSpec([3, 1], "int64"))
    x, k = rng.normal(size=(3, 3)), np.array([[2], [0], [1]])
    dfc.save(g, str(tmp_path / "g.json"))
    h = dfc.load(str(tmp_path / "g.json"))
    for a, b in zip(dfc.nest.flatten(g(x, k)), dfc.nest.flatten(run_all_modes(h, x, k))):
        np.testing.assert_array_equal(a, b)


def test_python_float_as_a_dtype_is_the_default_float(float64_default):
    assert dfc.zeros(2, dtype=float).dtype == np.float64
    assert dfc.constant(1, dtype=float).dtype == np.float64
    dfc.config.set_default_float("float32")
    assert dfc.cast(np.ones(2), float).dtype == np.float32


def test_eye_tril_triu_diagonal_trace():
    x = data((2, 3, 4))
    s = data((2, 3, 3))
    got = run(lambda t, q: (dfc.eye(3), dfc.eye(2, 4, 1, "int32"), dfc.eye(3, k=-1), dfc.tril(t), dfc.tril(t, 1),
                            dfc.triu(t, -1), dfc.triu(t), dfc.diagonal(q), dfc.linalg.trace(q)), x, s)
    want = (np.eye(3, dtype=np.float32), np.eye(2, 4, 1, dtype=np.int32), np.eye(3, k=-1, dtype=np.float32),
            np.tril(x), np.tril(x, 1), np.triu(x, -1), np.triu(x), np.diagonal(s, 0, -2, -1),
            np.trace(s, 0, -2, -1))
    for a, b in zip(got, want):
        assert a.dtype == b.dtype
        same(a, b, exact=False)
    n = run(lambda k: dfc.eye(k), np.int64(2))
    same(n, np.eye(2, dtype=np.float32))
    check(lambda q: dfc.linalg.trace(q)[:, None, None] * dfc.tril(q, -1) + dfc.diagonal(dfc.triu(q))[:, None, :], s)


def test_einsum_must_keep_ellipsis_dimensions():
    with pytest.raises(dfc.DfcTypeError, match="must be in the output"):
        dfc.trace(lambda t: dfc.einsum("...i->i", t), dfc.TensorSpec([2, 3], "float32"))
    same(run(lambda t: dfc.einsum("...i->i", t), np.arange(3.0)), np.arange(3.0))   # no '...' dimensions
