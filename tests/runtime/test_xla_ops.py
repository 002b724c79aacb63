"""The XLA lowerings of single ops (dfc/runtime/xla/jops.py) agree with dfc's numpy kernels, every op that can
run inside a loop frame has an XLA lowering or a reason for none (jops.NOT_LOWERED), and graphs that use
them in loops and their gradients agree with the reference interpreter through `to_jax`.

Tolerances, per dtype: the elementwise transcendental functions (exp, log, tanh, sin, ...) of XLA's CPU
backend are its own polynomial approximations, not the C library's that numpy calls, so they differ in the
last bits: float64 rtol 1e-13, float32 rtol 2e-6 (a few units in the last place); reductions, matmuls and
scans may be reassociated, which stays well inside those. Linear algebra (det, slogdet, QR, eigh) goes
through other LAPACK kernels than numpy.linalg's: float64 rtol 1e-10. Ints and bools: exact; so are the
ops that only move values (shapes, indexing, gathers, casts), whatever the dtype.
"""
import numpy as np
import pytest

import dfc
from tests.conftest import SAME_ON_EVERY_TEST_DEVICE
from dfc.ir import ops as opreg
from dfc.ir.graph import Node

pytest.importorskip("jax")

from dfc.runtime.xla import to_jax  # noqa: E402

pytestmark = [pytest.mark.host_devices("the XLA lowerings are compiled for JAX's CPU backend"),
              SAME_ON_EVERY_TEST_DEVICE]

RNG = np.random.default_rng(7)
F64, F32, I64, I32 = np.float64, np.float32, np.int64, np.int32


def _f(*shape, lo=-2.0, hi=2.0, dtype=F64):
    return RNG.uniform(lo, hi, shape).astype(dtype)


def _i(*shape, lo=-5, hi=6, dtype=I64):
    return RNG.integers(lo, hi, shape).astype(dtype)


X = _f(3, 4)
X32 = _f(3, 4, dtype=F32)
POS = _f(3, 4, lo=0.1, hi=3.0)
SPECIAL = np.array([[np.nan, np.inf, -np.inf, 0.0], [1.5, -2.5, 0.5, -0.5], [2.5, 3.5, -1e300, 1e-300]])
OUT_OF_RANGE = np.array([[np.nan, np.inf, -np.inf, 0.0, -0.5, -2.7], [2.9, 300.7, -129.5, 3e9, -3e9, 2.0 ** 31],
                         [-2.0 ** 31, 9.3e18, -9.3e18, 1e19, 2.0 ** 63, -2.0 ** 63]])
NZ = _i(3, 4)
NZ[NZ == 0] = 3         # nonzero integer divisors
B = RNG.random((3, 4)) < 0.5
SQ = _f(2, 3, 3)
TIES = np.array([[3.0, 1.0, 3.0, 2.0, 1.0], [0.0, 0.0, -1.0, 0.0, 5.0]])

TRANSCENDENTAL = {"Exp", "Log", "Log1p", "Sin", "Cos", "Tanh", "Sigmoid", "Pow", "Softmax", "LogSoftmax",
                  "Rsqrt", "Sqrt"}
COMPUTED = TRANSCENDENTAL | {"MatMul", "Einsum", "Mean", "Sum", "Prod", "Cumsum", "Cumprod", "CumprodGrad",
                             "Div", "Reciprocal", "Mod", "FloorDiv", "SumToShape", "GetItemGrad", "ScatterAdd",
                             "TakeAlongAxisGrad"}      # (sums: XLA may add in another order)
LINALG = {"MatrixDeterminant", "LogMatrixDeterminant", "Qr", "SelfAdjointEig", "MatrixSolve",
          "MatrixInverse", "Cholesky"}


def case(op, inputs, attrs=None, static=(), name=None):
    """One op applied to `inputs`; the positions in `static` are numpy values when compiling (shapes,
    folded by lower.py in a real graph), the others traced."""
    return (name or op, op, attrs or {}, inputs, tuple(static))


