"""Partitions in separate processes: a local Ray cluster (worker:0, worker:1, ps:0) with the test process
as the chief. Every result is compared with the same graph run in one process."""
import os
import pickle
import signal
import threading
import time

import numpy as np
import pytest

import dfc
from dfc.runtime.values import DEAD
from tests.clustertools import cluster

pytestmark = pytest.mark.xdist_group("ray")
F32, I32 = dfc.TensorSpec([], "float32"), dfc.TensorSpec([], "int32")


@pytest.fixture(scope="module")
def c():
    return cluster()


def one_process(graph, *args):
    """The graph with every device mapped to this process's cpu:0 (the definition to compare with)."""
    g = dfc.Graph(graph.signature.get("name"))
    for n in graph.nodes.values():
        g.add_node(dfc.Node(n.name, n.op, list(n.inputs), dict(n.attrs), None, n.loc))
    g.signature = graph.signature
    return dfc.Session(g).call(*args)


def same(a, b):
    for x, y in zip(dfc.nest.flatten(a), dfc.nest.flatten(b)):
        np.testing.assert_array_equal(x, y)


# ------------------------------------------------------------------------------ no Ray needed

def test_a_dead_value_pickled_and_unpickled_is_still_dead():
    assert pickle.loads(pickle.dumps(DEAD)) is DEAD
    assert pickle.loads(pickle.dumps([1, DEAD, (DEAD,)]))[2][0] is DEAD


def test_device_names_carry_tasks():
    from dfc.runtime.devices import canonical_name, split_task
    assert canonical_name("worker:1/cpu:0") == "worker:1/cpu:0"
    assert canonical_name("/job:worker/task:2/device:GPU:0") == "worker:2/gpu:0"
    assert canonical_name("ps:0/CPU") == "ps:0/cpu:0"
    assert split_task("cpu:3") == (None, "cpu:3")
    assert split_task("ps:0/accel:1") == ("ps:0", "accel:1")
    for bad in ("worker/cpu:0", "worker:x/cpu:0", "worker:1/tpu:0"):
        with pytest.raises(dfc.DfcError, match="bad device name"):
            canonical_name(bad)


def test_a_graph_on_tasks_without_a_cluster_says_how_to_run_it():
    def f(x):
        with dfc.device("worker:1/cpu:0"):
            return x + 1.0
    g = dfc.trace(f, F32)
    with pytest.raises(dfc.DfcError, match="worker:1.*cluster") as e:
        dfc.Session(g)
    assert e.value.node is not None
    same(dfc.Session(g, device_map={"worker:1/cpu:0": "cpu:1"}).call(np.float32(1)), np.float32(2))


def test_a_task_the_cluster_does_not_have_is_an_error(c):
    def f(x):
        with dfc.device("worker:7/cpu:0"):
            return x + 1.0
    with pytest.raises(dfc.DfcError, match="worker:7.*does not have"):
        dfc.Session(dfc.trace(f, F32), cluster=c)


# ------------------------------------------------------------------------------ control flow across tasks

def figure6(n):
    """The loop's predicate on worker:0, its body on worker:1 (Figure 6: each task runs its own
    control-loop state machine, driven by the predicate it receives)."""
    def body(i, a):
        with dfc.device("worker:1/cpu:0"):
            a = a * 1.5 + 1.0
        return i + 1, a
    with dfc.device("worker:0/cpu:0"):
        return dfc.while_loop(lambda i, a: i < n, body, (0, 0.0))


def test_figure_6_across_processes(c):
    g = dfc.trace(figure6, I32)
    i, a = dfc.Session(g, cluster=c).call(np.int32(7))
    want = np.float32(0)
    for _ in range(7):
        want = want * np.float32(1.5) + np.float32(1)
    assert int(i) == 7 and a == want
    same((i, a), one_process(g, np.int32(7)))


def test_a_cond_whose_untaken_branch_holds_a_cross_task_recv_finishes(c):
    def f(x, p):
        with dfc.device("worker:0/cpu:0"):
            y = x * 3.0
        with dfc.device("ps:0/cpu:0"):
            return dfc.cond(p, lambda: y + 1.0, lambda: x - 1.0)
    g = dfc.trace(f, F32, dfc.TensorSpec([], "bool"))
    s = dfc.Session(g, cluster=c)
    assert s.call(np.float32(2), np.bool_(True)) == 7.0
    assert s.call(np.float32(2), np.bool_(False)) == 1.0


def test_nested_loops_across_tasks(c):
    def f(n):
        def outer(i, acc):
            def inner(j, a):
                with dfc.device("worker:1/cpu:0"):
                    a = a + dfc.cast(i * j, "float32")
                return j + 1, a
            with dfc.device("ps:0/cpu:0"):
                _, acc = dfc.while_loop(lambda j, a: j < i, inner, (0, acc))
            return i + 1, acc
        with dfc.device("worker:0/cpu:0"):
            return dfc.while_loop(lambda i, acc: i < n, outer, (0, 0.0))[1]
    g = dfc.trace(f, I32)
    got = dfc.Session(g, cluster=c).call(np.int32(6))
    assert got == sum(i * j for i in range(6) for j in range(i))
    same(got, one_process(g, np.int32(6)))


