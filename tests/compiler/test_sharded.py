"""A table sharded over devices: lookups and sparse per-shard updates equal the unsharded table exactly."""
import numpy as np
import pytest

import dfc
import dfc.compiler.sharded
import dfc.compiler.tracing
from dfc.errors import DfcError
from tests.conftest import run_all_modes

rng = np.random.default_rng(3)


def _train(table, w, ids, y, opt):
    def step(ids, y):
        e = dfc.embedding_lookup(table, ids)
        loss = dfc.reduce_mean((dfc.reduce_sum(e * w.read_value(), axis=1) - y) ** 2)
        shards = table.shards if isinstance(table, dfc.compiler.sharded.ShardedVariable) else [table]
        opt.minimize(loss, shards + [w])
        return loss, e
    return dfc.trace(step, dfc.TensorSpec.from_value(ids), dfc.TensorSpec.from_value(y))


@pytest.mark.parametrize("make_opt", [lambda: dfc.train.SGD(0.5), lambda: dfc.train.Adagrad(0.3)],
                         ids=["sgd", "adagrad"])
def test_sharded_table_on_two_devices_trains_exactly_as_one_table(make_opt):
    init = rng.normal(size=(7, 3)).astype(np.float32)
    ids = np.array([6, 0, 3, 3, 4, 6], np.int64)
    y = rng.normal(size=6).astype(np.float32)
    table = dfc.sharded_variable(init, 2, devices=["cpu:1", "cpu:2"], name="emb")
    assert [v.shape for v in table.shards] == [(4, 3), (3, 3)]
    plain = dfc.Variable(init, name="plain")
    w1, w2 = dfc.Variable(np.ones(3, np.float32), name="w1"), dfc.Variable(np.ones(3, np.float32), name="w2")
    g_sharded, g_plain = _train(table, w1, ids, y, make_opt()), _train(plain, w2, ids, y, make_opt())
    scatters = [n for n in g_sharded.nodes.values() if n.op == "ResourceScatterSub"]
    assert len([n for n in scatters if "emb_part" in n.inputs[0]]) == 2
    for _ in range(3):
        l1, e1 = run_all_modes(g_sharded, ids, y)
        dfc.run(g_sharded, ids, y)
        l2, e2 = dfc.run(g_plain, ids, y)
        dfc.run(g_plain, ids, y)
        np.testing.assert_array_equal(l1, l2)
        np.testing.assert_array_equal(e1, e2)
    np.testing.assert_array_equal(table.numpy(), plain.numpy())
    np.testing.assert_array_equal(table.numpy()[[1, 2, 5]], init[[1, 2, 5]])


def test_lookup_of_an_id_out_of_range_is_an_error():
    table = dfc.sharded_variable(np.zeros((5, 2)), 2, name="oor")
    g = dfc.trace(lambda i: dfc.embedding_lookup(table, i), dfc.TensorSpec([None], "int64"))
    np.testing.assert_array_equal(dfc.run(g, np.array([4, 0, 2])), np.zeros((3, 2)))
    for bad in ([5], [-1]):
        with pytest.raises(DfcError, match="partition"):
            dfc.run(g, np.array(bad))


def test_dynamic_partition_and_stitch_gradients():
    def f(x, p):
        parts = dfc.compiler.tracing.current_builder().make("DynamicPartition", (x, p), {"num_partitions": 3})
        return dfc.gradients(dfc.reduce_sum(parts[0] * 2.0) + dfc.reduce_sum(parts[2] * 3.0), x)
    x, p = np.arange(10.0).reshape(5, 2), np.array([2, 0, 1, 0, 2])
    g = run_all_modes(dfc.trace(f, dfc.TensorSpec.from_value(x), dfc.TensorSpec.from_value(p)), x, p)
    np.testing.assert_array_equal(g, [[3, 3], [2, 2], [0, 0], [2, 2], [3, 3]])


def test_fixed_size_partitioner_splits_as_sharded_variable():
    t = dfc.fixed_size_partitioner(3)(np.arange(16.0).reshape(8, 2), name="fsp")
    assert [v.shape for v in t.shards] == [(3, 2), (3, 2), (2, 2)] and t.shape == (8, 2)
    np.testing.assert_array_equal(t.numpy(), np.arange(16.0).reshape(8, 2))
    np.testing.assert_array_equal(dfc.embedding_lookup(t, [7, 0]), [[14, 15], [0, 1]])     # outside a graph
    with pytest.raises(DfcError, match="num_shards"):
        dfc.sharded_variable(np.zeros((2, 2)), 3)