UNARY = ["Neg", "Abs", "Sign", "Square", "Exp", "Sin", "Cos", "Tanh", "Floor", "Ceil", "Round", "Sigmoid", "Relu",
         "ZerosLike", "OnesLike", "Identity", "StopGradient"]
POSITIVE = ["Sqrt", "Rsqrt", "Reciprocal", "Log", "Log1p"]
BINARY = ["Add", "Sub", "Mul", "Div", "Maximum", "Minimum", "Less", "LessEqual", "Greater", "GreaterEqual", "Equal",
          "NotEqual"]
REDUCE = ["Sum", "Prod", "Mean", "Max", "Min"]

CASES = (
    [case(op, [X]) for op in UNARY]
    + [case(op, [X32], name=op + "-f32") for op in ("Exp", "Tanh", "Sigmoid", "Relu", "Sign")]
    + [case(op, [POS]) for op in POSITIVE]
    + [case(op, [SPECIAL], name=op + "-special") for op in ("IsFinite", "IsNan", "IsInf", "Sign", "Round", "Floor",
                                                          "Abs")]
    + [case(op, [SPECIAL], name=op + "-special") for op in ("Relu", "Sigmoid", "Tanh", "Exp", "Log1p", "Square")]
    + [case(op, [SPECIAL], {"axis": ax}, name=f"{op}-special-{ax}") for op in ("ArgMax", "ArgMin")
       for ax in (0, 1)]      # NaN first, as numpy
    + [case(op, [SPECIAL], {"axis": 1, "keepdims": False}, name=op + "-special") for op in ("Max", "Min", "Sum")]
    + [case(op, [SPECIAL, SPECIAL[::-1]], name=op + "-special") for op in ("Maximum", "Minimum", "Less", "Equal",
                                                                            "Mul", "Div")]
    + [case("ArgSort", [SPECIAL], {"axis": 1, "descending": d}, name=f"ArgSort-special-{d}") for d in (False, True)]
    + [case("TopK", [SPECIAL], {"k": 3}, name="TopK-special"),
       case("Softmax", [SPECIAL], {"axis": 1}, name="Softmax-special")]
    + [case("LogicalNot", [B])]
    + [case(op, [X, X[0]]) for op in BINARY]
    + [case(op, [_i(3, 4), NZ], name=op + "-int") for op in ("FloorDiv", "Mod", "Add", "Mul", "Maximum")]
    + [case(op, [X, _f(3, 4, lo=0.5, hi=2.0)], name=op + "-float") for op in ("FloorDiv", "Mod")]
    + [case("Pow", [POS, X]), case("Pow", [_i(3, 4, lo=-3, hi=4), _i(3, 4, lo=0, hi=5)], name="Pow-int")]
    + [case(op, [B, ~B]) for op in ("LogicalAnd", "LogicalOr")]
    + [case(op, [X], {"axis": ax, "keepdims": kd}, name=f"{op}-{ax}-{kd}")
       for op in REDUCE for ax, kd in ((None, False), (1, True), ([0, 1], False))]
    + [case(op, [B], {"axis": 0, "keepdims": False}) for op in ("All", "Any")]
    + [case("Where", [B, X, -X]), case("CustomGradient", [X, X32], {"num_values": 1})]
    + [case(op, [X]) for op in ("Shape", "Size", "Rank")]
    + [case("Reshape", [X, np.array([2, -1, 3])], static=[1]),
       case("Fill", [np.array([2, 3]), np.float32(1.5)], static=[0]),
       case("BroadcastTo", [X[0], np.array([2, 3, 4])], static=[1]),
       case("SumToShape", [_f(2, 3, 4), np.array([1, 4])], static=[1]),
       case("Transpose", [SQ], {"perm": [2, 0, 1]}), case("Transpose", [X], name="Transpose-default"),
       case("ExpandDims", [X], {"axis": -1}), case("ExpandDims", [X], {"axis": 1}, name="ExpandDims-1"),
       case("Squeeze", [_f(3, 1, 4, 1)], {"axis": [1, 3]}),
       case("Concat", [X, X32.astype(F64), X], {"axis": 1}),
       case("Stack", [X, -X], {"axis": 1}),
       case("Unstack", [X], {"axis": 1, "num": 4}),
       case("Split", [_f(2, 6)], {"axis": -1, "num": 3}), case("Split", [_f(4, 2)], {"axis": 0, "num": 2},
                                                                  name="Split-0"),
       case("Range", [np.int64(2), np.int64(11), np.int64(3)], static=[0, 1, 2]),
       case("Range", [np.float32(0.5), np.float32(3.0), np.float32(0.5)], static=[0, 1, 2], name="Range-f32"),
       case("Pad", [X, np.float64(-1.0)], {"paddings": [1, 0, 2, 3]}),
       case("Pad", [_i(2, 2), np.int64(7)], {"paddings": [0, 1, 1, 0]}, name="Pad-int"),
       case("OneHot", [np.array([0, 2, -1, 5]), ], {"depth": 4, "dtype": "float32", "on": 2.0, "off": -1.0})]
    # indexing: static ints and slices, newaxis, ellipsis, traced ints, index arrays (repeats, negatives)
    + [case("GetItem", [SQ], {"spec": [["int", 1], ["slice", None, None, -1], ["newaxis"], ["int", -1]]},
            name="GetItem-static"),
       case("GetItem", [X], {"spec": [["slice", None, None, None], ["newaxis"]]}, name="GetItem-newaxis"),
       case("GetItem", [SQ, np.int64(-1)], {"spec": [["ellipsis"], ["int", {"t": 0}]]}, name="GetItem-traced-int"),
       case("GetItem", [X, np.array([2, 0, 2, -1])], {"spec": [["tensor", 0], ["slice", 1, 3, None]]},
            name="GetItem-array"),
       case("GetItem", [SQ, np.array([0, 1]), np.array([[2], [0]])],
            {"spec": [["tensor", 0], ["slice", None, None, None], ["tensor", 1]]}, name="GetItem-arrays-apart"),
       case("GetItemGrad", [_f(4, 2), np.array([3, 4]), np.array([2, 0, 2, -1])],
            {"spec": [["tensor", 0], ["slice", 1, 3, None]]}, static=[1], name="GetItemGrad-repeats"),
       case("GetItemGrad", [_f(3, 2), np.array([3, 4])], {"spec": [["slice", None, None, None], ["slice", 0, 4, 2]]},
            static=[1], name="GetItemGrad-slices"),
       case("GetItemGrad", [_f(4), np.array([3, 4]), np.int64(-2)], {"spec": [["int", {"t": 0}]]}, static=[1],
            name="GetItemGrad-traced-int"),
       case("Gather", [X, np.array([[2, -1], [0, 0]])], {"axis": 0}),
       case("Gather", [X, np.array([3, -4, 1])], {"axis": 1}, name="Gather-1"),
       case("ScatterAdd", [np.array([3, 5]), np.array([1, 4, 1, -1]), _f(3, 4)], {"axis": 1}, static=[0]),
       case("TakeAlongAxis", [X, np.array([[3, 0], [-1, -1], [2, 2]])], {"axis": 1}),
       case("TakeAlongAxis", [X, np.array([[2, 0, 1, -3]])], {"axis": 0}, name="TakeAlongAxis-0"),
       case("TakeAlongAxisGrad", [_f(3, 2), np.array([3, 4]), np.array([[3, 0], [-1, -1], [2, 2]])], {"axis": 1},
            static=[1]),
       case("TakeAlongAxisGrad", [_f(1, 4), np.array([3, 4]), np.array([[2, 0, 2, -3]])], {"axis": -2},
            static=[1], name="TakeAlongAxisGrad-broadcast")]
    + [case("MatMul", [SQ, _f(3, 2)], {"transpose_a": False, "transpose_b": False}, name="MatMul-batched"),
       case("MatMul", [_f(4, 3), _f(2, 4, 3)], {"transpose_a": True, "transpose_b": False}, name="MatMul-ta"),
       case("MatMul", [_f(2, 3, 4), _f(2, 5, 4)], {"transpose_a": False, "transpose_b": True}, name="MatMul-tb"),
       case("MatMul", [_f(4, 3, dtype=F32), _f(5, 4, dtype=F32)], {"transpose_a": True, "transpose_b": True},
            name="MatMul-f32"),
       case("MatMul", [_i(3, 4), _i(4, 2)], {}, name="MatMul-int"),
       case("Einsum", [SQ, _f(3, 5)], {"equation": "bij,jk->bik"}),
       case("Einsum", [SQ], {"equation": "bii->b"}, name="Einsum-trace"),
       case("Softmax", [X], {"axis": -1}), case("LogSoftmax", [X], {"axis": 0}),
       case("ArgMax", [TIES], {"axis": -1}), case("ArgMin", [TIES], {"axis": 0})]
    + [case("Cast", [OUT_OF_RANGE], {"dtype": d}, name=f"Cast-special-{d}")
       for d in ("int32", "int64", "int8", "uint8", "bool", "float32")]
    + [case("Cast", [np.array([-2.7, -0.5, 0.0, 0.9, 2.5, 2.1e9, -3e9], F32)], {"dtype": "int32"},
            name="Cast-f32-int32"),
       case("Cast", [np.array([2 ** 40 + 5, -1, 300], I64)], {"dtype": "int32"}, name="Cast-int64-int32"),
       case("Cast", [B], {"dtype": "float64"}, name="Cast-bool-float"),
       case("Cast", [_i(5)], {"dtype": "bool"}, name="Cast-int-bool")]
    + [case(op, [x], {"axis": ax, "reverse": rev}, name=f"{op}-{x.dtype}-{ax}-{rev}")
       for op, x in (("Cumsum", X), ("Cumprod", X), ("Cumsum", _i(3, 4)))
       for ax, rev in ((1, False), (0, True))]
    + [case("CumprodGrad", [np.array([[1.5, 0.0, 2.0, -1.0], [0.5, 2.0, 0.0, 0.0]]), _f(2, 4)],
            {"axis": ax, "reverse": rev}, name=f"CumprodGrad-{ax}-{rev}")
       for ax, rev in ((1, False), (1, True), (0, False))]
    + [case("ArgSort", [TIES], {"axis": ax, "descending": d}, name=f"ArgSort-{ax}-{d}")
       for ax, d in ((-1, False), (-1, True), (0, True))]
    + [case("TopK", [TIES], {"k": 3}), case("TopK", [_i(2, 6)], {"k": 6}, name="TopK-int")]
    + [case("MatrixDeterminant", [SQ]), case("LogMatrixDeterminant", [SQ]),
       case("Qr", [_f(4, 3)], {"full_matrices": False}), case("Qr", [_f(2, 4, 3)], {"full_matrices": True},
                                                               name="Qr-full"),
       case("SelfAdjointEig", [SQ]), case("MatrixSolve", [SQ, _f(2, 3, 2)]), case("MatrixSolve", [SQ[0], _f(3, 3, 1)],
                                                                                 name="MatrixSolve-broadcast"),
       case("MatrixInverse", [SQ]), case("Cholesky", [SQ @ np.swapaxes(SQ, -1, -2) + 3 * np.eye(3)])]
)


