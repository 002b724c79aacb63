"""Compiled loop frames with the indexing, shape and gradient-helper lowerings (array_lower.py), TensorArrays
and Variables (state_lower.py, compiled/resources.py): every frame compiles, gives the reference
interpreter's bits on every path (run_all_modes), gradients match finite differences, and errors inside a
compiled frame name their node."""
import numpy as np
import pytest

import dfc
from tests.compiledtools import _no_compile_budget, frames_alone  # noqa: F401 (fixtures)
from tests.conftest import run_all_modes

# numba compiles loop frames to CPU machine code; frames on a GPU are fused instead (compile_loops has no
# effect there), so these tests of what compiles keep cpu:0 as the default device under DFC_TEST_DEVICE
# these test loop frames compiled one by one (tests/runtime/test_compiled_root.py: the whole run as one)
pytestmark = [pytest.mark.usefixtures("frames_alone"),
              pytest.mark.host_devices("numba-compiled loop frames are CPU machine code")]

pytest.importorskip("numba")



def _compiled(g, **kw):
    return dfc.Session(g, compile_loops=True, num_threads=0, **kw)


def _runs(s):
    """How the compiled frames of Session s ran: {"compiled": n, "fused": n} over all of them."""
    from dfc.runtime.compiled import CompiledFrame
    out = {"compiled": 0, "fused": 0}
    for plan in s._plans.values():
        for prog in getattr(plan, "programs", {}).values():
            if isinstance(prog, CompiledFrame):
                for k in out:
                    out[k] += prog.runs[k]
    return out


def _runs_compiled(g, args, n_frames):
    """Session(compile_loops=True) runs every frame compiled (no fused fallback) and gives the reference's
    results."""
    s = _compiled(g)
    got = s.call(*args)
    assert _runs(s) == {"compiled": n_frames, "fused": 0}
    return got


def _status(g):
    return {k: (v["status"], v["blocked_by"]) for k, v in _compiled(g).compiled_frames().items()}


def _finite_difference(g, args, k, eps=1e-6):
    """d sum(output 0) / d args[k], central differences."""
    x = args[k]
    out = np.zeros(x.shape)
    s = dfc.Session(g)
    for j in np.ndindex(*x.shape):
        hi, lo = [list(args) for _ in range(2)]
        hi[k], lo[k] = x.copy(), x.copy()
        hi[k][j] += eps
        lo[k][j] -= eps
        out[j] = (np.sum(s.call(*hi)[0]) - np.sum(s.call(*lo)[0])) / (2 * eps)
    return out


def test_indexing_stacking_and_their_gradients_compile():
    """x[t] and x[i:i+2] with tensor indices, stack/unstack, concat/split, and in the gradient loop
    GetItemGrad, SumToShape (the bias broadcast over the batch), BroadcastTo and Fill."""
    def f(x, w, b, n):
        def body(t, h, acc):
            xt = x[t]                                       # [B, D], t a tensor
            z = dfc.matmul(dfc.concat([xt, h], 1), w) + b   # b: [2H] broadcast over B
            zi, zg = dfc.split(z, 2, axis=1)
            h = dfc.sigmoid(zi) * dfc.tanh(zg)
            pair = x[t, :, 1:3]                             # a slice, a tensor index
            s0, s1 = dfc.unstack(dfc.stack([dfc.reduce_sum(h), dfc.reduce_sum(pair)]), num=2)
            return t + 1, h, acc + s0 * s1 + dfc.reduce_sum(dfc.transpose(x[t:t + 2, 0]) * w[:5, :2])
        h0 = dfc.zeros([3, 4], "float64")
        _, h, acc = dfc.while_loop(lambda t, h, acc: t < n, body, (0, h0, dfc.constant(np.float64(0.0))))
        loss = acc + dfc.reduce_sum(h * h)
        return loss, dfc.gradients(loss, [x, w, b])
    g = dfc.trace(f, dfc.TensorSpec([6, 3, 5], "float64"), dfc.TensorSpec([9, 8], "float64"),
                  dfc.TensorSpec([8], "float64"), dfc.TensorSpec([], "int64"))
    assert _status(g) == {"while": ("compiled", None), "while_grad": ("compiled", None)}
    ops = {n.op for n in g.nodes.values()}
    assert {"GetItem", "GetItemGrad", "SumToShape", "Concat", "Split", "Stack", "Unstack", "Transpose"} <= ops
    rng = np.random.default_rng(3)
    args = [rng.standard_normal((6, 3, 5)), rng.standard_normal((9, 8)) * 0.4, rng.standard_normal(8) * 0.1,
            np.int64(4)]
    loss, (dx, dw, db) = run_all_modes(g, *args)
    _runs_compiled(g, args, 2)
    for k, got in [(0, dx), (1, dw), (2, db)]:
        np.testing.assert_allclose(got, _finite_difference(g, args, k), rtol=1e-5, atol=1e-7)


