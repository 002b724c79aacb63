"""Sparse gradients of gathers from a Variable and the optimizers' row updates: the same Variables as the
dense update, on every execution path; only the touched rows change."""
import numpy as np
import pytest

import dfc
from dfc.errors import DfcError, DfcRuntimeError
from tests.conftest import run_all_modes

rng = np.random.default_rng(7)


def _spec(a):
    return dfc.TensorSpec.from_value(a)


def _model(table, w):
    def loss(ids, y):
        e = dfc.gather(table.read_value(), ids)                # [batch, 4]
        return dfc.reduce_mean((dfc.reduce_sum(e * w.read_value(), axis=1) - y) ** 2)
    return loss


def _step(opt, table, w, dense):
    loss_fn = _model(table, w)

    def step(ids, y):
        loss = loss_fn(ids, y)
        pairs = opt.compute_gradients(loss, [table, w])
        if dense:
            pairs = [(g.dense() if isinstance(g, dfc.IndexedSlices) else g, v) for g, v in pairs]
        opt.apply_gradients(pairs)
        return loss
    return step


@pytest.mark.parametrize("make_opt", [lambda: dfc.train.SGD(0.3), lambda: dfc.train.Adagrad(0.2)],
                         ids=["sgd", "adagrad"])
def test_sparse_update_equals_the_dense_update_on_every_path(make_opt):
    init = rng.normal(size=(10, 4)).astype(np.float32)
    ids = np.array([3, 7, 3, -1, 0, 3], np.int64)           # duplicates and a negative index
    y = rng.normal(size=6).astype(np.float32)
    ends = {}
    for dense in (False, True):
        table = dfc.Variable(init, name="table")
        w = dfc.Variable(np.ones(4, np.float32), name="w")
        g = dfc.trace(_step(make_opt(), table, w, dense), _spec(ids), _spec(y))
        ops = {n.op for n in g.nodes.values()}
        assert ("ResourceScatterSub" in ops) != dense
        for _ in range(2):      # each call leaves the state of its last path's step: two steps
            run_all_modes(g, ids, y)
        ends[dense] = table.numpy()
    np.testing.assert_array_equal(ends[False], ends[True])
    untouched = [r for r in range(10) if r not in (3, 7, 9, 0)]
    np.testing.assert_array_equal(ends[False][untouched], init[untouched])
    assert not np.array_equal(ends[False][3], init[3])


def test_sparse_gradients_gives_rows_and_dense_for_other_reads():
    table = dfc.Variable(np.arange(12, dtype=np.float64).reshape(6, 2), name="t")
    other = dfc.Variable(np.ones((6, 2)), name="o")

    def f(ids):
        o = other.read_value()      # read whole, not only gathered: a dense gradient
        loss = dfc.reduce_sum(dfc.gather(table.read_value(), ids) * 2.0) + dfc.reduce_sum(o * dfc.gather(o, ids)[0])
        g_t, g_o = dfc.sparse_gradients(loss, [table, other])
        assert isinstance(g_t, dfc.IndexedSlices) and not isinstance(g_o, dfc.IndexedSlices)
        u = g_t.deduplicated()
        return g_t.indices, g_t.values, u.indices, u.values, g_t.dense(), dfc.gradients(loss, table)
    ids = np.array([4, 1, 4], np.int64)
    i, v, ui, uv, dense, ref = run_all_modes(dfc.trace(f, _spec(ids)), ids)
    np.testing.assert_array_equal(i, ids)
    np.testing.assert_array_equal(v, np.full((3, 2), 2.0))
    np.testing.assert_array_equal(ui, [1, 4])
    np.testing.assert_array_equal(uv, [[2.0, 2.0], [4.0, 4.0]])
    np.testing.assert_array_equal(dense, ref)


def test_scatter_sub_updates_only_the_rows_and_returns_them():
    v = dfc.Variable(np.zeros((4, 2), np.float32), name="s")

    def f(i, u):
        return v.scatter_sub(i, u)
    i, u = np.array([2, 0, 2], np.int32), np.ones((3, 2), np.float32)
    rows = run_all_modes(dfc.trace(f, _spec(i), _spec(u)), i, u)
    np.testing.assert_array_equal(rows, [[-2, -2], [-1, -1], [-2, -2]])
    np.testing.assert_array_equal(v.numpy(), [[-1, -1], [0, 0], [-2, -2], [0, 0]])
    assert v.scatter_add(np.array([1]), np.ones((1, 2))).tolist() == [[1.0, 1.0]]     # outside a graph


def test_bad_scatter_is_a_clear_error():
    v = dfc.Variable(np.zeros((4, 2), np.float32), name="bad")
    with pytest.raises(DfcError, match="rows of shape"):
        dfc.trace(lambda i: v.scatter_add(i, np.ones((2, 3), np.float32)), _spec(np.array([0, 1])))
    g = dfc.trace(lambda i: v.scatter_add(i, np.ones((2, 2), np.float32)), _spec(np.array([0, 1])))
    with pytest.raises((DfcRuntimeError, IndexError, DfcError)):
        dfc.run(g, np.array([0, 9]))
    np.testing.assert_array_equal(v.numpy(), np.zeros((4, 2)))