def lstm_loss(x, w, steps_on):
    """An LSTM over x's rows whose cell runs on another task; the loss and its gradient wrt w."""
    H = w.shape[1] // 4

    def body(t, h, cst):
        with dfc.device(steps_on):
            z = dfc.matmul(dfc.concat([dfc.reshape(x[t], [1, -1]), h], axis=1), w)
            i, f, o, u = dfc.split(z, 4, axis=1)
            cst = dfc.sigmoid(f) * cst + dfc.sigmoid(i) * dfc.tanh(u)
            h = dfc.sigmoid(o) * dfc.tanh(cst)
        return t + 1, h, cst
    zeros = dfc.zeros([1, H])
    _, h, _ = dfc.while_loop(lambda t, h, cst: t < dfc.shape(x)[0], body, (0, zeros, zeros))
    loss = dfc.reduce_sum(h * h)
    return loss, dfc.gradients(loss, [w])[0]


def test_gradient_of_an_lstm_whose_cell_runs_on_another_task_equals_one_process(c):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 3)).astype(np.float32)
    w = (rng.standard_normal((3 + 4, 16)) * 0.3).astype(np.float32)
    g = dfc.trace(lambda x, w: lstm_loss(x, w, "worker:1/cpu:0"), dfc.TensorSpec([None, 3], "float32"),
                  dfc.TensorSpec([7, 16], "float32"))
    got = dfc.Session(g, cluster=c).call(x, w)
    same(got, one_process(g, x, w))
    assert np.abs(got[1]).sum() > 0


# ------------------------------------------------------------------------------ state on tasks

def test_variables_on_a_ps_task_persist_across_steps_and_functions(c):
    with dfc.device("ps:0/cpu:0"):
        v = dfc.Variable(np.zeros(3, np.float32), name="ps_counter")

    @dfc.function
    def add(x):
        v.assign_add(x)
        return v.read_value()

    @dfc.function
    def scaled(k):
        return v.read_value() * k

    with c:
        add(np.ones(3, np.float32))
        out = add(np.full(3, 2, np.float32))
        np.testing.assert_array_equal(out, [3, 3, 3])
        np.testing.assert_array_equal(scaled(np.float32(10)), [30, 30, 30])
    np.testing.assert_array_equal(v.numpy(), [3, 3, 3])            # read from ps:0's process
    np.testing.assert_array_equal(c.variables("ps:0")[v.shared_name], [3, 3, 3])
    v.assign(np.full(3, 7, np.float32))                               # set from the chief's Python
    with c:
        np.testing.assert_array_equal(scaled(np.float32(1)), [7, 7, 7])


def test_two_steps_in_flight_never_collide(c):
    g = dfc.trace(figure6, I32)
    s = dfc.Session(g, cluster=c)
    out, errors = {}, []

    def work(k):
        try:
            for r in range(3):
                out[(k, r)] = s.call(np.int32(5 + k))
        except Exception as e:   # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    for (k, _r), got in out.items():
        same(got, one_process(g, np.int32(5 + k)))


def test_wire_compression_halves_the_bytes_and_stays_close(c):
    def f(x):
        with dfc.device("worker:0/cpu:0"):
            y = x * 1.0001
        with dfc.device("worker:1/cpu:0"):
            return y + 1.0
    g = dfc.trace(f, dfc.TensorSpec([4096], "float32"))
    x = np.linspace(-3, 3, 4096).astype(np.float32)
    plain, packed = dfc.Session(g, cluster=c), dfc.Session(g, cluster=c, wire_compression="bfloat16")
    a, b = plain.call(x), packed.call(x)
    np.testing.assert_array_equal(a, x * np.float32(1.0001) + 1)
    np.testing.assert_allclose(b, a, rtol=2 ** -7, atol=2 ** -7)
    assert not np.array_equal(a, b)          # it really was truncated
    sa, sb = plain.wire_stats()["bytes_sent"], packed.wire_stats()["bytes_sent"]
    assert sa == 4096 * 4 and sb == 4096 * 2      # y crossed from worker:0 to worker:1
    with pytest.raises(dfc.DfcError, match="wire_compression"):
        dfc.Session(g, cluster=c, wire_compression="float8")


# ------------------------------------------------------------------------------ errors, deadlock, failure

def test_a_kernel_error_on_a_task_names_the_task_and_node_and_the_tasks_stay_usable(c):
    def f(x, k):
        with dfc.device("worker:1/cpu:0"):
            y = dfc.gather(x, k)
        with dfc.device("worker:0/cpu:0"):
            return y * 2.0
    g = dfc.trace(f, dfc.TensorSpec([3], "float32"), dfc.TensorSpec([], "int32"))
    s = dfc.Session(g, cluster=c)
    x = np.arange(3, dtype=np.float32)
    with pytest.raises(dfc.DfcError, match="on task worker:1") as e:
        s.call(x, np.int32(9))
    assert e.value.node and "gather" in e.value.node.lower()
    assert s.call(x, np.int32(2)) == 4.0