def _kernel_outputs(op, attrs, inputs):
    from dfc.runtime.kernel_context import KernelContext
    from dfc.runtime.kernels.registry import kernel_for
    node = Node("n", op, [f"x{k}:0" for k in range(len(inputs))], attrs)
    with np.errstate(all="ignore"):
        return [np.asarray(o) for o in kernel_for(node, np)(KernelContext(), list(inputs))]


@pytest.fixture(scope="module")
def compiled():
    """Every case's lowering traced into ONE jax.jit program (one compile for the whole table); a case whose
    lowering fails while tracing keeps its error."""
    import jax
    jax.config.update("jax_enable_x64", True)        # as to_jax does: dfc computes in float64 and int64
    from dfc.runtime.xla import jops
    errors, traced = {}, {}
    for k, (_, op, attrs, inputs, static) in enumerate(CASES):
        traced[k] = [np.asarray(v) for j, v in enumerate(inputs) if j not in static]

    def run(feeds):
        outs = {}
        for k, (_, op, attrs, inputs, static) in enumerate(CASES):
            it = iter(feeds[k])
            args = [np.asarray(v) if j in static else next(it) for j, v in enumerate(inputs)]
            try:
                outs[k] = [jax.numpy.asarray(o) for o in jops.lower(Node("n", op, [], attrs), args)]
            except Exception as e:      # noqa: BLE001 — reported by the case's own test
                errors[k] = e
        return outs
    outs = jax.device_get(jax.jit(run)(traced))
    return outs, errors


