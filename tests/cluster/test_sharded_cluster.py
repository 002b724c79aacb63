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


def _bow(table, w):
    """Bag-of-words regression: the mean of each example's 3 word embeddings, dotted with w."""
    def loss(ids, y):
        e = dfc.reshape(dfc.embedding_lookup(table, dfc.reshape(ids, [-1])), [-1, 3, 4])
        return dfc.reduce_mean((dfc.reduce_sum(dfc.reduce_mean(e, axis=1) * w.read_value(), axis=1) - y) ** 2)
    return loss


@pytest.mark.parametrize("sparse", [True, False], ids=["sparse", "dense"])
def test_data_parallel_async_with_a_sharded_table_equals_local_training(sparse):
    c = cluster()
    rng = np.random.default_rng(5)
    init = rng.normal(size=(40, 4)).astype(np.float32)
    ids = rng.integers(0, 40, size=(8, 3)).astype(np.int64)
    y = rng.normal(size=8).astype(np.float32)
    opt = dfc.train.SGD(0.5)
    opt.sparse_updates = sparse
    dp = dfc.train.DataParallel(c, opt, mode="async", workers=["worker:0"], name=f"bow_{sparse}")
    table = dp.sharded_variable(init, 2, name=f"bow_emb_{sparse}")
    w = dp.variable(np.ones(4, np.float32), name=f"bow_w_{sparse}")
    dp.compile(_bow(table, w), [dfc.TensorSpec([None, 3], "int64"), dfc.TensorSpec([None], "float32")])
    out = dp.run([(ids, y)], steps=3)
    plain, w2 = dfc.Variable(init, name="bow_plain"), dfc.Variable(np.ones(4, np.float32), name="bow_w2")
    loss2 = _bow(plain, w2)

    @dfc.function
    def local(ids, y):
        loss = loss2(ids, y)
        dfc.train.SGD(0.5).minimize(loss, [plain, w2])
        return loss
    want = [float(local(ids, y)) for _ in range(3)]
    np.testing.assert_array_equal(out["losses"][0], want)
    np.testing.assert_array_equal(table.numpy(), plain.numpy())
    graph = dp.sessions[0].graph
    scatters = [n for n in graph.nodes.values() if n.op == "ApplyOnce" and "ResourceScatterSub" in n.attrs["ops"]]
    assert bool(scatters) == sparse


def test_embedding_sample_loss_falls_with_sparse_updates():
    from tests.samples.test_sample_programs import load
    r = load("embedding_model").train(cluster(), steps=30, name="emb_sample")
    assert r["after"] < 0.6 * r["before"]
    assert all(np.mean(w[-5:]) < np.mean(w[:5]) for w in r["losses"])