def test_a_recv_nobody_sends_is_a_deadlock_naming_it_not_a_hang(c):
    g = dfc.Graph("stuck")
    g.add_node(dfc.Node("r", "Recv", [], {"tensor_name": "never:0", "send_device": "worker:0/cpu:0",
                                          "recv_device": "worker:1/cpu:0", "dtype": "float32", "shape": []},
                        "worker:1/cpu:0"))
    g.add_node(dfc.Node("y", "Identity", ["r:0"], {}, "worker:1/cpu:0"))
    g.signature = {"name": "stuck", "inputs": [], "outputs": {"ref": "y:0"}, "targets": []}
    t0 = time.monotonic()
    with pytest.raises(dfc.DfcDeadlockError, match="Recv of never:0") as e:
        dfc.Session(g, cluster=c).run("y:0")
    assert time.monotonic() - t0 < 10
    assert e.value.node == "r"


def test_a_killed_task_fails_the_step_naming_it_then_restart_and_restore(c, tmp_path):
    with dfc.device("worker:1/cpu:0"):
        w = dfc.Variable(np.float32(0), name="w_kill")
    ckpt = dfc.Checkpoint({"w": w})

    @dfc.function
    def bump(x):
        w.assign_add(x)
        with dfc.device("cpu:0"):
            ckpt.save("w.npz")
        return w.read_value()

    @dfc.function
    def restore():
        with dfc.device("cpu:0"):
            return ckpt.restore("w.npz")[0]

    def spin(n):      # a long loop whose body runs on worker:1
        def body(i, a):
            with dfc.device("worker:1/cpu:0"):
                a = a + 1.0
            return i + 1, a
        with dfc.device("worker:0/cpu:0"):
            return dfc.while_loop(lambda i, a: i < n, body, (0, 0.0))[1]

    os.chdir(tmp_path)
    with c:
        assert bump(np.float32(5)) == 5.0
    s = dfc.Session(dfc.trace(spin, I32), cluster=c)
    pid = c.pid("worker:1")
    threading.Timer(1.0, os.kill, (pid, signal.SIGKILL)).start()
    t0 = time.monotonic()
    with pytest.raises(dfc.DfcError, match="task worker:1 died") as e:
        s.call(np.int32(10 ** 8))
    assert time.monotonic() - t0 < 11
    assert e.value.node is not None
    c.restart("worker:1")
    assert c.pid("worker:1") != pid
    with c:
        assert w.numpy() == 0.0                      # a fresh process: the initial value
        assert restore() == 5.0                      # ... until the checkpoint is restored
        assert bump(np.float32(1)) == 6.0
    assert s.call(np.int32(20)) == 20.0             # the other tasks and the session stay usable


def test_a_traced_cluster_step_has_a_lane_per_task_device_inside_the_run(c, tmp_path):
    import json
    g = dfc.trace(figure6, I32)
    path = tmp_path / "run.json"
    dfc.Session(g, cluster=c, trace=str(path)).call(np.int32(4))
    events = json.loads(path.read_text())["traceEvents"]
    pnames = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    spans = [e for e in events if e.get("ph") == "X"]
    by_proc = {}
    for e in spans:
        by_proc.setdefault(pnames[e["pid"]], []).append(e)
    assert {"worker:0/cpu:0", "worker:1/cpu:0"} <= set(by_proc)
    ops = {e["args"].get("op") for e in by_proc["worker:1/cpu:0"] if e.get("cat") == "kernel"}
    assert "Add" in ops or "Mul" in ops                      # the loop body ran on worker:1
    assert any(e.get("cat") == "send" for e in by_proc["worker:0/cpu:0"])   # the predicate went out
    iters = {e["args"].get("iteration") for e in by_proc["worker:1/cpu:0"] if "iteration" in e.get("args", {})}
    assert {0, 1, 2, 3} <= iters
    run = next(e for e in spans if e.get("cat") == "run")
    slack = 20e3      # µs: the tasks' clocks are aligned through the wall clock
    for e in spans:
        assert run["ts"] - slack <= e["ts"] and e["ts"] + e["dur"] <= run["ts"] + run["dur"] + slack


def test_a_gpu_partition_sends_to_other_processes_through_host_memory(c):
    """The chief's strict:0 (the cupy double: device arrays and events that do not pickle) sends to a task
    and receives from it, inside a loop; the result equals one process."""
    def f(x):
        def body(i, v):
            with dfc.device("strict:0"):
                y = dfc.tanh(v * 1.5) + 0.25
            with dfc.device("worker:0/cpu:0"):
                z = y * 2.0 - 0.1
            return i + 1, z
        return dfc.while_loop(lambda i, v: i < 4, body, (0, x))[1]
    g = dfc.trace(f, dfc.TensorSpec([3], "float32"))
    x = np.array([0.1, -0.4, 0.7], np.float32)
    got = dfc.Session(g, cluster=c).call(x)
    same(got, one_process(g, x))