@pytest.mark.parametrize("k", range(len(CASES)), ids=[c[0] for c in CASES])
def test_lowering_agrees_with_the_numpy_kernel(compiled, k):
    outs, errors = compiled
    _, op, attrs, inputs, static = CASES[k]
    if k in errors:
        raise errors[k]
    want = _kernel_outputs(op, attrs, inputs)
    got = [np.asarray(o) for o in outs[k]]
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert (a.dtype, a.shape) == (b.dtype, b.shape)
        if b.dtype.kind != "f":
            np.testing.assert_array_equal(a, b)
        elif op in LINALG:
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
        elif op in COMPUTED and b.dtype == np.float32:
            np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-6)
        elif op in COMPUTED:
            np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-300)
        else:       # values moved, not computed: numpy's bits
            np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------------------------------ coverage
STRUCTURE = {"Enter", "Exit", "Switch", "Merge", "NextIteration", "Const"}      # lower.py itself


def _lowered():
    import importlib
    import importlib.util
    from dfc.runtime.xla import jops
    from dfc.runtime.xla.state import STATE_OPS
    lowered = jops.lowered_ops() | set(STATE_OPS) | STRUCTURE
    # the modules beside jops that lower ops of their own (checks.py: Assert; random.py: the draws)
    for module, name in (("dfc.runtime.xla.checks", "EFFECTS"), ("dfc.runtime.xla.random", "OPS")):
        if importlib.util.find_spec(module) is not None:
            lowered |= set(getattr(importlib.import_module(module), name, ()))
    return lowered, jops.NOT_LOWERED