def test_sum_to_shape_gives_numpys_bits():
    """The compiled SumToShape against the kernel's numpy sums, large and odd shapes, float32 and float64."""
    from dfc.runtime.compiled import helpers, npcall
    from dfc.runtime.kernels.array_kernels import sum_to_shape
    rng = np.random.default_rng(4)
    cases = [((3, 5000), (5000,)), ((4001,), ()), ((7, 300), (7, 1)), ((2, 3, 4, 5), (3, 1, 1)),
             ((64, 16, 33), (16, 1)), ((5, 6), (5, 6)), ((2, 3, 4), (1, 4)), ((9, 2, 3), (2, 1))]
    for dtype in ("float32", "float64"):
        lp = np.array(list(npcall.loop_address(np.add, (None, dtype, None), True))
                      + list(npcall.loop_address(np.add, (dtype, dtype, dtype))), np.int64)
        for shape, target in cases:
            x = rng.standard_normal(shape).astype(dtype) * 1e3
            want = sum_to_shape(np, x, target)
            got = helpers.sum_to_shape(lp, 0, 1, x, np.array(target, np.int64), np.dtype(dtype).type(0))
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got.reshape(target), want, err_msg=f"{shape} -> {target}")
    with pytest.raises(ValueError):          # two separate runs of axes: left to the fused path
        helpers.sum_to_shape(lp, 0, 1, np.ones((2, 3, 4)), np.array([1, 3, 1]), np.float64(0))


def test_errors_inside_compiled_frames_name_their_node():
    def f(x, n, k):
        def body(i, s):
            return i + 1, s + dfc.reduce_sum(x[i * k])         # out of range once i * k >= 4
        return dfc.while_loop(lambda i, s: i < n, body, (0, dfc.constant(np.float64(0.0))))[1]
    g = dfc.trace(f, dfc.TensorSpec([4, 2], "float64"), dfc.TensorSpec([], "int64"), dfc.TensorSpec([], "int64"))
    assert _status(g) == {"while": ("compiled", None)}
    s = _compiled(g)
    x = np.arange(8.0).reshape(4, 2)
    assert float(s.call(x, np.int64(3), np.int64(1))) == 15.0
    assert _runs(s) == {"compiled": 1, "fused": 0}
    with pytest.raises(dfc.DfcError) as e:
        s.call(x, np.int64(3), np.int64(2))
    getitem = [n.name for n in g.nodes.values() if n.op == "GetItem"][0]
    assert getitem in str(e.value)

    def h(a, b, n):
        return dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + dfc.reduce_sum(dfc.concat([a, b], 0))),
                              (0, dfc.constant(np.float64(0.0))))[1]
    g = dfc.trace(h, dfc.TensorSpec([None, 2], "float64"), dfc.TensorSpec([None, None], "float64"),
                  dfc.TensorSpec([], "int64"))
    assert _status(g) == {"while": ("compiled", None)}
    s = _compiled(g)
    assert float(s.call(np.ones((2, 2)), np.ones((1, 2)), np.int64(2))) == 12.0
    with pytest.raises(dfc.DfcError) as e:
        s.call(np.ones((2, 2)), np.ones((1, 3)), np.int64(2))
    assert [n.name for n in g.nodes.values() if n.op == "Concat"][0] in str(e.value)


