"""A table sharded over two tasks of the test cluster trains exactly as one table in one process, each
shard updated by a sparse row update on its own task."""
import numpy as np
import pytest

import dfc
from tests.clustertools import cluster

pytestmark = pytest.mark.xdist_group("ray")


def _step(table, shards, w, opt):
    def step(ids, y):
        e = dfc.embedding_lookup(table, ids)
        loss = dfc.reduce_mean((dfc.reduce_sum(e * w.read_value(), axis=1) - y) ** 2)
        opt.minimize(loss, shards + [w])
        return loss
    return dfc.trace(step, dfc.TensorSpec([None], "int64"), dfc.TensorSpec([None], "float32"))


def test_sharded_table_over_two_tasks_equals_one_table_in_one_process():
    c = cluster()
    rng = np.random.default_rng(11)
    init = rng.normal(size=(9, 4)).astype(np.float32)
    ids, y = np.array([8, 1, 5, 1, 0], np.int64), rng.normal(size=5).astype(np.float32)
    table = dfc.sharded_variable(init, 2, devices=["ps:0/cpu:0", "worker:1/cpu:0"], name="cl_emb")
    w = dfc.Variable(np.ones(4, np.float32), name="cl_w", device="ps:0/cpu:0")
    plain, w2 = dfc.Variable(init, name="cl_plain"), dfc.Variable(np.ones(4, np.float32), name="cl_w2")
    on_cluster = dfc.Session(_step(table, table.shards, w, dfc.train.Adagrad(0.3)), cluster=c)
    local = dfc.Session(_step(plain, [plain], w2, dfc.train.Adagrad(0.3)))
    for _ in range(3):
        np.testing.assert_array_equal(on_cluster.call(ids, y), local.call(ids, y))
    np.testing.assert_array_equal(table.numpy(), plain.numpy())
    np.testing.assert_array_equal(w.numpy(), w2.numpy())
    np.testing.assert_array_equal(table.shards[1].numpy()[[1, 2]], init[[6, 7]])     # rows no id touched