def test_every_op_has_an_xla_lowering_or_a_reason_for_none():
    lowered, not_lowered = _lowered()
    missing = sorted(set(opreg.REGISTRY) - lowered - set(not_lowered))
    assert missing == [], f"ops with neither an XLA lowering nor a reason in jops.NOT_LOWERED: {missing}"
    assert sorted(lowered & set(not_lowered)) == []
    assert sorted((lowered | set(not_lowered)) - set(opreg.REGISTRY)) == []
    assert all(isinstance(why, str) and len(why) > 20 for why in not_lowered.values())


def test_the_pure_ops_without_an_xla_lowering_are_few_and_chosen():
    """The ops left out are stateful (host effects, queues, the wall clock, state.py's share) except these
    pure ones: a new entry is a decision, made here."""
    _, not_lowered = _lowered()
    pure = {op for op in not_lowered if not opreg.REGISTRY[op].stateful and not opreg.REGISTRY[op].in_executor}
    value_sized = {"DynamicPartition", "DynamicStitch", "SumDuplicates"}
    assert pure - {"Placeholder"} == value_sized


def test_an_op_without_a_lowering_says_why():
    from dfc.runtime.xla import jops
    with pytest.raises(jops.NotLowerable, match="DynamicPartition: .*size depends on the values") as e:
        jops.lower(Node("part", "DynamicPartition", ["x:0", "p:0"], {"num_partitions": 2}),
                   [np.eye(2), np.array([0, 1])])
    assert e.value.node == "part"


