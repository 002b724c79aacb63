"""Partitioning with Send/Recv and control-loop state machines (§4.4, Figure 6)."""
import json
import time

import numpy as np
import pytest
from click.testing import CliRunner

import dfc
from dfc.cli import main
from dfc.runtime import partition as pt
from dfc.runtime.devices import DeviceSet
from dfc.runtime.executor import Plan, Run, KernelContext, Transport, PartitionedRun
from dfc.runtime.rendezvous import Rendezvous, Coordinator

F32, I64 = dfc.TensorSpec([], "float32"), dfc.TensorSpec([], "int64")
MODES = [("reference", 1), ("reference", 32), ("threads", 1), ("threads", 32)]


def run_modes(g, *args, **kw):
    outs = [dfc.Session(g, mode=m, parallel_iterations=pi, **kw).call(*args) for m, pi in MODES]
    for o in outs[1:]:
        for a, b in zip(dfc.nest.flatten(outs[0]), dfc.nest.flatten(o)):
            np.testing.assert_array_equal(a, b)
    return outs[0]


def verified_partitions(session):
    """device -> partitioned Graph of a Session; every partition must pass verify()."""
    parts = session.partitions()
    for p in parts.values():
        p.verify()
    return parts


def parts_of(g, **kw):
    return verified_partitions(dfc.Session(g, **kw))


def loop_pred_on_a_body_on_b(x, n):
    """Figure 6: the predicate P on device A (cpu:0), the body's only op on device B (cpu:1)."""
    def body(i, s):
        with dfc.device("cpu:1"):
            s = s * x + 1.0
        with dfc.device("cpu:0"):
            return i + 1, s
    with dfc.device("cpu:0"):
        return dfc.while_loop(lambda i, s: i < n, body, (0, dfc.constant(np.float32(0))))[1]


def test_figure6_loop_predicate_on_one_device_body_on_another():
    g = dfc.trace(loop_pred_on_a_body_on_b, F32, I64)
    for n in (0, 1, 7):
        want = 0.0
        for _ in range(n):
            want = want * 0.5 + 1.0
        assert float(run_modes(g, np.float32(0.5), np.int64(n))) == np.float32(want)
    parts = parts_of(g)
    assert sorted(parts) == ["cpu:0", "cpu:1"]
    b = parts["cpu:1"]
    ops = b.count_ops()
    # B's control-loop state machine: Enter -> Merge -> Switch(pred from A) -> NextIteration
    cl_switch = [n for n in b.nodes.values() if n.name.startswith("_cl/") and n.op == "Switch"]
    assert len(cl_switch) == 1
    pred = b.nodes[cl_switch[0].inputs[1].split(":")[0]]
    assert pred.op == "Recv" and pred.attrs["tensor_name"].startswith("while_loop_cond")
    assert ops.get("LoopCond", 0) == 0 and ops["Recv"] >= 2 and ops["Send"] >= 1
    # every Recv inside the loop is started by the state machine's Merge
    frame_of, _ = b.frames()
    for n in b.nodes.values():
        if n.op == "Recv" and frame_of[n.name]:
            assert any(c.startswith("^_cl/") and "merge" in c for c in n.inputs)


def test_untaken_branch_full_of_recvs_finishes():
    def f(x, p):
        with dfc.device("cpu:0"):
            a = x * 2.0
            b = x + 5.0

        def true_fn():
            with dfc.device("cpu:1"):
                return a * b + 1.0, a - b

        def false_fn():
            with dfc.device("cpu:2"):
                return a - 1.0, b * b
        with dfc.device("cpu:0"):
            return dfc.cond(p, true_fn, false_fn)
    g = dfc.trace(f, F32, dfc.TensorSpec([], "bool"))
    parts = parts_of(g)
    assert {"cpu:1", "cpu:2"} <= set(parts) and parts["cpu:2"].count_ops()["Recv"] >= 2
    for p in (True, False):
        t0 = time.perf_counter()
        got = run_modes(g, np.float32(3.0), np.bool_(p))
        assert time.perf_counter() - t0 < 5
        want = (6.0 * 8.0 + 1.0, 6.0 - 8.0) if p else (5.0, 64.0)
        assert [float(v) for v in got] == list(want)