def test_tensor_arrays_written_and_read_in_compiled_loops_with_gradients():
    """A loop writes a TensorArray (stacked after it); another reads one unstacked from an input; their
    gradient loops read the gradient TensorArray and write (accumulate into) another, keyed as the fused
    path keys them."""
    def f(x, w, n):
        xs = dfc.TensorArray("float64", size=n).unstack(x)
        out = dfc.TensorArray("float64", size=n)

        def body(i, h, out):
            h = dfc.tanh(xs.read(i) * w + h * 0.5)
            return i + 1, h, out.write(i, h * h)
        _, h, out = dfc.while_loop(lambda i, h, out: i < n, body, (0, dfc.zeros_like(w), out))
        y = out.stack()
        loss = dfc.reduce_sum(y * dfc.reshape(dfc.cast(dfc.range(0, n * 3), "float64"), [-1, 3]))
        return loss, dfc.gradients(loss, [x, w])
    g = dfc.trace(f, dfc.TensorSpec([5, 3], "float64"), dfc.TensorSpec([3], "float64"), dfc.TensorSpec([], "int64"))
    assert _status(g) == {"while": ("compiled", None), "while_grad": ("compiled", None)}
    rng = np.random.default_rng(5)
    args = [rng.standard_normal((5, 3)), rng.standard_normal(3), np.int64(5)]
    loss, (dx, dw) = run_all_modes(g, *args)
    _runs_compiled(g, args, 2)
    np.testing.assert_allclose(dx, _finite_difference(g, args, 0), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(dw, _finite_difference(g, args, 1), rtol=1e-5, atol=1e-7)


def test_tensor_array_errors_in_a_compiled_loop_name_the_write_and_change_nothing():
    def f(x, n, k):
        ta = dfc.TensorArray("float64", size=3, dynamic_size=False)

        def body(i, ta):
            return i + 1, ta.write(i // k, x * dfc.cast(i, "float64"))   # k=2: index 0 written twice
        _, ta = dfc.while_loop(lambda i, ta: i < n, body, (0, ta))
        return ta.stack()
    g = dfc.trace(f, dfc.TensorSpec([2], "float64"), dfc.TensorSpec([], "int64"), dfc.TensorSpec([], "int64"))
    assert _status(g) == {"while": ("compiled", None)}
    s = _compiled(g)
    x = np.array([1.0, 2.0])
    np.testing.assert_array_equal(s.call(x, np.int64(3), np.int64(1)), [[0, 0], [1, 2], [2, 4]])
    assert _runs(s) == {"compiled": 1, "fused": 0}
    write = [n.name for n in g.nodes.values() if n.op == "TensorArrayWrite"][0]
    for n, k, what in [(3, 2, "written twice"), (4, 1, "out of range")]:
        with pytest.raises(dfc.DfcError) as e:
            s.call(x, np.int64(n), np.int64(k))
        assert write in str(e.value) and what in str(e.value)


def test_variables_read_and_assigned_in_compiled_loops():
    w = dfc.Variable(np.array([0.5, -1.0, 2.0]), name="compiled_w")
    step = dfc.Variable(np.int64(0), name="compiled_step")

    def f(x, n):
        def body(i, s):
            y = dfc.tanh(w.read_value() * x)
            w.assign_sub(0.1 * y)
            step.assign_add(1)
            return i + 1, s + dfc.reduce_sum(y) + dfc.cast(step.read_value(), "float64")
        return dfc.while_loop(lambda i, s: i < n, body, (0, dfc.constant(np.float64(0.0))))[1]
    g = dfc.trace(f, dfc.TensorSpec([3], "float64"), dfc.TensorSpec([], "int64"))
    assert list(_status(g).values()) == [("compiled", None)]
    x = np.array([1.0, 0.5, -0.25])
    run_all_modes(g, x, np.int64(6))       # the results and the Variables left behind agree on every path
    before = w.numpy().copy()
    _runs_compiled(g, [x, np.int64(2)], 1)
    assert not np.array_equal(w.numpy(), before)


def test_a_variable_assigned_a_wrong_shape_in_a_compiled_loop_names_the_assign():
    v = dfc.Variable(np.zeros(2), name="compiled_v_shape")

    def f(x, n):
        def body(i):
            v.assign(dfc.concat([v.read_value(), x], 0)[:2 + i // 2])     # 3 values once i = 2
            return i + 1
        dfc.while_loop(lambda i: i < n, body, (0,))
        return v.read_value()
    g = dfc.trace(f, dfc.TensorSpec([1], "float64"), dfc.TensorSpec([], "int64"))
    s = _compiled(g, container="compiled_v_shape")
    np.testing.assert_array_equal(s.call(np.array([1.0]), np.int64(2)), [0.0, 0.0])
    assert _runs(s) == {"compiled": 1, "fused": 0}
    with pytest.raises(dfc.DfcError) as e:
        s.call(np.array([1.0]), np.int64(3))
    assert [n.name for n in g.nodes.values() if n.op == "Assign"][0] in str(e.value)


def test_random_draws_in_compiled_loops_are_the_kernels_numbers():
    """Random ops run their own kernel from compiled code (numba object mode), seeded as the fused path
    seeds them (seed, node, run, iteration of every enclosing loop): the same numbers on every path."""
    def f(n, m):
        def outer(i, s):
            def inner(j, s):
                return j + 1, s + dfc.random_normal([2, 3], dtype="float64", seed=3)
            _, s = dfc.while_loop(lambda j, s: j < m, inner, (0, s))
            return i + 1, s * dfc.random_uniform([], minval=0.5, maxval=1.5, dtype="float64", seed=4)
        return dfc.while_loop(lambda i, s: i < n, outer, (0, dfc.zeros([2, 3], "float64")))[1]
    g = dfc.trace(f, dfc.TensorSpec([], "int64"), dfc.TensorSpec([], "int64"))
    assert _status(g) == {"while": ("compiled", None), "while_1": ("compiled", None)}     # (nested in while)
    first = run_all_modes(g, np.int64(3), np.int64(2))
    s = _compiled(g)
    got = [s.call(np.int64(3), np.int64(2)) for _ in range(2)]     # a second run draws other numbers
    ref = dfc.Session(g, mode="reference")
    want = [ref.call(np.int64(3), np.int64(2)) for _ in range(2)]
    assert _runs(s) == {"compiled": 2, "fused": 0}
    np.testing.assert_array_equal(got[0], first)
    np.testing.assert_array_equal(got[1], want[1])
    assert not np.array_equal(got[0], got[1])


def test_tensor_array_writes_from_compiled_code_are_undone_when_one_fails():
    """resources._write_all: an accumulating store's gradient sums and a fixed-size store's elements are as
    they were after a failing write (and after the undo of writes that passed)."""
    from dfc.runtime.compiled import resources
    from dfc.runtime.kernels.state_kernels import TensorArrayStore
    acc = TensorArrayStore("float64", 2, False, (2,), True)
    acc.write(0, np.ones(2), ("w", (), 0))
    before = acc.read(0).copy()
    with pytest.raises(resources.Replay):
        resources._write_all(acc, [(0, np.full(2, 5.0), ("w", (1,), 0)), (1, np.ones(2), ("w", (1,), 0)),
                                   (2, np.ones(2), ("w", (2,), 0))])          # index 2: out of range
    np.testing.assert_array_equal(acc.read(0), before)
    assert acc.items[1] is None and len(acc.items[0].parts) == 1
    undo = resources._write_all(acc, [(0, np.full(2, 5.0), ("w", (1,), 0))])
    np.testing.assert_array_equal(acc.read(0), before + 5.0)
    undo()
    np.testing.assert_array_equal(acc.read(0), before)


def test_stacks_cross_in_bulk_as_rows_of_one_array():
    """A stack filled from compiled code holds the rows of one array; handed to compiled code again it goes
    over as that array's rows (no stacking), and anything else is stacked."""
    from dfc.runtime.compiled import helpers, resources
    lst = helpers.to_list(np.arange(12.0).reshape(3, 2, 2))
    items = resources._from_list(lst, np.dtype(np.float64), 2)
    base = resources._rows_of(items)
    assert base is not None and all(v.base is base for v in items)
    assert resources._rows_of(items[:2]) is None and resources._rows_of(items[::-1]) is None
    assert resources._rows_of([np.ones((2, 2)), np.zeros((2, 2))]) is None
    for stack in (items, items[:2], [np.ones((2, 2)), np.zeros((2, 2))]):
        back = resources._from_list(resources._typed_list(stack, np.dtype(np.float64), 2), np.dtype(np.float64), 2)
        assert len(back) == len(stack) and all(np.array_equal(a, b) for a, b in zip(back, stack))
    assert resources._typed_list(items, np.dtype(np.float32), 2) is None       # another dtype: run fused


def test_stacks_of_large_elements_cross_one_by_one(monkeypatch):
    """Elements of resources.BIG bytes or more cross as they are (no copy into one array), both ways."""
    from dfc.runtime.compiled import resources
    monkeypatch.setattr(resources, "BIG", 16)
    items = [np.arange(6.0).reshape(2, 3) + k for k in range(3)]
    lst = resources._typed_list(items, np.dtype(np.float64), 2)
    back = resources._from_list(lst, np.dtype(np.float64), 2)
    assert resources._rows_of(back) is None and all(np.array_equal(a, b) for a, b in zip(back, items))

    def f(x, n):
        i, y = dfc.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, dfc.tanh(y) * x), (0, x))
        return y, dfc.gradients(dfc.reduce_sum(y), [x])[0]
    g = dfc.trace(f, dfc.TensorSpec([2, 3], "float64"), dfc.TensorSpec([], "int64"))
    args = (np.array([[0.5, -0.3, 1.2], [0.1, 0.2, -0.4]]), np.int64(4))
    want = dfc.Session(g, mode="reference").call(*args)
    got = _runs_compiled(g, args, 2)
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a, b)


def test_maximum_minimum_and_their_reductions_give_numpys_bits():
    """Compiled code compares where numpy's loops would be called (math_lower._minmax_probe): maximum,
    minimum, relu, clip and max/min reductions, scalars and arrays, fused or not, with signed zeros, NaNs of
    either sign and with a payload, and infinities, give the fused path's bits exactly (sign of zero and
    which NaN included), float32, float64 and int64."""
    def f(x, y, n):
        def body(i, a, b, c, d, e, m, r):   # (no arithmetic on the results: which NaN an add keeps is LLVM's)
            xi, yi = x[i], y[i]
            return (i + 1, dfc.maximum(x, y), dfc.minimum(y, x), dfc.relu(x), dfc.clip(y, -one, one),
                    dfc.stack([dfc.reduce_max(x), dfc.reduce_min(y), dfc.maximum(xi, yi), dfc.minimum(xi, yi),
                               dfc.relu(xi), dfc.reduce_max(dfc.maximum(x, yi))]),
                    dfc.minimum(x + x, y), dfc.reduce_max(dfc.reshape(x, [2, -1])))
        one = dfc.ones([], x.dtype)
        z = dfc.zeros_like(x)
        s = dfc.zeros([6], x.dtype)
        return dfc.while_loop(lambda i, *_: i < n, body, (0, z, z, z, z, s, z, x[0]))[1:]
    payload = np.array(0x7ff8000000000123, np.int64).view(np.float64)
    vals = np.array([0.0, -0.0, 1.0, -1.0, 2.5, -np.inf, np.inf, np.nan, -np.nan, payload, -payload, 0.5])
    rng = np.random.default_rng(7)
    for dtype in ("float64", "float32", "int64"):
        g = dfc.trace(f, dfc.TensorSpec([12], dtype), dfc.TensorSpec([12], dtype), dfc.TensorSpec([], "int64"))
        assert _status(g) == {"while": ("compiled", None)}
        for trial in range(6):
            v = vals if dtype != "int64" else np.array([0, -1, 3, 7, -9, 2, 2, 0, 5, -5, 1, 4])
            x = rng.permutation(v).astype(dtype)
            y = (rng.permutation(v) if trial % 2 else -x).astype(dtype)
            if trial == 0 and dtype != "int64":
                x, y = np.where(np.isnan(x), 0.0, x).astype(dtype), np.where(np.isnan(y), -0.0, y).astype(dtype)
            for i in range(1, 12):
                args = [x, y, np.int64(i)]
                with np.errstate(all="ignore"):
                    want = dfc.Session(g, compile_loops=False).call(*args)
                    got = _runs_compiled(g, args, 1)
                for a, b in zip(want, got):
                    assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (dtype, trial, i, a, b)


def test_compiled_reshape_is_numpys_reshape():
    """helpers.reshape (a view of a C-contiguous array, made in line) gives numpy's shapes, strides and
    values, resolves one negative size as numpy does, raises where numpy raises, and shares the data."""
    import itertools

    from numba import njit

    from dfc.runtime.compiled import helpers as H

    @njit
    def two(x, a, b):
        return H.reshape(x, (a, b))

    @njit
    def one(x, a):
        return H.reshape(x, a)

    @njit
    def expand(x):
        return H.reshape(x, (1, x.shape[0], 1))

    for x in (np.arange(12.0), np.arange(12, dtype=np.int32).reshape(3, 4), np.zeros(0), np.zeros((2, 0))):
        for a, b in itertools.product([-3, -1, 0, 1, 2, 3, 4, 5, 6, 12], repeat=2):
            try:
                want = x.reshape(a, b)
            except ValueError:
                with pytest.raises(ValueError):
                    two(x, a, b)
                continue
            got = two(x, a, b)
            assert got.shape == want.shape and got.dtype == want.dtype and np.array_equal(got, want), (x.shape, a, b)
            if want.size:
                assert got.strides == want.strides
        assert one(x, -1).shape == (x.size,) and one(x, x.size).shape == (x.size,)
    x = np.arange(5.0)
    assert expand(x).shape == (1, 5, 1) and expand(x).strides == (40, 8, 8)
    v = two(x, 5, 1)
    v[2, 0] = 99.0
    assert x[2] == 99.0                 # a view, as numpy's reshape of a contiguous array


def _kernel(op, *args, **attrs):
    """The outputs of op's kernel (numpy) on args."""
    from dfc.ir.graph import Node
    from dfc.runtime.kernels import KERNELS
    return KERNELS[op](Node("k", op, [], attrs), np)(None, list(args))


def _same(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), (what, a, b)


def _values(dtype, shape, rng):
    """Values that tell orders apart: NaNs, infinities, signed zeros, ties; integers near their limits (sums
    wrap) and bools."""
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("int"):
        big = np.iinfo(dtype).max // 3
        return rng.choice(np.array([0, 1, -1, 7, -3, big, -big, 2, 2], dtype), shape)
    v = np.array([0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, np.nan, 1e30, 3.0, 3.0, 1e-30, 0.1], dtype)
    return np.where(rng.random(shape) < 0.5, rng.choice(v, shape), rng.standard_normal(shape).astype(dtype))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool"])
def test_scan_sort_gather_and_scatter_helpers_give_the_kernels_bits(dtype):
    """The compiled helpers (compiled/arrays.py) against the kernels, every dtype the kernels take, along
    every axis: cumulative sums and products both ways (integers wrap), argmax/argmin (first NaN, first
    tie), stable argsort both ways, gather and take_along_axis, and the scatters that add repeated indices
    in numpy's order (ScatterAdd, TakeAlongAxisGrad; CumprodGrad for floats), permuted copies."""
    from dfc.runtime.compiled import helpers as H
    rng = np.random.default_rng(11)
    x = _values(dtype, (3, 5, 4), rng)
    floats = dtype.startswith("float")
    with np.errstate(all="ignore"):
        for ax in range(3):
            x3 = x.reshape(int(np.prod(x.shape[:ax])), x.shape[ax], -1)
            for op, rev in [("Cumsum", False), ("Cumsum", True), ("Cumprod", False), ("Cumprod", True)]:
                want, = _kernel(op, x, axis=ax, reverse=rev)
                _same(H.cumulate(x3, op == "Cumprod", rev).reshape(x.shape), want, (op, ax, rev))
            for op in ("ArgMax", "ArgMin"):
                want, = _kernel(op, x, axis=ax)
                _same(H.arg_extreme(x3, op == "ArgMax").reshape(want.shape), want, (op, ax))
            idx = rng.integers(-x.shape[ax], x.shape[ax], 7)
            want, = _kernel("Gather", x, idx, axis=ax)
            _same(H.gather3(x3, idx).reshape(want.shape), want, ("Gather", ax))
            along = rng.integers(-x.shape[ax], x.shape[ax], x.shape[:ax] + (6,) + x.shape[ax + 1:])
            want, = _kernel("TakeAlongAxis", x, along, axis=ax)
            a3 = along.reshape(x3.shape[0], 6, x3.shape[2])
            _same(H.take_along3(x3, a3).reshape(want.shape), want, ("TakeAlongAxis", ax))
            if dtype == "bool":
                continue
            upd = _values(dtype, x.shape[:ax] + (7,) + x.shape[ax + 1:], rng)
            want, = _kernel("ScatterAdd", np.array(x.shape), idx, upd, axis=ax)
            got = H.scatter3(np.zeros(x3.shape, dtype), idx, upd.reshape(x3.shape[0], 7, x3.shape[2]))
            _same(got.reshape(x.shape), want, ("ScatterAdd", ax))
            g = _values(dtype, along.shape, rng)
            want, = _kernel("TakeAlongAxisGrad", g, np.array(x.shape), along, axis=ax)
            got = H.scatter_along3(np.zeros(x3.shape, dtype), a3, g.reshape(a3.shape))
            _same(got.reshape(x.shape), want, ("TakeAlongAxisGrad", ax))
            if floats:
                for rev in (False, True):
                    g = _values(dtype, x.shape, rng)
                    want, = _kernel("CumprodGrad", x, g, axis=ax, reverse=rev)
                    got = H.cumprod_grad(x3, g.reshape(x3.shape), rev)
                    _same(got.reshape(x.shape), want, ("CumprodGrad", ax, rev))
        for perm in [(2, 0, 1), (1, 0, 2), (0, 1, 2), (2, 1, 0)]:
            want = np.ascontiguousarray(np.transpose(x, perm))
            _same(H.permute(x, np.empty(want.shape, x.dtype), perm), want, ("permute", perm))
        rows = x.reshape(-1, 4)
        for desc in (False, True):
            want, = _kernel("ArgSort", rows, axis=-1, descending=desc)
            _same(H.argsort_rows(rows, desc), want, ("ArgSort", desc))
    if floats:
        for to in ("int32", "int64"):
            from dfc.runtime.kernels.math_lower import _INT_RANGE, cast_native
            assert cast_native()        # (else the lowering refuses array casts)
            with np.errstate(all="ignore"):
                big = (x * np.array(1e12, dtype)).astype(dtype)
                want, = _kernel("Cast", big, dtype=to)
            lo, hi = _INT_RANGE[to]
            _same(H.float_to_int_array(big, lo, hi, np.int64(np.iinfo(to).min), np.zeros(0, to)), want, ("Cast", to))
    if dtype.startswith("int"):
        for bounds in [(3, 17, 4), (17, 3, -5), (5, 5, 1), (-4, 9, 13), (0, 1, -1)]:
            b = [np.array(v, dtype)[()] for v in bounds]
            want, = _kernel("Range", *b)
            _same(H.int_range(*b, np.zeros(0, dtype)), want, ("Range", bounds))
    with pytest.raises(IndexError):         # out of range: the fused path replays and names the node
        H.gather3(x.reshape(1, -1, 1), np.array([x.size]))


def _same_as_reference(g, args, n_frames):
    """The compiled run (every frame compiled, none replayed) gives the reference interpreter's bits."""
    want = dfc.Session(g, mode="reference").call(*args)
    got = _runs_compiled(g, args, n_frames)
    from dfc import nest
    for a, b in zip(nest.flatten(want), nest.flatten(got)):
        _same(a, b, "compiled")
    return got


def test_numpy_indexing_gathers_scans_and_their_gradients_compile():
    """x[:, None], x[..., k], index arrays (one; two broadcast together; beside an int, apart: numpy puts
    the indexed dimensions first), gather, take_along_axis of an argsort, cumprod, a sum over two adjacent
    axes, squeeze without axes and batched matmuls (one matrix per entry, or one for all), in a loop and in its
    gradient loop (GetItemGrad with index arrays, ScatterAdd, TakeAlongAxisGrad, CumprodGrad): compiled,
    the reference's bits. (Kept small: numba compiles slowly; the helpers' test covers the dtypes.)"""
    def f(x, idx, rows, n):
        def body(i, acc):
            parts = [x[:, None] * x[None, 0], x[..., 1], x[idx], x[rows, idx[:2]], x[0, :, idx],
                     dfc.gather(x, idx, axis=2), dfc.take_along_axis(x, dfc.argsort(x, axis=1), axis=1),
                     dfc.cumprod(x, axis=1, reverse=True), dfc.reduce_sum(x, axis=[1, 2]), dfc.squeeze(x[:, :1]),
                     dfc.matmul(x, x[:, :3]), dfc.matmul(x, x[0, 1:])]
            s = acc
            for k, p in enumerate(parts):
                s = s + dfc.reduce_sum(p * p) * (0.5 + 0.1 * k)
            return i + 1, s
        _, acc = dfc.while_loop(lambda i, acc: i < n, body, (0, dfc.zeros([], "float64")))
        return acc, dfc.gradients(acc, [x])
    g = dfc.trace(f, dfc.TensorSpec([3, 4, 3], "float64"), dfc.TensorSpec([3], "int64"),
                  dfc.TensorSpec([2, 1], "int64"), dfc.TensorSpec([], "int64"))
    assert _status(g) == {"while": ("compiled", None), "while_grad": ("compiled", None)}
    ops = {n.op for n in g.nodes.values()}
    assert {"GetItemGrad", "ScatterAdd", "TakeAlongAxisGrad", "CumprodGrad"} <= ops
    rng = np.random.default_rng(12)
    args = [rng.standard_normal((3, 4, 3)), np.array([2, -3, 2]), np.array([[1], [0]]), np.int64(2)]
    _same_as_reference(g, args, 2)


def test_float32_and_integer_ops_and_kernel_calls_compile():
    """One forward loop of float32 and int32 values: integer cumsum that wraps, argmax/argmin and top_k with
    NaNs and ties, isnan/isinf, an integer range, one_hot, gather of integers, pad, float arrays (NaN,
    infinite, out of range) cast to int32; einsum and dfc.linalg
    (their kernels, called from compiled code); a singular matrix raises the kernel's error naming its node."""
    def f(x, k, a, m, n):
        def body(i, acc, ks):
            v, at = dfc.top_k(x, 3)
            am = dfc.argmax(x, axis=1) + dfc.argmin(x, axis=0)[:3]
            cs = dfc.cumsum(k, axis=0) + dfc.gather(k, dfc.cast(am, "int32") % 4, axis=1)[:, :1]
            flags = dfc.cast(dfc.isnan(x), "int32") + dfc.cast(dfc.isinf(x), "int32") * 2
            r = dfc.range(0, n + i, 2)
            hot = dfc.one_hot(dfc.cast(am, "int32"), 5, dtype="float32")
            e = dfc.einsum("ij,kj->ik", a, a)
            sign, logdet = dfc.linalg.slogdet(e + 1.0)
            tot = logdet * sign + dfc.reduce_sum(dfc.linalg.inv(m)) + dfc.reduce_sum(dfc.pad(a, [[1, 0], [0, 2]]))
            out = acc + dfc.reduce_sum(dfc.where(dfc.isnan(v), dfc.zeros_like(v), v)) + dfc.reduce_sum(hot) + \
                dfc.cast(tot, "float32")
            return i + 1, out, ks + cs + flags[:, :4] + dfc.cast(dfc.reduce_sum(r), "int32") + \
                dfc.cast(at[:, :1], "int32") + dfc.cast(x[:, :4] * 1e9, "int32")
        return dfc.while_loop(lambda i, *_: i < n, body, (0, dfc.zeros([], "float32"), dfc.zeros([3, 4], "int32")))[1:]
    g = dfc.trace(f, dfc.TensorSpec([3, 6], "float32"), dfc.TensorSpec([3, 4], "int32"),
                  dfc.TensorSpec([3, 4], "float64"), dfc.TensorSpec([2, 2], "float64"), dfc.TensorSpec([], "int64"))
    assert _status(g) == {"while": ("compiled", None)}
    rng = np.random.default_rng(13)
    x = np.array([[1.0, np.nan, 3.0, 3.0, -np.inf, 0.0], [-0.0, 0.0, 2.0, 2.0, 2.0, 1.0],
                  [np.inf, 5.0, np.nan, 1.0, 5.0, -1.0]], np.float32)
    big = np.iinfo(np.int32).max // 2
    k = np.array([[big, 1, -3, 4], [big, -big, 7, 0], [big, 2, 2, -1]], np.int32)
    a, m = rng.standard_normal((3, 4)), np.array([[2.0, 1.0], [1.0, 3.0]])
    with np.errstate(all="ignore"):
        _same_as_reference(g, [x, k, a, m, np.int64(3)], 1)
        inv = [nd.name for nd in g.nodes.values() if nd.op == "MatrixInverse"][0]
        with pytest.raises(dfc.DfcError, match=inv):
            _compiled(g).call(x, k, a, np.ones((2, 2)), np.int64(2))        # singular


def test_a_tensor_array_written_and_read_in_one_frame_compiles():
    """A stack kept in a TensorArray (a TreeLSTM's pattern): the loop writes elements and reads ones it wrote,
    in a cond, gathers and stacks it; compiled, with the reference's elements and size. The gradient of such
    a loop reads and writes one gradient TensorArray, whose reads are keyed sums: that frame says so and runs
    fused."""
    def f(x, n):
        st = dfc.TensorArray("float64", size=0, dynamic_size=True)

        def body(i, sp, st, acc):
            def push():
                return sp + 1, st.write(sp, x[i])

            def combine():
                return sp + 1, st.write(sp, dfc.tanh(st.read(sp - 1) + st.read(sp - 2) * 0.5))
            sp, st = dfc.cond(i < 4, push, combine)
            acc = acc + dfc.reduce_sum(st.gather(dfc.constant(np.array([0, 0], np.int64)))) + \
                dfc.reduce_sum(st.stack()) * 0.5
            return i + 1, sp, st, acc
        _, sp, st, acc = dfc.while_loop(lambda i, sp, st, acc: i < n, body, (0, 0, st, dfc.zeros([], "float64")))
        y = st.stack()
        return y, st.size(), acc, dfc.gradients(dfc.reduce_sum(y * y), [x])
    g = dfc.trace(f, dfc.TensorSpec([4, 3], "float64"), dfc.TensorSpec([], "int64"))
    status = _compiled(g).compiled_frames()
    assert status["while"]["status"] == "compiled"
    assert status["while_grad"]["status"] == "fused" and "gradient (accumulating) TensorArray" in \
        status["while_grad"]["reason"]
    rng = np.random.default_rng(14)
    args = [rng.standard_normal((4, 3)), np.int64(7)]
    want = dfc.Session(g, mode="reference").call(*args)
    s = _compiled(g)
    got = s.call(*args)
    assert _runs(s)["compiled"] == 1
    from dfc import nest
    for a, b in zip(nest.flatten(want), nest.flatten(got)):
        _same(a, b, "compiled")


def test_batched_matmul_calls_numpys_loop_as_numpy_does():
    """npcall.matmul_batched (stacks of matrices, or a stack times one matrix; either transposed) gives
    np.matmul's bits, BLAS-sized and odd shapes, float32, float64 and int64."""
    from dfc.runtime.compiled import npcall
    rng = np.random.default_rng(15)
    for dt in ("float32", "float64", "int64"):
        lp = np.array(list(npcall.loop_address(np.matmul, (dt, dt, dt))), np.int64)
        for sa, sb in [((4, 5, 6), (4, 6, 3)), ((4, 5, 6), (1, 6, 7)), ((2, 33, 64), (2, 64, 17)), ((3, 1, 8), (1, 8, 1))]:
            for ta in (False, True):
                for tb in (False, True):
                    a = (rng.standard_normal(sa[:1] + (sa[1:][::-1] if ta else sa[1:])) * 10).astype(dt)
                    b = (rng.standard_normal(sb[:1] + (sb[1:][::-1] if tb else sb[1:])) * 10).astype(dt)
                    x, y = (a.swapaxes(-1, -2) if ta else a), (b.swapaxes(-1, -2) if tb else b)
                    want = np.matmul(x, y if sb[0] != 1 else y[0])
                    got = npcall.matmul_batched(lp, 0, a, b, ta, tb).reshape(want.shape)
                    _same(got, want, (dt, sa, sb, ta, tb))


def test_broadcast_to_a_higher_rank_compiles():
    """x of rank 1 broadcast to rank 2 inside a loop (MAML's meta-gradient does this): numba could not type
    H.broadcast when x kept its own rank (one branch returned x, the other a rank-2 array), so the whole
    compile failed and the loop stayed fused."""
    def f(x, n):
        def body(i, acc):
            return i + 1, acc + dfc.broadcast_to(x * 2.0, [2, 3])
        return dfc.while_loop(lambda i, acc: i < n, body, (0, dfc.zeros([2, 3], "float64")))[1]
    g = dfc.trace(f, dfc.TensorSpec([3], "float64"), dfc.TensorSpec([], "int64"))
    x = np.array([1.0, 2.0, 3.0])
    got = _runs_compiled(g, (x, np.int64(4)), 1)
    np.testing.assert_array_equal(got, np.broadcast_to(x * 8.0, (2, 3)))


def test_a_lowering_bug_leaves_the_frame_fused_and_named_not_a_raw_error(monkeypatch):
    """An EmitError (a lowering writing something the emitter does not make) reached users as a raw
    exception from Session.call (seen in the research benchmarks); now the frame runs fused and
    compiled_frames() names the node and the internal error."""
    from dfc.runtime import emit as E
    from dfc.runtime.kernels.lowering import LOWERINGS

    def broken(e):
        return [E.fmt("{}", 1)]         # a raw int: the emitter refuses it
    monkeypatch.setitem(LOWERINGS, "Neg", broken)

    def f(x, n):
        return dfc.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, -a * 0.5), (0, x))[1]
    g = dfc.trace(f, dfc.TensorSpec([2], "float64"), dfc.TensorSpec([], "int64"))
    s = _compiled(g)
    np.testing.assert_array_equal(s.call(np.array([1.0, 2.0]), np.int64(3)), [-0.125, -0.25])
    (info,) = s.compiled_frames().values()
    assert info["status"] != "compiled" and "internal error compiling" in info["reason"], info["reason"]