def test_a_float_to_int_cast_is_refused_where_numpy_does_not_give_the_lowest_integer(monkeypatch):
    """The Cast lowering computes x86 numpy's answer for NaN and values out of range; on a machine whose
    numpy gives other values there (math_lower.cast_native() false) it refuses rather than disagree."""
    from dfc.runtime.xla import jops
    monkeypatch.setattr(jops, "cast_native", lambda: False)
    with pytest.raises(jops.NotLowerable, match="float -> integer cast"):
        jops.lower(Node("c", "Cast", ["x:0"], {"dtype": "int32"}), [np.array([1.5])])
    assert jops.lower(Node("c", "Cast", ["x:0"], {"dtype": "float32"}), [np.array([1.5])])[0].dtype == np.float32


# ------------------------------------------------------------------------------------------ graphs
def _agree(got, want, rtol=1e-12):
    from tests.runtime.test_xla_prototype import _leaves
    for a, b in zip(_leaves(got), _leaves(want), strict=True):
        assert (a.dtype, a.shape) == (b.dtype, b.shape)
        if b.dtype.kind == "f":
            np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-300 if b.dtype == np.float64 else 1e-6)
        else:
            np.testing.assert_array_equal(a, b)


def _reference(g, *args):
    return dfc.Session(g, mode="reference").call(*args)