def test_nested_loops_spanning_three_devices():
    def f(a, b):
        def outer(i, t):
            def inner(j, u):
                with dfc.device("cpu:2"):
                    u = u + i * j
                with dfc.device("cpu:1"):
                    return j + 1, u
            with dfc.device("cpu:1"):
                t = dfc.while_loop(lambda j, u: j < b + i, inner, (0, t))[1]
            with dfc.device("cpu:0"):
                return i + 1, dfc.cond(t % 2 == 0, lambda: t // 2, lambda: t + 3)
        with dfc.device("cpu:0"):
            return dfc.while_loop(lambda i, t: i < a, outer, (0, 0))[1]

    def py(a, b):
        t = 0
        for i in range(a):
            for j in range(b + i):
                t += i * j
            t = t // 2 if t % 2 == 0 else t + 3
        return t
    g = dfc.trace(f, I64, I64)
    assert set(parts_of(g)) == {"cpu:0", "cpu:1", "cpu:2"}
    for a, b in [(0, 3), (1, 0), (4, 3), (6, 2)]:
        assert int(run_modes(g, np.int64(a), np.int64(b))) == py(a, b)


def test_loop_inside_untaken_branch_split_across_devices():
    def f(x, n):
        def looped():
            def body(i, s):
                with dfc.device("cpu:1"):
                    return i + 1, s * x
            return dfc.while_loop(lambda i, s: i < n, body, (0, x))[1]
        return dfc.cond(n > 100, looped, lambda: x - 1.0)
    g = dfc.trace(f, F32, I64)
    assert float(run_modes(g, np.float32(2), np.int64(3))) == 1.0
    assert float(run_modes(g, np.float32(1), np.int64(101))) == 1.0


def test_variables_colocate_with_their_handle():
    w = dfc.Variable(np.float32(1.0), name="w")

    def f(n):
        def body(i):
            with dfc.device("cpu:2"):
                w.assign(w.read_value() * 2.0 + 1.0)
            return i + 1
        with dfc.device("cpu:1"):
            dfc.while_loop(lambda i: i < n, body, (0,))
        return w.read_value()
    g = dfc.trace(f, I64)
    s = dfc.Session(g, mode="threads")
    handle_dev = {s.placement[n.name] for n in g.nodes.values() if n.op in ("VarHandle", "ReadVariable", "Assign")}
    assert len(handle_dev) == 1
    x = 1.0
    for _ in range(4):
        x = 2 * x + 1
    assert float(s.call(np.int64(4))) == x
    for p in verified_partitions(s).values():
        for n in p.nodes.values():
            assert n.op != "Recv" or n.attrs["dtype"] != "handle"


def test_one_recv_per_tensor_per_destination_device():
    def f(x):
        with dfc.device("cpu:0"):
            a = x * 3.0
        with dfc.device("cpu:1"):
            b, c, d = a + 1.0, a * a, -a
        return b + c + d
    g = dfc.trace(f, F32)
    parts = parts_of(g)
    recvs = [n for n in parts["cpu:1"].nodes.values() if n.op == "Recv"]
    assert [r.attrs["tensor_name"] for r in recvs].count("mul:0") == 1
    assert float(run_modes(g, np.float32(2.0))) == 7.0 + 36.0 - 6.0


def test_parallel_iterations_overlap_a_pipeline_across_devices():
    # Each device's step depends on its own previous iteration and on the previous device in this one
    # (Figure 10(c)); with many iterations in flight device 1 runs ahead of device 2.
    def f(x, n):
        def body(i, h1, h2):
            with dfc.device("cpu:1"):
                h1 = dfc.tanh(h1 @ x)
            with dfc.device("cpu:2"):
                h2 = dfc.tanh(h2 @ x + h1)
            return i + 1, h1, h2
        z = dfc.zeros([4, 4], "float32")
        return dfc.while_loop(lambda i, a, b: i < n, body, (0, z + 1.0, z))[1:]
    g = dfc.trace(f, dfc.TensorSpec([4, 4], "float32"), I64)
    x = np.random.default_rng(0).normal(size=(4, 4)).astype(np.float32) * 0.5
    one = dfc.Session(dfc.trace(f, dfc.TensorSpec([4, 4], "float32"), I64), mode="reference",
                      device_map={"cpu:1": "cpu:0", "cpu:2": "cpu:0"}).call(x, np.int64(20))
    got = run_modes(g, x, np.int64(20))
    for a, b in zip(one, got):
        np.testing.assert_array_equal(a, b)


def test_random_ops_give_the_same_values_when_partitioned():
    def f(n):
        def body(i, s):
            with dfc.device("cpu:1"):
                r = dfc.random_uniform([3], seed=7)
            return i + 1, s + r
        return dfc.while_loop(lambda i, s: i < n, body, (0, dfc.zeros([3], "float32")))[1]
    g = dfc.trace(f, I64)
    one = dfc.Session(g, device_map={"cpu:1": "cpu:0"}).call(np.int64(4))
    np.testing.assert_array_equal(dfc.Session(g).call(np.int64(4)), one)


# ------------------------------------------------------------------------------- errors and deadlock

def test_wrong_device_name_is_an_error_naming_the_node():
    def f(x):
        with dfc.device("tpu:0"):
            return x + 1.0
    g = dfc.trace(f, F32)
    with pytest.raises(dfc.DfcError, match="bad device name 'tpu:0'") as e:
        dfc.Session(g)
    assert e.value.node in ("add", "const")


def test_missing_devices_are_errors_naming_the_node():
    def f(x):
        with dfc.device("cpu:1"):
            return x * 2.0
    g = dfc.trace(f, F32)
    with pytest.raises(dfc.DfcError, match="cpu:99, which does not exist") as e:
        dfc.Session(g, device_map={"cpu:1": "cpu:99"})
    assert e.value.node in ("mul", "const")
    from dfc.runtime.devices import gpu_available
    if not gpu_available():
        with pytest.raises(dfc.DfcError, match="gpu:0, which does not exist") as e:
            dfc.Session(g, device_map={"cpu:1": "gpu:0"})
        assert e.value.node in ("mul", "const")


def test_op_without_a_kernel_on_its_device_is_an_error_naming_the_node():
    def f(x):
        with dfc.device("accel:0"):
            dfc.print("x is", x)
            return x + 1.0
    g = dfc.trace(f, F32)
    with pytest.raises(dfc.DfcError, match="no kernel for op 'Print' on device accel:0") as e:
        dfc.Session(g)
    assert e.value.node.startswith("print")


def test_unannotated_host_only_op_is_placed_on_a_cpu():
    out = []

    def f(x):
        with dfc.device("accel:0"):
            y = x * 2.0
        dfc.print("y", y)
        return y
    g = dfc.trace(f, F32)
    s = dfc.Session(g, printer=out.append, default_device="accel:0")
    assert float(s.call(np.float32(2))) == 4.0 and out == ["y 4.0\n"]
    assert s.placement[next(n for n in g.nodes if n.startswith("print"))].startswith("cpu")


def _partitioned_run(g, feeds, drop_send=None):
    where = pt.place(g, DeviceSet())
    parts = pt.partition(g, where)
    for p in parts.graphs.values():
        p.verify()
    if drop_send:
        for p in parts.graphs.values():
            for name in [n for n, node in p.nodes.items() if node.op == "Send" and drop_send in n]:
                del p.nodes[name]
    fetch = g.signature["outputs"]["ref"]
    dev_of_fetch = parts.where[fetch.split(":")[0]]
    rv, coord = Rendezvous(), Coordinator(list(parts.graphs))
    runs = {}
    for d, p in parts.graphs.items():
        fetches = [fetch] if d == dev_of_fetch else []
        mine = {k: v for k, v in feeds.items() if parts.where[k] == d}
        plan = Plan(p, fetches, set(mine), list(p.nodes), frame_ids=parts.frame_ids)
        runs[d] = Run(plan, mine, KernelContext(None, 1, print), None, Transport(d, rv, coord))
    return PartitionedRun(runs, [(dev_of_fetch, 0)]).execute()


def test_a_lost_send_is_a_deadlock_naming_the_waiting_recv_not_a_hang():
    g = dfc.trace(loop_pred_on_a_body_on_b, F32, I64)
    feeds = {"x": np.float32(0.5), "n": np.int64(3)}
    assert float(_partitioned_run(g, feeds)[0]) == 1.75
    t0 = time.perf_counter()
    with pytest.raises(dfc.DfcDeadlockError, match="still waiting") as e:
        _partitioned_run(g, feeds, drop_send="_send/add")
    assert time.perf_counter() - t0 < 5
    assert "_recv/add" in str(e.value) and "Recv of add" in str(e.value) and e.value.node.startswith("_recv/")


def test_an_error_on_one_device_stops_the_others():
    def f(x, n):
        def body(i, s):
            with dfc.device("cpu:1"):
                dfc.Assert(i < 3, [i], message="too many steps")
            return i + 1, s + x
        return dfc.while_loop(lambda i, s: i < n, body, (0, x))[1]
    g = dfc.trace(f, F32, I64)
    assert float(dfc.Session(g).call(np.float32(1), np.int64(3))) == 4.0
    for mode in ("reference", "threads"):
        with pytest.raises(dfc.DfcAssertionError, match="too many steps"):
            dfc.Session(g, mode=mode).call(np.float32(1), np.int64(10))


# ------------------------------------------------------------------------------- command line

def test_cli_show_partitions_and_run_with_a_device_map(tmp_path):
    g = dfc.trace(loop_pred_on_a_body_on_b, F32, I64)
    path = tmp_path / "fig6.json"
    dfc.save(g, str(path))
    r = CliRunner().invoke(main, ["show", str(path), "--partitions"])
    assert r.exit_code == 0, r.output
    assert "# ---- partition cpu:0" in r.output and "# ---- partition cpu:1" in r.output
    assert "Recv(" in r.output and "Send(" in r.output and "_cl/" in r.output
    r = CliRunner().invoke(main, ["run", str(path), "-i", "x=0.5", "-i", "n=3", "--json",
                                  "--device-map", "cpu:1=cpu:3"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["outputs"] == [1.75]
    r = CliRunner().invoke(main, ["run", str(path), "-i", "x=0.5", "-i", "n=3", "--device-map", "cpu:1=cpu:42"])
    assert r.exit_code == 1 and "cpu:42" in r.output
    r = CliRunner().invoke(main, ["run", str(path), "--device-map", "nonsense"])
    assert r.exit_code == 2


def test_gradients_of_a_loop_split_across_devices():
    def f(x, w, n):
        def body(i, h):
            with dfc.device("cpu:1"):
                a = dfc.tanh(h @ w)
            with dfc.device("cpu:2"):
                h = a * x + h * 0.5
            return i + 1, h
        with dfc.device("cpu:0"):
            h = dfc.while_loop(lambda i, h: i < n, body, (0, x))[1]
            loss = dfc.reduce_sum(h * h)
            return (loss,) + tuple(dfc.gradients(loss, [x, w]))
    M = dfc.TensorSpec([3, 3], "float32")
    g = dfc.trace(f, M, M, I64)
    rng = np.random.default_rng(3)
    x, w = rng.normal(size=(3, 3)).astype(np.float32), rng.normal(size=(3, 3)).astype(np.float32) * 0.5
    one = dfc.Session(g, device_map={"cpu:1": "cpu:0", "cpu:2": "cpu:0"}).call(x, w, np.int64(5))
    assert set(parts_of(g)) == {"cpu:0", "cpu:1", "cpu:2"}
    got = run_modes(g, x, w, np.int64(5))
    for a, b in zip(one, got):
        np.testing.assert_array_equal(a, b)


def test_a_tensor_array_and_its_users_share_one_device():
    """The handle never crosses devices: the writes and reads go where the TensorArray was created
    (its explicit device wins over theirs), so no partition sends a resource handle."""
    def f(x):
        with dfc.device("cpu:0"):
            ta = dfc.TensorArray("float32", size=0)
        with dfc.device("cpu:1"):
            return ta.write(0, x).read(0) * 2.0
    g = dfc.trace(f, F32)
    s = dfc.Session(g)
    assert float(s.call(np.float32(3))) == 6.0
    assert {s.placement[n] for n in g.nodes if n.startswith("tensorarray")} == {"cpu:0"}
    for p in verified_partitions(s).values():
        assert not [n for n in p.nodes.values() if n.op in ("Send", "Recv") and n.attrs.get("dtype") == "resource"]