@dfc.function
def _gates(x, W, b, n):
    """An LSTM-like step in a loop: split gates, a bias broadcast over the batch (SumToShape in the
    gradient), [:, None] indexing, a cumulative sum, a gather and take_along_axis, and their gradients."""
    h = dfc.zeros([x.shape[1], W.shape[1] // 4], "float64")
    c = h
    i = 0
    while i < n:
        z = dfc.matmul(dfc.concat([x[i], h], 1), W) + b
        gi, gf, go, gg = dfc.split(z, 4, axis=1)
        c = dfc.sigmoid(gf) * c + dfc.sigmoid(gi) * dfc.tanh(gg)
        h = dfc.sigmoid(go) * dfc.tanh(c)
        row = dfc.reduce_sum(h, axis=1)
        h = h + 0.1 * dfc.cumsum(h, axis=1) * row[:, None]
        order = dfc.argmax(h, axis=1)
        h = h + 0.01 * dfc.gather(dfc.reduce_mean(h, axis=0), order)[:, None]
        h = h - 0.01 * dfc.take_along_axis(h, dfc.expand_dims(order, 1), axis=1)
        i += 1
    loss = dfc.reduce_sum(h * h) + dfc.reduce_sum(c)
    return loss, dfc.gradients(loss, [x, W, b])


def test_a_loop_of_split_gates_cumsum_and_gathers_with_its_gradient():
    B_, D, H, T = 3, 2, 4, 5
    args = (_f(T, B_, D) * 0.5, _f(D + H, 4 * H) * 0.3, _f(4 * H) * 0.1, np.int64(T))
    g = _gates.trace(*args)
    _agree(to_jax(g)(*args), _reference(g, *args))


@dfc.function
def _batch_shapes(x, W, n):
    """A loop over a batch whose size the graph only knows when it runs: the gradient saves each
    iteration's shapes on stacks for its SumToShape and Fill."""
    h = x
    i = 0
    while i < n:
        h = dfc.tanh(dfc.matmul(h, W) + dfc.reduce_mean(h, axis=0))
        i += 1
    return dfc.gradients(dfc.reduce_sum(h * h), [x, W])


def test_shapes_the_gradient_saves_on_stacks_stay_static():
    args = (_f(3, 4), _f(4, 4) * 0.5, np.int64(4))
    g = _batch_shapes.trace(dfc.TensorSpec([None, 4], "float64"), dfc.TensorSpec([4, 4], "float64"),
                            dfc.TensorSpec([], "int64"))
    _agree(to_jax(g)(*args), _reference(g, *args))


@dfc.function
def _train(w, lens):
    """Gradient steps in a loop, each through an inner loop of its own length: the gradient stacks are made
    afresh in every step (inside the outer loop's body)."""
    losses = dfc.TensorArray("float64")
    i = 0
    while i < dfc.shape(lens)[0]:
        h = w
        j = 0
        while j < lens[i]:
            h = dfc.tanh(h * w + 0.1)
            j += 1
        loss = dfc.reduce_sum(h * h)
        w = w - 0.1 * dfc.gradients(loss, w)[0]
        losses = losses.write(i, loss)
        i += 1
    return w, losses.stack()


def test_stacks_made_in_a_loop_body_and_a_step_that_outruns_them(monkeypatch):
    from dfc.runtime.xla import program
    monkeypatch.setattr(program, "STACK_BYTES", 0)      # buffers start at MIN_ROWS
    # the longest inner loop is not the last: its high-water mark must outlive the steps after it
    args = (np.array([0.5, -0.3, 0.8]), np.array([3, program.MIN_ROWS + 9, 5], np.int64))
    g = _train.trace(*args)
    prog = to_jax(g)
    want = _reference(g, *args)
    _agree(prog(*args), want)
    reruns = prog.reruns
    assert reruns >= 1          # the second step outran its stacks (and the losses' length was learned)
    _agree(prog(*args), want)
    assert prog.reruns == reruns


@dfc.function(input_signature=[dfc.TensorSpec([None], "float64"), dfc.TensorSpec([], "float64")])
def _moving_average(xs, decay):
    """samples/scan.py's pattern: xs unstacked into a TensorArray, and xs[0] the scan's start, so the
    gradient of xs adds the TensorArray's stacked gradient to xs[0]'s."""
    n = dfc.shape(xs)[0]
    elems = dfc.TensorArray("float64", size=n, dynamic_size=False).unstack(xs)
    out = dfc.TensorArray("float64", size=n, dynamic_size=False)
    a = xs[0]
    i = 0
    while i < n:
        a = decay * a + (1 - decay) * elems.read(i)
        out = out.write(i, a)
        i += 1
    ys = out.stack()
    return ys, dfc.gradients(dfc.reduce_sum(ys * ys), [xs, decay])


def test_a_gradient_tensor_array_stacks_as_many_as_its_forward_array():
    args = (_f(9), np.float64(0.7))
    g = _moving_average.trace()         # its signature: the length of xs is known only when it runs
    _agree(to_jax(g)(*args), _reference(g, *args))


@dfc.function
def _last_written(lens):
    """A TensorArray made in every iteration of a loop, written by an inner loop of its own length."""
    total = dfc.zeros([], "float64")
    i = 0
    while i < dfc.shape(lens)[0]:
        ta = dfc.TensorArray("float64")
        j = 0
        while j < lens[i]:
            ta = ta.write(j, dfc.cast(j, "float64") * 2.0)
            j += 1
        total = total + ta.read(lens[i] - 1)
        i += 1
    return total


def test_an_array_made_in_a_loop_body_that_outgrows_its_buffer_in_one_iteration(monkeypatch):
    """Its high-water mark outlives the iterations after it, so the run is repeated with a larger buffer
    (a write past the buffer is dropped: without the re-run, the read would be garbage)."""
    from dfc.runtime.xla import program
    monkeypatch.setattr(program, "STACK_BYTES", 0)      # buffers start at MIN_ROWS
    args = (np.array([3, program.MIN_ROWS + 9, 5], np.int64),)
    g = _last_written.trace(*args)
    prog = to_jax(g)
    _agree(prog(*args), _reference(g, *args))
    assert prog.reruns == 1
